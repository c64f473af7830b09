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

# generated from exercises/solutions/ex15_triton_atan.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 15: a new op, down to the Triton line
#
# **Difficulty:** medium. The formula is given; the care is in the special values and
# in the four places an op lives.
#
# **You will:** teach minductor `atan`, which it does not know at any level: a row in
# chapter 3's table of math ops, a method in chapter 16's table of Triton expressions that prints
# the op into kernel source (`libdevice.atan` on a GPU), and, because Triton's
# interpreter has no libdevice, a `@triton.jit` helper that computes the arctangent
# from the operations the interpreter does run, accurate to float32.
#
# **It builds on** chapter 16 (*Triton's ops*): `TritonOverrides`, one method per op
# returning a line of Triton, and `InterpreterOverrides`, which replaces the libdevice
# calls with `helpers.*` functions from `triton_helpers.py` (the generated module
# imports it as `helpers`); chapter 3 (*The `ops` protocol*) for `MATH_OPS`, the
# closed table of math ops with their eager meaning; and chapter 7 (*Pointwise
# lowerings*) for `make_pointwise` and the promotion kinds.
#
# **Why it matters.** An op with no lowering falls back, and a fallback is a wall:
# `torch.atan(x) * 2` on `n` float32 elements is an ATen call that writes `4n`
# bytes and a kernel that reads them back and writes `4n` more, `12n` bytes where one
# fused kernel moves `8n`. And the method you write is the whole of what Inductor's
# real Triton backend does for an op: print a call to the device's math library
# (`torch/_inductor/codegen/triton.py`, `TritonOverrides.atan`).

# %% [markdown]
# ## Setup
#
# `import minductor` before Triton: without a GPU it turns on Triton's interpreter,
# which must be on when `@triton.jit` decorates the helper you will write.

# %%
import contextlib  # noqa: I001  (triton only after minductor)
import math
import os

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
import triton
import triton.language as tl
from minductor import triton_helpers as helpers
from minductor.capture import record_compiled
from minductor.triton_ops import InterpreterOverrides, TritonOverrides
from minductor.lowering import lowerings, register_lowering
from minductor.ops import MATH_OPS
from minductor.pointwise import make_pointwise

aten = torch.ops.aten


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
# Today `atan` falls back:

# %%
x = torch.randn(6, 5)
_, graph = compile_once(lambda x: torch.atan(x) * 2, x)
print("fallbacks:", graph.fallbacks, "kernels:", graph.kernel_names)
print("atan in MATH_OPS:", "atan" in MATH_OPS)

# %% [markdown]
# ## Part 1: the helper
#
# Write `atan(x)`, the body of a `@triton.jit` function: it receives a block of
# float32 values and returns their arctangents. Use only what the interpreter runs:
# arithmetic, comparisons, `tl.where`, `tl.abs` (no `libdevice`, and no Python `if`
# on values: every lane of a block takes every branch, and `tl.where` picks).
#
# A classic method (Cephes' `atanf`) reduces the argument, then evaluates a short
# polynomial. With `a = |x|`:
#
# | range of `a`                | base    | reduced `t`           |
# |-----------------------------|---------|-----------------------|
# | `a > tan(3π/8) ≈ 2.4142136` | `π/2`   | `-1 / a`              |
# | `a > tan(π/8) ≈ 0.41421357` | `π/4`   | `(a - 1) / (a + 1)`   |
# | otherwise                   | `0`     | `a`                   |
#
# so that `|t| <= tan(π/8)`, and then, with `z = t²`,
#
# ```
# atan(a) = base + t + t·z·(((0.0805374449538·z − 0.138776856032)·z
#                           + 0.199777106478)·z − 0.333329491539)
# ```
#
# and `atan(x) = -atan(|x|)` for negative `x`. Mind the values eager defines:
# `atan(±inf) = ±π/2`, `atan(nan) = nan`, and `atan(-0.0) = -0.0`.


# %%
def atan(x):
    raise NotImplementedError("your code here")


atan_jit = triton.jit(atan)

# %% [markdown]
# ## Part 2: the op, at every level
#
# Write `install_atan()`, which makes `aten.atan` compile:
#
# 1. **The table** (chapter 3): `MATH_OPS["atan"] = (arity, eager function)`. Every
#    handler that evaluates or checks a body looks here.
# 2. **The Triton table** (chapter 16): a method `atan` on `TritonOverrides`
#    that returns the Triton text for the op, given the name of its argument
#    (`"tmp0"` → `"libdevice.atan(tmp0)"`), and one on `InterpreterOverrides` that
#    calls your helper instead (`"helpers.atan(tmp0)"`). Set them as
#    `staticmethod`s, as the chapter's own one-liners are.
# 3. **The helper**: the generated module reaches your function as `helpers.atan`,
#    so set `atan_jit` as the attribute `atan` of the `helpers` module.
# 4. **The lowering** (chapter 7): `make_pointwise(name, kind)` for `aten.atan`; its
#    promotion kind is that of `sin` (an integer tensor gives float32).
#
# `uninstall_atan`, given, undoes all four, so that the notebook leaves minductor as
# it found it.


# %%
def install_atan():
    raise NotImplementedError("your code here")


def uninstall_atan():
    MATH_OPS.pop("atan", None)
    for cls in (TritonOverrides, InterpreterOverrides):
        if "atan" in vars(cls):
            delattr(cls, "atan")
    if hasattr(helpers, "atan"):
        del helpers.atan
    for name in aten.atan.overloads():
        lowerings.pop(getattr(aten.atan, name), None)


@contextlib.contextmanager
def atan_installed():
    try:
        install_atan()
        yield
    finally:
        uninstall_atan()


# %% [markdown]
# ## Checks
#
# Accuracy first, against `torch.atan` on every range of the table, the points where
# the ranges meet, and the special values; then structure (one kernel, fused, with
# `helpers.atan` in its source), promotion (integers, float16), and the undo.


# %%
def test_atan_accuracy():
    edges = [2.414213562373095, 0.4142135623730950, 1.0]
    special = [0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, math.inf, -math.inf, math.nan]
    near = torch.tensor(edges)[:, None] * torch.tensor([0.9999, 1, 1.0001])
    near = near.flatten()  # on either side of where the ranges meet
    x = torch.cat(
        [torch.linspace(-20, 20, 2001), near, -near, torch.tensor(special)]
    ).view(169, 12)  # 2028 values
    with atan_installed():
        out, graph = compile_once(torch.atan, x)
    want = torch.atan(x)
    torch.testing.assert_close(out, want, equal_nan=True, rtol=2e-7, atol=0)
    zeros = want == 0
    got_signs, want_signs = torch.signbit(out[zeros]), torch.signbit(want[zeros])
    assert torch.equal(got_signs, want_signs), (
        f"atan of ±0: got {out[zeros].tolist()}, expected {want[zeros].tolist()} "
        f"(atan(-0.0) must be -0.0)"
    )
    expect(graph.fallbacks, [], "fallbacks")


def test_atan_fuses():
    def fn(x, y):
        return torch.atan(x * y) + y

    x, y = torch.randn(5, 9) * 3, torch.randn(9)
    with atan_installed():
        out, graph = compile_once(fn, x, y)
    torch.testing.assert_close(out, fn(x, y))
    expect(len(graph.kernel_names), 1, f"kernels ({graph.kernel_names})")
    assert "atan" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, expected one with 'atan'"
    )
    assert "helpers.atan(" in graph.source, f"no helpers.atan( in:\n{graph.source}"


def test_atan_promotes():
    def fn(i, h):
        return torch.atan(i), torch.atan(h)

    i = torch.arange(-7, 8).view(3, 5)  # int64: float32 out
    h = torch.randn(4, 3, dtype=torch.float16).t() * 4  # float16, strided
    with atan_installed():
        out, graph = compile_once(fn, i, h)
    for got, want, what in zip(out, fn(i, h), ("atan of int64", "atan of float16")):
        expect(got.dtype, want.dtype, f"dtype of {what}")
        torch.testing.assert_close(got, want, msg=lambda m: f"{what}: {m}")
    expect(graph.fallbacks, [], "fallbacks")


def test_uninstall_restores():
    with atan_installed():
        _, graph = compile_once(torch.atan, torch.randn(3))
        expect(graph.fallbacks, [], "fallbacks while installed")
    expect("atan" in MATH_OPS, False, "'atan' in MATH_OPS after uninstall_atan()")
    has = hasattr(TritonOverrides, "atan")
    expect(has, False, "TritonOverrides has atan after uninstall_atan()")
    _, graph = compile_once(torch.atan, torch.randn(3))
    expect(graph.fallbacks, ["aten.atan.default"], "fallbacks after uninstall_atan()")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. Accuracy on every range, near
# the edges between them, and on the special values, the sign of -0.0 included:

# %% tags=["raises-exception"]
test_atan_accuracy()

# %% [markdown]
# `atan` fused with what surrounds it, calling `helpers.atan`:

# %% tags=["raises-exception"]
test_atan_fuses()

# %% [markdown]
# Promotion: int64 in, float32 out; float16 on a strided input:

# %% tags=["raises-exception"]
test_atan_promotes()

# %% [markdown]
# `uninstall_atan` leaves minductor as it found it: `atan` falls back again:

# %% tags=["raises-exception"]
test_uninstall_restores()

# %% [markdown]
# ## Going further
#
# 1. The helper computes in the dtype it is given. Compile `torch.atan` on a float64
#    tensor: how large is the error, and what would a float64 helper need (the
#    polynomial Cephes uses for `atan`, not `atanf`)?
# 2. Write `atan2(y, x)` from your `atan` (chapter 16, challenge 1): which quadrant
#    rules, and what does eager return for `atan2(±0, -0)` and `atan2(inf, inf)`?
# 3. Time your helper against `libdevice.atan` on a GPU (the performance page's
#    `benchmark`): a memory-bound kernel should not notice the difference. Does it?
