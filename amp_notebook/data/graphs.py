"""Graph instances for the gated graph sequence network (GGS-NN) experiments: bAbI 15, molecules, QM9.

Data
----
A `GraphInstance` is one graph: `num_nodes` nodes with float64 annotations `node_features` (n, F), directed
edges `edges` (E, 2) int64 as (source, destination) with an `edge_types` (E,) int64 in 0..n_edge_types-1, a
`target` (a class id, a node index for node selection, or a float for regression), an optional `question`
node and free-form `meta`. `graph_dataset` turns instances into a `Dataset` of one key per graph.

Three sources, all built here without downloads:

- `babi15_graphs`: bAbI task 15 (basic deduction). Individuals ("Gertrude") and animal types ("mouse") are
  nodes; facts "X is a T" and "T are afraid of U" are edges of types 0 (`is_a`) and 1 (`afraid_of`), each
  with its reverse edge (types 2 and 3). The question "What is X afraid of?" marks X; the answer is the node
  U that X's type fears. Distractor individuals and types inflate each graph to `inflate_to` nodes (the
  AMPNet paper inflates to ~54 nodes).
- `amp_notebook.data.molecules.molecule_graphs`: random connected molecules with H, C, N, O, F whose bond
  orders (single, double, triple; edge types 0, 1, 2) add up exactly to each atom's valence, with a
  regression target computed from the structure.
- `amp_notebook.data.qm9.load_qm9_xyz` / `load_qm9_directory`: QM9's published xyz files, with bonds
  inferred from interatomic distances and a chosen property (default U0) as regression target.

Undirected bonds appear as two directed edges (i -> j and j -> i) of the same type; bAbI's directed facts use
separate reverse types instead, as in Li et al. (2016).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from amp_notebook.data.batch import Batch, Dataset, check_count
from amp_notebook.errors import DataFormatError, SettingError

Task = Literal["classification", "regression", "node_selection"]
TASKS: tuple[str, ...] = ("classification", "regression", "node_selection")

# ---------------------------------------------------------------------------------------------------------
# Graph instances and datasets


@dataclass(frozen=True)
class GraphInstance:
    """One graph: node annotations (n, F), directed typed edges (E, 2) / (E,), a target, an optional question."""

    num_nodes: int
    node_features: np.ndarray
    edges: np.ndarray
    edge_types: np.ndarray
    target: float | int
    question: int | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    @property
    def feature_width(self) -> int:
        return int(self.node_features.shape[1])

    def validate(
        self,
        n_edge_types: int,
        task: str = "regression",
        num_classes: int | None = None,
        index: int | None = None,
        split: str | None = None,
    ) -> None:
        """Raise `DataFormatError` (a `ValueError`, naming the instance `index`) unless shapes, edges and target
        are consistent."""
        where = "graph instance" + (f" {index}" if index is not None else "") + (f" ({split})" if split else "")
        n = self.num_nodes
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
            raise DataFormatError(
                f"{where}: empty graph: expected num_nodes >= 1, found {n!r}; drop the instance or add its nodes"
            )
        feats = self.node_features
        if feats.ndim != 2 or feats.shape[0] != n:
            raise DataFormatError(f"{where}: expected node_features of shape ({n}, F), found {feats.shape}")
        if not np.all(np.isfinite(feats)):
            raise DataFormatError(f"{where}: expected finite node_features, found NaN or inf")
        if self.edges.ndim != 2 or self.edges.shape[1] != 2 or not np.issubdtype(self.edges.dtype, np.integer):
            raise DataFormatError(
                f"{where}: expected integer edges of shape (E, 2), found {self.edges.dtype} {self.edges.shape}"
            )
        if self.edge_types.shape != (self.edges.shape[0],) or not np.issubdtype(self.edge_types.dtype, np.integer):
            raise DataFormatError(
                f"{where}: expected integer edge_types of shape ({self.edges.shape[0]},) (one per edge), "
                f"found {self.edge_types.dtype} {self.edge_types.shape}"
            )
        bad = np.flatnonzero(np.any((self.edges < 0) | (self.edges >= n), axis=1))
        if bad.size:
            e = int(bad[0])
            raise DataFormatError(
                f"{where}: edge {e} = {self.edges[e].tolist()} has an endpoint out of range: expected node "
                f"indices in 0..{n - 1}; fix the edge list or num_nodes"
            )
        bad = np.flatnonzero((self.edge_types < 0) | (self.edge_types >= n_edge_types))
        if bad.size:
            e = int(bad[0])
            raise DataFormatError(
                f"{where}: edge {e} has unknown edge type {int(self.edge_types[e])}: expected 0..{n_edge_types - 1} "
                f"(n_edge_types={n_edge_types}); raise n_edge_types or fix the edge types"
            )
        self._validate_target(where, task, num_classes)

    def _validate_target(self, where: str, task: str, num_classes: int | None) -> None:
        n, t = self.num_nodes, self.target
        is_int = isinstance(t, (int, np.integer)) and not isinstance(t, bool)
        if task == "regression":
            if not isinstance(t, (int, float, np.integer, np.floating)) or not np.isfinite(t):
                raise DataFormatError(f"{where}: expected a finite float regression target, found {t!r}")
        elif task == "classification":
            if num_classes is None:
                raise SettingError(
                    "num_classes", f"{where}: task 'classification' needs num_classes to check the label"
                )
            if not is_int or not 0 <= t < num_classes:
                raise DataFormatError(
                    f"{where}: label out of range: expected a class id in 0..{num_classes - 1}, found {t!r}"
                )
        elif task == "node_selection":
            if not is_int or not 0 <= t < n:
                raise DataFormatError(
                    f"{where}: label out of range: expected a target node index in 0..{n - 1}, found {t!r}"
                )
        else:
            raise SettingError("task", f"task: expected one of {TASKS}, got {task!r}")
        q = self.question
        if q is not None and (isinstance(q, bool) or not isinstance(q, (int, np.integer)) or not 0 <= q < n):
            raise DataFormatError(f"{where}: expected the question node index in 0..{n - 1}, found {q!r}")


def graph_batch(instance: GraphInstance, task: str) -> Batch:
    """One graph as one key: `node_features`, `edges`, `edge_types`, `target` (1,) and maybe `question` (1,)."""
    dtype = np.float64 if task == "regression" else np.int64
    inputs = {
        "node_features": np.ascontiguousarray(instance.node_features, dtype=np.float64),
        "edges": np.ascontiguousarray(instance.edges, dtype=np.int64),
        "edge_types": np.ascontiguousarray(instance.edge_types, dtype=np.int64),
        "target": np.array([instance.target], dtype=dtype),
    }
    if instance.question is not None:
        inputs["question"] = np.array([instance.question], dtype=np.int64)
    return Batch(inputs=inputs, size=1, fields={"n_nodes": instance.num_nodes, "n_edges": instance.num_edges})


def ggsnn_batch(instance: GraphInstance, n_edge_types: int, steps: int, task: str) -> Batch:
    """One graph as one key for the GGS-NN graph (`amp_notebook.models.ggsnn`): `ggsnn_bucket([instance], ...)`."""
    return ggsnn_bucket([instance], n_edge_types, steps, task)


def ggsnn_bucket(instances: Sequence[GraphInstance], n_edge_types: int, steps: int, task: str) -> Batch:
    """Graphs as ONE key for the GGS-NN graph (`amp_notebook.models.ggsnn`): their disjoint union.

    Graph k's nodes become rows `offset_k .. offset_k + N_k - 1` of one node table and its edges are
    shifted by `offset_k`, so propagation over the union is propagation over each graph; the readout sums
    each graph's nodes separately (by `node_graph`), and the loss averages over the graphs of the key.

    Inputs: `node_features` (N, F) float64 (N = total nodes); for every edge type e, `src{e}` and `dst{e}`
    (steps, E_e) int64, the sources and destinations of that type's edges tiled once per propagation step
    (the graph ungroups them with counter `t`, so step t's Gather and ScatterSum join the index message of
    the same state; E_e may be 0); `typed_edges` (steps, 2, E) int64, all edges sorted by destination
    with rows `src * n_edge_types + type` and `dst`, tiled the same way (for the fused model's
    TypedEdgeSum); `node_graph` (N,) int64, the graph (0..K-1) each node belongs to;
    `target` (K,) int64 class ids, or for node selection each graph's answer as a row of the union (its node
    index plus `offset_k`), or (K, 1) float64 for regression. Size K; fields `n_nodes`, `n_edges` (totals).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SettingError("steps", f"steps: expected an int >= 1 (propagation steps), got {steps!r}")
    if not instances:
        raise SettingError("instances", "ggsnn_bucket: expected at least one graph, got none")
    sizes = [g.num_nodes for g in instances]
    offsets = np.cumsum([0, *sizes[:-1]])
    edges = np.concatenate([g.edges.astype(np.int64) + off for g, off in zip(instances, offsets, strict=True)])
    types = np.concatenate([g.edge_types for g in instances])
    dtype = np.float64 if task == "regression" else np.int64
    inputs = {
        "node_features": np.ascontiguousarray(np.concatenate([g.node_features for g in instances]), dtype=np.float64),
        "node_graph": np.repeat(np.arange(len(instances), dtype=np.int64), sizes),
        "target": np.array([g.target for g in instances], dtype=dtype),
    }
    if task == "node_selection":  # each graph's answer node, counted in the union
        inputs["target"] = inputs["target"] + offsets.astype(np.int64)
    if task == "regression":  # one column per graph, as the regression readout's (K, 1) prediction
        inputs["target"] = inputs["target"][:, None]
    by_dst = np.argsort(edges[:, 1], kind="stable")
    typed_edges = np.stack([edges[by_dst, 0] * n_edge_types + types[by_dst].astype(np.int64), edges[by_dst, 1]])
    inputs["typed_edges"] = np.ascontiguousarray(np.tile(typed_edges, (steps, 1, 1)))
    for e in range(n_edge_types):
        typed = edges[types == e]
        inputs[f"src{e}"] = np.ascontiguousarray(np.tile(typed[:, 0], (steps, 1)))
        inputs[f"dst{e}"] = np.ascontiguousarray(np.tile(typed[:, 1], (steps, 1)))
    return Batch(inputs=inputs, size=len(instances), fields={"n_nodes": int(sum(sizes)), "n_edges": len(edges)})


def ggsnn_dataset(
    instances: Sequence[GraphInstance],
    n_edge_types: int,
    task: Task,
    steps: int,
    *,
    val_instances: Sequence[GraphInstance] = (),
    num_classes: int | None = None,
    name: str = "graphs",
    graphs_per_key: int = 1,
    val_graphs_per_key: int | None = None,
) -> Dataset:
    """As `graph_dataset` (same checks and meta, plus `steps`), with keys built by `ggsnn_bucket`: consecutive
    runs of `graphs_per_key` graphs (the last key may hold fewer); validation keys of `val_graphs_per_key`
    (default: the same; validation runs forward only, so its bucket size changes no update)."""
    check_count("graphs_per_key", graphs_per_key, 1)
    val_size = graphs_per_key if val_graphs_per_key is None else val_graphs_per_key
    check_count("val_graphs_per_key", val_size, 1)
    checked = graph_dataset(
        instances, n_edge_types, task, val_instances=val_instances, num_classes=num_classes, name=name
    )

    def buckets(group: Sequence[GraphInstance], size: int) -> list[Batch]:
        return [ggsnn_bucket(group[i : i + size], n_edge_types, steps, task) for i in range(0, len(group), size)]

    return Dataset(
        name=name,
        train=buckets(instances, graphs_per_key),
        val=buckets(val_instances, val_size),
        num_classes=checked.num_classes,
        meta={**checked.meta, "steps": steps, "graphs_per_key": graphs_per_key},
    )


def graph_dataset(
    instances: Sequence[GraphInstance],
    n_edge_types: int,
    task: Task = "classification",
    *,
    val_instances: Sequence[GraphInstance] = (),
    num_classes: int | None = None,
    name: str = "graphs",
) -> Dataset:
    """One key per graph (validated): training keys from `instances`, validation keys from `val_instances`.

    `num_classes` is required for classification. All graphs must share one feature width and either all or
    none may have a question node. Meta: `n_edge_types`, `feature_width`, `task`, `num_classes`.
    """
    if task not in TASKS:
        raise SettingError("task", f"task: expected one of {TASKS}, got {task!r}")
    if task == "classification" and num_classes is None:
        raise SettingError(
            "num_classes", "num_classes: required for task='classification' (labels are checked against it)"
        )
    if not instances:
        raise SettingError("instances", "instances: expected at least one training graph, got none")
    width = instances[0].node_features.shape[1] if instances[0].node_features.ndim == 2 else -1
    has_question = instances[0].question is not None
    for split, group in (("train", instances), ("val", val_instances)):
        for i, inst in enumerate(group):
            inst.validate(n_edge_types, task, num_classes, index=i, split=split)
            if inst.feature_width != width:
                raise DataFormatError(
                    f"graph instance {i} ({split}): expected node_features width {width} (that of training "
                    f"instance 0), found {inst.feature_width}; use one feature encoding for the whole dataset"
                )
            if (inst.question is not None) != has_question:
                raise DataFormatError(
                    f"graph instance {i} ({split}): expected {'a' if has_question else 'no'} question node "
                    "(as training instance 0), found the opposite; give all instances a question or none"
                )
    return Dataset(
        name=name,
        train=[graph_batch(g, task) for g in instances],
        val=[graph_batch(g, task) for g in val_instances],
        num_classes=num_classes if task == "classification" else None,
        meta={"n_edge_types": n_edge_types, "feature_width": width, "task": task, "num_classes": num_classes},
    )


# ---------------------------------------------------------------------------------------------------------
# bAbI task 15 (basic deduction)

BABI15_EDGE_TYPES: tuple[str, ...] = ("is_a", "afraid_of", "is_a_reverse", "afraid_of_reverse")
BABI15_TYPES: tuple[str, ...] = (
    "mouse", "sheep", "wolf", "cat", "lion", "dog", "fox", "owl", "bear", "rabbit",
    "snake", "frog", "horse", "goat", "tiger", "hawk", "deer", "swan", "eagle", "bat",
)  # fmt: skip
BABI15_NAMES: tuple[str, ...] = (
    "Gertrude", "Winona", "Jessica", "Emily", "Bill", "Fred", "Mary", "Julie",
    "Sandra", "Daniel", "John", "Jeff", "Greg", "Lily", "Bernhard", "Brian",
)  # fmt: skip
# Node annotation columns: question marker, is an individual, is a type, then one-hot of the type name.
BABI15_FEATURE_WIDTH = 3 + len(BABI15_TYPES)

Fact = tuple[str, str, str]


def babi15_answer(facts: Sequence[Fact], who: str) -> str:
    """The answer to "What is `who` afraid of?", checking that exactly one chain of facts gives it."""
    kinds = [obj for subj, rel, obj in facts if subj == who and rel == "is_a"]
    if len(kinds) != 1:
        raise DataFormatError(f"babi15: expected exactly one 'is_a' fact about {who!r}, found {kinds}")
    fears = [obj for subj, rel, obj in facts if subj == kinds[0] and rel == "afraid_of"]
    if len(fears) != 1:
        raise DataFormatError(f"babi15: expected exactly one 'afraid_of' fact about {kinds[0]!r}, found {fears}")
    return fears[0]


def _babi15_instance(rng: np.random.Generator, inflate_to: int, task: Task) -> GraphInstance:
    n_types = min(len(BABI15_TYPES), max(2, inflate_to // 2))
    n_people = inflate_to - n_types
    types = [BABI15_TYPES[i] for i in rng.choice(len(BABI15_TYPES), size=n_types, replace=False).tolist()]
    people = [BABI15_NAMES[i] for i in rng.permutation(len(BABI15_NAMES))[:n_people].tolist()]
    people += [f"person{k}" for k in range(len(BABI15_NAMES) + 1, n_people + 1)]
    facts: list[Fact] = [(p, "is_a", types[int(rng.integers(n_types))]) for p in people]
    for i, kind in enumerate(types):
        other = int(rng.integers(n_types - 1))
        facts.append((kind, "afraid_of", types[other + (other >= i)]))
    facts = [facts[i] for i in rng.permutation(len(facts)).tolist()]

    names = [types[i] if i < n_types else people[i - n_types] for i in rng.permutation(inflate_to).tolist()]
    node = {name: i for i, name in enumerate(names)}
    who = people[int(rng.integers(n_people))]
    answer = babi15_answer(facts, who)

    feats = np.zeros((inflate_to, BABI15_FEATURE_WIDTH), dtype=np.float64)
    feats[node[who], 0] = 1.0
    for name, i in node.items():
        if name in BABI15_TYPES:
            feats[i, 2] = 1.0
            feats[i, 3 + BABI15_TYPES.index(name)] = 1.0
        else:
            feats[i, 1] = 1.0
    rel_type = {"is_a": 0, "afraid_of": 1}
    forward = [(node[s], node[o], rel_type[r]) for s, r, o in facts]
    triples = forward + [(o, s, t + 2) for s, o, t in forward]
    edges = np.array([(s, o) for s, o, _ in triples], dtype=np.int64)
    answer_class = BABI15_TYPES.index(answer)
    return GraphInstance(
        num_nodes=inflate_to,
        node_features=feats,
        edges=edges,
        edge_types=np.array([t for _, _, t in triples], dtype=np.int64),
        target=node[answer] if task == "node_selection" else answer_class,
        question=node[who],
        meta={
            "node_names": names,
            "facts": facts,
            "question_text": f"What is {who} afraid of?",
            "answer": answer,
            "answer_node": node[answer],
            "answer_class": answer_class,
        },
    )


def babi15_graphs(n: int, seed: int = 0, inflate_to: int = 54, task: Task = "node_selection") -> list[GraphInstance]:
    """`n` bAbI-15 graphs of exactly `inflate_to` nodes (deterministic given `seed`).

    Each graph has `min(20, max(2, inflate_to // 2))` type nodes, each afraid of exactly one other type, and
    the remaining nodes are individuals, each of exactly one type, so every question has exactly one answer
    (checked by `babi15_answer`). With `inflate_to=8` this is the original task's size (4 types, 4 people);
    the extra nodes are distractors. Nodes are shuffled so that positions carry no information.

    The target is the answer's node index (`task="node_selection"`) or its index in `BABI15_TYPES`
    (`task="classification"`, 20 classes); `question` is the asked individual's node. Node annotations
    (width `BABI15_FEATURE_WIDTH`): question marker, is-individual, is-type, one-hot type name. Edge types:
    `BABI15_EDGE_TYPES`. Meta: node names, facts (subject, relation, object), question text and answer.
    """
    check_count("n", n, 0)
    check_count("inflate_to", inflate_to, 3)
    if task not in ("node_selection", "classification"):
        raise SettingError("task", f"task: expected 'node_selection' or 'classification', got {task!r}")
    rng = np.random.default_rng(seed)
    return [_babi15_instance(rng, inflate_to, task) for _ in range(n)]
