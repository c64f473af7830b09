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
# # Exercise 16: `logsumexp` in one pass, as a reduction of its own
#
# **Difficulty:** hard.
#
# **You will:** add a reduction type, `"logsumexp"`, that reads each row once even when
# the row is too long for one block: each lane of a looped kernel carries a running
# maximum and a running sum of exponentials scaled to it, and the lanes are merged
# after the loop. You write the Triton that `ops.reduction` prints for it, teach chapter
# 16's handler the new type with `kernel_op`, and lower `aten.logsumexp` to it.
#
# **It builds on** chapter 18 (*Reduction and scan kernels*): `reduce_tile` and its
# helpers for Welford and argmax (the model for yours), the kernel's `accumulator`,
# `newvar(..., after_loop=True)` and `lines`, the handler's `reduction` method, and
# `kernel_op`, chapter 17's hook that makes a function a method of the handler;
# chapter 10 (*Reductions*) for `make_reduction`; chapter 2 (*Decompositions*) for the
# `decompositions` table, and for eager's rules on infinities in `logsumexp`.
#
# **Why it matters.** Chapter 2 decomposes `logsumexp` into a maximum and a sum of
# exponentials shifted by it. Over a row that fits a persistent kernel the two are one
# kernel. Over a longer row they are two: a looped kernel finds each row's maximum, and
# a second reads the whole row again to sum `exp(x - max)`, because a looped kernel
# cannot use a reduction's result inside its own loop (chapter 15). In `float32` that is
# 8 bytes read per element where 4 would do. Inductor has the same remedy for softmax:
# the reduction type `online_softmax_reduce` (`OnlineSoftmaxReduction` in
# `torch/_inductor/ir.py`, merged with `online_softmax_combine` from
# `torch/_inductor/runtime/triton_helpers.py`), which keeps a maximum and a sum per lane.

# %% [markdown]
# ## Setup

# %%
import contextlib
import math
import os

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import record_compiled
from minductor.codegen_triton import (
    TRITON_DTYPES,
    KernelKind,
    KernelOpsHandler,
    kernel_op,
)
from minductor.decompositions import decompositions
from minductor.lowering import lowerings, register_lowering
from minductor.reductions import make_reduction

aten = torch.ops.aten
CHAPTER_REDUCTION = KernelOpsHandler.reduction  # chapter 18's method, to fall back to
CHAPTER_DECOMPOSITION = decompositions[aten.logsumexp.default]  # chapter 2's


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# Today, rows of 5000 elements are two kernels:

# %%
_, graph = compile_once(lambda x: torch.logsumexp(x, 1), torch.randn(5, 5000))
print(graph.kernel_names)

# %% [markdown]
# ## The algorithm
#
# A lane keeps `m`, the largest value it has seen, and `s`, the sum of `exp(v - m)` over
# the values `v` it has seen; it starts at `m = -inf, s = 0`. A new value `v` makes
#
# ```
# m' = maximum(m, v)                      (NaN-aware: helpers.maximum)
# s' = s * exp(m - m') + exp(v - m')      (0 while m' is -inf: nothing seen but -inf)
# ```
#
# so no `exp` ever sees a positive argument. After the loop the lanes of a row merge:
# `M` is the row's maximum (`helpers.max_with_nan` over the lanes), and with eager's
# shift (chapter 2: an infinite `M` shifts by 0 instead),
#
# ```
# S = sum over lanes of  s * exp(m - shift)     (a lane with m = -inf adds 0)
# logsumexp = shift + log(S)                      (M itself when M is +inf)
# ```
#
# A persistent kernel has the whole row in registers and needs none of the lanes'
# bookkeeping: mask the lanes past the row with `-inf`, take the row's maximum, shift,
# sum the exponentials, add the log. A pointwise kernel (every reduced dimension of size
# 1) reduces one element, and `logsumexp` of one element is that element.
#
# What eager returns: `-inf` for a row of `-inf`s, `inf` for a row that holds `inf`
# (even with `-inf`s beside it), `nan` for a row that holds `nan`, and no overflow for
# rows of large values (`1e4 + x`).

# %% [markdown]
# ## Part 1: the Triton for one reduction
#
# Write `logsumexp_tile(k, src_dtype, value)`, the counterpart of chapter 18's
# `welford_reduction`: `k` is the `TritonKernel`, `value` the name of the temporary the
# body computed for one element (already in `src_dtype`, `float32` for half inputs), and
# the function returns the name of the temporary that holds each row's result, a
# `[XBLOCK, 1]` column. Use the kernel's tools:
#
# - `k.kind`: `KernelKind.POINTWISE`, `PERSISTENT` or `LOOPED`;
# - `k.newvar(expr)` names an expression in the body (inside the loop of a looped
#   kernel), `k.newvar(expr, True)` one after the loop;
# - `k.accumulator(init)` declares a tile before the loop, and `k.lines.append(line)`
#   writes a plain line inside it (an accumulator's update, masked with
#   `xmask & rmask` so that lanes past the row keep their state);
# - `k.overrides.exp(x)` and `k.overrides.log(x)` give the device's `exp` and `log`
#   (libdevice on a GPU, `tl.exp` in the interpreter); `TRITON_DTYPES[src_dtype]` the
#   Triton dtype of an accumulator; `helpers.maximum`, `helpers.max_with_nan` are
#   chapter 18's.
#
# Start as `reduce_tile` does, with `tl.broadcast_to(value, [XBLOCK, RBLOCK])`.


# %%
def logsumexp_tile(k, src_dtype, value):
    # BEGIN SOLUTION
    inf, minus_inf = 'float("inf")', 'float("-inf")'
    exp, log = k.overrides.exp, k.overrides.log
    if k.kind is KernelKind.POINTWISE:  # one element
        return value
    value = k.newvar(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])")
    if k.kind is KernelKind.PERSISTENT:  # the row is in registers: eager's formula
        masked = k.newvar(f"tl.where(xmask & rmask, {value}, {minus_inf})")
        top = k.newvar(f"helpers.max_with_nan({masked}, 1)[:, None]")
        shift = k.newvar(f"tl.where(tl.abs({top}) == {inf}, 0.0, {top})")
        total = k.newvar(f"tl.sum({exp(f'{masked} - {shift}')}, 1)[:, None]")
        return k.newvar(f"{shift} + {log(total)}")
    dtype = TRITON_DTYPES[src_dtype]
    top = k.accumulator(f"tl.full([XBLOCK, RBLOCK], {minus_inf}, {dtype})")
    total = k.accumulator(f"tl.zeros([XBLOCK, RBLOCK], {dtype})")
    new_top = k.newvar(f"helpers.maximum({top}, {value})")
    grown = f"{total} * {exp(f'{top} - {new_top}')} + {exp(f'{value} - {new_top}')}"
    new_total = k.newvar(f"tl.where({new_top} == {minus_inf}, 0.0, {grown})")
    k.lines.append(f"{top} = tl.where(xmask & rmask, {new_top}, {top})")
    k.lines.append(f"{total} = tl.where(xmask & rmask, {new_total}, {total})")
    # after the loop: merge the lanes of each row
    row_top = k.newvar(f"helpers.max_with_nan({top}, 1)[:, None]", True)
    shift = k.newvar(f"tl.where(tl.abs({row_top}) == {inf}, 0.0, {row_top})", True)
    scaled = f"{total} * {exp(f'{top} - {shift}')}"
    lanes = k.newvar(f"tl.where({top} == {minus_inf}, 0.0, {scaled})", True)
    row_total = k.newvar(f"tl.sum({lanes}, 1)[:, None]", True)
    result = k.newvar(f"{shift} + {log(row_total)}", True)
    return k.newvar(f"tl.where({row_top} == {inf}, {row_top}, {result})", True)
    # END SOLUTION


# %% [markdown]
# ## Part 2: register it
#
# Write `install()`, which makes `torch.logsumexp` compile to your reduction:
#
# 1. **The handler** (chapter 18): with `@kernel_op`, give `KernelOpsHandler` a new
#    `reduction(self, dtype, src_dtype, reduction_type, value)` that calls
#    `logsumexp_tile(self.kernel, src_dtype, value)` for `"logsumexp"`, through the
#    kernel's `reduction_cache` as chapter 18's method does (key:
#    `(reduction_type, str(value))`), and hands every other type to
#    `CHAPTER_REDUCTION(self, ...)`.
# 2. **The decomposition** (chapter 2): remove `aten.logsumexp.default` from
#    `decompositions`, so that the graph keeps the op.
# 3. **The lowering** (chapter 10): register one for `aten.logsumexp.default`,
#    `(x, dim, keepdim=False)`, that returns `make_reduction(x, dim, keepdim,
#    "logsumexp", out, acc)`. Eager's result dtype `out` is the input's for floating
#    inputs and `float32` for integers and booleans; `acc`, the dtype the body computes
#    in, is `float32` for `float16` and `bfloat16` and `out` otherwise.
#
# `uninstall`, given, undoes all three.


# %%
def install():
    # BEGIN SOLUTION
    @kernel_op
    def reduction(self, dtype, src_dtype, reduction_type, value):
        if reduction_type != "logsumexp":
            return CHAPTER_REDUCTION(self, dtype, src_dtype, reduction_type, value)
        key = (reduction_type, str(value))
        cache = self.kernel.reduction_cache
        if key not in cache:
            cache[key] = logsumexp_tile(self.kernel, src_dtype, value)
        return cache[key]

    decompositions.pop(aten.logsumexp.default, None)

    @register_lowering(aten.logsumexp.default)
    def logsumexp(x, dim, keepdim=False):
        floating = x.get_dtype().is_floating_point
        out = x.get_dtype() if floating else torch.float32
        acc = torch.float32 if out in (torch.float16, torch.bfloat16) else out
        return make_reduction(x, dim, keepdim, "logsumexp", out, acc)

    # END SOLUTION


def uninstall():
    KernelOpsHandler.reduction = CHAPTER_REDUCTION
    decompositions[aten.logsumexp.default] = CHAPTER_DECOMPOSITION
    lowerings.pop(aten.logsumexp.default, None)


@contextlib.contextmanager
def installed():
    try:
        install()
        yield
    finally:
        uninstall()


# %% [markdown]
# ## Checks
#
# Structure first: one looped kernel with two accumulators for long rows, one
# persistent kernel for short ones, a pointwise one for a reduction over size 1. Then
# values against eager on awkward shapes and dtypes, the infinities and NaN, and the
# undo.


# %%
def logsumexp_graph(x, dim=1, keepdim=False):
    fn = lambda x: torch.logsumexp(x, dim, keepdim)  # noqa: E731
    out, graph = compile_once(fn, x)
    want = fn(x)
    case = f"logsumexp of {x.dtype} {tuple(x.shape)}, dim={dim}, keepdim={keepdim}"
    expect(out.dtype, want.dtype, f"{case}: dtype")
    torch.testing.assert_close(out, want, equal_nan=True, msg=lambda m: f"{case}: {m}")
    return graph


def count_in_source(graph, text, expected):
    got = graph.source.count(text)
    expect(got, expected, f"occurrences of {text!r} in\n{graph.source}\n")


def test_long_rows_are_read_once():
    with installed():
        graph = logsumexp_graph(torch.randn(5, 5000) * 30)
    expect(graph.kernel_names, ["triton_red_fused_logsumexp_0"], "kernels")
    expect(graph.fallbacks, [], "fallbacks")
    count_in_source(graph, "tl.load(", 1)
    count_in_source(graph, "tl.full([XBLOCK, RBLOCK]", 1)
    count_in_source(graph, "tl.zeros([XBLOCK, RBLOCK]", 1)


def test_short_rows_and_single_elements():
    cases = [
        ((7, 33), 1, False, "per"),  # persistent, 33 of a 64-wide block
        ((6, 1), 1, False, "poi"),  # a reduction over size 1
        ((1, 4099), -1, True, "red"),  # one row, a partial last chunk, keepdim
    ]
    with installed():
        for shape, dim, keepdim, kind in cases:
            graph = logsumexp_graph(torch.randn(*shape) * 10, dim, keepdim)
            expected = [f"triton_{kind}_fused_logsumexp_0"]
            expect(graph.kernel_names, expected, f"kernels for {shape} over {dim}")


def test_awkward_shapes_and_dims_match_eager():
    cases = [
        ((33, 7), 0),  # an outer reduction
        ((4099, 3), 0),  # a long outer one
        ((2, 3, 50), (0, 2)),  # two dimensions, not adjacent
        ((3, 1, 5), (1, 2)),  # a size-1 dimension among the reduced
        ((9, 301), -1),
    ]
    with installed():
        for shape, dim in cases:
            for keepdim in (False, True):
                graph = logsumexp_graph(torch.randn(*shape) * 20 + 1e4, dim, keepdim)
                expect(graph.fallbacks, [], f"fallbacks for {shape} over {dim}")


def test_dtypes_match_eager():
    inputs = [
        (torch.randn(9, 301) * 8).half(),
        (torch.randn(3, 5001) * 8).bfloat16(),
        torch.randint(-50, 50, (4, 4097)),  # int64: the result is float32
        torch.randint(-5, 5, (5, 13), dtype=torch.int32),
        torch.rand(3, 11) > 0.5,  # bool
    ]
    with installed():
        for x in inputs:
            graph = logsumexp_graph(x)
            expect(graph.fallbacks, [], f"fallbacks for {x.dtype}")
            assert "logsumexp" in graph.kernel_names[0], (
                f"kernels for {x.dtype}: got {graph.kernel_names}, "
                f"expected the first with 'logsumexp'"
            )


def test_infinities_and_nan_as_eager():
    inf, nan = math.inf, math.nan
    for n in (7, 5000):  # persistent, then looped
        x = torch.randn(6, n)
        x[0] = -inf  # a row of -inf: -inf
        x[1, 3] = inf  # inf wins
        x[2, n // 2] = nan  # nan wins
        x[3, ::2] = -inf  # half the lanes never see a number
        x[4, 1], x[4, 2] = inf, -inf
        x[5] = 1e4  # large, equal values: no overflow
        with installed():
            logsumexp_graph(x)


def test_uninstall_restores():
    with installed():
        graph = logsumexp_graph(torch.randn(5, 5000))
        kernels = graph.kernel_names
        expect(len(kernels), 1, f"kernels while installed ({kernels})")
    assert KernelOpsHandler.reduction is CHAPTER_REDUCTION, (
        f"KernelOpsHandler.reduction after uninstall(): got "
        f"{KernelOpsHandler.reduction!r}, expected chapter 18's {CHAPTER_REDUCTION!r}"
    )
    graph = logsumexp_graph(torch.randn(5, 5000))
    kernels = graph.kernel_names
    expect(len(kernels), 2, f"kernels after uninstall() ({kernels})")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. Rows of 5000: one looped kernel,
# one load, two accumulators:

# %%
test_long_rows_are_read_once()

# %% [markdown]
# A persistent kernel for short rows, a pointwise one over size 1, a looped one with
# a partial last chunk:

# %%
test_short_rows_and_single_elements()

# %% [markdown]
# Outer reductions, two dimensions, a size-1 dimension, large values, with and
# without `keepdim`:

# %%
test_awkward_shapes_and_dims_match_eager()

# %% [markdown]
# float16, bfloat16, integers and booleans:

# %%
test_dtypes_match_eager()

# %% [markdown]
# Rows of `-inf`, with `inf`, with NaN, and of large equal values, persistent and
# looped:

# %%
test_infinities_and_nan_as_eager()

# %% [markdown]
# `uninstall` brings back chapter 18's handler and chapter 2's two kernels:

# %%
test_uninstall_restores()

# %% [markdown]
# ## Going further
#
# 1. Softmax over long rows is three passes today: the maximum, the sum of
#    exponentials, and the normalized row. With your reduction the first two are one.
#    Lower `aten._softmax` to it plus one pointwise pass, as Inductor's
#    `prepare_softmax_online` does (`torch/_inductor/lowering.py`).
# 2. The loop calls `exp` twice per element. Inductor's `online_softmax_combine`
#    computes the same update; count its `exp`s, and find a form with one `exp` per
#    element in the common case where the maximum does not change.
# 3. Time both versions of `logsumexp` over `(64, 50257)` on a GPU (a language model's
#    vocabulary): does reading the row once show, or does the extra `exp` cost it back?
