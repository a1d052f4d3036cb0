"""``amp-notebook``: train a model, run the demo, or run a benchmark from the shell.

    amp-notebook train --model rnn --workers 2 --max-active-keys 4 --epochs 3 --json
    amp-notebook demo
    amp-notebook bench speedup --json
    amp-notebook simulate --model mlp --devices 4 --flops 1T --bandwidth 10G --max-active-keys 4 --json
    amp-notebook validate graph.json

With ``--json`` the last line on stdout is one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from amp_notebook.bench.registry import BENCHMARKS, run_benchmark
from amp_notebook.cli_data import add_data_option, model_and_data_from_dir
from amp_notebook.cli_validate import add_validate_parser, cmd_validate
from amp_notebook.data.batch import Dataset
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.data.forest import forest_dataset
from amp_notebook.data.graphs import (
    BABI15_FEATURE_WIDTH,
    BABI15_TYPES,
    TASKS,
    babi15_graphs,
    ggsnn_dataset,
)
from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.data.mnist import load_mnist_dataset
from amp_notebook.data.molecules import molecule_graphs
from amp_notebook.data.ner import load_conll, synthetic_ner_dataset
from amp_notebook.data.sentiment import sentiment_tree_dataset
from amp_notebook.ir.graph import Graph
from amp_notebook.models import bilstm_tagger, ggsnn, mlp, rnn, tree_lstm
from amp_notebook.models.bilstm_tagger import UPDATE_FREQUENCY as TAGGER_UPDATE_FREQUENCY
from amp_notebook.models.tree_lstm import root_accuracy, tree_lstm_forest
from amp_notebook.reproduce.command import add_parser as add_reproduce_parser
from amp_notebook.reproduce.command import command as cmd_reproduce
from amp_notebook.runtime.checkpoint import load_checkpoint
from amp_notebook.runtime.checkpoint_file import CheckpointError
from amp_notebook.runtime.controller import MODES
from amp_notebook.runtime.inbox import ORDERS, PRIORITIES
from amp_notebook.runtime.placement import STRATEGIES
from amp_notebook.runtime.train import TrainResult, train

MODELS = ("mlp", "rnn")  # also simulated; the dynamic models train only
TRAIN_MODELS = (*MODELS, "tree-lstm", "ggsnn", "bilstm-tagger")
# The train defaults; what each reaches on its embedded data, and within how many epochs, is in the README's
# command-line section and checked in a short form by tests/models/test_defaults_learn.py.
DEFAULT_LR = {"mlp": 1e-3, "rnn": 3e-3, "tree-lstm": 0.01, "ggsnn": 0.003, "bilstm-tagger": 3e-3}
DEFAULT_OPTIMIZER = {"mlp": "adam", "rnn": "adam", "tree-lstm": "adam", "ggsnn": "adam", "bilstm-tagger": "adam"}
DEFAULT_OPTIMIZER_SETTINGS: dict[str, dict[str, Any]] = {
    "mlp": {"lr_decay": 0.7},
    "rnn": {"clip_norm": 5.0, "lr_decay": 0.85},
    "bilstm-tagger": {"clip_norm": 5.0},
}
DEFAULT_SIZES = {
    "rnn": (100_000, 10_000),
    "tree-lstm": (2_000, 500),
    "ggsnn": (1_000, 200),
    "bilstm-tagger": (1_000, 200),
}
DEFAULT_BATCH_SIZE = {"mlp": 25}  # digits (or MNIST) per key
DEFAULT_MIN_UPDATE_FREQUENCY = {"rnn": 10}  # the others: 1
CHECKPOINT_NAME = "checkpoint.npz"


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amp-notebook", description="Asynchronous model-parallel training (AMPNet).")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a model from the zoo on its default data")
    t.add_argument("--model", choices=TRAIN_MODELS, required=True)
    t.add_argument("--replicas", type=positive_int, default=1, help="replicas of the RNN step (rnn only)")
    t.add_argument("--workers", type=positive_int, default=2)
    t.add_argument("--max-active-keys", type=positive_int, default=4)
    t.add_argument(
        "--min-update-frequency",
        type=positive_int,
        default=None,
        help="gradients a node holds before it updates (amp mode); default 10 (rnn), 1 (the others)",
    )
    t.add_argument("--mode", choices=MODES, default="amp")
    t.add_argument(
        "--placement",
        choices=(*STRATEGIES, "auto"),
        default="round_robin",
        help="heavy ops round-robin over workers (the paper), in contiguous cost-balanced stages, or auto: "
        "the fastest of these and a local search, judged on the simulator with costs measured here",
    )
    t.add_argument(
        "--priority",
        choices=PRIORITIES,
        default="backward_first",
        help="worker inbox order across directions: backward messages first (the paper) or arrival order",
    )
    t.add_argument(
        "--order",
        choices=ORDERS,
        default="oldest_key",
        help="worker inbox order within a direction: the key admitted earliest first, or arrival order",
    )
    t.add_argument(
        "--max-bundle",
        type=positive_int,
        default=1,
        help="messages of different keys a node may run as one call (1: none; try 16 with one tree per key)",
    )
    t.add_argument("--epochs", type=positive_int, default=3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--optimizer", choices=("sgd", "momentum", "adam"), default=None)
    t.add_argument("--lr", type=float, default=None)
    t.add_argument(
        "--n-train",
        type=positive_int,
        default=None,
        help="training instances: lists (rnn, 100000), trees (tree-lstm, 2000), graphs (ggsnn, 1000), sentences "
        "(bilstm-tagger, 1000)",
    )
    t.add_argument("--n-val", type=positive_int, default=None, help="validation instances (10000, 500, 200, 200)")
    t.add_argument(
        "--task",
        choices=TASKS,
        default="node_selection",
        help="ggsnn: bAbI-15 node_selection (default) or classification, or molecule regression",
    )
    t.add_argument(
        "--graph-nodes",
        type=positive_int,
        default=8,
        help="ggsnn bAbI-15: nodes per graph (8 = the original task; the paper inflates to 54)",
    )
    t.add_argument("--steps", type=positive_int, default=4, help="ggsnn propagation steps")
    t.add_argument(
        "--per-key",
        type=positive_int,
        default=1,
        metavar="N",
        help="tree-lstm: trees per key, run level by level (forests); ggsnn: graphs per key (their "
        "disjoint union); bilstm-tagger: sentences of one length per key. 1 (default) = one instance per key, "
        "the paper's layout",
    )
    t.add_argument(
        "--mnist",
        type=Path,
        default=None,
        metavar="DIR",
        help="train the mlp on MNIST IDX files in DIR instead of the embedded digits",
    )
    t.add_argument(
        "--conll",
        type=Path,
        default=None,
        metavar="FILE",
        help="train the bilstm-tagger on a CoNLL-style file ('token tag' per line; 10%% held out for validation) "
        "instead of the synthetic NER sentences",
    )
    add_data_option(t)
    t.add_argument("--trace", type=Path, default=None, help="write a Chrome/Perfetto trace JSON here")
    t.add_argument(
        "--trace-window",
        type=float,
        nargs=2,
        default=None,
        metavar=("START_S", "END_S"),
        help="only export slices starting in this window of seconds",
    )
    t.add_argument(
        "--backend",
        choices=("threads", "ray"),
        default="threads",
        help="worker threads in this process (default), or one Ray actor per worker (pip install '.[ray]')",
    )
    t.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="with --backend ray: the cluster to run on (from `ray start --head`); default: start a local Ray",
    )
    t.add_argument("--json", action="store_true", help="print one JSON summary as the last stdout line")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--target", type=float, default=None, help="stop once validation accuracy reaches this")
    t.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"save a checkpoint as DIR/{CHECKPOINT_NAME} every --every-epochs epochs and at the end",
    )
    t.add_argument("--every-epochs", type=positive_int, default=1, metavar="N", help="checkpoint every N epochs")
    t.add_argument(
        "--resume",
        action="store_true",
        help="go on from the checkpoint in --checkpoint DIR (--epochs counts its epochs too)",
    )

    d = sub.add_parser("demo", help="the main job: the list-reduction RNN trained asynchronously, with a trace")
    d.add_argument("--trace", type=Path, default=Path("amp_demo.trace.json"))
    d.add_argument("--epochs", type=positive_int, default=20, help="at most this many epochs")
    d.add_argument("--target", type=float, default=0.97, help="stop once validation accuracy reaches this")
    d.add_argument("--json", action="store_true")

    add_simulate_parser(sub)
    add_validate_parser(sub)
    add_reproduce_parser(sub)

    b = sub.add_parser("bench", help="run a benchmark (figures against a peer, same run)")
    b.add_argument("name", choices=sorted(BENCHMARKS))
    b.add_argument("--json", action="store_true")
    b.add_argument("--quick", action="store_true", help="a small, fast version (smoke test; figures not meaningful)")
    return parser


def model_and_data(args: argparse.Namespace) -> tuple[Graph, Dataset]:
    if getattr(args, "data", None) is not None:
        return model_and_data_from_dir(args)
    per_key = getattr(args, "per_key", 1)
    if per_key != 1 and args.model not in ("tree-lstm", "ggsnn", "bilstm-tagger"):
        raise SystemExit("amp-notebook: --per-key applies to --model tree-lstm, ggsnn and bilstm-tagger only")
    if getattr(args, "conll", None) is not None and args.model != "bilstm-tagger":
        raise SystemExit("amp-notebook: --conll applies to --model bilstm-tagger only")
    if args.model == "mlp":
        if args.replicas != 1:
            raise SystemExit("amp-notebook: --replicas applies to --model rnn only")
        batch = DEFAULT_BATCH_SIZE["mlp"]
        if getattr(args, "mnist", None) is not None:
            data = load_mnist_dataset(args.mnist, batch_size=batch, seed=args.seed)
        else:
            data = load_digits_dataset(batch_size=batch, seed=args.seed)
        return mlp(input_width=int(data.meta["input_width"]), hidden=784), data
    if args.replicas != 1 and args.model != "rnn":
        raise SystemExit("amp-notebook: --replicas applies to --model rnn only")
    n_train, n_val = DEFAULT_SIZES[args.model]
    n_train, n_val = getattr(args, "n_train", None) or n_train, getattr(args, "n_val", None) or n_val
    if args.model == "bilstm-tagger":
        conll = getattr(args, "conll", None)
        if conll is not None:
            data = load_conll(conll, per_key=per_key, seed=args.seed)
        else:
            data = synthetic_ner_dataset(n_train=n_train, n_val=n_val, seed=args.seed, per_key=per_key)
        sizes = {k: int(data.meta[k]) for k in ("vocab_size", "char_vocab_size", "num_tags")}  # type: ignore[call-overload]
        # the model's per-node frequencies (about a sentence's worth of gradients) unless --min-update-frequency
        per_node = getattr(args, "min_update_frequency", None) is None
        return bilstm_tagger(**sizes, update_frequency=TAGGER_UPDATE_FREQUENCY if per_node else None), data
    if args.model == "tree-lstm":
        data = sentiment_tree_dataset(n_train=n_train, n_val=n_val, seed=args.seed)
        if per_key > 1:  # forests: one update per key unless --min-update-frequency says otherwise
            forests = forest_dataset(data, per_key)
            forests.meta["trees"] = data  # the trees themselves, for the root accuracy
            return tree_lstm_forest(int(data.meta["vocab_size"])), forests  # type: ignore[call-overload]
        # the paper's per-node frequencies (embedding 1000, the rest 50) unless --min-update-frequency is given
        paper = getattr(args, "min_update_frequency", None) is None
        graph = tree_lstm(
            int(data.meta["vocab_size"]),  # type: ignore[call-overload]
            embed_update_frequency=1000 if paper else None, update_frequency=50 if paper else None,
        )  # fmt: skip
        return graph, data
    if args.model == "ggsnn":
        task = getattr(args, "task", "node_selection")
        steps = getattr(args, "steps", 4)
        if task == "regression":
            train_graphs, val_graphs = (
                molecule_graphs(n_train, seed=args.seed),
                molecule_graphs(n_val, seed=args.seed + 1),
            )
            data = ggsnn_dataset(
                train_graphs, 3, "regression", steps, val_instances=val_graphs, name="molecules", graphs_per_key=per_key
            )
            return ggsnn(3, train_graphs[0].feature_width, steps=steps, task="regression"), data
        nodes = getattr(args, "graph_nodes", 8)
        train_graphs = babi15_graphs(n_train, seed=args.seed, inflate_to=nodes, task=task)
        val_graphs = babi15_graphs(n_val, seed=args.seed + 1, inflate_to=nodes, task=task)
        classes = len(BABI15_TYPES) if task == "classification" else None
        data = ggsnn_dataset(
            train_graphs, 4, task, steps, val_instances=val_graphs, num_classes=classes, name="babi15",
            graphs_per_key=per_key,
        )  # fmt: skip
        return ggsnn(4, BABI15_FEATURE_WIDTH, steps=steps, task=task, classes=classes), data
    data = list_reduction_dataset(n_train=n_train, n_val=n_val, seed=args.seed)
    return rnn(replicas=args.replicas), data


def run_training(
    args: argparse.Namespace, graph: Graph, data: Dataset, muf: int, optimizer: dict[str, Any]
) -> TrainResult:
    total = args.epochs * (len(data.train) + len(data.val))
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="key", file=sys.stderr, desc=f"{graph.name} {args.mode}", dynamic_ncols=True)

    def on_key(_: Any) -> None:
        if bar is not None:
            bar.update(1)

    def on_epoch(stats: Any) -> bool:
        acc = "n/a" if stats.val_accuracy is None else f"{stats.val_accuracy:.3f}"
        message = (
            f"epoch {stats.epoch + 1}: train loss {stats.train_loss:.4f}, val accuracy {acc}, t={stats.end_s:.1f}s"
        )
        if bar is not None:
            bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr)
        reached = args.target is not None and (stats.val_accuracy or 0.0) >= args.target
        if reached:
            message = f"reached the target validation accuracy {args.target:.3f}; stopping"
            (bar.write if bar is not None else print)(message, file=sys.stderr)
        return reached

    try:
        return train(
            graph, data, workers=args.workers, mode=args.mode, max_active_keys=args.max_active_keys,
            min_update_frequency=muf, optimizer=optimizer, epochs=args.epochs, seed=args.seed,
            placement=getattr(args, "placement", "round_robin"), priority=getattr(args, "priority", "backward_first"),
            order=getattr(args, "order", "oldest_key"), max_bundle=getattr(args, "max_bundle", 1),
            on_key_done=on_key, on_epoch=on_epoch, **backend_options(args), **checkpoint_options(args),
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()


def checkpoint_options(args: argparse.Namespace) -> dict[str, Any]:
    """``train`` keywords for --checkpoint DIR [--every-epochs N] [--resume]."""
    directory = getattr(args, "checkpoint", None)
    if directory is None:
        if getattr(args, "resume", False):
            raise SystemExit("amp-notebook train: --resume needs --checkpoint DIR (where the checkpoint is)")
        return {}
    path = directory / CHECKPOINT_NAME
    options: dict[str, Any] = {"checkpoint": path, "checkpoint_every": args.every_epochs}
    if args.resume:
        if not path.exists():
            raise SystemExit(f"amp-notebook train: --resume: no checkpoint {path}; train without --resume first")
        options["resume"] = load_checkpoint(path)
        print(f"resuming from {path}: {options['resume']}", file=sys.stderr)
    return options


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    backend, address = getattr(args, "backend", "threads"), getattr(args, "ray_address", None)
    if address is not None and backend != "ray":
        raise SystemExit("amp-notebook: --ray-address needs --backend ray")
    return {"backend": backend, "address": address} if backend == "ray" else {}


def cmd_train(args: argparse.Namespace) -> int:
    graph, data = model_and_data(args)
    muf = args.min_update_frequency or DEFAULT_MIN_UPDATE_FREQUENCY.get(args.model, 1)
    name = args.optimizer or DEFAULT_OPTIMIZER[args.model]
    optimizer: dict[str, Any] = {"name": name, "lr": args.lr or DEFAULT_LR[args.model]}
    optimizer.update(DEFAULT_OPTIMIZER_SETTINGS.get(args.model, {}))
    result = run_training(args, graph, data, muf, optimizer)
    summary = result.summary(model=args.model, replicas=args.replicas, backend=getattr(args, "backend", "threads"))
    if result.backend_stats.get("backend") == "ray":
        summary["ray"] = result.backend_stats
    per_node = {
        n: graph.nodes[n].min_update_frequency for n in graph.parameterized() if graph.nodes[n].min_update_frequency
    }
    if per_node:
        summary["node_min_update_frequency"] = per_node
    if "source" in data.meta:  # real data read with --data
        summary["data"] = data.meta["source"]
    if args.model == "tree-lstm":
        trees = data.meta.get("trees", data)  # forests keep their trees in meta
        summary["val_root_accuracy"] = root_accuracy(result.params, trees.val)  # val_accuracy is per tree node
        summary["per_key"] = getattr(args, "per_key", 1)
    if args.model == "bilstm-tagger":  # val_accuracy is token accuracy
        summary["per_key"] = getattr(args, "per_key", 1)
        for name in ("val_majority_fraction", "rare_token_fraction", "frequent_threshold"):
            summary[name] = data.meta[name]
    if args.model == "ggsnn":
        summary["task"] = getattr(args, "task", "node_selection")
        summary["val_metric"] = [e.val_loss for e in result.history] if summary["task"] == "regression" else None
    if args.trace is not None:
        result.trace.to_chrome(args.trace, window=tuple(args.trace_window) if args.trace_window else None)
        summary["trace"] = str(args.trace)
    print_summary(summary)
    if args.json:
        print(json.dumps(summary))
    return 0


def print_summary(s: dict[str, Any]) -> None:
    acc = ", ".join("n/a" if a is None else f"{a:.3f}" for a in s["val_accuracy"])
    st = s["staleness"]
    lines = [
        f"model {s.get('model')} ({s['mode']}, {s['workers']} workers, max_active_keys {s['max_active_keys']}, "
        f"min_update_frequency {s['min_update_frequency']}, replicas {s.get('replicas', 1)})",
        f"  wall time            {s['wall_s']:.2f} s",
        f"  training throughput  {s['train_instances_per_s']:.0f} instances/s",
        f"  val accuracy/epoch   {acc}",
        f"  staleness            mean {st['mean']:.2f}, p95 {st['p95']:.0f}, max {st['max']:.0f}",
        f"  worker utilization   {', '.join(f'{u:.0%}' for u in s['utilization'])}",
    ]
    if "autoplace" in s:
        a = s["autoplace"]
        lines.append(
            f"  placement (auto)     {a['chosen']} {a['heavy']}: predicted {a['predicted_per_s']:.0f}, "
            f"measured {a['measured_per_s']:.0f} instances/s ({len(a['candidates'])} candidates simulated)"
        )
    if "trace" in s:
        lines.append(f"  trace                {s['trace']} (open in https://ui.perfetto.dev)")
    print("\n".join(lines), file=sys.stderr)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: the list-reduction RNN, asynchronous on 2 workers, on generated data."""
    print("amp-notebook demo: the paper's list-reduction RNN (Fig. 2 graph: Ungroup, Embedding, Concat, Linear, "
          "ReLU, Isu, Cond, Phi) trained asynchronously on 2 worker threads.", file=sys.stderr)  # fmt: skip
    ns = argparse.Namespace(
        model="rnn", replicas=1, workers=2, max_active_keys=4, min_update_frequency=None, mode="amp",
        epochs=args.epochs, seed=0, optimizer=None, lr=None, n_train=100_000, n_val=10_000, trace=args.trace,
        trace_window=(0.0, 1.0), json=args.json, quiet=False, target=args.target,
    )  # fmt: skip
    start = time.perf_counter()
    code = cmd_train(ns)
    print(f"demo finished in {time.perf_counter() - start:.1f} s; the trace holds the first second of the run.",
          file=sys.stderr)  # fmt: skip
    return code


def cmd_bench(args: argparse.Namespace) -> int:
    result = run_benchmark(args.name, quick=args.quick)
    if args.json:
        print(json.dumps({"benchmark": args.name, **result}))
    elif "text" in result:  # the other benchmarks print their table as they go
        print(f"{args.name}:\n{result['text']}")
    else:
        print(f"(every figure of {args.name}: amp-notebook bench {args.name} --json)")
    return 0


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


SI_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
SIM_MODELS = (*MODELS, "ggsnn-like")


def add_simulate_parser(sub: Any) -> None:
    s = sub.add_parser("simulate", help="train on simulated hardware in virtual time (deterministic what-if)")
    s.add_argument("--model", choices=SIM_MODELS, required=True)
    s.add_argument("--devices", type=positive_int, default=4)
    s.add_argument("--flops", type=quantity, default=1e12, help="FLOP/s per device (default 1T, the paper's device)")
    s.add_argument("--bandwidth", type=quantity, default=math.inf, help="bits/s per link, e.g. 10G (default inf)")
    s.add_argument("--latency", type=float, default=0.0, help="seconds per link hop")
    s.add_argument("--overhead", type=float, default=0.0, help="seconds of overhead per message")
    s.add_argument("--wire-dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    s.add_argument("--max-active-keys", type=positive_int, default=4)
    s.add_argument(
        "--min-update-frequency",
        type=positive_int,
        default=None,
        help="gradients a node holds before it updates; default 1 (mlp), 10 (rnn)",
    )
    s.add_argument("--mode", choices=MODES, default="amp")
    s.add_argument("--epochs", type=positive_int, default=1)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--n-train", type=positive_int, default=2_000, help="list-reduction training instances (rnn)")
    s.add_argument("--trace", type=Path, default=None, help="write a Chrome/Perfetto trace JSON (virtual time)")
    s.add_argument("--json", action="store_true", help="print one JSON summary as the last stdout line")


def cmd_simulate(args: argparse.Namespace) -> int:
    from amp_notebook.runtime.costs import CostModel, CostModelError
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
    try:
        costs = CostModel(flops=args.flops, bandwidth_bits_per_s=args.bandwidth, latency_s=args.latency,
                          message_overhead_s=args.overhead, wire_dtype=args.wire_dtype)  # fmt: skip
    except CostModelError as exc:
        raise SystemExit(f"amp-notebook simulate: {exc}") from None
    start = time.perf_counter()
    run = whatif(
        graph, data, devices=args.devices, costs=costs, mode=args.mode, max_active_keys=args.max_active_keys,
        min_update_frequency=muf, epochs=args.epochs, seed=args.seed, optimizer=optimizer, placement=placement,
    )  # fmt: skip
    summary = {"model": args.model, "virtual": True, "real_s": time.perf_counter() - start, **run.as_dict()}
    if args.trace is not None:
        run.result.trace.to_chrome(args.trace)
        summary["trace"] = str(args.trace)
    print(
        f"simulated {args.model} on {args.devices} devices ({args.mode}, max_active_keys {run.max_active_keys}, "
        f"min_update_frequency {muf}): {run.throughput_per_s:,.0f} instances/s, makespan {run.makespan_s:.4g} s "
        f"(virtual), bandwidth {run.bandwidth_bits_per_s / 1e9:.3g} Gb/s, utilization "
        f"{', '.join(f'{u:.0%}' for u in run.utilization)}, {run.messages} messages in {summary['real_s']:.2f} s",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(summary, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"train": cmd_train, "demo": cmd_demo, "bench": cmd_bench, "simulate": cmd_simulate,
                "validate": cmd_validate, "reproduce": cmd_reproduce}  # fmt: skip
    try:
        return commands[args.command](args)
    except CheckpointError as exc:  # a bad or mismatched checkpoint: the message says what and how to fix it
        print(f"amp-notebook {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
