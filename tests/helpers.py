"""What the test files share: the devices to run on, a compile-and-compare helper that
returns the kernels and fallbacks a function became, and (for chapters 6 and 7) a
lowering of a traced function whose IR is evaluated element by element, without Triton.
"""

import itertools
import os

import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (registers the backend)
from minductor.capture import record_compiled
from minductor.ir import (
    ComputedBuffer,
    FallbackKernel,
    FixedLayout,
    InputBuffer,
    MultiOutput,
    MultiOutputLayout,
    Pointwise,
    ReinterpretBuffer,
    TensorBox,
)
from minductor.lowering import GraphLowering
from minductor.ops import EvalHandler, set_handler

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


def lower(fn, *args):
    gm = make_fx(fn)(*args)
    return GraphLowering(gm, list(args)).lower()


def evaluate(graph, inputs):
    """Run a lowered graph: bodies with the EvalHandler, fallbacks with ATen."""
    env = dict(zip(graph.graph_input_names, inputs))
    tuples = {}  # results of multi-output fallbacks

    def sub(a):
        if isinstance(a, (InputBuffer, ComputedBuffer, FallbackKernel, MultiOutput)):
            return env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(sub(x) for x in a)
        return a

    for buf in graph.buffers:
        if isinstance(buf, ComputedBuffer):
            lay = buf.layout
            size = [int(s) for s in lay.size]
            env[buf.name] = out = torch.empty_strided(
                size, [int(s) for s in lay.stride], dtype=lay.dtype
            )
            with set_handler(EvalHandler(env)):
                for idx in itertools.product(*map(range, size)):
                    buf.store_output([sympy.Integer(i) for i in idx])
            assert out is env[buf.name]
        elif isinstance(buf, MultiOutput):
            env[buf.name] = tuples[buf.parent.name][buf.index]
        elif isinstance(buf, ReinterpretBuffer):
            base, lay = env[buf.base.name], buf.layout
            offset = base.storage_offset() + int(lay.offset)
            size, stride = [int(s) for s in lay.size], [int(s) for s in lay.stride]
            env[buf.name] = base.as_strided(size, stride, offset)
        elif isinstance(buf.layout, MultiOutputLayout):
            tuples[buf.name] = buf.op(*sub(buf.args), **sub(buf.kwargs))
        else:
            env[buf.name] = buf.op(*sub(buf.args), **sub(buf.kwargs))
    return [None if b is None else env[b.name] for b in graph.graph_outputs]


def assert_same(got, expected, tol=0.0):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype == torch.bool or not expected.is_floating_point():
        assert torch.equal(got, expected), (got, expected)
    else:
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol, equal_nan=True)


def check(fn, *args, tol=1e-6):
    """Lower fn (which returns a tuple), evaluate its IR, compare with eager."""
    graph = lower(fn, *args)
    for got, expected in zip(evaluate(graph, args), fn(*args), strict=True):
        assert_same(got, expected, tol)
    return graph


def log_messages(caplog) -> list[str]:
    """Every message pytest's caplog caught."""
    return [r.getMessage() for r in caplog.records]


def said(caplog, text: str) -> int:
    """How many caught messages contain text."""
    return sum(text in m for m in log_messages(caplog))


FORCED = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}
TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def compile_and_compare(fn, *args, options=FORCED, tol=1e-4):
    """fn compiled with the options (the matmul template forced), against eager;
    (kernel names, sources)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor", options=options)(*args)
    expected = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    exps = expected if isinstance(expected, tuple) else (expected,)
    for o, e in zip(outs, exps, strict=True):
        assert (o.dtype, o.shape, o.stride()) == (e.dtype, e.shape, e.stride())
        torch.testing.assert_close(o, e, atol=tol, rtol=tol)
    kernels = [k for g in graphs for k in g.kernel_names]
    assert [f for g in graphs for f in g.fallbacks] == []
    return kernels, [g.source for g in graphs]


# --- generated Triton kernels, loaded and launched directly (chapters 16 and 17) ---

from minductor.codegen_triton import generate_kernel  # noqa: E402
from minductor.ops import MATH_OPS, ops  # noqa: E402
from minductor.runtime import launch, load_module  # noqa: E402
from minductor.scheduler import Scheduler  # noqa: E402

HEADER = (
    "import triton\nimport triton.language as tl\n"
    "from triton.language.extra import libdevice\n"
    "from minductor import triton_helpers as helpers\n\n"
)
KERNEL_DEVICE = "cpu" if INTERPRET else "cuda"  # the interpreter runs CPU tensors


def kernels_for(fn, *args):
    scheduler = Scheduler(GraphLowering(make_fx(fn)(*args), list(args)).lower())
    return scheduler, [
        generate_kernel(n, scheduler.removed_buffers, interpret=True)
        for n in scheduler.nodes
        if not n.is_extern()
    ]


def body_lines(kernel):
    return [line.strip() for line in kernel.source.splitlines()[2:]]


def run_kernel(kernel, env):
    """Load and launch a generated kernel on the tensors of env (outputs updated)."""
    module = load_module(HEADER + kernel.source.replace("KERNEL_NAME", "kernel") + "\n")
    moved = {name: t.to(KERNEL_DEVICE) for name, t in env.items()}
    args = [moved[n] for n in kernel.call_args]
    launch(module.kernel, kernel.numel, *args, **dict(kernel.meta))
    for name, t in env.items():
        t.copy_(moved[name])


def one_op_buffer(name, inputs, out_dtype):
    """buf0: the math op `name` of the inputs, elementwise, as a computed buffer."""
    arity, _ = MATH_OPS[name]
    boxes = [
        TensorBox(InputBuffer(n, FixedLayout.from_tensor(t)))
        for n, t in zip("ab", inputs)
    ]
    loaders = [b.make_loader() for b in boxes]
    size = boxes[0].get_size()

    def body(index):
        return getattr(ops, name)(*[load(index) for load in loaders[:arity]])

    cpu = torch.device("cpu")
    layout = FixedLayout.contiguous(cpu, out_dtype, size)
    return ComputedBuffer("buf0", layout, Pointwise(cpu, out_dtype, body, size))
