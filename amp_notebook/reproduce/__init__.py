"""``amp-notebook reproduce``: the AMPNet paper's Tables 1 and 2, Figs. 5 and 6 and appendix C, rerun here
and printed beside the paper's own figures.

One module per experiment (:mod:`~amp_notebook.reproduce.table1`, :mod:`~amp_notebook.reproduce.table2`,
:mod:`~amp_notebook.reproduce.fig5`, :mod:`~amp_notebook.reproduce.fig6`,
:mod:`~amp_notebook.reproduce.appendix_c`), each with ``run(quick=False, ...) -> dict``;
:mod:`~amp_notebook.reproduce.paper` holds the paper's figures as data;
:mod:`~amp_notebook.reproduce.workloads` the models as the paper lays them out, with their PyTorch peers and
targets; :mod:`~amp_notebook.reproduce.machine` what a figure was measured on;
:mod:`~amp_notebook.reproduce.report` writes the HTML; :mod:`~amp_notebook.reproduce.command` is the
command line.
"""

from amp_notebook.reproduce.command import EXPERIMENTS, run_experiments

__all__ = ["EXPERIMENTS", "run_experiments"]
