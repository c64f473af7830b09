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
# # Exercise 20: "why did these two ops not fuse?"
#
# **Difficulty:** easy.
#
# **You will:** write a query over chapter 24's `explain` report that answers the
# question users ask about fusion in their own terms. They do not know buffer names;
# they know the ops they wrote. Given two ATen ops of a graph, say whether they share
# a kernel, and if not, why not: the reason the scheduler gave when it refused to fuse
# their kernels, or that it never tried.
#
# **It builds on** chapter 24 (*Debugging*): `explain` returns an `Explanation` whose
# `graphs` are `GraphReport`s; each has `kernels` (a `KernelReport` per kernel, with
# the `buffers` it computes and the `origins`, the ATen ops they came from) and
# `refusals`, the fusion log's lines `cannot fuse <a> with <b>: <reason>`. A node name
# in such a line is a buffer (`buf3`) or, for a node fused earlier, its members' names
# joined by underscores (`buf3_buf4`). And on chapter 15: the scheduler only considers
# a pair of nodes that share a buffer (one writes what the other reads, or both read
# it); two kernels with nothing in common are never compared, so there is no refusal
# to find.

# %% [markdown]
# ## Setup

# %%
import contextlib
import io
import os

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported)
from minductor.debug import GraphReport, KernelReport, explain


def report_of(fn, *args) -> GraphReport:
    """Compile fn with minductor and return the report of its one graph."""
    torch._dynamo.reset()
    with contextlib.redirect_stdout(io.StringIO()):  # explain prints; keep it quiet
        result = explain(fn, *args)
    n = len(result.graphs)
    assert n == 1, f"graphs: got {n}, expected 1 (these examples have one graph each)"
    return result.graphs[0]


def expect(got, expected, what):
    """A check: fail with both values when `got != expected` (`is`, for None)."""
    ok = got is None if expected is None else got == expected
    assert ok, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# ## Your code
#
# `kernel_with(report, op)` returns the one kernel whose `origins` include `op`, and
# raises a `ValueError` if none or several do (then the question is ambiguous).
#
# `why_not_fused(report, a, b)` returns `None` if ops `a` and `b` are in the same
# kernel. Otherwise it looks through `report.refusals` for a line that refuses a node
# holding a buffer of `a`'s kernel together with a node holding a buffer of `b`'s
# kernel (either order), and returns that line's reason, the text after
# `": "`. If no line does, the scheduler never compared them: return
# `"never considered: they share no buffer"`.

# %%
def kernel_with(report: GraphReport, op: str) -> KernelReport:
    # BEGIN SOLUTION
    found = [k for k in report.kernels if op in k.origins]
    if len(found) != 1:
        names = [k.name for k in found]
        raise ValueError(f"{op} is in {len(found)} kernels: {names}")
    return found[0]
    # END SOLUTION


def why_not_fused(report: GraphReport, a: str, b: str) -> str | None:
    # BEGIN SOLUTION
    ka, kb = kernel_with(report, a), kernel_with(report, b)
    if ka is kb:
        return None
    for line in report.refusals:
        pair, reason = line.removeprefix("cannot fuse ").split(": ", 1)
        first, second = (set(name.split("_")) for name in pair.split(" with "))
        mine, theirs = set(ka.buffers), set(kb.buffers)
        if (first & mine and second & theirs) or (first & theirs and second & mine):
            return reason
    return "never considered: they share no buffer"
    # END SOLUTION


# %% [markdown]
# ## Checks

# %%
def test_ops_in_one_kernel_fused():
    report = report_of(lambda x: (x.exp() * 2).sum(1), torch.randn(6, 10))
    k_exp, k_sum = kernel_with(report, "exp"), kernel_with(report, "sum")
    assert k_exp is k_sum, (
        f"kernels of exp and sum: got {k_exp.name} and {k_sum.name}, expected one"
    )
    expect(why_not_fused(report, "exp", "mul"), None, "why_not_fused(exp, mul)")


def test_two_reductions_over_different_dimensions():
    def f(x):
        return (x.exp() * 2).sum(0), x.cos().amax(1)

    report = report_of(f, torch.randn(6, 10))
    k_exp, k_cos = kernel_with(report, "exp"), kernel_with(report, "cos")
    assert k_exp is not k_cos, (
        f"kernels of exp and cos: got {k_exp.name} for both, expected two"
    )
    why = why_not_fused(report, "mul", "amax")
    expect(why, "different numel: 10x6 vs 6x10", "why_not_fused(mul, amax)")
    expect(why_not_fused(report, "amax", "exp"), why, "why_not_fused(amax, exp)")


def test_kernels_that_share_nothing_were_never_compared():
    def f(x, y):
        return x.sin(), y.cos().sum()

    report = report_of(f, torch.randn(8), torch.randn(5))
    why = why_not_fused(report, "sin", "cos")
    expected = "never considered: they share no buffer"
    expect(why, expected, "why_not_fused(sin, cos)")


def test_an_ambiguous_op_is_an_error():
    report = report_of(lambda x: x.sum(0).sum() + x.sum(1).sum(), torch.randn(6, 10))
    try:
        kernel_with(report, "sum")
    except ValueError as e:
        assert "sum is in 4 kernels" in str(e), (
            f"the error: got {str(e)!r}, expected one with 'sum is in 4 kernels'"
        )
    else:
        raise AssertionError("four kernels hold a sum: which one was meant?")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. Ops in one kernel:
# `why_not_fused` is `None`:

# %%
test_ops_in_one_kernel_fused()

# %% [markdown]
# Two reductions over different dimensions: the scheduler's reason, either order:

# %%
test_two_reductions_over_different_dimensions()

# %% [markdown]
# Kernels that share no buffer were never compared:

# %%
test_kernels_that_share_nothing_were_never_compared()

# %% [markdown]
# An op in several kernels is a `ValueError` that says how many:

# %%
test_an_ambiguous_op_is_an_error()

# %% [markdown]
# ## Going further
#
# 1. Some refusals are between a kernel and an extern call (`buf0 is an extern
#    kernel`): extern calls are not in `report.kernels`. Extend the query to ops that
#    fell back or became extern kernels, from `report.fallbacks` and
#    `report.extern_kernels`.
# 2. A refusal in an early round of fusion may name a node that later fused with a
#    third: the reason is still about the pair as it stood then. Which reason would a
#    user rather see, the first refusal or the last?
