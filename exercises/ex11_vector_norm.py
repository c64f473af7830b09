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

# generated from exercises/solutions/ex11_vector_norm.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 11: every vector norm, as a reduction
#
# **Difficulty:** hard.
#
# **You will:** lower `aten.linalg_vector_norm` for every `ord`: the sum of
# magnitudes, the largest and the smallest magnitude, the count of non-zeros, and the
# general `p`-norm. (The Euclidean norm, `ord=2`, the one models use most, chapter 2
# decomposes into `sqrt(sum(x * x))`, so it never reaches a lowering; yours may handle
# it too.) Each is one reduction (chapter 10's `make_reduction`, with a `value_fn` that
# transforms each element before it is combined) and a pointwise finish (a root).
#
# **It builds on** chapter 10 (*Reductions*): `make_reduction`, its `value_fn`, its
# reduction types (`sum`, `max`, `min`), `_accumulator` (half precision accumulates
# in float32), and the way `var` realizes its reduction before a pointwise op reads
# it (`graph.realize_intermediate`, in a lowering registered with `graph=True`);
# chapter 7's `pointwise` with explicit `dtypes`.
#
# **Why it matters.** `torch.linalg.vector_norm` of any other order falls back today,
# and with it everything built on it: `F.normalize(x, p=1)` (rows that sum to one, as
# histograms and mixing weights do), the infinity-norm gradient clipping of
# `clip_grad_norm_(..., norm_type=inf)`. The cell below compiles the similarity of two
# L1-normalized rows: two ATen calls for the two norms, each reading its input from
# memory a second time and writing its result for the kernel that divides. Lowered,
# each norm is a reduction over the same rows as the dot product, and the scheduler
# fuses all three and the divisions into one kernel that reads `a` and `b` once.

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

# these import Triton: after minductor, which has chosen the interpreter on a CPU
import torch.nn.functional as F

from minductor.capture import record_compiled
from minductor.factories import convert_dtype
from minductor.lowering import lowerings, register_lowering
from minductor.ops import ops
from minductor.pointwise import pointwise
from minductor.reductions import _accumulator, make_reduction

aten = torch.ops.aten
inf = math.inf


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


@contextlib.contextmanager
def registered(op, lowering):
    """Register a graph=True lowering for every overload of `op`, for a block."""
    overloads = [getattr(op, name) for name in op.overloads()]
    saved = {o: lowerings[o] for o in overloads if o in lowerings}
    register_lowering(op, graph=True)(lowering)
    try:
        yield
    finally:
        for o in overloads:
            lowerings.pop(o, None)
        lowerings.update(saved)


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def l1_similarity(a, b):
    return (F.normalize(a, p=1, dim=-1) * F.normalize(b, p=1, dim=-1)).sum(-1)


a, b = torch.randn(6, 33), torch.randn(6, 33)
_, graph = compile_once(l1_similarity, a, b)
print(graph.fallbacks)
print(graph.kernel_names)

# %% [markdown]
# ## The lowering
#
# `linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)`. With
# `a = abs(x)` the magnitude of each element, over the reduced dimensions
# (`dim=None`: all):
#
# | `ord` | value |
# |---|---|
# | `inf` | `max(a)` |
# | `-inf` | `min(a)` |
# | `0` | the number of non-zero elements (as a float) |
# | `1` | `sum(a)` |
# | `2` | `sqrt(sum(a * a))` |
# | any other `p` | `sum(a ** p) ** (1 / p)` |
#
# `ord` may arrive as an `int` or a `float`. If `dtype` is given, eager converts `x`
# to it first and returns that dtype (chapter 8's `convert_dtype(x, dtype)`); otherwise
# the result has `x`'s dtype. Accumulate in `_accumulator(dtype)`: a float16 norm
# sums its squares in float32 and rounds once, at the end.
#
# `make_reduction(x, dim, keepdim, reduction_type, dtype, acc_dtype, value_fn=...)`
# calls `value_fn(value, rindex)` with each loaded element (in `x`'s dtype) and
# reduces what it returns. A reduction has no loader: realize it with
# `graph.realize_intermediate(box)` before a `pointwise(fn, [box], dtypes=(compute,
# result))` reads it.


# %%
def lower_vector_norm(graph, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks
#
# Every `ord` over rows, columns, several dimensions and everything; odd sizes, a
# transposed input, a size-1 dimension, exact zeros (they matter for `ord=0` and
# negative `p`), float16 and float64, the `dtype` argument, and the structure: no
# fallback left.


# %%
ORDS = [2, 1, inf, -inf, 0, 3, 0.5, -1, 2.5]


def check(fn, *args, case="the norm", **tolerance):
    with registered(aten.linalg_vector_norm, lower_vector_norm):
        out, graph = compile_once(fn, *args)
    want = fn(*args)
    expect(out.dtype, want.dtype, f"{case}: dtype")
    expect(out.shape, want.shape, f"{case}: shape")
    torch.testing.assert_close(out, want, msg=lambda m: f"{case}: {m}", **tolerance)
    expect(graph.fallbacks, [], f"{case}: fallbacks")
    return graph


def test_every_ord_over_rows_and_columns():
    x = torch.randn(7, 13)
    x[2, 5] = 0.0
    x[4] = 0.0  # a row of zeros
    for ord in ORDS:
        for dim, keepdim in ((1, False), (0, True), (None, False), ((0, 1), True)):

            def fn(x):
                return torch.linalg.vector_norm(x, ord, dim, keepdim)

            check(fn, x, case=f"vector_norm(x, {ord}, {dim}, {keepdim})")


def test_strided_3d_and_size_one():
    x = torch.randn(5, 1, 9).transpose(0, 2)  # (9, 1, 5), not contiguous
    for ord in (2, -inf, 0, 3):
        case = f"vector_norm(x, {ord}, (0, 2)) * 2"
        check(lambda x: torch.linalg.vector_norm(x, ord, (0, 2)) * 2, x, case=case)
        case = f"vector_norm(x, {ord}, 1, True) + x"
        check(lambda x: torch.linalg.vector_norm(x, ord, 1, True) + x, x, case=case)


def test_float16_float64_and_dtype():
    h = torch.randn(4, 300, dtype=torch.float16) * 10
    for ord in (2, 1, inf, 3):
        case = f"float16 vector_norm(h, {ord}, -1)"
        check(lambda h: torch.linalg.vector_norm(h, ord, -1), h, case=case)
    d = torch.randn(3, 17, dtype=torch.float64)
    case = "float64 vector_norm(d, 2.5, 1)"
    check(lambda d: torch.linalg.vector_norm(d, 2.5, 1), d, case=case)

    def widened(h):
        return torch.linalg.vector_norm(h, 2, 1, dtype=torch.float32)

    check(widened, h, case="vector_norm(h, 2, 1, dtype=torch.float32)")


def test_l1_similarity_and_normalize():
    a, b = torch.randn(6, 33), torch.randn(6, 33)
    graph = check(l1_similarity, a, b, case="l1_similarity")
    # norms, dot, divisions
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
    assert "linalg_vector_norm" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, "
        f"expected one with 'linalg_vector_norm'"
    )
    x = torch.randn(11, 7)
    check(lambda x: F.normalize(x, p=3, dim=0), x, case="normalize(x, p=3, dim=0)")


def test_gradient_clipping_norm():
    grads = [torch.randn(31, 5), torch.randn(5), torch.randn(3, 3, 3)]

    def total_norm(g0, g1, g2):  # clip_grad_norm_(..., norm_type=inf)'s total
        norms = [torch.linalg.vector_norm(g, inf) for g in (g0, g1, g2)]
        return torch.linalg.vector_norm(torch.stack(norms), inf)

    check(total_norm, *grads)


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. Every `ord` over rows, columns,
# both and everything, with a row of zeros:

# %% tags=["raises-exception"]
test_every_ord_over_rows_and_columns()

# %% [markdown]
# A transposed 3-d input with a size-1 dimension:

# %% tags=["raises-exception"]
test_strided_3d_and_size_one()

# %% [markdown]
# float16 (accumulated in float32), float64, and the `dtype` argument:

# %% tags=["raises-exception"]
test_float16_float64_and_dtype()

# %% [markdown]
# The L1 similarity of the introduction in one kernel, and `F.normalize` with `p=3`:

# %% tags=["raises-exception"]
test_l1_similarity_and_normalize()

# %% [markdown]
# The total norm of infinity-norm gradient clipping:

# %% tags=["raises-exception"]
test_gradient_clipping_norm()

# %% [markdown]
# ## What to try next
#
# 1. `sum(a * a)` overflows in float32 once an element passes about `1.8e19`, where
#    the norm itself is representable. Scale by `max(a)` first (a second reduction),
#    as LAPACK's `nrm2` does; what does it cost in kernels and bytes?
# 2. Train through your lowering: the gradient of the L1 norm is `sign(x)` times the
#    incoming gradient. Does it fall back, and which ops does it reach the compiler
#    as?
# 3. `inf`, `-inf`, `0` and `1` need no finish at all when the input is float32:
#    the reduction's result is the norm. Count the kernels your lowering makes for
#    each `ord` and explain the difference.
