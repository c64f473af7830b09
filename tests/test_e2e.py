"""End to end: torch.compile(fn, backend="minductor") against eager, on awkward inputs.

Every case runs on CPU tensors (Triton's interpreter) and, marked `cuda`, on a GPU.
Structure is pinned too: kernel counts, kernel names, which ops fell back.
"""

import logging
import os

import pytest
import torch
import torch.nn.functional as F

import minductor  # noqa: F401  (registers the backend)
from minductor.capture import record_compiled
from minductor.wrapper import codegen_op

pytestmark = pytest.mark.e2e

# On a machine with a GPU, Triton targets the GPU and CPU graphs run eagerly (logged);
# kernels for CPU tensors exist only in interpreter mode.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = [
    pytest.param(
        "cpu",
        id="cpu",
        marks=pytest.mark.skipif(not INTERPRET, reason="CPU kernels need the interpreter"),
    ),
    pytest.param("cuda", id="cuda", marks=pytest.mark.cuda),
]


def compile_and_run(fn, *args):
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    return out, graphs


def assert_matches(fn, *args, atol=1e-5, rtol=1e-5):
    out, graphs = compile_and_run(fn, *args)
    expected = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    exps = expected if isinstance(expected, tuple) else (expected,)
    assert len(outs) == len(exps)
    for o, e in zip(outs, exps):
        assert o.dtype == e.dtype and o.shape == e.shape and o.device == e.device
        torch.testing.assert_close(o, e, atol=atol, rtol=rtol, equal_nan=True)
    return graphs


def kernels(graphs):
    return [name for g in graphs for name in g.kernel_names]


def fallbacks(graphs):
    return [op for g in graphs for op in g.fallbacks]


def rand(*shape, device, dtype=torch.float32):
    return torch.randn(*shape, device=device).to(dtype)


# name -> (function, input factory, tolerance). Inputs are made per device.
CASES = {
    "add_mul_33x65": (lambda a, b, c: a * b + c, lambda d: [rand(33, 65, device=d)] * 3),
    "size_1": (lambda a: a.exp() + 1, lambda d: [rand(1, device=d)]),
    "size_7": (lambda a: a.sin() * 2, lambda d: [rand(7, device=d)]),
    "broadcast_1x65_33x1": (
        lambda a, b: a * b + a,
        lambda d: [rand(1, 65, device=d), rand(33, 1, device=d)],
    ),
    "zero_dim_with_vector": (
        lambda a, b: a * b - 1,
        lambda d: [torch.tensor(3.0, device=d), rand(5, device=d)],
    ),
    "zero_dim_only": (lambda a: a * 2 + 1, lambda d: [torch.tensor(3.0, device=d)]),
    "zero_elements": (lambda a: a * 2 + 1, lambda d: [rand(0, 5, device=d)]),
    "int_output": (
        lambda a, b: a * b + 3,
        lambda d: [
            torch.randint(-5, 5, (7, 9), device=d),
            torch.randint(-5, 5, (9,), device=d),
        ],
    ),
    "bool_output": (
        lambda a, b: (a > b) | (a < 0),
        lambda d: [rand(7, 9, device=d), rand(9, device=d)],
    ),
    "int_true_divide": (
        lambda a, b: a / b,
        lambda d: [torch.randint(1, 9, (17,), device=d), torch.randint(1, 9, (17,), device=d)],
    ),
    "floor_divide_and_remainder_int": (
        lambda a, b: (a // b, a % b, torch.div(a, b, rounding_mode="trunc")),
        lambda d: [
            torch.arange(-8, 9, device=d),
            torch.tensor([3, -3, 2, -2, 5] * 3 + [7, -7], device=d),
        ],
    ),
    "floor_divide_and_remainder_float": (
        lambda a, b: (a // b, torch.remainder(a, b)),
        lambda d: [rand(17, device=d) * 5, rand(17, device=d) + 3],
    ),
    "transcendental": (
        lambda a: a.abs().sqrt().log() + a.exp().rsqrt() + a.sin() * a.cos()
        + a.tanh() + a.sigmoid() + torch.erf(a) + F.silu(a) + torch.relu(a),
        lambda d: [rand(33, 65, device=d)],
    ),
    "gelu_residual": (
        lambda x, bias: F.gelu(x + bias) * 0.5 + x,
        lambda d: [rand(33, 65, device=d), rand(65, device=d)],
    ),
    "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), lambda d: [rand(33, 65, device=d)]),
    "activations_decomposed": (
        lambda a: F.hardswish(a) + F.leaky_relu(a) + F.hardtanh(a) + F.softplus(a)
        + F.elu(a) + F.hardsigmoid(a),
        lambda d: [rand(33, 65, device=d) * 4],
    ),
    "pow_variants": (
        lambda a: (a**2, a**3, a**-1, a**0.5, a**2.5, torch.pow(a, a)),
        lambda d: [rand(17, device=d).abs() + 0.1],
    ),
    "pow_edge_cases": (
        torch.pow,
        lambda d: [
            torch.tensor([-2.0, -2.0, -0.0, 0.0, 2.0, 1.0, 0.0], device=d),
            torch.tensor([3.0, 2.5, 2.0, -1.0, 0.5, float("nan"), 0.0], device=d),
        ],
    ),
    "clamp": (
        lambda a: (a.clamp(-0.5, 0.5), a.clamp(min=0), a.clamp(max=0.1)),
        lambda d: [rand(17, device=d)],
    ),
    "clamp_int_by_float": (lambda a: a.clamp(0.5), lambda d: [torch.randint(-3, 3, (9,), device=d)]),
    "where_broadcast": (
        lambda a, b: torch.where(a > 0, a, b),
        lambda d: [rand(7, 9, device=d), rand(9, device=d)],
    ),
    "nan_propagation": (
        lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.relu(a), a.clamp(0, 1)),
        lambda d: [
            torch.tensor([1.0, float("nan"), 2.0, -1.0], device=d),
            torch.tensor([float("nan"), 1.0, 3.0, float("inf")], device=d),
        ],
    ),
    "tanh_log1p_expm1_edges": (
        lambda a: (a.tanh(), torch.log1p(a.abs()), torch.expm1(a)),
        lambda d: [
            torch.tensor(
                [-100.0, -3.0, -1e-6, 0.0, 1e-8, 0.3, 5.0, 80.0, float("nan"), float("-inf")],
                device=d,
            )
        ],
    ),
    "dtype_conversions": (
        lambda a: (a.to(torch.int32), a.to(torch.bool), a.half(), a.to(torch.int64) + 1),
        lambda d: [rand(17, device=d) * 10],
    ),
    "constants_full_ones_like": (
        lambda a: a + torch.full((3, 4), 2.0, device=a.device) + torch.ones_like(a) * 3,
        lambda d: [rand(3, 4, device=d)],
    ),
    "logical_ops": (
        lambda a, b: (torch.logical_and(a, b), torch.logical_not(a), torch.logical_or(a, b)),
        lambda d: [rand(9, device=d), torch.randint(0, 2, (9,), device=d)],
    ),
    "addcmul_lerp": (
        lambda a, b, c: torch.addcmul(a, b, c, value=0.3) + torch.lerp(a, b, 0.3),
        lambda d: [rand(9, device=d) for _ in range(3)],
    ),
    "transposed_input": (lambda a, b: a + b, lambda d: [rand(9, 7, device=d).t(), rand(7, 9, device=d)]),
    "offset_view_input": (lambda a: a * 2, lambda d: [rand(10, 9, device=d)[3:, 2:]]),
    "sign_isnan": (
        lambda a: (torch.sign(a), torch.isnan(a)),
        lambda d: [torch.tensor([1.0, -2.0, 0.0, float("nan")], device=d)],
    ),
    "return_an_input": (lambda a: (a, a + 1), lambda d: [rand(5, device=d)]),
    "float64": (lambda a: a.exp() * 0.1 + a.tanh(), lambda d: [rand(9, device=d, dtype=torch.float64)]),
    "uint8": (lambda a: a + 3, lambda d: [torch.randint(0, 200, (9,), device=d, dtype=torch.uint8)]),
    "int64_large_constant": (lambda a: a + 2**40, lambda d: [torch.randint(0, 5, (5,), device=d)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_eager(case, device):
    fn, make_inputs = CASES[case]
    torch.manual_seed(0)
    graphs = assert_matches(fn, *make_inputs(device))
    assert fallbacks(graphs) == [], f"{case} should need no fallback"
    assert len(kernels(graphs)) >= 1 or case == "return_an_input"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype,tol", [(torch.float16, 1e-2), (torch.bfloat16, 2e-2)], ids=["fp16", "bf16"]
)
def test_half_inputs_compute_in_float32(device, dtype, tol):
    x, bias = rand(33, 65, device=device, dtype=dtype), rand(65, device=device, dtype=dtype)
    graphs = assert_matches(lambda x, b: F.gelu(x + b) * 0.5 + x, x, bias, atol=tol, rtol=tol)
    source = graphs[0].source
    assert ".to(tl.float32)" in source  # loads are converted up...
    down = ".to(tl.float16)" if dtype == torch.float16 else ".to(tl.bfloat16)"
    if dtype == torch.bfloat16 and device == "cpu":  # the interpreter rounds it itself
        down = "helpers.to_bfloat16("
    assert down in source  # ...and the result down


@pytest.mark.parametrize("device", DEVICES)
def test_add_mul_is_one_kernel_named_after_its_ops(device):
    a, b, c = (rand(33, 65, device=device) for _ in range(3))
    graphs = assert_matches(lambda a, b, c: a * b + c, a, b, c)
    assert kernels(graphs) == ["triton_poi_fused_add_mul_0"]
    assert "tl.load(in_ptr0 + (x0), xmask)" in graphs[0].source


@pytest.mark.parametrize("device", DEVICES)
def test_multi_output_pointwise_fuses_into_one_kernel(device):
    x = rand(33, 65, device=device)
    graphs = assert_matches(lambda a: (a + 1, a * 2, (a + 1) * (a * 2)), x)
    assert len(kernels(graphs)) == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("cumsum_falls_back")
def test_fallback_in_the_middle_splits_kernels(device, caplog):
    x = rand(7, 9, device=device)
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        graphs = assert_matches(lambda a: torch.cumsum(a.sin(), 0).cos() + 1, x)
    assert fallbacks(graphs) == ["aten.cumsum.default"]
    assert kernels(graphs) == ["triton_poi_fused_sin_0", "triton_poi_fused_add_cos_1"]
    assert any("fallback: aten.cumsum.default" in r.getMessage() for r in caplog.records)
    # torch.cumsum where torch binds it unambiguously, else aten.cumsum.default
    assert f"{codegen_op(torch.ops.aten.cumsum.default)}(buf0, 0)" in graphs[0].source


@pytest.mark.parametrize("device", DEVICES)
def test_unsupported_dtype_falls_back_and_is_correct(device):
    x = torch.randn(5, dtype=torch.complex64, device=device)
    graphs = assert_matches(lambda a: (a * 2).abs(), x)
    assert kernels(graphs) == [] and len(fallbacks(graphs)) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_deep_chain_is_realized_not_exploded(device):
    def deep(a):
        for _ in range(20):
            a = a * a * 0.5 + 0.1
        return a

    graphs = assert_matches(deep, rand(9, device=device) * 0.1)
    assert 1 <= len(kernels(graphs)) <= 20


@pytest.mark.parametrize("device", DEVICES)
def test_training_forward_and_backward_compiled(device):
    x = rand(7, 9, device=device).requires_grad_()
    bias = rand(9, device=device).requires_grad_()

    def f(x, b):
        return (F.gelu(x + b) * x).sum()

    torch._dynamo.reset()
    with record_compiled() as graphs:
        loss = torch.compile(f, backend="minductor")(x, bias)
        loss.backward()
    grads = (x.grad.clone(), bias.grad.clone())
    x.grad = bias.grad = None
    f(x, bias).backward()
    torch.testing.assert_close(grads[0], x.grad)
    torch.testing.assert_close(grads[1], bias.grad)
    assert len(graphs) == 2  # the forward and the backward
    assert graphs[1].fallbacks == []


@pytest.mark.cuda
def test_cuda_kernels_use_libdevice_not_interpreter_helpers():
    x = torch.randn(1000, device="cuda")
    graphs = assert_matches(lambda a: a.tanh() + torch.sigmoid(a), x)
    assert "libdevice.tanh" in graphs[0].source and "tl.sigmoid" in graphs[0].source
