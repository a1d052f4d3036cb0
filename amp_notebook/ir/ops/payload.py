"""Payload transforms: the ops that compute on tensors and leave the state alone.

Linear and Embedding are *parameterized* (and *heavy*: placement spreads them over workers); the rest
are light elementwise functions. Every backward here is checked against finite differences and torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import (
    Emitted,
    JoinMixin,
    NodeContext,
    Op,
    OpError,
    Width,
    check_width,
    stack,
    unstack,
)  # fmt: skip
from amp_notebook.ir.ops.facts import BOOL, MATCH_ON, MAX_SIZE, SIZE, Choice, Field, Int, NNForm, TorchForm


class Input(Op):
    """Where a key's payload enters the graph; the controller injects it, gradients stop here.

    ``fill="zeros"`` makes the controller inject zeros of shape (batch size, width) instead of data,
    for initial recurrent states.
    """

    kind = "input"
    group = "io"
    bundling = "per_message"
    element_flops = (0.0, 0.0)
    fields = (
        Field("width", Int(1, MAX_SIZE, nullable=True), "the payload's last dimension (null: not known until data "
              "arrives)", default=None),
        Field("dtype", Choice("float", "int"), "'float' for features, 'int' for ids and class labels", default="float"),
        Field("fill", Choice(None, "zeros"), "null: fed from the key's payload; 'zeros': an initial state of zeros "
              "(needs a width)", default=None),
    )  # fmt: skip

    def setup(self) -> None:
        if self.fill == "zeros" and self.width is None:
            raise OpError("Input fill='zeros' needs a width: the zeros have shape (batch size, width)")

    def input_ports(self) -> tuple[str, ...]:
        return ()

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {"out": self.width}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return [("out", x, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return []


class Identity(Op):
    """Passes the payload through; a no-op node for overhead measurements and wiring."""

    kind = "identity"
    group = "payload"
    bundling = "per_message"  # nothing to compute: a call per message costs what splitting a stack would
    element_flops = (0.0, 0.0)

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return [("out", x, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return [("in", g, state)]


class Linear(Op):
    """``y = x @ W + b`` with W of shape (in_features, out_features)."""

    kind = "linear"
    group = "payload"
    bundling = "rows"
    parameterized = True
    heavy = True
    fields = (
        Field("in_features", SIZE, "width of the input", example=64, from_width="in"),
        Field("out_features", SIZE, "width of the output", example=64),
        Field("bias", BOOL, "add a bias vector (true or false)", default=True),
    )

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {"W": (self.in_features, self.out_features)}
        if self.bias:
            shapes["b"] = (self.out_features,)
        return shapes

    def init_params(self, rng: np.random.Generator, dtype: np.dtype) -> dict[str, np.ndarray]:
        bound = 1.0 / math.sqrt(self.in_features)  # the same uniform range as torch.nn.Linear
        return {name: rng.uniform(-bound, bound, shape).astype(dtype) for name, shape in self.param_shapes().items()}

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        check_width("Linear", "in", self.in_features, widths.get("in"))
        return {"out": self.out_features}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        params = ctx.params
        y = x @ params["W"]
        if self.bias:
            y += params["b"]
        if ctx.train:
            ctx.cache[state] = x
        return [("out", y, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        x = ctx.cache.pop(state)
        self._accumulate(ctx, x, g)
        if "in" not in ctx.grad_inputs:
            return []
        return [("in", g @ ctx.params["W"].T, state)]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        x, offsets = stack(xs)
        params = ctx.params
        y = x @ params["W"]
        if self.bias:
            y += params["b"]
        if ctx.train:
            cache = ctx.cache
            for xi, s in zip(xs, states, strict=True):
                cache[s] = xi
        return [("out", yi, s) for yi, s in zip(unstack(y, offsets), states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        cache = ctx.cache
        x, _ = stack([cache.pop(s) for s in states])
        g, offsets = stack(gs)
        self._accumulate(ctx, x, g)
        if "in" not in ctx.grad_inputs:
            return []
        dx = g @ ctx.params["W"].T
        return [("in", d, s) for d, s in zip(unstack(dx, offsets), states, strict=True)]

    def _accumulate(self, ctx: NodeContext, x: np.ndarray, g: np.ndarray) -> None:
        grads = ctx.grads
        if ctx.n_grads == 0 and x.dtype == g.dtype == grads["W"].dtype:
            # first gradient since the last update: write it in place, allocating nothing
            np.matmul(x.T, g, out=grads["W"])
            if self.bias:
                np.sum(g, axis=0, out=grads["b"])
        else:
            ctx.accumulate("W", x.T @ g)
            if self.bias:
                ctx.accumulate("b", g.sum(axis=0))

    def flops(self, forward: bool, shape: tuple[int, ...], grad_input: bool) -> float:
        """Appendix C: ``2 k d_in d_out`` forward for ``k`` rows; backward the same for ``x^T g`` and again for
        ``g W^T`` when the input wants its gradient."""
        if not shape:
            return 0.0
        mac = 2.0 * math.prod(shape[:-1]) * self.in_features * self.out_features
        return mac if forward or not grad_input else 2.0 * mac

    def placement_cost(self) -> int:
        """Multiply-adds per instance."""
        return self.in_features * self.out_features


class Embedding(Op):
    """Rows of a table looked up by integer ids; the ids carry no gradient."""

    kind = "embedding"
    group = "payload"
    bundling = "rows"
    parameterized = True
    heavy = True
    nondiff_inputs = frozenset({"in"})
    fields = (
        Field("num_embeddings", SIZE, "rows of the table: the vocabulary size", example=16),
        Field("embedding_dim", SIZE, "width of each embedding", example=32),
    )

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"E": (self.num_embeddings, self.embedding_dim)}

    def init_params(self, rng: np.random.Generator, dtype: np.dtype) -> dict[str, np.ndarray]:
        return {"E": rng.standard_normal((self.num_embeddings, self.embedding_dim)).astype(dtype)}

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {"out": self.embedding_dim}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        ids = self._check_ids(np.asarray(x))
        if ctx.train:
            ctx.cache[state] = ids
        return [("out", ctx.params["E"][ids], state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        self._accumulate(ctx, ctx.cache.pop(state), g)
        return []

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        ids, offsets = stack([np.asarray(x) for x in xs])
        self._check_ids(ids)
        rows = unstack(ctx.params["E"][ids], offsets)
        if ctx.train:
            cache = ctx.cache
            for piece, s in zip(unstack(ids, offsets), states, strict=True):
                cache[s] = piece
        return [("out", r, s) for r, s in zip(rows, states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        cache = ctx.cache
        ids, _ = stack([cache.pop(s) for s in states])
        self._accumulate(ctx, ids, stack(gs)[0])
        return []

    def _check_ids(self, ids: np.ndarray) -> np.ndarray:
        if ids.dtype.kind not in "iu":
            raise OpError(f"Embedding input 'in': expected integer ids, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            raise OpError(
                f"Embedding input 'in': ids must lie in [0, {self.num_embeddings}), found "
                f"[{ids.min()}, {ids.max()}]; raise num_embeddings or fix the token ids"
            )
        return ids

    def _accumulate(self, ctx: NodeContext, ids: np.ndarray, g: np.ndarray) -> None:
        """Add each row of ``g`` into the gradient row of its id (repeated ids accumulate)."""
        grad = ctx.grads.get("E")
        if ctx.n_grads == 0:
            if grad is None or grad.dtype != np.result_type(g, ctx.params["E"]):
                grad = ctx.grads["E"] = np.zeros_like(ctx.params["E"], dtype=np.result_type(g, ctx.params["E"]))
            else:
                grad.fill(0.0)
        np.add.at(grad, ids, g)

    def flops(self, forward: bool, shape: tuple[int, ...], grad_input: bool) -> float:
        """One per element moved: the looked-up rows forward (ids x dim), the scattered gradient rows backward."""
        if not shape:
            return 0.0
        return float(math.prod(shape) * self.embedding_dim) if forward else float(math.prod(shape))

    def placement_cost(self) -> int:
        """The width of the row it gathers."""
        return self.embedding_dim


class _Elementwise(Op):
    group = "payload"
    bundling = "rows"

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        y = self.f(x)
        if ctx.train:
            ctx.cache[state] = (x, y)
        return [("out", y, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        x, y = ctx.cache.pop(state)
        return [("in", self.df(x, y, g), state)]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        x, offsets = stack(xs)
        ys = unstack(self.f(x), offsets)
        if ctx.train:
            cache = ctx.cache
            for xi, yi, s in zip(xs, ys, states, strict=True):
                cache[s] = (xi, yi)
        return [("out", yi, s) for yi, s in zip(ys, states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        cache = ctx.cache
        pairs = [cache.pop(s) for s in states]
        x, _ = stack([p[0] for p in pairs])
        y, _ = stack([p[1] for p in pairs])
        g, offsets = stack(gs)
        return [("in", d, s) for d, s in zip(unstack(self.df(x, y, g), offsets), states, strict=True)]

    def f(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def df(self, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class ReLU(_Elementwise):
    """``max(x, 0)`` elementwise."""

    kind = "relu"
    element_flops = (1.0, 1.0)
    nn_form = NNForm("relu", "``max(x, 0)`` elementwise.")
    torch_form = TorchForm("ReLU")

    def f(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0)

    def df(self, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g * (x > 0)


class Tanh(_Elementwise):
    """``tanh(x)`` elementwise."""

    kind = "tanh"
    element_flops = (1.0, 2.0)
    nn_form = NNForm("tanh", "``tanh(x)`` elementwise.")
    torch_form = TorchForm("Tanh")

    def f(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(x)

    def df(self, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g * (1.0 - y * y)


class Sigmoid(_Elementwise):
    """``1 / (1 + exp(-x))`` elementwise."""

    kind = "sigmoid"
    element_flops = (1.0, 2.0)
    nn_form = NNForm("sigmoid", "``1 / (1 + exp(-x))`` elementwise.")
    torch_form = TorchForm("Sigmoid")

    def f(self, x: np.ndarray) -> np.ndarray:
        # sigmoid(x) = (1 + tanh(x / 2)) / 2: never overflows, and one tanh is several times faster than exp
        # with a split by sign on small payloads (absolute error ~1e-16; tiny tails round to 0 or 1)
        y = np.multiply(x, 0.5)
        np.tanh(y, out=y)
        y *= 0.5
        y += 0.5
        return y

    def df(self, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g * y * (1.0 - y)


class _Binary(JoinMixin, Op):
    """Elementwise op of two inputs ``a`` and ``b`` of equal shape, joined by state."""

    group = "payload"
    bundling = "per_message"  # the two inputs of a pair arrive in different bundles
    ports: ClassVar[tuple[str, str]] = ("a", "b")
    fields = (MATCH_ON,)

    def input_ports(self) -> tuple[str, ...]:
        return self.ports

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        a, b = widths.get("a"), widths.get("b")
        if a is not None and b is not None and a != b:
            raise OpError(f"{type(self).__name__} inputs 'a' and 'b': expected equal widths, got {a} and {b}")
        return {"out": a if a is not None else b}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, self.ports)
        if got is None:
            return []
        (a, sa), (b, sb) = got["a"], got["b"]
        if np.shape(a) != np.shape(b):
            raise OpError(f"{type(self).__name__}: inputs 'a' {np.shape(a)} and 'b' {np.shape(b)} differ in shape")
        if ctx.train:
            ctx.cache[sa] = (a, b, sa, sb)
        return [("out", self.f(a, b), sa)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        a, b, sa, sb = ctx.cache.pop(state)
        ga, gb = self.df(a, b, g)
        return [("a", ga, sa), ("b", gb, sb)]

    def f(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def df(self, a: np.ndarray, b: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


class Add(_Binary):
    """``a + b`` elementwise."""

    kind = "add"
    element_flops = (1.0, 0.0)
    nn_form = NNForm("add", "``a + b`` elementwise (also written ``a + b``).", (("a", "float"), ("b", "float")))

    def f(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a + b

    def df(self, a: np.ndarray, b: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return g, g


class Sub(_Binary):
    """``a - b`` (the GRU's ``h - n``)."""

    kind = "sub"
    element_flops = (1.0, 1.0)
    nn_form = NNForm("sub", "``a - b`` elementwise (also written ``a - b``).", (("a", "float"), ("b", "float")))

    def f(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a - b

    def df(self, a: np.ndarray, b: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return g, -g


class Mul(_Binary):
    """``a * b`` elementwise (the cells' gates)."""

    kind = "mul"
    element_flops = (1.0, 2.0)
    nn_form = NNForm("mul", "``a * b`` elementwise (also written ``a * b``).", (("a", "float"), ("b", "float")))

    def f(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a * b

    def df(self, a: np.ndarray, b: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return g * b, g * a


class Discard(Op):
    """A sink: consumes a message and sends nothing on, not even a gradient (its input is not
    differentiable, so the producer sees no gradient from here: a Split fills zeros for that piece).

    Every output must feed an input, so this is how a graph drops a value it does not need, such as
    the memory cell c of a Tree-LSTM node state [h; c] in front of a classifier that reads h only.
    """

    kind = "discard"
    group = "io"
    bundling = "per_message"
    element_flops = (0.0, 0.0)
    nondiff_inputs = frozenset({"in"})

    def output_ports(self) -> tuple[str, ...]:
        return ()

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return []

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return []
