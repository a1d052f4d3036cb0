"""The op interface every IR node implements, and the per-node context a runtime gives it.

An op is plain data (its configuration) plus two pure-ish functions (ARCHITECTURE.md, invariant 2)::

    forward(ctx, port, payload, state)  -> [(out_port, payload, state), ...]
    backward(ctx, out_port, grad, state) -> [(in_port, grad, state), ...]

and their *bundle* forms, which a worker calls with several messages for the same port at once (the
messages of different keys that queued up at the node)::

    forward_bundle(ctx, port, payloads, states)  -> the outputs of every message, in message order
    backward_bundle(ctx, out_port, grads, states) -> likewise

Each op declares how it bundles in ``bundling``: ``"rows"`` ops stack the payload rows of every message
into one array, run their math once (one matrix product for a Linear, one softmax for a loss) and split
the result back by message, each piece with its own message's state and cache entry; ``"per_message"``
ops (control flow, routing, fan-out and joins whose partners arrive separately) run once per message.
A bundled call gives the same outputs and gradients as the messages one by one, up to the rounding of
a matrix product over more rows (BLAS picks its kernel by shape; checked in
``tests/ir/test_op_bundles.py``).

Everything that lives between calls (parameters, accumulated gradients, what backward needs, joins
waiting for their other inputs) sits in the :class:`NodeContext` that the runtime owns; the op itself
keeps nothing. What backward needs is cached under the forward message's state and popped when the
backward message with that state arrives, so memory is bounded by what is in flight.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops.facts import Field, FieldValueError, NNForm, TorchForm

Width = int | None
Emitted = list[tuple[str, Any, State]]


class OpError(AmpError, ValueError):
    """A configuration or payload problem inside one op; the runtime adds the node name and state.

    ``port`` names the input port concerned, when there is one.
    """

    def __init__(self, message: str, port: str | None = None) -> None:
        super().__init__(message)
        self.port = port


class OpArgumentError(OpError, TypeError):
    """An op constructed with arguments its signature does not take (a ``TypeError`` too, as before)."""


class OpDefinitionError(AmpError, TypeError):
    """An ``Op`` subclass whose declaration breaks the rules: a field named twice, a required field after one
    with a default, a kind another op class has taken. Raised when the class is defined."""


class NodeContext:
    """Runtime state of one node: parameters, gradient accumulators, caches and counters.

    ``train`` is set by the runtime before each forward call: True when this forward belongs to a
    training key *and* a backward message will come back to this node, so the op must cache.
    """

    __slots__ = (
        "cache", "fwd_version", "grad_inputs", "grad_keys", "grad_outputs", "grads", "joins", "n_grads",
        "name", "opt_state", "params", "reports", "train", "version",
    )  # fmt: skip

    def __init__(self, name: str, params: dict[str, np.ndarray] | None = None) -> None:
        self.name = name
        self.params: dict[str, np.ndarray] = params or {}
        self.grads: dict[str, np.ndarray] = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.cache: dict[Any, Any] = {}
        self.joins: dict[Any, dict[str, tuple[Any, State]]] = {}
        self.fwd_version: dict[State, int] = {}
        self.version = 0
        self.n_grads = 0
        self.grad_keys: set[int] = set()
        self.opt_state: dict[str, Any] = {}
        self.train = True
        self.grad_inputs: frozenset[str] = frozenset()
        self.grad_outputs: frozenset[str] = frozenset()
        self.reports: list[dict[str, Any]] = []

    def report(self, **values: Any) -> None:
        """Record an observation (loss, accuracy) for the controller to collect."""
        self.reports.append(values)

    def accumulate(self, name: str, value: np.ndarray) -> None:
        """Add a freshly computed gradient (an array the op owns) for parameter ``name``.

        The first gradient after an update is stored as is, without a pass over a zeroed buffer; a
        parameterized op's backward must therefore give every one of its parameters a gradient.
        """
        if self.n_grads:
            self.grads[name] += value
        else:
            self.grads[name] = value

    def reset_grads(self) -> None:
        """Forget accumulated gradients after an update (the next ``accumulate`` overwrites them)."""
        self.n_grads = 0
        self.grad_keys.clear()

    def zero_grads(self) -> None:
        for g in self.grads.values():
            g.fill(0.0)
        self.reset_grads()


BUNDLINGS = ("rows", "per_message")


class Op:
    """Base class of every IR op.

    A subclass declares what it is (``kind``, ``group``, ``bundling``, ``element_flops`` and the flags below)
    and its configuration ``fields`` (``facts.py``), and overrides what it computes. Defining a subclass with
    a ``kind`` registers it (``REGISTRY``; ``ops.OPS`` is the closed list once the op modules are imported).
    The constructor is derived from the fields: ``Linear(4, 3, bias=False)`` binds its arguments to them,
    checks each value and keeps it as an attribute; ``setup()`` then checks what involves several fields
    and sets derived attributes (port names, say). ``config()`` writes the fields back as JSON data.
    """

    kind: ClassVar[str] = ""
    group: ClassVar[str] = ""  # "io", "payload", "control", "aggregation" or "loss"
    bundling: ClassVar[str] = ""  # "rows" or "per_message": how a bundle of messages runs (module docstring)
    # FLOPs per payload element of a message (forward, backward), for the simulator's cost model; every op
    # declares it (control flow and routing move data and compute nothing: (0, 0)); Linear and Embedding
    # override `flops` with the paper's appendix-C formulas
    element_flops: ClassVar[tuple[float, float] | None] = None
    fields: ClassVar[tuple[Field, ...]] = ()
    parameterized: ClassVar[bool] = False  # holds parameters that its optimizer updates (param_shapes)
    heavy: ClassVar[bool] = False  # placement spreads heavy ops over workers (placement_cost weighs them)
    objective: ClassVar[bool] = False  # a loss a graph trains on (a Sink starts backward but is none)
    updates_state: ClassVar[bool] = False  # changes the state of every message, so it may close a loop
    fused_cell: ClassVar[bool] = False  # the light part of one recurrent cell in one node (ir.cells)
    # the forward differs between training and validation keys (Dropout): the op reads ``ctx.train``, which
    # is set only where a backward comes back, so the gradient analysis sends one back to it (analysis.py)
    training_dependent: ClassVar[bool] = False
    nondiff_inputs: ClassVar[frozenset[str]] = frozenset()
    nn_form: ClassVar[NNForm | None] = None  # how amp.nn writes it (compiler/nn.py derives the function)
    torch_form: ClassVar[TorchForm | None] = None  # the torch.nn layer amp.from_torch imports as it

    def __init_subclass__(cls, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = [f.name for f in cls.fields]
        if len(set(names)) != len(names):
            raise OpDefinitionError(f"{cls.__name__}.fields: every field needs its own name, got {names}")
        params, seen_default = [], False
        for f in cls.fields:
            if f.required and seen_default:
                raise OpDefinitionError(
                    f"{cls.__name__}.fields: required field {f.name!r} after a field with a default; move it up"
                )
            seen_default |= not f.required
            default = inspect.Parameter.empty if f.required else f.default
            params.append(inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
        cls.__signature__ = inspect.Signature(params)  # what inspect.signature(cls) and help() show
        if register and "kind" in cls.__dict__:
            if cls.kind in REGISTRY and REGISTRY[cls.kind] is not cls:
                raise OpDefinitionError(
                    f"op kind {cls.kind!r} of {cls.__name__} is taken by {REGISTRY[cls.kind].__name__}; pick another "
                    "kind, or pass register=False for a class that is not an op of its own"
                )
            REGISTRY[cls.kind] = cls

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        try:
            bound = cls.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise OpArgumentError(f"{cls.__name__}{cls.__signature__}: {exc}") from None
        bound.apply_defaults()
        for f in cls.fields:
            try:
                setattr(self, f.attribute, f.type.check(bound.arguments[f.name]))
            except FieldValueError as exc:
                raise OpError(f"{cls.__name__} {f.name}: {exc}") from None
        self.setup()

    def setup(self) -> None:
        """Check what involves several fields and set derived attributes; the fields are set already."""

    def config(self) -> dict[str, Any]:
        """The op's configuration as JSON-ready data; ``type(op)(**op.config())`` rebuilds it."""
        return {f.name: f.type.to_json(getattr(self, f.attribute)) for f in self.fields}

    def input_ports(self) -> tuple[str, ...]:
        return ("in",)

    def output_ports(self) -> tuple[str, ...]:
        return ("out",)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def init_params(self, rng: np.random.Generator, dtype: np.dtype) -> dict[str, np.ndarray]:
        return {}

    def placement_cost(self) -> int:
        """What placement weighs a heavy node by when it balances workers (multiply-adds per instance, say)."""
        return 1

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        """Output widths (last payload dimension) from input widths; raise OpError on a mismatch."""
        (port,) = self.input_ports()
        return {out: widths.get(port) for out in self.output_ports()}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        raise NotImplementedError

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        raise NotImplementedError

    def flops(self, forward: bool, shape: tuple[int, ...], grad_input: bool) -> float:
        """FLOPs to handle one message with a payload of ``shape`` (forward or backward; ``grad_input``: the
        gradient of the input is wanted too)."""
        if self.element_flops is None:
            raise NotImplementedError(f"op {self.kind!r} declares no FLOP count (element_flops or flops)")
        return self.element_flops[0 if forward else 1] * math.prod(shape) if shape else 0.0

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        """``forward`` of several messages for ``port``: their outputs in message order. Runs ``forward`` once
        per message; ``"rows"`` ops override it with one call on the stacked rows."""
        out: Emitted = []
        forward = self.forward
        for x, s in zip(xs, states, strict=True):
            out += forward(ctx, port, x, s)
        return out

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        """``backward`` of several gradients for output ``port``, like :meth:`forward_bundle`."""
        out: Emitted = []
        backward = self.backward
        for g, s in zip(gs, states, strict=True):
            out += backward(ctx, port, g, s)
        return out

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.config() == self.config()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((self.kind, repr(sorted(self.config().items()))))


REGISTRY: dict[str, type[Op]] = {}  # every op kind defined so far -> its class, in order of definition


def stack(xs: list[Any]) -> tuple[np.ndarray, list[int]]:
    """The rows of several payloads as one array, and where each payload's rows start (plus the end). One
    payload comes back as it is (no copy): callers never write into the stacked array."""
    if len(xs) == 1:
        return xs[0], [0, len(xs[0])]
    offsets = [0]
    total = 0
    for x in xs:
        total += len(x)
        offsets.append(total)
    return np.concatenate(xs), offsets


def unstack(y: np.ndarray, offsets: list[int]) -> list[np.ndarray]:
    """``y``'s rows cut back into the payloads that :func:`stack` stacked (views, no copies)."""
    return [y[a:b] for a, b in pairwise(offsets)]


def split_last(x: np.ndarray, sizes: tuple[int, ...] | list[int]) -> list[np.ndarray]:
    """``x`` cut along its last axis into pieces of ``sizes`` (views; ``np.split`` without its overhead)."""
    pieces = []
    a = 0
    for n in sizes:
        pieces.append(x[..., a : a + n])
        a += n
    return pieces


def check_width(op: str, port: str, expected: int, found: Width) -> None:
    if found is not None and found != expected:
        raise OpError(f"{op} input {port!r}: expected width {expected}, got {found}", port=port)


class JoinMixin:
    """Joins wait until every input port holds a message with a matching state.

    Messages match on their full state, or on ``match_on`` fields plus ``key`` when set (a loss joining
    logits at the end of a loop with targets injected at the start, say). The output carries the first
    input port's state.
    """

    match_on: tuple[str, ...] | None

    def join(self, ctx: NodeContext, port: str, x: Any, state: State, ports: tuple[str, ...]):
        match = state if self.match_on is None else (state["key"], *state.project(self.match_on))
        waiting = ctx.joins.get(match)
        if waiting is None:
            if len(ports) == 1:
                return {port: (x, state)}
            ctx.joins[match] = {port: (x, state)}
            return None
        if port in waiting:
            raise OpError(
                f"input {port!r} received a second message for state {state} before the other inputs "
                f"arrived; states reaching a join must be unique (add an Isu to a loop, or set match_on)"
            )
        waiting[port] = (x, state)
        if len(waiting) < len(ports):
            return None
        del ctx.joins[match]
        return waiting
