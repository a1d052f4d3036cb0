"""``amp-notebook``: train a model, run the demo, simulate, validate, reproduce or benchmark from the shell.

    amp-notebook train --model rnn --workers 2 --max-active-keys 4 --epochs 3
    amp-notebook demo
    amp-notebook bench speedup --json
    amp-notebook simulate --model mlp --devices 4 --flops 1T --bandwidth 10G --max-active-keys 4 --json
    amp-notebook validate graph.json

Output: a command's result (the text summary, or with ``--json`` one JSON object and nothing else) goes to
stdout, so ``amp-notebook train ... > out.txt`` keeps it; progress bars and per-epoch lines go to stderr.

Errors: bad input (an :class:`~amp_notebook.errors.AmpError`, a file that cannot be read, options that do not
go together) prints one message naming what is wrong and exits 2; anything else is a bug and exits 1 with a
one-line message. ``--debug`` (before or after the command's name) shows the traceback instead.

Start-up is lazy: the parser knows every command's name and one-line help without importing it, and fills
in the options of the one command being run only. ``amp-notebook --help`` therefore loads neither numpy nor
the JSON Schema validators nor the runtime (``tests/test_cli_startup.py`` checks it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from amp_notebook.errors import AmpError

BAD_INPUT, BUG = 2, 1


class CommandLineError(AmpError, ValueError):
    """Options that do not go together, or that name something that is not there."""


@dataclass(frozen=True)
class Command:
    """One subcommand: its one-line help, and where its parser and its function live (imported when run)."""

    help: str
    module: str
    add_arguments: str  # module function (parser) -> None: adds the command's options
    run: str  # module function (args) -> exit status


COMMANDS: dict[str, Command] = {
    "train": Command(
        "train a model from the zoo on its embedded data", "amp_notebook.cli_train", "add_train_arguments", "cmd_train"
    ),
    "demo": Command(
        "the main job: the list-reduction RNN trained asynchronously until it reaches 0.97, with a trace",
        "amp_notebook.cli_train",
        "add_demo_arguments",
        "cmd_demo",
    ),
    "simulate": Command(
        "train on simulated hardware in virtual time (a deterministic what-if)",
        "amp_notebook.cli_simulate",
        "add_simulate_arguments",
        "cmd_simulate",
    ),
    "validate": Command(
        "check graph JSON files and print every problem (exit 0 valid, 2 invalid)",
        "amp_notebook.cli_validate",
        "add_validate_arguments",
        "cmd_validate",
    ),
    "reproduce": Command(
        "rerun the paper's Tables 1 and 2, Figs. 5-6 and appendix C beside its own figures; HTML + JSON report",
        "amp_notebook.reproduce.command",
        "add_arguments",
        "command",
    ),
    "bench": Command(
        "run a benchmark (figures next to a peer measured in the same run)", "amp_notebook.cli", "add_bench_arguments",
        "cmd_bench",
    ),
}  # fmt: skip


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def decided_later(group: Any, defaults: dict[str, str]) -> None:
    """Help for settings whose option defaults to None because the command decides the value later (per
    model): ``defaults`` maps each such setting to the words that replace its "(default: None)"."""
    for action in group._group_actions:
        if action.dest in defaults:
            words = defaults[action.dest].replace("%", "%%")
            action.help = (action.help or "").replace("(default: None)", f"(default: {words})")


def add_debug_option(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--debug", action="store_true", default=default, help="on an error, show the full traceback (for a bug report)"
    )


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the options of ``commands`` filled in (every command's when None)."""
    parser = argparse.ArgumentParser(
        prog="amp-notebook",
        description="Asynchronous model-parallel training (AMPNet): train, watch, simulate and check models.",
        epilog="`amp-notebook COMMAND --help` lists a command's options.",
    )
    add_debug_option(parser, default=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help[0].upper() + command.help[1:] + ".")
        if commands is None or name in commands:
            getattr(importlib.import_module(command.module), command.add_arguments)(p)
        add_debug_option(p, default=argparse.SUPPRESS)  # SUPPRESS: an absent sub-level flag keeps the top level's
    return parser


def command_named_in(argv: Sequence[str]) -> str | None:
    """The subcommand in ``argv``: the first word that is not an option (the top level has no valued options)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = command_named_in(argv)
    args = build_parser([name] if name in COMMANDS else []).parse_args(argv)
    command = COMMANDS[args.command]
    run: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(command.module), command.run)
    try:
        return run(args)
    except (AmpError, OSError) as exc:  # bad input: a graph, data, a file, a checkpoint, options
        if args.debug:
            raise
        print(f"amp-notebook {args.command}: {describe(exc)}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print(f"amp-notebook {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        where = traceback.extract_tb(exc.__traceback__)[-1]
        print(
            f"amp-notebook {args.command}: internal error {type(exc).__name__}: {exc} (at {where.filename}:"
            f"{where.lineno}); this is a bug in amp_notebook: please report it with the output of the same command "
            "run with --debug",
            file=sys.stderr,
        )
        return BUG


def describe(exc: BaseException) -> str:
    """One message for an error: its text, or for an OS error the file and the reason."""
    if isinstance(exc, OSError) and not isinstance(exc, AmpError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    text = str(exc).strip()
    return text or type(exc).__name__


def add_bench_arguments(b: argparse.ArgumentParser) -> None:
    from amp_notebook.bench.registry import BENCHMARKS

    b.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark: %(choices)s")
    b.add_argument("--json", action="store_true", help="print every figure as one JSON object on stdout")
    b.add_argument("--quick", action="store_true", help="a small, fast version (smoke test; figures not meaningful)")
    b.add_argument(
        "--repeats",
        type=_positive_int,
        default=None,
        metavar="N",
        help="rounds per side (interleaved, medians reported; each benchmark has its own default, and --quick runs "
        "one; refused by a benchmark that takes no rounds)",
    )
    b.add_argument(
        "--workers",
        default=None,
        metavar="COUNTS",
        help="scaling only: worker counts to compare with 1 worker, e.g. 1,2,4,8,16 (default 1,2)",
    )
    b.add_argument(
        "--models",
        default=None,
        metavar="NAMES",
        help="scaling only: which models, e.g. tree,ggsnn (default: tree, ggsnn, tagger, rnn_replicas, mlp)",
    )
    b.add_argument(
        "--engines",
        default=None,
        metavar="NAMES",
        help="scaling only: which engines, e.g. native (default: native,python; the Python engine's runs are the "
        "slow ones on a machine with many cores)",
    )
    b.add_argument(
        "--placement",
        default=None,
        metavar="HOW",
        help="scaling only: measured (round robin, balanced stages and placement=auto's choice are timed here and "
        "the fastest runs the figures; the default) or a strategy for every figure: round_robin, balanced",
    )
    b.add_argument(
        "--no-ceiling",
        dest="ceiling",
        action="store_const",
        const=False,
        default=None,
        help="scaling only: skip the machine's ceiling (independent copies of the 1-worker run timed side by side)",
    )
    b.add_argument(
        "--no-bound",
        dest="bound",
        action="store_const",
        const=False,
        default=None,
        help="scaling only: skip the simulated run per model and count that gives what the graph itself allows",
    )
    b.add_argument(
        "--no-waits",
        dest="waits",
        action="store_const",
        const=False,
        default=None,
        help="scaling only: skip the traced run per model that splits each worker's idle time by what it waited for",
    )


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of rounds >= 1, like 5; got {text!r}")
    return value


def _bench_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options one benchmark takes (None: not given; ``run_benchmark`` refuses one it does not take)."""
    return {"repeats": args.repeats, "workers": args.workers, "models": args.models, "engines": args.engines,
            "placement": args.placement, "ceiling": args.ceiling, "waits": args.waits, "bound": args.bound}  # fmt: skip


def cmd_bench(args: argparse.Namespace) -> int:
    from amp_notebook.bench.registry import run_benchmark

    if args.json:  # stdout is for the JSON object alone: the benchmarks' running tables go to stderr
        from contextlib import redirect_stdout

        with redirect_stdout(sys.stderr):
            result = run_benchmark(args.name, quick=args.quick, **_bench_options(args))
        print(json.dumps({"benchmark": args.name, **result}))
        return 0
    result = run_benchmark(args.name, quick=args.quick, **_bench_options(args))
    if "text" in result:  # the other benchmarks print their table as they go
        print(f"{args.name}:\n{result['text']}")
    else:
        print(f"(every figure of {args.name}: amp-notebook bench {args.name} --json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
