"""Saving a trace to a file and opening it again, for replay in the dashboard or analysis later.

Two formats:

* ``.npz`` (ours, exact): the event and staleness columns, the keys of every bundle (a member row per
  message: the index of its bundle's event row, and its key), the node names and the number of workers,
  in a numpy archive read back with ``allow_pickle=False`` (strings are stored as fixed-width unicode
  arrays). Version 1 files (before bundles) load with one message per row.
* ``.json``: a Chrome/Perfetto trace as :meth:`Trace.to_chrome` writes it (ours or the simulator's). The
  slices give every event row; queue depths come from the ``queue depth`` counters; staleness from the
  ``staleness <node>`` counters, which carry neither key nor worker: those rows get key -1 and the worker
  whose backward slice on that node spans their time. A bundle's slice carries ``messages`` and ``keys``.

:func:`load_trace` returns a :class:`~amp_notebook.trace.trace.Trace` over unbounded buffers, the same
class a live run gives, so every reader (metrics, windows, export, the dashboard) works on it. A file
that is not such a trace (missing, another format, pickled arrays, a Chrome trace from another tool, a
damaged export) is refused with a :class:`TraceFileError` naming the file and, in a Chrome trace, the
event that could not be read.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.trace.buffers import PHASES, WorkerBuffer

if TYPE_CHECKING:
    from amp_notebook.trace.trace import Trace

FORMAT = "amp_notebook.trace"
VERSION = 2
EVENT_KEYS = ("worker", "node", "phase", "key", "depth", "start", "end", "messages")
STALENESS_KEYS = ("worker", "node", "key", "value", "time")
MAX_WORKERS = 4096  # a worker index beyond this in a file is damage, not a machine (one buffer per worker)
# what reading untrusted JSON into buffers may raise (struct.error: a value beyond its packed column's range)
_UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, struct.error)


class TraceFileError(AmpError, ValueError):
    """A file that is not a trace amp_notebook can open; the message names the file and what is wrong."""


class TraceFileNotFoundError(TraceFileError, FileNotFoundError):
    """The trace file does not exist (still a ``FileNotFoundError``)."""


def save_trace(trace: Trace, path: str | Path) -> Path:
    """Write every row ``trace`` holds, its node names and worker count to ``path`` (.npz)."""
    path = Path(path)
    if path.suffix != ".npz":
        raise TraceFileError(f"save_trace: {path} should end in .npz (for Chrome/Perfetto JSON use trace.to_chrome)")
    ev, st = trace.events(), trace.staleness()
    arrays: dict[str, np.ndarray] = {f"event_{k}": np.asarray(ev[k]) for k in EVENT_KEYS}
    position = {(w, r): i for i, (w, r) in enumerate(zip(ev["worker"].tolist(), ev["row"].tolist(), strict=True))}
    members = [(position[wr], key) for wr, keys in trace.bundle_keys().items() if wr in position for key in keys]
    arrays["member_event"] = np.array([i for i, _ in members], dtype=np.int64)
    arrays["member_key"] = np.array([k for _, k in members], dtype=np.int64)
    arrays.update({f"staleness_{k}": np.asarray(st[k]) for k in STALENESS_KEYS})
    arrays["node_names"] = np.array(trace.node_names, dtype=str)
    header = {"format": FORMAT, "version": VERSION, "workers": trace.workers, "phases": list(PHASES)}
    arrays["header"] = np.array(json.dumps(header))
    np.savez_compressed(path, **arrays)
    return path


def load_trace(path: str | Path) -> Trace:
    """Open a trace saved by :func:`save_trace` (.npz) or a Chrome/Perfetto JSON export (.json)."""
    path = Path(path)
    if not path.exists():
        raise TraceFileNotFoundError(f"load_trace: no file {path}")
    if path.suffix == ".npz":
        return _load_npz(path)
    if path.suffix == ".json":
        return _load_chrome(path)
    raise TraceFileError(f"load_trace: {path}: expected a .npz saved by save_trace or a Chrome trace .json")


def from_columns(
    events: dict[str, np.ndarray],
    staleness: dict[str, np.ndarray],
    node_names: list[str],
    workers: int,
    bundles: dict[int, list[int]] | None = None,
) -> Trace:
    """A Trace holding the given rows (times in seconds from 0), one unbounded buffer per worker;
    ``bundles`` maps the index of a bundle's event row to the keys of its messages."""
    from amp_notebook.trace.trace import Trace

    buffers = [WorkerBuffer(capacity=None) for _ in range(workers)]
    bundles = bundles or {}
    ev_worker = np.asarray(events["worker"], dtype=np.int64)
    if "messages" not in events:
        events = {**events, "messages": np.ones(len(ev_worker), dtype=np.int64)}
    for w, buf in enumerate(buffers):
        mine = np.nonzero(ev_worker == w)[0]
        mine = mine[np.argsort(np.asarray(events["start"])[mine], kind="stable")]
        columns = ("node", "phase", "key", "start", "end", "depth", "messages")
        rows = zip(mine.tolist(), *(_column(events, k, mine) for k in columns), strict=True)
        for i, node, phase, key, start, end, depth, messages in rows:
            keys = bundles.get(i)
            if keys is not None and len(keys) > 1:
                buf.record_bundle(node, phase, keys, start, end, depth)
            else:
                buf.record(node, phase, key, start, end, depth, messages)
    st_worker = np.asarray(staleness["worker"], dtype=np.int64)
    for w, buf in enumerate(buffers):
        mine = np.nonzero(st_worker == w)[0]
        mine = mine[np.argsort(np.asarray(staleness["time"])[mine], kind="stable")]
        for node, key, value, time in zip(
            *(_column(staleness, k, mine) for k in ("node", "key", "value", "time")), strict=True
        ):
            buf.record_staleness(node, key, value, time)
    return Trace(buffers, node_names)


def _column(cols: dict[str, np.ndarray], name: str, rows: np.ndarray) -> list[Any]:
    dtype = np.float64 if name in ("start", "end", "time") else np.int64
    return np.asarray(cols[name])[rows].astype(dtype).tolist()


def _load_npz(path: Path) -> Trace:
    try:
        with np.load(path, allow_pickle=False) as z:
            try:
                header = json.loads(str(z["header"]))
            except KeyError:
                raise TraceFileError(
                    f"load_trace: {path} is an .npz but not a trace saved by save_trace (no header)"
                ) from None
            if not isinstance(header, dict):
                header = {"format": header}
            if header.get("format") != FORMAT or header.get("version") not in (1, VERSION):
                raise TraceFileError(
                    f"load_trace: {path}: expected format {FORMAT!r} version 1 or {VERSION}, found "
                    f"{header.get('format')!r} version {header.get('version')!r}"
                )
            events = {k: z[f"event_{k}"] for k in EVENT_KEYS if f"event_{k}" in z}
            staleness = {k: z[f"staleness_{k}"] for k in STALENESS_KEYS}
            names = [str(n) for n in z["node_names"]]
            bundles: dict[int, list[int]] = {}
            if "member_event" in z:
                for i, key in zip(z["member_event"].tolist(), z["member_key"].tolist(), strict=True):
                    bundles.setdefault(i, []).append(key)
            workers = _worker(path, None, int(header["workers"]) - 1) + 1
        return from_columns(events, staleness, names, workers, bundles)
    except TraceFileError:
        raise
    except (*_UNREADABLE, OSError, EOFError, zipfile.BadZipFile) as exc:  # pickled arrays, missing columns, damage
        raise TraceFileError(
            f"load_trace: {path}: not a readable trace archive ({type(exc).__name__}: {exc})"
        ) from None


def _load_chrome(path: Path) -> Trace:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceFileError(f"load_trace: {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise TraceFileError(f"load_trace: {path} is not JSON text ({type(exc).__name__})") from None
    events_in = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events_in, list):
        raise TraceFileError(f"load_trace: {path}: expected a Chrome trace with a 'traceEvents' list")
    try:
        return _read_chrome_events(path, events_in)
    except TraceFileError:
        raise
    except _UNREADABLE as exc:
        raise TraceFileError(
            f"load_trace: {path}: an event could not be read ({type(exc).__name__}: {exc}); only traces written by "
            "amp_notebook (trace.to_chrome) can be opened"
        ) from None


def _read_chrome_events(path: Path, events_in: list[Any]) -> Trace:
    names: list[str] = []
    index: dict[str, int] = {}

    def node_id(name: str) -> int:
        if name not in index:
            index[name] = len(names)
            names.append(name)
        return index[name]

    ev: dict[str, list[Any]] = {k: [] for k in EVENT_KEYS}
    st: dict[str, list[Any]] = {k: [] for k in STALENESS_KEYS}
    bundles: dict[int, list[int]] = {}
    depth_at: dict[int, list[tuple[float, int]]] = {}
    workers = 0
    for n, e in enumerate(events_in):
        if not isinstance(e, dict):
            raise TraceFileError(f"load_trace: {path}: event #{n} is {type(e).__name__}, expected an object")
        ph = e.get("ph")
        if ph == "X":
            args = e.get("args", {})
            args = args if isinstance(args, dict) else {}
            phase = args.get("phase", e.get("cat"))
            if phase not in PHASES or "node" not in args:
                raise TraceFileError(
                    f"load_trace: {path}: slice #{n} ({e.get('name')!r}) lacks args.node or a phase in {PHASES}; "
                    "only traces written by amp_notebook (trace.to_chrome) can be opened"
                )
            w = _worker(path, n, int(e["tid"]) - 1)
            workers = max(workers, w + 1)
            ev["worker"].append(w)
            ev["node"].append(node_id(args["node"]))
            ev["phase"].append(PHASES.index(phase))
            ev["key"].append(int(args.get("key", -1)))
            ev["start"].append(float(e["ts"]) / 1e6)
            ev["end"].append((float(e["ts"]) + float(e.get("dur", 0.0))) / 1e6)
            ev["depth"].append(0)
            ev["messages"].append(int(args.get("messages", 1)))
            if "keys" in args:
                bundles[len(ev["worker"]) - 1] = [int(k) for k in args["keys"]]
        elif ph == "C" and str(e.get("name", "")).startswith("queue depth worker "):
            w = _worker(path, n, int(str(e["name"]).rsplit(" ", 1)[1]))
            depth_at.setdefault(w, []).append((float(e["ts"]) / 1e6, int(e["args"]["depth"])))
        elif ph == "C" and str(e.get("name", "")).startswith("staleness "):
            st["worker"].append(0)
            st["node"].append(node_id(str(e["name"])[len("staleness ") :]))
            st["key"].append(-1)
            st["value"].append(int(e["args"]["staleness"]))
            st["time"].append(float(e["ts"]) / 1e6)
    events = {k: np.asarray(v) for k, v in ev.items()}
    for w, samples in depth_at.items():  # a counter holds its value until it changes
        times = np.array([t for t, _ in samples])
        values = np.array([d for _, d in samples])
        mine = np.nonzero(events["worker"] == w)[0]
        at = np.searchsorted(times, events["start"][mine], side="right") - 1
        events["depth"][mine] = np.where(at >= 0, values[np.maximum(at, 0)], 0)
    staleness = {k: np.asarray(v) for k, v in st.items()}
    staleness["worker"] = _owner_of_gradients(events, staleness)
    return from_columns(events, staleness, names, max(workers, 1), bundles)


def _worker(path: Path, event: int | None, index: int) -> int:
    if not 0 <= index < MAX_WORKERS:
        where = f"event #{event}" if event is not None else "the header"
        raise TraceFileError(
            f"load_trace: {path}: {where} names worker {index}, expected 0 to {MAX_WORKERS - 1}; the file is damaged"
        )
    return index


def _owner_of_gradients(events: dict[str, np.ndarray], staleness: dict[str, np.ndarray]) -> np.ndarray:
    """The worker of each staleness row: the one whose backward slice on that node spans the row's time
    (a gradient's staleness is recorded while its node handles it); 0 where none does."""
    owner = np.zeros(len(staleness["time"]), dtype=np.int64)
    bwd = events["phase"] == PHASES.index("bwd")
    for node in np.unique(staleness["node"]):
        rows = np.nonzero(staleness["node"] == node)[0]
        mine = np.nonzero(bwd & (events["node"] == node))[0]
        if len(mine) == 0:
            continue
        mine = mine[np.argsort(events["start"][mine], kind="stable")]
        at = np.searchsorted(events["start"][mine], staleness["time"][rows] + 1e-7, side="right") - 1
        ok = at >= 0
        hit = mine[np.maximum(at, 0)]
        ok &= staleness["time"][rows] <= events["end"][hit] + 1e-6
        owner[rows[ok]] = events["worker"][hit[ok]]
    return owner


__all__ = ["TraceFileError", "TraceFileNotFoundError", "from_columns", "load_trace", "save_trace"]
