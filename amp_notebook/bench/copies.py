"""The machine's own ceiling for a scaling figure: independent copies of the 1-worker run, side by side.

N workers of one run can at best do what N unrelated copies of the 1-worker run do at once on the same
cores: the copies exchange no message, never wait for each other and share no driver, so their combined
throughput over one copy's is what the cores themselves give this workload. On a laptop or a bare server
that is close to N. On a virtual machine it can be well under it: the virtual CPUs may be hardware threads
of one physical core, the host's other tenants take their turns, and caches, memory bandwidth and clock
speeds are shared. A scaling figure is then read against this ceiling, not against N.

How it is measured. :class:`Copies` starts ``count`` processes (spawned: each its own interpreter, BLAS
and engine, nothing inherited from the caller's threads), each building the workload and running it once
to warm up. :meth:`Copies.rate` asks the first ``k`` of them to start the same run at the same instant and
returns the instances trained by all of them over the span from the first timed start to the last end; a
copy that finishes early leaves its core idle inside that span, as a worker of a real run would. Only the
training itself is timed (each copy's :attr:`~amp_notebook.runtime.result.TrainResult.wall_s`), not its
setup. Idle copies wait on a pipe and take no CPU time.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
import traceback
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from amp_notebook.errors import AmpError, SettingError

START_AHEAD_S = 0.05  # the copies start this long after they are asked, so the last one asked is ready
READY_TIMEOUT_S = 600.0  # a copy that has not built and warmed up its run by then is reported as stuck


class CopyError(AmpError, RuntimeError):
    """A copy of the run failed, ended without a word, or was not ready in time; the message says which run
    and carries the copy's own traceback where it sent one."""


def _copy(conn: Connection, name: str, quick: bool, seed: int, engine: str, max_active_keys: int) -> None:
    """One copy (its own process): build the workload, warm up, then run on each request until told to quit."""
    import warnings

    try:
        from amp_notebook.bench.common import retry_diverged
        from amp_notebook.bench.scaling import figure_workload, settings
        from amp_notebook.runtime.train import train

        load = figure_workload(name, quick, seed, max_active_keys)  # the keys the figures train on

        def train_once(run_seed: int) -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return train(load.graph, load.data, workers=1, placement="round_robin",
                             **settings(load, engine, max_active_keys, run_seed))  # fmt: skip

        def run_once() -> tuple[float, float, int, list[int]]:
            diverged: list[int] = []  # a diverged run runs again from the next seed, as the figures' runs do
            r = retry_diverged(train_once, seed, diverged)
            end = time.monotonic()  # the clock every process on this machine shares
            return end - r.wall_s, end, r.train_instances, diverged

        run_once()
        conn.send(("ready",))
        while True:
            request = conn.recv()
            if request[0] == "quit":
                return
            delay = request[1] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            conn.send(("ran", *run_once()))
    except BaseException:  # the parent raises it with this text; the copy ends
        conn.send(("failed", traceback.format_exc()))


class Copies:
    """``count`` processes, each holding the 1-worker run of ``workload`` (a reproduction workload's name)
    ready on ``engine``; a context manager that ends them."""

    def __init__(self, workload: str, count: int, *, quick: bool, seed: int, engine: str, max_active_keys: int):
        if count < 1:
            raise SettingError("count", f"Copies: expected a count >= 1, got {count}")
        self.workload = workload
        self.diverged: list[int] = []  # seeds of timed runs that diverged and ran again from the next seed
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        try:
            for _ in range(count):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_copy, args=(child, workload, quick, seed, engine, max_active_keys),
                                   name=f"amp-copy-{len(self._procs)}", daemon=True)  # fmt: skip
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            for conn in self._conns:
                self._reply(conn, "ready", READY_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def rate(self, k: int) -> float:
        """Training instances per second of ``k`` copies started together (module docstring)."""
        if not 1 <= k <= len(self._conns):
            raise SettingError("k", f"Copies.rate: expected 1 to {len(self._conns)} copies, got {k}")
        start_at = time.monotonic() + START_AHEAD_S
        for conn in self._conns[:k]:
            conn.send(("run", start_at))
        runs = [self._reply(conn, "ran", None) for conn in self._conns[:k]]
        for *_, diverged in runs:
            self.diverged.extend(diverged)
        span = max(end for _, end, _, _ in runs) - min(start for start, _, _, _ in runs)
        return sum(n for _, _, n, _ in runs) / span if span > 0 else 0.0

    def close(self) -> None:
        """Tell every copy to quit and join it (a copy that does not end within 10 s is terminated)."""
        for conn in self._conns:
            with contextlib.suppress(OSError):  # it ended already
                conn.send(("quit",))
        for proc in self._procs:
            proc.join(10.0)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []

    def __enter__(self) -> Copies:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _reply(self, conn: Connection, expected: str, timeout: float | None) -> tuple[Any, ...]:
        if timeout is not None and not conn.poll(timeout):
            raise CopyError(f"a copy of the {self.workload} run was not ready after {timeout:.0f} s")
        try:
            message = conn.recv()
        except EOFError:
            why = "killed, or out of memory"
            raise CopyError(f"a copy of the {self.workload} run ended without a word ({why})") from None
        if message[0] == "failed":
            raise CopyError(f"a copy of the {self.workload} run failed:\n{message[1]}")
        assert message[0] == expected, message
        return tuple(message[1:])


__all__ = ["Copies", "CopyError"]
