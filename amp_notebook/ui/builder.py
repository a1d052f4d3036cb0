"""``GraphBuilder``: the visual IR graph builder, an anywidget whose front end lives in widgets/src/builder/.

The widget is thin (ARCHITECTURE.md, section 5): the browser sends intents, :class:`BuilderModel`
(builder_model.py) applies them to the IR graph, validates, and the widget syncs the resulting view back.
Every intent is also a Python method, so a notebook builds a graph step by step with the same operations
the canvas uses, and sees each step on the canvas at once::

    b = GraphBuilder()
    b.add_node("input", name="x", config={"width": 64})
    b.add_node("linear", name="fc", config={"in_features": 64, "out_features": 10})
    b.connect("x", "out", "fc", "in")
    b.problems()          # what is still missing, each message naming node, port and fix
    b.graph               # the IR Graph
    run = b.train(data)   # a background Run; the live dashboard opens beside the canvas

Displayed, the builder shows itself in a row with a side panel where the dashboard of its runs appears.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets
import traitlets as t

from amp_notebook.errors import AmpError
from amp_notebook.ir.codegen import graph_to_python
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict, parse_graph_json
from amp_notebook.models import zoo as model_zoo
from amp_notebook.ui import builder_schema as S
from amp_notebook.ui.builder_model import BuilderError, BuilderModel
from amp_notebook.ui.messages import refusal

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amp_notebook.data.batch import Dataset
    from amp_notebook.runtime.run import Run
    from amp_notebook.ui.dashboard import Dashboard

_STATIC = Path(__file__).parent / "static"
_MISSING = """export default { render({ el }) {
  el.textContent = "amp_notebook: the builder's front end is not built; run `npm install && npm run build` in widgets/";
} };"""
STATUS_PERIOD_S = 0.5


class GraphBuilder(anywidget.AnyWidget):
    """Build, check, place and train an IR graph on a canvas; Python owns the graph (see module doc)."""

    _esm = _STATIC / "builder.js" if (_STATIC / "builder.js").exists() else _MISSING
    _css = _STATIC / "builder.css" if (_STATIC / "builder.css").exists() else ""

    view = t.Dict().tag(sync=True)
    palette = t.List().tag(sync=True)
    zoo = t.List().tag(sync=True)  # the model zoo's menu: [{"name", "description"}] in the registry's order
    notice = t.Dict().tag(sync=True)  # the last refusal or message: {"seq", "level", "text"}; {} after a load
    # the last export asked for from the canvas, {"seq", "format", "text"}: its text follows the graph's
    # edits; {} after a load
    export = t.Dict().tag(sync=True)
    run_status = t.Unicode("").tag(sync=True)
    perf = t.Dict().tag(sync=True)  # set by the browser: {"nodes", "layout_ms", "render_ms"} of the last layout
    height = t.Int(0).tag(sync=True)  # canvas height in px; 0: fits the graph (builder/fit.js)

    def __init__(self, graph: Graph | None = None, workers: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = BuilderModel(graph, workers=workers)
        self._generation = self.model.generation  # of the graph the notice and the export are about
        self.model.on_change = self._sync
        self.palette = S.palette()
        self.zoo = [{"name": entry.name, "description": entry.description} for entry in model_zoo.ENTRIES]
        self.train_data: Dataset | None = None  # what Train trains on (a loaded zoo model brings its own)
        self.train_options: dict[str, Any] = {}  # amp.train keywords for Train, over a zoo model's settings
        self._zoo_data: dict[str, Dataset] = {}  # zoo name -> its small dataset, made on the first Train
        self.run: Run | None = None
        self.dashboard: Dashboard | None = None  # the live dashboard of the last run started here
        self._seq = 0
        # beside the canvas when the notebook is wide enough for both, below it otherwise (the row wraps)
        self._side = ipywidgets.Output(layout=ipywidgets.Layout(display="none", flex="1 1 520px", min_width="0"))
        self.layout = ipywidgets.Layout(flex="1 1 640px", min_width="0")
        self._panel: ipywidgets.HBox | None = None
        self.on_msg(self._on_msg)
        self._sync()

    # ----------------------------------------------------------- the graph
    @property
    def graph(self) -> Graph:
        """The IR graph being built (live: edit it inside ``with builder.edit() as g:`` to see it drawn)."""
        return self.model.graph

    @graph.setter
    def graph(self, graph: Graph) -> None:
        self.load(graph)

    @property
    def workers(self) -> int:
        return self.model.workers

    @workers.setter
    def workers(self, n: int) -> None:
        self._do(self.model.set_workers, n)

    # ----------------------------------------------------- intents from Python
    def add_node(self, kind: str, name: str | None = None, position: Any = None,
                 config: dict[str, Any] | None = None, **attrs: Any) -> str:  # fmt: skip
        return self._do(self.model.add_node, kind, name, position, config, **attrs)

    def add_cell(self, kind: str, name: str | None = None, position: Any = None, **fields: Any) -> list[str]:
        return self._do(self.model.add_cell, kind, name, position, **fields)

    def connect(self, src: str, src_port: str, dst: str, dst_port: str) -> None:
        self._do(self.model.connect, src, src_port, dst, dst_port)

    def disconnect(self, dst: str, dst_port: str) -> None:
        self._do(self.model.disconnect, dst, dst_port)

    def set_property(self, node: str, field: str, value: Any) -> None:
        self._do(self.model.set_property, node, field, value)

    def delete(self, *nodes: str) -> None:
        self._do(self.model.delete, list(nodes))

    def move(self, node: str, x: float, y: float) -> None:
        self._do(self.model.move, {node: (x, y)})

    def undo(self) -> None:
        self._do(self.model.undo)

    def redo(self) -> None:
        self._do(self.model.redo)

    def load(self, graph: Graph | dict[str, Any] | str) -> None:
        """Load a Graph, its JSON dict or JSON text (data only: loading never runs code)."""
        if isinstance(graph, str):
            try:
                graph = parse_graph_json(graph, "load")
            except AmpError as exc:
                self._notify("error", str(exc))
                raise BuilderError(str(exc)) from None
        self._do(self.model.load, graph)

    def load_model(self, name: str) -> None:
        """Load a model-zoo graph: one of ``ZOO_MODELS`` (mlp, rnn, rnn-x2, tree-lstm, ggsnn, ...,
        bilstm-tagger; ``tree_lstm`` spellings too); Train then brings its data and settings (:meth:`train`)."""
        self._do(self.model.load_model, name)

    def auto_layout(self, direction: str | None = None) -> None:
        """Lay the graph out again: ``"TB"`` top to bottom, ``"LR"`` left to right, None: by its shape."""
        self._do(self.model.auto_layout, direction)

    def auto_place(self, strategy: str = "round_robin") -> dict[str, int]:
        return self._do(self.model.auto_place, strategy)

    def pin(self, nodes: str | list[str], worker: int | None) -> None:
        """Pin one node or several to ``worker`` (None unpins them: the placement heuristic chooses)."""
        self._do(self.model.pin, [nodes] if isinstance(nodes, str) else list(nodes), worker)

    def apply(self, intent: dict[str, Any]) -> Any:
        """Apply an intent dict exactly as the canvas sends it."""
        return self._do(self.model.apply, intent)

    @contextmanager
    def edit(self) -> Iterator[Graph]:
        """Edit :attr:`graph` with the builder API; one undo step, drawn when the block ends."""
        try:
            with self.model.edit() as g:
                yield g
        except BuilderError as exc:
            self._notify("error", str(exc))
            raise

    def refresh(self) -> None:
        """Redraw after editing :attr:`graph` directly (outside :meth:`edit`)."""
        self.model.layout({})
        self._sync()

    # ----------------------------------------------------------- inspection
    def problems(self) -> list[str]:
        """Every validation message of the graph (empty when it can train)."""
        return [p.message for p in self.model.problems(require_loss=True)]

    def to_json(self) -> str:
        return json.dumps(graph_to_dict(self.graph), indent=1)

    def to_python(self, form: str = "builder") -> str:
        """Python code that recreates the graph. ``form="builder"``: builder calls, generated from data (see
        amp_notebook/ir/codegen.py). ``form="source"``: for a graph made by ``amp.compile``, the model function
        it was compiled from and the compile call, as long as its structure is unchanged (attributes changed
        since, such as a pinned worker, follow as assignments); otherwise builder calls under a comment that
        says why (see amp_notebook/compiler/pyform.py)."""
        if form == "source":
            from amp_notebook.compiler.pyform import python_form

            return python_form(self.graph)
        if form != "builder":
            raise BuilderError(f"to_python form: expected 'builder' or 'source', got {form!r}")
        return graph_to_python(self.graph)

    # ------------------------------------------------------------- training
    def train(self, data: Dataset | None = None, **options: Any) -> Run:
        """Start a background run of (a copy of) the graph and open the live dashboard beside the canvas.

        The data: ``data``, else :attr:`train_data`, else, for a graph loaded from the model zoo
        (:meth:`load_model`, edits since included), that model's small dataset (seed 0, the one its graph
        was sized for). The settings, each over the one before: a zoo model's recommended settings,
        :attr:`train_options`, the builder's ``workers``, then ``options`` (keywords of
        :func:`amp_notebook.train`)."""
        return self._do(self._start_run, data, options)

    def _start_run(self, data: Dataset | None, options: dict[str, Any]) -> Run:
        from amp_notebook.runtime.train import train

        data = data if data is not None else self.train_data
        entry = model_zoo.get(self.model.zoo_model) if self.model.zoo_model is not None else None
        if data is None and entry is None:
            raise BuilderError(
                "no training data: set builder.train_data = <a Dataset> (or call builder.train(data)), or load "
                "a zoo model, which brings its own"
            )
        problems = self.problems()
        if problems:
            raise BuilderError(f"cannot train yet, {len(problems)} problem(s):\n  - " + "\n  - ".join(problems))
        if self.run is not None and not self.run.done:
            self.run.stop(wait=False)
        graph = graph_from_dict(graph_to_dict(self.graph))  # later edits must not reach the running graph
        zoo_data = data is None
        if data is None and entry is not None:
            if entry.name not in self._zoo_data:
                self._zoo_data[entry.name] = entry.dataset("small")
            data = self._zoo_data[entry.name]
        recommended = entry.settings.train_kwargs() if entry is not None else {}
        settings = {**recommended, **self.train_options, "workers": self.workers, **options, "background": True}
        run = train(graph, data, **settings)
        if entry is not None:
            self._notify("info", _zoo_run_text(entry.name, graph, data if zoo_data else None, settings))
        self.run = run
        self._show_dashboard(run)
        threading.Thread(target=self._watch, args=(run,), daemon=True, name="builder-run-status").start()
        return run

    # ------------------------------------------------------------- plumbing
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        if self._panel is None:
            row = ipywidgets.Layout(width="100%", flex_flow="row wrap", align_items="flex-start")
            self._panel = ipywidgets.HBox([self, self._side], layout=row)
        return self._panel._repr_mimebundle_(**kwargs)

    def _do(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BuilderError as exc:
            self._notify("error", str(exc))
            raise

    def _notify(self, level: str, text: str) -> None:
        self._seq += 1
        self.notice = {"seq": self._seq, "level": level, "text": text}

    def _sync(self) -> None:
        """Send the view; a notice and an export about another graph (one loaded before) go first, and an
        export of this graph is kept current (its dialog in the browser may be open)."""
        view = self.model.view()
        if view["generation"] != self._generation:
            self._generation = view["generation"]
            self.notice = {}
            self.export = {}
        elif self.export:
            self.export = self._export_text(self.export["format"], self.export["seq"])
        self.view = view

    def _export_text(self, fmt: str, seq: int) -> dict[str, Any]:
        text = self.to_python() if fmt == "python" else self.to_json()
        return {"seq": seq, "format": fmt, "text": text}

    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        problem = refusal("builder message", content)  # junk is refused before anything acts on it
        if problem is not None:
            self._notify("error", problem)
            return
        kind = content["type"]
        try:
            if kind == "intent":
                self.model.apply(content.get("intent"))
            elif kind == "export":
                self._seq += 1
                self.export = self._export_text("python" if content.get("format") == "python" else "json", self._seq)
            elif kind == "train":
                self._start_run(None, {})
        except BuilderError as exc:
            self._notify("error", str(exc))
        except Exception as exc:  # a bug must show on the canvas, not vanish in the kernel log
            self._notify("error", f"{type(exc).__name__}: {exc}")

    def _show_dashboard(self, run: Run) -> None:
        from amp_notebook.ui.dashboard import Dashboard

        if self.dashboard is not None:  # the previous run's: its feed thread stops, its run was stopped
            self.dashboard.close()
        self._side.layout.display = "flex"
        self._side.clear_output()
        self.dashboard = Dashboard(run)
        self._side.append_display_data(self.dashboard)

    def _watch(self, run: Run) -> None:
        """Mirror the run's status into ``run_status`` until it ends."""
        while True:
            s = run.status
            loss = "" if s["recent_loss"] is None else f", recent train loss {s['recent_loss']:.3f}"
            self.run_status = (
                f"run {s['state']}: epoch {s['epoch'] + 1}/{s['epochs']}, {s['keys_done']} keys done{loss}"
                + (f" ({s['error']})" if s["error"] else "")
            )
            if run.done or self.run is not run:
                return
            threading.Event().wait(STATUS_PERIOD_S)


def _zoo_run_text(name: str, graph: Graph, data: Dataset | None, settings: dict[str, Any]) -> str:
    """What a Train of zoo model ``name`` trains on (``data``: the zoo's dataset; None: the user's) and with."""
    said = []
    optimizer = settings.get("optimizer")
    if isinstance(optimizer, dict):
        extra = [f"{k}={v}" for k, v in optimizer.items() if k != "name"]
        said.append(f"optimizer {' '.join([str(optimizer.get('name', '?')), *extra])}")
    elif optimizer is not None:
        said.append(f"optimizer {optimizer}")
    said += [f"{key} {settings[key]}" for key in ("epochs", "max_active_keys") if key in settings]
    own = sorted({n.min_update_frequency for n in graph.nodes.values() if n.min_update_frequency is not None})
    frequency = f"min_update_frequency {settings.get('min_update_frequency', 1)}"
    said.append(frequency + (f" (nodes' own: {', '.join(map(str, own))})" if own else ""))
    on = "" if data is None else (
        f" on its small dataset ({data.name}: {data.train_instances:,} training instances, "
        f"{data.val_instances:,} validation)"
    )  # fmt: skip
    return f"training the zoo's {name}{on}; {', '.join(said)}"
