"""Static checks on an IR graph.

Every problem is reported with the node and port it concerns, what was expected, what was found and a
way to fix it, and all problems are reported together. The rules:

* every input port of every node is connected, and every output port feeds exactly one input (a Cond
  needs both branches);
* every cycle passes through a Phi (the loop's entry) and a state-updating op (an Isu, or a Collect, which
  maps each group to a new state such as pos -> pos // 2), so each pass has a fresh state;
* widths (last payload dimensions) agree along every edge, inferred to a fixed point around loops;
* per-node attributes are well formed (min_update_frequency, worker, optimizer);
* no node asks for more than ``MAX_NODE_PARAMETERS`` parameters (a width typed with three zeros too many
  would otherwise fail with ``MemoryError`` when the run allocates them);
* replica groups name existing parameterized nodes of equal shapes;
* for training, the graph has a loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amp_notebook.errors import AmpError
from amp_notebook.ir import ops as O
from amp_notebook.ir.analysis import cycle_without_phi, loops
from amp_notebook.ir.ops.base import OpError, Width

if TYPE_CHECKING:
    from amp_notebook.ir.graph import Graph, Node


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a graph: the node and port it concerns (None when none) and a message with the fix."""

    node: str | None
    port: str | None
    message: str

    def __str__(self) -> str:
        return self.message


class ValidationError(AmpError, ValueError):
    """All problems found in a graph; ``problems`` lists them with their node and port."""

    def __init__(self, graph_name: str, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p.message}" for p in problems)
        super().__init__(f"graph {graph_name!r} has {len(problems)} problem(s):\n{lines}")


def validate(graph: Graph, require_loss: bool = False) -> None:
    problems = check(graph, require_loss=require_loss)
    if problems:
        raise ValidationError(graph.name, problems)


def check(graph: Graph, require_loss: bool = False) -> list[Problem]:
    """Every problem in ``graph`` (empty when it is valid)."""
    problems: list[Problem] = []
    problems += _check_ports(graph)
    problems += _check_cycles(graph)
    problems += infer_widths(graph, strict=True)[1]
    problems += _check_attrs(graph)
    problems += _check_sizes(graph)
    problems += _check_replicas(graph)
    if not any(n.kind in O.INPUTS for n in graph.nodes.values()):
        problems.append(Problem(None, None, "the graph has no Input node; add one with g.input(name, width)"))
    if require_loss and not any(n.kind in O.TRAINING_LOSSES for n in graph.nodes.values()):
        problems.append(
            Problem(
                None, None, "the graph has no loss, so it cannot train; add g.softmax_cross_entropy(...) or g.mse(...)"
            )
        )
    return problems


def _check_ports(graph: Graph) -> list[Problem]:
    problems = []
    for node in graph.nodes.values():
        incoming = graph.incoming(node.name)
        outgoing = graph.outgoing(node.name)
        for port in node.op.input_ports():
            if port not in incoming:
                problems.append(
                    Problem(
                        node.name, port,
                        f"{node.describe()} input {port!r} is not connected; feed it with "
                        f"g.connect(<output>, {node.name!r}, {port!r})",
                    )
                )  # fmt: skip
        for port in node.op.output_ports():
            if port not in outgoing:
                hint = ""
                if node.kind == "cond":
                    hint = (
                        f" (a Cond needs all its branches connected: {', '.join(node.op.output_ports())}; "
                        "both branches of a 2-way Cond)"
                    )
                problems.append(
                    Problem(
                        node.name, port,
                        f"{node.describe()} output {port!r} is not connected{hint}; every output must feed an "
                        "input, or a message would be lost",
                    )
                )  # fmt: skip
    return problems


def _check_cycles(graph: Graph) -> list[Problem]:
    """Every cycle passes through a Phi, and every loop through a state-updating op; the loops are those of
    :mod:`amp_notebook.ir.analysis`, which the topological order and the builder's canvas use too."""
    problems = []
    cycle = cycle_without_phi(graph)
    if cycle is not None:
        names, first = " -> ".join(cycle), cycle[0]
        problems.append(
            Problem(
                first, None,
                f"cycle {names} -> {first} does not pass through a Phi; close loops with g.phi(init, None) "
                "and connect the back-edge to the Phi",
            )
        )  # fmt: skip
    for component in loops(graph):
        if not any(graph.nodes[n].kind in O.STATE_UPDATING for n in component):
            name = sorted(component)[0]
            problems.append(
                Problem(
                    name, None,
                    f"the loop through {sorted(component)} has no Isu (nor any other state-updating op: "
                    f"{', '.join(sorted(O.STATE_UPDATING))}): every pass would carry the same state, so caches and "
                    "joins would collide; add g.isu(x, {'t': 't + 1'}, {'t': 't - 1'}) in the loop, or a "
                    "g.collect(...) that maps each group to a new state",
                )
            )  # fmt: skip
    return problems


def infer_widths(graph: Graph, strict: bool) -> tuple[dict[tuple[str, str], Width], list[Problem]]:
    """Widths of every output port, iterated to a fixed point so loops settle; with ``strict`` also the
    mismatches, each naming the node, port, the widths and where the input came from."""
    widths: dict[tuple[str, str], Width] = {}
    incoming = {name: graph.incoming(name) for name in graph.nodes}
    order = graph.topological_order()
    errors: dict[str, Problem] = {}
    for _ in range(len(graph.nodes) + 1):
        changed = False
        errors.clear()
        for name in order:
            node = graph.nodes[name]
            ins = {port: widths.get((e.src, e.src_port)) for port, e in incoming[name].items()}
            try:
                outs = node.op.infer_widths(ins)
            except OpError as exc:
                if strict:
                    sources = ", ".join(
                        f"{p} from {graph.nodes[e.src].describe()} output {e.src_port!r}"
                        for p, e in incoming[name].items()
                    )
                    errors[name] = Problem(
                        name, exc.port,
                        f"{node.describe()}: {exc} ({sources}); fix the op's size or the edge",
                    )  # fmt: skip
                continue
            for port, w in outs.items():
                if widths.get((name, port)) != w and w is not None:
                    widths[(name, port)] = w
                    changed = True
        if not changed:
            break
    return widths, list(errors.values())


NODE_ATTRIBUTES = {"min_update_frequency": 1, "worker": 0, "optimizer": None}  # int attributes: the least value


def attribute_problem(node: Node, attr: str, value: Any) -> str | None:
    """What is wrong with ``value`` as ``node``'s ``attr`` (``min_update_frequency``, ``worker`` or
    ``optimizer``; None means the run's choice), or None when it is fine."""
    if value is None:
        return None
    if attr == "optimizer":
        from amp_notebook.optim import OptimizerError, make_optimizer

        try:
            make_optimizer(value)
        except OptimizerError as exc:
            return f"{node.describe()} optimizer: {exc}"
        return None
    least = NODE_ATTRIBUTES[attr]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        return f"{node.describe()} {attr}: expected an int >= {least}, or None for the run's choice, got {value!r}"
    return None


def _check_attrs(graph: Graph) -> list[Problem]:
    return [
        Problem(node.name, None, problem)
        for node in graph.nodes.values()
        for attr in NODE_ATTRIBUTES
        if (problem := attribute_problem(node, attr, getattr(node, attr))) is not None
    ]


MAX_NODE_PARAMETERS = 2**28  # 1 GiB of float32 in one node: an embedding of 1M words x 256 fits


def _check_sizes(graph: Graph) -> list[Problem]:
    problems = []
    for node in graph.nodes.values():
        shapes = node.op.param_shapes()
        count = sum(math.prod(shape) for shape in shapes.values())
        if count > MAX_NODE_PARAMETERS:
            listed = ", ".join(f"{k} {' x '.join(map(str, v))}" for k, v in shapes.items())
            problems.append(
                Problem(
                    node.name, None,
                    f"{node.describe()} has {count:,} parameters ({listed}), more than {MAX_NODE_PARAMETERS:,} "
                    f"({MAX_NODE_PARAMETERS * 4 // 2**30} GiB of float32); check its sizes for a typo, or split it",
                )
            )  # fmt: skip
    return problems


def _check_replicas(graph: Graph) -> list[Problem]:
    problems = []
    for group in graph.replica_groups:
        missing = [n for n in group if n not in graph.nodes]
        if missing:
            problems.append(Problem(missing[0], None, f"replica group {group} names missing node(s) {missing}"))
            continue
        unparameterized = [n for n in group if graph.nodes[n].kind not in O.PARAMETERIZED]
        if unparameterized:
            problems.append(
                Problem(
                    unparameterized[0], None,
                    f"replica group {group} names node(s) {unparameterized} without parameters; only "
                    f"{sorted(O.PARAMETERIZED)} nodes can be tied as replicas",
                )
            )  # fmt: skip
            continue
        shapes = {n: graph.nodes[n].op.param_shapes() for n in group}
        if len({repr(s) for s in shapes.values()}) > 1:
            problems.append(Problem(group[0], None, f"replica group {group}: parameter shapes differ: {shapes}"))
    return problems
