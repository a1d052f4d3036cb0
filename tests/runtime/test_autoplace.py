"""placement="auto": the search picks the simulator's fastest candidate, deterministically, and reports it.

The schedule claims run on the simulated backend with fixed node costs (virtual time), so they are exact
and independent of this machine's load; only the threaded and CLI tests measure costs here, and they
assert nothing about speed.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest

from amp_notebook.bench.common import repeat_epochs
from amp_notebook.cli import main
from amp_notebook.data import Dataset
from amp_notebook.models import mlp
from amp_notebook.runtime.autoplace import (
    autoplace,
    describe,
    every_assignment,
    measure_costs,
    per_message_seconds,
    simulated_node_seconds,
    split_load,
)
from amp_notebook.runtime.costs import CostModel, NodeCost
from amp_notebook.runtime.placement import place
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset

HEAVY = ("linear1", "linear2", "linear3", "linear4")


def paper_mlp_costs() -> CostModel:
    """The paper's MLP shape: two heavy middle layers (f=1, b=2), light first and last layers."""
    heavy, light = NodeCost(fwd_s=1.0, bwd_s=2.0, update_s=0.1), NodeCost(fwd_s=0.1, bwd_s=0.1, update_s=0.01)
    return CostModel.zero(nodes={"linear1": light, "linear2": heavy, "linear3": heavy, "linear4": light})


def workload() -> Dataset:
    return repeat_epochs(digits_dataset(), 2)


def simulated(heavy: dict[str, int], priority: str, keys: int = 16) -> float:
    data = workload()
    data = Dataset(data.name, [data.train[i % len(data.train)] for i in range(keys)], [])
    r = train(mlp(64, 16), data, workers=2, mode="amp", max_active_keys=4, validate=False, shuffle=False,
              trace=False, backend="simulated", costs=paper_mlp_costs(), placement=dict(heavy), priority=priority,
              params=mlp(64, 16).init_params(0, np.dtype("float32")))  # fmt: skip
    return r.train_instances_per_s


@pytest.mark.filterwarnings("ignore:graph 'mlp'.*get no node:UserWarning")  # some assignments leave a worker idle
@pytest.mark.parametrize("priority", ["fifo", "backward_first"])
def test_auto_picks_the_simulators_fastest_placement(priority: str) -> None:
    g = mlp(64, 16)
    choice = autoplace(g, workload(), workers=2, max_active_keys=4, priority=priority, costs=paper_mlp_costs(),
                       min_gain=0.0)  # fmt: skip
    fastest = max(c.predicted_per_s for c in choice.candidates)
    assert choice.predicted_per_s == fastest
    assert [c.name for c in choice.candidates[:2]] == ["round_robin", "balanced"]
    # the prediction is what the simulator gives that placement, to the last bit
    assert simulated(choice.chosen.heavy, priority) == choice.predicted_per_s
    # and nothing better exists: every assignment of the four layers to two workers, simulated
    everything = [simulated(dict(zip(HEAVY, a, strict=True)), priority) for a in itertools.product((0, 1), repeat=4)]
    assert choice.predicted_per_s == pytest.approx(max(everything), rel=1e-12)
    assert choice.placement == {**choice.placement, **choice.chosen.heavy}  # the full placement keeps the choice


@pytest.mark.filterwarnings("ignore:graph 'mlp'.*get no node:UserWarning")
@pytest.mark.parametrize(
    ("workers", "backend", "expected"),
    [(2, "threads", "light_first"), (1, "threads", "backward_first"), (2, "simulated", "backward_first")],
)
def test_auto_simulates_the_inbox_priority_the_run_will_use(workers: int, backend: str, expected: str) -> None:
    # a run that names no priority gets its backend's default; the candidates are judged under that one
    choice = autoplace(mlp(64, 16), workload(), workers=workers, max_active_keys=4, backend=backend,
                       costs=paper_mlp_costs(), min_gain=0.0)  # fmt: skip
    assert choice.config.priority == expected
    if workers == 2:
        assert simulated(choice.chosen.heavy, expected) == choice.predicted_per_s


def test_auto_splits_the_heavy_layers_that_round_robin_puts_together() -> None:
    # heavy layers 1 and 3: round robin puts both on worker 0 and leaves worker 1 the light ones
    heavy, light = NodeCost(fwd_s=1.0, bwd_s=2.0, update_s=0.1), NodeCost(fwd_s=0.1, bwd_s=0.1, update_s=0.01)
    costs = CostModel.zero(nodes={"linear1": heavy, "linear2": light, "linear3": heavy, "linear4": light})
    choice = autoplace(mlp(64, 16), workload(), workers=2, max_active_keys=4, priority="fifo", costs=costs)
    by_name = {c.name: c.predicted_per_s for c in choice.candidates}
    assert choice.chosen.heavy["linear1"] != choice.chosen.heavy["linear3"]
    assert choice.predicted_per_s > 1.5 * by_name["round_robin"]


def test_auto_is_deterministic_and_keeps_pinned_nodes() -> None:
    g = mlp(64, 16)
    g.nodes["linear2"].worker = 1
    a = autoplace(g, workload(), workers=2, priority="fifo", costs=paper_mlp_costs())
    b = autoplace(g, workload(), workers=2, priority="fifo", costs=paper_mlp_costs())
    assert a.placement == b.placement
    assert [c.as_dict() for c in a.candidates] == [c.as_dict() for c in b.candidates]
    assert all(c.heavy["linear2"] == 1 for c in a.candidates)
    assert a.summary()["costs"] == "the run's cost model"


def testevery_assignment_counts_a_renaming_of_interchangeable_workers_once() -> None:
    assert len(every_assignment(7, 2, True, 64)) == 64  # the GG-NN's heavy nodes on 2 workers
    assert every_assignment(7, 2, True, 63) is None
    assert len(every_assignment(7, 2, False, 1000)) == 128
    three = every_assignment(3, 3, True, 100)  # the ways to split 3 nodes into at most 3 groups (Bell number 5)
    assert three == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (0, 1, 2)]
    assert len(every_assignment(4, 3, False, 100)) == 81
    assert every_assignment(0, 2, True, 1) == [()]
    assert describe({"a": 0, "b": 1, "c": 1}, 2) == "worker 1 runs b, c"
    assert describe({"a": 0}, 2) == "worker 1 runs no heavy node"
    assert describe({"a": 0, "b": 2}, 3) == "a on 0, b on 2"


@pytest.mark.filterwarnings("ignore:graph 'mlp'.*get no node:UserWarning")
def test_auto_simulatesevery_assignment_when_there_are_few() -> None:
    choice = autoplace(mlp(64, 16), workload(), workers=2, max_active_keys=4, priority="fifo", costs=paper_mlp_costs(),
                       min_gain=0.0)  # fmt: skip
    seen = {tuple(c.heavy[n] ^ c.heavy[HEAVY[0]] for n in HEAVY) for c in choice.candidates}
    assert len(choice.candidates) == len(seen) == 8  # 2 ** 4 assignments, each with its mirror image
    assert choice.candidates[2].name == "load split"  # the even split of one worker's time (its own test below)
    assert all(c.name.startswith("every assignment: worker 1 runs") for c in choice.candidates[3:])
    # pinned, the workers are no longer interchangeable: every assignment of the other three, both ways round
    g = mlp(64, 16)
    g.nodes["linear2"].worker = 1
    pinned = autoplace(g, workload(), workers=2, priority="fifo", costs=paper_mlp_costs(), min_gain=0.0)
    assignments = {tuple(c.heavy[n] for n in HEAVY) for c in pinned.candidates}
    assert len(assignments) == len(pinned.candidates) == 8 and all(a[1] == 1 for a in assignments)
    # devices of different speeds are not interchangeable either: both ways round, 2 ** 4 assignments
    costs = paper_mlp_costs().with_(flops=[1e12, 2e12])
    uneven = autoplace(mlp(64, 16), workload(), workers=2, max_active_keys=4, priority="fifo", costs=costs)
    assert len({tuple(c.heavy[n] for n in HEAVY) for c in uneven.candidates}) == len(uneven.candidates) == 16
    # over the budget: the local search from the faster of round robin and balanced
    searched = autoplace(mlp(64, 16), workload(), workers=2, max_active_keys=4, priority="fifo",
                         costs=paper_mlp_costs(), max_evaluations=6)  # fmt: skip
    assert 3 < len(searched.candidates) <= 6
    assert all(c.name.startswith("local search") for c in searched.candidates[3:])


def test_near_ties_go_to_the_paper_default() -> None:
    # sync mode runs one key at a time: placements differ only in how updates on two workers overlap
    choice = autoplace(mlp(64, 16), workload(), workers=2, mode="sync", costs=paper_mlp_costs(), min_gain=0.05)
    rates = [c.predicted_per_s for c in choice.candidates]
    assert max(rates) < 1.05 * rates[0]
    assert choice.chosen.name == "round_robin"
    exact = autoplace(mlp(64, 16), workload(), workers=2, mode="sync", costs=paper_mlp_costs(), min_gain=0.0)
    assert exact.predicted_per_s == max(c.predicted_per_s for c in exact.candidates)


def test_train_auto_on_the_simulator_reports_prediction_and_result() -> None:
    g = mlp(64, 16)
    r = train(g, workload(), workers=2, mode="amp", max_active_keys=4, priority="fifo", validate=False,
              placement="auto", backend="simulated", costs=paper_mlp_costs())  # fmt: skip
    s = r.summary()
    assert s["placement_strategy"] == "auto"
    auto = s["autoplace"]
    assert auto["chosen"] and auto["candidates"] and auto["costs"] == "the run's cost model"
    assert auto["measured_per_s"] == r.train_instances_per_s > 0
    assert {n: r.placement[n] for n in HEAVY} == auto["heavy"]
    json.dumps(s)  # JSON-ready


def test_measure_costs_times_every_node_on_this_machine() -> None:
    g = mlp(64, 16)
    costs = measure_costs(g, digits_dataset(), measure_keys=4)
    assert set(costs.nodes) == set(g.nodes)
    for name in HEAVY:
        c = costs.nodes[name]
        assert c.fwd_s is not None and c.fwd_s > 0 and c.bwd_s is not None and c.bwd_s > 0
        assert c.update_s is not None and c.update_s > 0
    assert costs.nodes["x"].bwd_s is None  # inputs get no gradient


def test_a_joins_cost_per_message_is_its_share_of_each_keys_time() -> None:
    """A join of 3 inputs stores two arrivals (1 us each) and computes at the third (10 us): 4 us per message,
    not the median row's 1 us. The median over keys ignores one key slowed 100x by the machine; a node that
    a key visits several times (a loop) and a bundle's row (3 messages) count per message too."""
    rows = []  # node, phase, key, start, end, messages
    for key in range(5):
        scale = 100.0 if key == 2 else 1.0
        stored, computed = (7, 0, key, 0.0, 1e-6 * scale, 1), (7, 0, key, 0.0, 1e-5 * scale, 1)
        rows += [stored, stored, computed, *[(8, 1, key, 0.0, 2e-6, 1)] * 4, (9, 0, key, 0.0, 6e-6, 3)]
    names = ("node", "phase", "key", "start", "end", "messages")
    events = {c: np.array(v) for c, v in zip(names, zip(*rows, strict=True), strict=True)}
    got = per_message_seconds(events)
    assert set(got) == {(7, 0), (8, 1), (9, 0)}
    assert got[(7, 0)] == pytest.approx(4e-6) and got[(8, 1)] == pytest.approx(2e-6)
    assert got[(9, 0)] == pytest.approx(2e-6)


def test_train_auto_on_threads_measures_costs() -> None:
    r = train(mlp(64, 16), digits_dataset(), workers=2, epochs=1, placement="auto", validate=False)
    auto = r.summary()["autoplace"]
    assert auto["costs"] == "measured on this machine"
    assert set(auto["node_costs_s"]) >= set(HEAVY)
    assert r.train_instances == digits_dataset().train_instances


def test_cli_parses_placement_auto() -> None:
    from amp_notebook.cli import build_parser

    assert build_parser().parse_args(["train", "--model", "rnn", "--placement", "auto"]).placement == "auto"


@pytest.mark.slow
def test_cli_train_placement_auto(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--model", "mlp", "--placement", "auto", "--epochs", "1", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert out["placement_strategy"] == "auto"
    assert out["autoplace"]["predicted_per_s"] > 0 and out["autoplace"]["measured_per_s"] > 0
    assert "placement (auto)" in captured.err


def test_autoplace_refuses_an_empty_dataset() -> None:
    with pytest.raises(ValueError, match="has no training keys"):
        autoplace(mlp(64, 16), Dataset("empty", [], []), costs=paper_mlp_costs())


@pytest.mark.slow
def test_auto_gains_over_round_robin_on_the_paper_mlp_in_virtual_time() -> None:
    # two simulated cores at the frozen per-core speed of this project's machine (FLOP model, no load)
    from amp_notebook.reproduce.fig5 import COSTS

    data = repeat_epochs(digits_dataset(), 4)

    def gain(placement: str) -> float:
        rates = {mode: train(mlp(64, 784), data, workers=2, mode=mode, max_active_keys=4, validate=False,
                             placement=placement, backend="simulated", costs=COSTS, trace=False).train_instances_per_s
                 for mode in ("amp", "sync")}  # fmt: skip
        return rates["amp"] / rates["sync"]

    assert gain("auto") >= 1.8 > 1.6 > gain("round_robin")


def busiest(graph: Any, assignment: dict[str, int], seconds: dict[str, float], workers: int) -> float:
    """The busiest worker's share of ``seconds`` with the heavy nodes where ``assignment`` puts them."""
    load = [0.0] * workers
    for name, w in place(graph, workers, overrides=assignment).items():
        load[w] += seconds[name]
    return max(load)


@pytest.mark.filterwarnings("ignore:graph 'mlp'.*get no node:UserWarning")  # the brute force's one-sided splits
def test_the_load_split_leaves_the_busiest_worker_least_with_light_nodes_following() -> None:
    """The MLP's 4 Linears (and the light nodes that follow each) with given node times: the split whose busiest
    worker has least; on 3 workers too, and by local search where every assignment is over the limit."""
    graph = mlp(64, 16)
    weight = dict(zip(HEAVY, (5.0, 1.0, 1.0, 3.0), strict=True))
    seconds = {n: weight.get(n, 0.0) for n in graph.nodes}
    follower = next(n for n in graph.nodes if n not in weight and place(graph, 2, overrides={"linear1": 0,
                    "linear2": 1, "linear3": 1, "linear4": 1})[n] == 1)  # fmt: skip
    seconds[follower] = 0.5  # a light node's time goes with the heavy node it follows
    split = split_load(graph, seconds, 2)
    assert set(split) == set(HEAVY) and busiest(graph, split, seconds, 2) == 5.5  # linear1 alone against the rest
    every = [dict(zip(HEAVY, a, strict=True)) for a in itertools.product((0, 1), repeat=4)]
    assert busiest(graph, split, seconds, 2) == min(busiest(graph, a, seconds, 2) for a in every)
    assert busiest(graph, split_load(graph, seconds, 3), seconds, 3) == 5.0  # linear1 alone, linear4 alone
    searched = split_load(graph, seconds, 2, limit=1)  # too many to try: a local search from round robin
    assert busiest(graph, searched, seconds, 2) == 5.5 < busiest(graph, {}, seconds, 2)
    for worker in (0, 1):  # pinned to either worker, linear1 keeps it and the rest go to the other
        pinned = mlp(64, 16)
        pinned.nodes["linear1"].worker = worker
        split = split_load(pinned, seconds, 2)
        assert "linear1" not in split and set(split.values()) == {1 - worker}
        assert busiest(pinned, split, seconds, 2) == 5.5


def test_auto_simulates_the_load_split_of_one_workers_simulated_time() -> None:
    """The third candidate: split_load of each node's time in a simulated 1-worker run, simulated like the
    others. Here it is neither round robin (linear1 and linear3 against linear2 and linear4) nor contiguous
    stages: linear2 alone against the other three."""
    light = NodeCost(fwd_s=1.0, bwd_s=1.0)
    costs = CostModel.zero(nodes={"linear1": light, "linear2": NodeCost(fwd_s=5.0, bwd_s=5.0), "linear3": light,
                                  "linear4": NodeCost(fwd_s=3.0, bwd_s=3.0)})  # fmt: skip
    g = mlp(64, 16)
    choice = autoplace(g, workload(), workers=2, max_active_keys=4, priority="fifo", costs=costs, max_evaluations=3)
    assert [c.name for c in choice.candidates] == ["round_robin", "balanced", "load split"]
    sample = Dataset("d", workload().train[:16], [])
    seconds = simulated_node_seconds(g, sample, choice.config, costs, g.init_params(0, np.dtype("float32")))
    assert seconds["linear2"] > 0 and seconds["linear2"] == pytest.approx(5 / 3 * seconds["linear4"])
    split = choice.candidates[2].heavy
    assert split == split_load(g, seconds, 2)
    assert split["linear2"] != split["linear1"] == split["linear3"] == split["linear4"]
    assert choice.candidates[2].predicted_per_s > max(c.predicted_per_s for c in choice.candidates[:2])
