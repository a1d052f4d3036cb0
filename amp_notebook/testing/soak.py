"""Soak: a background run trains for minutes with its dashboard fed and its knobs turned, while its
resident memory is sampled. Memory must be flat once the run has warmed up.

What it runs. A model (``rnn``: the list-reduction RNN; ``tree-lstm``: the per-tree Tree-LSTM, one tree
per key) trains with ``train(..., background=True)`` on 2 workers in ``amp`` mode, for as many epochs as
the time allows (validation keys included), on the engine ``engine`` picks (``auto``: the native one when
it is built). A :class:`~amp_notebook.ui.dashboard.Dashboard` follows it at
4 Hz, its frames sent nowhere (no browser; without the notebook extra, a
:class:`~amp_notebook.ui.feed.LiveFeed` is polled instead). Every few seconds a knob changes as a slider
would change it (``Dashboard.control``): ``max_active_keys``, ``min_update_frequency``, ``max_bundle``, and
a pause followed by a resume.

What it reports. Resident memory every ``sample_s`` seconds with the keys done so far; after the warm-up
(by default the first 5 minutes, or a third of a shorter soak: the trace buffers fill, the allocator and
caches warm up; with ``after_full_s``, that long after the trace buffers are full), the growth rate as a
robust (Theil-Sen) slope in MB per minute and in bytes per key (:mod:`amp_notebook.testing.memory`), and
the growth from the warm-up's end to the end (medians of three samples each), all over the samples taken
while the run trained (not paused); when every worker's trace buffer first dropped rows (it is full from
then on); the threads of the run still alive after it stopped; every error met (the run's, the
dashboard's, a knob change's); what the session (and a native engine) still holds per key after the run;
and with ``sites``,
the source lines whose Python allocations grew most after the warm-up (their baseline snapshot then counts
in the resident memory too). With ``trim``, cyclic garbage is collected and the heap trimmed before each
sample, so the figures count what the process can still reach: a test of what is kept per key, not of
how the allocator reuses memory.

Run it::

    python -m amp_notebook.testing.soak --minutes 30 --model tree-lstm --engine native --json

It exits 1 when the run failed, an error was met, a thread of the run was left alive, or the slope after
the warm-up exceeds ``--max-slope`` MB/min (default 0.4: 10 MB over the 25 minutes after the warm-up of a
30-minute soak).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from amp_notebook.errors import SettingError
from amp_notebook.runtime.config import RunConfig
from amp_notebook.testing.memory import AllocationSites, bookkeeping, robust_slope, rss_mb, trim_heap

MODELS = ("rnn", "tree-lstm")
KNOBS = (
    ("max_active_keys", 8), ("min_update_frequency", 4), ("max_bundle", 4), ("pause", None), ("resume", None),
    ("max_active_keys", 2), ("min_update_frequency", 1), ("max_bundle", 1), ("max_active_keys", 4),
)  # fmt: skip
MAX_SLOPE_MB_PER_MIN = 0.4
THREAD_GRACE_S = 10.0
MAX_FILL_S = 300.0  # with after_full_s: how long a soak waits for the trace buffers to fill
DEFAULT_CAPACITY = RunConfig.setting("trace_capacity").default
ENGINES = ("auto", "native", "python")


def workload(model: str, seed: int = 0) -> tuple[Any, Any, dict[str, Any]]:
    """The graph, data and settings of a soak of ``model`` (epochs: as many as the time allows)."""
    from amp_notebook import models
    from amp_notebook.data import list_reduction_dataset
    from amp_notebook.data.sentiment import sentiment_tree_dataset

    settings: dict[str, Any] = {"workers": 2, "mode": "amp", "max_active_keys": 4, "epochs": 10**9, "seed": seed,
                                "optimizer": {"name": "adam", "lr": 1e-3}}  # fmt: skip
    if model == "rnn":
        data = list_reduction_dataset(n_train=20_000, n_val=2_000, bucket_size=20, max_len=10, seed=seed)
        return models.rnn(hidden=32, embedding_dim=16), data, settings
    if model == "tree-lstm":
        data = sentiment_tree_dataset(n_train=2_000, n_val=200, seed=seed)
        return models.tree_lstm(int(data.meta["vocab_size"]), 32, 32, 5), data, settings
    raise SettingError("model", f"soak: unknown model {model!r}; expected one of {MODELS}")


@dataclass
class SoakReport:
    """What one soak measured (the module docstring says what): its settings, the samples of resident memory
    and keys done, and what it met; :meth:`summary` derives the growth figures, :attr:`ok` the verdict."""

    model: str
    minutes: float
    warmup_s: float
    sample_s: float
    trace_capacity: int | None
    viewer: str  # "dashboard", or "feed" without the notebook extra
    engine: str = ""  # the engine the run used
    trim: bool = False  # the heap was trimmed before each sample
    samples: list[list[float]] = field(default_factory=list)  # [seconds, resident MB, keys done, 1 if paused]
    trace_full_s: float | None = None  # when every worker's trace buffer had dropped rows (full from then on)
    keys_done: int = 0
    epochs: int = 0
    knob_changes: int = 0
    frames: int = 0
    errors: list[str] = field(default_factory=list)
    threads_left: list[str] = field(default_factory=list)
    held_after: dict[str, int] = field(default_factory=dict)  # what the session holds per key after the run
    load_average: dict[str, list[float]] = field(default_factory=dict)
    sites: list[dict[str, Any]] = field(default_factory=list)  # with --sites: lines whose allocations grew most
    traced_mb: list[float] = field(default_factory=list)  # with --sites: Python-traced MB at each sample
    max_slope_mb_per_min: float | None = MAX_SLOPE_MB_PER_MIN

    def _after_warmup(self) -> list[list[float]]:
        """The samples after the warm-up taken while the run trained (a paused run drains its keys in flight
        and holds less for a few seconds: a dip that tells nothing of growth)."""
        return [s for s in self.samples if s[0] >= self.warmup_s and not s[3]]

    def summary(self) -> dict[str, Any]:
        after = self._after_warmup()
        t = [s[0] / 60 for s in after]
        rss = [s[1] for s in after]
        keys = [s[2] for s in after]
        slope = robust_slope(t, rss) if len(after) >= 2 else None
        per_key = robust_slope(keys, [r * 2**20 for r in rss]) if len(after) >= 2 else None
        growth = statistics.median(rss[-3:]) - statistics.median(rss[:3]) if len(after) >= 2 else None
        elapsed = self.samples[-1][0] if self.samples else 0.0
        return {
            "model": self.model, "engine": self.engine, "minutes": self.minutes, "warmup_s": self.warmup_s,
            "viewer": self.viewer,
            "trim": self.trim, "trace_capacity": self.trace_capacity, "trace_full_s": self.trace_full_s,
            "rss_first_mb": self.samples[0][1] if self.samples else None,
            "rss_at_warmup_mb": rss[0] if rss else None, "rss_last_mb": rss[-1] if rss else None,
            "growth_after_warmup_mb": growth,
            "max_above_warmup_mb": max(rss) - rss[0] if rss else None,
            "slope_mb_per_min": slope, "bytes_per_key": per_key,
            "keys_done": self.keys_done, "keys_per_s": self.keys_done / elapsed if elapsed else None,
            "epochs": self.epochs, "knob_changes": self.knob_changes, "frames": self.frames,
            "errors": self.errors, "threads_left": self.threads_left, "held_after": self.held_after,
            "load_average": self.load_average, "max_slope_mb_per_min": self.max_slope_mb_per_min,
        }  # fmt: skip

    @property
    def ok(self) -> bool:
        s = self.summary()
        slope_ok = self.max_slope_mb_per_min is None or (
            s["slope_mb_per_min"] is not None and s["slope_mb_per_min"] <= self.max_slope_mb_per_min
        )
        return not self.errors and not self.threads_left and slope_ok

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary(), "ok": self.ok, "samples": self.samples, "sites": self.sites,
                "traced_mb": self.traced_mb}  # fmt: skip


class _FeedOnly:
    """Without the notebook extra: the dashboard's feed polled from a thread, and knobs set on the Run."""

    def __init__(self, run: Any, rate_hz: float) -> None:
        from amp_notebook.ui.feed import LiveFeed

        self.run, self.feed, self.period = run, LiveFeed(run), 1.0 / rate_hz
        self.errors: list[str] = []
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="amp-soak-feed", daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.closed.is_set() and not self.feed.finished:
            try:
                self.feed.poll()
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                return
            self.closed.wait(self.period)

    def control(self, action: str, value: Any = None, node: str | None = None) -> None:
        run = self.run
        if action in ("pause", "resume"):
            getattr(run, action)()
        elif action == "max_active_keys":
            run.set_max_active_keys(value)
        else:
            getattr(run, f"set_{action}")(node, value)

    def close(self) -> None:
        self.closed.set()
        self.thread.join(5)


def _viewer(run: Any, rate_hz: float) -> tuple[Any, str]:
    try:
        from amp_notebook.ui.dashboard import Dashboard
    except ImportError:  # no anywidget: the feed alone
        return _FeedOnly(run, rate_hz), "feed"
    return Dashboard(run, rate_hz=rate_hz), "dashboard"


def _frames(viewer: Any) -> int:
    feed = viewer.feed if isinstance(viewer, _FeedOnly) else viewer._feed
    return feed.frames if feed is not None else 0


def _full(session: Any) -> bool:
    return all(b.total_rows > len(b) for b in session.buffers)


def soak(
    model: str = "rnn",
    minutes: float = 2.0,
    *,
    sample_s: float | None = None,
    warmup_s: float | None = None,
    knob_s: float = 3.0,
    rate_hz: float = 4.0,
    trace_capacity: int | None = DEFAULT_CAPACITY,
    after_full_s: float | None = None,
    trim: bool = False,
    sites: bool = False,
    max_slope: float | None = MAX_SLOPE_MB_PER_MIN,
    engine: str = "auto",
    seed: int = 0,
    echo: bool = False,
) -> SoakReport:
    """Run a soak of ``model`` for ``minutes`` (module docstring) and return its report. With
    ``after_full_s``, the warm-up ends that many seconds after every worker's trace buffer is full (at most
    ``MAX_FILL_S`` after the start) and the soak goes on ``minutes`` after that; ``warmup_s`` is ignored."""
    from amp_notebook.runtime.train import train

    duration = minutes * 60.0
    sample_s = sample_s if sample_s is not None else (10.0 if minutes >= 10 else 2.0)
    warmup_s = warmup_s if warmup_s is not None else min(300.0, duration / 3)
    warmup_end, end_s = (warmup_s, duration) if after_full_s is None else (math.inf, MAX_FILL_S)
    graph, data, settings = workload(model, seed)
    threads_before = {t.ident for t in threading.enumerate()}
    load = {"start": list(os.getloadavg())}
    allocations = AllocationSites() if sites else None
    if allocations is not None:
        allocations.start()
    run = train(graph, data, background=True, trace_capacity=trace_capacity, engine=engine, **settings)
    session = run._session  # type: ignore[union-attr]
    viewer, kind = _viewer(run, rate_hz)
    report = SoakReport(model, minutes, warmup_s, sample_s, trace_capacity, kind, session.engine.name, trim,
                        max_slope_mb_per_min=max_slope)  # fmt: skip
    began = time.perf_counter()
    next_sample, next_knob, knob = began, began + knob_s, 0
    try:
        while True:
            now = time.perf_counter()
            elapsed = now - began
            if elapsed >= end_s or run.done:
                break
            if now >= next_knob:
                action, value = KNOBS[knob % len(KNOBS)]
                knob += 1
                next_knob += knob_s
                try:
                    viewer.control(action, value, None)
                    report.knob_changes += 1
                except Exception as exc:  # a refused change is an error met; the soak goes on
                    report.errors.append(f"knob {action}={value}: {type(exc).__name__}: {exc}")
            if now >= next_sample:
                next_sample += sample_s
                keys = run.status["keys_done"]  # type: ignore[union-attr]
                if trim:
                    trim_heap()
                paused = int(run.state == "paused")  # type: ignore[union-attr]
                report.samples.append([round(elapsed, 2), round(rss_mb(), 2), keys, paused])
                if report.trace_full_s is None and _full(session):
                    report.trace_full_s = round(elapsed, 2)
                    if after_full_s is not None:
                        warmup_end = report.warmup_s = report.trace_full_s + after_full_s
                        end_s = warmup_end + duration
                if allocations is not None:
                    allocations.take(at_baseline=elapsed >= warmup_end)
                    report.traced_mb.append(round(allocations.traced_mb[-1], 2))
                if echo:
                    print(f"{elapsed:8.1f}s  rss {report.samples[-1][1]:8.2f} MB  keys {keys}", file=sys.stderr)
            time.sleep(max(0.0, min(next_sample, next_knob) - time.perf_counter()))
    finally:
        if report.knob_changes and KNOBS[(knob - 1) % len(KNOBS)][0] == "pause":
            run.resume()  # type: ignore[union-attr]
        run.stop(timeout=60)  # type: ignore[union-attr]
        report.frames = _frames(viewer)
        viewer.close()
    if math.isinf(warmup_end):
        report.warmup_s = end_s
        report.errors.append(f"the trace buffers were not full after {end_s:g} s: no warm-up end to measure from")
    if run.error is not None:  # type: ignore[union-attr]
        report.errors.append(f"run: {type(run.error).__name__}: {run.error}")  # type: ignore[union-attr]
    report.errors.extend(f"dashboard: {e}" for e in viewer.errors)
    report.keys_done = session.keys_done
    report.epochs = len(session.history)
    report.held_after = bookkeeping(session, run._driver.backend)  # type: ignore[union-attr]
    if allocations is not None:
        report.sites = [s.as_dict() for s in allocations.growth()]
        allocations.stop()
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        left = [t.name for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    report.threads_left = left
    load["end"] = list(os.getloadavg())
    report.load_average = load
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.testing.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--model", choices=MODELS, default="rnn")
    parser.add_argument("--engine", choices=ENGINES, default="auto", help="the threaded backend's engine")
    parser.add_argument("--sample-s", type=float, default=None, help="seconds between samples (10, or 2 under 10 min)")
    parser.add_argument("--warmup-minutes", type=float, default=None, help="5, or a third of a shorter soak")
    parser.add_argument(
        "--after-full-s",
        type=float,
        default=None,
        help="end the warm-up this long after the trace buffers are full, then soak --minutes more",
    )
    parser.add_argument("--knob-s", type=float, default=3.0, help="seconds between knob changes")
    parser.add_argument("--rate-hz", type=float, default=4.0, help="dashboard updates per second")
    parser.add_argument("--trace-capacity", type=int, default=DEFAULT_CAPACITY,
                        help="trace rows kept per worker (the run's default unless given)")  # fmt: skip
    parser.add_argument("--max-slope", type=float, default=MAX_SLOPE_MB_PER_MIN, help="MB/min after the warm-up")
    parser.add_argument("--trim", action="store_true", help="trim the heap before each sample (glibc malloc_trim)")
    parser.add_argument("--sites", action="store_true", help="trace Python allocations (slower) and list growth")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    warmup = None if args.warmup_minutes is None else args.warmup_minutes * 60
    report = soak(
        args.model, args.minutes, sample_s=args.sample_s, warmup_s=warmup, knob_s=args.knob_s, rate_hz=args.rate_hz,
        trace_capacity=args.trace_capacity, after_full_s=args.after_full_s, trim=args.trim, sites=args.sites,
        max_slope=args.max_slope, engine=args.engine, seed=args.seed, echo=True,
    )  # fmt: skip
    print(json.dumps(report.as_dict(), indent=None if args.json else 1, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
