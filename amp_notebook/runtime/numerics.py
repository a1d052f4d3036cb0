"""Non-finite values: a NaN or an infinity stops the run before any parameter is updated with it, or is skipped.

A NaN in the data, a loss that overflows or a gradient that explodes used to train silently on to
``train loss nan``. Three checks, each where a value enters or is about to be used, find them:

1. **Inputs**, when the controller admits a key (``Session`` on the driver thread): each float payload of
   the key, before any message of it exists;
2. **Losses**, when a loss node reports one (``Worker._forward``), before the worker hands the key's
   backward messages on;
3. **Gradients**, when a parameterized node is about to update (``Worker.apply_update``): what it has
   accumulated since its last update, before the optimizer sees it. A gradient that went non-finite
   anywhere upstream of a parameterized node arrives here, so this check also covers the backward pass.

``on_nonfinite`` says what follows:

* ``"raise"`` (the default): a :class:`NonFiniteError` (a :class:`~amp_notebook.runtime.worker.NodeError`)
  naming the node, what was non-finite and the key, and the run stops. No parameter has been updated
  with the value: the input's key never ran, the loss's backward never left its node, the update never
  happened.
* ``"skip"``: the key is skipped and counted (``TrainResult.nonfinite_skipped``, per epoch in the history,
  ``Run.status``, the dashboard). An input's key is completed at once without running; a non-finite loss
  is left out of the epoch's figures; a node whose accumulated gradients are non-finite drops them and
  does not update (in ``amp`` mode those may include other keys' gradients summed with the bad one
  since the node's last update: every key that contributed is counted). Gradients of a skipped key
  that were finite and already applied elsewhere stay applied.
* ``"ignore"``: no check at all (the run trains on, as before these checks existed).

Cost. The checks look at whole arrays: one vectorized ``np.isfinite(x).all()`` per float input payload of
each batch, once per run (later epochs admit the same arrays), and per parameter per update (on this
machine it beat a single ``np.sum``, which also needs overflow warnings silenced, at every size measured,
from 1 to 784 x 784 elements), and one float per loss. Only when a check fails is the culprit located (its
index, and which key).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.errors import SettingError
from amp_notebook.ir.message import State
from amp_notebook.runtime.worker import NodeError

if TYPE_CHECKING:
    from amp_notebook.data.batch import Dataset
    from amp_notebook.ir.ops import NodeContext
    from amp_notebook.runtime.controller import KeyInfo
    from amp_notebook.runtime.plan import Plan

ON_NONFINITE = ("raise", "skip", "ignore")
FIX = (
    "look for NaN/inf in the data, lower the learning rate or clip gradients (optimizer clip_norm); or train "
    "with on_nonfinite='skip' to skip such keys and count them"
)


class NonFiniteError(NodeError):  # a NodeError, hence an AmpError and a RuntimeError
    """NaN or infinity in an input, a loss or a gradient; ``node``, ``what`` and ``keys`` say where."""

    def __init__(self, node: str, kind: str, what: str, keys: list[int], detail: str) -> None:
        self.node, self.kind, self.what, self.keys, self.detail = node, kind, what, list(keys), detail
        self.direction = {"input": "fwd", "loss": "fwd", "gradient": "update"}[what]
        self.port = ""
        self.state = State(key=keys[0]) if len(keys) == 1 else None
        RuntimeError.__init__(self, f"{kind} {node!r}: {detail}; no parameter was updated with it. To fix: {FIX}")


_ALL = np.logical_and.reduce  # the ufunc's own reduction: ``ndarray.all`` adds a Python-level wrapper


def all_finite(x: Any) -> bool:
    """Whether a payload holds no NaN or infinity (non-float payloads always do). A one-element float array,
    a key's target or a scalar input, is read as one Python float (a tenth of the cost of the ufuncs)."""
    if not isinstance(x, np.ndarray):
        return True
    kind = x.dtype.kind
    if kind == "f":
        return math.isfinite(x.item()) if x.size == 1 else bool(_ALL(np.isfinite(x), axis=None))
    return kind != "c" or bool(_ALL(np.isfinite(x), axis=None))


def first_bad(x: np.ndarray) -> str:
    """Where the first non-finite element is and how many there are (only called once one was found)."""
    bad = ~np.isfinite(x)
    where = np.unravel_index(int(np.argmax(bad)), x.shape) if x.ndim else ()
    return f"{x[where]} at index {tuple(int(i) for i in where)} ({int(bad.sum())} of {x.size} values non-finite)"


class Guard:
    """The checks of one run (``on_nonfinite`` "raise" or "skip"), shared by its workers; ``skipped`` holds
    the keys skipped so far (set operations are atomic under the GIL, so workers add to it without a lock)."""

    def __init__(self, mode: str, plan: Plan, dataset: Dataset | None) -> None:
        if mode not in ("raise", "skip"):
            raise SettingError("on_nonfinite", f"on_nonfinite: expected one of {ON_NONFINITE}, got {mode!r}")
        self.skip = mode == "skip"
        self.plan = plan
        self.dataset = dataset
        self.skipped: set[int] = set()
        # the batches whose inputs were found finite, by id (the dataset holds them for the run, so no id is
        # reused): each is checked once. A value a user changes in place afterwards still meets the loss and
        # gradient checks.
        self._finite: set[int] = set()

    def inputs_ok(self, info: KeyInfo, recheck: bool = False) -> bool:
        """Check an admitted key's float payloads: True to run it, False to skip it (or raise). On the driver,
        which holds the dataset (a Ray actor's guard checks losses and gradients only). ``recheck``: look
        again at a batch found finite before (the native engine's own check, which reads every admission,
        found NaN/inf in it since)."""
        assert self.dataset is not None
        if id(info.batch) in self._finite:
            if not recheck:
                return True
            self._finite.discard(id(info.batch))
        plan = self.plan
        for name in plan.inputs:
            x = info.batch.inputs.get(name)
            if x is not None and not all_finite(x):
                if self.skip:
                    self.skipped.add(info.key)
                    return False
                split = "train" if info.train else "val"
                index = next((i for i, b in enumerate(getattr(self.dataset, split)) if b is info.batch), "?")
                where = f"dataset {self.dataset.name!r} {split}[{index}]"
                detail = f"the payload of key {info.key} ({where}) holds {first_bad(x)}"
                raise NonFiniteError(name, "Input", "input", [info.key], detail)
        self._finite.add(id(info.batch))
        return True

    def loss_ok(self, node: int, report: dict[str, Any]) -> bool:
        """Check a loss report: True to keep it, False to leave it out (its key counted as skipped), or raise."""
        loss = report.get("loss")
        if loss is None or math.isfinite(loss):
            return True
        key = int(report["key"])
        if self.skip:
            self.skipped.add(key)
            return False
        detail = f"the loss of key {key} is {loss}, found before its backward pass left the loss node"
        raise NonFiniteError(self.plan.names[node], type(self.plan.ops[node]).__name__, "loss", [key], detail)

    def gradients_ok(self, node: int, ctx: NodeContext) -> bool:
        """Check what a node accumulated before it updates: True to update, False to drop it, or raise."""
        bad = [name for name, g in ctx.grads.items() if not all_finite(g)]
        if not bad:
            return True
        keys = sorted(ctx.grad_keys)
        if self.skip:
            self.skipped.update(keys)
            return False
        whose = f"key {keys[0]}" if len(keys) == 1 else f"keys {keys} (summed since its last update)"
        detail = "; ".join(f"{name}: {first_bad(ctx.grads[name])}" for name in bad)
        detail = f"the gradients of {whose} are not finite ({detail}), so it did not update"
        raise NonFiniteError(self.plan.names[node], type(self.plan.ops[node]).__name__, "gradient", keys, detail)


__all__ = ["ON_NONFINITE", "Guard", "NonFiniteError", "all_finite"]
