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
# # Exercise 1: add a lowering through the registry
#
# **Difficulty:** easy.
#
# **You will:** teach minductor two ATen ops it does not lower yet, `aten.hypot` and
# `aten.xlogy`, by writing a lowering for each and registering it, so that they stop
# falling back to ATen and fuse into the Triton kernel around them.
#
# **It builds on** chapter 6 (*Lowering*): `register_lowering` and the `lowerings`
# registry; chapter 7 (*Pointwise lowerings*): `pointwise` and its promotion kinds;
# and chapter 3 (*The `ops` protocol*): the closed table `MATH_OPS`. Both ops can be composed from operations
# that are already in that table, so no new Triton method is needed (chapter 16).
#
# **Why it matters.** An op without a lowering still gives the right answer (the
# fallback calls ATen), but it costs: every tensor argument is realized into memory
# before the call, the result is written to memory after it, and the kernels on
# either side cannot fuse across it. `torch.hypot(a, b) * 2` on `n` float32 elements
# is one kernel reading `8n` bytes and writing `4n` once `hypot` has a lowering;
# with the fallback it is an ATen call plus a kernel, and the intermediate makes an
# extra round trip through memory (`4n` written, `4n` read back).
#
# A lowering is also where correctness lives. `GraphLowering` checks every lowering's
# dtype and shape against eager PyTorch, but not its *values* (chapter 6, challenge
# 2): if your formula overflows where eager's does not, nothing but a test on awkward
# inputs will notice. So the checks below use odd shapes, broadcasting, 0-d tensors,
# float16, integers, and the values that break the obvious formulas: 0, inf, NaN,
# 1e38, 1e-30.

# %% [markdown]
# ## Setup
#
# `import minductor` must come before anything imports Triton: on a machine without
# a GPU it switches on Triton's interpreter, and it registers the `"minductor"`
# backend with `torch.compile`.

# %%
import contextlib
import math
import os

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import record_compiled
from minductor.lowering import lowerings, register_lowering
from minductor.ops import MATH_OPS, ops
from minductor.pointwise import pointwise, promote

aten = torch.ops.aten
inf, nan = math.inf, math.nan


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()  # forget earlier compilations (and their lowerings)
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# Today, `hypot` falls back. The wrapper calls `aten.hypot.default` on the inputs,
# into a buffer `buf0`, and the only kernel computes the `* 2`:

# %%
a, b = torch.randn(7, 1), torch.randn(1, 5)
out, graph = compile_once(lambda a, b: torch.hypot(a, b) * 2, a, b)
print("fallbacks:", graph.fallbacks)
print("kernels:  ", graph.kernel_names)
print([line.strip() for line in graph.source.splitlines() if "aten.hypot" in line])

# %% [markdown]
# ## Registering a lowering, and undoing it
#
# A lowering receives the node's arguments, each tensor replaced by its `TensorBox`
# (Python numbers stay numbers), and returns a `TensorBox`. Registering one is a dict
# assignment: `register_lowering(aten.hypot)(lower_hypot)` puts `lower_hypot` in
# `lowerings` under every overload of `aten.hypot`. In the package you would write it
# as a decorator. Here we register inside each check and restore the registry
# afterwards, so that running this notebook leaves minductor as it found it.


# %%
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


# %% [markdown]
# ## Part 1: `hypot`
#
# `hypot(a, b)` is the length of the vector `(a, b)`, $\sqrt{a^2 + b^2}$. Write the
# lowering with `pointwise(fn, [a, b], kind)`: `fn` receives the two values, already
# broadcast and converted to the computation dtype, and builds the result with `ops.*`
# calls (the names in `MATH_OPS`, plus `where`, `constant` and `to_dtype`).
#
# Two decisions to make:
#
# * **The promotion kind.** `hypot` of two float16 tensors is float16, and eager
#   refuses integers, so `DEFAULT` and `INT_TO_FLOAT` agree on everything `hypot`
#   accepts (PyTorch's own reference, `torch._refs.hypot`, says `DEFAULT`). Both give
#   float16 in, float16 out, with the math in float32 in between. Which kind does
#   not, and what happens if you use it?
# * **The formula.** `sqrt(a*a + b*b)` is what chapter 7's challenge suggests, and
#   is wrong at both ends of float32: `a*a` overflows to `inf` once
#   `|a| > 1.8e19`, and underflows to `0` once `|a| < 1e-22`, where the true
#   hypotenuse is perfectly representable. Scale first: with
#   `big = max(|a|, |b|)` and `small = min(|a|, |b|)`,
#   `hypot = big * sqrt(1 + (small / big)**2)`. Then look at the corner cases eager
#   PyTorch (following C's `hypot`) defines: `hypot(0, 0) = 0` (but `small / big` is
#   `0 / 0`), and `hypot(inf, x) = inf` *even when `x` is NaN*.
#
# For constants, `ops.constant(value, dtype)` needs the computation dtype: get it with
# `compute, result = promote([a, b], kind)`, as `gelu` does in chapter 7. Make every
# `ops.*` call inside `fn`, never in the lowering itself: `ops` has a handler only
# while a body runs (to print it, record its reads, or generate its kernel).

# %%
print(sorted(MATH_OPS))


# %%
def lower_hypot(a, b):
    # BEGIN SOLUTION
    compute, _ = promote([a, b], Kind.DEFAULT)

    def c(value):
        return ops.constant(value, compute)

    def hypot(x, y):
        ax, ay = ops.abs(x), ops.abs(y)
        big, small = ops.maximum(ax, ay), ops.minimum(ax, ay)  # NaN propagates
        ratio = ops.truediv(small, big)  # in [0, 1]: no overflow below
        scaled = ops.mul(big, ops.sqrt(ops.add(c(1.0), ops.mul(ratio, ratio))))
        scaled = ops.where(ops.eq(big, c(0.0)), c(0.0), scaled)  # 0 / 0 above
        infinite = ops.logical_or(ops.eq(ax, c(inf)), ops.eq(ay, c(inf)))
        return ops.where(infinite, c(inf), scaled)  # inf wins, even over NaN

    return pointwise(hypot, [a, b], Kind.DEFAULT)
    # END SOLUTION


# %% [markdown]
# The checks compile with minductor and compare with eager. Besides values they pin
# structure: no fallback is left, and `hypot` appears in the kernel's name (kernels
# are named after the ATen ops they compute, chapter 17), fused with the `mul` into a
# single kernel.


# %%
def test_hypot_broadcast():
    def fn(a, b):
        return torch.hypot(a, b) * 2

    a, b = torch.randn(7, 1), torch.randn(1, 5)
    with registered(aten.hypot, lower_hypot):
        out, graph = compile_once(fn, a, b)
    torch.testing.assert_close(out, fn(a, b))
    expect(graph.fallbacks, [], "fallbacks")
    expect(len(graph.kernel_names), 1, f"number of kernels ({graph.kernel_names})")
    assert "hypot" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, expected one with 'hypot'"
    )


def test_hypot_0d_and_strided():
    def fn(a, b, t):
        return torch.hypot(a, b), torch.hypot(t, a)

    a, b = torch.randn(3, 13), torch.tensor(-2.5)  # b is 0-d
    t = torch.randn(13, 3).t()  # a strided input: read through its strides
    with registered(aten.hypot, lower_hypot):
        out, graph = compile_once(fn, a, b, t)
    for got, want in zip(out, fn(a, b, t)):
        torch.testing.assert_close(got, want)
    expect(graph.fallbacks, [], "fallbacks")


def test_hypot_float16():
    def fn(a, b, s):
        return torch.hypot(a, b) - torch.hypot(b, s)

    a = torch.randn(5, 9, dtype=torch.float16) * 100
    b = torch.randn(9, dtype=torch.float16) * 100
    s = torch.tensor(3.0)  # a 0-d float32 does not promote float16 tensors
    with registered(aten.hypot, lower_hypot):
        out, graph = compile_once(fn, a, b, s)
    want = fn(a, b, s)
    expect((out.dtype, want.dtype), (torch.float16,) * 2, "dtypes (compiled, eager)")
    # each op computes in float32 and rounds its result to float16, as eager does
    torch.testing.assert_close(out, want)
    expect(graph.fallbacks, [], "fallbacks")
    # converted up, computed, converted down
    assert "tl.float32" in graph.source, f"no tl.float32 in the kernel:\n{graph.source}"


def test_hypot_awkward_values():
    values = [0.0, -0.0, 1.0, -3.0, 4.0, 1e38, -1e38, 1e-30, 3e19, inf, -inf, nan]
    a = torch.tensor(values).view(-1, 1)  # every pair of values: (12, 12)
    b = torch.tensor(values).view(1, -1)
    with registered(aten.hypot, lower_hypot):
        out, graph = compile_once(torch.hypot, a, b)
    torch.testing.assert_close(out, torch.hypot(a, b), equal_nan=True)
    expect(graph.fallbacks, [], "fallbacks")


# %% [markdown]
# ## Part 2: `xlogy`
#
# `xlogy(x, y)` is `x * log(y)`, except in two cases, which make it safe in
# entropy-like sums (`p * log(p)` with `p = 0`):
#
# 1. if `y` is NaN, the result is NaN;
# 2. otherwise, if `x == 0`, the result is `0`, even where `log(y)` is `-inf` or NaN
#    (`xlogy(0, 0) = 0`, not `0 * -inf = NaN`).
#
# Its promotion kind differs from `hypot`'s: `xlogy` of two int64 tensors is float32,
# as for `log`. (Try the wrong kind: `GraphLowering` catches the dtype mismatch with
# eager and says so.) `xlogy` also has overloads that take a Python number for either
# argument (`aten.xlogy.Scalar_Self`, `aten.xlogy.Scalar_Other`); `register_lowering`
# on the packet `aten.xlogy` registers your function for all of them, and `pointwise`
# turns a number into an `ops.constant`, so one function serves all three.


# %%
def lower_xlogy(a, b):
    # BEGIN SOLUTION
    compute, _ = promote([a, b], Kind.INT_TO_FLOAT)

    def xlogy(x, y):
        zero = ops.constant(0.0, compute)
        product = ops.mul(x, ops.log(y))
        product = ops.where(ops.eq(x, zero), zero, product)
        return ops.where(ops.isnan(y), y, product)

    return pointwise(xlogy, [a, b], Kind.INT_TO_FLOAT)
    # END SOLUTION


# %%
def test_xlogy_special_values():
    values = [0.0, -0.0, 1.0, 2.5, -1.0, 1e-30, inf, -inf, nan]
    x = torch.tensor(values).view(-1, 1)  # (9, 1) x (1, 9): every pair
    y = torch.tensor(values).view(1, -1)

    def fn(x, y):
        return torch.xlogy(x, y) + 1

    with registered(aten.xlogy, lower_xlogy):
        out, graph = compile_once(fn, x, y)
    torch.testing.assert_close(out, fn(x, y), equal_nan=True)
    expect(graph.fallbacks, [], "fallbacks")
    expect(len(graph.kernel_names), 1, f"number of kernels ({graph.kernel_names})")
    assert "xlogy" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, expected one with 'xlogy'"
    )


def test_xlogy_integers_and_scalars():
    def fn(i, j, y):
        return torch.xlogy(i, j), torch.xlogy(2, y), torch.xlogy(y, 3.0)

    i = torch.tensor([[0, 1, 2, -3, 5]])  # int64, (1, 5)
    j = torch.tensor([[0], [1], [4], [7]])  # int64, (4, 1)
    y = torch.rand(3, 7) + 0.5
    with registered(aten.xlogy, lower_xlogy):
        out, graph = compile_once(fn, i, j, y)
    want = fn(i, j, y)
    expect(out[0].dtype, torch.float32, "dtype of xlogy(int64, int64)")
    for got, expected in zip(out, want):
        torch.testing.assert_close(got, expected, equal_nan=True)
    expect(graph.fallbacks, [], "fallbacks")


def test_xlogy_float16():
    x = torch.rand(6, 5, dtype=torch.float16)
    x[0] = 0
    y = torch.rand(5, dtype=torch.float16)
    y[1] = 0
    with registered(aten.xlogy, lower_xlogy):
        out, graph = compile_once(torch.xlogy, x, y)
    dtypes = (out.dtype, torch.xlogy(x, y).dtype)
    expect(dtypes, (torch.float16,) * 2, "dtypes (compiled, eager)")
    # computed in float32, rounded once: as close as float16 can be to the truth
    want = torch.xlogy(x.double(), y.double()).half()
    torch.testing.assert_close(out, want)
    expect(graph.fallbacks, [], "fallbacks")


# %% [markdown]
# ## Run the checks
#
# Each check compiles a small function and runs its kernel in Triton's interpreter
# (on a CPU), a second or so each. Run them one cell at a time: a failure says what
# it compared.
#
# `hypot` on broadcast shapes, fused with the `* 2` into one kernel named after it:

# %%
test_hypot_broadcast()

# %% [markdown]
# `hypot` with a 0-d input and a strided one:

# %%
test_hypot_0d_and_strided()

# %% [markdown]
# `hypot` on float16, computed in float32:

# %%
test_hypot_float16()

# %% [markdown]
# `hypot` on every pair of awkward values (0, inf, NaN, 1e38, 1e-30, ...):

# %%
test_hypot_awkward_values()

# %% [markdown]
# `xlogy` on every pair of special values, fused into one kernel named after it:

# %%
test_xlogy_special_values()

# %% [markdown]
# `xlogy` on int64 tensors (float32 out) and with a Python number on either side:

# %%
test_xlogy_integers_and_scalars()

# %% [markdown]
# `xlogy` on float16, computed in float32 and rounded once:

# %%
test_xlogy_float16()

# %% [markdown]
# ## Going further
#
# 1. Replace your `hypot` body by `sqrt(a*a + b*b)` and run the checks: which values
#    fail, and why does `GraphLowering`'s check against eager not catch it?
# 2. Lower `aten.logit` (with its optional `eps`, which clamps the input to
#    `[eps, 1 - eps]` first). Which promotion kind?
# 3. Lower `aten.atan2`. It cannot be composed from `MATH_OPS`, which has no
#    arctangent: add a row to the table and follow the failing tests to the places
#    that need it (chapter 3, challenge 1; chapter 17, challenge 3).
