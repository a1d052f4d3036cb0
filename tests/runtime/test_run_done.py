"""``Run.done`` is a property, like ``state``, ``status``, ``error`` and ``result``; ``run.done()`` still works
and warns."""

from __future__ import annotations

import warnings

import pytest

from amp_notebook import models
from amp_notebook.runtime.done_flag import DoneFlag
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset


def test_done_flag_reads_as_its_bool() -> None:
    yes, no = DoneFlag(True), DoneFlag(False)
    assert yes and not no
    assert yes == True and no == False and yes != no  # noqa: E712 (the comparison with a bool is the point)
    assert repr(yes) == "True" and hash(no) == hash(False)
    with pytest.warns(DeprecationWarning, match="write `run.done`"):
        assert yes() is True
    with pytest.warns(DeprecationWarning):
        assert no() is False


def test_run_done_is_a_property_and_the_old_call_warns() -> None:
    assert isinstance(Run.__dict__["done"], property)
    run = train(models.mlp(input_width=64, hidden=8), digits_dataset(batch_size=100), workers=2, epochs=1,
                validate=False, background=True)  # fmt: skip
    run.wait(60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the property form never warns
        assert run.done and bool(run.done) is True
    with pytest.warns(DeprecationWarning):
        assert run.done() is True
