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
# # Exercise 10: `diag_embed` as a masked, re-indexed read
#
# **Difficulty:** medium.
#
# **You will:** lower `torch.diag_embed`, which places the last dimension of its
# input on a diagonal of a new matrix and fills the rest with zeros. The lowering
# moves data without a copy: each element of the result reads its input at a
# computed position, if it lies on the diagonal, and is 0 otherwise.
#
# **It builds on** chapter 9 (*Views and data movement*): `diagonal` as a view,
# `triu`/`tril` as a `where` on a comparison of two indices, and padding's rule that
# a read is clamped into range (`sympy.Min`/`sympy.Max`) so that no lane loads
# outside its input, with `_within` and `_index_value` to compare indices in the
# body; chapter 6 for `register_lowering`.
#
# **Why it matters.** `torch.diag_embed(v) @ w` and `diag_embed(v) * x` build batches
# of diagonal matrices, `n + |offset|` squared elements for `n` values. With the
# fallback, ATen writes all of them (zeros included) and the next kernel reads them
# back; for `v` of shape `(b, n)` in float32 that is `8b(n + |offset|)²` bytes of
# traffic for `4bn` bytes of data. Lowered, the zeros are never stored: the
# consumer's kernel computes them.

# %% [markdown]
# ## Setup

# %%
import contextlib
import os

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)

# these import Triton: after minductor, which has chosen the interpreter on a CPU
import sympy

from minductor.capture import record_compiled
from minductor.ir import Pointwise, TensorBox
from minductor.lowering import lowerings, register_lowering
from minductor.ops import ops
from minductor.pointwise import origins_of
from minductor.views import _index_value, _within

aten = torch.ops.aten


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graphs)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


@contextlib.contextmanager
def registered(op, lowering):
    """Register `lowering` for every overload of `op` for the duration of a block."""
    overloads = [getattr(op, name) for name in op.overloads()]
    saved = {o: lowerings[o] for o in overloads if o in lowerings}
    register_lowering(op)(lowering)
    try:
        yield
    finally:
        for o in overloads:
            lowerings.pop(o, None)
        lowerings.update(saved)


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# What `diag_embed` computes, with an offset (the diagonal above the main one) and
# with the new dimensions somewhere else than last:

# %%
v = torch.arange(1, 7).view(2, 3)
print(torch.diag_embed(v, offset=1)[0])
print(torch.diag_embed(v, dim1=0, dim2=2).shape)

# %% [markdown]
# ## The lowering
#
# `diag_embed(x, offset=0, dim1=-2, dim2=-1)`: the result has one dimension more than
# `x`. Its dimensions `dim1` and `dim2` (counted in the *result*, negative ones from
# its end) both have size `n + |offset|`, where `n` is `x`'s last size; its other
# dimensions are `x`'s leading ones, in order. Element `(..., i, ..., j, ...)`, with
# `i` at `dim1` and `j` at `dim2`, is `x[..., k]` when `j - i == offset`, with `k`
# the position along the diagonal (`i` for a non-negative offset, `j` otherwise),
# and `0` elsewhere.
#
# Build a `Pointwise(device, dtype, inner_fn, size, origins_of([x]))`. In `inner_fn`,
# the test `j - i == offset` is a value: `_index_value(expr)` makes one from an index
# expression, `ops.eq` compares. Off the diagonal, `k` can reach past `x`'s end,
# and a `where` does not stop the load from happening: clamp `k` into `[0, n)` with
# `sympy.Min` before you load.


# %%
def lower_diag_embed(x, offset=0, dim1=-2, dim2=-1):
    # BEGIN SOLUTION
    size = list(x.get_size())
    ndim = len(size) + 1
    d1, d2 = dim1 % ndim, dim2 % ndim
    n = size[-1]
    side = n + abs(offset)
    rest = [d for d in range(ndim) if d not in (d1, d2)]
    new: list = [None] * ndim
    for d, s in zip(rest, size[:-1]):
        new[d] = s
    new[d1] = new[d2] = side
    load, dtype = x.make_loader(), x.get_dtype()

    def inner_fn(index):
        i, j = index[d1], index[d2]
        k = i if offset >= 0 else j
        source = [index[d] for d in rest] + [sympy.Min(k, n - 1)]
        on_diagonal = ops.eq(_index_value(j - i), _index_value(sympy.Integer(offset)))
        return ops.where(on_diagonal, load(source), ops.constant(0, dtype))

    box = Pointwise(x.get_device(), dtype, inner_fn, tuple(new), origins_of([x]))
    return TensorBox(box)
    # END SOLUTION


# %% [markdown]
# ## Checks
#
# Against eager on a vector, on batches with positive and negative offsets, with the
# new dimensions in front, apart, and in reverse order, on a transposed input with a
# size-1 dimension, in integers and booleans, and through a backward pass. The
# structure: no fallback, and one kernel where `diag_embed` feeds a pointwise op.


# %%
def check(fn, *args, case="diag_embed"):
    with registered(aten.diag_embed, lower_diag_embed):
        out, graph = compile_once(fn, *args)
    want = fn(*args)
    expect(out.shape, want.shape, f"{case}: shape")
    expect(out.dtype, want.dtype, f"{case}: dtype")
    torch.testing.assert_close(out, want, msg=lambda m: f"{case}: {m}")
    expect(graph.fallbacks, [], f"{case}: fallbacks")
    return graph


def test_vector_and_offsets():
    x = torch.randn(5)
    for offset in (0, 1, 3, -1, -4):
        case = f"diag_embed(x, offset={offset}) * 3"
        graph = check(lambda x: torch.diag_embed(x, offset) * 3, x, case=case)
        expect(len(graph.kernel_names), 1, f"{case}: kernels ({graph.kernel_names})")


def test_batches_and_dims():
    x = torch.randn(2, 3, 4)
    for offset, dim1, dim2 in (
        (0, 0, 1), (2, 0, 3), (-1, 3, 1), (1, -1, 0), (0, 1, -2), (-2, 2, 0),
    ):
        case = f"diag_embed(x, {offset}, {dim1}, {dim2})"
        check(lambda x: torch.diag_embed(x, offset, dim1, dim2), x, case=case)


def test_strided_size_one_and_fused():
    x = torch.randn(6, 1, 3).permute(1, 2, 0)  # (1, 3, 6), not contiguous
    y = torch.randn(1, 3, 7, 7)

    def fn(x, y):
        return torch.diag_embed(x, offset=-1) + y

    graph = check(fn, x, y)
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
    # the read of x is clamped: Min(k, 5) prints as a selection between k and 5
    loads = [line for line in graph.source.splitlines() if "in_ptr0 +" in line]
    expect(len(loads), 1, f"lines that read x ({loads})")
    (load_x,) = loads
    assert "(5) <= (x0)" in load_x, (
        f"the read of x: got {load_x.strip()!r}, expected it clamped: '(5) <= (x0)'"
    )


def test_integers_and_booleans():
    n = torch.arange(12).view(3, 4)
    check(lambda n: torch.diag_embed(n, 2), n)
    b = torch.tensor([True, False, True])
    check(lambda b: torch.diag_embed(b, -1) | False, b)


def test_gradient():
    def fn(x, w):
        return (torch.diag_embed(x, 1) * w).sum()

    x = torch.randn(2, 5, requires_grad=True)
    w = torch.randn(2, 6, 6, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
    torch._dynamo.reset()
    with registered(aten.diag_embed, lower_diag_embed), record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(x, w)
        out.backward()
    want = fn(x2, w2)
    want.backward()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)
    expect([g.fallbacks for g in graphs], [[], []], "fallbacks (forward, backward)")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. A vector, with positive and
# negative offsets, fused with a `* 3` into one kernel:

# %%
test_vector_and_offsets()

# %% [markdown]
# A batch, with the new dimensions in front, apart and in reverse order:

# %%
test_batches_and_dims()

# %% [markdown]
# A transposed input with a size-1 dimension, fused, its read clamped:

# %%
test_strided_size_one_and_fused()

# %% [markdown]
# Integers and booleans:

# %%
test_integers_and_booleans()

# %% [markdown]
# Through a backward pass, neither graph falling back:

# %%
test_gradient()

# %% [markdown]
# ## What to try next
#
# 1. Remove the clamp and run the checks again on a CPU: do they notice? On a GPU,
#    what would an out-of-range read do, and why can a masked lane not protect it
#    here (compare with the `xmask` on the kernel's loads)?
# 2. `torch.diag(v)` of a vector reaches the compiler as `diag_embed`-like ATen ops
#    or as a fallback? Compile it and read the graph; lower what is missing.
# 3. `diag_embed(v) @ w` is a matrix product with a diagonal matrix, which is
#    `v[..., :, None] * w`. Which chapter would you change so that the product never
#    builds the matrix at all?
