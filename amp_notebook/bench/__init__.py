"""Benchmarks: figures measured next to a peer in the same run (never asserted in timed tests).

``amp-notebook bench NAME [--json]`` runs one; each prints a short table and, with ``--json``, one JSON
object as its last line. Every figure is the median of several repeats because this kind of machine is
shared and noisy.
"""

from amp_notebook.bench.registry import BENCHMARKS, run_benchmark

__all__ = ["BENCHMARKS", "run_benchmark"]
