"""``amp-notebook simulate``: a zoo model on simulated hardware, in virtual time (a deterministic what-if).

The same graph, placement, controller and workers as a threaded run, on the discrete-event backend
(:mod:`amp_notebook.runtime.whatif`): each device computes at ``--flops`` FLOP/s and each link carries
``--bandwidth`` bits/s after ``--latency`` seconds. ``--calibrate native`` (or ``python``) makes each device
one core of this machine instead: its measured FLOP/s and that engine's measured per-message overhead
(:func:`~amp_notebook.runtime.calibrate.this_cpu`; ``--flops`` and ``--overhead`` still override).
The one-line result goes to stdout (with ``--json``, one JSON object instead).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path
from typing import Any

from amp_notebook.cli import decided_later, positive_int

SI_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
SIM_MODELS = ("mlp", "rnn", "ggsnn-like")


def quantity(text: str) -> float:
    """A positive number with an optional SI prefix and unit: ``1e12``, ``1T``, ``10G``, ``10Gb/s``, ``inf``."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+|inf)\s*([kKMGTP]?)\s*(flops|FLOPS|b/s|bps|bit/s)?\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a number like 1e12, 1T or 10Gb/s, got {text!r}")
    try:
        value = float(match.group(1)) * SI_PREFIX[match.group(2)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number like 1e12, 1T or 10Gb/s, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


# the run settings a simulation takes from the command line (devices stand for workers)
RUN_SETTINGS = ("mode", "max_active_keys", "min_update_frequency", "epochs", "seed")


def add_simulate_arguments(s: argparse.ArgumentParser) -> None:
    from amp_notebook.runtime.calibrate import CALIBRATED_ENGINES
    from amp_notebook.runtime.config_cli import add_setting_arguments

    s.add_argument("--model", choices=SIM_MODELS, required=True, help="which model: %(choices)s")
    s.add_argument("--devices", type=positive_int, default=4, help="simulated devices (one worker each)")
    s.add_argument(
        "--flops",
        type=quantity,
        default=None,
        help="FLOP/s per device (default 1T, the paper's device; with --calibrate, this core's)",
    )
    s.add_argument("--bandwidth", type=quantity, default=math.inf, help="bits/s per link, e.g. 10G (default inf)")
    s.add_argument("--latency", type=float, default=0.0, help="seconds per link hop")
    s.add_argument(
        "--overhead",
        type=float,
        default=None,
        help="seconds of overhead per message (default 0; with --calibrate, the engine's measured)",
    )
    s.add_argument(
        "--receive-overhead",
        type=float,
        default=0.0,
        help="seconds of a device's own time per message it receives from another device (default 0)",
    )
    s.add_argument(
        "--receive-per-byte",
        type=float,
        default=0.0,
        help="seconds of a device's own time per byte it receives from another device (default 0)",
    )
    s.add_argument("--calibrate", choices=CALIBRATED_ENGINES, default=None,
                   help="devices are cores of this machine: FLOP/s and the per-message overhead of this engine, "
                        "measured here (%(choices)s)")  # fmt: skip
    s.add_argument(
        "--wire-dtype",
        choices=("float32", "float16", "bfloat16"),
        default="float32",
        help="precision of payloads on the links",
    )
    settings = s.add_argument_group("run settings (as in train; from the RunConfig declarations)")
    add_setting_arguments(settings, RUN_SETTINGS, defaults={"epochs": 1, "min_update_frequency": None})
    decided_later(settings, {"min_update_frequency": "10 for rnn, 1 for the others"})
    s.add_argument("--n-train", type=positive_int, default=2_000, help="list-reduction training instances (rnn)")
    s.add_argument("--trace", type=Path, default=None, help="write a Chrome/Perfetto trace JSON (virtual time)")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout, nothing else")


def cmd_simulate(args: argparse.Namespace) -> int:
    from amp_notebook.data import list_reduction_dataset, load_digits_dataset
    from amp_notebook.models import mlp, rnn
    from amp_notebook.runtime.calibrate import this_cpu
    from amp_notebook.runtime.costs import CostModel
    from amp_notebook.runtime.whatif import GGSNN_PLACEMENT, ggsnn_like, ggsnn_like_dataset, whatif

    placement = None
    if args.model == "ggsnn-like":
        graph, data = ggsnn_like(), ggsnn_like_dataset()
        placement = GGSNN_PLACEMENT if args.devices == 2 else None
        optimizer: Any = {"name": "sgd", "lr": 1e-3}
    elif args.model == "mlp":
        data = load_digits_dataset(batch_size=100, seed=args.seed)
        graph, optimizer = mlp(input_width=int(data.meta["input_width"]), hidden=784), {"name": "sgd", "lr": 0.05}
    else:
        data = list_reduction_dataset(n_train=args.n_train, n_val=100, seed=args.seed)
        graph, optimizer = rnn(), {"name": "adam", "lr": 3e-3, "clip_norm": 5.0}
    muf = args.min_update_frequency or (10 if args.model == "rnn" else 1)
    base = this_cpu(engine=args.calibrate) if args.calibrate else CostModel()
    given = {"flops": args.flops, "message_overhead_s": args.overhead}
    costs = base.with_(bandwidth_bits_per_s=args.bandwidth, latency_s=args.latency, wire_dtype=args.wire_dtype,
                       receive_overhead_s=args.receive_overhead, receive_s_per_byte=args.receive_per_byte,
                       **{k: v for k, v in given.items() if v is not None})  # fmt: skip
    start = time.perf_counter()
    run = whatif(
        graph, data, devices=args.devices, costs=costs, mode=args.mode, max_active_keys=args.max_active_keys,
        min_update_frequency=muf, epochs=args.epochs, seed=args.seed, optimizer=optimizer, placement=placement,
    )  # fmt: skip
    summary = {"model": args.model, "virtual": True, "real_s": time.perf_counter() - start, **run.as_dict()}
    if args.trace is not None:
        run.result.trace.to_chrome(args.trace)
        summary["trace_file"] = str(args.trace)
    if args.json:
        print(json.dumps(summary, default=str))
        return 0
    print(
        f"simulated {args.model} on {args.devices} devices ({args.mode}, max_active_keys {run.max_active_keys}, "
        f"min_update_frequency {muf}): {run.throughput_per_s:,.0f} instances/s, makespan {run.makespan_s:.4g} s "
        f"(virtual), bandwidth {run.bandwidth_bits_per_s / 1e9:.3g} Gb/s, utilization "
        f"{', '.join(f'{u:.0%}' for u in run.utilization)}, {run.messages} messages in {summary['real_s']:.2f} s"
    )
    return 0
