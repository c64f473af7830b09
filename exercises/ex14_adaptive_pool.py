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

# generated from exercises/solutions/ex14_adaptive_pool.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 14: adaptive average pooling with uneven windows
#
# **Difficulty:** medium to hard.
#
# **You will:** lower `aten._adaptive_avg_pool2d` for the case chapter 13 leaves to
# ATen: output sizes that do not divide the input's, where windows have different
# lengths and neighbours overlap. Each output element averages its own window, whose
# bounds are computed from its index; the body loops over the *largest* window and
# masks off what lies beyond its own.
#
# **It builds on** chapter 13 (*Convolutional networks*): pooling as a `Pointwise`
# whose body reads a window (`avg_pool2d`), the decomposition of
# `_adaptive_avg_pool2d` into a reshape and a mean when the windows are equal (and
# `NotImplemented` when they are not); chapter 4 (*Sizevars*) for `FloorDiv`; and
# chapter 6 for `register_lowering`.
#
# **Why it matters.** `AdaptiveAvgPool2d((7, 7))` sits between the convolutions and
# the classifier of torchvision's VGG. At 224×224 the feature map is 7×7 and the pool
# is the identity; at 200×200 it is 6×6 (five halvings: 100, 50, 25, 12, 6), and
# output windows overlap their neighbours. That case falls back today, so the ReLU before the pool is written to
# memory for ATen to read. The cell below counts what that costs at batch 64: bytes
# that a fused kernel never moves.

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
from minductor.capture import record_compiled
from minductor.ir import Pointwise, TensorBox
from minductor.lowering import Unsupported, lowerings, register_lowering
from minductor.ops import ops
from minductor.sizevars import FloorDiv

aten = torch.ops.aten
F = torch.nn.functional


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


@contextlib.contextmanager
def registered(overload, lowering):
    """Register `lowering` for one overload for the duration of a block."""
    saved = lowerings.get(overload)
    register_lowering(overload)(lowering)
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
batch, channels, side = 64, 512, 6
relu_out = batch * channels * side * side * 4  # float32, written by the ReLU kernel
print(f"ReLU output stored, then read by ATen's pool: {2 * relu_out / 1e6:.1f} MB")

x = torch.randn(2, 3, 6, 6)
_, graph = compile_once(lambda x: F.adaptive_avg_pool2d(torch.relu(x), 7), x)
print("fallbacks:", graph.fallbacks, "kernels:", graph.kernel_names)

# %% [markdown]
# ## The windows
#
# PyTorch's rule for an input of length `n` pooled to `out` outputs: output `o`
# averages positions `start(o) <= p < end(o)` with
#
# ```
# start(o) = floor(o * n / out)        end(o) = ceil((o + 1) * n / out)
# ```
#
# For `n = 6, out = 7` the windows are `[0,1) [0,2) [1,3) [2,4) [3,5) [4,6) [5,6)`:
# lengths 1 and 2, overlapping. Write `window_bounds(o, n, out)`, returning the pair
# `(start, end)` as sympy expressions of the output index `o` (a symbol in the body,
# or an integer). Use `FloorDiv` for floor division, and `ceil(a / b) = floor((a + b -
# 1) / b)` for the ceiling. The function must also work on plain integers: the check
# below calls it with `sympy.Integer`s.


# %%
def window_bounds(o, n, out):
    raise NotImplementedError("your code here")


# %%
def largest_window(n, out):
    """The longest window along a dimension (a Python int: sizes are static)."""
    lengths = [window_bounds(sympy.Integer(o), n, out) for o in range(out)]
    return max(int(end - start) for start, end in lengths)


# %% [markdown]
# ## The lowering
#
# Write `lower_adaptive_avg_pool2d(x, output_size)`. `x` is `(..., H, W)` (3-d or
# 4-d), `output_size` the pair `(OH, OW)`. Return a `TensorBox(Pointwise(...))` over
# `(..., OH, OW)` whose element is the mean of its window:
#
# * loop over offsets `i < largest_window(H, OH)`, `j < largest_window(W, OW)`; the
#   position `start_h + i` is inside the window while it is below `end_h`, a test
#   that the body makes with `ops.lt` on `ops.index_expr(..., torch.int64)` values;
# * load every offset at a position clamped into the input (`sympy.Min(h, H - 1)`),
#   so that even masked-off lanes read a real address, and add `ops.where(inside,
#   value, 0)`;
# * divide by the window's area, `(end_h - start_h) * (end_w - start_w)`, an index
#   expression made a value with `ops.index_expr(area, compute)`.
#
# Accumulate float16 and bfloat16 in float32, as chapter 13's pools do. Raise
# `Unsupported` (the op then falls back) for symbolic spatial sizes and for integer
# inputs (eager refuses them).


# %%
def lower_adaptive_avg_pool2d(x, output_size):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks
#
# The windows first, on the example above and on a shrinking case; then the lowering
# against eager on windows that overlap, that are uneven without overlapping, a
# channels-last input, a 3-d input and float16. The structure is pinned too: no
# fallback, and the ReLU before the pool inlined into a single kernel.


# %%
def test_window_bounds():
    def windows(n, out):
        bounds = (window_bounds(sympy.Integer(o), n, out) for o in range(out))
        return [(int(s), int(e)) for s, e in bounds]

    expected = [(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 6)]
    expect(windows(6, 7), expected, "windows of 6 pooled to 7")
    expect(windows(7, 3), [(0, 3), (2, 5), (4, 7)], "windows of 7 pooled to 3")
    expected = [(0, 3), (2, 5), (5, 8), (7, 10)]
    expect(windows(10, 4), expected, "windows of 10 pooled to 4")
    expected = [(0, 2), (2, 4), (4, 6), (6, 8)]
    expect(windows(8, 4), expected, "windows of 8 pooled to 4")
    expect(largest_window(6, 7), 2, "largest_window(6, 7)")
    expect(largest_window(10, 4), 3, "largest_window(10, 4)")


def check(fn, *args, atol=None, rtol=None, case="the pool"):
    with registered(aten._adaptive_avg_pool2d.default, lower_adaptive_avg_pool2d):
        out, graph = compile_once(fn, *args)
    want = fn(*args)
    expect(out.shape, want.shape, f"{case}: shape")
    expect(out.dtype, want.dtype, f"{case}: dtype")
    torch.testing.assert_close(
        out, want, atol=atol, rtol=rtol, msg=lambda m: f"{case}: {m}"
    )
    expect(graph.fallbacks, [], f"{case}: fallbacks")
    return graph


def test_overlapping_windows_fuse():
    graph = check(lambda x: F.adaptive_avg_pool2d(torch.relu(x), 7), x)
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
    assert "adaptive_avg_pool2d" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, "
        f"expected one with 'adaptive_avg_pool2d'"
    )


def test_uneven_shapes():
    x = torch.randn(2, 3, 10, 7)
    # windows of 2 and 3
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), x, case="(10, 7) to (4, 3)")
    # an identity along W
    fn = lambda x: F.adaptive_avg_pool2d(x, (3, 7)) * 2  # noqa: E731
    check(fn, x, case="(10, 7) to (3, 7), times 2")
    # a slice
    fn = lambda x: F.adaptive_avg_pool2d(x, (1, 5))  # noqa: E731
    check(fn, x[:, :, :, 1:], case="a (10, 6) slice to (1, 5)")


def test_channels_last_and_3d():
    x = torch.randn(2, 5, 9, 11).to(memory_format=torch.channels_last)
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 6)), x, case="channels last")
    fn = lambda x: F.adaptive_avg_pool2d(x, (2, 3))  # noqa: E731
    check(fn, torch.randn(3, 5, 7), case="a 3-d (C, H, W) input")


def test_float16():
    x = torch.randn(1, 4, 13, 6, dtype=torch.float16) * 10
    check(lambda x: F.adaptive_avg_pool2d(x, (5, 4)), x, atol=1e-2, rtol=1e-3)


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The windows, overlapping and
# not, and the largest one:

# %% tags=["raises-exception"]
test_window_bounds()

# %% [markdown]
# Windows that overlap, with the ReLU before the pool in the same kernel:

# %% tags=["raises-exception"]
test_overlapping_windows_fuse()

# %% [markdown]
# Uneven windows that do not overlap, an identity along one dimension, a slice:

# %% tags=["raises-exception"]
test_uneven_shapes()

# %% [markdown]
# A channels-last input and a 3-d one:

# %% tags=["raises-exception"]
test_channels_last_and_3d()

# %% [markdown]
# float16, accumulated in float32:

# %% tags=["raises-exception"]
test_float16()

# %% [markdown]
# ## Going further
#
# 1. The backward, `aten._adaptive_avg_pool2d_backward` with uneven windows, still
#    falls back. Each input position lies in at most `largest_window` output windows
#    per dimension: write it as a `Pointwise` over the input, as chapter 13 writes
#    `avg_pool2d_backward`, and check it with `torch.autograd.gradcheck`-like
#    comparisons against eager.
# 2. `adaptive_max_pool2d` has the same windows and returns indices too: adapt
#    chapter 13's `_max_window`.
# 3. The body reads `largest_window(H, OH) * largest_window(W, OW)` values per output,
#    and the ReLU inlined into it is computed once per read. When does recomputing
#    it cost more than storing it (chapter 6's realize heuristics)?
