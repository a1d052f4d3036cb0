"""Admission, flushes and epochs: the controller as a pure state machine.

The backend tells the controller, in explicit events, when a key has completed (``on_key_complete``) or a
flush has completed (``on_flush_complete``); the controller answers with actions: admit these keys, flush
(update every parameterized node), the epoch has ended, the run is finished. It never looks at messages.
:func:`carry_out` is the one loop that hands actions to whoever executes them (a backend's session, the
reference trainer), follow-up actions first. *Completion* is detected by the backend by credit counting: each
key's count starts at the number of messages injected for it, each handled message adds the number it
emits minus one, and the key is done when the count reaches zero: no message of it remains anywhere,
so no model needs hand-written termination logic (ARCHITECTURE.md, invariant 5).

Admission per mode (invariant 6):

* ``amp``: keep up to ``max_active_keys`` keys in flight; nodes update locally whenever they hold
  ``min_update_frequency`` gradients. A backend that keeps that limit itself, at an admission gate, may let
  the controller admit ``ahead`` keys more (:meth:`Controller.admit_ahead`): the engine holds them until
  keys in flight complete, so a key starts the moment another ends instead of when the driver next hears of
  it. Those keys count as admitted here (``active``); ``in_flight`` never exceeds the limit.
* ``sync``: one key at a time; after each training key, flush (every node updates) before the next.
* ``pipeline``: admit up to ``max_active_keys`` keys, wait for all of them, flush, repeat: the paper's
  Fig. 1b, where the pipeline fills and then drains before the update.

Replica averaging (ARCHITECTURE.md, invariant 8). Replicas average their parameters (and optimizer memory) at
each epoch's end (the backend's epoch-end work). With ``average_every=N`` they also average after every N
training keys of an epoch have completed, like a flush: admission holds, the keys in flight drain, the
controller emits :class:`Average`, and admission goes on once the backend answers ``on_average_complete``. The
count is of the epoch's completed training keys, so it follows from the checkpointed position (no extra
state); no average is emitted when the epoch has no training key left to admit (its end averages anyway).

Each epoch admits its training keys in a seeded shuffled order, then its validation keys (forward only,
running alongside training keys of the same epoch); the epoch ends when all of them have completed and
no flush is pending. A graph with replicas validates the model the epoch hands over, not the replicas as
they drifted apart (``average_before_validation``): its validation keys wait for the epoch's training keys
to drain and for an :class:`Average`, like ``average_every``'s (the epoch's end then finds the replicas
equal and leaves them so). ``max_active_keys`` can change while the run goes (``set_max_active_keys``), and
admission can be paused (``pause``/``resume``: keys in flight go on, none is admitted; epochs still end).

Checkpoints. Between events, with no key in flight, the controller's whole position is: the epoch, the keys
of it not yet admitted (``pending``, in order, already numbered; a ``stop`` moves them to ``unadmitted``),
the next key and flush numbers and the shuffling RNG. :meth:`Controller.restore` puts a fresh controller
back there; :meth:`Controller.start` then goes on with the pending keys, or begins the next epoch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.errors import DataFormatError, SettingError

MODES = ("amp", "sync", "pipeline")


@dataclass(frozen=True)
class KeyInfo:
    """One admitted key: its number, its epoch, whether it trains (or only validates) and its payloads."""

    key: int
    epoch: int
    train: bool
    batch: Batch


@dataclass(frozen=True)
class Admit:
    """Action: inject this key into the graph."""

    info: KeyInfo


@dataclass(frozen=True)
class Flush:
    """Action: every parameterized node updates now (sync and pipeline modes); answer with ``on_flush_complete``."""

    flush_id: int


@dataclass(frozen=True)
class Average:
    """Action: no message is in flight; replicas average their parameters now (``average_every``); answer with
    ``on_average_complete``."""


@dataclass(frozen=True)
class EpochEnd:
    """Action: every key of this epoch has completed (and its flush, if any)."""

    epoch: int


@dataclass(frozen=True)
class Finish:
    """Action: the run is over (its last epoch ended, or it was stopped)."""


Action = Admit | Flush | Average | EpochEnd | Finish


class Controller:
    """Admission, flushes and epochs for one run (the module docstring says how).

    Owns the run's key schedule: the epoch, the keys admitted and in flight, the keys not yet admitted, the
    flush in progress, the shuffling RNG, and the live ``max_active_keys``, pause and stop. Events come in as
    method calls (``on_key_complete``, ``on_flush_complete``, ``on_epoch_end``) and actions go out as return
    values. It never touches messages, workers, threads, parameters or the clock: whoever runs it (a backend's
    session, the reference trainer) carries its actions out, and detects completion by credit counting."""

    def __init__(
        self,
        dataset: Dataset,
        mode: str = "amp",
        max_active_keys: int = 4,
        epochs: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        validate: bool = True,
        average_every: int | None = None,
        average_before_validation: bool = False,
    ) -> None:
        if mode not in MODES:
            raise SettingError("mode", f"mode: expected one of {MODES}, got {mode!r}")
        if epochs < 1:
            raise SettingError("epochs", f"epochs: expected at least 1, got {epochs}")
        if not dataset.train:
            raise DataFormatError(f"dataset {dataset.name!r} has no training keys; give it at least one")
        self.dataset = dataset
        self.mode = mode
        self.max_active_keys = self._check_keys(max_active_keys)
        self.epochs = epochs
        self.shuffle = shuffle
        self.validate = validate
        self.rng = np.random.default_rng(seed)
        self.epoch = -1
        self.keys: dict[int, KeyInfo] = {}
        self.active: set[int] = set()
        self.pending: list[KeyInfo] = []
        self.next_key = 0
        self.next_flush = 0
        self.flushing = False
        self.group_admitted = 0
        self.group_trains = False
        self.stopping = False
        self.finished = False
        self.epoch_ending = False
        self.paused = False
        self.admitted = 0  # keys admitted so far (a live run's status reads it)
        self.average_every = average_every
        self.average_before_validation = average_before_validation
        self.validation_averaged = -1  # the last epoch whose validation keys waited for an Average
        self.trained_in_epoch = 0  # training keys of this epoch completed (average_every counts them)
        self.average_due = False  # admission held until the keys in flight drain, then Average
        self.averaging = False  # Average emitted, on_average_complete not yet heard
        self.unadmitted: list[KeyInfo] = []  # what `stop` took from `pending` (a checkpoint resumes there)
        self.ahead = 0  # amp mode: keys admitted beyond max_active_keys, which the backend's gate holds

    @staticmethod
    def _check_keys(k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SettingError("max_active_keys", f"max_active_keys: expected an int >= 1, got {k!r}")
        return k

    # ----------------------------------------------------------------- events
    def start(self) -> list[Action]:
        """The first actions: admit the next epoch's keys, or (restored mid-epoch) the pending ones."""
        return self._fill() if self.pending else self._next_epoch()

    def restore(self, epoch: int, pending: list[KeyInfo], next_key: int, next_flush: int, rng_state: dict) -> None:
        """Put a controller that has not started back at a checkpoint's position: ``epoch`` is the epoch in
        progress (or the last one completed when ``pending`` is empty), ``pending`` its keys not yet
        admitted, in admission order. Validation keys are dropped when this run does not validate."""
        if self.epoch != -1 or self.keys:
            raise ValueError("restore: the controller has started already; restore a fresh one")
        if pending and not 0 <= epoch < self.epochs:
            raise SettingError(
                "epochs",
                f"restore: epoch {epoch} is in progress but this run has epochs={self.epochs}; resume with more epochs",
            )
        self.epoch = epoch
        self.pending = [k for k in pending if k.train or self.validate][::-1]  # popped from the end
        self.trained_in_epoch = len(self.dataset.train) - sum(k.train for k in pending)
        if sum(not k.train for k in self.pending) < len(self.dataset.val):  # validation began: averaged before it
            self.validation_averaged = epoch
        self.next_key = next_key
        self.next_flush = next_flush
        self.rng.bit_generator.state = rng_state

    def on_key_complete(self, key: int) -> list[Action]:
        """No message of ``key`` remains anywhere (credit counting): admit, flush or end the epoch."""
        info = self._retire(key, "on_key_complete")
        actions: list[Action] = []
        if info.train and self.average_every:
            self.trained_in_epoch += 1
            if self.trained_in_epoch % self.average_every == 0 and any(k.train for k in self.pending):
                self.average_due = True  # _fill holds admission, then emits Average once nothing is in flight
        if self.mode == "sync" and info.train:
            actions.append(self._flush())
        elif self.mode == "pipeline" and not self.active:
            if self.group_trains:
                actions.append(self._flush())
            self.group_admitted = 0
            self.group_trains = False
        return actions + self._fill()

    def on_keys_complete(self, keys: Sequence[int]) -> list[Action]:
        """:meth:`on_key_complete` for each of ``keys``, in order, and the actions that follow, in order. In
        ``amp`` mode without ``average_every``, admission is judged once, after all of them: each completion
        frees a slot and nothing else that admission reads changes in between (the mode, pause, stop, the limit,
        the pending keys), so the same keys are admitted in the same order, as one run of :class:`Admit`
        actions (one call to a backend for all of them, :func:`carry_out`)."""
        if self.mode != "amp" or self.average_every:
            actions: list[Action] = []
            for key in keys:
                actions += self.on_key_complete(key)
            return actions
        for key in keys:
            self._retire(key, "on_keys_complete")
        return self._fill()

    def on_flush_complete(self, flush_id: int) -> list[Action]:
        """Every update of flush ``flush_id`` has been applied: admission goes on."""
        if not self.flushing or flush_id != self.next_flush - 1:
            raise ValueError(f"on_flush_complete: flush {flush_id} is not the flush in progress")
        self.flushing = False
        return self._fill()

    def on_average_complete(self) -> list[Action]:
        """The replicas have averaged (:class:`Average`): admission goes on."""
        if not self.averaging:
            raise ValueError("on_average_complete: no average is under way")
        self.averaging = False
        return self._fill()

    def on_epoch_end(self) -> list[Action]:
        """Called by the backend once it has finished its epoch-end work (replica averaging, metrics)."""
        self.epoch_ending = False
        return self._next_epoch()

    def set_max_active_keys(self, k: int) -> list[Action]:
        self.max_active_keys = self._check_keys(k)
        return self._fill()

    def pause(self) -> list[Action]:
        """Admit no key until ``resume``; keys in flight go on (a background run's ``Run.pause``)."""
        self.paused = True
        return []

    def resume(self) -> list[Action]:
        self.paused = False
        return self._fill()

    def stop(self) -> list[Action]:
        """Admit nothing more; the run finishes when the keys in flight have completed."""
        self.stopping = True
        self.unadmitted.extend(reversed(self.pending))
        self.pending = []
        return self._fill()

    def info(self, key: int) -> KeyInfo | None:
        return self.keys.get(key)

    def admit_ahead(self, n: int) -> None:
        """Admit up to ``n`` keys beyond ``max_active_keys`` in ``amp`` mode (other modes ignore it), from the
        next admission on: the backend that asks keeps at most ``max_active_keys`` in flight itself and holds
        the rest, in admission order, until keys complete (module docstring). 0 turns it off."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise SettingError("admit_ahead", f"admit_ahead: expected an int >= 0, got {n!r}")
        self.ahead = n

    def in_flight(self) -> int:
        """Keys admitted and in flight, at most the limit: keys admitted ahead wait at the backend's gate."""
        return min(len(self.active), self._limit())

    def remaining(self) -> list[KeyInfo]:
        """The epoch's keys not yet admitted, in admission order (with those a ``stop`` held back)."""
        return self.pending[::-1] + self.unadmitted

    # ---------------------------------------------------------------- helpers
    def _retire(self, key: int, event: str) -> KeyInfo:
        """``key`` is no longer in flight: its info (a key that is not in flight is the caller's bug)."""
        if key not in self.keys:
            raise ValueError(f"{event}: key {key} is not in flight (in flight: {sorted(self.active)[:10]})")
        self.active.discard(key)
        return self.keys.pop(key)

    def _limit(self) -> int:
        return 1 if self.mode == "sync" else self.max_active_keys

    def _flush(self) -> Flush:
        self.flushing = True
        fid = self.next_flush
        self.next_flush += 1
        return Flush(fid)

    def _fill(self) -> list[Action]:
        if self.flushing or self.finished:
            return []
        if self.average_due and self.stopping:
            self.average_due = False  # a stopped run admits nothing more: nothing to average for
        if self.averaging or (self.average_due and self.active):
            return []
        if self.average_due:  # drained: average now; on_average_complete admits again
            self.average_due, self.averaging = False, True
            return [Average()]
        actions: list[Action] = []
        limit = self._limit() + (self.ahead if self.mode == "amp" else 0)
        while self.pending and not self.paused and len(self.active) < limit:
            if self.mode == "pipeline" and self.group_admitted >= self.max_active_keys:
                break
            if self._validation_waits():  # the epoch's training keys drain, the replicas average, then validate
                self.average_due = True
                return actions + self._fill()
            info = self.pending.pop()
            self.keys[info.key] = info
            self.active.add(info.key)
            self.admitted += 1
            self.group_admitted += 1
            self.group_trains |= info.train
            actions.append(Admit(info))
        if not self.pending and not self.active and not self.epoch_ending:
            if self.stopping:
                self.finished = True
                return [*actions, Finish()]
            self.epoch_ending = True
            actions.append(EpochEnd(self.epoch))
        return actions

    def _validation_waits(self) -> bool:
        """Whether the next key is the epoch's first validation key and the replicas must average first (once
        per epoch): validation then measures the model an epoch end hands over, not the replicas' drift."""
        if not self.average_before_validation or self.validation_averaged == self.epoch or self.pending[-1].train:
            return False
        self.validation_averaged = self.epoch
        return True

    def _next_epoch(self) -> list[Action]:
        if self.stopping or self.epoch >= self.epochs - 1:
            self.finished = True
            return [Finish()]
        self.epoch += 1
        self.trained_in_epoch = 0
        order = np.arange(len(self.dataset.train))
        if self.shuffle:
            self.rng.shuffle(order)
        keys = [self._key(self.dataset.train[i], True) for i in order]
        if self.validate:
            keys += [self._key(b, False) for b in self.dataset.val]
        self.pending = keys[::-1]  # popped from the end
        return self._fill()

    def _key(self, batch: Batch, train: bool) -> KeyInfo:
        info = KeyInfo(self.next_key, self.epoch, train, batch)
        self.next_key += 1
        return info


@dataclass(frozen=True)
class Handlers:
    """What an executor does with each kind of action; each returns the follow-up actions (often none)."""

    admit: Callable[[KeyInfo], list[Action]]
    flush: Callable[[int], list[Action]]
    end_epoch: Callable[[int], list[Action]]
    average: Callable[[], list[Action]] | None = None  # needed only where average_every is set
    # several keys at once, in order (a run of consecutive Admit actions); `admit` takes them one by one if unset
    admit_many: Callable[[list[KeyInfo]], list[Action]] | None = None


def carry_out(actions: list[Action], handlers: Handlers) -> bool:
    """Hand ``actions`` to ``handlers`` in order; the follow-up actions an action returns run before the
    actions after it. With ``handlers.admit_many``, a run of consecutive :class:`Admit` actions goes to it in
    one call, and their follow-ups (a key skipped for NaN/inf completes at once) run after the whole run.
    Returns True once a :class:`Finish` has been carried out."""
    pending = deque(actions)
    finished = False
    while pending:
        action = pending.popleft()
        if isinstance(action, Admit) and handlers.admit_many is not None:
            infos = [action.info]
            while pending and isinstance(head := pending[0], Admit):
                pending.popleft()
                infos.append(head.info)
            follow = handlers.admit_many(infos)
        elif isinstance(action, Admit):
            follow = handlers.admit(action.info)
        elif isinstance(action, Flush):
            follow = handlers.flush(action.flush_id)
        elif isinstance(action, EpochEnd):
            follow = handlers.end_epoch(action.epoch)
        elif isinstance(action, Average):
            if handlers.average is None:
                raise ValueError("carry_out: an Average action, and these handlers do not average replicas")
            follow = handlers.average()
        else:
            finished = True
            follow = []
        pending.extendleft(reversed(follow))
    return finished
