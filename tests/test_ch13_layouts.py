"""Chapter 13's layout decision: which graphs run their convolutions channels-last, and
the convolutional blocks of ResNet, MobileNetV3 and ConvNeXt trained and evaluated with
it, NCHW and channels-last, against eager (outputs, every gradient, running statistics),
with the structure pinned: no conversion between two convolutions."""

import copy
import logging
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, train_steps
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import record_compiled
from minductor.config import config
from minductor.convnets import _measured_strides, _order, layout_decision
from minductor.ir import Pointwise
from minductor.lowering import GraphLowering
from minductor.ops import ops

pytestmark = [pytest.mark.e2e, pytest.mark.ch13]


@pytest.fixture(autouse=True)
def no_tf32():
    """cuDNN computes float32 convolutions in TF32 by default, with a different
    algorithm per layout: compare true float32 with true float32."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


def _decide(fn, *inputs):
    gm = make_fx(fn)(*inputs)
    return layout_decision(GraphLowering(gm, inputs))


def _inference(fn, *inputs, tol=1e-4):
    """fn compiled and in eager, under no_grad, compared: the results and the graph."""
    torch._dynamo.reset()
    with torch.no_grad(), record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*inputs)
        expected = fn(*inputs)
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)
    (graph,) = graphs
    return out, expected, graph


def _conv(cout, cin, k, groups=1):
    return torch.randn(cout, cin // groups, k, k)


@pytest.mark.parametrize(
    "case, weight, groups, chosen, why",
    [
        ("wide", _conv(96, 16, 3), 1, True, "1 convolution(s)"),
        ("depthwise", _conv(96, 96, 3, 96), 96, True, "1 convolution(s)"),
        ("grouped", _conv(96, 96, 3, 4), 4, False, "grouped convolution"),
        ("narrow", _conv(32, 16, 3), 1, False, "every convolution is narrow"),
        ("shrinking", _conv(40, 96, 3), 1, False, "shrinks its channels"),
    ],
)
def test_layout_decision(case, weight, groups, chosen, why):
    x = torch.randn(2, weight.shape[1] * groups, 6, 6)
    decided, reason = _decide(lambda x, w: F.conv2d(x, w, groups=groups), x, weight)
    assert decided is chosen and why in reason


def test_layout_decision_needs_a_2d_convolution_and_the_option():
    decided = _decide(lambda x: x.sin(), torch.randn(2, 3))
    assert decided == (False, "no 2-d convolution")
    x, w = torch.randn(2, 16, 6, 6), _conv(96, 16, 3)
    with config.patch({"layout_optimization": False}):
        decided, why = _decide(lambda x, w: F.conv2d(x, w), x, w)
    assert not decided and "off" in why


class Basic(torch.nn.Module):  # ResNet-18's block, widening and striding
    def __init__(self, cin=16, cout=72):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, 2, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.down = torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 1, 2, bias=False), torch.nn.BatchNorm2d(cout)
        )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.down(x))


class Bottleneck(torch.nn.Module):  # ResNet-50's, with its identity shortcut
    def __init__(self, c=72, mid=24):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(c, mid, 1, bias=False), torch.nn.BatchNorm2d(mid),
            torch.nn.ReLU(),
            torch.nn.Conv2d(mid, mid, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(mid),
            torch.nn.ReLU(),
            torch.nn.Conv2d(mid, c, 1, bias=False), torch.nn.BatchNorm2d(c),
        )

    def forward(self, x):
        return F.relu(self.body(x) + x)


class InvertedResidual(torch.nn.Module):  # MobileNetV3's, with squeeze-excite
    def __init__(self, c=24, wide=96):
        super().__init__()
        self.expand = torch.nn.Sequential(
            torch.nn.Conv2d(c, wide, 1, bias=False), torch.nn.BatchNorm2d(wide),
            torch.nn.Hardswish(),
        )
        self.depthwise = torch.nn.Sequential(
            torch.nn.Conv2d(wide, wide, 3, 1, 1, groups=wide, bias=False),
            torch.nn.BatchNorm2d(wide), torch.nn.Hardswish(),
        )
        self.squeeze = torch.nn.Conv2d(wide, c, 1)
        self.excite = torch.nn.Conv2d(c, wide, 1)
        self.project = torch.nn.Sequential(
            torch.nn.Conv2d(wide, c, 1, bias=False), torch.nn.BatchNorm2d(c)
        )

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        s = F.adaptive_avg_pool2d(y, 1)
        s = F.hardsigmoid(self.excite(F.relu(self.squeeze(s))))
        return self.project(y * s) + x


class ConvNeXtBlock(torch.nn.Module):  # depthwise 7x7, LayerNorm over channels
    def __init__(self, c=72):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c, eps=1e-6)
        self.up = torch.nn.Linear(c, 4 * c)
        self.down = torch.nn.Linear(4 * c, c)
        self.gamma = torch.nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)  # (N, H, W, C)
        y = self.down(F.gelu(self.up(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


BLOCKS = {
    "resnet-basic": (Basic, (2, 16, 7, 6)),
    "resnet-bottleneck": (Bottleneck, (2, 72, 5, 6)),
    "mobilenet-inverted-residual": (InvertedResidual, (2, 24, 5, 6)),
    "convnext": (ConvNeXtBlock, (2, 72, 6, 5)),
}


def _block_cases():
    """Every block, mode and input layout; a block trained from NCHW and run in eval
    from channels-last input in `make test`, its other two pairs marked slow."""
    for block in BLOCKS:
        for mode in ("train", "eval"):
            for layout in ("nchw", "channels_last"):
                slow = (mode == "train") != (layout == "nchw")
                marks = [pytest.mark.slow] if slow else []
                yield pytest.param(block, mode, layout, marks=marks)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block, mode, layout", list(_block_cases()))
def test_blocks_run_channels_last_like_eager(block, mode, layout, device, caplog):
    make, shape = BLOCKS[block]
    torch.manual_seed(0)
    model = make().to(device).train(mode == "train")
    for m in model.modules():  # statistics and affine parameters of their own
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-1, 1)
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2)
    x = torch.randn(shape, device=device)
    if layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    ours = copy.deepcopy(model)
    with caplog.at_level(logging.INFO, logger="minductor"):
        out, grads, buffers, graphs = train_steps(ours, x, 2, True)
    assert "layout: channels-last" in caplog.text
    out_e, grads_e, buffers_e, _ = train_steps(model, x, 2, False)
    assert out.stride() == out_e.stride()  # the caller sees eager's layout
    torch.testing.assert_close(out, out_e, atol=1e-4, rtol=1e-4)
    for name, g in grads_e.items():
        torch.testing.assert_close(grads[name], g, atol=1e-3, rtol=1e-4, msg=name)
    for name, b in buffers_e.items():
        torch.testing.assert_close(buffers[name], b, atol=1e-4, rtol=1e-4, msg=name)
    assert [f for g in graphs for f in g.fallbacks] == []


@pytest.mark.parametrize("device", DEVICES)
def test_nothing_is_converted_between_two_convolutions(device):
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(16, 72, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(72),
        torch.nn.ReLU(),
        torch.nn.Conv2d(72, 72, 3, padding=1),
    ).to(device).eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 16, 5, 6, device=device).to(memory_format=torch.channels_last)
    out, expected, graph = _inference(net, x)
    assert out.stride() == expected.stride()
    # batch norm and ReLU are one kernel, the last convolution's bias the other (ATen
    # would add it with a kernel of its own); input, weights and output need no copy
    assert len(graph.kernel_names) == 2
    call = graph.source[graph.source.index("def call"):].replace("cuda", "cpu")
    # each kernel writes over the convolution's channels-last result it reads
    assert call.count("empty_strided") == 0
    assert call.count("restride(") == 2 and "(2, 72, 5, 6), (2160, 1, 432, 72))" in call
    assert "buf1 = buf0  # reuse" in call and "buf3 = buf2  # reuse" in call
    assert call.count("torch.convolution(") == 2
    assert "torch.convolution(buf" in call and ", None, [1, 1]" in call


class Windowed(torch.nn.Module):  # ResNet's stem: a window between two convolutions
    def __init__(self, window, c=72):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, c, 3, 2, 1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)
        self.window = window
        self.a = torch.nn.Conv2d(c, c, 1, bias=False)
        self.b = torch.nn.Conv2d(c, 96, 1, bias=False)  # a second reader, wider

    def forward(self, x):
        y = self.window(F.relu(self.bn(self.conv(x))))
        return self.a(y) + self.b(y)[:, :72]


WINDOWS = {  # the window, and the kernels: the image and the first weight made
    # channels-last, the window with batch norm and ReLU, the add
    "max_pool": (lambda: torch.nn.MaxPool2d(3, 2, 1), 4),
    "max_pool_ceil_dilated": (
        lambda: torch.nn.MaxPool2d(2, 2, 0, 2, ceil_mode=True), 4
    ),
    "avg_pool": (lambda: torch.nn.AvgPool2d(3, 2, 1), 4),
    "nearest_up": (lambda: torch.nn.Upsample(scale_factor=2, mode="nearest"), 4),
    # four reads of each pixel: batch norm and ReLU are stored first, and so are the
    # interpolation weights
    "bilinear_up": (lambda: torch.nn.Upsample(scale_factor=2, mode="bilinear"), 6),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window", list(WINDOWS))
def test_a_window_between_convolutions_is_stored_channels_last(window, device):
    """A pooling window's index is clamped, an upsampling's computed from an iota:
    neither is affine. The result is still stored in the order its loads walk
    (channels-last), so the two convolutions reading it need no copy."""
    make, kernels = WINDOWS[window]
    torch.manual_seed(0)
    net = Windowed(make()).to(device).eval()
    x = torch.randn(2, 3, 17, 18, device=device)
    out, expected, graph = _inference(net, x)
    assert out.stride() == expected.stride()
    assert graph.fallbacks == []
    assert len(graph.kernel_names) == kernels, graph.kernel_names
    call = graph.source[graph.source.index("def call"):].replace("cuda", "cpu")
    found = re.findall(r"empty_strided_cpu\(\((2, 72, \d+, \d+)\), \(([\d, ]+)\)", call)
    assert found  # the window's result (the add reuses its memory)
    for sizes, strides in found:
        n, c, h, w = map(int, sizes.split(", "))
        assert tuple(map(int, strides.split(", "))) == (c * h * w, 1, w * c, c)


@pytest.mark.parametrize("device", DEVICES)
def test_a_gather_between_convolutions_is_right_whatever_its_layout(device):
    """Rows picked by an index tensor the caller passes, between two convolutions:
    computed straight into the channels-last memory the second one reads, and right."""
    torch.manual_seed(0)
    a = torch.nn.Conv2d(3, 72, 3, padding=1, bias=False).to(device)
    b = torch.nn.Conv2d(72, 96, 1, bias=False).to(device)

    def f(x, rows):
        return b(F.relu(a(x))[:, :, rows])

    x = torch.randn(2, 3, 9, 7, device=device)
    rows = torch.tensor([8, 0, 3, 3, 5], device=device)
    _, _, graph = _inference(f, x, rows)
    assert graph.fallbacks == []


def test_strides_are_measured_where_the_index_allows_it():
    """A clamped or divided index walks memory in an order the rule can measure; an
    index read from memory (a gather) cannot be run at compile time: no vote."""
    cpu, f32 = torch.device("cpu"), torch.float32

    def channels_last_read(n, c, h, w):  # y: (2, 72, 9, 7), channels-last
        return n * 72 * 63 + c + h * 7 * 72 + w * 72

    def upsampled(index):
        n, c, h, w = index
        return ops.load("y", channels_last_read(n, c, h // 2, w))

    def gathered(index):
        n, c, h, w = index
        row = ops.indirect_indexing(ops.load("rows", h), 9)
        return ops.load("y", channels_last_read(n, c, row, w))

    dims = [0, 1, 2, 3]
    (strides,) = _measured_strides(Pointwise(cpu, f32, upsampled, (2, 72, 18, 7)), dims)
    assert _order(strides) == [0, 2, 3, 1]  # channels-last, as its loads walk
    assert _measured_strides(Pointwise(cpu, f32, gathered, (2, 72, 5, 7)), dims) == []


@pytest.mark.parametrize("device", DEVICES)
def test_two_convolutions_reading_one_value_share_its_channels_last_copy(device):
    torch.manual_seed(0)
    a = torch.nn.Conv2d(8, 72, 3, bias=False).to(device)
    b = torch.nn.Conv2d(8, 96, 1, bias=False).to(device)

    def f(x):  # an NCHW input: both convolutions want it channels-last
        return a(x).sum() + b(x).sum()

    x = torch.randn(2, 8, 7, 6, device=device)
    _, _, graph = _inference(f, x)
    call = graph.source[graph.source.index("def call"):]
    image = next(line for line in call.splitlines() if "(2, 8, 7, 6)" in line)
    copy = image.split(" = ")[0].strip()
    launches = [ln.strip() for ln in call.splitlines() if ln.strip().startswith("launch")]
    args = [ln[ln.index("(") + 1 : ln.rindex(")")].split(", ") for ln in launches]
    launch = next(a for a in args if copy in a)
    stored = [a for a in launch if a.startswith("buf")]
    assert stored == [copy], launch  # the image copied once, into one buffer
    assert call.count(f"torch.convolution({copy},") == 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_a_convolutions_bias_fuses_into_what_reads_it(device, dtype, dims):
    if dtype == torch.bfloat16 and device == "cpu" and dims != 2:
        pytest.skip("slow in the interpreter; two dimensions cover the CPU")
    torch.manual_seed(0)
    conv = getattr(torch.nn, f"Conv{dims}d")
    net = torch.nn.Sequential(conv(6, 10, 3, padding=1), torch.nn.GELU())
    net = net.to(device, dtype).eval()
    x = torch.randn(2, 6, *[5, 7, 3][:dims], device=device, dtype=dtype)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    out, expected, graph = _inference(net, x, tol=tol)
    assert graph.fallbacks == []
    assert len(graph.kernel_names) == 1  # the bias add and the GELU
    assert graph.kernel_names[0].endswith("fused_convolution_gelu_0")
    call = graph.source[graph.source.index("def call"):]
    assert ", None, [1" in call  # the convolution is called without its bias


class UNetStep(torch.nn.Module):  # down, up, and a skip joined along the channels
    def __init__(self, c=72):
        super().__init__()
        self.down = torch.nn.Conv2d(c, c, 3, 2, 1)
        self.up = torch.nn.ConvTranspose2d(c, c, 2, 2)
        self.fuse = torch.nn.Conv2d(2 * c, 96, 3, 1, 1)  # halving would keep NCHW
        self.bn = torch.nn.BatchNorm2d(96)

    def forward(self, x):
        y = F.relu(self.down(x))
        z = self.up(y) + F.interpolate(y, scale_factor=2.0, mode="bilinear")
        return F.relu(self.bn(self.fuse(torch.cat([z, x], dim=1))))


class Classifier(torch.nn.Module):  # to a 1x1 image, flattened into a linear head
    def __init__(self, c=72):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, c, 3)
        self.pool = torch.nn.MaxPool2d(2, ceil_mode=True)
        self.head = torch.nn.Linear(c, 5)

    def forward(self, x):
        y = self.pool(F.relu(self.conv(x)))  # (N, c, 1, 1) from a 4x4 input
        return self.head(y.flatten(1)), y  # the feature map is returned too


OTHER_GRAPHS = {
    "unet step, bilinear up, cat of channels": (UNetStep, (2, 72, 6, 4)),
    "to 1x1, flatten, head; a feature map returned": (Classifier, (3, 8, 4, 4)),
    "one image": (Classifier, (1, 8, 4, 4)),
}


def _other_graph_params():
    """Every graph in both layouts; the U-Net step from NCHW (8 s) is marked slow."""
    for case in OTHER_GRAPHS:
        for layout in ("nchw", "channels_last"):
            slow = case.startswith("unet") and layout == "nchw"
            yield pytest.param(case, layout, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case, layout", list(_other_graph_params()))
def test_other_graphs_run_channels_last_like_eager(case, layout, device, caplog):
    make, shape = OTHER_GRAPHS[case]
    torch.manual_seed(0)
    model = make().to(device)
    x = torch.randn(shape, device=device)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    ours = copy.deepcopy(model)
    with caplog.at_level(logging.INFO, logger="minductor"):
        out, grads, buffers, graphs = train_steps(ours, x, 2, True)
    assert "layout: channels-last" in caplog.text
    out_e, grads_e, buffers_e, _ = train_steps(model, x, 2, False)
    for o, e in zip(out if isinstance(out, tuple) else (out,),
                    out_e if isinstance(out_e, tuple) else (out_e,)):
        strides = [(a, b) for n, a, b in zip(o.shape, o.stride(), e.stride()) if n > 1]
        assert all(a == b for a, b in strides)  # sizes of 1 have no stride to keep
        torch.testing.assert_close(o, e, atol=1e-4, rtol=1e-4)
    for name, g in grads_e.items():
        torch.testing.assert_close(grads[name], g, atol=1e-3, rtol=1e-4, msg=name)
    for name, b in buffers_e.items():
        torch.testing.assert_close(buffers[name], b, atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_training_channels_last_like_eager(device):
    # bf16 gradients against a float32 run of the same model: within a few times
    # eager's own distance from it (one step of one small block: a handful of
    # roundings decide the largest error; a wrong layout is off by the whole scale)
    torch.manual_seed(0)
    model = Bottleneck().to(device)
    x = torch.randn(2, 72, 5, 6, device=device)
    _, grads32, _, _ = train_steps(copy.deepcopy(model), x, 1, False)
    half = model.to(torch.bfloat16)
    ours = copy.deepcopy(half)
    _, grads, _, _ = train_steps(ours, x.bfloat16(), 1, True)
    _, grads_e, _, _ = train_steps(half, x.bfloat16(), 1, False)
    for name, ref in grads32.items():
        ours_err = (grads[name].float() - ref).abs().max().item()
        eager_err = (grads_e[name].float() - ref).abs().max().item()
        scale = ref.abs().max().item()
        assert ours_err <= 4 * eager_err + 1e-2 * scale, (name, ours_err, eager_err)


def test_other_ranks_and_dynamic_sizes_keep_their_layouts():
    x3, w3 = torch.randn(2, 16, 4, 4, 4), torch.randn(96, 16, 3, 3, 3)
    assert _decide(lambda x, w: F.conv3d(x, w), x3, w3) == (False, "no 2-d convolution")
    x1, w1 = torch.randn(2, 16, 9), torch.randn(96, 16, 3)
    assert _decide(lambda x, w: F.conv1d(x, w), x1, w1) == (False, "no 2-d convolution")
    torch._dynamo.reset()
    x, w = torch.randn(2, 16, 6, 6), torch.randn(96, 16, 3, 3)
    fn = torch.compile(lambda x, w: F.conv2d(x, w).relu(), backend="minductor",
                       dynamic=True)
    for n in (2, 3):
        xs = torch.randn(n, 16, 6, 6)
        torch.testing.assert_close(fn(xs, w), F.conv2d(xs, w).relu(), atol=1e-4,
                                   rtol=1e-4)
