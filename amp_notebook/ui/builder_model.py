"""The graph builder's model: intents applied to an IR :class:`Graph`, undo/redo, positions and the view.

Python owns the graph. The browser (or Python code) sends *intents*, plain dicts such as
``{"type": "connect", "src": "embed", "src_port": "out", "dst": "cat", "dst_port": "in0"}``;
:meth:`BuilderModel.apply` checks one against its JSON Schema (:mod:`amp_notebook.ui.messages`: fields,
types, ranges, no junk fields), then applies it to the graph through the builder API
(amp_notebook/ir/graph.py), so every structural rule of the IR holds, and either succeeds as a whole or
raises :class:`BuilderError` leaving graph, positions, undo history and revision as they were.

Undo and redo keep snapshots: before each successful edit the graph's JSON form
(:func:`~amp_notebook.ir.serialize.graph_to_dict`) and the positions are pushed on the undo stack; undo
rebuilds the graph from the snapshot *in place*, so a ``Graph`` object the user holds stays the builder's
graph. A snapshot of a 200-node graph is a few hundred small dicts: cheaper and far simpler than inverse
operations for every intent.

A graph loaded from the model zoo (:meth:`BuilderModel.load_model`) keeps the zoo's name beside it
(:attr:`BuilderModel.zoo_model`, in the undo snapshots too), so the widget's Train brings that model's data
and recommended settings (amp_notebook/models/zoo.py); any other load forgets it.

Positions are the canvas coordinates of nodes, kept beside the graph (not in it). A node without one
(a loaded model, nodes made by Python code) is laid out by the browser, which reports the positions back
with a ``layout`` message that is not an undo step. With them comes the layout's ``direction``: ``"TB"``
(top to bottom; ports on the top and bottom edges of the boxes) or ``"LR"`` (left to right; ports on the
sides). The browser chooses it by the graph's shape when a whole graph is laid out, unless
:meth:`BuilderModel.auto_layout` asked for one; ``None`` (positions made by hand) draws left to right.

:meth:`BuilderModel.view` is what the browser draws: nodes with ports, properties, inferred widths,
effective worker (placement heuristic for unpinned nodes) and the validation problems of each node and
port; edges with the width they carry; problems that concern no node.
"""

from __future__ import annotations

import copy
import math
import numbers
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from amp_notebook.errors import AmpError
from amp_notebook.ir import cells as C
from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph, Ref
from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict, rebuild_graph
from amp_notebook.ir.validate import check, infer_widths
from amp_notebook.models import zoo
from amp_notebook.ui import builder_schema as S
from amp_notebook.ui.builder_replicas import set_replicas
from amp_notebook.ui.builder_schema import BuilderError
from amp_notebook.ui.messages import MAX_WORKERS, refusal

__all__ = ["ZOO_MODELS", "BuilderError", "BuilderModel"]


Position = tuple[float, float]
Snapshot = tuple[dict[str, Any], dict[str, Position], str | None, str | None]  # graph, positions, direction, zoo
UNDO_LIMIT = 200
DIRECTIONS = ("TB", "LR")


ZOO_MODELS = zoo.NAMES  # the model zoo's registry (amp_notebook/models/zoo.py): the CLI's names
ATTRS = ("name", "min_update_frequency", "optimizer", "worker", "replicas")


class BuilderModel:
    """A graph, node positions and undo history; intents in, a drawable view out."""

    def __init__(self, graph: Graph | None = None, workers: int = 2) -> None:
        self.graph = graph if graph is not None else Graph("graph")
        self.positions: dict[str, Position] = {}
        self.direction: str | None = None  # of the layout the positions came from (module docstring)
        # the zoo model the graph was loaded as (its registry name), so Train can bring its data and settings;
        # None after any other load. Kept through edits (a retuned zoo RNN still trains on list reduction)
        self.zoo_model: str | None = None
        self.workers = workers
        self.revision = 0
        self.generation = 0  # bumped by every load: which graph this is, for what belongs to the last one
        self.on_change: Callable[[], None] | None = None
        self._undo: list[Snapshot] = []
        self._redo: list[Snapshot] = []

    # ------------------------------------------------------------------ intents
    def apply(self, intent: dict[str, Any]) -> Any:
        """Apply one intent dict (see the module docstring); raises BuilderError when it is refused."""
        problem = refusal("intent", intent)
        if problem is not None:
            raise BuilderError(problem)
        kind = intent["type"]
        args = {k: v for k, v in intent.items() if k != "type"}
        return self._HANDLERS[kind](self, **args)

    def add_node(
        self, kind: str, name: str | None = None, position: Position | None = None,
        config: dict[str, Any] | None = None, **attrs: Any,
    ) -> str:  # fmt: skip
        """Add an op node (default properties, overridden by ``config``) and return its name."""
        if kind.startswith(S.CELL_PREFIX):
            return self.add_cell(kind, name=name, position=position, **(config or {}))[0]
        if kind not in O.OPS:
            cells = sorted(S.CELL_PREFIX + c for c in S.CELLS)
            raise BuilderError(f"unknown op kind {kind!r}; the palette has {sorted(O.OPS)} and cells {cells}")
        where = f"{S.label(kind)} {name!r}" if name else S.label(kind)
        values = S.default_config(kind)
        types = {f["name"]: f["type"] for f in S.fields(kind)}
        for field, value in (config or {}).items():
            if field not in types:
                raise BuilderError(f"{where}: no property {field!r}; properties: {sorted(types)}")
            values[field] = S.coerce(types[field], value, f"{where} {field}")
        op = S.make_op(kind, values, where)
        with self._edit():
            node = self.graph.add_node(op, name=name or None)
            for attr, value in attrs.items():
                self._set_attr(node.name, attr, value)
            if position is not None:
                self.positions[node.name] = _position(position)
        return node.name

    def add_cell(
        self, kind: str, name: str | None = None, position: Position | None = None, **fields: Any
    ) -> list[str]:
        """Add a compound cell behind Identity input nodes ``{name}_in_{input}``; returns the new node names."""
        kind = kind.removeprefix(S.CELL_PREFIX)
        spec = S.CELLS.get(kind)
        if spec is None:
            raise BuilderError(f"unknown cell {kind!r}; cells: {sorted(S.CELLS)}")
        name = name or self._fresh(kind.removesuffix("_cell"))
        values = dict(spec["fields"])
        for field, value in fields.items():
            if field not in values:
                raise BuilderError(f"{spec['label']} {name!r}: no property {field!r}; properties: {sorted(values)}")
            values[field] = S.coerce(S.INT, value, f"{spec['label']} {name!r} {field}")
        before = set(self.graph.nodes)
        with self._edit():
            ins = [Ref(self.graph.add_node(O.Identity(), name=f"{name}_in_{p}").name) for p in spec["inputs"]]
            for ref in ins:
                self.graph.nodes[ref.node].meta["cell"] = name
            getattr(C, kind)(self.graph, *ins, name=name, **values)
            if position is not None:
                x, y = _position(position)
                for i, ref in enumerate(ins):
                    self.positions[ref.node] = (x, y + 70.0 * i)
        return [n for n in self.graph.nodes if n not in before]

    def move(self, positions: dict[str, Position]) -> None:
        """Move nodes to new canvas positions (one undo step)."""
        self._require_nodes(positions, "move")
        with self._edit():
            for name, pos in positions.items():
                self.positions[name] = _position(pos)

    def layout(self, positions: dict[str, Position], direction: str | None = None) -> None:
        """Positions the browser computed for nodes that had none, and the direction of that layout (kept
        when None): not an undo step."""
        direction = _direction(direction, "layout")
        changed = False
        for name, pos in positions.items():
            if name in self.graph.nodes:
                self.positions[name] = _position(pos)
                changed = True
        if direction is not None and direction != self.direction:
            self.direction = direction
            changed = True
        if changed:
            self._changed()

    def connect(self, src: str, src_port: str, dst: str, dst_port: str) -> None:
        with self._edit():
            self.graph.connect(Ref(src, src_port), dst, dst_port)

    def disconnect(self, dst: str, dst_port: str) -> None:
        with self._edit():
            self.graph.disconnect(dst, dst_port)

    def delete(self, nodes: list[str] | tuple[str, ...] = (), edges: list[list[str]] | tuple = ()) -> None:
        """Delete nodes (with their edges) and edges given as ``[dst, dst_port]`` (one undo step)."""
        self._require_nodes(nodes, "delete")
        with self._edit():
            for dst, dst_port in edges:
                if dst not in nodes:
                    self.graph.disconnect(dst, dst_port)
            for name in nodes:
                self.graph.remove_node(name)
                self.positions.pop(name, None)

    def set_property(self, node: str, field: str, value: Any) -> None:
        """Set an op property (rebuilding the op; edges on ports that vanish are dropped) or a node attribute
        (``name``, ``min_update_frequency``, ``optimizer``, ``worker``, ``replicas``)."""
        self._require_nodes([node], "set_property")
        n = self.graph.nodes[node]
        where = f"{n.describe()} {field}"
        if field in ATTRS:
            with self._edit():
                self._set_attr(node, field, value)
            return
        types = {f["name"]: f["type"] for f in S.fields(n.kind)}
        if field not in types:
            raise BuilderError(f"{n.describe()}: no property {field!r}; properties: {sorted(types) + list(ATTRS)}")
        config = {**n.op.config(), field: S.coerce(types[field], value, where)}
        op = S.make_op(n.kind, config, n.describe())
        with self._edit():
            self.graph.replace_op(node, op)

    def undo(self) -> None:
        if not self._undo:
            raise BuilderError("nothing to undo")
        self._redo.append(self._snapshot())
        self._restore(self._undo.pop())

    def redo(self) -> None:
        if not self._redo:
            raise BuilderError("nothing to redo")
        self._undo.append(self._snapshot())
        self._restore(self._redo.pop())

    def load(self, graph: Graph | dict[str, Any]) -> None:
        """Replace the graph (a Graph, or its JSON dict: data only, never code); one undo step. The graph is
        no zoo model's any more (:attr:`zoo_model` is None), whatever it holds."""
        self._load(graph, None)

    def load_model(self, model: str) -> None:
        """Load a zoo model's graph (``zoo.get(model).graph()``: sized for its small dataset) and remember its
        name (:attr:`zoo_model`, the registry's spelling; the ``_`` spelling is accepted); one undo step."""
        try:
            entry = zoo.get(model)
        except zoo.ZooError as exc:
            raise BuilderError(str(exc)) from None
        self._load(entry.graph(), entry.name)

    def _load(self, graph: Graph | dict[str, Any], zoo_model: str | None) -> None:
        if not isinstance(graph, (Graph, dict)):
            raise BuilderError(f"load: expected a Graph or its JSON dict, got {type(graph).__name__}")
        self.generation += 1  # before the view is drawn; put back if the load is refused
        try:
            with self._edit():
                new = graph_from_dict(graph, "load") if isinstance(graph, dict) else graph
                self._replace_graph(new)
                self.graph.compiled_from = new.compiled_from  # amp.compile's record (to_python(form="source"))
                self.positions.clear()
                self.direction = None
                self.zoo_model = zoo_model
        except BaseException:
            self.generation -= 1
            raise

    def auto_layout(self, direction: str | None = None) -> None:
        """Forget every position so the browser lays the graph out again (one undo step): ``"TB"`` top to
        bottom, ``"LR"`` left to right, or None to let it choose by the graph's shape."""
        direction = _direction(direction, "auto_layout")
        with self._edit():
            self.positions.clear()
            self.direction = direction

    def auto_place(self, strategy: str = "round_robin") -> dict[str, int]:
        """Run the placement heuristic on all nodes and pin each node to the worker it chose."""
        from amp_notebook.runtime.placement import place

        with self._edit():
            for name in self.graph.nodes:
                self.graph.assign_worker(name, None)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                placed = place(self.graph, self.workers, strategy=strategy)
            for name, w in placed.items():
                self.graph.assign_worker(name, w)
        return placed

    def pin(self, nodes: list[str] | tuple[str, ...], worker: Any) -> None:
        """Pin ``nodes`` to ``worker`` as one undo step (what dropping nodes on a worker lane sends); an empty
        ``worker`` (None or "") unpins them, so the placement heuristic chooses again."""
        if isinstance(nodes, str):
            nodes = [nodes]
        if not isinstance(nodes, (list, tuple)) or not nodes or not all(isinstance(n, str) for n in nodes):
            raise BuilderError(f"pin: expected a list of node names, got {nodes!r}")
        nodes = list(nodes)
        self._require_nodes(nodes, "pin")
        w = S.coerce(S.OPT_INT, worker, "pin worker")
        if w is not None and not 0 <= w < self.workers:
            raise BuilderError(
                f"pin {nodes[0]!r}{' and others' if len(nodes) > 1 else ''}: worker {w} is not one of the "
                f"builder's workers 0..{self.workers - 1}; raise 'workers' first or pick a lane that exists"
            )
        with self._edit():
            for name in nodes:
                self.graph.assign_worker(name, w)

    def set_workers(self, workers: Any) -> None:
        workers = S.coerce(S.INT, workers, "workers")
        if not 1 <= workers <= MAX_WORKERS:
            raise BuilderError(f"workers: expected 1 to {MAX_WORKERS} (one lane each), got {workers}")
        self.workers = workers
        self._changed()

    @contextmanager
    def edit(self) -> Iterator[Graph]:
        """Edit the graph with the builder API in Python, as one undo step, shown on the canvas at the end::

        with builder.edit() as g:
            g.relu(g.linear(Ref("x"), 32), name="hidden")
        """
        with self._edit():
            yield self.graph

    @property
    def can_undo(self) -> bool:
        return bool(self._undo)

    @property
    def can_redo(self) -> bool:
        return bool(self._redo)

    # --------------------------------------------------------------------- view
    def view(self) -> dict[str, Any]:
        """What the browser draws (JSON-ready)."""
        from amp_notebook.ui.builder_view import build_view

        return build_view(self)

    def problems(self, require_loss: bool = True) -> list[Any]:
        return check(self.graph, require_loss=require_loss)

    def widths(self) -> dict[tuple[str, str], int | None]:
        return infer_widths(self.graph, strict=False)[0]

    # ------------------------------------------------------------------ helpers
    _HANDLERS: ClassVar[dict[str, Callable[..., Any]]] = {}

    @contextmanager
    def _edit(self) -> Iterator[None]:
        """One undo step: snapshot, edit, and on failure put everything back and raise BuilderError."""
        before = self._snapshot()
        try:
            yield
        except AmpError as exc:  # GraphError, OpError, PropertyError, PlacementError, ... as a BuilderError
            self._restore(before, notify=False)
            raise (exc if isinstance(exc, BuilderError) else BuilderError(str(exc))) from None
        except Exception:
            self._restore(before, notify=False)
            raise
        self._undo.append(before)
        del self._undo[:-UNDO_LIMIT]
        self._redo.clear()
        self._changed()

    def _changed(self) -> None:
        self.revision += 1
        if self.on_change is not None:
            self.on_change()

    def _snapshot(self) -> Snapshot:
        return copy.deepcopy(graph_to_dict(self.graph)), dict(self.positions), self.direction, self.zoo_model

    def _restore(self, snapshot: Snapshot, notify: bool = True) -> None:
        data, positions, direction, self.zoo_model = snapshot
        self._replace_graph(rebuild_graph(copy.deepcopy(data)))  # our own snapshot: no schema check
        self.positions = dict(positions)
        self.direction = direction
        if notify:
            self._changed()

    def _replace_graph(self, new: Graph) -> None:
        """Make ``self.graph`` hold ``new``'s content, keeping the object (so users' references stay live)."""
        self.graph.replace_contents(new)

    def _require_nodes(self, names: Any, what: str) -> None:
        missing = [n for n in names if n not in self.graph.nodes]
        if missing:
            raise BuilderError(f"{what}: there is no node {missing[0]!r}")

    def _fresh(self, stem: str) -> str:
        i = 0
        while any(n.startswith(f"{stem}{i}") for n in self.graph.nodes):
            i += 1
        return f"{stem}{i}"

    def _set_attr(self, node: str, attr: str, value: Any) -> None:
        n = self.graph.nodes[node]
        where = f"{n.describe()} {attr}"
        if attr == "name":
            self._rename(node, S.coerce(S.TEXT, value, where))
        elif attr in ("min_update_frequency", "worker"):
            v = S.coerce(S.OPT_INT, value, where)
            low = 1 if attr == "min_update_frequency" else 0
            if v is not None and v < low:
                raise BuilderError(f"{where}: expected an int >= {low} (or empty for the run's default), got {v}")
            if attr == "worker":
                self.graph.assign_worker(node, v)
            else:
                self.graph.set_min_update_frequency(node, v)
        elif attr == "optimizer":
            self.graph.set_optimizer(node, _optimizer(value, where))
        elif attr == "replicas":
            set_replicas(self.graph, node, S.coerce(S.INT, value, where))
        else:
            raise BuilderError(f"{n.describe()}: unknown attribute {attr!r}; attributes: {list(ATTRS)}")

    def _rename(self, old: str, new: str) -> None:
        if new == old:
            return
        if not new or not new.replace("_", "a").isalnum():
            raise BuilderError(f"rename {old!r}: expected a name of letters, digits and '_', got {new!r}")
        self.graph.rename(old, new)
        if old in self.positions:
            self.positions[new] = self.positions.pop(old)


BuilderModel._HANDLERS = {
    "add_node": BuilderModel.add_node,
    "add_cell": BuilderModel.add_cell,
    "move": BuilderModel.move,
    "layout": BuilderModel.layout,
    "connect": BuilderModel.connect,
    "disconnect": BuilderModel.disconnect,
    "delete": BuilderModel.delete,
    "set_property": BuilderModel.set_property,
    "undo": BuilderModel.undo,
    "redo": BuilderModel.redo,
    "load_model": BuilderModel.load_model,
    "auto_layout": BuilderModel.auto_layout,
    "auto_place": BuilderModel.auto_place,
    "pin": BuilderModel.pin,
    "set_workers": BuilderModel.set_workers,
}


def _position(pos: Any) -> Position:
    if isinstance(pos, dict):
        pos = (pos.get("x"), pos.get("y"))
    if not (
        isinstance(pos, (list, tuple))
        and len(pos) == 2
        and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in pos)
    ):
        raise BuilderError(f"position: expected [x, y] finite numbers, got {pos!r}")
    return float(pos[0]), float(pos[1])


def _direction(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if value not in DIRECTIONS:
        raise BuilderError(
            f"{where} direction: expected 'TB' (top to bottom), 'LR' (left to right) or None, got {value!r}"
        )
    return str(value)


def _optimizer(value: Any, where: str) -> dict[str, Any] | None:
    """An optimizer spec from a dict, a name (``adam``), JSON text, or empty for the run's default."""
    from amp_notebook.optim import OptimizerError, make_optimizer

    if isinstance(value, str):
        text = value.strip()
        if not text or text == "None":
            return None
        value = S.coerce(S.JSON, text, where) if text.startswith("{") else {"name": text}
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BuilderError(
            f'{where}: expected a name such as \'adam\' or {{"name": "adam", "lr": 0.002}}, got {value!r}'
        )
    try:
        make_optimizer(value)
    except OptimizerError as exc:
        raise BuilderError(f"{where}: {exc}") from None
    return dict(value)
