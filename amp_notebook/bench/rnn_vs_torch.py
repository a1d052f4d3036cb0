"""The list-reduction RNN, ours (asynchronous, 2 workers) against PyTorch on the same data, same run.

Ours: the paper's Fig. 2 graph, buckets of 100 equal-length sequences as keys, mode amp. PyTorch 2.13
CPU: nn.Embedding + nn.RNN(relu) + nn.Linear with packed sequences, minibatches of 100 sequences of
mixed lengths, 2 intra-op threads (the same 2 cores), the same optimizer settings. Both evaluate on the
validation set after every epoch and stop at the target accuracy (or the epoch cap). Figures per side:
training instances per second (training and evaluation wall time both counted), time and epochs to the
target, final validation accuracy; ratio = ours / torch instances per second.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from amp_notebook.bench.common import report
from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.models.rnn import rnn
from amp_notebook.runtime.session import EpochStats
from amp_notebook.runtime.train import train

HIDDEN, EMBED, VOCAB, CLASSES = 128, 64, 14, 10
SETTINGS: dict[str, Any] = {"mode": "amp", "workers": 2, "max_active_keys": 4, "min_update_frequency": 10,
                            "optimizer": {"name": "adam", "lr": 3e-3, "clip_norm": 5.0, "lr_decay": 0.85},
                            "max_bundle": 1}  # fmt: skip  # as the README's figures were measured


def ours(data: Any, target: float, max_epochs: int, seed: int) -> dict[str, Any]:
    reached: dict[str, Any] = {}

    def on_epoch(stats: EpochStats) -> bool:
        acc = stats.val_accuracy or 0.0
        print(f"  ours  epoch {stats.epoch + 1}: val accuracy {acc:.4f} at {stats.end_s:.1f}s", flush=True)
        if acc >= target and not reached:
            reached.update(time_to_target_s=stats.end_s, epochs_to_target=stats.epoch + 1)
        return bool(reached)

    r = train(rnn(VOCAB, HIDDEN, EMBED, CLASSES), data, epochs=max_epochs, seed=seed, on_epoch=on_epoch, **SETTINGS)
    return {
        "instances_per_s": r.train_instances_per_s,
        "time_to_target_s": reached.get("time_to_target_s"),
        "epochs_to_target": reached.get("epochs_to_target"),
        "final_val_accuracy": r.val_accuracy[-1],
        "epochs_run": len(r.history),
        "settings": SETTINGS,
    }


def torch_baseline(data: Any, target: float, max_epochs: int, seed: int) -> dict[str, Any]:
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence

    torch.manual_seed(seed)
    torch.set_num_threads(2)
    train_seqs, train_y = _unbucket(data.train)
    val_seqs, val_y = _unbucket(data.val)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.rnn = nn.RNN(EMBED, HIDDEN, nonlinearity="relu")
            self.out = nn.Linear(HIDDEN, CLASSES)

        def forward(self, padded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            packed = pack_padded_sequence(self.embed(padded), lengths, enforce_sorted=False)
            _, h = self.rnn(packed)
            return self.out(h[-1])

    def batches(seqs: list[np.ndarray], y: np.ndarray, order: np.ndarray, size: int = 100):
        for i in range(0, len(order), size):
            idx = order[i : i + size]
            lengths = torch.tensor([len(seqs[j]) for j in idx])
            padded = torch.zeros((int(lengths.max()), len(idx)), dtype=torch.long)
            for col, j in enumerate(idx):
                padded[: len(seqs[j]), col] = torch.from_numpy(seqs[j])
            yield padded, lengths, torch.from_numpy(y[idx])

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=SETTINGS["optimizer"]["lr"])
    decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=SETTINGS["optimizer"]["lr_decay"])
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    trained = 0
    reached: dict[str, Any] = {}
    acc = 0.0
    epochs = 0
    for epoch in range(max_epochs):
        epochs = epoch + 1
        net.train()
        for padded, lengths, yb in batches(train_seqs, train_y, rng.permutation(len(train_seqs))):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(padded, lengths), yb)
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), SETTINGS["optimizer"]["clip_norm"])
            opt.step()
            trained += len(yb)
        decay.step()
        net.eval()
        correct = 0
        with torch.no_grad():
            for padded, lengths, yb in batches(val_seqs, val_y, np.arange(len(val_seqs))):
                correct += int((net(padded, lengths).argmax(1) == yb).sum())
        acc = correct / len(val_seqs)
        now = time.perf_counter() - start
        print(f"  torch epoch {epochs}: val accuracy {acc:.4f} at {now:.1f}s", flush=True)
        if acc >= target:
            reached.update(time_to_target_s=now, epochs_to_target=epochs)
            break
    wall = time.perf_counter() - start
    return {
        "instances_per_s": trained / wall,
        "time_to_target_s": reached.get("time_to_target_s"),
        "epochs_to_target": reached.get("epochs_to_target"),
        "final_val_accuracy": acc,
        "epochs_run": epochs,
        "settings": {"threads": 2, "batch": 100, "packed_sequences": True, **SETTINGS["optimizer"]},
    }


def _unbucket(batches: list[Any]) -> tuple[list[np.ndarray], np.ndarray]:
    seqs: list[np.ndarray] = []
    ys: list[int] = []
    for b in batches:
        tokens = b.inputs["tokens"]
        for col in range(b.size):
            seqs.append(np.ascontiguousarray(tokens[:, col]))
        ys.extend(int(v) for v in b.inputs["target"])
    return seqs, np.asarray(ys, dtype=np.int64)


def run(
    target: float = 0.97, max_epochs: int = 40, n_train: int = 100_000, n_val: int = 10_000, seed: int = 0,
    quick: bool = False,
) -> dict[str, Any]:  # fmt: skip
    if quick:
        n_train, n_val, max_epochs = 5000, 500, 2
    data = list_reduction_dataset(n_train=n_train, n_val=n_val, seed=seed)
    a = ours(data, target, max_epochs, seed)
    b = torch_baseline(data, target, max_epochs, seed)
    result = {
        "ours": a, "torch": b, "throughput_ratio": a["instances_per_s"] / b["instances_per_s"],
        "target": target, "n_train": n_train, "n_val": n_val,
    }  # fmt: skip
    print(report([
        ("ours inst/s", f"{a['instances_per_s']:.0f}"), ("torch inst/s", f"{b['instances_per_s']:.0f}"),
        ("throughput ratio", f"{result['throughput_ratio']:.2f}"),
        ("ours time/epochs to target", f"{a['time_to_target_s']} / {a['epochs_to_target']}"),
        ("torch time/epochs to target", f"{b['time_to_target_s']} / {b['epochs_to_target']}"),
    ]))  # fmt: skip
    return result
