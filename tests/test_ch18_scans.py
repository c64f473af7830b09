"""Scans (cumsum, cumprod, logcumsumexp): eager's values and dtypes on awkward shapes,
the kernels they become, what falls back, and training through cumsum (chapters 5, 10,
14 and 16)."""

import logging

import pytest
import torch
from helpers import DEVICES, run

import minductor  # noqa: F401  (registers the backend)
from minductor import run_and_get_code
from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch18]

NAN, INF = float("nan"), float("inf")
SCAN_FALLBACKS = {"aten.cumsum.default", "aten.cumprod.default"}


def values(shape, dtype, device):
    if dtype == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, device=device, dtype=dtype)
    return torch.randn(shape, device=device).to(dtype)


# (shape, dim): odd sizes, size-1 and size-0 dims, first/middle/last/negative dims, 0-d
CASES = [
    ((33, 65), 1),
    ((33, 65), 0),
    ((3, 1, 5), 1),
    ((2, 9, 5), -2),
    ((5, 7), -1),
    ((), 0),
    ((4, 0, 3), 2),
    ((4, 0, 3), 1),
    ((1000,), 0),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, dim", CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_cumsum_shapes(device, shape, dim):
    x = values(shape, torch.float32, device)
    kernels, fallbacks = run(lambda a: torch.cumsum(a, dim), x, atol=1e-4, rtol=1e-4)
    assert fallbacks == []
    assert len(kernels) <= 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.int32, torch.int64, torch.bool, torch.float32, torch.float64]
)
def test_cumsum_dtypes(device, dtype):
    x = values((6, 37), dtype, device)
    kernels, fallbacks = run(lambda a: (a.cumsum(1), a.cumsum(0)), x)
    assert fallbacks == []
    assert len(kernels) == 2  # along rows, and along columns (no common loop)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cumsum_half_accumulates_in_float32(device, dtype):
    # a long row of positive values: summed in the half dtype the sum would stall
    # (1024 + 0.25 == 1024 in float16); each partial result is rounded once, on store
    x = (torch.rand(3, 2000, device=device) + 0.5).to(dtype)
    torch._dynamo.reset()
    out = torch.compile(lambda a: a.cumsum(1), backend="minductor")(x)
    exact = x.double().cumsum(1)
    eager_error = (x.cumsum(1).double() - exact).abs().max()
    ours_error = (out.double() - exact).abs().max()
    assert out.dtype == dtype
    ulp = exact.abs().max() * torch.finfo(dtype).eps
    assert ours_error <= eager_error + ulp
    assert ours_error <= 2 * ulp  # not a half-precision accumulation


@pytest.mark.parametrize("device", DEVICES)
def test_dtype_argument_and_noncontiguous(device):
    x = torch.randint(-3, 4, (9, 13), device=device, dtype=torch.int32)
    y = torch.randn(13, 9, device=device)

    def f(a, b):
        return (
            a.cumsum(0, dtype=torch.float16),
            a.t().cumsum(1),  # a transposed view: strided loads
            b.t().cumsum(-1, dtype=torch.float64),
            b[:, ::2].cumprod(1),
        )

    kernels, fallbacks = run(f, x, y, atol=1e-3, rtol=1e-3)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_cumprod(device, dtype):
    if dtype.is_floating_point:
        x = 1 + 0.05 * torch.randn(5, 41, device=device)
        x[2, 7] = 0.0
        x[3, 9] = NAN
    else:
        x = values((5, 41), dtype, device)
        x = x if dtype == torch.bool else x.clamp(-2, 2)  # small: no overflow
    kernels, fallbacks = run(lambda a: a.cumprod(1), x)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_logcumsumexp(device):
    x = torch.randn(4, 19, device=device) * 30
    x[0, :3] = -INF  # a row starting with -inf: stays -inf until a number comes
    x[1, 5] = INF
    x[2, 4] = NAN
    x[3, :] = -INF
    torch._dynamo.reset()
    out, (source,) = run_and_get_code(
        torch.compile(lambda a: torch.logcumsumexp(a, 1), backend="minductor"), x
    )
    torch.testing.assert_close(out, torch.logcumsumexp(x, 1), equal_nan=True)
    assert "tl.associative_scan(" in source and "helpers.logaddexp" in source


@pytest.mark.parametrize("device", DEVICES)
def test_position_ids_one_kernel(device):
    # transformers: position ids from an attention mask (left padding)
    mask = torch.ones(3, 11, dtype=torch.int64, device=device)
    mask[1, :4] = 0
    mask[2, :10] = 0

    def positions(m):
        p = m.long().cumsum(-1) - 1
        return p.masked_fill(m == 0, 1)

    torch._dynamo.reset()
    with record_compiled() as graphs:
        out, (source,) = run_and_get_code(
            torch.compile(positions, backend="minductor"), mask
        )
    assert torch.equal(out, positions(mask))
    assert graphs[0].fallbacks == []
    (name,) = graphs[0].kernel_names  # one kernel: load, scan, subtract, select
    assert name == "triton_per_fused_cumsum_eq_scalar_tensor_sub_where_0"
    assert "tmp3 = tl.cumsum(tmp2, 1)" in source


@pytest.mark.parametrize("device", DEVICES)
def test_bool_cumsum_of_comparison_fuses(device):
    # (position_diff != 1).cumsum(-1): the comparison is inlined into the scan's loads
    ids = torch.tensor([[0, 1, 2, 0, 1, 5, 6]], device=device)

    def f(p):
        return (p[:, 1:] - p[:, :-1] != 1).cumsum(-1)

    kernels, fallbacks = run(f, ids)
    assert fallbacks == [] and len(kernels) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_scan_then_reduction_share_a_kernel(device):
    x = torch.randn(6, 50, device=device)
    kernels, fallbacks = run(lambda a: a.cumsum(1).amax(1), x)
    assert fallbacks == [] and len(kernels) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_long_rows_fall_back(device, caplog):
    x = torch.randn(2, 5000, device=device)
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        kernels, fallbacks = run(lambda a: a.sin().cumsum(1), x, atol=1e-3, rtol=1e-3)
    assert fallbacks == ["aten.cumsum.default"]
    assert any(
        "aten.cumsum.default (cumsum over 5000 elements" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize("device", DEVICES)
def test_cummax_falls_back(device):
    x = torch.randn(4, 9, device=device)
    kernels, fallbacks = run(lambda a: torch.cummax(a, 1), x)
    assert fallbacks == ["aten.cummax.default"]


@pytest.mark.parametrize("device", DEVICES)
def test_backward_through_cumsum(device):
    # the gradient of a running sum is a running sum from the other end: flip, cumsum,
    # flip, and the flips are views, so the backward graph scans too
    x = torch.randn(4, 23, device=device, requires_grad=True)

    def f(a):
        return (a.sin().cumsum(1) ** 2).sum()

    torch._dynamo.reset()
    with record_compiled() as graphs:
        loss = torch.compile(f, backend="minductor")(x)
        (grad,) = torch.autograd.grad(loss, x)
    xe = x.detach().requires_grad_()
    (expected,) = torch.autograd.grad(f(xe), xe)
    torch.testing.assert_close(grad, expected, atol=1e-4, rtol=1e-4)
    forward, backward = graphs
    assert forward.fallbacks == [] and backward.fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_rows_scan_and_a_dynamic_row_length_falls_back(device):
    torch._dynamo.reset()
    fn = torch.compile(lambda a: a.cumsum(-1) * 2, backend="minductor")
    with record_compiled() as graphs:
        for rows in (3, 5):
            x = torch.randn(rows, 7, device=device)
            torch._dynamo.mark_dynamic(x, 0)  # a symbolic number of rows
            torch.testing.assert_close(fn(x), x.cumsum(-1) * 2)
    assert [g.fallbacks for g in graphs] == [[]]
    assert "tl.cumsum(" in graphs[0].source
    torch._dynamo.reset()
    with record_compiled() as graphs:
        x = torch.randn(3, 9, device=device)
        torch._dynamo.mark_dynamic(x, 1)  # a symbolic row length
        torch.testing.assert_close(fn(x), x.cumsum(-1) * 2)
    assert [g.fallbacks for g in graphs] == [["aten.cumsum.default"]]


@pytest.mark.parametrize("device", DEVICES)
def test_square_scans_along_different_dims_stay_apart(device):
    # a (N, N) scan down the columns and one along the rows have the same loop sizes;
    # the second reads the first across rows, so they must not share a kernel
    x = torch.randn(16, 16, device=device)

    def f(a):
        down = a.cumsum(0)
        return down.cumsum(1), down.t() * 2

    kernels, fallbacks = run(f, x)
    assert fallbacks == [] and len(kernels) >= 2


@pytest.mark.parametrize("device", DEVICES)
def test_middle_dim_scan_with_a_consumer_of_coinciding_sizes(device):
    # (2, 3, 3) scanned along dim 1: a consumer over the whole tensor can be cut into
    # (2*3) x 3 like the scan's loops, but its rows are not the scan's rows
    x = torch.randn(2, 3, 3, device=device)
    kernels, fallbacks = run(lambda a: (a.cumsum(1) + a, a.cumprod(1) * a), x)
    assert fallbacks == []
