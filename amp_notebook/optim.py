"""Optimizers and the per-node update rule.

A parameterized node sums the gradients of its backward messages and, when the runtime says so
(``min_update_frequency`` gradients held in ``amp`` mode; at a flush in ``sync`` and ``pipeline`` mode),
steps its optimizer on the *mean over keys* of that sum: a key's gradient is the gradient of its mean
loss however many messages brought it (an RNN's step Linear gets one per time step), and several keys
are averaged. With one key per update this is plain SGD on the key's loss.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from amp_notebook.errors import AmpError


class OptimizerError(AmpError, ValueError):
    """An optimizer spec that names an unknown optimizer or gives one a setting it cannot take."""

    pass


SCRATCH = ".scratch"  # the suffix of optimizer memory that is only a buffer (no state: never averaged)


class Optimizer:
    """The update rule of one parameterized node: its settings (``lr``, ``clip_norm``, ``lr_decay``).

    ``step`` changes the node's parameters in place from the summed gradients and the ``scale`` that turns
    them into a mean over keys (module docstring); per-parameter state (momentum, Adam's moments) lives in the
    ``state`` dict the node keeps, so one Optimizer object may serve many nodes. It never decides when to
    update: the runtime does (``min_update_frequency``, flushes)."""

    name = ""

    def __init__(self, lr: float, clip_norm: float | None = None, lr_decay: float = 1.0) -> None:
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or lr <= 0:
            raise OptimizerError(f"{self.name} lr: expected a positive number, got {lr!r}")
        if not isinstance(lr_decay, (int, float)) or not 0 < lr_decay <= 1:
            raise OptimizerError(f"{self.name} lr_decay: expected a factor in (0, 1], got {lr_decay!r}")
        self.lr_decay = float(lr_decay)
        if clip_norm is not None and (not isinstance(clip_norm, (int, float)) or clip_norm <= 0):
            raise OptimizerError(f"{self.name} clip_norm: expected a positive number or None, got {clip_norm!r}")
        self.lr = float(lr)
        self.clip_norm = None if clip_norm is None else float(clip_norm)

    def step(
        self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: dict[str, Any], scale: float
    ) -> None:
        """Update ``params`` in place from ``grads * scale``; ``state`` is this node's optimizer memory.

        ``grads`` may be used as scratch space: the caller resets them after the step.
        """
        if self.clip_norm is not None:
            norm = scale * float(np.sqrt(sum(float(np.vdot(g, g)) for g in grads.values())))
            if norm > self.clip_norm:
                scale *= self.clip_norm / norm
        for name, p in params.items():
            self.apply(name, p, grads[name], scale, state)

    def apply(self, name: str, p: np.ndarray, g: np.ndarray, scale: float, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def end_epoch(self) -> None:
        """Multiply the learning rate by ``lr_decay`` (the runtime calls this after each epoch)."""
        self.lr *= self.lr_decay

    def spec(self) -> dict[str, Any]:
        raise NotImplementedError


class SGD(Optimizer):
    """Plain stochastic gradient descent: ``p -= lr * g``."""

    name = "sgd"

    def apply(self, name: str, p: np.ndarray, g: np.ndarray, scale: float, state: dict[str, Any]) -> None:
        g *= self.lr * scale  # in place: no temporary the size of the parameter
        p -= g

    def spec(self) -> dict[str, Any]:
        return {"name": "sgd", "lr": self.lr, "clip_norm": self.clip_norm, "lr_decay": self.lr_decay}


class Momentum(Optimizer):
    """SGD with momentum: a running velocity per parameter, kept in the node's optimizer state."""

    name = "momentum"

    def __init__(self, lr: float, momentum: float = 0.9, clip_norm: float | None = None, lr_decay: float = 1.0) -> None:
        super().__init__(lr, clip_norm, lr_decay)
        if not 0 <= momentum < 1:
            raise OptimizerError(f"momentum momentum: expected a value in [0, 1), got {momentum!r}")
        self.momentum = float(momentum)

    def apply(self, name: str, p: np.ndarray, g: np.ndarray, scale: float, state: dict[str, Any]) -> None:
        v = state.get(name)
        if v is None:
            v = state[name] = np.zeros_like(p)
        v *= self.momentum
        v += scale * g
        p -= self.lr * v

    def spec(self) -> dict[str, Any]:
        return {
            "name": "momentum", "lr": self.lr, "momentum": self.momentum, "clip_norm": self.clip_norm,
            "lr_decay": self.lr_decay,
        }  # fmt: skip


class Adam(Optimizer):
    """Adam (Kingma and Ba): per-parameter first and second moment estimates with bias correction."""

    name = "adam"

    def __init__(
        self, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
        clip_norm: float | None = None, lr_decay: float = 1.0,
    ) -> None:  # fmt: skip
        super().__init__(lr, clip_norm, lr_decay)
        for field, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= value < 1:
                raise OptimizerError(f"adam {field}: expected a value in [0, 1), got {value!r}")
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    def step(
        self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: dict[str, Any], scale: float
    ) -> None:
        state["t"] = state.get("t", 0) + 1
        super().step(params, grads, state, scale)

    def apply(self, name: str, p: np.ndarray, g: np.ndarray, scale: float, state: dict[str, Any]) -> None:
        m = state.get(name + ".m")
        if m is None:
            m = state[name + ".m"] = np.zeros_like(p)
            state[name + ".v"] = np.zeros_like(p)
        v, tmp = state[name + ".v"], state.get(name + SCRATCH)
        if tmp is None:  # the first step, or moments an average handed to a replica that had none
            tmp = state[name + SCRATCH] = np.empty_like(p)
        # in place, with g (the caller's scratch) and one buffer of our own; the same operations in the same
        # order as m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr_t m / (sqrt(v) + eps)
        g *= scale
        m *= self.beta1
        m += np.multiply(g, 1 - self.beta1, out=tmp)
        v *= self.beta2
        g *= g
        g *= 1 - self.beta2
        v += g
        t = state["t"]
        lr = self.lr * np.sqrt(1 - self.beta2**t) / (1 - self.beta1**t)
        np.sqrt(v, out=g)
        g += self.eps
        np.multiply(m, lr, out=tmp)
        tmp /= g
        p -= tmp

    def spec(self) -> dict[str, Any]:
        return {
            "name": "adam", "lr": self.lr, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps,
            "clip_norm": self.clip_norm, "lr_decay": self.lr_decay,
        }  # fmt: skip


OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "momentum": Momentum, "adam": Adam}
# The optimizer of a run that names none. Adam moves each parameter by about ``lr`` per update however large
# the gradient, so a node that updates after every partial gradient (a recurrent Linear with
# min_update_frequency 1 gets one per time step of every key) cannot blow up; plain SGD at 0.1 took up to
# ten full steps per key on the RNN's step Linear and diverged.
DEFAULT_OPTIMIZER = "adam"


def make_optimizer(spec: Optimizer | Mapping[str, Any] | str) -> Optimizer:
    """An optimizer from an instance, a name (default settings) or a dict ``{"name": ..., **settings}``."""
    if isinstance(spec, Optimizer):
        return spec
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise OptimizerError(f"expected an optimizer name or a dict with 'name', got {spec!r}")
    settings = dict(spec)
    name = settings.pop("name")
    if name not in OPTIMIZERS:
        raise OptimizerError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    if name == "sgd" and "lr" not in settings:
        settings["lr"] = 0.1
    if name == "momentum" and "lr" not in settings:
        settings["lr"] = 0.01
    try:
        return OPTIMIZERS[name](**settings)
    except TypeError as exc:
        raise OptimizerError(f"{name}: {exc}") from None


def optimizer_memory(opt_state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of a node's optimizer state that carry learning (momentum's velocity, Adam's moments): every
    array but the scratch space. Adam's step count is not an array."""
    return {k: v for k, v in opt_state.items() if isinstance(v, np.ndarray) and not k.endswith(SCRATCH)}


def average_parameters(contexts: Sequence[Any]) -> None:
    """Set the parameters of every node context in ``contexts`` (replicas of one node) to their exact mean, and
    their optimizer memory too (momentum's velocity, Adam's moments: every array of ``opt_state`` but the
    scratch space), so the replicas go on from one state, as copies of one learner. Averaging the parameters
    alone would leave each replica's moments those of its own eighth (say) of the keys; Adam's step size
    then differs per replica, and the averaged model learned slower. A replica that has not updated yet
    holds no memory: it counts as zeros (what the optimizer starts from; the native engine makes it so),
    and gets the mean. Adam's step count stays each replica's own. Arrays that are equal across the
    replicas already (averaged, and nothing trained since) are left as they are: their float mean could
    differ from the value in the last bit."""
    groups = [[c.params[name] for c in contexts] for name in contexts[0].params]
    memory: dict[str, np.ndarray] = {}  # each memory key, and an array of it (its shape and dtype)
    for c in contexts:
        for k, v in optimizer_memory(c.opt_state).items():
            memory.setdefault(k, v)
    for k, like in memory.items():
        for c in contexts:
            if not isinstance(c.opt_state.get(k), np.ndarray):
                c.opt_state[k] = np.zeros_like(like)
        groups.append([c.opt_state[k] for c in contexts])
    for arrays in groups:
        if all(np.array_equal(arrays[0], a) for a in arrays[1:]):
            continue
        mean = np.mean(arrays, axis=0)
        for a in arrays:
            a[...] = mean


def end_epoch(optimizers: Iterable[Optimizer]) -> None:
    """Let each distinct optimizer apply its per-epoch schedule (``lr_decay``) once."""
    for opt in {id(o): o for o in optimizers}.values():
        opt.end_epoch()
