"""The paper's appendix C: a GGSNN on hypothetical 1 TFLOPS devices, throughput and link bandwidth.

This reuses :func:`amp_notebook.runtime.whatif.appendix_c` (its docstring derives the estimate): the
GGSNN-shaped graph of Linear nodes (hidden 200, 30 nodes and 30 edges per graph, 4 propagation steps) on
2 simulated 1 TFLOPS devices with free links, message passing on one and the GRU-like update on the
other, 8 graphs in flight. Beside the simulated figures stand the paper's (6.5e3 graphs/s; 1.2 Gb/s, which
is that throughput times one N x H float32 matrix per graph) and the analytic bound of the busiest device
(its FLOPs per graph over 1 TFLOPS). The simulator counts the node states crossing each link twice per
propagation step (forward and backward), ``node_state_crossings_per_link`` times the paper's one.
``quick`` simulates 16 graphs instead of 64.
"""

from __future__ import annotations

from typing import Any

from amp_notebook.runtime.whatif import appendix_c


def run(quick: bool = False) -> dict[str, Any]:
    result = appendix_c(keys=16 if quick else 64)
    run_ = result.pop("run")
    result["staleness"] = run_.staleness
    result["makespan_s"] = run_.makespan_s
    result["ratios_to_paper"] = {
        "throughput": result["throughput_per_s"] / result["paper"]["throughput_per_s"],
        "busiest_link_bandwidth": result["busiest_link_bits_per_s"] / result["paper"]["bandwidth_bits_per_s"],
    }
    result["quick"] = quick
    return result


__all__ = ["run"]
