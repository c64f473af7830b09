"""Reductions end to end: eager's values and dtypes, and the kernels they become."""


import pytest
import torch
from helpers import DEVICES, randn, run

import minductor  # noqa: F401  (registers the backend)
from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch18]



CASES = {
    # name: (fn, input factory, expected kernel name prefixes)
    "sum_inner_33x65": (lambda x: x.sum(1), lambda d: [randn(33, 65, device=d)], ["per"]),
    "sum_outer_33x65": (lambda x: x.sum(0), lambda d: [randn(33, 65, device=d)], ["per"]),
    "sum_all": (lambda x: x.sum(), lambda d: [randn(33, 65, device=d)], ["per"]),
    "sum_all_looped": (lambda x: x.sum(), lambda d: [randn(71, 73, device=d)], ["red"]),
    "sum_middle_keepdim": (
        lambda x: x.sum(1, keepdim=True), lambda d: [randn(3, 5, 7, device=d)], ["per"]
    ),
    "sum_two_dims": (lambda x: x.sum((0, 2)), lambda d: [randn(3, 5, 7, device=d)], ["per"]),
    "reduce_size_1": (lambda x: x.sum(1), lambda d: [randn(7, 1, device=d)], ["poi"]),
    "reduce_size_7": (lambda x: x.amax(1), lambda d: [randn(5, 7, device=d)], ["per"]),
    "reduce_size_1000": (lambda x: x.sum(1), lambda d: [randn(3, 1000, device=d)], ["per"]),
    "looped_above_persistent_limit": (
        lambda x: x.sum(1), lambda d: [randn(5, 5000, device=d)], ["red"]
    ),
    "triton_tutorial_shape": (
        lambda x: (x * 2).amax(1), lambda d: [randn(1823, 781, device=d)], ["per"]
    ),
    "empty_sum": (lambda x: x.sum(1), lambda d: [randn(3, 0, device=d)], ["per"]),
    "nan_and_inf_in_max_min": (
        lambda x: (x.amax(1), x.amin(1), x.amax(0)),
        lambda d: [
            torch.tensor(
                [[1.0, float("nan"), 3.0], [1.0, 2.0, float("inf")], [-float("inf"), 0, 1]],
                device=d,
            )
        ],
        ["per"],
    ),
    "int_sum_is_int64": (
        lambda x: x.sum(1), lambda d: [torch.randint(-5, 5, (7, 9), device=d)], ["per"]
    ),
    "int32_sum_is_int64": (
        lambda x: x.sum(), lambda d: [torch.randint(-5, 5, (7, 9), device=d).int()], ["per"]
    ),
    "bool_sum_counts": (lambda x: (x > 0).sum(1), lambda d: [randn(7, 9, device=d)], ["per"]),
    "int_max_looped": (
        lambda x: x.amax(1), lambda d: [torch.randint(-100, 100, (3, 5000), device=d)], ["red"]
    ),
    "prod": (lambda x: x.prod(1), lambda d: [randn(4, 6, device=d)], ["per"]),
    "any_all": (
        lambda x: (x.any(1), x.all(0)),
        lambda d: [torch.randint(0, 2, (5, 6), device=d)],
        ["per", "per"],
    ),
    "any_all_of_uint8_stay_uint8": (  # eager's rule for uint8, and a byte of 2
        lambda x: (x.any(1), x.all(0), x.any()),
        lambda d: [torch.tensor([[0, 2, 0], [0, 0, 0], [255, 1, 3]], device=d,
                                dtype=torch.uint8)],  # fmt: skip
        ["per", "per"],  # the whole-tensor any in the rows' kernel
    ),
    "full_max_min": (
        lambda x: (torch.max(x), torch.min(x)), lambda d: [randn(6, 7, device=d)], ["per"]
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_matches_eager(case, device):
    fn, make, kinds = CASES[case]
    torch.manual_seed(0)
    kernels, fallbacks = run(fn, *make(device))
    assert fallbacks == []
    assert [k.split("_")[1] for k in kernels] == kinds


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype,shape,tol",
    [(torch.float16, (7, 1000), 1e-2), (torch.bfloat16, (3, 5000), 2e-2)],
    ids=["fp16_persistent", "bf16_looped"],
)
def test_half_inputs_accumulate_in_float32(device, dtype, shape, tol):
    x = randn(*shape, device=device, dtype=dtype)
    kernels, _ = run(lambda x: x.sum(1), x, atol=tol * shape[1] ** 0.5, rtol=tol)
    assert len(kernels) == 1
    # float32 accumulation: compare with a float64 reference rounded once
    torch._dynamo.reset()
    got = torch.compile(lambda x: x.sum(1), backend="minductor")(x)
    exact = x.double().sum(1).to(dtype)
    torch.testing.assert_close(got, exact, atol=0, rtol=tol / 2)


@pytest.mark.parametrize("device", DEVICES)
def test_pointwise_producers_inline_into_the_reduction(device):
    x, y = randn(33, 65, device=device), randn(65, device=device)
    kernels, _ = run(lambda x, y: (x * y + 1).sum(1), x, y)
    assert kernels == ["triton_per_fused_add_mul_sum_0"]


@pytest.mark.parametrize("device", DEVICES)
def test_reductions_of_one_input_fuse_horizontally(device):
    x = randn(33, 65, device=device)
    kernels, _ = run(lambda x: (x.sum(1), x.amax(1)), x)
    assert kernels == ["triton_per_fused_amax_sum_0"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cols, kind", [(65, "per"), (5000, "red")])
def test_a_consumer_of_a_reduction_runs_in_its_kernel(device, cols, kind):
    # a pointwise node over the reduction's outputs is an epilogue: after the loop
    x = randn(5, cols, device=device)
    kernels, fallbacks = run(lambda x: (x.sum(1) * 2).sigmoid(), x)
    assert kernels == [f"triton_{kind}_fused_mul_sigmoid_sum_0"] and not fallbacks


@pytest.mark.parametrize("device", DEVICES)
def test_a_looped_kernel_cannot_read_its_reduction_inside_the_loop(device):
    x = randn(3, 5000, device=device)
    kernels, _ = run(lambda x: x - x.amax(1, keepdim=True), x)
    assert kernels == ["triton_red_fused_amax_0", "triton_poi_fused_sub_1"]


@pytest.mark.parametrize("device", DEVICES)
def test_mean_in_half_precision_rounds_once(device):
    x = randn(9, 13, device=device, dtype=torch.float16)
    run(lambda x: x.mean(-1), x, atol=1e-3, rtol=1e-3)


def test_max_over_nothing_is_eagers_error():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="zero-size dimension"):
        torch.compile(lambda x: x.amax(1), backend="minductor")(torch.randn(3, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_training_through_a_reduction(device):
    x = randn(7, 9, device=device).requires_grad_()
    torch._dynamo.reset()
    loss = torch.compile(lambda x: (x.sin() * 2).sum(), backend="minductor")(x)
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_over_the_last_dim_is_one_kernel(device, fn):
    x = randn(33, 65, device=device)
    kernels, fallbacks = run(lambda x: fn(x, -1), x, atol=1e-5, rtol=1e-5)
    assert fallbacks == [] and len(kernels) == 1 and kernels[0].startswith("triton_per_")


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_fusion_log_and_source(device):
    torch._dynamo.reset()
    with record_compiled() as graphs:
        torch.compile(lambda x: torch.softmax(x, -1), backend="minductor")(
            randn(33, 65, device=device)
        )
    (graph,) = graphs
    assert graph.kernel_names == ["triton_per_fused_div_exp_softmax_stats_sub_0"]
    assert sum(line.startswith("fuse ") for line in graph.fusion_log) == 2
    assert graph.source.count("tl.load(") == 1  # x is read once
    assert graph.source.count("tl.store(") == 1  # and only the result is written


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "fn,shape,kernels",
    [
        (lambda x: torch.softmax(x, 0), (33, 65), 2),  # not the innermost dim: no cut
        (lambda x: torch.softmax(x, -1), (3, 2000), 1),  # persistent up to 4096
        (lambda x: torch.softmax(x, -1), (2, 5000), 2),  # looped: both stats, then x again
        (lambda x: torch.softmax(x, -1).half(), (2, 5, 7), 1),
        (lambda x: torch.log_softmax(x.half(), -1), (7, 100), 1),
    ],
    ids=["dim0", "2000_wide", "looped", "3d", "fp16"],
)
def test_softmax_variants(device, fn, shape, kernels):
    x = randn(*shape, device=device)
    found, _ = run(fn, x, atol=2e-3, rtol=2e-3)
    assert len(found) == kernels


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_of_a_row_of_minus_infinity_is_nan_as_in_eager(device):
    x = torch.tensor([[-float("inf")] * 3, [1.0, 2.0, -float("inf")]], device=device)
    run(lambda x: torch.softmax(x, -1), x)


def softmax_source(x) -> str:
    """Compile softmax over x's rows, check it against eager, return the module."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(lambda x: torch.softmax(x, -1), backend="minductor")(x)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    return graphs[0].source


@pytest.mark.parametrize("device", DEVICES)
def test_exactly_tiled_blocks_use_constant_masks(device):
    # 16 rows of 64: every block is full, so the masks are constants Triton folds away
    source = softmax_source(randn(16, 64, device=device))
    assert "rmask = tl.full([1, RBLOCK], True, tl.int1)" in source
    assert "xmask = tl.full([XBLOCK, 1], True, tl.int1)" in source


@pytest.mark.parametrize("device", DEVICES)
def test_ragged_blocks_keep_computed_masks(device):
    # 1001 rows tile no block: the GPU's (4 rows, for 250 programs) nor the
    # interpreter's (1024 rows); 63 columns do not fill a block of 64
    source = softmax_source(randn(1001, 63, device=device))
    assert "rmask = rindex < rnumel" in source
    assert "xmask = xindex < xnumel" in source
