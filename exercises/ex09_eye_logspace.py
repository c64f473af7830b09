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

# generated from exercises/solutions/ex09_eye_logspace.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 9: factories from the index: `eye` and `logspace`
#
# **Difficulty:** easy.
#
# **You will:** lower two factories that minductor hands to ATen today:
# `torch.eye`, a two-dimensional tensor whose value is a comparison of its two
# indices, and `torch.logspace`, a range of powers. Both become loop bodies that load
# nothing: every element is computed from where it is.
#
# **It builds on** chapter 8 (*Making tensors*): a factory is a loader over its
# index; `_range_box`, `_affine` and the way `linspace` walks down from `end` for
# its second half; `Unsupported` for the cases a lowering declines. And chapter 6
# for `Pointwise` and `register_lowering`.
#
# **Why it matters.** `x * torch.eye(n)` over `n × n` float32 with `eye` falling back
# is an ATen call writing `4n²` bytes of mostly zeros, then a kernel reading them
# back with `x` (`8n²`) and writing the result (`4n²`): `16n²` bytes. Lowered,
# the identity is a comparison of the two indices inside the kernel that multiplies:
# `8n²` bytes, half the traffic, one launch instead of two.

# %% [markdown]
# ## Setup

# %%
import contextlib
import os

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import record_compiled
from minductor.factories import _affine, _float_compute, _numbers, _range_box
from minductor.ir import Pointwise, TensorBox, as_exprs
from minductor.lowering import (
    Unsupported,
    constant_box,
    lowerings,
    register_lowering,
)
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
# Today, both fall back:

# %%
x = torch.randn(4, 6)
for fn in (lambda x: x * torch.eye(4, 6), lambda x: x + torch.logspace(0, 2, 6)):
    _, graph = compile_once(fn, x)
    print(graph.fallbacks, graph.kernel_names)

# %% [markdown]
# ## Part 1: `eye`
#
# `aten.eye` has two overloads, `eye(n)` (square) and `eye(n, m)`, with keyword
# arguments `dtype`, `layout`, `device` and `pin_memory`. Element `(i, j)` is `1`
# where `i == j` and `0` elsewhere, in `dtype` (the default dtype when it is `None`;
# booleans, integers and floats all work in eager).
#
# `_range_box` makes only one-dimensional ranges, so build the `Pointwise` yourself:
# `Pointwise(device, dtype, inner_fn, ranges)` with `ranges = as_exprs([n, m])` and
# `inner_fn(index)` a body over the two index variables. `ops.index_expr(expr,
# torch.int64)` turns an index expression into a value. `device` may be `None`
# (meaning the CPU): pass `torch.device(device or "cpu")`.


# %%
def lower_eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: `logspace`
#
# `torch.logspace(start, end, steps, base=10.0)` is `base ** linspace(start, end,
# steps)`. Eager computes each exponent the way chapter 8's `linspace` does, up from
# `start` for the first half (`i < steps // 2`) and down from `end` for the rest, so
# that the last element is exactly `base ** end`; then one `pow`. Do the same with
# `_range_box(steps, dtype, device, at)`, where `at(i)` receives the position as an
# int64 value, and `_affine(first, step, i, compute)` computes `first + step * i` in
# `compute` (`_float_compute(dtype)`: float64 for float64, float32 otherwise).
#
# Decline (raise `Unsupported`) what you do not handle: integer dtypes, whose eager
# rounding rules differ per device; `_numbers(start, end, steps)` declines tensor or
# boolean bounds for you. With `steps` 0 or 1 there is no step: the result is
# `[base ** start]` or empty (`constant_box(value, size, dtype, device)`).


# %%
def lower_logspace(
    start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
    pin_memory=None,
):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks
#
# Each check compiles with the lowering registered, compares with eager and pins the
# structure: no fallback, one kernel, and for a factory alone a kernel that loads
# nothing.


# %%
def check(op, lowering, fn, *args, fallbacks=()):
    with registered(op, lowering):
        out, graph = compile_once(fn, *args)
    want = fn(*args)
    expect(out.dtype, want.dtype, "dtype")
    torch.testing.assert_close(out, want)
    expect(graph.fallbacks, list(fallbacks), "fallbacks")
    return graph


def expect_kernel_loads_nothing(graph):
    assert "tl.load" not in graph.source, f"a factory loads:\n{graph.source}"


def test_eye_alone_loads_nothing():
    for fn in (lambda: torch.eye(5), lambda: torch.eye(4, 7), lambda: torch.eye(7, 3)):
        graph = check(aten.eye, lower_eye, fn)
        expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
        expect_kernel_loads_nothing(graph)
        assert "tl.store" in graph.source, f"no tl.store in:\n{graph.source}"


def test_eye_dtypes_and_fusion():
    x = torch.randn(9, 1)  # broadcast against a (9, 5) identity

    def fn(x):
        return x * torch.eye(9, 5) + torch.eye(9, 5, dtype=torch.int64)

    graph = check(aten.eye, lower_eye, fn, x)
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
    check(aten.eye, lower_eye, lambda: torch.eye(6, dtype=torch.bool))
    check(aten.eye, lower_eye, lambda: torch.eye(1, 1, dtype=torch.float16))
    check(aten.eye, lower_eye, lambda: torch.eye(3, 8, dtype=torch.int32) * 7)


def test_logspace_values():
    cases = [
        lambda: torch.logspace(0, 2, 7),
        lambda: torch.logspace(-3, 3, 50, base=2),
        lambda: torch.logspace(1, -1, 10, base=0.5),
        lambda: torch.logspace(0.5, 4.25, 33, dtype=torch.float64),
        lambda: torch.logspace(-2, 2, 4, base=3.0),
        lambda: torch.logspace(-1.7, 9.1, 13),
    ]
    for fn in cases:
        graph = check(aten.logspace, lower_logspace, fn)
        expect_kernel_loads_nothing(graph)
    # walking up all the way, start + 12 * step misses 9.1 by one float32 ulp, and
    # 10 ** 9.1 by 2e-6: the last element must be exactly base ** end
    for start, end, steps in ((-1.7, 9.1, 13), (0.1, 3.3, 11), (0.3, 7.3, 50)):
        with registered(aten.logspace, lower_logspace):
            out, _ = compile_once(lambda: torch.logspace(start, end, steps))
        last = torch.logspace(start, end, steps)[-1].item()
        expect(out[-1].item(), last, f"last of logspace({start}, {end}, {steps})")


def test_logspace_edges_and_fusion():
    check(aten.logspace, lower_logspace, lambda: torch.logspace(2, 3, 1))
    check(aten.logspace, lower_logspace, lambda: torch.logspace(2, 3, 0))
    x = torch.randn(3, 16)
    fn = lambda x: x / torch.logspace(0, 1, 16)  # noqa: E731
    graph = check(aten.logspace, lower_logspace, fn, x)
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")


def test_integer_logspace_is_declined():
    def fn():
        return torch.logspace(0, 3, 4, dtype=torch.int64)

    check(aten.logspace, lower_logspace, fn, fallbacks=["aten.logspace.default"])
    # and the float case does not fall back, so the lowering was there
    check(aten.logspace, lower_logspace, lambda: torch.logspace(0, 3, 4))


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. `eye` alone, square and not:
# one kernel that stores and loads nothing:

# %% tags=["raises-exception"]
test_eye_alone_loads_nothing()

# %% [markdown]
# `eye` of several dtypes, fused into the kernel that uses it:

# %% tags=["raises-exception"]
test_eye_dtypes_and_fusion()

# %% [markdown]
# `logspace` values, bases and dtypes, its last element exactly `base ** end`:

# %% tags=["raises-exception"]
test_logspace_values()

# %% [markdown]
# `logspace` with 0 and 1 steps, and fused into a division:

# %% tags=["raises-exception"]
test_logspace_edges_and_fusion()

# %% [markdown]
# An integer `logspace` is declined (it falls back); a float one is not:

# %% tags=["raises-exception"]
test_integer_logspace_is_declined()

# %% [markdown]
# ## What to try next
#
# 1. Lower `aten.tril_indices(row, col, offset)`: column `k` of the result is the
#    `k`-th position of the lower triangle in row-major order. Finding the row of
#    position `k` needs a square root; for which sizes is a float32 `sqrt` exact
#    enough, and how would you correct it with an integer comparison?
# 2. `eye` with a symbolic `n` (`torch.compile(..., dynamic=True)`): does your
#    lowering need any change? Try it and read the kernel's arguments.
# 3. Write `logspace` for integer dtypes the way eager does on the CPU (compute in
#    float64, then truncate). Which `(start, end, steps, base)` differ from what the
#    float32 path would give?
