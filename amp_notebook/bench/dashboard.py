"""What the live dashboard costs a run: training throughput with the dashboard's data feed streaming at
4 Hz vs without it, same run, alternately, medians.

Both sides train in the background (``train(..., background=True)``), the list-reduction RNN (many light
messages, so the feed's share of the interpreter shows most). The "with" side attaches a real
:class:`~amp_notebook.ui.dashboard.Dashboard`; outside a kernel it has no browser to send to, so each
frame is serialized as a kernel would send it (the JSON content encoded, the binary buffers copied into
one message) and dropped. What that leaves out is the kernel's socket write, done by its IOPub thread
outside the interpreter lock. The figure: throughput with / throughput without (target >= 0.95), medians
of alternating runs; runs of this size vary by +-20% on a shared machine, so the feed thread's own busy
time as a share of the run's wall time is reported beside it (what the feed can cost at most, GIL
contention aside).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from amp_notebook.bench.common import interleaved_medians, report
from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.models.rnn import rnn
from amp_notebook.runtime.train import train
from amp_notebook.ui.dashboard import Dashboard
from amp_notebook.ui.feed import Frame

RATE_HZ = 4.0


class _Serializing(Dashboard):
    """A dashboard that serializes each frame as the kernel would, then drops it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.frame_s: list[float] = []
        self.bytes_sent = 0
        super().__init__(*args, **kwargs)

    def _emit(self, frame: Frame) -> None:
        began = time.perf_counter()
        wire = json.dumps(frame.content, default=float).encode() + b"".join(frame.buffers)
        self.bytes_sent += len(wire)
        self.frame_s.append(time.perf_counter() - began)


def run(repeats: int = 9, n_train: int = 60_000, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats, n_train = 3, 10_000
    data = list_reduction_dataset(n_train=n_train, n_val=100)
    g = rnn()
    feeds: list[_Serializing] = []
    busy_share: list[float] = []  # the feed thread's busy time / the run's wall time

    def rate(with_dashboard: bool) -> float:
        r = train(g, data, workers=2, mode="amp", max_active_keys=4, validate=False, background=True,
                  optimizer={"name": "adam", "lr": 1e-3}, max_bundle=1)  # fmt: skip
        dash = _Serializing(r, rate_hz=RATE_HZ) if with_dashboard else None
        result = r.wait()
        if dash is not None:
            dash.wait_feed(10)
            dash.close()
            feeds.append(dash)
            busy_share.append(dash.feed_busy_s / result.wall_s)
        return result.train_instances_per_s

    medians = interleaved_medians(repeats, {"with": lambda: rate(True), "without": lambda: rate(False)})
    with_rate, with_all = medians["with"]
    without_rate, without_all = medians["without"]
    frame_ms = [1e3 * s for d in feeds for s in d.frame_s]
    frames = sum(len(d.frame_s) for d in feeds)
    out = {
        "with_dashboard_per_s": with_rate,
        "without_per_s": without_rate,
        "ratio": with_rate / without_rate,
        "rate_hz": RATE_HZ,
        "frames": frames,
        "serialize_ms_median": float(np.median(frame_ms)) if frame_ms else 0.0,
        "bytes_per_frame_median": float(np.median([d.bytes_sent / max(1, len(d.frame_s)) for d in feeds])),
        "feed_busy_share_median": float(np.median(busy_share)),
        "pair_ratios": [w / wo for w, wo in zip(with_all, without_all, strict=True)],
        "runs": {"with": with_all, "without": without_all},
        "repeats": repeats,
        "n_train": n_train,
    }
    out["text"] = report(
        [
            ("with dashboard feed (instances/s)", f"{with_rate:,.0f}"),
            ("without (instances/s)", f"{without_rate:,.0f}"),
            ("ratio (target >= 0.95)", f"{out['ratio']:.3f}"),
            ("frames, serialize ms (median)", f"{frames}, {out['serialize_ms_median']:.2f}"),
            ("bytes per frame (median)", f"{out['bytes_per_frame_median']:,.0f}"),
            ("feed thread busy / run wall time (median)", f"{out['feed_busy_share_median']:.3f}"),
        ]
    )
    return out
