"""Getting a Ray cluster, placing workers on its nodes, and aligning their clocks with the driver's.

Clusters. :func:`connect` joins the cluster at ``address`` (``"ray://..."`` or ``"host:port"`` of a head
started with ``ray start --head``), or, with no address and Ray not yet initialized, starts a local one:
``ray.init`` with its own temporary directory, ``num_cpus`` set, no Ray dashboard and no usage report. A
Ray the caller has initialized already is used as it is. The local Ray stays up for later runs of the same
process (starting one costs seconds); :func:`shutdown` ends it, and so does the interpreter's exit.

Start-up cost. Every Ray process (its agents, and each worker actor) imports ``ray``, which imports
``jsonschema``, which, when the optional ``rfc3987_syntax`` package is installed (JupyterLab's
dependencies install it), compiles an Earley grammar at import: measured here, 1.9 s of CPU per process out
of 2.3 s. On a busy 2-core machine that pushed Ray's agents past the raylet's fixed start-up deadline, and
it made every run's actors start slowly. Processes of a local Ray that :func:`connect` starts therefore
see, first on their ``PYTHONPATH``, a directory whose ``rfc3987_syntax`` module raises ImportError: jsonschema
then skips its IRI format checker (which Ray does not use) and ``import ray`` costs 0.45 s of CPU. The
driver's own environment is left as it was. ``AMP_RAY_FAST_IMPORTS=0`` turns this off.

Placement. Worker ``w`` runs on node ``w mod N`` of the cluster's N alive nodes (the driver's node first),
pinned there with a node-affinity strategy, so two workers on a 2-node cluster sit on different machines
and the trace says which machine each lane is.

Clocks. Trace times are read on each worker's own clock (``time.perf_counter``: monotonic, but with an
arbitrary origin per machine). The driver estimates each worker's offset at start-up from ``PINGS`` round
trips, Cristian-style: it reads its clock ``t0``, asks the worker for its clock ``tw``, reads ``t1``;
the worker read ``tw`` somewhere in ``[t0, t1]``, so ``offset = (t0 + t1) / 2 - tw`` is off by at most
``(t1 - t0) / 2``. The round trip with the smallest span gives the estimate and its error bound. Worker
times become driver times by adding the offset. The driver measures again at the end; the difference is
the drift over the run (clock rates differ by parts per million between machines, and by nothing on one
machine, where every process reads the same monotonic clock). Both are in the run's ``backend_stats``.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from amp_notebook.errors import AmpError

PINGS = 8
START_ATTEMPTS = 3  # a local start that times out (a machine too busy to start Ray's agents in time) is retried


class ClusterError(AmpError, RuntimeError):
    """The Ray cluster cannot be joined or cannot start what a run needs; the message says what failed and
    what to do (start Ray, install the same amp_notebook on every node, pass its address)."""


@dataclass(frozen=True)
class ClockOffset:
    """How a worker's clock relates to the driver's: driver time = worker time + ``offset_s``, within
    ``error_s`` (half the best round trip of :func:`measure_offset`). Owns these two numbers, measured at
    deployment; never adjusts a clock: the driver shifts the trace rows a worker ships by it."""

    offset_s: float  # driver time = worker time + offset_s
    error_s: float  # the estimate is within this of the truth (half the best round trip)

    def as_dict(self) -> dict[str, float]:
        return {"offset_s": self.offset_s, "error_s": self.error_s}


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the cluster at ``address``, use the Ray already initialized, or start a local one (module doc)."""
    if ray.is_initialized():
        if address is not None and not _same_cluster(address):
            raise ClusterError(
                f"Ray is already connected to a cluster (at {ray.get_runtime_context().gcs_address}), not to "
                f"{address!r}; call amp_notebook.runtime.backends.ray.shutdown() (or ray.shutdown()) first"
            )
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster with no token
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:
        ray.init(address=address, configure_logging=False, log_to_driver=False)
        return
    cpus = num_cpus if num_cpus is not None else os.cpu_count() or 1
    with ray_process_environment():
        _start_local(cpus)
    atexit.register(shutdown)


def _start_local(cpus: int) -> None:
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(
                num_cpus=cpus, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="amp-ray-"),
                configure_logging=False, log_to_driver=False,
            )  # fmt: skip
            break
        except Exception as exc:  # Ray raises a bare Exception when its processes start too slowly
            if attempt == START_ATTEMPTS or "timed out during startup" not in str(exc):
                raise ClusterError(
                    f"could not start a local Ray ({attempt} attempt(s)): {exc}. On a busy machine Ray's own "
                    "processes may start too slowly; try again, or start one with `ray start --head` and pass "
                    "its address (address='127.0.0.1:6379')"
                ) from exc


@contextmanager
def ray_process_environment() -> Iterator[None]:
    """While Ray processes are started inside: the settings of the module docstring in ``os.environ``
    (Ray's processes inherit them), restored afterwards."""
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "RAY_enable_worker_prestart",
                                                     "RAY_prestart_worker_first_driver")}  # fmt: skip
    # Ray's agents must be up within a fixed time after the raylet starts; idle workers prestarted at the same
    # moment compete with them for the CPU, and a run starts its actors itself anyway.
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    if os.environ.get("AMP_RAY_FAST_IMPORTS", "1") != "0":
        path = [str(_import_stubs()), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _import_stubs() -> Path:
    directory = Path(tempfile.gettempdir()) / "amp-ray-import-stubs"
    directory.mkdir(exist_ok=True)
    stub = directory / "rfc3987_syntax.py"
    if not stub.exists():
        stub.write_text(
            '"""Written by amp_notebook for the processes of a local Ray: see amp_notebook.runtime.backends.'
            'ray_cluster."""\n\nraise ImportError("rfc3987_syntax is skipped in this Ray process (slow import)")\n'
        )
    return directory


def _same_cluster(address: str) -> bool:
    gcs = ray.get_runtime_context().gcs_address
    return address in (gcs, "auto") or address.split("://")[-1] == gcs


def shutdown() -> None:
    """Disconnect from Ray; a local Ray that :func:`connect` started stops with it."""
    if ray.is_initialized():
        ray.shutdown()


def alive_nodes() -> list[dict[str, Any]]:
    """The cluster's alive nodes, the driver's own first, then in a stable order."""
    here = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: (n["NodeID"] != here, n["NodeID"]))


def node_for(worker: int, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return nodes[worker % len(nodes)]


def measure_offset(actor: Any, pings: int = PINGS) -> ClockOffset:
    """The worker's clock offset from the best of ``pings`` round trips (module docstring)."""
    best: tuple[float, float] | None = None  # (round trip, offset)
    for _ in range(pings):
        t0 = time.perf_counter()
        tw = ray.get(actor.ping.remote())
        t1 = time.perf_counter()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, (t0 + t1) / 2 - tw)
    assert best is not None
    return ClockOffset(offset_s=best[1], error_s=best[0] / 2)


__all__ = [
    "PINGS", "ClockOffset", "ClusterError", "alive_nodes", "connect", "measure_offset", "node_for",
    "ray_process_environment", "shutdown",
]  # fmt: skip
