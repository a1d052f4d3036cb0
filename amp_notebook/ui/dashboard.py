"""The live dashboard: ``Dashboard(run)`` shows a run while it trains; ``Dashboard.replay`` and
``Dashboard.compare`` show finished traces.

The browser side (``widgets/src/dashboard``, built into ``ui/static/dashboard.js`` at install) draws a
Gantt chart on a canvas, one lane per worker, boxes coloured by phase as in the paper's Fig. 1 (forward
orange, backward blue, update yellow), plus queue depths, keys in flight, staleness histograms, loss and
accuracy, throughput and utilization; it has the controls (pause, resume, stop, ``max_active_keys``,
``min_update_frequency`` and ``max_bundle`` sliders, follow live or scroll back, zoom and pan, a time slider
for replays, Perfetto export). A bundle of messages is one box labelled with its message count; its
tooltip lists the keys.

Python owns the data and the run; the browser only draws and asks. A feed thread sends the rows written
since its last look (:class:`~amp_notebook.ui.feed.LiveFeed`) as binary columns, ``rate_hz`` times a
second, until the run ends; the browser keeps at most ``max_boxes`` of them (older ones drop off), so
neither side grows with the run. The browser's requests (``{"type": "control", ...}``, ``export``,
``checkpoint``, ``ready``) come back as widget messages, are checked against their JSON Schemas
(:mod:`amp_notebook.ui.messages`: a junk field, a wrong type or an out-of-range value is refused and
nothing changes) and are applied to the run here, where a bad value gets the same error as in Python,
shown in the widget. *Save checkpoint* calls ``run.save(path)`` (the run drains its keys in flight, is
captured and goes on) and answers with the file's path; a run that got stuck carries the watchdog's
diagnosis in its status, and one that skips non-finite keys their count, both of which the widget shows.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from amp_notebook.errors import AmpError, SettingError, SettingTypeError
from amp_notebook.ir.graph import Graph
from amp_notebook.runtime.config import RunConfig, Setting
from amp_notebook.runtime.run import Run
from amp_notebook.trace.io import load_trace
from amp_notebook.trace.trace import Trace
from amp_notebook.ui.feed import HISTORY_S, Frame, LiveFeed, static_frames
from amp_notebook.ui.messages import CONTROL_ACTIONS, refusal

STATIC = Path(__file__).parent / "static"
MAX_DOWNLOAD_BYTES = 64 * 2**20  # larger exports are written to a file only
MAX_ERRORS = 100  # errors a dashboard keeps (the latest): a browser that sends junk for hours holds no more
SLIDER_MAX = {"max_active_keys": 64, "min_update_frequency": 1000, "max_bundle": 64}  # or the run's value if larger


class ControlError(AmpError, ValueError):
    """A control request the dashboard refused (unknown action, a value that is not a whole number)."""


class NoRunError(AmpError, RuntimeError):
    """A control request to a dashboard that shows a finished trace: there is no run to control."""


def _bundle(name: str) -> Path | str:
    """The built front end, or (not built) a module that says so in the notebook instead of failing."""
    path = STATIC / name
    if path.exists():
        return path
    if name.endswith(".css"):
        return ""
    message = (
        f"amp_notebook: the widget front end {path} is missing. It is built from widgets/ when the package "
        "is installed, which needs node and npm: reinstall with `pip install -e .`, or run "
        "`npm install && npm run build` in widgets/."
    )
    return "export default { render({ el }) { el.textContent = " + json.dumps(message) + "; } };"


class Dashboard(anywidget.AnyWidget):
    """Live view of a background :class:`Run` (``train(..., background=True)``), or of finished traces."""

    _esm = _bundle("dashboard.js")
    _css = _bundle("dashboard.css")

    mode = traitlets.Unicode("live").tag(sync=True)  # live | replay | compare
    runs = traitlets.List().tag(sync=True)  # per run shown: label, workers, node_names, parameterized
    rate_hz = traitlets.Float(4.0).tag(sync=True)
    window_s = traitlets.Float(5.0).tag(sync=True)  # time span shown when following live
    max_boxes = traitlets.Int(250_000).tag(sync=True)  # rows the browser keeps per run
    controls = traitlets.Dict().tag(sync=True)  # slider ranges; empty in replay
    measure_draw = traitlets.Int(0).tag(sync=True)  # > 0: the browser times that many full redraws
    frontend_stats = traitlets.Dict().tag(sync=True)  # written by the browser: draw times, boxes held
    height = traitlets.Int(0).tag(sync=True)  # Gantt height in px; 0 = by lanes

    def __init__(
        self,
        run: Run | None = None,
        *,
        rate_hz: float = 4.0,
        window_s: float = 5.0,
        max_boxes: int = 250_000,
        history_s: float = HISTORY_S,
        export_path: str | Path | None = None,
        checkpoint_path: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.5 <= rate_hz <= 30:
            raise SettingError(
                "rate_hz", f"Dashboard: rate_hz should be between 0.5 and 30 updates per second, got {rate_hz}"
            )
        if max_boxes < 1000:
            raise SettingError("max_boxes", f"Dashboard: max_boxes should be at least 1000, got {max_boxes}")
        super().__init__(rate_hz=rate_hz, window_s=window_s, max_boxes=max_boxes, **kwargs)
        self.history_s = history_s
        self.export_path = export_path
        self.checkpoint_path = checkpoint_path
        self._run = run
        self._traces: list[Trace] = []
        self._static: list[list[Frame]] = []
        self._lock = threading.Lock()  # one frame at a time: the feed thread and message handlers both send
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._feed: LiveFeed | None = None
        self.errors: deque[str] = deque(maxlen=MAX_ERRORS)  # the latest errors of requests (also shown in the widget)
        self.feed_busy_s = 0.0  # time the feed thread spent reading, packing and sending frames
        self.on_msg(self._on_msg)
        if run is not None:
            if not isinstance(run, Run):
                raise SettingTypeError(
                    "run",
                    f"Dashboard(run): expected a Run from train(..., background=True), got {type(run).__name__}; "
                    "for a finished result or a saved trace use Dashboard.replay(...)",
                )
            plan = run.plan
            self.runs = [self._describe(run.trace, "run", plan.parameterized, plan.graph)]
            status = run.status
            self.controls = {  # a slider per live knob: its least value declared by the setting
                "mode": run.mode,
                **{s.name: _slider(s, status[s.name]) for s in RunConfig.settings() if s.live},
                "checkpoint": True,
            }
            self._feed = LiveFeed(run, history_s=history_s)
            self._thread = threading.Thread(target=self._stream, name="amp-dashboard-feed", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ other sources
    @classmethod
    def replay(cls, source: Any, label: str | None = None, graph: Graph | None = None, **kwargs: Any) -> Dashboard:
        """A finished trace in the dashboard with a time slider. ``source``: a TrainResult, a finished Run,
        a Trace, or a path to a trace saved with ``save_trace`` (.npz) or exported to Chrome JSON. With the
        run's ``graph`` the Gantt can draw arrows for messages between workers."""
        return cls._static_view([source], [label], "replay", graph, **kwargs)

    @classmethod
    def compare(
        cls,
        a: Any,
        b: Any,
        labels: tuple[str | None, str | None] = (None, None),
        graph: Graph | None = None,
        **kwargs: Any,
    ) -> Dashboard:
        """Two finished runs one above the other on a shared time axis (e.g. sync vs amp)."""
        return cls._static_view([a, b], list(labels), "compare", graph, **kwargs)

    @classmethod
    def _static_view(
        cls, sources: list[Any], labels: list[str | None], mode: str, graph: Graph | None, **kwargs: Any
    ) -> Dashboard:
        dash = cls(mode=mode, **kwargs)
        runs = []
        for i, (source, label) in enumerate(zip(sources, labels, strict=True)):
            trace, history, name = _as_trace(source)
            dash._traces.append(trace)
            dash._static.append(static_frames(trace, run=i, history=history))
            runs.append(dash._describe(trace, label or name or f"run {i}", None, graph))
        dash.runs = runs
        return dash

    @staticmethod
    def _describe(trace: Trace, label: str, parameterized: list[bool] | None, graph: Graph | None) -> dict[str, Any]:
        index = {name: i for i, name in enumerate(trace.node_names)}
        edges = set() if graph is None else {(index[e.src], index[e.dst]) for e in graph.edges
                                             if e.src in index and e.dst in index}  # fmt: skip
        return {
            "label": label,
            "workers": trace.workers,
            "node_names": list(trace.node_names),
            "parameterized": None if parameterized is None else list(parameterized),
            "edges": [list(e) for e in sorted(edges)],  # forward edges as node index pairs, for message arrows
        }

    # ------------------------------------------------------------------ streaming
    def _stream(self) -> None:
        assert self._feed is not None
        period = 1.0 / self.rate_hz
        while not self._closed.is_set():
            began = time.perf_counter()
            try:
                with self._lock:
                    frame = self._feed.poll()
                    self._emit(frame)
            except Exception as exc:  # say so in the widget rather than freeze silently; the run goes on
                message = f"the dashboard's feed stopped: {type(exc).__name__}: {exc}"
                self.errors.append(message)
                self.send({"type": "error", "message": message})
                return
            busy = time.perf_counter() - began
            self.feed_busy_s += busy
            if self._feed.finished:  # that poll began after the run ended: it read every row
                return
            self._closed.wait(max(0.0, period - busy))

    def _emit(self, frame: Frame) -> None:
        """Send one frame to every open view (a no-op outside a kernel)."""
        self.send(frame.content, frame.buffers)

    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: list[Any]) -> None:
        problem = refusal("dashboard message", content)
        if problem is None and content["type"] == "control":
            problem = refusal("control", content, field="action")
        if problem is not None:  # junk fields, wrong types, out-of-range values: refused, nothing changes
            self.errors.append(problem)
            self.send({"type": "error", "message": problem})
            return
        kind = content["type"]
        try:
            if kind == "ready":
                self._send_all()
            elif kind == "control":
                self.control(content["action"], content.get("value"), content.get("node"))
            elif kind == "export":
                self._export(bool(content.get("download", True)))
            elif kind == "checkpoint":
                path = self.save_checkpoint()
                self.send({"type": "checkpointed", "path": str(path), "bytes": path.stat().st_size})
        except Exception as exc:  # shown in the widget; the kernel and the run go on
            message = f"{type(exc).__name__}: {exc}"
            self.errors.append(message)
            self.send({"type": "error", "message": message})

    def _send_all(self) -> None:
        """A view opened: give it everything it should hold."""
        with self._lock:
            if self._feed is not None:
                self._emit(self._feed.snapshot(self.history_s))
                return
            self.send({"type": "reset", "meta": None})
            for frames in self._static:
                for frame in frames:
                    self._emit(frame)

    # ------------------------------------------------------------------ requests
    def control(self, action: str, value: Any = None, node: str | None = None) -> None:
        """Apply a request from the controls to the run (the same as calling the Run's method)."""
        run = self._require_run(action)
        if action == "pause":
            run.pause()
        elif action == "resume":
            run.resume()
        elif action == "stop":
            run.stop(wait=False)
        elif action == "max_active_keys":
            run.set_max_active_keys(_as_int(value, "max_active_keys"))
        elif action == "min_update_frequency":
            run.set_min_update_frequency(node, _as_int(value, "min_update_frequency"))
        elif action == "max_bundle":
            run.set_max_bundle(node, _as_int(value, "max_bundle"))
        else:
            raise ControlError(f"control: unknown action {action!r}; expected one of {CONTROL_ACTIONS}")
        if self._feed is not None:  # show the change at once, not at the next tick
            with self._lock:
                self._emit(self._feed.poll())

    def export(self, path: str | Path | None = None) -> Path:
        """Write the trace shown (the first run's) as Chrome/Perfetto JSON; returns the path."""
        trace = self._run.trace if self._run is not None else self._traces[0]
        target = Path(path or self.export_path or f"amp_trace_{time.strftime('%Y%m%d_%H%M%S')}.json")
        trace.to_chrome(target)
        return target.resolve()

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Save a checkpoint of the live run (``run.save``: drain, capture, go on); returns the file's path.
        Without ``path``: ``checkpoint_path``, or a timestamped ``amp_checkpoint_*.npz`` here."""
        run = self._require_run("checkpoint")
        target = Path(path or self.checkpoint_path or f"amp_checkpoint_{time.strftime('%Y%m%d_%H%M%S')}.npz")
        return run.save(target).resolve()

    def _export(self, download: bool) -> None:
        path = self.export()
        buffers = []
        size = path.stat().st_size
        if download and size <= MAX_DOWNLOAD_BYTES:
            buffers = [path.read_bytes()]
        self.send({"type": "exported", "path": str(path), "bytes": size, "download": bool(buffers)}, buffers)

    def _require_run(self, action: str) -> Run:
        if self._run is None:
            raise NoRunError(f"{action}: this dashboard shows a finished trace ({self.mode}); there is no run")
        return self._run

    # ------------------------------------------------------------------ lifecycle
    @property
    def run(self) -> Run | None:
        return self._run

    def wait_feed(self, timeout: float | None = None) -> bool:
        """Wait until the feed thread has sent the run's last rows (after the run ended); False on timeout."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop the feed thread (the run goes on) and close the widget."""
        closed, thread = getattr(self, "_closed", None), getattr(self, "_thread", None)
        if closed is not None:  # None when __init__ refused its arguments
            closed.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        super().close()


def _slider(knob: Setting, now: int | dict[str, int]) -> dict[str, int]:
    """A live knob's slider: from the setting's least value to SLIDER_MAX or the run's value (its largest
    over nodes for a per-node knob), whichever is larger."""
    largest = max(now.values(), default=1) if isinstance(now, dict) else now
    return {"min": int(knob.minimum or 0), "max": max(SLIDER_MAX.get(knob.name, 64), largest)}


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or int(value) != value:
        raise ControlError(f"{name}: expected a whole number, got {value!r}")
    return int(value)


def _as_trace(source: Any) -> tuple[Trace, list[dict[str, Any]] | None, str | None]:
    """(trace, epoch history as dicts or None, a label) of a TrainResult, Run, Trace or trace file."""
    from amp_notebook.runtime.result import TrainResult

    if isinstance(source, Trace):
        return source, None, None
    if isinstance(source, str | Path):
        return load_trace(source), None, Path(source).stem
    if isinstance(source, Run):
        if not source.done:
            raise SettingError("source", "Dashboard.replay: this run is still going; show it live with Dashboard(run)")
        source = source.wait()
    if isinstance(source, TrainResult):
        return source.trace, [e.as_dict() for e in source.history], source.config.mode
    raise SettingTypeError(
        "source",
        f"Dashboard.replay: expected a TrainResult, a finished Run, a Trace or a path to a trace file, "
        f"got {type(source).__name__}",
    )


__all__ = ["ControlError", "Dashboard", "NoRunError"]
