"""Normalizations end to end: softmax/log_softmax backward, layer_norm forward and
backward, logsumexp, compiled with minductor and compared with eager.

Backward graphs are not compiled yet, so the backward ops are called directly
inside a compiled forward function.
"""

import itertools

import pytest
import torch
from helpers import DEVICES, INTERPRET, randn, run

import minductor  # noqa: F401  (registers the backend)

pytestmark = [pytest.mark.e2e, pytest.mark.ch10]

aten = torch.ops.aten
F = torch.nn.functional
inf, nan = float("inf"), float("nan")
HALF = [torch.float16, torch.bfloat16]



def tolerance(dtype):
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-4)


# --- softmax and log_softmax backward -------------------------------------------------

SOFTMAX_SHAPES = [(5, 1), (3, 7), (9, 33), (3, 1000), (1, 33), (3, 5, 7)]


def _softmax_backward(kind):
    op = {
        "softmax": aten._softmax_backward_data,
        "log_softmax": aten._log_softmax_backward_data,
    }[kind]
    return op


def _forward(kind, x, dim):
    return torch.softmax(x, dim) if kind == "softmax" else torch.log_softmax(x, dim)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
def test_softmax_backward_matches_eager(device, kind, dim, shape):
    torch.manual_seed(0)
    y = _forward(kind, randn(*shape, device=device), dim)
    g = randn(*shape, device=device)
    op = _softmax_backward(kind)
    _, fallbacks = run(lambda g, y: op(g, y, dim, torch.float32), g, y)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_softmax_backward_in_half_precision(device, kind, dtype):
    torch.manual_seed(0)
    y = _forward(kind, randn(7, 100, device=device), -1).to(dtype)
    g = randn(7, 100, device=device, dtype=dtype)
    op = _softmax_backward(kind)
    tol = tolerance(dtype)
    run(lambda g, y: op(g, y, -1, dtype), g, y, atol=tol, rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
def test_softmax_backward_returns_the_input_dtype(device, kind):
    # softmax(x_half, dtype=float32): the gradient arrives in float32 and leaves as
    # float16 (eager's CPU kernel refuses this mix, so the reference is computed in
    # float32 and rounded)
    torch.manual_seed(0)
    y = _forward(kind, randn(5, 33, device=device), -1)
    g = randn(5, 33, device=device)
    op = _softmax_backward(kind)
    expected = op(g, y, -1, torch.float32).half()
    run(
        lambda g, y: op(g, y, -1, torch.float16),
        g,
        y,
        atol=1e-3,
        rtol=1e-3,
        expected=expected,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
def test_softmax_backward_over_the_last_dim_is_one_kernel(device, kind):
    # a persistent reduction (the row's sum) with its pointwise finish fused in
    y = _forward(kind, randn(33, 65, device=device), -1)
    op = _softmax_backward(kind)
    kernels, fallbacks = run(
        lambda g, y: op(g, y, -1, torch.float32), randn(33, 65, device=device), y
    )
    assert (
        fallbacks == [] and len(kernels) == 1 and kernels[0].startswith("triton_per_")
    )


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_backward_over_dim_0_is_two_kernels(device):
    # not the innermost dim: the finish cannot be cut into the reduction's rows
    # (as for softmax itself over dim 0, test_ch18_reductions_values.py)
    y = torch.softmax(randn(33, 65, device=device), 0)
    kernels, _ = run(
        lambda g, y: aten._softmax_backward_data(g, y, 0, torch.float32),
        randn(33, 65, device=device),
        y,
    )
    assert [k.split("_")[1] for k in kernels] == ["per", "poi"]


# --- layer_norm forward ---------------------------------------------------------------

# (input shape, normalized_shape)
LAYER_NORM_SHAPES = [
    ((5, 1), (1,)),
    ((3, 7), (7,)),
    ((9, 33), (33,)),
    ((3, 1000), (1000,)),
    ((3, 5, 7), (7,)),
    ((3, 5, 7), (5, 7)),
    ((33,), (33,)),
]
AFFINE = ["weight_and_bias", "weight", "bias", "none"]


def _params(affine, normalized_shape, device, dtype=torch.float32):
    weight = randn(*normalized_shape, device=device, dtype=dtype)
    bias = randn(*normalized_shape, device=device, dtype=dtype)
    return (
        weight if "weight" in affine else None,
        bias if affine.endswith("bias") else None,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("shape,normalized", LAYER_NORM_SHAPES, ids=str)
def test_layer_norm_matches_eager(device, affine, shape, normalized):
    torch.manual_seed(0)
    x = randn(*shape, device=device) * 3 + 1
    weight, bias = _params(affine, normalized, device)
    _, fallbacks = run(
        lambda x, w, b: aten.native_layer_norm(x, normalized, w, b, 1e-5),
        x,
        weight,
        bias,
    )
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("param_dtype", ["same", "float32"])
def test_layer_norm_in_half_precision(device, dtype, param_dtype):
    # statistics: float32 on CUDA; on CPU the input's dtype, or float32 when the
    # parameters are float32 (eager's "mixed" kernel)
    if device == "cuda" and param_dtype == "float32":
        # eager's CUDA kernel raises "expected scalar type Half but found Float"
        # (H200, torch 2.11): there is no eager answer to compare with
        pytest.skip("eager's CUDA layer_norm refuses half input with float32 weight")
    torch.manual_seed(0)
    x = randn(7, 100, device=device, dtype=dtype) * 3 + 1
    pdtype = dtype if param_dtype == "same" else torch.float32
    weight, bias = _params("weight_and_bias", (100,), device, pdtype)
    tol = tolerance(dtype)
    run(
        lambda x, w, b: aten.native_layer_norm(x, [100], w, b, 1e-5),
        x,
        weight,
        bias,
        atol=tol,
        rtol=tol,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_of_a_constant_row_is_bias(device):
    # variance 0: rstd is 1/sqrt(eps), and x - mean is exactly 0
    x = torch.full((4, 9), 3.5, device=device)
    weight, bias = _params("weight_and_bias", (9,), device)
    run(lambda x, w, b: F.layer_norm(x, [9], w, b), x, weight, bias)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_is_one_kernel(device):
    # var_mean (a Welford reduction) and the pointwise finish, in one persistent kernel
    x = randn(33, 65, device=device)
    weight, bias = _params("weight_and_bias", (65,), device)
    kernels, fallbacks = run(
        lambda x, w, b: F.layer_norm(x, [65], w, b), x, weight, bias
    )
    assert fallbacks == [] and len(kernels) == 1
    # with the statistics as outputs too: rstd, a pointwise of the reduced shape
    # (33, 1), is an epilogue of the same kernel
    kernels, fallbacks = run(
        lambda x, w, b: aten.native_layer_norm(x, [65], w, b, 1e-5), x, weight, bias
    )
    assert (
        fallbacks == [] and len(kernels) == 1 and kernels[0].startswith("triton_per_")
    )


# --- layer_norm backward --------------------------------------------------------------

MASKS = [m for m in itertools.product([True, False], repeat=3) if any(m)]


def _layer_norm_backward(normalized, mask):
    def fn(grad_out, x, mean, rstd, weight, bias):
        return aten.native_layer_norm_backward(
            grad_out, x, normalized, mean, rstd, weight, bias, mask
        )

    return fn


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_layer_norm_backward_honours_output_mask(device, mask):
    torch.manual_seed(0)
    x, grad_out = randn(9, 33, device=device), randn(9, 33, device=device)
    weight, bias = _params("weight_and_bias", (33,), device)
    _, mean, rstd = aten.native_layer_norm(x, [33], weight, bias, 1e-5)
    _, fallbacks = run(
        _layer_norm_backward([33], list(mask)), grad_out, x, mean, rstd, weight, bias
    )
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("shape,normalized", LAYER_NORM_SHAPES, ids=str)
def test_layer_norm_backward_matches_eager(device, affine, shape, normalized):
    torch.manual_seed(0)
    x = randn(*shape, device=device) * 3 + 1
    grad_out = randn(*shape, device=device)
    weight, bias = _params(affine, normalized, device)
    _, mean, rstd = aten.native_layer_norm(x, normalized, weight, bias, 1e-5)
    # eager refuses a gradient for a missing parameter: autograd never asks for one
    mask = [True, weight is not None, bias is not None]
    _, fallbacks = run(
        _layer_norm_backward(list(normalized), mask),
        grad_out,
        x,
        mean,
        rstd,
        weight,
        bias,
        atol=1e-3,
        rtol=1e-3,
    )
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_layer_norm_backward_in_half_precision(device, dtype):
    torch.manual_seed(0)
    x = randn(7, 100, device=device, dtype=dtype)
    grad_out = randn(7, 100, device=device, dtype=dtype)
    weight, bias = _params("weight_and_bias", (100,), device, dtype)
    _, mean, rstd = aten.native_layer_norm(x, [100], weight, bias, 1e-5)
    tol = 4 * tolerance(dtype)  # the parameters' gradients sum 7 rounded terms
    run(
        _layer_norm_backward([100], [True, True, True]),
        grad_out,
        x,
        mean,
        rstd,
        weight,
        bias,
        atol=tol,
        rtol=tol,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_backward_kernels(device):
    # the input's gradient: both row sums and the finish in one persistent kernel;
    # the parameters' gradients: column sums over the rows, a second kernel
    x, grad_out = randn(33, 65, device=device), randn(33, 65, device=device)
    weight, bias = _params("weight_and_bias", (65,), device)
    _, mean, rstd = aten.native_layer_norm(x, [65], weight, bias, 1e-5)
    args = grad_out, x, mean, rstd, weight, bias
    kernels, fallbacks = run(_layer_norm_backward([65], [True, True, True]), *args)
    assert fallbacks == [] and [k.split("_")[1] for k in kernels] == ["per", "per"]
    kernels, _ = run(_layer_norm_backward([65], [True, False, False]), *args)
    assert len(kernels) == 1


# --- logsumexp ------------------------------------------------------------------------

ROWS_WITH_INFINITIES = [
    [-inf, -inf, -inf],  # -inf
    [1.0, inf, 2.0],  # inf
    [nan, 1.0, 2.0],  # nan
    [inf, -inf, 1.0],  # inf
    [inf, nan, 1.0],  # nan
    [-inf, 1.0, 2.0],
    [100.0, 200.0, 300.0],  # exp would overflow without the shift
    [-200.0, -300.0, -250.0],  # and underflow to log(0)
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(
    "shape,dim",
    [
        ((5, 1), 1),
        ((3, 7), 1),
        ((9, 33), 1),
        ((3, 1000), 1),
        ((9, 33), 0),
        ((3, 5, 7), (0, 2)),
        ((3, 5, 7), (1, 2)),
        ((1, 33), 1),
    ],
    ids=str,
)
def test_logsumexp_matches_eager(device, keepdim, shape, dim):
    torch.manual_seed(0)
    x = randn(*shape, device=device) * 10
    _, fallbacks = run(lambda x: torch.logsumexp(x, dim, keepdim), x)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1])
def test_logsumexp_of_infinities_and_nan(device, dim):
    x = torch.tensor(ROWS_WITH_INFINITIES, device=device)
    if dim == 0:
        x = x.t().contiguous()
    run(lambda x: torch.logsumexp(x, dim), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_logsumexp_in_half_precision(device, dtype):
    torch.manual_seed(0)
    x = randn(7, 100, device=device, dtype=dtype) * 4
    tol = tolerance(dtype)
    run(lambda x: torch.logsumexp(x, -1), x, atol=tol, rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool], ids=str)
def test_logsumexp_of_integers_is_float(device, dtype):
    x = torch.randint(-5, 5, (3, 7), device=device).to(dtype)
    _, fallbacks = run(lambda x: torch.logsumexp(x, 1), x)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_over_nothing_is_minus_infinity(device):
    run(lambda x: torch.logsumexp(x, 1), torch.randn(3, 0, device=device))


@pytest.mark.skipif(not INTERPRET, reason="CPU graphs compile only under the interpreter")
def test_logsumexp_of_complex_is_left_to_aten():
    # the decomposition declines (NotImplemented), so the op reaches the lowering
    # whole and falls back
    x = torch.randn(3, 7, dtype=torch.complex64)
    kernels, fallbacks = run(lambda x: torch.logsumexp(x, 1), x)
    assert kernels == [] and fallbacks == ["aten.logsumexp.default"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp_kernels(device, keepdim):
    # both maxima (with and without keepdim), the sum, and the finish
    # log(sum) + max (an epilogue of the reduced shape) in one persistent kernel
    x = randn(33, 65, device=device)
    kernels, fallbacks = run(lambda x: torch.logsumexp(x, 1, keepdim), x)
    assert fallbacks == [] and [k.split("_")[1] for k in kernels] == ["per"]


# --- training through them ------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_training_through_the_normalizations(device):
    # the backward graph holds the decomposed backward ops
    def loss(x, w, b):
        y = F.layer_norm(x, [33], w, b).sin() + 2 * torch.softmax(x, -1)
        return (y + torch.log_softmax(x, 0)).sum() + torch.logsumexp(x, 1).sum()

    torch.manual_seed(0)
    args = [
        randn(7, 33, device=device).requires_grad_(),
        randn(33, device=device).requires_grad_(),
        randn(33, device=device).requires_grad_(),
    ]
    torch._dynamo.reset()
    torch.compile(loss, backend="minductor")(*args).backward()
    got = [a.grad for a in args]
    for a in args:
        a.grad = None
    loss(*args).backward()
    for g, a in zip(got, args):
        torch.testing.assert_close(g, a.grad, rtol=1e-4, atol=1e-4)


# --- batch norm at inference: pointwise, fused after the convolution -----------------


def _eval_batch_norm(module):
    torch.manual_seed(0)
    module.running_mean.normal_()
    module.running_var.uniform_(0.5, 2.0)
    if module.affine:
        module.weight.data.normal_()
        module.bias.data.normal_()
    return module.eval()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_conv_batch_norm_relu_residual_is_one_kernel_after_the_conv(
    device, dtype, layout
):
    conv = torch.nn.Conv2d(6, 6, 3, padding=1, bias=False)
    bn = _eval_batch_norm(torch.nn.BatchNorm2d(6))
    conv, bn = conv.to(device, dtype), bn.to(device, dtype)
    x = randn(2, 6, 5, 7, device=device, dtype=dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)

    def block(x):
        return torch.relu(bn(conv(x)) + x)

    tol = tolerance(dtype)
    with torch.no_grad():
        kernels, fallbacks = run(block, x, atol=tol, rtol=tol)
    assert fallbacks == [] and len(kernels) == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "module, shape",
    [
        (torch.nn.BatchNorm1d(5), (4, 5)),
        (torch.nn.BatchNorm1d(5, affine=False), (4, 5, 3)),
        (torch.nn.BatchNorm3d(3), (2, 3, 2, 3, 1)),
    ],
    ids=["1d", "1d-no-affine-with-length", "3d"],
)
def test_eval_batch_norm_matches_eager_without_fallback(device, module, shape):
    bn = _eval_batch_norm(module).to(device)
    x = randn(*shape, device=device)
    with torch.no_grad():
        kernels, fallbacks = run(bn, x)
    assert fallbacks == [] and len(kernels) == 1
