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

# generated from exercises/solutions/ex07_rot90_view.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 7: a view node of your own
#
# **Difficulty:** medium.
#
# **You will:** add an IR node, `Rot90View`, for `torch.rot90`: a view that computes
# nothing, only says where each element of the rotated tensor lives in its input,
# and prints itself in one line. Then you will lower `aten.rot90` with it, so that a
# rotation stops falling back and fuses into the kernels that read it.
#
# **It builds on** chapter 5 (*The IR*): `IRNode`, `TensorBox`, `GenericView` (a
# box read through a `reindex` function), `strided_view`, and how
# `TensorBox.realize` turns a view that is not strided into a `Pointwise`; chapter 6
# for `register_lowering` and `GraphLowering`.
#
# **Why it matters.** Today `torch.rot90(x) * 2` is an ATen call that writes the
# rotated tensor (`4n` bytes for `n` float32 elements) and a kernel that reads it
# back (`4n` more) before writing its result. As a view, the rotation is only an
# index: the kernel reads `x` where the rotated element lives, and the `8n` bytes of
# the round trip are gone. A rotation is not a strided view (no tensor has negative
# strides), so it must stay a re-indexed read; that is exactly what a `GenericView`
# is for.

# %% [markdown]
# ## Setup

# %%
import contextlib
import os
from dataclasses import dataclass

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)

# these import Triton: after minductor, which has chosen the interpreter on a CPU
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import record_compiled
from minductor.factories import clone
from minductor.ir import GenericView, TensorBox, _ints, index_vars, strided_view
from minductor.lowering import GraphLowering, lowerings, register_lowering

aten = torch.ops.aten


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
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


def expect_start(text, start, what):
    assert text.startswith(start), f"{what}: got {text!r}, expected {start!r}..."


# %% [markdown]
# `torch.rot90(x, k, dims)` turns the plane of the two dimensions `dims` by `k`
# quarter turns, from the first dimension towards the second. For a `(3, 4)` matrix
# and `k = 1`, the last column becomes the first row:

# %%
x = torch.arange(12).view(3, 4)
print(x)
print(torch.rot90(x, 1, [0, 1]))

# %% [markdown]
# ## Part 1: the node
#
# `Rot90View` is a `GenericView` (so `TensorBox.realize` and `strided_view` already
# know how to handle it) that also remembers `k` and `dims`, to print them. Write:
#
# * `Rot90View.create(box, k, dims)`: normalise `k` to `0..3` and `dims` to
#   non-negative dimensions, compute the view's size (the two dimensions trade
#   places when `k` is odd) and its `reindex`, a function from the view's index
#   (a list of sympy expressions) to the input's index. Work out the three turns on
#   the example above: with `H, W` the input's sizes in `dims`, element `(i, j)` of
#   `rot90(x, 1)` is `x[j, W - 1 - i]`; for `k = 2` and `k = 3` find it yourself.
#   Every other dimension is read where it is. Construct the node with
#   `cls(box, size, reindex, k, dims)`: `GenericView`'s three fields, then yours.
# * `__repr__`, one line:
#   `Rot90View(k=1, dims=[0, 1], size=[4, 3], reads [i1, 3 - i0] of <the box>)`,
#   where `reads` is `reindex` applied to the index variables (`index_vars`), as in
#   `GenericView`'s repr, and the sizes are printed with `_ints`.


# %%
@dataclass(frozen=True, eq=False)
class Rot90View(GenericView):
    k: int = 1
    dims: tuple[int, int] = (0, 1)

    @classmethod
    def create(cls, box, k, dims):
        raise NotImplementedError("your code here")

    def __repr__(self):
        raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: the lowering
#
# Write `lower_rot90(x, k=1, dims=(0, 1))`, which returns a `TensorBox` around your
# view. One case is different: with `k` a multiple of 4, eager returns a *copy* of
# `x`, and so must you (a compiled function must never hand back its input where
# eager hands back a new tensor: writing into one would change the other). Use
# chapter 8's `clone` lowering.


# %%
def lower_rot90(x, k=1, dims=(0, 1)):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks
#
# The first checks look at the IR: the node's repr, that it is not strided, and
# the body of the buffer that reads it. Then the rotation is compiled and compared
# with eager for every `k` from -5 to 5, both orders of `dims`, a 3-d input, a
# transposed input, a size-1 dimension, integers and booleans.


# %%
def lowered(fn, *args):
    graph = GraphLowering(make_fx(fn)(*args), list(args))
    with registered(aten.rot90, lower_rot90):
        return graph.lower()


def test_repr_and_size():
    x = torch.randn(3, 4)
    graph = GraphLowering(make_fx(lambda x: x + 1)(x), [x]).lower()
    (box,) = graph.graph_inputs.values()
    view = Rot90View.create(box, 1, (0, 1))
    expect([int(s) for s in view.get_size()], [4, 3], "size of rot90(k=1)")
    expect_start(
        repr(view),
        "Rot90View(k=1, dims=[0, 1], size=[4, 3], reads [i1, 3 - i0] of ",
        "repr",
    )
    view = Rot90View.create(box, -6, (1, -2))
    expect((view.k, view.dims), (2, (1, 0)), "(k, dims) for k=-6, dims=(1, -2)")
    expect_start(
        repr(view),
        "Rot90View(k=2, dims=[1, 0], size=[3, 4], reads [2 - i0, 3 - i1] of ",
        "repr",
    )
    # a rotation has no strides: it is read
    expect(strided_view(view), None, "strided_view of a rotation")
    expect(view.get_dtype(), torch.float32, "dtype")


def test_the_body_reads_the_input_rotated():
    x = torch.randn(5, 2, 7)
    graph = lowered(lambda x: torch.rot90(x, 3, [0, 2]) * 2, x)
    (buf,) = graph.buffers
    expect([int(s) for s in buf.get_size()], [7, 2, 5], "size of the buffer")
    body = buf.data.inner_fn_str()
    # x[4 - i2, i1, i0], at strides (14, 7, 1): a negative stride, in an index
    load = "ops.load(x_1, i0 + 7*i1 - 14*i2 + 56)"
    assert load in body, f"body: got\n{body}\nexpected it to contain {load!r}"
    expect(graph.fallbacks, [], "fallbacks")


def check(fn, *args):
    with registered(aten.rot90, lower_rot90):
        out, graph = compile_once(fn, *args)
    torch.testing.assert_close(out, fn(*args))
    expect(graph.fallbacks, [], "fallbacks")
    return graph


def test_every_turn_fuses_into_one_kernel():
    x, y = torch.randn(5, 3), torch.randn(3, 5)
    for k in range(-5, 6):
        for dims in ([0, 1], [1, 0]):

            def fn(x, y):
                r = torch.rot90(x, k, dims)
                return r * 2 + (y if r.shape == y.shape else y.t())

            graph = check(fn, x, y)
            kernels = graph.kernel_names
            expect(len(kernels), 1, f"kernels for k={k}, dims={dims} ({kernels})")


def test_three_dims_strided_and_size_one():
    x = torch.randn(4, 6, 3).transpose(0, 2)  # (3, 6, 4), not contiguous
    for k, dims in ((1, [0, 2]), (3, [2, 1]), (2, [-1, 0])):
        check(lambda x: torch.rot90(x, k, dims) + 1, x)
    check(lambda x: torch.rot90(x, 1, [0, 1]) - 1, torch.randn(1, 7))


def test_outputs_integers_and_booleans():
    n = torch.arange(30).view(5, 6)
    check(lambda n: torch.rot90(n, 1), n)  # a graph output: realized from the view
    check(lambda n: torch.rot90(n, 0), n)  # a copy, not n itself
    b = torch.rand(4, 9) > 0.5
    check(lambda b: torch.rot90(b, 3) & True, b)

    with registered(aten.rot90, lower_rot90):
        out, _ = compile_once(lambda n: torch.rot90(n, 4), n)
    out.add_(1)  # writing into the result must not change the input
    before = torch.arange(30).view(5, 6)
    assert torch.equal(n, before), f"writing into rot90(n, 4) changed n: got\n{n}"


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The view's size, `k`, `dims`
# and one-line repr, and that it is not strided:

# %% tags=["raises-exception"]
test_repr_and_size()

# %% [markdown]
# The buffer that reads a rotation loads its input at a rotated index:

# %% tags=["raises-exception"]
test_the_body_reads_the_input_rotated()

# %% [markdown]
# Every `k` from -5 to 5, both orders of `dims`: eager's values, one kernel:

# %% tags=["raises-exception"]
test_every_turn_fuses_into_one_kernel()

# %% [markdown]
# A 3-d transposed input, and a size-1 dimension:

# %% tags=["raises-exception"]
test_three_dims_strided_and_size_one()

# %% [markdown]
# Integers and booleans, a rotation as a graph output, and `k = 4` as a copy:

# %% tags=["raises-exception"]
test_outputs_integers_and_booleans()

# %% [markdown]
# ## What to try next
#
# 1. `rot90` of a `rot90` is a `GenericView` of a `GenericView`. Print the body of
#    `torch.rot90(torch.rot90(x), 1) + 1`: does the index of the load simplify to
#    `rot90(x, 2)`'s? Why does it, or why not?
# 2. Give `Rot90View` a `reindexed`-like method that folds a following transpose
#    into it (`rot90(x, 1).t()` is `x.flip(1)`). When is the result strided?
# 3. Inductor has no rotation node: it decomposes `rot90` into `flip` and
#    `transpose` (`torch/_refs/__init__.py`, `rot90`). Write that decomposition
#    (chapter 2) instead and compare the generated kernels with yours.
