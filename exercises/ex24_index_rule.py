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

# generated from exercises/solutions/ex24_index_rule.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 24: simplify a division with ranges
#
# **Difficulty:** medium.
#
# **You will:** write the rule that removes a `FloorDiv` or a `ModularIndexing` from
# an index once the ranges of its variables are known, with the side condition that
# makes each rewrite correct, and check it by evaluating the index before and after
# on every point of the ranges: at the edge where the condition still holds, and one
# past it, where the rule must refuse.
#
# **It builds on** chapter 4 (*Sizes, strides and indices as symbols*): `FloorDiv`
# and `ModularIndexing` and the rewrites their `eval` makes for every value,
# `bound_sympy`, the allocator's proof that an expression is non-negative over ranges,
# and `simplify_with_ranges`, which applies `_simplify_division` bottom-up until
# nothing changes. Chapter 9 (*Views*) makes the indices it simplifies.
#
# **Why it matters.** Every view that splits or merges dimensions reads its base
# through divisions and remainders: a `(4, 32)` view of 128 elements, read back flat,
# is `x % 32 + 32*((x // 32) % 4)`. Left in the kernel, each is an integer division
# on every element, and worse, an index the scheduler cannot compare with another
# (chapter 15 fuses only nodes that read a buffer at the same index). Most of them
# vanish once the ranges are known: `x // 32` is 0 when `x < 32`. Inductor's
# `SizeVarAllocator._simplify_with_ranges` in `torch/_inductor/sizevars.py` does the
# same, with `visit_indexing_div` and `visit_modular_indexing`, proving each side
# condition with the shape environment's value ranges. A rule that fires one value too
# early is a silent wrong read at the last row of a tensor.

# %% [markdown]
# ## Setup

# %%
import itertools
import math
import os
import random

import sympy

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.sizevars import (
    FloorDiv,
    ModularIndexing,
    SizeVarAllocator,
    _split_multiples,
)

SV = SizeVarAllocator()  # the book's allocator: the reference
i, j, x = sympy.symbols("i j x", integer=True, nonnegative=True)


def known_nonneg(expr, ranges, sv=SV):
    """Chapter 4's proof: expr >= 0 wherever each variable v lies in [0, ranges[v])
    (False when it cannot tell). `sv` knows the ranges of size symbols."""
    return sv._known_nonneg(expr, ranges)


def split_multiples(base, divisor):
    """base == multiple + rest, every term of `multiple` a multiple of `divisor`."""
    return _split_multiples(base, divisor)


print(split_multiples(8 * i + j + 3, 4), known_nonneg(7 - j, {j: 8}))

# %% [markdown]
# ## Part 1: a range check
#
# Write `fits(expr, end, ranges, sv)`: is `0 <= expr < end` wherever the ranges
# allow? Both halves must be proven with `known_nonneg` (pass `sv` on); the answer is
# `False` whenever either cannot be.


# %%
def fits(expr, end, ranges, sv=SV):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: the rule
#
# Write `simplify_division(e, ranges, sv)`, for `e` a `FloorDiv(base, d)` or a
# `ModularIndexing(base, d, m)` (which is `(base // d) % m`). Return the simplified
# expression, or one equal to `e` when no rewrite is proven. In this order:
#
# 1. **Drop a remainder that never carries.** Split `base` into `multiple + rest`
#    (`split_multiples(base, d)`). If both are non-zero, `rest` fits in `[0, d)` and
#    `multiple` is non-negative, `rest` never changes the quotient: use `multiple` as
#    the base from here on. (`(8*i + j) // 4` with `j < 4` is `(8*i) // 4`.)
# 2. **A quotient that is always 0.** For a `FloorDiv`, if the base fits in
#    `[0, d)`, return `0`; otherwise `FloorDiv(base, d)`.
# 3. **A remainder that never wraps.** For a `ModularIndexing`, if the base fits in
#    `[0, d*m)`, the quotient is below `m` and the `% m` does nothing: return
#    `FloorDiv(base, d)`; otherwise `ModularIndexing(base, d, m)`.
#
# Each condition is a proof over the whole range. `known_nonneg` may fail to prove
# something true (then the rule refuses, which is safe); it never proves something
# false.


# %%
def simplify_division(e, ranges, sv=SV):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks
#
# An index is checked by *evaluating* it: every variable takes every value of its
# range (size symbols take a few values of their own), and the original and the
# rewritten index must agree at every point. Then the result is compared with the
# book's `_simplify_division` on the same input.


# %%
def evaluate(expr, env):
    """expr at integer values of its symbols, in Python integers."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return env[expr]
    args = [evaluate(a, env) for a in expr.args]
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    if isinstance(expr, ModularIndexing):
        return (args[0] // args[1]) % args[2]
    if expr.is_Add:
        return sum(args)
    if expr.is_Mul:
        return math.prod(args)
    if expr.is_Pow:
        return args[0] ** args[1]
    raise TypeError(f"cannot evaluate {expr!r}")


def points(ranges, sizes=None):
    """Every point of the ranges; `sizes` gives each size symbol its value."""
    sizes = sizes or {}
    names = list(ranges)
    ends = [evaluate(sympy.sympify(ranges[v]), sizes) for v in names]
    for values in itertools.product(*(range(n) for n in ends)):
        yield {**sizes, **dict(zip(names, values))}


def first_difference(a, b, ranges, sizes=None):
    """A point where a and b differ, or None."""
    for env in points(ranges, sizes):
        if evaluate(a, env) != evaluate(b, env):
            return env
    return None


def check_rule(e, ranges, sizes=None, sv=SV):
    """Your rule on e: equal in value to e everywhere, and the book's answer."""
    got = simplify_division(e, ranges, sv)
    where = first_difference(e, got, ranges, sizes)
    assert where is None, (
        f"{e} with ranges {ranges}: got {got}, which differs from it at {where}: "
        f"{evaluate(got, where)} vs {evaluate(e, where)}"
    )
    expected = sv._simplify_division(e, ranges)
    assert sympy.expand(got - expected) == 0, (
        f"{e} with ranges {ranges}: got {got!r}, expected {expected!r}"
    )
    return got


def test_fits():
    cases = [
        (j, 8, {j: 8}, True),
        (j, 8, {j: 9}, False),  # j can be 8
        (j - 1, 8, {j: 8}, False),  # j - 1 can be -1
        (4 * i + j, 16, {i: 4, j: 4}, True),  # at most 15
        (4 * i + j, 16, {i: 4, j: 5}, False),  # 16
        (4 * i + j, 15, {i: 4, j: 4}, False),
    ]
    for expr, end, ranges, expected in cases:
        got = fits(expr, end, ranges)
        assert got == expected, (
            f"fits({expr}, {end}, {ranges}): got {got!r}, expected {expected!r}"
        )


def test_chapter_examples():
    ranges = {i: 4, j: 8}
    cases = [  # what chapter 4 prints for them
        (ModularIndexing(8 * i + j, 1, 8), j),
        (ModularIndexing(i, 1, 8), i),
        (ModularIndexing(8 * i + j, 4, 8), 2 * i + FloorDiv(j, 4)),
        (FloorDiv(j, 8), 0),
    ]
    for e, expected in cases:
        got = check_rule(e, ranges)
        assert sympy.expand(got - expected) == 0, (
            f"{e} with {ranges}: got {got!r}, expected {expected!r}"
        )


# (e, the variable whose range moves, the last size where the rule fires)
EDGES = [
    (FloorDiv(j, 8), j, 8),  # j // 8 == 0 while j < 8
    (ModularIndexing(j, 1, 8), j, 8),  # j % 8 == j while j < 8
    (ModularIndexing(j, 4, 3), j, 12),  # (j // 4) % 3 == j // 4 while j < 12
    (ModularIndexing(8 * i + j, 4, 8), j, 4),  # j drops out while j < 4
    (FloorDiv(3 * i + j, 12), i, 4),  # 3*i + j < 12 while i < 4 (j < 3)
]


def test_fires_at_the_edge():
    for e, var, size in EDGES:
        ranges = {i: 4, j: 3, var: size}
        got = check_rule(e, ranges)
        assert got != e, f"{e} with ranges {ranges}: got {got!r}, expected a rewrite"


def test_refuses_past_the_edge():
    for e, var, size in EDGES:
        inside = {i: 4, j: 3, var: size}
        past = {**inside, var: size + 1}
        fired = SV._simplify_division(e, inside)
        wrong = first_difference(e, fired, past)
        # the rewrite that holds inside is wrong one value past the edge...
        assert wrong is not None, (
            f"{e} -> {fired} over {past}: got no point where they differ, expected one"
        )
        # ...so there the rule must leave the division (the check finds it if not)
        got = check_rule(e, past)
        assert got.has(FloorDiv, ModularIndexing), (
            f"{e} with ranges {past}: got {got!r}, expected a division kept"
        )


def test_random_indices():
    rng = random.Random(0)
    fired = 0
    for _ in range(150):
        a = rng.choice([0, 1, 2, 3, 4, 6, 8, 12, 16])
        b = rng.choice([1, 2, 3, 4, 8])
        c = rng.choice([0, 0, 1, 2, 5, 7])
        d, m = rng.randint(2, 9), rng.randint(2, 9)
        base = a * i + b * j + c
        e = rng.choice([FloorDiv(base, d), ModularIndexing(base, d, m)])
        if not isinstance(e, (FloorDiv, ModularIndexing)):  # eval already removed it
            continue
        ranges = {i: rng.randint(1, 6), j: rng.randint(1, 10)}
        fired += check_rule(e, ranges) != e
    assert fired >= 20, f"rewrites among the random cases: got {fired}, expected >= 20"


def test_symbolic_sizes():
    sv = SizeVarAllocator()
    s0, s1 = sv.create_symbol(hint=3), sv.create_symbol(hint=7)
    flat = s1 * i + j  # row i, column j of an (s0, s1) tensor, flattened
    sizes = [{s0: 2, s1: 2}, {s0: 3, s1: 5}, {s0: 4, s1: 7}]
    for ranges, fires in (({i: s0, j: s1}, True), ({i: s0, j: s1 + 1}, False)):
        got = None
        for size in sizes:
            got = check_rule(ModularIndexing(flat, 1, s1), ranges, size, sv)
        assert (got == j) == fires, (
            f"ModularIndexing({flat}, 1, s1) with {ranges}: got {got!r}, "
            f"expected {'j' if fires else 'the ModularIndexing kept'}"
        )


class WithYourRule(SizeVarAllocator):
    """The book's allocator, with your rule in its simplify_with_ranges loop."""

    def _simplify_division(self, e, var_ranges):
        return simplify_division(e, var_ranges, self)


def test_in_the_simplify_loop():
    cases = [
        (ModularIndexing(x, 1, 32) + 32 * ModularIndexing(x, 32, 4), {x: 128}),
        (ModularIndexing(x, 1, 32) + 32 * ModularIndexing(x, 32, 4), {x: 129}),
        (ModularIndexing(x, 4, 8) + 8 * FloorDiv(x, 32), {x: 64}),
        (FloorDiv(ModularIndexing(12 * i + j, 1, 12), 4), {i: 5, j: 12}),
        (ModularIndexing(FloorDiv(6 * i + j, 2), 1, 3), {i: 4, j: 6}),
        (ModularIndexing(6 * i + j, 1, 6) + 6 * ModularIndexing(i, 1, 5), {i: 5, j: 7}),
    ]
    mine = WithYourRule()
    for e, ranges in cases:
        got = mine.simplify_with_ranges(e, ranges)
        expected = SV.simplify_with_ranges(e, ranges)
        assert sympy.expand(got - expected) == 0, (
            f"simplify_with_ranges({e}, {ranges}): got {got!r}, expected {expected!r}"
        )
        where = first_difference(e, got, ranges)
        assert where is None, f"{e} -> {got}: they differ at {where}"


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The range check, inside and one
# past each edge:

# %% tags=["raises-exception"]
test_fits()

# %% [markdown]
# The rewrites chapter 4 prints, with `i < 4` and `j < 8`:

# %% tags=["raises-exception"]
test_chapter_examples()

# %% [markdown]
# At the last size where each side condition holds, the rule rewrites, and the
# rewrite agrees with the division at every point:

# %% tags=["raises-exception"]
test_fires_at_the_edge()

# %% [markdown]
# One value past that edge the same rewrite would be wrong at some point, and the
# rule must keep the division:

# %% tags=["raises-exception"]
test_refuses_past_the_edge()

# %% [markdown]
# 150 random affine indices, divisors, moduli and ranges (seeded): equal in value
# everywhere, and the book's answer:

# %% tags=["raises-exception"]
test_random_indices()

# %% [markdown]
# Symbolic sizes: column `j` of an `(s0, s1)` tensor comes back out of `flat % s1`
# while `j < s1`, and stays a remainder when `j` can reach `s1`:

# %% tags=["raises-exception"]
test_symbolic_sizes()

# %% [markdown]
# Your rule inside the book's `simplify_with_ranges` loop (with `join_dimensions`):
# the split view read back flat, and nested divisions, give the book's indices:

# %% tags=["raises-exception"]
test_in_the_simplify_loop()

# %% [markdown]
# ## Going further
#
# 1. Every range here starts at 0. A loop that starts elsewhere (a slice's offset
#    folded into the variable, `lo <= v < hi`) needs `fits` and the first step over
#    such ranges. Generalise both and check them by evaluation, past both edges.
# 2. `(x // d) % m` with `x < d*m*k` is neither rewrite, yet when the loop over `x`
#    is split into three loops of sizes `(k, m, d)` it is the middle one's variable.
#    Write the rule that rewrites an index onto split loops, as Inductor does when it
#    tiles (`SIMDKernel.split_and_set_ranges` in `torch/_inductor/codegen/simd.py`),
#    and check it by evaluation.
# 3. `known_nonneg` bounds the terms of the expanded expression separately:
#    `4*i - i**2` with `i < 4` is never negative, yet it is not proven. Bound a
#    polynomial in one variable exactly (its values at the ends of the range and at
#    its turning point), and find a division the rule then removes.
