"""Messages and their state records.

A message (paper, section 3) is a payload tensor plus a small *state*: the key (instance or bucket) id,
loop counters, tree or graph positions. State is immutable and hashable because every op that must
remember something for its backward pass caches it under the state of the forward message, and the
backward message arrives with exactly that state (ARCHITECTURE.md, invariants 2 and 3).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import IntEnum
from typing import Any

from amp_notebook.errors import AmpError


class Phase(IntEnum):
    """What a message asks of its node, and what a trace row records: the forward pass, the backward pass,
    or a parameter update (a flush's update message, or a node's local update in ``amp`` mode). A message's
    ``direction`` is one; so is a trace row's ``phase`` column (stored as its number)."""

    FWD = 0
    BWD = 1
    UPDATE = 2


FWD, BWD, UPDATE = (int(p) for p in Phase)  # plain ints on the hot path: exact ints index lists fast
PHASES = tuple(p.name.lower() for p in Phase)  # ("fwd", "bwd", "update"): a phase number's name

StateValue = int | float | str | bool | tuple
_PLAIN = frozenset({int, float, str, bool, tuple})  # exact types checked first: the common, fast case


class StateFieldError(AmpError, TypeError):
    """A state field given a value that is not small and hashable (a ``TypeError`` too, as before)."""


def _check_value(name: str, value: object) -> None:
    if type(value) not in _PLAIN and not isinstance(value, (int, float, str, bool, tuple)):
        raise StateFieldError(
            f"State field {name!r}: expected a small hashable value (int, float, str, bool or tuple), "
            f"got {type(value).__name__}; payload data belongs in the message payload, not the state"
        )


def _message_key(fields: Mapping[str, StateValue]) -> int:
    """The ``key`` of a message with these state fields (:class:`Message`): the key, or ``-1 - flush id``."""
    key = fields.get("key")
    return key if key is not None else -1 - fields.get("flush", 0)  # type: ignore[return-value,operator]


class State(Mapping[str, StateValue]):
    """An immutable, hashable record of small named fields (always including ``key``).

    >>> s = State(key=3, t=0)
    >>> s.replace(t=s["t"] + 1)
    State(key=3, t=1)
    """

    __slots__ = ("_fields", "_hash", "_items", "_message_key")

    def __init__(self, _fields: Mapping[str, StateValue] | None = None, **fields: StateValue) -> None:
        merged = dict(_fields) if _fields else {}
        merged.update(fields)
        for name, value in merged.items():
            _check_value(name, value)
        self._fields = merged
        self._items = tuple(sorted(merged.items()))
        self._hash = hash(self._items)
        self._message_key = _message_key(merged)

    @classmethod
    def _of_checked(cls, fields: dict[str, StateValue]) -> State:
        """A State over ``fields``, whose values are known to be valid (the runtime's hot path)."""
        state = object.__new__(cls)
        state._fields = fields
        items = tuple(sorted(fields.items()))
        state._items = items
        state._hash = hash(items)
        state._message_key = _message_key(fields)
        return state

    def __getitem__(self, name: str) -> StateValue:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, State):
            return self._hash == other._hash and self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._items)
        return f"State({inner})"

    def __reduce__(self) -> tuple[type[State], tuple[dict[str, StateValue]]]:
        """Rebuilt from its fields where it lands: the cached hash of a str field differs between processes."""
        return (State, (self._fields,))

    @property
    def key(self) -> int:
        return self._fields["key"]  # type: ignore[return-value]

    def as_dict(self) -> dict[str, StateValue]:
        return dict(self._fields)

    def replace(self, **changes: StateValue | None) -> State:
        """A copy with fields changed; a value of ``None`` removes the field."""
        fields = self._fields.copy()
        for name, value in changes.items():
            if value is None:
                fields.pop(name, None)
            else:
                _check_value(name, value)
                fields[name] = value
        return State._of_checked(fields)

    def project(self, names: tuple[str, ...]) -> tuple:
        """The values of ``names`` (missing ones as None), used to match messages at joins."""
        get = self._fields.get
        return tuple(get(n) for n in names)


class Message:
    """A message to one port of one node: direction, payload, state, and whether its key trains.

    ``node`` is the node's index in the placed graph, ``port`` the input port name (forward) or output
    port name (backward). ``train`` is False for validation keys, which run forward only and cache nothing.
    ``key`` is the state's key, read once here because every step of the runtime needs it (priority,
    credit counting, trace); an update message of a flush has no key and takes ``-1 - flush id``, so trace
    rows tell flushes apart from keys and from each other.
    """

    __slots__ = ("direction", "key", "node", "payload", "port", "state", "train")

    def __init__(self, node: int, port: str, direction: int, payload: Any, state: State, train: bool = True) -> None:
        self.node = node
        self.port = port
        self.direction = direction
        self.payload = payload
        self.state = state
        self.train = train
        self.key: int = state._message_key  # worked out once per state, which many messages share

    def __repr__(self) -> str:
        return (
            f"Message(node={self.node}, port={self.port!r}, {PHASES[self.direction]}, "
            f"state={self.state!r}, train={self.train})"
        )
