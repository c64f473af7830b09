"""Cases where eager's rules differ from the obvious kernel: booleans that add as a
logical or, integer powers that a floating-point pow would round, reductions of a 0-d
tensor over its "dimension 0". Each compiled result must be eager's exactly, or the op
must go to ATen (and say so)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, run

pytestmark = [pytest.mark.e2e, pytest.mark.ch06]


BOOL_ARITHMETIC = {
    "add": lambda a, b: a + b,  # a logical or: True + True is True
    "add alpha=True": lambda a, b: torch.add(a, b, alpha=True),
    "mul": lambda a, b: a * b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "add then sum": lambda a, b: (a + b).sum(),
    "add with int": lambda a, b: a + b.to(torch.int32),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(BOOL_ARITHMETIC))
def test_arithmetic_on_bool_tensors_is_eagers(case, device):
    a = torch.tensor([True, False, True, False, True], device=device)
    b = torch.tensor([True, True, False, False, True], device=device)
    _, fallbacks = run(BOOL_ARITHMETIC[case], a, b, atol=0, rtol=0)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_integer_powers_are_exact_or_left_to_aten(device):
    base = torch.tensor([-3, -1, 0, 2, 5, 7, 3, 11], device=device)
    exponent = torch.tensor([0, 1, 2, 3, 1, 2, 20, 9], device=device)
    _, fallbacks = run(lambda b, e: b**e, base, exponent, atol=0, rtol=0)
    assert fallbacks == ["aten.pow.Tensor_Tensor"]  # a float pow: 5**1 may be 4
    _, fallbacks = run(lambda b: b**3 + b**19, base, atol=0, rtol=0)
    assert fallbacks == ["aten.pow.Tensor_Scalar"]  # 19: too many products to inline


ZERO_DIM = {
    "sum": lambda t: t.sum(0),
    "sum keepdim": lambda t: t.sum(-1, keepdim=True),
    "mean": lambda t: t.mean(0),
    "amax": lambda t: t.amax(0),
    "argmax": lambda t: t.argmax(0),
    "any": lambda t: t.any(0),
    "var": lambda t: t.var(0, correction=0),
    "logsumexp": lambda t: t.logsumexp(0),
    "squeeze": lambda t: (t * 2).squeeze(0),
    "prod": lambda t: t.prod(0),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(ZERO_DIM))
def test_reductions_of_a_0d_tensor_over_dim_0(case, device):
    x = torch.tensor(-3.5, device=device)
    _, fallbacks = run(ZERO_DIM[case], x, atol=0, rtol=0)
    assert fallbacks == []


CONSTANT_REDUCTIONS = {
    "sum of ones": lambda x: torch.ones_like(x).sum(),
    "argmax of zeros": lambda x: torch.zeros_like(x).argmax(1),
    "masked var": lambda x: torch.masked.var(x, 1, mask=x > 0),
    "full then amax": lambda x: torch.full_like(x, 2.0).amax(0) + x[0],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CONSTANT_REDUCTIONS))
def test_reductions_of_constant_bodies(case, device):
    """A constant is [1] in a pointwise kernel and [1, 1] in a reduction kernel."""
    x = torch.randn(5, 7, device=device)
    _, fallbacks = run(CONSTANT_REDUCTIONS[case], x)
    assert fallbacks == []


def test_complex_values_and_effect_tokens_run_with_aten():
    """No Triton kernel computes complex numbers; Dynamo's with_effects is not ATen."""
    x = torch.randn(4, 4)
    kernels, fallbacks = run(lambda x: torch.fft.fft2(x).abs() * 2, x)
    # the complex conversion, the transform and abs run in ATen; the * 2 is a kernel
    complex_ops = ["aten._to_copy.default", "aten._fft_c2c.default", "aten.abs.default"]
    assert fallbacks == complex_ops
    assert len(kernels) == 1
    run(lambda x: torch.view_as_real(torch.fft.fft(x)) + 1, x)
    run(torch.linalg.inv, x + 4 * torch.eye(4))  # a graph with with_effects: all ATen


@pytest.mark.parametrize("device", DEVICES)
def test_hardtanh_of_integers_keeps_their_dtype(device):
    x = torch.arange(-4, 5, device=device)
    fn = lambda x: torch.nn.functional.hardtanh(x, -2.5, 3.0)  # noqa: E731
    _, fallbacks = run(fn, x, atol=0, rtol=0)
    assert fallbacks == []


EMPTY = {  # (function, input shapes); the inputs are float32 unless a dtype is given
    "softmax over a zero-size dim": (lambda x: torch.softmax(x, 1), [(3, 0)]),
    "log_softmax, empty rows": (lambda x: torch.log_softmax(x, 1), [(0, 4)]),
    "softmin over a zero-size dim": (lambda x: F.softmin(x, 0), [(0, 2, 3)]),
    "half softmax to float": (lambda x: torch.softmax(x, -1, torch.float32), [(2, 0)]),
    "cat of 1-d empties": (lambda a, b: torch.cat([a, b]), [(0,), (0,)]),
    "cat of empty pieces": (lambda a, b: torch.cat([a, b], 1), [(3, 0), (3, 0)]),
    "stack of empties": (lambda a, b: torch.stack([a, b], 1), [(0,), (0,)]),
    "cat, 1-d empty skipped": (lambda a, b: torch.cat([a, b]) * 2, [(0,), (2, 3)]),
    "transpose of 0-d": (lambda x: torch.transpose(x, 0, -1) * 2, [()]),
    "t of 0-d": (lambda x: x.t() + 1, [()]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(EMPTY))
def test_empty_and_0d_shapes_are_eagers(case, device):
    fn, shapes = EMPTY[case]
    dtype = torch.float16 if case.startswith("half") else torch.float32
    args = [torch.randn(s, device=device).to(dtype) for s in shapes]
    _, fallbacks = run(fn, *args)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_cat_promotes_over_skipped_empty_inputs(device):
    """A skipped 1-d empty float64 input still makes the result float64, as in eager."""
    empty = torch.zeros(0, dtype=torch.float64, device=device)
    x = torch.randn(2, 3, device=device)
    run(lambda e, x: torch.cat([e, x]), empty, x, atol=0, rtol=0)
    run(lambda e, x: torch.cat([x, e, x.to(torch.int32)]), empty, x, atol=0, rtol=0)


CHANNELS_LAST = {
    # the output itself: eager's strides
    "output": lambda x: (x + 1).clone(memory_format=torch.channels_last),
    # read by a fallback (cumsum), which is given eager's strides
    "into a fallback": lambda x: torch.cumsum(
        (x * 2).contiguous(memory_format=torch.channels_last), 1
    ),
    # viewed, then reduced
    "viewed": lambda x: (x.exp().clone(memory_format=torch.channels_last))
    .flatten(2)
    .sum(-1),
    # interpolate of a channels-last image clones to channels-last in its decomposition
    # (on CUDA only from 16 channels on: below, torch's decomposition returns contiguous
    # strides where eager's CUDA kernel keeps channels-last; see the test)
    "interpolate": lambda x: F.interpolate(
        x.contiguous(memory_format=torch.channels_last) * 3,
        size=(5, 7),
        mode="bilinear",
        align_corners=False,
    ),
    "to with a dtype": lambda x: (x - 1).to(
        torch.float16, memory_format=torch.channels_last
    ),
}


@pytest.mark.usefixtures("cumsum_falls_back")  # the stand-in for a fallback
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CHANNELS_LAST))
def test_a_memory_format_changes_no_value(case, device):
    # torch decomposes interpolate before any backend sees it, and its decomposition
    # gives a CUDA image of fewer than 16 channels contiguous strides (a speed
    # heuristic) where eager's kernel keeps channels-last; Inductor's strides are the
    # decomposition's too. The values agree at any width.
    channels = 16 if case == "interpolate" else 3
    x = torch.randn(2, channels, 4, 6, device=device)
    fn = CHANNELS_LAST[case]
    _, fallbacks = run(fn, x, atol=1e-3 if case.startswith("to") else 1e-5, rtol=1e-5)
    assert fallbacks == (["aten.cumsum.default"] if case == "into a fallback" else [])
    torch._dynamo.reset()
    assert torch.compile(fn, backend="minductor")(x).stride() == fn(x).stride()


def _relative_positions(x, table):  # BEiT: a table built on the CPU at every call
    coords = torch.arange(4)
    rel = (coords[:, None] - coords[None] + 3).flatten()
    return x + table[torch.cat([rel, rel[:2]])]


CPU_IN_GPU = {  # (function, its inputs on the GPU, its inputs on the CPU)
    "relative positions": (_relative_positions, [(18,), (7,)], []),
    "a CPU number computed in the graph": (
        lambda x: x * torch.tensor(4.0).sqrt() + torch.tensor([1.0, 2.0]).sum(),
        [(5,)],
        [],
    ),
    "a CPU input read on both devices": (lambda x, i: (x[i], i * 2), [(6,)], [(3,)]),
    "a GPU input and a CPU input, apart": (
        lambda x, i: (x.sin(), i.cos()),  # each result on its input's device
        [(5,)],
        [(3,)],
    ),
    "index_put at indices built on the CPU": (
        lambda x, v: x.index_put((torch.arange(3) * 2,), v, accumulate=True),
        [(7,), (3,)],
        [],
    ),
}


@pytest.mark.cuda
@pytest.mark.parametrize("case", list(CPU_IN_GPU))
def test_cpu_work_inside_a_gpu_graph_runs_on_the_cpu(case):
    fn, gpu, cpu = CPU_IN_GPU[case]
    args = [torch.randn(s, device="cuda") for s in gpu]
    args += [torch.tensor([4, 0, 5][: s[0]]) for s in cpu]
    _, fallbacks = run(fn, *args)
    assert fallbacks  # the CPU's share, through ATen
    if case == "relative positions":
        assert "aten.arange.default" in fallbacks and "aten.cat.default" in fallbacks


@pytest.mark.cuda
def test_a_cpu_tensor_saved_for_the_backward_stays_on_the_cpu():
    # Swin V2: the forward indexes a GPU table with positions built on the CPU, and the
    # backward receives them, a CPU input beside GPU ones
    table = torch.randn(7, device="cuda", requires_grad=True)
    x = torch.randn(18, device="cuda", requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(_relative_positions, backend="minductor")
    out = compiled(x, table)
    (out * out).sum().backward()
    got = (out.detach(), x.grad.clone(), table.grad.clone())
    x.grad = table.grad = None
    ref = _relative_positions(x, table)
    (ref * ref).sum().backward()
    for g, e in zip(got, (ref.detach(), x.grad, table.grad)):
        torch.testing.assert_close(g, e)
