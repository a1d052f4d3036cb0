"""The cost model of simulated hardware: how long a message takes on a device and on a link.

The simulated backend (``runtime/backends/simulated.py``) asks two questions per message: how long does
the worker that handles it stay busy, and, when an outgoing message crosses to another worker, when does
it arrive. This module answers both from a :class:`CostModel` (the user's description of the hardware)
compiled against a placed :class:`~amp_notebook.runtime.plan.Plan` into a :class:`CostTable`.

Handling time of a message at node n on device d::

    time = message_overhead_s + flops(op of n, direction, payload shape) / flops[d]

with the FLOP counts of the paper's appendix C for the heavy ops, ``k`` rows of width ``d_in`` into a
``Linear(d_in, d_out)``:

* forward ``2 k d_in d_out``;
* backward ``2 k d_in d_out`` for the gradient accumulation (``x^T g``) plus ``2 k d_in d_out`` for the
  gradient of the input (``g W^T``) when that gradient flows somewhere (not for a first layer);
* update ``update_flops_per_param`` (default 1) FLOPs per parameter, about ``d_in d_out`` (a node that
  updates pays ``update_overhead_s`` on top).

Every op states its own count (``Op.flops``, ``Op.element_flops``: a test keeps the list complete):
Embedding lookups and their scatter-add cost one FLOP per element moved; elementwise ops one or two per
element each way; softmax cross-entropy five per element forward and one backward (MSE three and one);
control flow, aggregation and inputs cost no FLOPs, only the per-message overhead. A join op is charged per
arriving message from that message's own payload. Per-node overrides (:class:`NodeCost`) replace the
computed time of a node outright, for ops the formulas do not describe well or for "what if this layer
were twice as slow" questions.

Link time of a message from worker a to worker b != a::

    arrival = end of handling + latency_s + 8 * bytes / bandwidth_bits_per_s

where ``bytes`` is the payload's element count times the wire precision (``float32``, ``float16`` or
``bfloat16``; integer payloads such as token ids keep their own width) plus ``header_bytes``. Messages
between nodes on one worker cost nothing to move. Links have no contention model: each message pays its
own transfer time, so the bandwidth a run *uses* (bits moved / makespan) is reported, and a link is not
slowed by its neighbours.

Receiving time of a message from another worker (CPU the receiver spends on it: deserializing it on a
cluster, reading it out of another core's cache)::

    receive = receive_overhead_s + receive_s_per_byte * bytes

The receiving worker owes it from the message's arrival and pays what it owes in its next step, whose
handling (and trace row) gets that much longer. Both are zero by default: the paper's model charges a
crossing message only the link.

Costs are looked up per message, so the table caches ``(node, direction, shape, dtype) -> (seconds,
bytes)``: a run with buckets of a few shapes evaluates the formulas a few times per node, and every other
message costs one dict lookup.

Two presets: :meth:`CostModel.tflops_device` (the paper's hypothetical 1 TFLOPS device, free links; the
default) and :meth:`CostModel.this_cpu` (FLOP/s and per-message overhead of one core of this machine,
measured once per process by :func:`calibrate_cpu`). :meth:`CostModel.zero` makes every cost zero.

The native engine's per-message overhead is measured by running it
(:func:`amp_notebook.runtime.calibrate.this_cpu`, which builds on :meth:`CostModel.this_cpu`).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import BWD, FWD
from amp_notebook.runtime.plan import Plan

WIRE_BYTES: dict[str, int] = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


class CostModelError(AmpError, ValueError):
    """A cost model that cannot describe hardware: names the field, what was expected and what was found."""


@dataclass(frozen=True)
class NodeCost:
    """Fixed handling times (seconds) for one node; ``None`` keeps the computed time for that phase."""

    fwd_s: float | None = None
    bwd_s: float | None = None
    update_s: float | None = None

    def check(self, node: str) -> None:
        for name in ("fwd_s", "bwd_s", "update_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise CostModelError(
                    f"NodeCost for node {node!r}: {name} expected a finite number of seconds >= 0, got {value!r}"
                )


@dataclass(frozen=True)
class Link:
    """One directed link's latency (s) and bandwidth (bits/s) overriding the model's defaults."""

    latency_s: float = 0.0
    bandwidth_bits_per_s: float = math.inf


@dataclass(frozen=True)
class CostModel:
    """Simulated hardware: device speed, per-message overhead, links, update cost and wire precision.

    ``flops`` is one FLOP/s figure for every device or a sequence with one per device;
    ``bandwidth_bits_per_s`` and ``latency_s`` apply to every link between two different workers unless
    ``links[(src, dst)]`` overrides them; ``nodes[name]`` fixes the handling times of one node.
    ``receive_overhead_s`` and ``receive_s_per_byte`` charge the receiver of a message from another worker
    (module docstring). ``math.inf`` is allowed for ``flops`` and ``bandwidth_bits_per_s`` (free compute, free
    links).
    """

    flops: float | Sequence[float] = 1e12
    message_overhead_s: float = 0.0
    latency_s: float = 0.0
    bandwidth_bits_per_s: float = math.inf
    update_flops_per_param: float = 1.0
    update_overhead_s: float = 0.0
    wire_dtype: str = "float32"
    header_bytes: int = 0
    receive_overhead_s: float = 0.0
    receive_s_per_byte: float = 0.0
    nodes: Mapping[str, NodeCost] = field(default_factory=dict)
    links: Mapping[tuple[int, int], Link] = field(default_factory=dict)

    def __post_init__(self) -> None:
        flops = self.flops if isinstance(self.flops, Sequence) else [self.flops]
        if not flops:
            raise CostModelError("CostModel.flops: expected a FLOP/s figure or one per device, got an empty list")
        for i, f in enumerate(flops):
            where = "CostModel.flops" if not isinstance(self.flops, Sequence) else f"CostModel.flops[{i}]"
            _positive(where, f, "FLOP/s of a device; 1e12 is the paper's 1 TFLOPS device")
        _positive("CostModel.bandwidth_bits_per_s", self.bandwidth_bits_per_s, "bits per second, e.g. 10e9 for 10 Gb/s")
        for name in ("message_overhead_s", "latency_s", "update_flops_per_param", "update_overhead_s",
                     "receive_overhead_s", "receive_s_per_byte"):  # fmt: skip
            _non_negative(f"CostModel.{name}", getattr(self, name))
        if self.wire_dtype not in WIRE_BYTES:
            raise CostModelError(f"CostModel.wire_dtype: expected one of {sorted(WIRE_BYTES)}, got {self.wire_dtype!r}")
        if isinstance(self.header_bytes, bool) or not isinstance(self.header_bytes, int) or self.header_bytes < 0:
            raise CostModelError(f"CostModel.header_bytes: expected an int >= 0, got {self.header_bytes!r}")
        for name, cost in self.nodes.items():
            if not isinstance(cost, NodeCost):
                raise CostModelError(
                    f"CostModel.nodes[{name!r}]: expected a NodeCost(fwd_s=..., bwd_s=..., update_s=...), "
                    f"got {type(cost).__name__}"
                )
            cost.check(name)
        for pair, link in self.links.items():
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(link, Link)):
                raise CostModelError(
                    f"CostModel.links: expected (src worker, dst worker) -> Link(...), got {pair!r} -> {link!r}"
                )
            _positive(f"CostModel.links[{pair}].bandwidth_bits_per_s", link.bandwidth_bits_per_s, "bits per second")
            _non_negative(f"CostModel.links[{pair}].latency_s", link.latency_s)

    # ----------------------------------------------------------------- presets
    @classmethod
    def tflops_device(cls, **changes: Any) -> CostModel:
        """The paper's hypothetical device (appendix C): 1 TFLOPS, no overhead, free links."""
        return replace(cls(), **changes)

    @classmethod
    def this_cpu(cls, **changes: Any) -> CostModel:
        """One core of this machine: FLOP/s and the Python engine's per-message overhead, measured once per
        process (for the native engine's: :func:`amp_notebook.runtime.calibrate.this_cpu`)."""
        flops, overhead = calibrate_cpu()
        return replace(cls(flops=flops, message_overhead_s=overhead), **changes)

    @classmethod
    def zero(cls, **changes: Any) -> CostModel:
        """Every cost zero: all of a run happens at virtual time 0 (for equivalence tests)."""
        return replace(cls(flops=math.inf), **changes)

    def with_(self, **changes: Any) -> CostModel:
        """A copy with fields changed (validated again)."""
        return replace(self, **changes)

    def device_flops(self, workers: int) -> list[float]:
        if isinstance(self.flops, Sequence):
            if len(self.flops) != workers:
                raise CostModelError(
                    f"CostModel.flops: expected one FLOP/s figure per device ({workers}), got {len(self.flops)}; "
                    "give one number for all devices or a list as long as the number of workers"
                )
            return [float(f) for f in self.flops]
        return [float(self.flops)] * workers

    def spec(self) -> dict[str, Any]:
        """JSON-ready description (inf as the string "inf")."""

        def num(x: float) -> float | str:
            return "inf" if x == math.inf else x

        return {
            "flops": [num(f) for f in self.flops] if isinstance(self.flops, Sequence) else num(self.flops),
            "message_overhead_s": self.message_overhead_s,
            "latency_s": self.latency_s,
            "bandwidth_bits_per_s": num(self.bandwidth_bits_per_s),
            "update_flops_per_param": self.update_flops_per_param,
            "update_overhead_s": self.update_overhead_s,
            "wire_dtype": self.wire_dtype,
            "header_bytes": self.header_bytes,
            "receive_overhead_s": self.receive_overhead_s,
            "receive_s_per_byte": self.receive_s_per_byte,
            "nodes": {n: {k: v for k, v in c.__dict__.items() if v is not None} for n, c in self.nodes.items()},
            "links": {f"{a}->{b}": {"latency_s": lk.latency_s, "bandwidth_bits_per_s": num(lk.bandwidth_bits_per_s)}
                      for (a, b), lk in self.links.items()},
        }  # fmt: skip

    def compile(self, plan: Plan) -> CostTable:
        return CostTable(self, plan)


def _positive(where: str, value: Any, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not value > 0:
        raise CostModelError(f"{where}: expected a number > 0 ({hint}), got {value!r}")


def _non_negative(where: str, value: Any) -> None:
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise CostModelError(f"{where}: expected a finite number >= 0, got {value!r}")


# --------------------------------------------------------------------- FLOP counts


def message_flops(op: Any, direction: int, shape: tuple[int, ...], grad_input: bool) -> float:
    """FLOPs to handle one message with a payload of ``shape`` at an op: the op's own count (``Op.flops``;
    appendix C for the heavy ops, a per-element count for the others)."""
    return float(op.flops(direction == FWD, tuple(shape), grad_input))


def parameter_count(op: Any) -> int:
    return sum(math.prod(s) for s in op.param_shapes().values())


class CostTable:
    """A :class:`CostModel` bound to a placed plan: per-message costs with a cache, link matrices."""

    def __init__(self, model: CostModel, plan: Plan) -> None:
        unknown = sorted(set(model.nodes) - set(plan.names))
        if unknown:
            raise CostModelError(
                f"CostModel.nodes names node(s) {unknown} that graph {plan.graph.name!r} does not have; "
                f"its nodes are {list(plan.names)}"
            )
        workers = plan.workers
        for a, b in model.links:
            if not (0 <= a < workers and 0 <= b < workers) or a == b:
                raise CostModelError(
                    f"CostModel.links[({a}, {b})]: expected two different workers in 0..{workers - 1}, got ({a}, {b})"
                )
        self.model = model
        self.plan = plan
        self.flops = model.device_flops(workers)
        self.overhead = model.message_overhead_s
        self.wire_bytes = WIRE_BYTES[model.wire_dtype]
        self.latency = [[0.0 if a == b else model.latency_s for b in range(workers)] for a in range(workers)]
        self.seconds_per_bit = [
            [0.0 if a == b else 1.0 / model.bandwidth_bits_per_s for b in range(workers)] for a in range(workers)
        ]
        for (a, b), link in model.links.items():
            self.latency[a][b] = link.latency_s
            self.seconds_per_bit[a][b] = 1.0 / link.bandwidth_bits_per_s
        self.receive_overhead = model.receive_overhead_s
        self.receive_per_byte = model.receive_s_per_byte
        self.receives = self.receive_overhead > 0 or self.receive_per_byte > 0
        self.fixed: list[NodeCost | None] = [model.nodes.get(n) for n in plan.names]
        self.update_s: list[float] = [self._update_seconds(i) for i in range(len(plan.names))]
        self._cache: dict[tuple[int, int, tuple[int, ...], Any], tuple[float, float, int]] = {}

    def _update_seconds(self, node: int) -> float:
        fixed = self.fixed[node]
        if fixed is not None and fixed.update_s is not None:
            return fixed.update_s
        if not self.plan.parameterized[node]:
            return 0.0
        flops = self.model.update_flops_per_param * parameter_count(self.plan.ops[node])
        return self.model.update_overhead_s + flops / self.flops[self.plan.owner[node]]

    def message(self, node: int, direction: int, payload: Any) -> tuple[float, int]:
        """(handling seconds, bytes on a link) of a message with this payload; cached by shape and dtype."""
        overhead, work, nbytes = self._lookup(node, direction, payload)
        return overhead + work, nbytes

    def receive_s(self, nbytes: int) -> float:
        """CPU seconds a worker spends receiving a message of ``nbytes`` from another worker."""
        return self.receive_overhead + self.receive_per_byte * nbytes

    def message_bytes(self, node: int, direction: int, payload: Any) -> int:
        """Bytes a message with this payload puts on a link."""
        return self._lookup(node, direction, payload)[2]

    def bundle(self, bundle: Sequence[Any]) -> float:
        """Handling seconds of a bundle (messages for one node, direction and port run as one call): the
        per-message overhead once, plus the work (FLOPs at the device's rate) of every payload."""
        return self.ends(0.0, bundle)

    def ends(self, start: float, bundle: Sequence[Any]) -> float:
        """When the handling of ``bundle``, begun at ``start``, ends (the simulator's step clock, per step)."""
        first = bundle[0]
        if len(bundle) == 1:
            payload = first.payload
            if payload.__class__ is np.ndarray:  # the common case: probe the cache with _lookup's key
                hit = self._cache.get((first.node, first.direction, payload.shape, payload.dtype))
                if hit is not None:
                    return start + hit[0] + hit[1]
            overhead, work, _ = self._lookup(first.node, first.direction, payload)
            return start + overhead + work
        node, direction = first.node, first.direction
        seconds = 0.0
        overhead = 0.0
        for m in bundle:
            o, work, _ = self._lookup(node, direction, m.payload)
            seconds += work
            overhead = max(overhead, o)
        return start + overhead + seconds

    def _lookup(self, node: int, direction: int, payload: Any) -> tuple[float, float, int]:
        """(per-call overhead seconds, work seconds, bytes), cached by (node, direction, shape, dtype)."""
        return self.of_shape(node, direction, getattr(payload, "shape", ()), getattr(payload, "dtype", None))

    def of_shape(self, node: int, direction: int, shape: tuple[int, ...], dtype: Any) -> tuple[float, float, int]:
        """(per-call overhead seconds, work seconds, bytes) of a message whose payload has this shape and dtype
        (None: no payload), cached; the native simulator asks this once per distinct key."""
        key = (node, direction, shape, dtype)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._compute(node, direction, shape, dtype)
        return hit

    def _compute(self, node: int, direction: int, shape: tuple[int, ...], dtype: Any) -> tuple[float, float, int]:
        """(per-call overhead seconds, work seconds, bytes) of one message; a node's fixed cost or an update's
        cost counts as work (it is charged per message, also inside a bundle)."""
        plan = self.plan
        fixed = self.fixed[node]
        seconds: float | None = None
        if direction not in (FWD, BWD):
            seconds = self.update_s[node]
        elif fixed is not None:
            seconds = fixed.fwd_s if direction == FWD else fixed.bwd_s
        if seconds is not None:
            overhead = 0.0
        else:
            grad_input = bool(plan.grad_inputs[node])
            flops = message_flops(plan.ops[node], direction, tuple(shape), grad_input)
            overhead, seconds = self.overhead, flops / self.flops[plan.owner[node]]
        size = math.prod(shape) if shape else 1
        if dtype is not None and np.dtype(dtype).kind == "f":
            nbytes = size * self.wire_bytes
        elif dtype is not None:
            nbytes = size * np.dtype(dtype).itemsize
        else:
            nbytes = 0
        return overhead, seconds, nbytes + self.model.header_bytes


# --------------------------------------------------------------------- calibration


def calibrate_cpu(repeats: int = 5) -> tuple[float, float]:
    """(FLOP/s of one core on a float32 matmul, seconds of glue per message), measured once per process.

    FLOP/s: the best of a few ``(128, 512) @ (512, 512)`` products with BLAS pinned to one thread (the
    threaded backend pins it too). Overhead: the time per message of a worker handling messages through
    no-op nodes, i.e. the Python glue a message costs besides its math (queues and thread hand-offs of
    the threaded backend are not included).
    """
    return _matmul_flops(repeats), _measure_overhead(repeats)


@functools.cache
def _matmul_flops(repeats: int) -> float:
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    best = math.inf
    with threadpool_limits(limits=1, user_api="blas"):
        a @ b  # warm up
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    return 2.0 * 128 * 512 * 512 / max(best, 1e-9)


@functools.cache
def _measure_overhead(repeats: int) -> float:
    from amp_notebook.ir.message import Message, State
    from amp_notebook.ir.ops import NodeContext
    from amp_notebook.runtime.plan import compile_plan
    from amp_notebook.runtime.worker import Worker

    g = Graph("calibrate")
    h = g.identity(g.input("x", width=1), name="a")
    g.mse(g.identity(h, name="b"), g.input("target", width=1), name="loss")
    plan = compile_plan(g, dict.fromkeys(g.nodes, 0), 1)
    worker = Worker(0, plan, {i: NodeContext(n) for i, n in enumerate(plan.names)}, local_updates=True)
    node = plan.index["a"]
    payload = np.zeros((1, 1))
    state = State(key=0)
    best = math.inf
    n = 2000
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            worker.handle([Message(node, "in", FWD, payload, state, False)])
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def noop_chain(length: int = 16, workers: int = 2) -> Graph:
    """Input -> Linear(1, 1) -> ``length`` Identity nodes -> MSE, the Identity nodes pinned round robin over
    ``workers`` (with 2 every hop crosses threads): on keys of one instance of width 1 nearly all of a
    message's time is the runtime's own (``amp-notebook bench overhead``, the native engine's calibration)."""
    g = Graph("noop_chain")
    h = g.linear(g.input("x", width=1), 1, name="first")
    for i in range(length):
        h = g.identity(h, name=f"noop{i}", worker=i % workers)
    g.mse(h, g.input("target", width=1), name="loss")
    return g


__all__ = [
    "WIRE_BYTES", "CostModel", "CostModelError", "CostTable", "Link", "NodeCost", "calibrate_cpu",
    "message_flops", "noop_chain", "parameter_count",
]  # fmt: skip
