"""What the end-to-end test files share: the devices to run on, and a compile-and-compare
helper that returns the kernels and fallbacks a function became."""

import os

import pytest
import torch

import minductor  # noqa: F401  (registers the backend)
from minductor.capture import record_compiled

# On a machine with a GPU, Triton targets the GPU and CPU graphs run eagerly (logged);
# kernels for CPU tensors exist only in interpreter mode.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = [
    pytest.param(
        "cpu",
        id="cpu",
        marks=pytest.mark.skipif(
            not INTERPRET, reason="CPU kernels need the interpreter"
        ),
    ),
    pytest.param("cuda", id="cuda", marks=pytest.mark.cuda),
]


def run(fn, *args, atol=1e-4, rtol=1e-4, expected=None):
    """Compile fn with minductor, compare with eager; return (kernels, fallbacks)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    expected = fn(*args) if expected is None else expected
    outs = out if isinstance(out, tuple) else (out,)
    exps = expected if isinstance(expected, tuple) else (expected,)
    for o, e in zip(outs, exps, strict=True):
        if e is None:
            assert o is None
            continue
        assert (o.dtype, o.shape) == (e.dtype, e.shape)
        torch.testing.assert_close(o, e, atol=atol, rtol=rtol, equal_nan=True)
    kernels = [k for g in graphs for k in g.kernel_names]
    fallbacks = [f for g in graphs for f in g.fallbacks]
    return kernels, fallbacks


def randn(*shape, device, dtype=torch.float32):
    return torch.randn(*shape, device=device).to(dtype)


def train_steps(model, x, steps, compile_it):
    """Runs `steps` training steps; returns the last output, the gradients, the buffers
    and the compiled graphs."""
    fn = torch.compile(model, backend="minductor") if compile_it else model
    torch._dynamo.reset()
    with record_compiled() as graphs:
        for _ in range(steps):
            for p in model.parameters():
                p.grad = None
            xs = x.detach().requires_grad_()
            out = fn(xs)
            loss = 0
            for o in out if isinstance(out, tuple) else (out,):  # each output weighed
                weights = torch.linspace(-1, 2, o.numel(), device=o.device)
                loss = loss + (o.float() * weights.view(o.shape)).sum()
            loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()} | {"input": xs.grad}
    return out, grads, dict(model.named_buffers()), graphs
