"""Chapter 13: batch norm in training and its backward, max-pooling and its gradient,
global average pooling, each against eager on awkward shapes, plus ResNet blocks in train
and eval mode with their structure pinned (no batch-norm or pooling fallback)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, run, train_steps

from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch13]

TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def _compare_training(model, x, steps=3, dtype=torch.float32, allowed=()):
    ours = copy.deepcopy(model)
    out, grads, buffers, graphs = train_steps(ours, x, steps, True)
    out_e, grads_e, buffers_e, _ = train_steps(model, x, steps, False)
    tol = TOL[dtype]
    torch.testing.assert_close(out, out_e, atol=tol, rtol=tol)
    for name, g in grads_e.items():
        torch.testing.assert_close(grads[name], g, atol=tol * 10, rtol=tol, msg=name)
    for name, b in buffers_e.items():  # running statistics, num_batches_tracked
        torch.testing.assert_close(buffers[name], b, atol=tol, rtol=tol, msg=name)
    assert [f for g in graphs for f in g.fallbacks if f not in allowed] == []
    return graphs


def _affine_drawn(model):
    """The norm with a weight and bias other than 1 and 0, if it has them."""
    if getattr(model, "weight", None) is not None:
        with torch.no_grad():
            model.weight.uniform_(0.5, 1.5)
            model.bias.uniform_(-1, 1)
    return model


BATCH_NORMS = {
    "2-d": (lambda: torch.nn.BatchNorm2d(5), (3, 5, 4, 7)),
    "2-d, one image, 1x1": (lambda: torch.nn.BatchNorm2d(3), (2, 3, 1, 1)),
    "1-d over (N, C)": (lambda: torch.nn.BatchNorm1d(6), (9, 6)),
    "1-d over (N, C, L)": (lambda: torch.nn.BatchNorm1d(4), (3, 4, 5)),
    "3-d": (lambda: torch.nn.BatchNorm3d(2), (2, 2, 3, 4, 3)),
    "no affine": (lambda: torch.nn.BatchNorm2d(4, affine=False), (2, 4, 3, 3)),
    "no running stats": (
        lambda: torch.nn.BatchNorm2d(4, track_running_stats=False),
        (2, 4, 3, 5),
    ),
    "momentum None (cumulative)": (
        lambda: torch.nn.BatchNorm2d(3, momentum=None),
        (4, 3, 2, 2),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(BATCH_NORMS))
def test_batch_norm_training_forward_backward_and_running_stats(case, device):
    make, shape = BATCH_NORMS[case]
    torch.manual_seed(0)
    model = _affine_drawn(make().to(device))
    x = torch.randn(shape, device=device) * 3 + 1
    _compare_training(model, x)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_statistics_of_a_large_batch_split_in_one_read(device):
    """Few channels, long rows: the statistics are Welford over pieces of each row,
    then one kernel combining them (with the running statistics' update): the
    forward has two reduction kernels. Outputs and running statistics match eager;
    the gradients of weight and bias, sums of 65536 terms, are as close to a float64
    run as eager's."""
    torch.manual_seed(0)
    model = _affine_drawn(torch.nn.BatchNorm2d(16).to(device))
    x = torch.randn(4, 16, 64, 64, device=device).to(memory_format=torch.channels_last)
    x = x * 2 + 3
    out, grads, buffers, graphs = train_steps(copy.deepcopy(model), x, 2, True)
    out_e, grads_e, buffers_e, _ = train_steps(copy.deepcopy(model), x, 2, False)
    _, grads64, _, _ = train_steps(copy.deepcopy(model).double(), x.double(), 2, False)
    torch.testing.assert_close(out, out_e, atol=1e-4, rtol=1e-4)
    for name, b in buffers_e.items():
        torch.testing.assert_close(buffers[name], b, atol=1e-4, rtol=1e-4, msg=name)
    for name, ref in grads64.items():
        ours = (grads[name].double() - ref).abs().max().item()
        eager = (grads_e[name].double() - ref).abs().max().item()
        assert ours <= 4 * eager + 1e-6 * ref.abs().max().item(), (name, ours, eager)
    reductions = [n for n in graphs[0].kernel_names if not n.startswith("triton_poi")]
    assert len(reductions) == 2, graphs[0].kernel_names


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_training_channels_last_and_bf16(device):
    torch.manual_seed(0)
    model = torch.nn.BatchNorm2d(6).to(device)
    x = torch.randn(2, 6, 5, 3, device=device).to(memory_format=torch.channels_last)
    _compare_training(model, x)
    model = torch.nn.BatchNorm2d(6).to(device, torch.bfloat16)
    _compare_training(model, x.to(torch.bfloat16), steps=1, dtype=torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_backward_in_eval_mode(device):
    torch.manual_seed(0)
    model = torch.nn.BatchNorm2d(4).to(device)
    with torch.no_grad():
        model.running_mean.uniform_(-1, 1)
        model.running_var.uniform_(0.5, 2)
    _compare_training(model.eval(), torch.randn(3, 4, 2, 5, device=device))


POOLS = {  # kernel, stride, padding, dilation, ceil_mode; input shape
    "resnet stem 3/2/1": ((3, 2, 1, 1, False), (2, 3, 9, 9)),
    "2x2 stride 2": ((2, 2, 0, 1, False), (1, 2, 6, 8)),
    "overlapping 3/1, odd sizes": ((3, 1, 0, 1, False), (2, 1, 5, 7)),
    "ceil mode": ((3, 2, 0, 1, True), (1, 2, 8, 6)),
    "ceil mode with padding": ((2, 2, 1, 1, True), (1, 1, 5, 5)),
    "dilation 2": ((3, 1, 1, 2, False), (1, 2, 7, 6)),
    "rectangular": (((2, 3), (1, 2), (1, 0), 1, False), (2, 2, 5, 7)),
    "3-d input (C, H, W)": ((3, 2, 1, 1, False), (3, 7, 5)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(POOLS))
def test_max_pool2d_values_indices_and_gradient(case, device):
    (k, s, p, d, ceil), shape = POOLS[case]
    torch.manual_seed(0)
    x = torch.randn(shape, device=device)

    def pool(x):
        return F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)

    _, fallbacks = run(pool, x, atol=0, rtol=0)
    assert fallbacks == []
    x.requires_grad_()
    g = torch.randn_like(pool(x)[0])
    expected = torch.autograd.grad(pool(x)[0], x, g)[0]
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(lambda x: pool(x)[0], backend="minductor")(x)
        got = torch.autograd.grad(out, x, g)[0]
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    assert [f for gr in graphs for f in gr.fallbacks] == []


@pytest.mark.parametrize("device", DEVICES)
def test_max_pool2d_ties_nan_inf_bf16_and_channels_last(device):
    # ties: eager keeps the first maximum; NaN wins and the last NaN names the index;
    # a window of -inf names a position inside the input
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, float("nan"), 5.0],
                      [-float("inf")] * 4, [-float("inf"), 0.0, float("nan"), 1.0]])
    x = x.view(1, 1, 4, 4).to(device)
    for k, s, p in [(2, 2, 0), (3, 1, 1), (2, 1, 0)]:
        run(lambda x: F.max_pool2d(x, k, s, p, return_indices=True), x, atol=0, rtol=0)
    y = torch.randn(2, 3, 6, 5, device=device).to(memory_format=torch.channels_last)
    run(lambda y: F.max_pool2d(y, 3, 2, 1, return_indices=True), y, atol=0, rtol=0)
    run(lambda y: F.max_pool2d(y, 2), y.to(torch.bfloat16), atol=0, rtol=0)


ADAPTIVE = {"global": (1, 1), "2x3 windows": (2, 3), "identity": (6, 6)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(ADAPTIVE))
def test_adaptive_avg_pool2d_with_uniform_windows(case, device):
    x = torch.randn(2, 3, 6, 6, device=device, requires_grad=True)
    size = ADAPTIVE[case]
    _, fallbacks = run(lambda x: F.adaptive_avg_pool2d(x, size), x.detach())
    assert fallbacks == []
    g = torch.randn(2, 3, *size, device=device)
    expected = torch.autograd.grad(F.adaptive_avg_pool2d(x, size), x, g)[0]
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: F.adaptive_avg_pool2d(x, size), backend="minductor")
    got = torch.autograd.grad(compiled(x), x, g)[0]
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_adaptive_avg_pool2d_with_unequal_windows_goes_to_aten(device):
    x = torch.randn(1, 2, 7, 5, device=device)
    _, fallbacks = run(lambda x: F.adaptive_avg_pool2d(x, (3, 2)), x)
    assert fallbacks == ["aten._adaptive_avg_pool2d.default"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_average_over_the_whole_image_is_a_mean(device, dtype):
    # Hugging Face EfficientNet's head: a 7 x 5 map pooled with a kernel 1280 wide
    # (ceil_mode keeps one window); unrolled, the body would be 1280 * 1280 loads
    x = torch.randn(2, 4, 7, 5, device=device).to(dtype)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.bfloat16 else {}
    for pool in (
        lambda x: F.avg_pool2d(x, 1280, ceil_mode=True),
        lambda x: F.avg_pool2d(x, (7, 5), divisor_override=3),
        lambda x: F.avg_pool2d(x, (9, 5), ceil_mode=True, count_include_pad=False),
    ):
        _, fallbacks = run(pool, x, **tol)
        assert fallbacks == []
        xg = x.clone().requires_grad_()
        g = torch.randn_like(pool(xg))
        expected = torch.autograd.grad(pool(xg), xg, g)[0]
        torch._dynamo.reset()
        with record_compiled() as graphs:
            compiled = torch.compile(pool, backend="minductor")
            got = torch.autograd.grad(compiled(xg), xg, g)[0]
        torch.testing.assert_close(got, expected, **tol)
        assert [f for gr in graphs for f in gr.fallbacks] == []


@pytest.mark.parametrize("device", DEVICES)
def test_a_pooling_window_too_large_to_unroll_goes_to_aten(device):
    # windows too large to unroll, that are not the whole image: 6 x 6 windows over
    # a 9 x 9 map (four of them), and a max pool over the whole image
    x = torch.randn(2, 4, 9, 9, device=device, requires_grad=True)
    pools = {
        "aten.avg_pool2d.default": lambda x: F.avg_pool2d(x, 6, 3),
        "aten.max_pool2d_with_indices.default": lambda x: F.max_pool2d(
            x, 1280, ceil_mode=True
        ),
    }
    for op, pool in pools.items():
        torch._dynamo.reset()
        with record_compiled() as graphs:
            out = torch.compile(pool, backend="minductor")(x)
            out.sum().backward()
        expected = pool(x.detach())
        torch.testing.assert_close(out, expected)
        assert op in graphs[0].fallbacks and "_backward" in graphs[1].fallbacks[0]
        x.grad = None


class BasicBlock(torch.nn.Module):  # ResNet-18's
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.down = torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout)
        )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.down(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3, 2, 1, bias=False),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1),
        )
        self.block = BasicBlock(4, 6, 2)
        self.head = torch.nn.Linear(6, 5)

    def forward(self, x):
        y = F.adaptive_avg_pool2d(self.block(self.stem(x)), 1)
        return self.head(y.flatten(1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_small_resnet_trains_like_eager(layout, device):
    torch.manual_seed(0)
    model = Net().to(device)
    x = torch.randn(2, 3, 17, 15, device=device)
    if layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    # channels-last: the gradient of flatten((N, C, 1, 1)), a view autograd replays
    # with as_strided, reaches the graph as an as_strided_scatter (chapter 9 lowers it)
    _compare_training(model, x, steps=2)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_batch_norm_relu_in_eval_is_one_extern_call_and_one_kernel(device):
    torch.manual_seed(0)
    layer = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
    ).to(device).eval()
    with torch.no_grad():
        layer[1].running_mean.uniform_(-1, 1)
        layer[1].running_var.uniform_(0.5, 2)
        kernels, fallbacks = run(layer, torch.randn(2, 3, 6, 5, device=device))
    assert fallbacks == [] and len(kernels) == 1


def _decomposition_cases():
    aten = torch.ops.aten
    torch.manual_seed(0)
    x, dy = torch.randn(4, 3, 5, 2) * 2 + 1, torch.randn(4, 3, 5, 2)
    w, b = torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    _, mean, rstd = aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    g = torch.randn(4, 3, 1, 2)
    return {
        aten._native_batch_norm_legit_functional.default: [
            (x, w, b, rm, rv, True, 0.1, 1e-5),
            (x, None, None, rm, rv, True, 0.3, 1e-3),
        ],
        aten._native_batch_norm_legit.no_stats: [(x, w, b, True, 0.1, 1e-5)],
        aten.native_batch_norm_backward.default: [
            (dy, x, w, rm, rv, mean, rstd, True, 1e-5, [True, True, True]),
            (dy, x, w, rm, rv, None, None, False, 1e-5, [True, False, True]),
            (dy, x, None, rm, rv, mean, rstd, True, 1e-5, [True, False, False]),
        ],
        aten._adaptive_avg_pool2d.default: [(x, [1, 1]), (x, [1, 2]), (x, [5, 2])],
        aten._adaptive_avg_pool2d_backward.default: [(g, x)],
        aten.avg_pool2d.default: [
            (x, [1280, 1280], [], [0, 0], True),
            (x, list(x.shape[-2:]), [2, 2], [0, 0], False, True, 5),
        ],
        aten.avg_pool2d_backward.default: [
            (x.mean((-2, -1), keepdim=True), x, [99, 99], [99, 99], [0, 0], True,
             True, None),
        ],
    }


def test_every_decomposition_of_the_chapter_matches_eager():
    from minductor.decompositions import decompositions

    cases = _decomposition_cases()
    ours = {
        op
        for op, fn in decompositions.items()
        if fn.__module__ == "minductor.convnets"
        and op._overloadname not in ("out", "grad_input")
    }
    assert ours == set(cases)
    pool = decompositions[torch.ops.aten._adaptive_avg_pool2d.default]
    assert pool(torch.randn(1, 1, 5, 4), [2, 2]) is NotImplemented  # unequal windows
    avg = decompositions[torch.ops.aten.avg_pool2d.default]
    assert avg(torch.randn(1, 1, 9, 9), [6, 6], [3, 3]) is NotImplemented  # 4 windows
    assert avg(torch.randn(1, 1, 9, 9), [9, 9], [], [1, 1]) is NotImplemented  # padded
    for op, calls in cases.items():
        for args in calls:
            expected, got = op(*args), decompositions[op](*args)
            expected = expected if isinstance(expected, tuple) else (expected,)
            got = got if isinstance(got, tuple) else (got,)
            assert len(got) == len(expected), op
            for g, e in zip(got, expected, strict=True):
                if e is None:
                    assert g is None
                    continue
                assert (g.dtype, g.shape) == (e.dtype, e.shape), op
                torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5, msg=str(op))


AVG_POOLS = {  # kernel, stride, padding, ceil_mode, count_include_pad, divisor; shape
    "3/2/1, pad counted": ((3, 2, 1, False, True, None), (2, 2, 7, 6)),
    "3/2/1, pad not counted": ((3, 2, 1, False, False, None), (2, 2, 7, 6)),
    "ceil mode, pad counted": ((3, 2, 1, True, True, None), (1, 2, 6, 8)),
    "ceil mode, pad not counted": ((2, 2, 1, True, False, None), (1, 1, 5, 5)),
    "ceil mode, no padding": ((3, 2, 0, True, True, None), (1, 1, 8, 6)),
    "divisor override": ((2, 1, 0, False, True, 3), (2, 1, 4, 5)),
    "rectangular": (((2, 3), (1, 2), (1, 1), False, True, None), (1, 2, 5, 7)),
    "3-d input": ((2, 2, 0, False, True, None), (3, 6, 4)),
}


# the cases that repeat a path the others take (ceil mode, padding counted or not)
SLOW_AVG_POOLS = {
    "3/2/1, pad not counted", "ceil mode, pad counted", "ceil mode, no padding"
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.slow) if c in SLOW_AVG_POOLS else c
        for c in AVG_POOLS
    ],
)
def test_avg_pool2d_and_its_gradient(case, device):
    (k, s, p, ceil, include, divisor), shape = AVG_POOLS[case]
    torch.manual_seed(0)
    x = torch.randn(shape, device=device)

    def pool(x):
        return F.avg_pool2d(x, k, s, p, ceil, include, divisor)

    _, fallbacks = run(pool, x, atol=1e-6, rtol=1e-6)
    assert fallbacks == []
    x.requires_grad_()
    g = torch.randn_like(pool(x))
    expected = torch.autograd.grad(pool(x), x, g)[0]
    torch._dynamo.reset()
    with record_compiled() as graphs:
        got = torch.autograd.grad(torch.compile(pool, backend="minductor")(x), x, g)[0]
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    assert [f for gr in graphs for f in gr.fallbacks] == []


@pytest.mark.parametrize("device", DEVICES)
def test_avg_pool2d_in_bf16_and_channels_last(device):
    x = torch.randn(2, 3, 7, 5, device=device).to(memory_format=torch.channels_last)
    run(lambda x: F.avg_pool2d(x, 3, 2, 1), x)
    run(lambda x: F.avg_pool2d(x, 2), x.to(torch.bfloat16), atol=1e-2, rtol=1e-2)


NORMS = {
    "group norm": (lambda: torch.nn.GroupNorm(3, 6), (2, 6, 4, 5)),
    "group norm, one group, no affine": (
        lambda: torch.nn.GroupNorm(1, 4, affine=False),
        (3, 4, 5),
    ),
    "instance norm": (lambda: torch.nn.InstanceNorm2d(4, affine=True), (2, 4, 3, 5)),
    "instance norm with running stats": (
        lambda: torch.nn.InstanceNorm1d(3, track_running_stats=True),
        (2, 3, 7),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(NORMS))
def test_group_and_instance_norm_train_like_eager(case, device):
    make, shape = NORMS[case]
    torch.manual_seed(0)
    model = _affine_drawn(make().to(device))
    _compare_training(model, torch.randn(shape, device=device) * 2 + 1, steps=2)


RESAMPLING = {
    "nearest x2": dict(scale_factor=2),
    "nearest x2.5": dict(scale_factor=2.5),
    "nearest to a size": dict(size=(4, 7)),
    "nearest, shrinking": dict(size=(2, 2)),
    "bilinear x2": dict(scale_factor=2, mode="bilinear"),
    "bilinear, align corners": dict(size=(5, 4), mode="bilinear", align_corners=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(RESAMPLING))
def test_upsampling_and_its_gradient_compile_with_no_fallback(case, device):
    kwargs = RESAMPLING[case]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 3, 3, device=device, requires_grad=True)
    g = torch.randn_like(F.interpolate(x, **kwargs))
    expected = torch.autograd.grad(F.interpolate(x, **kwargs), x, g)[0]
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(lambda x: F.interpolate(x, **kwargs), backend="minductor")(x)
        got = torch.autograd.grad(out, x, g)[0]
    torch.testing.assert_close(out, F.interpolate(x, **kwargs), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert [f for gr in graphs for f in gr.fallbacks] == []
