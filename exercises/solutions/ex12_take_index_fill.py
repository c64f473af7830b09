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
# # Exercise 12: a gather and a scatter by position
#
# **Difficulty:** medium.
#
# **You will:** lower two indexing ops that minductor still sends back to ATen:
# `aten.take`, a *gather* (each output element loads from a position that is data),
# and `aten.index_fill`, a *scatter* (writes go to positions that are data). You will
# build both from chapter 11's parts, `indirect_loader`, `_gathered` and `_scatter`,
# and watch them join the kernels around them.
#
# **It builds on** chapter 11 (*Indexing, scatter and mutation*): `indirect_loader`
# turns an index tensor into a position (`ops.indirect_indexing`), `_gathered` makes a
# `Pointwise` that reads at computed positions, `_scatter` makes a copy of its input
# and a `MutationBuffer` that writes into it; chapter 9 (*Views*) for `view`; and
# chapter 6 (*Lowering*) for `register_lowering` and the registry.
#
# **Why it matters.** `torch.take(x, idx) * 2` over `n` indices is, with a lowering,
# one kernel: it reads the `n` positions and `n` gathered values, and writes `n`
# results. With the fallback, ATen writes the gathered values to memory and a second
# kernel reads them back: an extra `2 × 4n` bytes in float32, and one more launch.
# `index_fill` gains less, and it is worth seeing why: a scatter writes into a copy of
# its input, so it is a copy kernel and a scatter kernel, and the kernel that reads
# the result cannot fuse with a mutation: three kernels, where the fallback had an
# ATen call and one kernel. What it gains is that `call` makes no ATen call at all:
# every step is generated code that the book can read, print and schedule.

# %% [markdown]
# ## Setup
#
# `import minductor` comes first: without a GPU it switches on Triton's interpreter
# before Triton is imported.

# %%
import contextlib
import os

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import record_compiled
from minductor.indexing import _gathered, _scatter, indirect_loader
from minductor.lowering import Unsupported, lowerings, register_lowering
from minductor.ops import ops
from minductor.sizevars import product
from minductor.views import view

aten = torch.ops.aten


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


@contextlib.contextmanager
def registered(op, lowering, graph=False):
    """Register `lowering` for every overload of `op` for the duration of a block."""
    overloads = [getattr(op, name) for name in op.overloads()]
    saved = {o: lowerings[o] for o in overloads if o in lowerings}
    register_lowering(op, graph=graph)(lowering)
    try:
        yield
    finally:
        for o in overloads:
            lowerings.pop(o, None)
        lowerings.update(saved)


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def expect_equal(got, expected, what):
    """A check on tensors: the same shape and elements, exactly."""
    assert torch.equal(got, expected), f"{what}: got\n{got}\nexpected\n{expected}"


# %% [markdown]
# Today both ops fall back: the wrapper calls ATen for them, and only the `* 2` and
# the `+ 1` are kernels.

# %%
x = torch.randn(5, 7)
idx = torch.tensor([[3, -1], [34, 0]])
_, graph = compile_once(lambda x, i: torch.take(x, i) * 2, x, idx)
print("take:      ", graph.fallbacks, graph.kernel_names)
_, graph = compile_once(lambda x: x.index_fill(1, idx[0], -9.0) + 1, x)
print("index_fill:", graph.fallbacks, graph.kernel_names)

# %% [markdown]
# ## Part 1: `take`, a gather
#
# `torch.take(x, index)` treats `x` as if it were flattened to one dimension, in
# row-major order, and returns `x.flatten()[index]`: the output has `index`'s shape,
# and a negative position counts from the end (`-1` is the last element).
#
# Two pieces from the book do all the work:
#
# * `view(x, [n])` (chapter 9) is `x` seen as one dimension of `n` elements. It costs
#   nothing: its loader maps a flat position back to `x`'s own index, whatever
#   `x`'s strides are (so a transposed `x` is flattened in *its* row-major order,
#   as eager does).
# * `indirect_loader(index, shape, x, dim, wrap_neg)` (chapter 11) returns a function
#   from an output index to a position along dimension `dim` of `x`: it loads
#   `index`, wraps negative values if `wrap_neg`, and emits the bounds check.
#
# Then `_gathered(source, index, ranges, where)` builds the result: a `Pointwise`
# over `ranges` whose element `i` is `source` loaded at `where(i)`, a list of
# positions. Write `lower_take(x, index)`. A 0-d `x` cannot be flattened by `view`:
# raise `Unsupported` for it (the op then falls back, which is always correct).


# %%
def lower_take(x, index):
    # BEGIN SOLUTION
    if not x.get_size():
        raise Unsupported("take from a 0-d tensor")
    flat = view(x, [product(x.get_size())])
    position = indirect_loader(index, index.get_size(), flat, 0, True)
    return _gathered(flat, index, index.get_size(), lambda i: [position(i)])
    # END SOLUTION


# %% [markdown]
# The checks compare with eager on a strided input, negative positions, a 0-d and a
# 3-d index, and pin the structure: no fallback, one kernel named after `take`.


# %%
def test_take_fuses():
    def fn(x, i):
        return torch.take(x, i) * 2 + 1

    x = torch.randn(5, 7)
    i = torch.tensor([[3, -1, 34], [0, -35, 17]])
    with registered(aten.take, lower_take):
        out, graph = compile_once(fn, x, i)
    torch.testing.assert_close(out, fn(x, i))
    expect(graph.fallbacks, [], "fallbacks")
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
    assert "take" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, expected one with 'take'"
    )


def test_take_strided_and_odd_shapes():
    def fn(x, i, j):
        return torch.take(x, i), torch.take(x, j)

    x = torch.randn(11, 3, 5).permute(2, 0, 1)  # (5, 11, 3), not contiguous
    i = torch.randint(-165, 165, (4, 1, 3))
    j = torch.tensor(-7)  # a 0-d index: a 0-d result
    with registered(aten.take, lower_take):
        out, graph = compile_once(fn, x, i, j)
    for got, want in zip(out, fn(x, i, j)):
        expect(got.shape, want.shape, "shape")
        torch.testing.assert_close(got, want)
    expect(graph.fallbacks, [], "fallbacks")


def test_take_integers():
    x = torch.arange(24, dtype=torch.int32).view(2, 3, 4)[:, 1:]  # a slice
    i = torch.tensor([0, 15, -1, 7, 8])
    with registered(aten.take, lower_take):
        out, graph = compile_once(torch.take, x, i)
    expect(out.dtype, torch.int32, "dtype")
    expect_equal(out, torch.take(x, i), "take(x, i)")
    expect(graph.fallbacks, [], "fallbacks")


# %% [markdown]
# ## Part 2: `index_fill`, a scatter
#
# `x.index_fill(dim, index, value)` is a copy of `x` where every slice
# `x[..., index[k], ...]` (along `dim`) is set to `value`. Its result is not a
# function of the output position alone: whether an element is filled depends on
# whether its position along `dim` appears *anywhere* in `index`. So rather than ask
# that question at every output element, we turn the op around, as chapter 11 does
# for `scatter` and `index_put`: copy `x`, then, for every element of the filled
# slices, store `value` at its position. That is `_scatter`:
#
# ```python
# _scatter(graph, x, ranges, where, value, mode, origin)
# ```
#
# `ranges` is the iteration space of the writes (here: `x`'s shape with dimension
# `dim` replaced by the number of indices), `where(i)` gives, for a point `i` of that
# space, the index into `x` to write, `value(i)` the value to write there (an `ops`
# value), `mode` is `None` for a plain store (a repeated index writes the same value
# twice, which is harmless) and `origin` names the op in kernel names.
#
# Write `lower_index_fill(graph, x, dim, index, value)`. It is registered with
# `graph=True` (it receives the `GraphLowering`: a scatter registers buffers). The
# index is 1-d or 0-d (one position); positions may be negative. `value` is a Python
# number (`aten.index_fill.int_Scalar`) or a 0-d tensor (`.int_Tensor`): make it
# `x`'s dtype, as eager does. For the tensor case, load it with its loader at the
# index `[]` and convert it with `ops.to_dtype`. Raise `Unsupported` for a 0-d `x`.


# %%
def lower_index_fill(graph, x, dim, index, value):
    # BEGIN SOLUTION
    size = list(x.get_size())
    if not size:
        raise Unsupported("index_fill of a 0-d tensor")
    dim %= len(size)
    one_d = len(index.get_size()) == 1
    n = index.get_size()[0] if one_d else 1
    position = indirect_loader(index, index.get_size(), x, dim, True)

    def where(i):
        full = list(i)
        full[dim] = position([i[dim]] if one_d else [])
        return full

    dtype = x.get_dtype()
    if isinstance(value, (int, float, bool)):

        def fill(i):
            return ops.constant(value, dtype)

    else:
        load = value.make_loader()

        def fill(i):
            return ops.to_dtype(load([]), dtype)

    ranges = [*size[:dim], n, *size[dim + 1 :]]
    return _scatter(graph, x, ranges, where, fill, None, "index_fill")
    # END SOLUTION


# %%
def test_index_fill_scalar():
    def fn(x, i):
        return x.index_fill(1, i, -9.5) * 3

    x = torch.randn(4, 9, 3)
    i = torch.tensor([7, 0, -1, 7])  # repeated, negative (-1 is 8)
    with registered(aten.index_fill, lower_index_fill, graph=True):
        out, graph = compile_once(fn, x, i)
    torch.testing.assert_close(out, fn(x, i))
    expect(graph.fallbacks, [], "fallbacks")
    assert any("index_fill" in name for name in graph.kernel_names), (
        f"kernels: got {graph.kernel_names}, expected one with 'index_fill'"
    )


def test_index_fill_tensor_value_and_strides():
    def fn(x, i, v):
        return x.index_fill(0, i, v), x.index_fill(-1, i[:1], 2)

    x = torch.randn(6, 5).t()  # (5, 6), not contiguous
    i = torch.tensor([4, -5, 2])
    v = torch.tensor(0.25, dtype=torch.float64)  # converted to x's float32
    with registered(aten.index_fill, lower_index_fill, graph=True):
        out, graph = compile_once(fn, x, i, v)
    for got, want in zip(out, fn(x, i, v)):
        expect(got.dtype, want.dtype, "dtype")
        torch.testing.assert_close(got, want)
    expect(graph.fallbacks, [], "fallbacks")


def test_index_fill_0d_index_and_integers():
    def fn(x, i):
        return x.index_fill(2, i, 7) + 1

    x = torch.randint(-5, 5, (2, 1, 5), dtype=torch.int64)
    i = torch.tensor(-2)  # a 0-d index: one slice
    with registered(aten.index_fill, lower_index_fill, graph=True):
        out, graph = compile_once(fn, x, i)
    expect_equal(out, fn(x, i), "x.index_fill(2, i, 7) + 1")
    expect(graph.fallbacks, [], "fallbacks")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. `take` with negative positions,
# fused into one kernel named after it:

# %%
test_take_fuses()

# %% [markdown]
# `take` from a permuted input, with a 3-d and a 0-d index:

# %%
test_take_strided_and_odd_shapes()

# %% [markdown]
# `take` of integers from a slice:

# %%
test_take_integers()

# %% [markdown]
# `index_fill` with a number, repeated and negative positions, no fallback:

# %%
test_index_fill_scalar()

# %% [markdown]
# `index_fill` with a 0-d float64 tensor as the value, on a transposed input:

# %%
test_index_fill_tensor_value_and_strides()

# %% [markdown]
# `index_fill` with a 0-d index, on integers:

# %%
test_index_fill_0d_index_and_integers()

# %% [markdown]
# ## Going further
#
# 1. `x` in `index_fill` is copied before the scatter writes into the copy. When `x`
#    is an intermediate that nothing else reads, the copy is wasted: which pass of
#    chapter 19 could let the scatter write into `x`'s own buffer?
# 2. Lower `aten.index_copy` (`x.index_copy(dim, index, source)`): the same scatter,
#    with `value(i)` read from `source`. What does eager do with a repeated index, and
#    can your lowering promise the same?
# 3. `take` with an index that is out of range: turn on `config.debug_indexing` and
#    see the assertion in the kernel (chapter 11); what happens without it?
