"""``amp.nn`` calls -> IR nodes.

Each call is bound to the signature of its stub in ``nn.py`` (so argument errors read like Python's), its
arguments are checked (a tensor where a tensor goes, integer ids into an embedding, a positive int for a
size) and its nodes are added to the draft graph. Joins (concat, + - *, cells, losses, the sparse ops)
match their inputs' messages on the full state when the inputs carry the same state fields, and on the key
plus the fields they share otherwise (a loop's exit meeting a target).

The handlers of the ops that declare their amp.nn form (``Op.nn_form``: the elementwise ops, the joins,
the sparse ops, the losses, any parameterized op of one input) are one function, :func:`_declared`, derived
from the op's declaration; the handlers written here are the calls that are more than one op (cells,
``split`` into a tuple, ``zeros`` as an input) or read their arguments specially (``linear``).

Parameters: a ``linear``, ``embedding`` (or other parameterized op's) call with ``name=`` registers a call
site of that parameter; the first site is the node of that name, later sites with the same name must have
the same op and shape and become one node with the first when the graph is finalized (``draft.py``).
Without ``name=`` a call site gets its own node, named after its kind and line.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amp_notebook.compiler import nn
from amp_notebook.compiler.values import ChildResult, Loss, SequenceInput, Tensor
from amp_notebook.ir import cells as C
from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import GraphError
from amp_notebook.ir.ops.base import Op, OpError

if TYPE_CHECKING:
    from amp_notebook.compiler.translate import Translator

SIGNATURES = {name: inspect.signature(fn) for name, fn in nn.VOCABULARY.items()}
_ATTRS = ("min_update_frequency", "optimizer", "worker")
Args = dict[str, Any]


def call_vocabulary(tr: Translator, node: ast.Call, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    try:
        bound = SIGNATURES[name].bind(*args, **kwargs)
    except TypeError as exc:
        raise tr.error(node, f"nn.{name}(...): {exc}") from None
    bound.apply_defaults()
    return HANDLERS[name](Call(tr, node, name, bound.arguments))


class Call:
    """One vocabulary call: its bound arguments and checked accessors for them."""

    def __init__(self, tr: Translator, node: ast.AST, name: str, args: Args) -> None:
        self.tr, self.node, self.name, self.args = tr, node, name, args

    def fail(self, message: str) -> Exception:
        return self.tr.error(self.node, f"nn.{self.name}: {message}")

    def tensor(self, key: str, dtype: str | None = None, value: Any = None) -> Tensor:
        value = self.args[key] if value is None else value
        if isinstance(value, ChildResult):
            from amp_notebook.compiler.recursion import child_tensor

            value = child_tensor(self.tr, self.node, value)
        if isinstance(value, SequenceInput):
            raise self.fail(
                f"{key} is the sequence {value.name} as a whole; loop over it (for x in {value.name}:) or read "
                f"one step ({value.name}[t] inside a loop over t)"
            )
        if not isinstance(value, Tensor):
            raise self.fail(f"{key}: expected a tensor, got {_describe(value)}")
        if dtype == "float" and value.dtype == "int":
            raise self.fail(
                f"{key} holds integer ids or labels ({value.describe()}); embed ids first with nn.embedding(ids, "
                "vocabulary_size, dim)"
            )
        if dtype == "int" and value.dtype != "int":
            raise self.fail(f"{key}: expected integer ids, labels or indices, got {value.describe()}")
        return self.tr.require_scope(value, self.node, key)

    def constant(self, key: str) -> Any:
        """A compile-time constant argument (the op's constructor checks its type and range)."""
        value = self.args[key]
        if isinstance(value, Tensor | SequenceInput | ChildResult | Loss):
            raise self.fail(f"{key}: expected a constant, got {_describe(value)}")
        return value

    def size(self, key: str, optional: bool = False) -> Any:
        value = self.args[key]
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(f"{key}: expected a positive int constant, got {_describe(value)}")
        return value

    def node_name(self) -> str | None:
        value = self.args.get("name")
        if value is not None and (not isinstance(value, str) or not value):
            raise self.fail(f"name: expected a non-empty string, got {_describe(value)}")
        return value

    def attrs(self) -> dict[str, Any]:
        out = {}
        for key in _ATTRS:
            value = self.args.get(key)
            if value is not None:
                if key != "optimizer" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                    raise self.fail(f"{key}: expected a non-negative int, got {_describe(value)}")
                if key == "optimizer" and not isinstance(value, str | dict):
                    raise self.fail(f"optimizer: expected a name ('adam') or a dict, got {_describe(value)}")
                out[key] = {"name": value} if key == "optimizer" and isinstance(value, str) else value
        return out

    def add(self, op: Op, inputs: list[Tensor], kind: str | None = None) -> Tensor:
        """A parameterless node (a user ``name=`` must be unique); returns its single output."""
        name = self.node_name()
        if name is None:
            name = self.tr.auto_name(kind or op.kind, self.node)
        elif name in self.tr.g.nodes:
            raise self.fail(f"the node name {name!r} is taken; names share weights only for linear and embedding")
        return self.tr.out(self.tr.add(self.node, op, inputs, name=name, **self.attrs()))


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return value.describe()
    if isinstance(value, Loss):
        return f"the loss {value.name!r}"
    return f"{type(value).__name__} {value!r}" if isinstance(value, int | float | str) else type(value).__name__


# ------------------------------------------------------------------------------------- parameters
def _parameter(c: Call, op: Op, x: Tensor) -> Tensor:
    tr = c.tr
    name = c.node_name()
    attrs = c.attrs()
    if name is None:
        return tr.out(tr.add(c.node, op, [x], name=tr.auto_name(op.kind, c.node), **attrs))
    sites = tr.g.shared.get(name)
    if sites is None:
        if name in tr.g.nodes:
            raise c.fail(f"the name {name!r} is already used by {tr.g.nodes[name].describe()}")
        node = tr.add(c.node, op, [x], name=name, **attrs)
        tr.g.shared[name] = [node.name]
        return tr.out(node)
    first = tr.g.nodes.get(sites[0]) if sites[0] in tr.g.nodes else None
    if first is None or first.op != op:
        line = first.meta.get("line") if first is not None else None
        raise c.fail(
            f"the parameter name {name!r} is already used (line {line}) for {first.op if first else '?'}; the same "
            f"name shares one node, so it needs the same op and shape, got {op} (rename one of them)"
        )
    for key, value in attrs.items():
        if getattr(first, key) is None:
            setattr(first, key, value)
        elif getattr(first, key) != value:
            raise c.fail(f"{key}={value!r} differs from {getattr(first, key)!r} at the first use of {name!r}")
    node = tr.add(c.node, op, [x], name=tr.g.fresh(f"{name}@site{len(sites) + 1}"))
    sites.append(node.name)
    return tr.out(node)


def _linear(c: Call) -> Tensor:
    x = c.tensor("x", "float")
    out = c.size("out_features")
    width = c.size("in_features", optional=True) or x.width
    if width is None:
        raise c.fail("the width of x is not known here; pass in_features=...")
    return _parameter(c, O.Linear(width, out, bias=bool(c.args["bias"])), x)


def _embedding(c: Call) -> Tensor:
    ids = c.tensor("ids", "int")
    return _parameter(c, O.Embedding(c.size("num_embeddings"), c.size("embedding_dim")), ids)


# ------------------------------------------------------------------------- ops that declare their form
def _declared(cls: type[Op]) -> Callable[[Call], Any]:
    """The handler of an op's derived amp.nn function (``nn.DECLARED``): its inputs checked by what each must
    hold, its fields from the call's arguments (``match_on`` from the state fields the inputs share, a width
    from its input), the op built (its constructor checks the values) and added as a node, a parameter (one
    node per ``name=``) or the model's loss."""
    form = cls.nn_form
    assert form is not None
    arguments = nn.op_arguments(cls)

    def handler(c: Call) -> Any:
        tensors = {arg: c.tensor(arg, dtype) for arg, dtype in form.inputs}
        ins = list(tensors.values())
        config: dict[str, Any] = {f.name: c.constant(f.name) for f in arguments}
        for f in cls.fields:
            if f.name == "match_on":
                config[f.name] = c.tr.match_on(ins)
            elif f.from_width is not None:
                arg = nn.argument(f.from_width)
                if tensors[arg].width is None:
                    raise c.fail(f"the width of {arg} is not known here; give the input a width (nn.Floats(width))")
                config[f.name] = tensors[arg].width
        try:
            op = cls(**config)
        except OpError as exc:
            raise c.fail(str(exc)) from None
        if cls.group == "loss":
            return _add_loss(c, op, ins)
        if cls.parameterized:
            return _parameter(c, op, ins[0])
        return c.add(op, ins)

    return handler


def elementwise_join(tr: Translator, node: ast.AST, kind: str, a: Tensor, b: Tensor) -> Tensor:
    """``a + b``, ``a - b``, ``a * b`` written with operators."""
    c = Call(tr, node, kind, {"a": a, "b": b, "name": None, "worker": None})
    return HANDLERS[kind](c)


def _pair(c: Call, values: tuple[Any, ...]) -> Tensor | None:
    """``node(t.left)`` and ``node(t.right)`` side by side are the Collect's output itself."""
    if (
        len(values) == 2
        and all(isinstance(v, ChildResult) for v in values)
        and [v.index for v in values] == [0, 1]
        and values[0].recursion is values[1].recursion
    ):
        from amp_notebook.compiler.recursion import children

        return children(c.tr, c.node, values[0].recursion)
    return None


def _concat(c: Call) -> Tensor:
    values = c.args["xs"]
    if not values:
        raise c.fail("expected at least one tensor")
    pair = _pair(c, values)
    if pair is not None:
        return pair
    xs = [c.tensor("xs", "float", v) for v in values]
    return c.add(O.Concat(len(xs), c.tr.match_on(xs)), xs)


def _split(c: Call) -> tuple[Tensor, ...]:
    x = c.tensor("x")
    sizes = c.args["sizes"]
    if (
        not isinstance(sizes, tuple | list)
        or len(sizes) < 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)
    ):
        raise c.fail(f"sizes: expected two or more positive int constants, got {sizes!r}")
    if x.width is not None and x.width != sum(sizes):
        raise c.fail(f"sizes {list(sizes)} add up to {sum(sizes)}, but x has width {x.width}")
    name = c.node_name() or c.tr.auto_name("split", c.node)
    node = c.tr.add(c.node, O.Split(list(sizes)), [x], name=name, **c.attrs())
    return tuple(c.tr.out(node, p) for p in node.op.output_ports())


def _zeros(c: Call) -> Tensor:
    width = c.size("width")
    if c.tr.required:
        raise c.fail(
            "zeros are an input, one message per key, so they cannot be made inside a loop or a recursion; make "
            "them before the loop (h = nn.zeros(n)) and the loop carries them"
        )
    stem = c.node_name() or (f"{c.tr.hint}0" if c.tr.hint else "zeros")
    name = stem if c.node_name() else c.tr.g.fresh(stem)
    if name in c.tr.g.nodes:
        raise c.fail(f"the input name {name!r} is taken")
    return c.tr.out(c.tr.add(c.node, O.Input(width=width, fill="zeros"), [], name=name))


# ------------------------------------------------------------------------------------------ cells
def _cell(c: Call, build: Callable[[str], Any]) -> Any:
    name = c.node_name()
    if name is None:
        raise c.fail("name: a cell needs a name (its nodes are named '<name>_gates', ...)")
    if any(n.meta.get("cell") == name for n in c.tr.g.nodes.values()):
        raise c.fail(
            f"a cell named {name!r} exists already; cells are not shared by name, use one call site "
            "(inside a loop it runs every iteration with the same weights)"
        )
    before = set(c.tr.g.nodes)
    try:
        refs = build(name)
    except (GraphError, OpError) as exc:
        raise c.fail(str(exc)) from None
    attrs = c.attrs()
    for node_name in c.tr.g.nodes:
        node = c.tr.g.nodes[node_name]
        if node_name in before:
            continue
        if c.tr.g.line is not None:
            node.meta.setdefault("line", c.tr.g.line)
        for key, value in attrs.items():
            if key == "worker" or node.kind in O.PARAMETERIZED:
                setattr(node, key, value)
    if isinstance(refs, tuple):
        return tuple(c.tr.tensor(r) for r in refs)
    return c.tr.tensor(refs)


def _lstm_cell(c: Call) -> tuple[Tensor, Tensor]:
    x, h, cc = c.tensor("x", "float"), c.tensor("h", "float"), c.tensor("c", "float")
    hidden, match = c.size("hidden"), c.tr.match_on([x, h, cc])
    return _cell(c, lambda name: C.lstm_cell(c.tr.g, x.ref, h.ref, cc.ref, hidden, name, x.width, match))


def _gru_cell(c: Call) -> Tensor:
    x, h = c.tensor("x", "float"), c.tensor("h", "float")
    hidden, match, fused = c.size("hidden"), c.tr.match_on([x, h]), bool(c.args["fused"])
    # h read twice by the cell, as the draft reads any value twice: one Bcast then feeds the cell and h's
    # other readers (finalize), not a Bcast of the cell's own behind h's
    copies = (h.ref, h.ref)
    return _cell(c, lambda name: C.gru_cell(c.tr.g, x.ref, copies, hidden, name, x.width, match, fused))


def _tree_lstm_leaf(c: Call) -> Tensor:
    x, hidden, fused = c.tensor("x", "float"), c.size("hidden"), bool(c.args["fused"])
    return _cell(c, lambda name: C.tree_lstm_leaf(c.tr.g, x.ref, hidden, name, x.width, fused))


def _tree_lstm_branch(c: Call) -> Tensor:
    hidden, fused = c.size("hidden"), bool(c.args["fused"])
    children = _pair(c, (c.args["left"], c.args["right"]))
    if children is None:
        left, right = c.tensor("left", "float"), c.tensor("right", "float")
        node = c.tr.add(
            c.node, O.Concat(2, c.tr.match_on([left, right])), [left, right], name=c.tr.auto_name("children", c.node)
        )
        children = c.tr.out(node)
    ref = children.ref
    return _cell(c, lambda name: C.tree_lstm_branch(c.tr.g, ref, hidden, name, fused))


# ----------------------------------------------------------------------------------------- losses
def _add_loss(c: Call, op: Op, ins: list[Tensor]) -> Loss:
    name = c.node_name()
    if name is None:
        name = c.tr.auto_name("loss", c.node)
    elif name in c.tr.g.nodes:
        raise c.fail(f"the node name {name!r} is taken")
    node = c.tr.add(c.node, op, ins, name=name, **c.attrs())
    c.tr.losses.append(node.name)
    return Loss(node.name)


HANDLERS: dict[str, Callable[[Call], Any]] = {
    "linear": _linear,
    "embedding": _embedding,
    "concat": _concat,
    "split": _split,
    "zeros": _zeros,
    "lstm_cell": _lstm_cell,
    "gru_cell": _gru_cell,
    "tree_lstm_leaf": _tree_lstm_leaf,
    "tree_lstm_branch": _tree_lstm_branch,
    **{name: _declared(cls) for name, cls in nn.DECLARED.items()},
}
assert set(HANDLERS) == set(nn.VOCABULARY), "every amp.nn function needs a handler"
