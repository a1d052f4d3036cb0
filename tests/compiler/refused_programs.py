"""Model functions the compiler must refuse, each marking the line its error must name with ``# refused``.

They are never called (``amp.nn`` functions would raise if they were); ``test_refusals.py`` compiles each one
and checks the error's line and hint. ``EFFECTS`` records any call of the side-effect helpers below: the
compiler must leave it empty, since it runs nothing from the model's module.
"""

# ruff: noqa: F841
from __future__ import annotations

import numpy as np

from amp_notebook import nn

EFFECTS: list[str] = []
SIZES = [64, 32]  # a mutable global
LOG: list[str] = []


def effect(*args: object) -> int:
    EFFECTS.append("effect() ran")
    return 4


class Trap:
    """Records every dunder the compiler could use to inspect it."""

    def __getattr__(self, name: str) -> object:
        EFFECTS.append(f"getattr {name}")
        return 1

    def __index__(self) -> int:
        EFFECTS.append("index")
        return 3

    def __int__(self) -> int:
        EFFECTS.append("int")
        return 3

    def __eq__(self, other: object) -> bool:
        EFFECTS.append("eq")
        return True

    def __hash__(self) -> int:
        EFFECTS.append("hash")
        return 1

    def __bool__(self) -> bool:
        EFFECTS.append("bool")
        return True

    def __iter__(self):
        EFFECTS.append("iter")
        return iter([1])

    def __call__(self, *args: object) -> int:
        EFFECTS.append("call")
        return 1

    def __repr__(self) -> str:
        EFFECTS.append("repr")
        return "Trap()"


TRAP = Trap()


def payload_if(x: nn.Floats(8), target: nn.Ints()):
    h = nn.relu(nn.linear(x, 8))
    if h.sum() > 0:  # refused
        h = nn.tanh(h)
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def payload_comparison(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    positive = h > 0  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def payload_while(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    while h:  # refused
        h = nn.relu(h)
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def payload_conditional_expression(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    h = nn.relu(h) if h else nn.tanh(h)  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def iterate_a_tensor(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    for row in h:  # refused
        h = nn.relu(row)
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def try_except(x: nn.Floats(8), target: nn.Ints()):
    try:  # refused
        h = nn.linear(x, 8)
    except ValueError:
        h = x
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def with_block(x: nn.Floats(8), target: nn.Ints()):
    with open("weights.txt") as f:  # refused
        h = nn.linear(x, 8)
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def generator(x: nn.Floats(8), target: nn.Ints()):
    for _ in nn.unroll(2):
        yield nn.softmax_cross_entropy(nn.linear(x, 3), target)  # refused


def mutable_global(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, SIZES[0])  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def make_closure_over_a_list():
    widths = [8, 4]

    def closure_over_a_list(x: nn.Floats(8), target: nn.Ints()):
        h = nn.linear(x, widths[0])  # refused
        return nn.softmax_cross_entropy(nn.linear(h, 3), target)

    return closure_over_a_list


closure_over_a_list = make_closure_over_a_list()


def print_call(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    print("built the hidden layer")  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def append_to_a_global(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    LOG.append("hidden")  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def calls_an_outside_function(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, effect())  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def reads_an_object(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, TRAP.width)  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def object_as_default(x: nn.Floats(8), target: nn.Ints(), config=TRAP):  # refused
    return nn.softmax_cross_entropy(nn.linear(x, 3), target)


def lambda_expression(x: nn.Floats(8), target: nn.Ints()):
    act = lambda v: nn.relu(v)  # refused  # noqa: E731
    return nn.softmax_cross_entropy(nn.linear(act(x), 3), target)


def list_comprehension(x: nn.Floats(8), target: nn.Ints()):
    hs = [nn.linear(x, 8, name=f"l{i}") for i in range(3)]  # refused
    return nn.softmax_cross_entropy(nn.linear(hs[0], 3), target)


def break_statement(tokens: nn.Sequence(int), target: nn.Ints()):
    h = nn.zeros(8)
    for token in tokens:
        h = nn.relu(nn.linear(nn.concat(nn.embedding(token, 14, 4), h), 8, name="step"))
        break  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def del_statement(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    del x  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def import_inside(x: nn.Floats(8), target: nn.Ints()):
    import math  # refused  # noqa: F401

    return nn.softmax_cross_entropy(nn.linear(x, 3), target)


def tensor_division(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8) / 2  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def returns_a_tensor(x: nn.Floats(8), target: nn.Ints()):
    nn.softmax_cross_entropy(nn.linear(x, 3), target)
    return nn.linear(x, 3)  # refused


def recursion_over_a_number(x: nn.Floats(8), target: nn.Ints()):
    def deep(h, n):
        return deep(nn.relu(h), n - 1)  # refused

    return nn.softmax_cross_entropy(nn.linear(deep(x, 3), 3), target)


def raise_statement(x: nn.Floats(8), target: nn.Ints()):
    raise ValueError("no")  # refused


def global_statement(x: nn.Floats(8), target: nn.Ints()):
    global LOG  # refused
    return nn.softmax_cross_entropy(nn.linear(x, 3), target)


def non_invertible_counter(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    t = 1
    while t < 8:
        h = nn.relu(nn.linear(h, 8, name="step"))
        t = t * 2  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def element_after_the_loop(tokens: nn.Sequence(int), target: nn.Ints()):
    h = nn.zeros(8)
    for token in tokens:
        h = nn.relu(nn.linear(nn.concat(nn.embedding(token, 14, 4, name="embed"), h), 8, name="step"))
    last = nn.embedding(token, 14, 4, name="embed")  # refused
    return nn.softmax_cross_entropy(nn.linear(nn.concat(h, last), 3), target)


def set_in_one_branch(tokens: nn.Sequence(int), target: nn.Ints()):
    h = nn.zeros(8)
    for t, token in enumerate(tokens):
        e = nn.embedding(token, 14, 8, name="embed")
        if t == 0:
            first = e
        h = nn.relu(nn.linear(nn.concat(e, h), 8, name="step"))
        h = h * first  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def shared_name_different_shapes(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8, name="shared")
    h = nn.linear(h, 4, name="shared")  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def tensor_subscript(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8)
    first = h[0]  # refused
    return nn.softmax_cross_entropy(nn.linear(first, 3), target)


def numpy_call(x: nn.Floats(8), target: nn.Ints()):
    h = np.tanh(nn.linear(x, 8))  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def method_on_a_tensor(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, 8).relu()  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def label_at_the_leaves(tree: nn.Tree()):
    def node(t):
        if t.is_leaf:
            s = nn.tree_lstm_leaf(nn.embedding(t.word, 20, 4, name="embed"), 4, name="leaf")
            nn.softmax_cross_entropy(nn.linear(s, 5, name="classify"), t.label)  # refused
        else:
            s = nn.tree_lstm_branch(node(t.left), node(t.right), 4, name="branch")
        return s

    node(tree)


def outer_tensor_in_recursion(tree: nn.Tree(), x: nn.Floats(4)):
    bias = nn.linear(x, 8)

    def node(t):
        if t.is_leaf:
            return nn.tree_lstm_leaf(nn.embedding(t.word, 20, 4, name="embed"), 4, name="leaf") + bias  # refused
        return nn.tree_lstm_branch(node(t.left), node(t.right), 4, name="branch")

    nn.mse(node(tree), x)


def untyped_input(x, target: nn.Ints()):  # refused
    return nn.softmax_cross_entropy(nn.linear(x, 3), target)


def eval_call(x: nn.Floats(8), target: nn.Ints()):
    h = nn.linear(x, eval("8"))  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def no_loss(x: nn.Floats(8), target: nn.Ints()):  # refused
    h = nn.linear(x, 8)


def width_changes_in_the_loop(tokens: nn.Sequence(int), target: nn.Ints()):
    h = nn.zeros(8)
    for token in tokens:  # refused
        h = nn.linear(nn.concat(nn.embedding(token, 14, 4, name="embed"), h), 6, name="step")
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def ids_into_a_linear(tokens: nn.Ints(), target: nn.Ints()):
    h = nn.linear(tokens, 8)  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def while_without_a_counter(x: nn.Floats(8), target: nn.Ints(), steps=3):
    h = nn.linear(x, 8)
    while steps > 0:  # refused
        h = nn.relu(nn.linear(h, 8, name="step"))
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)


def zeros_inside_a_loop(tokens: nn.Sequence(int), target: nn.Ints()):
    h = nn.zeros(8)
    for token in tokens:
        h = nn.relu(nn.linear(nn.concat(nn.embedding(token, 14, 4), h, nn.zeros(2)), 8, name="step"))  # refused
    return nn.softmax_cross_entropy(nn.linear(h, 3), target)
