"""Keys and datasets: what the controller admits.

A *key* (paper: "instance or minibatch bucket") is one unit the controller keeps in flight. Here a key is a
`Batch`: a dict of payloads, one per `Input` node of the graph (by the input's name), plus the number of
instances it holds and any extra integer state fields the graph's control flow reads (for example the
sequence `length` that a `Cond` predicate compares a loop counter against). The controller injects each
payload into its input node with state `State(key=<id>, **fields)`.

Buckets hold instances of the same shape, as in the paper, so payloads are dense arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from amp_notebook.errors import DataFormatError, DataTypeError, SettingError


@dataclass(frozen=True)
class Batch:
    """One key: payloads by input name, instance count and extra state fields."""

    inputs: dict[str, np.ndarray]
    size: int
    fields: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise DataFormatError(f"Batch.size: expected a positive instance count, got {self.size}")
        for name, value in self.fields.items():
            if name == "key":
                raise DataFormatError(
                    "Batch.fields: 'key' is reserved for the key id the controller assigns; name the field otherwise"
                )
            if not isinstance(value, (int, np.integer)):
                raise DataTypeError(
                    f"Batch.fields[{name!r}]: expected an int (state fields are small hashable values), "
                    f"got {type(value).__name__}"
                )


def check_count(name: str, value: object, minimum: int) -> None:
    """Refuse a count argument of a data builder (``n_train``, ``bucket_size``, ...) that is no int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SettingError(name, f"{name}: expected an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class Dataset:
    """Training and validation keys plus a description of the task."""

    name: str
    train: list[Batch]
    val: list[Batch]
    num_classes: int | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def train_instances(self) -> int:
        return sum(b.size for b in self.train)

    @property
    def val_instances(self) -> int:
        return sum(b.size for b in self.val)
