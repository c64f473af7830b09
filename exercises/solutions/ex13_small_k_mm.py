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
# # Exercise 13: when not to call the vendor's matmul
#
# **Difficulty:** easy.
#
# **You will:** make the choice that chapter 12 makes once, "a matmul is an extern
# kernel", depend on the shapes: when the inner dimension `K` is tiny, compute `a @ b`
# as a `Pointwise` body that unrolls its `K` multiply-adds, so that it fuses with the
# pointwise ops around it, and keep the cuBLAS call for everything else.
#
# **It builds on** chapter 12 (*Matmuls and extern kernels*): `extern.mm`, the
# lowering that realizes both inputs and emits an `ExternKernelOut` that the wrapper
# calls as `extern_kernels.mm(a, b, out=buf)`; chapter 5 (*IR*) for `Pointwise`; and
# chapter 6 (*Lowering*) for `register_lowering` and the registry.
#
# **Why it matters.** An extern kernel is a wall for fusion: its output goes to
# memory, and whatever follows reads it back. When `K` is large that is a small price
# next to the `2MNK` flops cuBLAS does well. When `K` is 1 to 4 (an outer product, a
# rank-2 update, a 3-channel projection) the matmul is as cheap as any pointwise op,
# and the round trip is most of its cost. The cell below counts the bytes for
# `relu(a @ b)` with `M = N = 4096`, `K = 4` in float32.

# %% [markdown]
# ## Setup

# %%
import contextlib
import os

import sympy
import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor import extern
from minductor.capture import record_compiled
from minductor.ir import Pointwise, TensorBox
from minductor.lowering import Unsupported, lowerings, register_lowering
from minductor.ops import ops

aten = torch.ops.aten


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


@contextlib.contextmanager
def registered(overload, lowering, graph=False):
    """Register `lowering` for one overload for the duration of a block."""
    saved = lowerings.get(overload)
    register_lowering(overload, graph=graph)(lowering)
    try:
        yield
    finally:
        lowerings.pop(overload, None)
        if saved is not None:
            lowerings[overload] = saved


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %%
M = N = 4096
K, itemsize = 4, 4
extern_bytes = (M * K + K * N) * itemsize + M * N * itemsize  # mm: read a, b; write
extern_bytes += 2 * M * N * itemsize  # relu: read the product back, write
fused_bytes = (M * K + K * N) * itemsize + M * N * itemsize  # one kernel
print(f"cuBLAS, then a relu kernel: {extern_bytes / 1e6:6.1f} MB moved")
print(f"one fused kernel:           {fused_bytes / 1e6:6.1f} MB moved")
print(f"arithmetic: {2 * M * N * K / 1e6:.0f} Mflop, {2 * K / itemsize:.0f} flop/byte")

# %% [markdown]
# Three times the bytes, for a kernel whose arithmetic (two flops per byte written)
# leaves it memory-bound either way. Today, `relu(a @ b)` is an extern call and a
# kernel:

# %%
a, b = torch.randn(33, 3), torch.randn(3, 17)
_, graph = compile_once(lambda a, b: torch.relu(a @ b), a, b)
print(graph.kernel_names)
print([line.strip() for line in graph.source.splitlines() if "extern_kernels" in line])

# %% [markdown]
# ## Part 1: a matmul as a `Pointwise`
#
# Write `small_k_mm(a, b)`, which returns a `TensorBox` holding a `Pointwise` over
# `(M, N)` whose element `[i, j]` is `sum(a[i, k] * b[k, j] for k in range(K))`,
# unrolled: `K` is a `sympy.Integer`, so the body can loop over it in Python and the
# kernel has `K` loads of each input and `K` multiply-adds, no loop.
#
# * Build it with `Pointwise(device, dtype, inner_fn, ranges, origins)`; `origins`
#   (a `frozenset` of names) names the kernel: use `{"mm"}`.
# * `a.make_loader()` gives a function from an index (a list of sympy expressions) to
#   a value; it reads through `a`'s strides, so a transposed `b` needs no copy.
# * Accumulate float16 and bfloat16 in float32 and convert once at the end
#   (`ops.to_dtype`), as cuBLAS accumulates; other dtypes in their own.


# %%
def small_k_mm(a, b):
    # BEGIN SOLUTION
    (m, k), (_, n) = a.get_size(), b.get_size()
    dtype = a.get_dtype()
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    load_a, load_b = a.make_loader(), b.make_loader()

    def inner_fn(index):
        i, j = index
        total = None
        for kk in range(int(k)):
            x = ops.to_dtype(load_a([i, sympy.Integer(kk)]), compute)
            y = ops.to_dtype(load_b([sympy.Integer(kk), j]), compute)
            term = ops.mul(x, y)
            total = term if total is None else ops.add(total, term)
        return ops.to_dtype(total, dtype)

    body = Pointwise(a.get_device(), dtype, inner_fn, (m, n), frozenset({"mm"}))
    return TensorBox(body)
    # END SOLUTION


# %% [markdown]
# ## Part 2: the choice
#
# Write the lowering `choose_mm(graph, a, b)` for `aten.mm.default`: `small_k_mm` when
# `K` is a known integer between 1 and `SMALL_K`, and otherwise chapter 12's
# lowering, `extern.mm(graph, a, b)`, unchanged. (`K = 0` is a matrix of zeros; leave
# it to the extern path.) The extern path refuses integer matmuls (there is no vendor
# kernel; they fall back to ATen), while your body has no such limit: let integers
# take it too. Booleans are not a matmul eager accepts; raise `Unsupported`.

# %%
SMALL_K = 4


def choose_mm(graph, a, b):
    # BEGIN SOLUTION
    if a.get_dtype() == torch.bool:
        raise Unsupported("mm of booleans")
    k = a.get_size()[1]
    if isinstance(k, sympy.Integer) and 1 <= int(k) <= SMALL_K:
        return small_k_mm(a, b)
    return extern.mm(graph, a, b)
    # END SOLUTION


# %% [markdown]
# The checks pin both sides of the choice: with a small `K` there is no extern call
# and one kernel, fused with what follows; with a large one the `extern_kernels.mm`
# line is still there.


# %%
def extern_calls(graph):
    return [line for line in graph.source.splitlines() if "extern_kernels." in line]


def test_small_k_fuses():
    def fn(a, b, c):
        return torch.relu(a @ b) * c

    a, b, c = torch.randn(33, 3), torch.randn(3, 17), torch.randn(17)
    with registered(aten.mm.default, choose_mm, graph=True):
        out, graph = compile_once(fn, a, b, c)
    torch.testing.assert_close(out, fn(a, b, c))
    expect(extern_calls(graph), [], "extern calls")
    expect(graph.fallbacks, [], "fallbacks")
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
    assert "mm" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, expected one with 'mm'"
    )


def test_awkward_layouts():
    def fn(a, b, v, w):
        return a @ b, v @ w  # (7, 1) @ (1, 5): an outer product; (1, 4) @ (4, 1)

    a = torch.randn(3, 7)[:2].t()  # (7, 2), strided, from a slice
    b = torch.randn(5, 2).t()  # (2, 5), transposed
    v, w = torch.randn(1, 4), torch.randn(4, 1)
    with registered(aten.mm.default, choose_mm, graph=True):
        out, graph = compile_once(fn, a, b, v, w)
    for got, want in zip(out, fn(a, b, v, w)):
        expect(got.shape, want.shape, "shape")
        torch.testing.assert_close(got, want)
    expect(extern_calls(graph), [], "extern calls")


def test_half_and_integers():
    def fn(a, b, i, j):
        return (a @ b) + 1, i @ j

    a = torch.randn(9, 4, dtype=torch.float16) * 8
    b = torch.randn(4, 6, dtype=torch.float16) * 8
    i, j = torch.randint(-9, 9, (5, 2)), torch.randint(-9, 9, (2, 3))
    with registered(aten.mm.default, choose_mm, graph=True):
        out, graph = compile_once(fn, a, b, i, j)
    want = fn(a, b, i, j)
    dtypes = (out[0].dtype, out[1].dtype)
    expect(dtypes, (torch.float16, torch.int64), "dtypes (float16 mm, int64 mm)")
    # the product rounded once to float16 (as cuBLAS rounds its float32 sum), then the
    # sum rounded once more, as eager rounds it: no error beyond those two roundings
    exact = ((a.double() @ b.double()).half().double() + 1).half()
    torch.testing.assert_close(out[0], exact)
    assert torch.equal(out[1], want[1]), f"i @ j: got\n{out[1]}\nexpected\n{want[1]}"
    expect(graph.fallbacks, [], "fallbacks")  # the int64 mm fell back before


def test_large_k_stays_extern():
    def fn(a, b):
        return torch.relu(a @ b)

    a, b = torch.randn(6, 40), torch.randn(40, 7)
    with registered(aten.mm.default, choose_mm, graph=True):
        out, graph = compile_once(fn, a, b)
        boundary, graph5 = compile_once(fn, a[:, :5], b[:5])
    torch.testing.assert_close(out, fn(a, b))
    torch.testing.assert_close(boundary, fn(a[:, :5], b[:5]))
    expect(len(extern_calls(graph)), 1, f"extern calls, K = 40, in\n{graph.source}\n")
    # K = 5 > SMALL_K
    expect(len(extern_calls(graph5)), 1, f"extern calls, K = 5, in\n{graph5.source}\n")
    # the relu alone
    expect(len(graph.kernel_names), 1, f"kernels for K = 40 ({graph.kernel_names})")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. With `K = 3`, no extern call and
# one kernel, fused with the relu and the product:

# %%
test_small_k_fuses()

# %% [markdown]
# Strided and transposed inputs, an outer product, a `(1, 4) @ (4, 1)`:

# %%
test_awkward_layouts()

# %% [markdown]
# float16 accumulated in float32 and rounded once, and an int64 matmul that no longer
# falls back:

# %%
test_half_and_integers()

# %% [markdown]
# `K = 40` and `K = 5` keep the extern call:

# %%
test_large_k_stays_extern()

# %% [markdown]
# ## Going further
#
# 1. `nn.Linear` with three input features reaches the graph as `aten.addmm`, which
#    chapter 12 lowers separately: give it the same choice (with its `beta` and
#    `alpha`), and check a `Linear(3, 64)` layer compiles to one kernel.
# 2. Where is the crossover? On a GPU, time `relu(a @ b)` for `K` = 1, 2, 4, 8, 16, 32
#    both ways (the performance page's `benchmark` helper) and set `SMALL_K` from the
#    measurement rather than by taste.
# 3. Unrolling stops paying off as `K` grows; a `Reduction` over `K` does not unroll.
#    What would the scheduler need to fuse a reduction over `K` with a pointwise op
#    over `(M, N)`?
