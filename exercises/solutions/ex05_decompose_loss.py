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
# # Exercise 5: decompose a loss, and its gradient
#
# **Difficulty:** easy.
#
# **You will:** write decompositions for `aten.huber_loss` and for its gradient
# `aten.huber_loss_backward`, register them in minductor's table, and watch both
# fallbacks disappear: the loss becomes one fused reduction kernel, its gradient one
# pointwise kernel.
#
# **It builds on** chapter 2 (*Decompositions*): the `decompositions` table,
# `register_decomposition`, and the rule that a decomposition is written with
# differentiable ATen ops; and chapter 1, where AOTAutograd applies the table while it
# traces the forward and the backward.
#
# **Why it matters.** Today `F.huber_loss(2 * x, t)` is a kernel for `2 * x` and an
# ATen call for the loss. For `n` float32 elements the kernel reads `4n` bytes and
# writes `4n`, and the loss reads `8n` more: `16n` bytes in all. Decomposed, the
# loss is `abs`, a comparison, a `where` and a `mean`, all of which minductor lowers,
# so the scheduler fuses `2 * x` into the reduction: one kernel reading `x` and `t`,
# `8n` bytes, half as many. The gradient has the same story: a fallback whose input
# is computed, then an ATen call, against one kernel.

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
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import record_compiled
from minductor.decompositions import decompositions, register_decomposition

aten = torch.ops.aten
MEAN, SUM, NONE = 1, 2, 0  # how ATen spells `reduction`


def compile_graphs(fn, *args, backward=False):
    """Compile fn afresh with minductor, run it (and its backward); return
    (result, the compiled graphs)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
        if backward:
            out.sum().backward()
    return out, graphs


@contextlib.contextmanager
def registered(op, fn):
    """Register decomposition `fn` for `op` for the duration of a block."""
    saved = decompositions.get(op)
    register_decomposition(op)(fn)
    try:
        yield
    finally:
        decompositions.pop(op)
        if saved is not None:
            decompositions[op] = saved


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# Today both ops fall back. The forward graph has a kernel for `2 * x`, then the ATen
# call; the backward graph the same again:

# %%
def loss_fn(x, t):
    return F.huber_loss(2 * x, t, delta=0.5)


x, t = torch.randn(5, 7, requires_grad=True), torch.randn(5, 7)
_, graphs = compile_graphs(loss_fn, x, t, backward=True)
for g in graphs:
    print(g.kernel_names, g.fallbacks)

# %% [markdown]
# ## Part 1: the loss
#
# With `d = input - target` and `z = |d|`, the Huber loss of one element is
# `0.5 * d * d` where `z < delta` (a parabola near zero), and
# `delta * (z - 0.5 * delta)` elsewhere (a straight line, so outliers pull less
# than in a squared error). `reduction` is an integer: `0` keeps the loss per element,
# `1` takes the mean, `2` the sum. Write the decomposition with `torch` functions on
# tensors: they are traced into ATen ops.
#
# Follow eager's formula exactly, comparisons included: a NaN anywhere must give NaN,
# an infinite `d` gives `inf` (not `inf - inf`).


# %%
def huber_loss(input, target, reduction=MEAN, delta=1.0):
    # BEGIN SOLUTION
    d = input - target
    z = d.abs()
    loss = torch.where(z < delta, 0.5 * d * d, delta * (z - 0.5 * delta))
    if reduction == MEAN:
        return loss.mean()
    if reduction == SUM:
        return loss.sum()
    return loss
    # END SOLUTION


# %% [markdown]
# ## Part 2: the gradient
#
# Under `torch.compile`, AOTAutograd traces the backward from the gradient formula
# PyTorch has for `huber_loss`, which is another op,
# `huber_loss_backward(grad_output, input, target, reduction, delta)`. Decomposing the
# forward does not decompose it: it must be decomposed on its own.
#
# The derivative of the loss with respect to `input` is `d` inside the parabola and
# `±delta` outside it, that is `d` clamped to `[-delta, delta]`; times
# `grad_output` (a 0-d tensor after a mean or a sum, a tensor of the input's shape
# with no reduction), and divided by the number of elements for a mean.


# %%
def huber_loss_backward(grad_output, input, target, reduction, delta):
    # BEGIN SOLUTION
    d = input - target
    grad = torch.clamp(d, -delta, delta) * grad_output
    if reduction == MEAN:
        return grad / input.numel()
    return grad
    # END SOLUTION


# %% [markdown]
# ## Checks
#
# The checks register both decompositions, compile, and compare with eager on odd
# shapes, a transposed input, the three reductions, several `delta`s and the values
# that break careless formulas. They also pin the structure: no fallback, and one
# kernel per graph.


# %%
@contextlib.contextmanager
def both_registered():
    with registered(aten.huber_loss.default, huber_loss):
        with registered(aten.huber_loss_backward.default, huber_loss_backward):
            yield


def test_decomposition_traces_to_primitives():
    x, t = torch.randn(3, 4), torch.randn(3, 4)
    gm = make_fx(huber_loss)(x, t, MEAN, 0.5)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert "aten.huber_loss.default" not in targets, (
        f"ops traced: got {sorted(targets)}, expected no aten.huber_loss.default"
    )
    torch.testing.assert_close(gm(x, t), F.huber_loss(x, t, delta=0.5))


def test_loss_is_one_fused_reduction():
    x, t = torch.randn(13, 7), torch.randn(13, 7)
    with both_registered():
        out, (graph,) = compile_graphs(loss_fn, x, t)
    torch.testing.assert_close(out, loss_fn(x, t))
    expect(graph.fallbacks, [], "fallbacks")
    expect(len(graph.kernel_names), 1, f"number of kernels ({graph.kernel_names})")
    # 2 * x fused into the reduction
    assert "mul" in graph.kernel_names[0], (
        f"kernel name: got {graph.kernel_names[0]!r}, expected one with 'mul'"
    )


def test_reductions_deltas_and_strides():
    def fn(x, t, reduction, delta):
        return F.huber_loss(x, t, reduction=reduction, delta=delta)

    x = torch.randn(9, 11).t()  # (11, 9), not contiguous
    t = torch.randn(11, 9) * 3
    with both_registered():
        for reduction in ("none", "sum", "mean"):
            for delta in (0.25, 1.0, 3.0):
                out, (graph,) = compile_graphs(fn, x, t, reduction, delta)
                case = f"reduction={reduction!r}, delta={delta}"
                torch.testing.assert_close(
                    out, fn(x, t, reduction, delta), msg=lambda m: f"{case}: {m}"
                )
                expect(graph.fallbacks, [], f"fallbacks with {case}")


def test_awkward_values():
    values = [0.0, -0.0, 0.5, -0.5, 0.49, 2.0, -7.0, 1e30, float("inf"), float("nan")]
    x = torch.tensor(values).view(-1, 1).expand(10, 10)  # every pair: (10, 10)
    t = torch.tensor(values).view(1, -1).expand(10, 10)

    def fn(x, t):
        return F.huber_loss(x, t, reduction="none", delta=0.5)

    with both_registered():
        out, (graph,) = compile_graphs(fn, x, t)
    torch.testing.assert_close(out, fn(x, t), equal_nan=True)
    expect(graph.fallbacks, [], "fallbacks")


def test_gradient_without_fallback():
    def fn(x, t, w):
        return F.huber_loss(x * w, t, delta=0.7)

    x = torch.randn(6, 1, requires_grad=True)
    w = torch.randn(6, 5, requires_grad=True)  # x is broadcast: its grad sums rows
    t = torch.randn(6, 5)
    x2, w2 = (v.detach().clone().requires_grad_() for v in (x, w))
    with both_registered():
        out, graphs = compile_graphs(fn, x, t, w, backward=True)
    want = fn(x2, t, w2)
    want.backward()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)
    expect(len(graphs), 2, "graphs compiled (forward and backward)")
    expect([g.fallbacks for g in graphs], [[], []], "fallbacks (forward, backward)")


def test_gradient_with_no_reduction():
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    t = torch.randn(4, 9, dtype=torch.float64) * 2

    def fn(x):
        return F.huber_loss(x, t, reduction="none", delta=1.5)

    with both_registered():
        out, graphs = compile_graphs(fn, x, backward=True)
    expect([g.fallbacks for g in graphs], [[], []], "fallbacks (forward, backward)")
    expected = torch.func.grad(lambda x: fn(x).sum())(x.detach())
    torch.testing.assert_close(x.grad, expected)


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The decomposition, traced with
# `make_fx`, has no `huber_loss` left and gives eager's value:

# %%
test_decomposition_traces_to_primitives()

# %% [markdown]
# Compiled, the loss of `2 * x` is one kernel, the `mul` fused into the reduction:

# %%
test_loss_is_one_fused_reduction()

# %% [markdown]
# The three reductions and three `delta`s on a transposed input:

# %%
test_reductions_deltas_and_strides()

# %% [markdown]
# Every pair of awkward values (±0, ±delta, 1e30, inf, NaN):

# %%
test_awkward_values()

# %% [markdown]
# The gradient, through a broadcast, with neither graph falling back:

# %%
test_gradient_without_fallback()

# %% [markdown]
# The gradient with no reduction, in float64:

# %%
test_gradient_with_no_reduction()

# %% [markdown]
# ## What to try next
#
# 1. Register only the forward decomposition and train: which graph still falls
#    back, and how many kernels does each graph have?
# 2. Decompose `aten.smooth_l1_loss` (with `beta`) and `aten.mse_loss` the same way.
#    `smooth_l1_loss` is the Huber loss divided by `beta`: can one decomposition
#    serve both, and what must happen when `beta` is 0?
# 3. Write `huber_loss` with `torch.clamp`: `0.5 * c * c + delta * (z - c)` with
#    `c = clamp(z, max=delta)`. Is it equal to eager's formula for every input
#    above? Which values differ in float16?
