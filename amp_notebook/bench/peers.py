"""PyTorch peers that no comparison benchmark had yet: the paper's 4-layer MLP (``amp-notebook reproduce``).

torch is imported inside the function (the package never imports it at run time outside ``bench/``).
"""

from __future__ import annotations

import time

import numpy as np

from amp_notebook.data.batch import Dataset


def torch_mlp(data: Dataset, hidden: int = 784, lr: float = 0.05, seed: int = 0, threads: int = 2) -> float:
    """Training instances per second of one epoch of plain SGD on ``data``'s keys as minibatches (after one
    untimed warm-up step): Linear + ReLU layers as ``models.mlp`` (three hidden, one output), cross-entropy."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    width = int(data.train[0].inputs["x"].shape[1])
    classes = int(data.num_classes or 10)
    net = nn.Sequential(
        nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
        nn.ReLU(), nn.Linear(hidden, classes),
    )  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    batches = [
        (torch.from_numpy(np.asarray(b.inputs["x"], dtype=np.float32)), torch.from_numpy(b.inputs["target"]).long())
        for b in data.train
    ]

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    step(*batches[0])  # warm-up: torch initialises its kernels lazily
    order = np.random.default_rng(seed).permutation(len(batches))
    start = time.perf_counter()
    for i in order:
        step(*batches[i])
    return sum(len(batches[i][1]) for i in order) / (time.perf_counter() - start)


__all__ = ["torch_mlp"]
