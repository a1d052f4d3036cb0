"""State records: immutable, hashable, equal by fields, and safe to send to another process."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from amp_notebook.ir.message import Message, State


def test_states_compare_by_fields_whatever_their_order():
    assert State(key=1, t=2) == State(t=2, key=1)
    assert hash(State(key=1, t=2)) == hash(State(t=2, key=1))
    assert State(key=1, t=2).replace(t=3) == State(key=1, t=3)
    assert State(key=1, t=2).replace(t=None) == State(key=1)


def test_a_state_refuses_payload_data():
    with pytest.raises(TypeError, match="State field 'x'"):
        State(key=0, x=[1, 2])
    with pytest.raises(TypeError, match="State field 'y'"):
        State(key=0).replace(y={"a": 1})


def test_a_pickled_state_hashes_right_in_a_process_with_another_hash_seed():
    blob = pickle.dumps({State(key=3, name="leaf"): "found"})
    code = (
        "import pickle, sys; from amp_notebook.ir.message import State; "
        "d = pickle.loads(sys.stdin.buffer.read()); print(d[State(key=3, name='leaf')])"
    )
    done = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, env={"PYTHONHASHSEED": "7",
                          "PATH": ""}, check=False)  # fmt: skip
    assert done.stdout.decode().strip() == "found", done.stderr.decode()[-2000:]


def test_a_message_reads_its_key_from_the_state_and_a_flush_update_has_a_negative_one():
    assert Message(0, "in", 0, None, State(key=5)).key == 5
    assert Message(0, "", 2, None, State(flush=3)).key == -4
