"""What a Ray hop costs, and when Ray pays: the Ray backend next to the threaded one, same machine, same run.

Three measurements, each side interleaved with the other (the order flips every round), medians reported
with every round:

* **Per-message cost.** The no-op chain of ``bench overhead`` (16 Identity nodes alternating between 2
  workers, so every hop crosses workers): wall time / messages handled, on threads and on Ray.
* **MLP throughput.** The paper's 4-layer MLP (784 hidden) on 2 workers, ``amp`` mode, max_active_keys 4,
  balanced placement, arrival-order inboxes, on keys of B instances for B in ``BATCHES``: instances/s on each
  side and their ratio. A message between the workers carries a B x 784 float32 activation (or gradient):
  ``B * 784 * 4`` bytes. The headline (``ray_per_s``, ``threads_per_s``, ``ratio``) is the largest B.
* **Break-even message size.** A Ray hop adds ``h = us_per_message_ray - us_per_message_threads`` to every
  message. The work a message carries grows with its size: the threaded MLP runs give the mean time a
  worker spends on one message (forward and backward rows of the trace) per byte of its payload, ``s``
  (the median over the key sizes). ``break_even_bytes = h / s`` is the message size whose work costs as
  much as a hop: there a worker spends half its time on hops and Ray keeps about half the threaded
  throughput; well above it the hop is noise, and spreading the work over more machines can pay.
  ``ratio_by_bytes`` gives the measured ratios around it.

Ray's start-up (local cluster, then each run's actors) is not in any throughput: a run's clock starts once
its actors are up; ``ray_start_s`` and ``deploy_s`` report what it cost. ``AMP_RAY_ADDRESS=host:port`` runs
the Ray side on that cluster instead of a local Ray.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

from amp_notebook.bench.common import constant_dataset, interleaved_medians, report
from amp_notebook.bench.overhead import chain
from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.models.mlp import mlp
from amp_notebook.runtime.train import TrainResult, train

HIDDEN = 784
BATCHES = (100, 400, 1600)


def digits_keys(batch: int, keys: int, seed: int = 0) -> Dataset:
    """Keys of ``batch`` digits each, drawn with replacement from scikit-learn's 1,797 (nothing downloaded)."""
    base = load_digits_dataset(batch_size=100, seed=seed)
    x = np.concatenate([b.inputs["x"] for b in base.train])
    y = np.concatenate([b.inputs["target"] for b in base.train])
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(keys):
        pick = rng.integers(0, len(x), batch)
        out.append(Batch({"x": x[pick], "target": y[pick]}, batch))
    return Dataset("digits_keys", out, [], base.num_classes, base.meta)


def run(repeats: int = 3, quick: bool = False) -> dict[str, Any]:
    from amp_notebook.runtime.backends import ray_cluster

    batches = (50, 200) if quick else BATCHES
    if quick:
        repeats = 1
    t0 = time.perf_counter()
    ray_cluster.connect(address=os.environ.get("AMP_RAY_ADDRESS"))
    ray_start_s = time.perf_counter() - t0
    deploy: list[float] = []

    def timed(backend: str, **kwargs: Any) -> TrainResult:
        began = time.perf_counter()
        result = train(backend=backend, **kwargs)
        assert isinstance(result, TrainResult)
        if backend == "ray":
            deploy.append(time.perf_counter() - began - result.wall_s)
        return result

    # per-message cost: the no-op chain
    g = chain()
    chain_keys = {"threads": 30 if quick else 600, "ray": 10 if quick else 60}

    def us_per_message(backend: str) -> float:
        data = constant_dataset(chain_keys[backend], 1)
        r = timed(backend, graph=g, dataset=data, workers=2, mode="amp", max_active_keys=16, validate=False,
                  dtype="float64", max_bundle=1)  # fmt: skip  # one message per call: the cost of a hop
        return r.wall_s / len(r.trace.events()["end"]) * 1e6

    hop = interleaved_medians(repeats, {b: (lambda b=b: us_per_message(b)) for b in ("threads", "ray")})
    us_ray, us_threads = hop["ray"][0], hop["threads"][0]

    # MLP throughput on growing keys
    model = mlp(input_width=64, hidden=HIDDEN)
    points = []
    for batch in batches:
        keys = max(8, (20 if quick else 40_000) // batch)
        data = digits_keys(batch, keys)

        work_s: list[float] = []

        def rate(backend: str, data: Dataset = data, work_s: list[float] = work_s) -> float:
            r = timed(backend, graph=model, dataset=data, workers=2, mode="amp", max_active_keys=4,
                      validate=False, optimizer={"name": "sgd", "lr": 0.01}, placement="balanced",
                      priority="fifo")  # fmt: skip
            if backend == "threads":
                ev = r.trace.events()
                handled = ev["phase"] < 2  # messages, not updates
                work_s.append(float(np.mean(ev["end"][handled] - ev["start"][handled])))
            return r.train_instances_per_s

        med = interleaved_medians(repeats, {"threads": lambda: rate("threads"), "ray": lambda: rate("ray")})
        ratio = med["ray"][0] / med["threads"][0]
        nbytes = batch * HIDDEN * 4
        points.append({
            "batch": batch, "message_bytes": nbytes, "keys": keys, "ray_per_s": med["ray"][0],
            "threads_per_s": med["threads"][0], "ratio": ratio,
            "rounds": {"ray": med["ray"][1], "threads": med["threads"][1]},
            "us_per_message_work": statistics.median(work_s) * 1e6,
        })  # fmt: skip
    seconds_per_byte = statistics.median(p["us_per_message_work"] * 1e-6 / p["message_bytes"] for p in points)
    hop_s = max(0.0, (us_ray - us_threads) * 1e-6)
    break_even = hop_s / seconds_per_byte
    head = points[-1]
    result = {
        "ray_per_s": head["ray_per_s"], "threads_per_s": head["threads_per_s"], "ratio": head["ratio"],
        "batch": head["batch"], "message_bytes": head["message_bytes"],
        "us_per_message_ray": us_ray, "us_per_message_threads": us_threads,
        "us_per_message_rounds": {"ray": hop["ray"][1], "threads": hop["threads"][1]},
        "break_even_bytes": break_even, "hop_us": hop_s * 1e6, "work_us_per_kb": seconds_per_byte * 1e9,
        "ratio_by_bytes": [{k: p[k] for k in ("batch", "message_bytes", "ratio", "ray_per_s", "threads_per_s")}
                           for p in points],
        "points": points, "ray_start_s": ray_start_s, "deploy_s": statistics.median(deploy) if deploy else None,
        "workers": 2, "hidden": HIDDEN, "max_active_keys": 4, "repeats": repeats,
    }  # fmt: skip
    rows = [
        ("us per message: ray / threads", f"{us_ray:.0f} / {us_threads:.1f}"),
        ("rounds (ray; threads)", f"{[round(v) for v in hop['ray'][1]]}; {[round(v, 1) for v in hop['threads'][1]]}"),
        *[
            (
                f"MLP B={p['batch']} ({p['message_bytes'] / 1e6:.2f} MB msgs) inst/s ray / threads",
                f"{p['ray_per_s']:.0f} / {p['threads_per_s']:.0f} = {p['ratio']:.2f}",
            )
            for p in points
        ],
        ("work per message per kB (threads)", f"{seconds_per_byte * 1e9:.1f} us"),
        ("break-even message size (hop = work)", f"{break_even / 1e3:.0f} kB"),
        ("local Ray start / actor deploy (median)", f"{ray_start_s:.1f} s / {result['deploy_s'] or 0:.1f} s"),
    ]
    print(report(rows))
    return result
