# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 6: a digit of a digit
#
# **Difficulty:** medium.
#
# **You will:** write a simplification rule for indices in which one
# `ModularIndexing` is taken of another, `((x // d1) % m1 // d2) % m2`, prove when it
# is one digit of `x`, and check with hypothesis that the rewrite never changes a
# value. Then you will apply it to the index a real kernel loads from.
#
# **It builds on** chapter 4 (*Sizes, strides and indices as symbols*):
# `FloorDiv`, `ModularIndexing`, the rewrites their `eval` applies for every value of
# the variables, `simplify_with_ranges`, `texpr`; and chapter 9, whose `repeat` and
# `roll` read their input through `ModularIndexing`.
#
# **Why it matters.** A view of a view composes the two re-indexings, and when both
# wrap around, the kernel computes a remainder of a remainder. `x.repeat(4).repeat(3)`
# over a tensor of 5 elements loads `x` at `(x0 % 20) % 5` (printed below), which is
# `x0 % 5`. Chapter 4's rules leave it alone: `eval` knows `(x // a) // b` and
# `(x % m) // d`, not `(x % m1) % m2`. Every `%` is an integer division, which
# NVIDIA GPUs have no instruction for: it becomes a sequence of multiplications and
# corrections, per element, in every kernel that reads the view.

# %% [markdown]
# ## Setup

# %%
import os

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported)

# these import Triton: after minductor, which has chosen the interpreter on a CPU
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.lowering import GraphLowering
from minductor.ops import NullHandler, set_handler
from minductor.sizevars import (
    ModularIndexing,
    SizeVarAllocator,
    _is_multiple,
    index_vars,
    texpr,
)

i, j = index_vars(2)
sv = SizeVarAllocator()


class RecordLoads(NullHandler):
    """Runs a body and keeps the index of every load."""

    def __init__(self):
        self.loads = []

    def load(self, name, index):
        self.loads.append(index)


def load_indices(fn, *args):
    """Lower fn; return the indices its (one) buffer loads at, and its ranges."""
    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    (buf,) = graph.buffers
    body = buf.data
    variables = index_vars(len(body.ranges))
    handler = RecordLoads()
    with set_handler(handler):
        body.inner_fn(variables)
    return handler.loads, dict(zip(variables, body.ranges))


def expect(got, expected, what):
    """A check: fail with both values when `got != expected` (`is`, for None)."""
    ok = got is None if expected is None else got == expected
    assert ok, f"{what}: got {got!r}, expected {expected!r}"


def expect_rule(e, expected):
    expect(digit_of_digit(e), expected, f"digit_of_digit({e})")


# %% [markdown]
# The index `x.repeat(4).repeat(3) + 1` loads at, and what chapter 4's
# simplification makes of it:

# %%
x = torch.randn(5)
(index,), ranges = load_indices(lambda x: x.repeat(4).repeat(3) + 1, x)
print(index, "->", sv.simplify_with_ranges(index, ranges))
print(texpr(index))

# %% [markdown]
# ## Part 1: the rule
#
# Write `digit_of_digit(e)` for `e = ModularIndexing(y, d2, m2)` where
# `y = ModularIndexing(x, d1, m1)`. Return an expression equal to `e` for every
# non-negative integer `x`, or `None` when you cannot prove one (`e.args` is
# `(y, d2, m2)`, and `y.args` is `(x, d1, m1)`). Work it out on paper first; `y` is
# the number `x // d1` cut to its `m1` lowest values:
#
# 1. If `m1` is a multiple of `d2`, say `m1 = d2 * q`, then `y // d2` is
#    `(x // (d1*d2)) % q`: cutting and then dividing is dividing and then cutting.
#    Then:
#    * if `q` is a multiple of `m2`, the `% m2` keeps fewer values than `% q`:
#      the result is `(x // (d1*d2)) % m2`;
#    * if `q <= m2`, the value is already below `m2`, so the `% m2` does
#      nothing: the result is `(x // (d1*d2)) % q`.
# 2. If `d2 >= m1`, then `y < d2` and the quotient is 0.
#
# The sizes may be symbols (a dynamic size `s0`). Use chapter 4's `_is_multiple(a, b)`,
# which is `True` only when `a` is provably an integer multiple of `b`, and
# `sympy`'s `(a - b).is_nonnegative`, which is `True` only when provable. Build the
# result with `ModularIndexing(x, divisor, modulus)` (its `eval` may simplify it
# further, which is fine).


# %%
def digit_of_digit(e):
    # BEGIN SOLUTION
    y, d2, m2 = e.args
    x, d1, m1 = y.args
    if _is_multiple(m1, d2):
        q = m1 / d2
        if _is_multiple(q, m2):
            return ModularIndexing(x, d1 * d2, m2)
        if (m2 - q).is_nonnegative:
            return ModularIndexing(x, d1 * d2, q)
    if (d2 - m1).is_nonnegative:
        return sympy.Integer(0)
    return None
    # END SOLUTION


# %% [markdown]
# The rule applied everywhere in an expression, innermost first (sympy's `replace`
# works bottom-up), so that three nested remainders collapse too:


# %%
def simplify_digits(expr):
    def nested(e):
        return isinstance(e, ModularIndexing) and isinstance(e.args[0], ModularIndexing)

    return expr.replace(nested, lambda e: digit_of_digit(e) or e)


# %% [markdown]
# ## Checks
#
# First the cases of the rule, with numbers and with a symbolic size `s0`; then the
# property: for random digits and random `x`, the simplified expression has the same
# value as the arithmetic done in Python.


# %%
def test_the_cases():
    M = ModularIndexing
    expect_rule(M(M(i, 1, 12), 1, 4), M(i, 1, 4))
    expect_rule(M(M(i, 2, 12), 3, 2), M(i, 6, 2))
    expect_rule(M(M(i, 1, 12), 4, 5), M(i, 4, 3))  # % 5 does nothing
    expect_rule(M(M(i, 1, 12), 12, 7), 0)
    expect_rule(M(M(i, 3, 5), 7, 2), 0)
    expect_rule(M(M(i, 1, 12), 1, 5), None)  # (i % 12) % 5: two cuts
    expect_rule(M(M(i, 1, 12), 5, 2), None)  # 12 // 5: not a digit


def test_symbolic_sizes():
    M = ModularIndexing
    s0 = sv.create_symbol(hint=3)
    expect_rule(M(M(i, 1, 4 * s0), 1, s0), M(i, 1, s0))
    expect_rule(M(M(i, s0, 6), 2, 3), M(i, 2 * s0, 3))
    expect_rule(M(M(i, 1, 2 * s0), s0, 2), M(i, s0, 2))
    expect_rule(M(M(i, 1, 3 * s0), s0, 5), M(i, s0, 3))
    expect_rule(M(M(i, 1, s0), 1, 4), None)  # s0 may be 3


def test_in_a_larger_expression():
    M = ModularIndexing
    expr = 3 * M(M(M(i, 1, 24), 1, 12), 1, 4) + 5 * M(M(j + 7, 1, 16), 2, 8) + j
    expected = 3 * M(i, 1, 4) + 5 * M(j + 7, 2, 8) + j
    expect(simplify_digits(expr), expected, f"simplify_digits({expr})")


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10**6),
    st.integers(1, 8),
    st.integers(1, 48),
    st.integers(1, 60),
    st.integers(1, 48),
)
def test_values_are_preserved(value, d1, m1, d2, m2):
    e = ModularIndexing(ModularIndexing(i, d1, m1), d2, m2)
    simplified = simplify_digits(e)
    expected = (value // d1 % m1) // d2 % m2
    expect(simplified.subs(i, value), expected, f"{e} -> {simplified} at i = {value}")


def nested_digits(expr):
    return [e for e in expr.atoms(ModularIndexing) if e.args[0].atoms(ModularIndexing)]


def test_the_kernels_index():
    (index,), ranges = load_indices(lambda x: x.repeat(4).repeat(3) + 1, torch.randn(5))
    simplified = sv.simplify_with_ranges(simplify_digits(index), ranges)
    expect(simplified, ModularIndexing(i, 1, 5), f"{index} simplified")
    expect(texpr(simplified), "(i0 % 5)", "its Triton expression")

    def rolled(x):  # a roll of a reshaped slice: a remainder of a remainder
        return x.view(6, 10)[:, :8].reshape(3, 16).roll(1, 1) + 1

    (index,), ranges = load_indices(rolled, torch.randn(60))
    assert nested_digits(sv.simplify_with_ranges(index, ranges)), (
        f"the rolled view's index {index} should have a nested remainder "
        f"without the rule"
    )
    simplified = sv.simplify_with_ranges(simplify_digits(index), ranges)
    expect(nested_digits(simplified), [], f"nested remainders left in {simplified}")
    expect(
        texpr(simplified).count("%"),
        texpr(index).count("%") - 1,
        f"'%' in {texpr(simplified)!r} (before: {texpr(index)!r})",
    )
    (v0, n0), (v1, n1) = ranges.items()  # and the same positions, in the whole loop
    for a in range(int(n0)):
        for b in range(int(n1)):
            point = {v0: a, v1: b}
            got, want = simplified.subs(point), index.subs(point)
            expect(got, want, f"{simplified} at {point}")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The cases of the rule, with
# numbers:

# %%
test_the_cases()

# %% [markdown]
# The same cases with a symbolic size `s0`:

# %%
test_symbolic_sizes()

# %% [markdown]
# Nested remainders inside a larger expression, three deep included:

# %%
test_in_a_larger_expression()

# %% [markdown]
# The property, with hypothesis: random digits and `x`, the same value before and
# after:

# %%
test_values_are_preserved()

# %% [markdown]
# The index real kernels load at (`repeat` of `repeat`, a roll of a reshaped slice)
# loses a remainder and keeps its values:

# %%
test_the_kernels_index()

# %% [markdown]
# ## What to try next
#
# 1. `(x % 12) % 5` is not one digit, but with `x` known to be below 12 it is `x % 5`.
#    Where in `simplify_with_ranges` would a ranged version of your rule go, and which
#    of its helpers would it use?
# 2. Teach the rule `((x + c) % m1) % m2` with `m2` dividing `m1`: the offset `c` can
#    be reduced modulo `m2` first. Which view produces such indices?
# 3. Count the `%` and `//` in every kernel of a small model before and after your
#    rule (chapter 17 prints the kernels). Is a remainder of a remainder common?
