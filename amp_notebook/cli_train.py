"""``amp-notebook train`` and ``amp-notebook demo``: a zoo model on its embedded data, from the shell.

``train`` builds the model and its dataset (:func:`model_and_data`), trains it with
:func:`~amp_notebook.train` while a progress bar and one line per epoch go to stderr, and prints the summary
to stdout: as text, or with ``--json`` as one JSON object and nothing else (the text then goes to stderr).
``demo`` is ``train`` with the main job's settings.

Options. The run's settings (``--workers``, ``--mode``, ``--max-active-keys``, ...) are not listed here: one
option per :class:`~amp_notebook.runtime.config.RunConfig` setting is made from its declaration
(:mod:`amp_notebook.runtime.config_cli`: name, type, choices, doc), except those in :data:`NOT_OPTIONS`. The
settings a model recommends (:func:`recommended`) default to the model's value; the rest to the declared
default. The options here are the ones that choose the model and its data, and what to write.

The text summary says which update frequency each parameterized node used: the zoo's Tree-LSTM and tagger
give their nodes their own ``min_update_frequency`` (the paper's 1000 for the embedding and 50 for the rest;
about a sentence's gradients), which overrides the run's value.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_notebook.cli import CommandLineError, decided_later, positive_int
from amp_notebook.cli_data import add_data_option, model_and_data_from_dir

if TYPE_CHECKING:
    from amp_notebook.data.batch import Dataset
    from amp_notebook.ir.graph import Graph
    from amp_notebook.runtime.train import TrainResult

CHECKPOINT_NAME = "checkpoint.npz"


def add_train_arguments(t: argparse.ArgumentParser) -> None:
    from amp_notebook.models import zoo

    t.add_argument(
        "--model",
        type=zoo_name,
        required=True,
        metavar="{" + ",".join(zoo.NAMES) + "}",
        help="which zoo model (an alias such as tree_lstm works too): "
        + "; ".join(f"{e.name}: {e.description}" for e in zoo.ENTRIES),
    )
    t.add_argument("--replicas", type=positive_int, default=1, help="replicas of the RNN step (rnn only)")
    t.add_argument(
        "--lr", type=float, default=None, help="the optimizer's learning rate (default: the model's, as --optimizer)"
    )
    sized = [e for e in zoo.ENTRIES if e.sizes]
    t.add_argument(
        "--n-train",
        type=positive_int,
        default=None,
        help="training instances (default: "
        + ", ".join(f"{e.name} {e.sizes['default'][0]}" for e in sized)
        + "; the mlp's digits have one size)",
    )
    t.add_argument(
        "--n-val",
        type=positive_int,
        default=None,
        help="validation instances (default: " + ", ".join(f"{e.name} {e.sizes['default'][1]}" for e in sized) + ")",
    )
    t.add_argument(
        "--graph-nodes",
        type=positive_int,
        default=None,
        help="ggsnn bAbI-15: nodes per graph (default 8, the original task; the paper inflates to 54)",
    )
    t.add_argument("--steps", type=positive_int, default=None, help="ggsnn propagation steps (default 4)")
    t.add_argument(
        "--per-key",
        type=positive_int,
        default=1,
        metavar="N",
        help="tree-lstm: trees per key, run level by level (forests); ggsnn*: graphs per key (their "
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
    add_output_arguments(t, trace_default=None)
    t.add_argument(
        "--trace-window",
        type=float,
        nargs=2,
        default=None,
        metavar=("START_S", "END_S"),
        help="only export slices starting in this window of seconds",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"save a checkpoint as DIR/{CHECKPOINT_NAME} every --checkpoint-every epochs and at the end",
    )
    t.add_argument(
        "--resume",
        action="store_true",
        help="go on from the checkpoint in --checkpoint DIR (--epochs counts its epochs too)",
    )
    add_setting_options(t, zoo.NAMES)


# RunConfig settings that are not options here, and why (every other setting is one).
NOT_OPTIONS = {"trace": "--trace PATH names the Chrome trace file to write; tracing is always on"}


def setting_names() -> list[str]:
    """The run settings that are options of ``train``: every declared one but :data:`NOT_OPTIONS`."""
    from amp_notebook.runtime.config import RunConfig

    return [s.name for s in RunConfig.settings() if s.name not in NOT_OPTIONS]


def add_setting_options(t: argparse.ArgumentParser, models: tuple[str, ...]) -> None:
    """One option per run setting, from its declaration. A setting that a model recommends a value for
    defaults to None here (``settings_for`` fills in the model's) and its help says so."""
    from amp_notebook.runtime.config import RunConfig
    from amp_notebook.runtime.config_cli import add_setting_arguments

    per_model: dict[str, dict[str, Any]] = {}
    for model in models:  # a model that recommends nothing for a setting trains with the declared default
        for name, value in recommended(model).items():
            per_model.setdefault(name, {})[model] = value
    for name, values in per_model.items():
        for model in models:
            values.setdefault(model, RunConfig.setting(name).default)
    group = t.add_argument_group("run settings (the keywords of amp.train, one per RunConfig setting)")
    add_setting_arguments(group, setting_names(), defaults=dict.fromkeys(per_model))
    decided_later(group, {name: describe_per_model(values) for name, values in per_model.items()})


def describe_per_model(values: dict[str, Any]) -> str:
    """``3`` when every model has 3, else ``the model's: mlp 1, rnn 10, ...``."""

    def text(value: Any) -> str:
        if isinstance(value, dict):  # an optimizer: its name and learning rate
            return f"{value['name']} lr {value['lr']:g}" if "lr" in value else str(value["name"])
        return str(value)

    shown = {model: text(v) for model, v in values.items()}
    if len(set(shown.values())) == 1:
        return next(iter(shown.values()))
    return "the model's: " + ", ".join(f"{m} {v}" for m, v in shown.items())


def zoo_name(text: str) -> str:
    """An argparse type: a zoo model's name (``tree_lstm`` and other aliases give ``tree-lstm``)."""
    from amp_notebook.models import zoo

    try:
        return zoo.canonical(text)
    except zoo.ZooError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def recommended(model: str) -> dict[str, Any]:
    """The settings ``model`` trains with unless the command line says otherwise: the zoo's (``amp.train``
    keywords)."""
    from amp_notebook.models import zoo

    return zoo.get(model).settings.train_kwargs()


def recommended_anywhere() -> set[str]:
    """The settings some zoo model recommends a value for (their options default to None)."""
    from amp_notebook.models import zoo

    return {name for model in zoo.NAMES for name in recommended(model)}


def settings_for(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the options given, the model's recommended values for the rest."""
    from amp_notebook.runtime.config_cli import settings_from_args

    settings = settings_from_args(args, setting_names())
    model_settings = recommended(args.model)
    optimizer = dict(model_settings["optimizer"])
    if isinstance(settings.get("optimizer"), str):  # --optimizer NAME keeps the model's learning rate and extras
        optimizer["name"] = settings["optimizer"]
    if getattr(args, "lr", None) is not None:
        optimizer["lr"] = args.lr
    for name, value in model_settings.items():
        if settings.get(name) is None:
            settings[name] = value
    settings["optimizer"] = optimizer
    for name in recommended_anywhere() - set(model_settings):  # left None for the models that recommend it
        if settings.get(name) is None:
            del settings[name]  # this model does not: train's default
    if settings.get("address") is not None and settings.get("backend") != "ray":
        raise CommandLineError("--address needs --backend ray")
    return settings


def add_output_arguments(t: argparse.ArgumentParser, trace_default: Path | None) -> None:
    t.add_argument(
        "--trace",
        type=Path,
        default=trace_default,
        metavar="PATH",
        help="write a Chrome/Perfetto trace JSON here" + (f" (default {trace_default})" if trace_default else ""),
    )
    t.add_argument("--target", type=float, default=None, help="stop once validation accuracy reaches this")
    t.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout, nothing else")


DEMO_REPLICAS = 2  # copies of the demo RNN's step: one per worker of its 2 (cmd_demo)


def add_demo_arguments(d: argparse.ArgumentParser) -> None:
    add_output_arguments(d, trace_default=Path("amp_demo.trace.json"))
    d.add_argument("--epochs", type=positive_int, default=20, help="at most this many epochs")
    d.set_defaults(target=0.97)


GGSNN_OPTIONS = ("graph_nodes", "steps")


def model_and_data(args: argparse.Namespace) -> tuple[Graph, Dataset]:
    """The zoo graph named by ``args.model`` and its dataset: the zoo's own (``zoo.get(model)``) at its
    default size, or what the options ask for (MNIST files, a CoNLL file, several instances per key, other
    bAbI-15 graphs, RNN replicas). ``--min-update-frequency`` replaces the model's per-node frequencies."""
    from amp_notebook.models import zoo

    entry, per_key = zoo.get(args.model), args.per_key
    ggsnn = args.model.startswith("ggsnn")
    if per_key != 1 and not (ggsnn or args.model in ("tree-lstm", "bilstm-tagger")):
        raise CommandLineError("--per-key applies to the ggsnn models, tree-lstm and bilstm-tagger only")
    if args.conll is not None and args.model != "bilstm-tagger":
        raise CommandLineError("--conll applies to --model bilstm-tagger only")
    if args.mnist is not None and args.model != "mlp":
        raise CommandLineError("--mnist applies to --model mlp only")
    if args.replicas != 1 and args.model != "rnn":
        raise CommandLineError("--replicas applies to --model rnn only")
    if not ggsnn and any(getattr(args, o) is not None for o in GGSNN_OPTIONS):
        raise CommandLineError("--graph-nodes and --steps apply to the ggsnn models only")
    if getattr(args, "data", None) is not None:  # a real data set (cli_data.py)
        graph, data = model_and_data_from_dir(args)
    elif ggsnn and (per_key != 1 or any(getattr(args, o) is not None for o in GGSNN_OPTIONS)):
        graph, data = ggsnn_and_data(args, entry, per_key)
    elif args.model == "mlp" and args.mnist is not None:
        from amp_notebook.data.mnist import load_mnist_dataset

        data = load_mnist_dataset(args.mnist, batch_size=zoo.DIGITS_PER_KEY, seed=args.seed)
        graph = entry.graph(data)
    elif args.model == "bilstm-tagger" and (args.conll is not None or per_key != 1):
        from amp_notebook.data.ner import load_conll, synthetic_ner_dataset

        if args.conll is not None:
            data = load_conll(args.conll, per_key=per_key, seed=args.seed)
        else:
            n_train, n_val = sizes(entry, args)
            data = synthetic_ner_dataset(n_train=n_train, n_val=n_val, seed=args.seed, per_key=per_key)
        graph = entry.graph(data)
    elif args.model == "tree-lstm" and per_key != 1:  # forests: one update per key unless the option says
        from amp_notebook.data.forest import forest_dataset
        from amp_notebook.models.tree_lstm import tree_lstm_forest

        trees = entry.dataset("default", seed=args.seed, n_train=args.n_train, n_val=args.n_val)
        data = forest_dataset(trees, per_key)
        data.meta["trees"] = trees  # the trees themselves, for the root accuracy
        graph = tree_lstm_forest(int(trees.meta["vocab_size"]))  # type: ignore[call-overload]
    else:
        data = entry.dataset("default", seed=args.seed, **({"n_train": args.n_train, "n_val": args.n_val}
                                                              if entry.sizes else {}))  # fmt: skip
        graph = entry.graph(data)
        if args.replicas != 1:
            from amp_notebook.models.rnn import rnn

            graph = rnn(vocab_size=int(data.meta["vocab_size"]), replicas=args.replicas)  # type: ignore[call-overload]
    if args.min_update_frequency is not None:  # the run's value for every node
        for node in graph.parameterized():
            graph.nodes[node].min_update_frequency = None
    return graph, data


def sizes(entry: Any, args: argparse.Namespace) -> tuple[int, int]:
    """(n_train, n_val): the options, or the zoo entry's default size."""
    n_train, n_val = entry.sizes["default"]
    return args.n_train or n_train, args.n_val or n_val


def ggsnn_and_data(args: argparse.Namespace, entry: Any, per_key: int) -> tuple[Graph, Dataset]:
    """A ggsnn zoo model on bAbI-15 graphs of ``--graph-nodes`` nodes (or molecules), ``--steps`` propagation
    steps and ``--per-key`` graphs per key; the task is the model's (``ggsnn-classification`` ...)."""
    from amp_notebook.data.graphs import BABI15_FEATURE_WIDTH, BABI15_TYPES, babi15_graphs, ggsnn_dataset
    from amp_notebook.data.molecules import molecule_graphs
    from amp_notebook.models import zoo
    from amp_notebook.models.ggsnn import ggsnn

    n_train, n_val = sizes(entry, args)
    task = args.model.removeprefix("ggsnn-") if args.model != "ggsnn" else "node_selection"
    steps = args.steps or zoo.GGSNN_STEPS
    if task == "regression":
        train_graphs, val_graphs = molecule_graphs(n_train, seed=args.seed), molecule_graphs(n_val, seed=args.seed + 1)
        data = ggsnn_dataset(
            train_graphs, 3, "regression", steps, val_instances=val_graphs, name="molecules", graphs_per_key=per_key
        )
        return ggsnn(3, train_graphs[0].feature_width, steps=steps, task="regression"), data
    nodes = args.graph_nodes or zoo.BABI15_NODES
    train_graphs = babi15_graphs(n_train, seed=args.seed, inflate_to=nodes, task=task)  # type: ignore[arg-type]
    val_graphs = babi15_graphs(n_val, seed=args.seed + 1, inflate_to=nodes, task=task)  # type: ignore[arg-type]
    classes = len(BABI15_TYPES) if task == "classification" else None
    data = ggsnn_dataset(
        train_graphs, 4, task, steps, val_instances=val_graphs, num_classes=classes, name="babi15",  # type: ignore[arg-type]
        graphs_per_key=per_key,
    )  # fmt: skip
    return ggsnn(4, BABI15_FEATURE_WIDTH, steps=steps, task=task, classes=classes), data  # type: ignore[arg-type]


def run_training(args: argparse.Namespace, graph: Graph, data: Dataset, settings: dict[str, Any]) -> TrainResult:
    """``amp.train`` with a progress bar over every key (training and validation) and a line per epoch."""
    from amp_notebook.runtime.train import train

    bar = None
    if not args.quiet:
        from tqdm import tqdm

        total = settings["epochs"] * (len(data.train) + len(data.val))
        desc = f"{graph.name} {settings['mode']}"
        bar = tqdm(total=total, unit="key", file=sys.stderr, desc=desc, dynamic_ncols=True)

    def say(message: str) -> None:
        (bar.write if bar is not None else print)(message, file=sys.stderr)

    def on_key(_: Any) -> None:
        if bar is not None:
            bar.update(1)

    def on_epoch(stats: Any) -> bool:
        acc = "n/a" if stats.val_accuracy is None else f"{stats.val_accuracy:.3f}"
        say(f"epoch {stats.epoch + 1}: train loss {stats.train_loss:.4f}, val accuracy {acc}, t={stats.end_s:.1f}s")
        reached = args.target is not None and (stats.val_accuracy or 0.0) >= args.target
        if reached:
            say(f"reached the target validation accuracy {args.target:.3f}; stopping")
        return reached

    try:
        result = train(
            graph, data, **settings, on_key_done=on_key, on_epoch=on_epoch, **checkpoint_options(args, settings)
        )
        if bar is not None:  # the run may end early (a target reached, a resumed run): the bar ends where it did
            bar.total = bar.n
            bar.refresh()
        return result
    finally:
        if bar is not None:
            bar.close()


def checkpoint_options(args: argparse.Namespace, settings: dict[str, Any]) -> dict[str, Any]:
    """``train`` keywords for --checkpoint DIR [--resume] (how often: the setting ``checkpoint_every``)."""
    directory = getattr(args, "checkpoint", None)
    if directory is None:
        if getattr(args, "resume", False):
            raise CommandLineError("--resume needs --checkpoint DIR (where the checkpoint is)")
        return {}
    path = directory / CHECKPOINT_NAME
    options: dict[str, Any] = {"checkpoint": path}
    if args.resume:
        from amp_notebook.runtime.checkpoint import load_checkpoint

        if not path.exists():
            raise CommandLineError(f"--resume: no checkpoint {path}; train without --resume first")
        options["resume"] = load_checkpoint(path)
        print(f"resuming from {path}: {options['resume']}", file=sys.stderr)
    return options


def cmd_train(args: argparse.Namespace) -> int:
    settings = settings_for(args)
    graph, data = model_and_data(args)
    result = run_training(args, graph, data, settings)
    summary = result.summary(model=args.model, replicas=args.replicas, backend=settings["backend"])
    if result.backend_stats.get("backend") == "ray":
        summary["ray"] = result.backend_stats
    summary["node_min_update_frequency"] = {
        n: graph.nodes[n].min_update_frequency or settings["min_update_frequency"] for n in graph.parameterized()
    }  # fmt: skip
    if args.model == "tree-lstm":
        from amp_notebook.models.tree_lstm import root_accuracy

        trees = data.meta.get("trees", data)  # forests keep their trees in meta
        summary["val_root_accuracy"] = root_accuracy(result.params, trees.val)  # val_accuracy is per tree node
        summary["per_key"] = args.per_key
    if args.model == "bilstm-tagger":  # val_accuracy is token accuracy
        summary["per_key"] = args.per_key
        for key in ("val_majority_fraction", "rare_token_fraction", "frequent_threshold"):
            summary[key] = data.meta[key]
    if args.model.startswith("ggsnn"):
        summary["task"] = str(data.meta["task"])
        summary["val_metric"] = [e.val_loss for e in result.history] if summary["task"] == "regression" else None
    if "source" in data.meta:  # a real data set read with --data
        summary["data"] = data.meta["source"]
    if args.trace is not None:
        result.trace.to_chrome(args.trace, window=tuple(args.trace_window) if args.trace_window else None)
        summary["trace_file"] = str(args.trace)
    print(summary_text(summary), file=sys.stderr if args.json else sys.stdout)  # --json: stdout is the JSON alone
    if args.json:
        print(json.dumps(summary))
    return 0


def update_frequencies_text(per_node: dict[str, int]) -> str:
    """``per node: 50 (lstm, out), 1000 (embed)``; one figure when every node has the same."""
    groups: dict[int, list[str]] = {}
    for node, value in per_node.items():
        groups.setdefault(value, []).append(node)
    if len(groups) == 1:
        return str(next(iter(groups)))
    shown = []
    for value, nodes in sorted(groups.items()):
        names = ", ".join(nodes) if len(nodes) <= 3 else f"{len(nodes)} nodes"
        shown.append(f"{value} ({names})")
    return "per node: " + ", ".join(shown)


def summary_text(s: dict[str, Any]) -> str:
    """The human-readable summary of ``amp-notebook train`` (the JSON summary's main figures)."""
    acc = ", ".join("n/a" if a is None else f"{a:.3f}" for a in s["val_accuracy"])
    st = s["staleness"]
    per_node = s.get("node_min_update_frequency") or {}
    muf = update_frequencies_text(per_node) if per_node else str(s["min_update_frequency"])
    accuracy_label = {"tree-lstm": "val node acc/epoch", "bilstm-tagger": "val token acc/epoch"}.get(
        s.get("model", ""), "val accuracy/epoch"
    )
    lines = [
        f"model {s.get('model')} ({s['mode']}, {s['workers']} workers, max_active_keys {s['max_active_keys']}, "
        f"replicas {s.get('replicas', 1)})",
        f"  min_update_frequency {muf}",
        f"  wall time            {s['wall_s']:.2f} s",
        f"  training throughput  {s['train_instances_per_s']:,.0f} instances/s",
        f"  {accuracy_label:<21}{acc}",
    ]
    if s.get("val_root_accuracy") is not None:
        lines.append(f"  val root accuracy    {s['val_root_accuracy']:.3f} (after the last epoch)")
    lines += [
        f"  staleness            mean {st['mean']:.2f}, p95 {st['p95']:.0f}, max {st['max']:.0f} (updates)",
        f"  worker utilization   {', '.join(f'{u:.0%}' for u in s['utilization'])}",
    ]
    if s.get("worker_time"):
        from amp_notebook.runtime.result import worker_time_text

        lines.append(f"  worker time          {worker_time_text(s['worker_time'])}")
    from amp_notebook.runtime.steal import steal_text

    stolen = steal_text(s.get("steal_share"))
    if stolen:
        lines.append(f"  cpu steal            {stolen}")
    if "autoplace" in s:
        a = s["autoplace"]
        lines.append(
            f"  placement (auto)     {a['chosen']} {a['heavy']}: predicted {a['predicted_per_s']:,.0f}, "
            f"measured {a['measured_per_s']:,.0f} instances/s ({len(a['candidates'])} candidates simulated)"
        )
    if "trace_file" in s:
        lines.append(f"  trace                {s['trace_file']} (open in https://ui.perfetto.dev)")
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: the list-reduction RNN with its step replicated once per worker (``DEMO_REPLICAS``),
    asynchronous on 2 workers, on generated data. With one copy of the step, the worker that runs it does
    almost all the work while the other waits; with a copy on each worker both are busy, and the run takes a
    few more epochs but less time to its target, as the paper's replicas did (docs/cli.md has the figures)."""
    print(
        "amp-notebook demo: the paper's list-reduction RNN (Fig. 2 graph: Ungroup, Embedding, Concat, Linear, "
        f"ReLU, Isu, Cond, Phi), its step Linear replicated {DEMO_REPLICAS}x (keys alternate between the copies, "
        f"one on each worker), trained asynchronously on 2 worker threads until {args.target:.0%} validation "
        "accuracy.",
        file=sys.stderr,
    )
    train_options = argparse.ArgumentParser(prog="amp-notebook demo")
    add_train_arguments(train_options)
    ns = train_options.parse_args(
        ["--model", "rnn", "--replicas", str(DEMO_REPLICAS), "--workers", "2", "--epochs", str(args.epochs)]
    )
    ns.trace, ns.trace_window, ns.json, ns.target = args.trace, (0.0, 1.0), args.json, args.target
    start = time.perf_counter()
    code = cmd_train(ns)
    print(f"demo finished in {time.perf_counter() - start:.1f} s; the trace holds the first second of the run.",
          file=sys.stderr)  # fmt: skip
    return code
