"""PyTorch peers that no comparison benchmark had yet: the paper's 4-layer MLP (``amp-notebook reproduce``).

torch is imported inside the functions (the package never imports it at run time outside ``bench/``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from amp_notebook.data.batch import Dataset


def torch_mlp_run(
    data: Dataset, epochs: int = 1, *, hidden: int = 784, lr: float = 0.05, seed: int = 0, threads: int = 2,
    target: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Plain SGD on ``data``'s keys as minibatches, Linear + ReLU layers as ``models.mlp`` (three hidden, one
    output), cross-entropy, after one untimed warm-up step. Each epoch visits the minibatches in a new order
    and, with a ``target``, evaluates on the validation keys (timed) and stops once the accuracy reaches it.

    Returns ``instances_per_s`` (training instances over the timed wall clock, evaluation included),
    ``val_accuracy`` per epoch (with a target), ``epochs_to_target`` and ``time_to_target_s`` (None if missed).
    """
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

    def tensors(keys: list[Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.from_numpy(np.asarray(b.inputs["x"], dtype=np.float32)),
                 torch.from_numpy(b.inputs["target"]).long()) for b in keys]  # fmt: skip

    batches, val = tensors(data.train), tensors(data.val)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    def accuracy() -> float:
        with torch.no_grad():
            correct = sum(int((net(x).argmax(1) == y).sum()) for x, y in val)
        return correct / max(1, sum(len(y) for _, y in val))

    step(*batches[0])  # warm-up: torch initialises its kernels lazily
    rng = np.random.default_rng(seed)
    curve: list[float] = []
    reached: dict[str, Any] = {"epochs_to_target": None, "time_to_target_s": None}
    trained = 0
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        for i in rng.permutation(len(batches)):
            step(*batches[i])
            trained += len(batches[i][1])
        if target is None:
            continue
        curve.append(accuracy())
        if curve[-1] >= target:
            reached = {"epochs_to_target": epoch, "time_to_target_s": time.perf_counter() - start}
            break
    return {"instances_per_s": trained / (time.perf_counter() - start), "val_accuracy": curve, **reached}


def torch_mlp(data: Dataset, hidden: int = 784, lr: float = 0.05, seed: int = 0, threads: int = 2) -> float:
    """Training instances per second of one epoch of :func:`torch_mlp_run`."""
    return float(torch_mlp_run(data, 1, hidden=hidden, lr=lr, seed=seed, threads=threads)["instances_per_s"])


__all__ = ["torch_mlp", "torch_mlp_run"]
