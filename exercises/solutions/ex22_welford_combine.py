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
# # Exercise 22: merge two Welford statistics
#
# **Difficulty:** medium.
#
# **You will:** write Welford's one-element step and the merge of two partial
# statistics `(mean, m2, count)` (Chan's formula), then compute the mean and variance
# of whole rows cut into blocks of any sizes, including empty blocks and blocks of one
# element, and check them against `float64` on data where the textbook one-pass
# formula loses every digit.
#
# **It builds on** chapter 10 (*Reductions*): the variance as one `welford_reduce`
# with two results, the mean and `m2`, and `_split_welford`, which cuts long rows into
# equal pieces and combines them; and chapter 18 (*Reduction and scan kernels*):
# `welford_reduction`, whose looped kernel runs the one-element step in each lane and
# merges the lanes after the loop.
#
# **Why it matters.** A variance over a long row is computed in parts: lanes of one
# program, programs of one row, kernels of a split reduction. Each part holds a count,
# a mean and `m2` (the sum of squared deviations from that mean), and the parts must be
# merged without going back to the data. Two partial means cannot be added, and the
# sums `sum(x)` and `sum(x*x)`, which can, give the variance as `E[x²] - E[x]²`: two
# large, nearly equal numbers subtracted. Inductor merges Welford triples everywhere:
# `welford_combine` in `torch/_inductor/runtime/triton_helpers.py` (the merge you will
# write), `welford_reduce` beside it (the one-element step), and
# `WelfordReduction.create_multilayer` in `torch/_inductor/ir.py`, whose second
# stage reduces the first stage's triples with `welford_combine`.

# %% [markdown]
# ## Setup
#
# A statistic is a `Stats` record of three tensors of one shape: one entry per row, so
# every function below works on many rows at once. Counts are floating-point, as in
# the kernels (chapter 18 keeps the count in the accumulator's dtype).

# %%
import os
from typing import NamedTuple

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)


class Stats(NamedTuple):
    mean: torch.Tensor  # (rows,)
    m2: torch.Tensor  # (rows,): the sum of squared deviations from `mean`
    count: torch.Tensor  # (rows,), floating-point


def empty_stats(rows, dtype=torch.float32):
    """The statistics of no element: what an accumulator starts from."""
    zeros = torch.zeros(rows, dtype=dtype)
    return Stats(zeros, zeros.clone(), zeros.clone())


def exact_stats(x):
    """(mean, m2, count) of each row of x, in float64, with torch.var_mean."""
    x = x.double()
    count = torch.full((x.shape[0],), float(x.shape[1]), dtype=torch.float64)
    if x.shape[1] == 0:
        return Stats(torch.zeros_like(count), torch.zeros_like(count), count)
    var, mean = torch.var_mean(x, dim=1, correction=0)
    return Stats(mean, var * x.shape[1], count)


def naive_variance(x):
    """The one-pass textbook formula E[x²] - E[x]², in x's dtype: for comparison."""
    n = x.shape[1]
    return (x * x).sum(1) / n - (x.sum(1) / n) ** 2


# %% [markdown]
# ## Part 1: one element at a time
#
# Write `welford_update(stats, v)`, the step of chapter 18's loop: `v` holds one new
# value per row. The count grows by one, the mean moves by `(v - mean) / count`, and
# `m2` grows by `(v - old mean) * (v - new mean)`. Return a new `Stats`.


# %%
def welford_update(stats, v):
    # BEGIN SOLUTION
    count = stats.count + 1
    delta = v - stats.mean
    mean = stats.mean + delta / count
    m2 = stats.m2 + delta * (v - mean)
    return Stats(mean, m2, count)
    # END SOLUTION


def block_stats(x):
    """The statistics of each row of x (rows, k), one column at a time."""
    stats = empty_stats(x.shape[0], x.dtype)
    for k in range(x.shape[1]):
        stats = welford_update(stats, x[:, k])
    return stats


# %% [markdown]
# ## Part 2: merge two statistics
#
# Write `welford_combine(a, b)`: the statistics of the union of the elements `a` and
# `b` describe. With `n = a.count + b.count` and `delta = b.mean - a.mean`,
#
# ```
# mean = a.mean + delta * b.count / n
# m2   = a.m2 + b.m2 + delta² * a.count * b.count / n
# ```
#
# The second formula is chapter 10's `m2 = sum(m2_i) + n * sum((mean_i - mean)²)` for
# two parts of any sizes. Mind the rows where both counts are 0 (a block past the
# end of a row, a lane that saw nothing): the result there is the empty statistic,
# `(0, 0, 0)`, not `0 / 0`. Use `torch.where`; both sides of a `torch.where` are
# evaluated, so do not let a NaN reach either.


# %%
def welford_combine(a, b):
    # BEGIN SOLUTION
    n = a.count + b.count
    share = torch.where(n > 0, b.count / torch.where(n > 0, n, 1), 0)  # b.count / n
    delta = b.mean - a.mean
    mean = a.mean + delta * share
    m2 = a.m2 + b.m2 + delta * delta * a.count * share
    return Stats(mean, m2, n)
    # END SOLUTION


# %% [markdown]
# ## Part 3: a row in blocks
#
# Write `row_stats(x, sizes)`: cut the columns of `x` (rows, n) into consecutive
# blocks of `sizes` columns (`sum(sizes) == n`; a size may be 0), compute each block's
# statistics with `block_stats`, and merge them from left to right with
# `welford_combine`, starting from `empty_stats`.


# %%
def row_stats(x, sizes):
    # BEGIN SOLUTION
    assert sum(sizes) == x.shape[1], (sizes, x.shape)
    stats, start = empty_stats(x.shape[0], x.dtype), 0
    for size in sizes:
        stats = welford_combine(stats, block_stats(x[:, start : start + size]))
        start += size
    return stats
    # END SOLUTION


# %% [markdown]
# ## Checks
#
# Every check compares with `float64`: `exact_stats`, which is `torch.var_mean` over
# the rows. Tolerances are those of `float32` arithmetic on the data's scale.


# %%
def assert_stats_close(got, want, what, rtol=1e-5, atol=1e-5):
    for field in Stats._fields:
        g, w = getattr(got, field), getattr(want, field)
        assert not torch.isnan(g).any(), f"{what}: {field} has NaN: got {g!r}"
        torch.testing.assert_close(
            g.double(),
            w.double(),
            rtol=rtol,
            atol=atol,
            msg=lambda m, f=field: f"{what}: {f}: got {g!r}, expected {w!r}\n{m}",
        )


def exact_pieces(x, cut):
    """float32 statistics of x[:, :cut] and x[:, cut:], from float64 ones."""
    left, right = exact_stats(x[:, :cut]), exact_stats(x[:, cut:])
    as32 = lambda s: Stats(*(t.float() for t in s))  # noqa: E731
    return as32(left), as32(right)


def test_update_from_empty():
    torch.manual_seed(0)
    x = torch.randn(5, 1) * 3 + 2
    got = welford_update(empty_stats(5), x[:, 0])
    assert_stats_close(got, exact_stats(x), "one update from empty")
    x = torch.randn(5, 37) * 3 + 2
    assert_stats_close(block_stats(x), exact_stats(x), "37 updates", rtol=1e-4)


def test_combine_every_cut():
    torch.manual_seed(1)
    x = torch.randn(4, 23) * 5 - 1
    want = exact_stats(x)
    for cut in range(24):
        left, right = exact_pieces(x, cut)
        got = welford_combine(left, right)
        assert_stats_close(got, want, f"cut at {cut} of 23", rtol=1e-4)


def test_combine_with_empty():
    torch.manual_seed(2)
    a = Stats(torch.randn(3), torch.rand(3) * 4, torch.tensor([1.0, 5.0, 12.0]))
    cases = (
        (
            welford_combine(empty_stats(3), empty_stats(3)),
            empty_stats(3),
            "empty, empty",
        ),
        (welford_combine(a, empty_stats(3)), a, "a, empty"),
        (welford_combine(empty_stats(3), a), a, "empty, a"),
    )
    for got, want, what in cases:
        for field in Stats._fields:
            value, expected = getattr(got, field), getattr(want, field)
            assert torch.equal(value, expected), (
                f"combine({what}): {field}: got {value!r}, expected {expected!r}"
            )


def test_combine_unequal_sizes():
    torch.manual_seed(3)
    big = torch.randn(3, 10_000)
    lone = torch.tensor([[50.0], [-3.0], [0.0]])
    for x in (torch.cat([lone, big], 1), torch.cat([big, lone], 1)):
        cut = 1 if x[0, 0] == 50 else 10_000
        left, right = exact_pieces(x, cut)
        got = welford_combine(left, right)
        assert_stats_close(got, exact_stats(x), f"cut at {cut} of 10001", rtol=1e-4)


def test_rows_in_awkward_blocks():
    torch.manual_seed(4)
    x = torch.randn(3, 61) * 2 + 7
    want = exact_stats(x)
    var, mean = torch.var_mean(x.double(), dim=1)  # correction=1
    for sizes in (
        [1] * 61,
        [61],
        [0, 61, 0],
        [1, 60],
        [60, 1],
        [3, 0, 17, 1, 0, 40],
        [30, 31],
        [0, 0, 1, 59, 1],
    ):
        got = row_stats(x, sizes)
        assert_stats_close(got, want, f"blocks {sizes}", rtol=1e-4)
        torch.testing.assert_close(
            (got.m2 / (got.count - 1)).double(),
            var,
            rtol=1e-4,
            atol=1e-5,
            msg=lambda m, s=sizes: f"variance (correction=1), blocks {s}: {m}",
        )


def test_row_of_empty_blocks():
    got = row_stats(torch.zeros(2, 0), [0, 0, 0])
    for field in Stats._fields:
        value = getattr(got, field)
        assert torch.equal(value, torch.zeros(2)), (
            f"no elements: {field}: got {value!r}, expected {torch.zeros(2)!r}"
        )


def test_large_offset():
    torch.manual_seed(5)
    x = 1e4 + torch.randn(4, 3000)
    want = exact_stats(x)
    exact_var = want.m2 / want.count
    naive = naive_variance(x).double()
    naive_error = ((naive - exact_var).abs() / exact_var).max().item()
    assert naive_error > 0.5, f"naive relative error: got {naive_error}, expected > 0.5"
    got = row_stats(x, [1000, 7, 0, 993, 1000])
    var = (got.m2 / got.count).double()
    error = ((var - exact_var).abs() / exact_var).max().item()
    assert error < 1e-3, (
        f"Welford's relative error: got {error} (variance {var!r}), "
        f"expected < 1e-3 (variance {exact_var!r}; the naive formula gives {naive!r})"
    )


def test_matches_minductor():
    torch.manual_seed(6)
    x = 1e4 + torch.randn(2, 5000) * 0.5
    torch._dynamo.reset()
    fn = lambda x: torch.var_mean(x, dim=1, correction=0)  # noqa: E731
    var, mean = torch.compile(fn, backend="minductor")(x)
    got = row_stats(x, [2500, 2500])
    want = exact_stats(x)
    for name, mine, theirs, exact in (
        ("mean", got.mean, mean, want.mean),
        ("variance", got.m2 / got.count, var, want.m2 / want.count),
    ):
        for what, value in (("yours", mine), ("minductor's", theirs)):
            torch.testing.assert_close(
                value.double(),
                exact,
                rtol=1e-3,
                atol=0,
                msg=lambda m, n=name, w=what: f"{n}, {w}, against float64: {m}",
            )


def test_order_does_not_matter():
    torch.manual_seed(7)
    x = torch.randn(3, 80) * 4 + 100
    blocks = [block_stats(x[:, k : k + 10]) for k in range(0, 80, 10)]
    left_to_right = blocks[0]
    for b in blocks[1:]:
        left_to_right = welford_combine(left_to_right, b)
    level = blocks
    while len(level) > 1:
        level = [welford_combine(a, b) for a, b in zip(level[::2], level[1::2])]
    assert_stats_close(level[0], left_to_right, "tree against left to right", 1e-4)
    a, b = blocks[0], welford_combine(blocks[1], blocks[2])
    assert_stats_close(welford_combine(a, b), welford_combine(b, a), "a,b vs b,a")
    assert_stats_close(level[0], exact_stats(x), "tree against float64", 1e-4)


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared.

# %% [markdown]
# The one-element step, against `float64`, from an empty start:

# %%
test_update_from_empty()

# %% [markdown]
# Merging two parts cut at every position of a row of 23, including the two ends
# (an empty part on the left or on the right) and parts of one element:

# %%
test_combine_every_cut()

# %% [markdown]
# Two empty statistics merge into the empty one, exactly, with no NaN; an empty
# statistic on either side leaves the other unchanged, exactly:

# %%
test_combine_with_empty()

# %% [markdown]
# Very unequal parts: one element against ten thousand, both ways round, with the
# lone element far from the others' mean:

# %%
test_combine_unequal_sizes()

# %% [markdown]
# Whole rows in awkward blocks: blocks of one element, one block, empty blocks at both
# ends and in the middle, uneven sizes. The variance with Bessel's correction follows
# from `m2` and the count too.

# %%
test_rows_in_awkward_blocks()

# %% [markdown]
# A row of nothing but empty blocks is the empty statistic:

# %%
test_row_of_empty_blocks()

# %% [markdown]
# Catastrophic cancellation. Values around `10⁴` with a spread of about 1: in
# `float32`, `x²` is about `10⁸`, whose last bit is worth 8, so `E[x²] - E[x]²` is
# noise (even negative), while Welford's blocks, merged, keep the variance to a few
# parts in ten thousand:

# %%
test_large_offset()

# %% [markdown]
# The same data through `torch.compile` with minductor: its split Welford (chapter
# 10) and yours agree with each other and with `float64`:

# %%
test_matches_minductor()

# %% [markdown]
# The merge does not care about order: `a` with `b` is `b` with `a`, and eight blocks
# merged as a tree (pairs, then pairs of pairs, as lanes are) give the left-to-right
# result:

# %%
test_order_does_not_matter()

# %% [markdown]
# ## Going further
#
# 1. Chapter 18's persistent kernel takes the mean first, then the squared
#    deviations: two passes over registers. Its lanes hold at most `RBLOCK` values.
#    How large must the offset be, for rows of 1024 `float16` values accumulated in
#    `float32`, before that two-pass form and the looped Welford form disagree in the
#    fourth digit? Measure both with the interpreter.
# 2. `welford_combine` divides once per merge. A tree of merges over `2^k` equal
#    blocks knows every count in advance (they double). Write a merge for equal counts
#    that needs no division by `n` beyond a halving, and check it against yours.
# 3. Chapter 10's `_split_welford` cuts rows into equal pieces only. Lower
#    `var_mean` over a row whose length is prime by cutting it into unequal pieces and
#    merging them with your `welford_combine` as a reduction of its own.
