"""argmax/argmin, max/min with indices, Welford moments, nll_loss: eager's values, and
the kernels they become (chapters 5, 10, 15 and 18)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, INTERPRET, run

import minductor  # noqa: F401  (registers the backend)
from minductor.capture import record_compiled
from minductor.config import config

pytestmark = [pytest.mark.e2e, pytest.mark.ch18]


NAN, INF = float("nan"), float("inf")
# CPU tensors compile to kernels only under the interpreter; elsewhere they run eagerly
interpreted = pytest.mark.skipif(
    not INTERPRET, reason="CPU kernels need the interpreter"
)


def awkward_rows(device):
    # NaN, a row of -inf, ties (first index wins), a size that fits no block
    x = torch.randn(33, 65)
    x[3, 5] = x[3, 9] = NAN
    x[4, :] = -INF
    x[5, 7] = x[5, 9] = 10.0
    x[6, 2] = x[6, 60] = -10.0
    return x.to(device)


def looped_rows(device):
    y = torch.randn(3, 5000)
    y[1, 4000] = NAN
    y[2, :] = 1.0  # all tied: index 0
    y[0, 4999] = y[0, 2] = 9.0  # tie across chunks
    return y.to(device)


CASES = {
    # name: (fn, inputs, expected kernel names)
    "argmax_rows": (lambda x: x.argmax(1), awkward_rows, ["triton_per_fused_argmax_0"]),
    "argmin_rows": (lambda x: x.argmin(1), awkward_rows, ["triton_per_fused_argmin_0"]),
    "argmax_columns": (
        lambda x: x.argmax(0),
        awkward_rows,
        ["triton_per_fused_argmax_0"],
    ),
    "argmax_flat": (
        lambda x: x.argmax(),
        lambda d: torch.randn(7, 9, device=d),
        ["triton_per_fused_argmax_0"],
    ),
    "argmax_keepdim_3d": (
        lambda x: x.argmax(1, keepdim=True),
        lambda d: torch.randn(3, 5, 7, device=d),
        ["triton_per_fused_argmax_0"],
    ),
    "argmax_int": (
        lambda x: x.argmax(1),
        lambda d: torch.randint(-3, 3, (5, 11), device=d),
        ["triton_per_fused_argmax_0"],
    ),
    "argmax_half": (
        lambda x: x.argmax(1),
        lambda d: torch.randn(9, 13, device=d).half(),
        ["triton_per_fused_argmax_0"],
    ),
    "argmax_size_1": (
        lambda x: x.argmax(1),
        lambda d: torch.randn(9, 1, device=d),
        ["triton_poi_fused_argmax_0"],
    ),
    "argmax_looped": (
        lambda x: x.argmax(1),
        looped_rows,
        ["triton_red_fused_argmax_0"],
    ),
    "argmin_looped": (
        lambda x: x.argmin(1),
        looped_rows,
        ["triton_red_fused_argmin_0"],
    ),
    "max_with_indices": (
        lambda x: torch.max(x, 1),
        awkward_rows,
        ["triton_per_fused_max_0"],
    ),
    "min_with_indices_keepdim": (
        lambda x: torch.min(x, 0, keepdim=True),
        lambda d: torch.randn(6, 7, device=d),
        ["triton_per_fused_min_0"],
    ),
    "var_mean_rows": (
        lambda x: torch.var_mean(x, 1),
        lambda d: (
            torch.randn(33, 65, device=d) + 100
        ),  # a large mean: E[x²]-E[x]² fails
        ["triton_per_fused_var_mean_0"],
    ),
    "var_mean_looped": (
        lambda x: torch.var_mean(x, 1, correction=0),
        lambda d: torch.randn(3, 5000, device=d) * 3 + 1000,
        ["triton_red_fused_var_mean_0"],
    ),
    "var_columns": (
        lambda x: x.var(0),
        lambda d: torch.randn(33, 65, device=d),
        ["triton_per_fused_var_0"],
    ),
    "var_outer_looped": (
        lambda x: x.var(0),
        lambda d: torch.randn(300, 7, device=d),
        ["triton_red_fused_var_0"],
    ),
    "std_all": (
        lambda x: x.std(),
        lambda d: torch.randn(33, 65, device=d),
        ["triton_per_fused_std_0"],
    ),
    "var_two_dims_correction_2": (
        lambda x: x.var((0, 2), correction=2),
        lambda d: torch.randn(3, 5, 7, device=d),
        ["triton_per_fused_var_0"],
    ),
    "var_of_one_is_nan": (
        lambda x: x.var(1),
        lambda d: torch.randn(5, 1, device=d),
        ["triton_poi_fused_var_0"],
    ),
    "var_epilogue": (
        lambda x: x.var(1, keepdim=True) * 2,
        lambda d: torch.randn(5, 9, device=d),
        ["triton_per_fused_mul_var_0"],
    ),
    "sum_epilogue_chain": (
        lambda x: (x.sum(1) * 2 + 1).sigmoid(),
        lambda d: torch.randn(5, 7, device=d),
        ["triton_per_fused_add_mul_sigmoid_sum_0"],
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_eager_in_the_expected_kernels(case, device):
    fn, make, expected = CASES[case]
    torch.manual_seed(0)
    kernels, fallbacks = run(fn, make(device))
    assert fallbacks == []
    assert kernels == expected


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_std_mean_in_half_precision(device, dtype):
    x = (torch.randn(9, 130) * 4 + 3).to(device=device, dtype=dtype)
    kernels, _ = run(lambda x: torch.std_mean(x, -1), x, atol=2e-2, rtol=2e-2)
    assert kernels == ["triton_per_fused_std_mean_0"]


@interpreted
def test_welford_is_one_pass_and_stable():
    # a mean of 1e4 with a spread of 1: the naive E[x²]-E[x]² loses every digit in fp32
    x = torch.randn(4, 5000, dtype=torch.float64) + 1e4
    torch._dynamo.reset()
    got = torch.compile(lambda x: x.var(1), backend="minductor")(x.float())
    torch.testing.assert_close(got.double(), x.var(1), atol=0, rtol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_variance_over_few_long_rows_is_split_welford(device, keepdim):
    # batch-norm statistics of a channels-last image: 8 channels, each a row of
    # 2*128*128 elements read with a stride; a mean of 1e3 with a spread of 2 would
    # lose every digit to E[x^2]-E[x]^2
    x64 = torch.randn(2, 8, 128, 128, dtype=torch.float64) * 2 + 1e3
    x = x64.float().to(device).to(memory_format=torch.channels_last)

    def f(x):
        return torch.var_mean(x, dim=(0, 2, 3), correction=1, keepdim=keepdim)

    torch._dynamo.reset()
    with record_compiled() as graphs:
        var, mean = torch.compile(f, backend="minductor")(x)
    var64, mean64 = f(x64)
    torch.testing.assert_close(var.double().cpu(), var64, atol=0, rtol=1e-4)
    torch.testing.assert_close(mean.double().cpu(), mean64, atol=0, rtol=1e-6)
    assert var.shape == var64.shape and mean.dtype == torch.float32
    # Welford over pieces of each row, then one kernel combining each row's pieces
    names = graphs[0].kernel_names
    assert len(names) == 2, names
    assert names[0].startswith("triton_red_fused_var_mean")
    # the whole data is read by the first kernel only
    call = graphs[0].source[graphs[0].source.index("def call"):]
    launches = [line for line in call.splitlines() if "launch" in line]
    readers = [line for line in launches if "arg0_1" in line]
    assert len(readers) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_split_variance_of_pieces_with_different_means(device):
    # a ramp along the rows: every piece has its own mean, so the combined m2 is mostly
    # the pieces' scatter around the row's mean (the n * sum((mean_i - mean)^2) term)
    ramp = torch.linspace(-50, 50, 2 * 128 * 128, dtype=torch.float64)
    x64 = ramp.view(2, 128, 128, 1).permute(0, 3, 1, 2).expand(2, 8, 128, 128) + 1e3
    x64 = x64 + torch.randn(2, 8, 128, 128, dtype=torch.float64) * 1e-2
    x = x64.float().to(device).contiguous(memory_format=torch.channels_last)

    def f(x):
        return torch.var_mean(x, dim=(0, 2, 3))

    torch._dynamo.reset()
    with record_compiled() as graphs:
        var, mean = torch.compile(f, backend="minductor")(x)
    var64, mean64 = f(x64)
    assert len(graphs[0].kernel_names) == 2  # the split path
    torch.testing.assert_close(var.double().cpu(), var64, atol=0, rtol=1e-4)
    torch.testing.assert_close(mean.double().cpu(), mean64, atol=0, rtol=1e-6)


def test_variance_of_integers_falls_back():
    x = torch.randint(0, 5, (3, 4))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="floating point"):
        torch.compile(lambda x: torch.var(x, 1), backend="minductor")(x)


def test_argmax_over_nothing_is_eagers_error():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="empty|zero"):
        torch.compile(lambda x: x.argmax(1), backend="minductor")(torch.randn(3, 0))


def targets(n, classes, device, ignore=()):
    t = torch.randint(0, classes, (n,))
    for k in ignore:
        t[k] = -100
    return t.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_cross_entropy(device, reduction, weighted):
    torch.manual_seed(0)
    x, t = torch.randn(33, 65, device=device), targets(33, 65, device, ignore=(3, 7))
    w = torch.rand(65, device=device) if weighted else None
    kernels, fallbacks = run(
        lambda x, t, w: F.cross_entropy(x, t, weight=w, reduction=reduction), x, t, w
    )
    assert fallbacks == []
    # one kernel for log_softmax and the pick; a second for the sum over rows
    assert len(kernels) == (1 if reduction == "none" else 2)


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_with_an_ignore_index_that_is_a_class(device):
    x = torch.randn(9, 5, device=device).log_softmax(1)
    t = torch.tensor([0, 2, 2, 4, 1, 2, 3, 0, 2], device=device)
    kernels, _ = run(lambda x, t: F.nll_loss(x, t, ignore_index=2), x, t)
    assert len(kernels) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_of_half_logits(device):
    x = torch.randn(17, 33, device=device).half()
    t = targets(17, 33, device)
    run(lambda x, t: F.cross_entropy(x, t), x, t, atol=2e-3, rtol=2e-3)


@interpreted
def test_cross_entropy_with_rows_longer_than_a_persistent_kernel():
    x, t = torch.randn(4, 5000), targets(4, 5000, "cpu")
    kernels, _ = run(lambda x, t: F.cross_entropy(x, t), x, t)
    # the row's maximum and sum of exps in one looped pass, the picked log-probability
    # in a second, the mean over rows
    assert [k.split("_")[1] for k in kernels] == ["red", "red", "per"]
    assert "softmax_stats" in kernels[0]


@interpreted
def test_a_target_out_of_range_poisons_the_loss():
    # eager raises; a kernel cannot, so the loss is NaN rather than a wrong number
    x, t = torch.randn(6, 5), torch.tensor([0, 1, 7, 2, -100, 4])
    torch._dynamo.reset()
    loss = torch.compile(lambda x, t: F.cross_entropy(x, t), backend="minductor")(x, t)
    assert loss.isnan()
    with pytest.raises((IndexError, RuntimeError)):
        F.cross_entropy(x, t)


@interpreted
def test_fusion_stops_at_max_fusion_size():
    saved = config.max_fusion_size
    config.max_fusion_size = 2
    try:
        x = torch.randn(5, 7)
        kernels, _ = run(lambda x: (x.sum(1), x.amax(1), x.amin(1)), x)
    finally:
        config.max_fusion_size = saved
    assert len(kernels) == 2  # two of the three reductions share a kernel


def rms_norm_residual(x, residual, weight):
    # the RMSNorm-with-residual pattern as models write it: pow, mean, rsqrt
    h = x + residual
    scale = torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    return (h * scale.to(h.dtype)) * weight, h


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype, cols, kinds",
    [
        (torch.float32, 65, ["per"]),
        (torch.bfloat16, 130, ["per"]),
        # looped: the output reads the finished mean, so it cannot join the loop; it
        # iterates as [7, 5000] and h alone would merge to [35000]: the scheduler
        # re-derives both on [7, 5000] (common loops), and they share a kernel
        (torch.float32, 5000, ["red", "poi"]),
    ],
    ids=["fp32", "bf16", "fp32_looped"],
)
def test_rms_norm_with_residual(device, dtype, cols, kinds):
    torch.manual_seed(0)
    x, residual = (torch.randn(7, cols, device=device).to(dtype) for _ in range(2))
    weight = torch.rand(cols, device=device).to(dtype)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    kernels, fallbacks = run(rms_norm_residual, x, residual, weight, atol=tol, rtol=tol)
    assert fallbacks == []
    assert [k.split("_")[1] for k in kernels] == kinds
