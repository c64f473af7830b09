"""Matmuls, convolutions and attention are extern kernels: ATen (cuBLAS, cuDNN) called
from the wrapper, matmuls writing into planned buffers with out=, and the pointwise work
around them fused into generated kernels."""

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, randn, run

from minductor import extern
from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch12]


@pytest.fixture
def pads_float32(monkeypatch):
    """Padding as with TF32 matmuls: float32 operands padded too. The padding tests run
    in float32, whose matmuls stay exact in IEEE arithmetic on both devices."""
    monkeypatch.setattr(extern, "_pads", lambda dtype: dtype.is_floating_point)


MATMULS = {
    "mm_odd": (lambda a, b: a @ b, [(5, 7), (7, 3)]),
    "mm_transposed": (lambda a, b: a.t() @ b.t(), [(7, 5), (3, 7)]),
    "mm_strided": (lambda a, b: a[::2, 1:] @ b, [(9, 8), (7, 4)]),
    "mm_vector_like": (lambda a, b: a @ b, [(1, 6), (6, 1)]),
    "bmm": (lambda a, b: torch.bmm(a, b), [(3, 5, 7), (3, 7, 2)]),
    "bmm_transposed": (lambda a, b: a @ b.transpose(1, 2), [(2, 5, 3), (2, 4, 3)]),
    "matmul_3d_2d": (lambda a, b: a @ b, [(2, 5, 7), (7, 3)]),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), [(3,), (5, 7), (7, 3)]),
    "addmm_scaled": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        [(5, 3), (5, 7), (7, 3)],
    ),
    "baddbmm": (
        lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=-1.0),
        [(1, 5, 1), (2, 5, 7), (2, 7, 3)],
    ),
    "linear_3d": (lambda x, w, b: F.linear(x, w, b), [(2, 3, 7), (5, 7), (5,)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(MATMULS))
def test_matmuls_match_eager_without_fallback(case, device):
    fn, shapes = MATMULS[case]
    args = [randn(*s, device=device) for s in shapes]
    with record_compiled() as graphs:
        kernels, fallbacks = run(fn, *args)
    assert fallbacks == []
    assert "out=buf" in graphs[0].source  # the product lands in a planned buffer


@pytest.mark.parametrize("device", DEVICES)
def test_linear_bias_gelu_is_one_mm_and_one_kernel(device):
    x, w, b = (randn(*s, device=device) for s in [(6, 9), (11, 9), (11,)])
    with record_compiled() as graphs:
        kernels, fallbacks = run(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b)
    source = graphs[0].source
    assert source.count("extern_kernels.mm(") == 1
    assert "extern_kernels.addmm" not in source  # the bias moved into the kernel
    assert len(kernels) == 1 and "addmm" in kernels[0] and "gelu" in kernels[0]
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("after", ["gelu", "residual add"])
def test_linear_on_3d_is_unfused_through_the_view(device, after):
    """A Linear over (batch, sequence, features) is addmm, a view back to 3-d, then the
    pointwise op: the view must not hide it. The bias joins the pointwise kernel."""
    x, w, b = (randn(*s, device=device) for s in [(1, 5, 9), (9, 9), (9,)])
    if after == "gelu":
        fn = lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh")  # noqa: E731
    else:
        fn = lambda x, w, b: x + F.linear(x, w, b)  # noqa: E731
    with record_compiled() as graphs:
        kernels, fallbacks = run(fn, x, w, b)
    source = graphs[0].source
    assert "extern_kernels.addmm" not in source and source.count("extern_kernels.mm(") == 1
    assert len(kernels) == 1 and fallbacks == []  # bias, view and op: one kernel


@pytest.mark.parametrize("device", DEVICES)
def test_addmm_stays_whole_when_a_view_of_it_is_returned(device):
    x, w, b = (randn(*s, device=device) for s in [(2, 5, 9), (9, 9), (9,)])
    with record_compiled() as graphs:
        run(lambda x, w, b: (F.linear(x, w, b), F.linear(x, w, b).relu()), x, w, b)
    assert "extern_kernels.addmm(" in graphs[0].source


@pytest.mark.parametrize("device", DEVICES)
def test_addmm_stays_whole_when_its_result_is_returned(device):
    x, w, b = (randn(*s, device=device) for s in [(6, 9), (11, 9), (11,)])
    with record_compiled() as graphs:
        kernels, _ = run(lambda x, w, b: F.linear(x, w, b), x, w, b)
    assert "extern_kernels.addmm(" in graphs[0].source
    assert kernels == []


@pytest.mark.parametrize("device", DEVICES)
def test_addmm_with_beta_zero_ignores_a_nan_bias(device):
    a, b = randn(4, 5, device=device), randn(5, 3, device=device)
    bias = torch.full((3,), float("nan"), device=device)
    with record_compiled() as graphs:
        run(lambda c, a, b: torch.addmm(c, a, b, beta=0).relu(), bias, a, b)
    assert "extern_kernels.addmm(" in graphs[0].source  # not unfused into 0 * nan


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matmul_with_epilogue(device, dtype):
    a, b = (
        randn(8, 16, device=device, dtype=dtype),
        randn(16, 4, device=device, dtype=dtype),
    )
    kernels, fallbacks = run(
        lambda a, b: (a @ b).relu() * 2, a, b, atol=2e-2, rtol=2e-2
    )
    assert fallbacks == [] and len(kernels) == 1


def test_integer_matmul_falls_back():
    # cuBLAS has no integer kernel; on the CPU ATen has one, and the op falls back to it
    a = torch.randint(-3, 4, (4, 5))
    b = torch.randint(-3, 4, (5, 2))
    _, fallbacks = run(lambda a, b: a @ b + 1, a, b)
    assert fallbacks == ["aten.mm.default"]


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_gradients_use_extern_mm(device):
    torch._dynamo.reset()
    x = randn(5, 7, device=device).requires_grad_()
    w = randn(3, 7, device=device).requires_grad_()
    b = randn(3, device=device).requires_grad_()
    ref = [t.detach().clone().requires_grad_() for t in (x, w, b)]

    def f(x, w, b):
        return F.gelu(F.linear(x, w, b)).pow(2).sum()

    with record_compiled() as graphs:
        torch.compile(f, backend="minductor")(x, w, b).backward()
    f(*ref).backward()
    for got, want in zip((x, w, b), ref, strict=True):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-4, rtol=1e-4)
    forward, backward = graphs
    assert backward.source.count("extern_kernels.mm(") == 2  # dx and dw
    assert forward.fallbacks == [] and backward.fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_convolution_and_attention_are_extern_kernels_not_fallbacks(device):
    torch._dynamo.reset()
    x = randn(2, 3, 9, 7, device=device).requires_grad_()
    w = randn(4, 3, 3, 3, device=device).requires_grad_()
    q = randn(2, 2, 5, 4, device=device).requires_grad_()

    def f(x, w, q):
        conv = F.conv2d(x, w, padding=1).relu().sum()
        attention = F.scaled_dot_product_attention(q, q * 2, q, is_causal=True)
        return conv + attention.pow(2).sum()

    ref = [t.detach().clone().requires_grad_() for t in (x, w, q)]
    with record_compiled() as graphs:
        out = torch.compile(f, backend="minductor")(x, w, q)
        out.backward()
    expected = f(*ref)
    expected.backward()
    torch.testing.assert_close(out, expected, atol=1e-3, rtol=1e-4)
    for got, want in zip((x, w, q), ref, strict=True):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-3, rtol=1e-3)
    for graph in graphs:
        assert graph.fallbacks == []
        assert "convolution" in graph.source  # torch.convolution or its backward
        assert "._scaled_dot_product" in graph.source  # torch.* or aten.*


def test_matmul_with_dynamic_sizes_compiles_once():
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: (a @ b).tanh(), backend="minductor", dynamic=True)
    with record_compiled() as graphs:
        for n, k, m in ((5, 7, 3), (9, 2, 6)):
            a, b = torch.randn(n, k), torch.randn(k, m)
            torch.testing.assert_close(f(a, b), (a @ b).tanh())
    assert len(graphs) == 1 and graphs[0].fallbacks == []
    assert "extern_kernels.mm(" in graphs[0].source


PADDED = {
    "mm then pointwise": (lambda a, b: (a @ b) * 2, [(8, 64), (64, 1027)]),
    "mm returned": (lambda a, b: a @ b, [(8, 64), (64, 1027)]),
    "view of mm returned": (
        lambda a, b: (a @ b).view(2, 4, 1027),
        [(8, 64), (64, 1027)],
    ),
    "linear, 3-d": (lambda x, w: F.linear(x, w), [(2, 3, 64), (1029, 64)]),
    "K padded": (lambda g, w: g @ w, [(8, 1027), (1027, 64)]),
    "M padded": (lambda g, h: g.t() @ h, [(8, 1027), (8, 64)]),
    "M, K and N padded": (lambda a, b: a @ b, [(1025, 1026), (1026, 1027)]),
    "linear with bias returned": (F.linear, [(2, 3, 64), (1027, 64), (1027,)]),
    "addmm, 2-d bias": (torch.addmm, [(1, 1027), (8, 64), (64, 1027)]),
    "addmm, bias and M padded": (torch.addmm, [(64,), (1025, 8), (8, 64)]),
    "addmm scaled, bias padded": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        [(1027,), (8, 64), (64, 1027)],
    ),
}


def memory_order(t: torch.Tensor) -> list[int]:
    """t's dimensions from the innermost out (size-1 dimensions do not count)."""
    dims = [d for d in range(t.dim()) if t.shape[d] != 1]
    return sorted(dims, key=t.stride)


@pytest.mark.usefixtures("pads_float32")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "case",  # all three padded at once: 13 s in the interpreter, marked slow
    [
        pytest.param(c, marks=pytest.mark.slow) if c == "M, K and N padded" else c
        for c in PADDED
    ],
)
def test_long_unaligned_matmul_dims_are_padded_and_outputs_are_eagers(case, device):
    fn, shapes = PADDED[case]
    args = [randn(*s, device=device) for s in shapes]
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    expected = fn(*args)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    # eager's memory order; a padded result is returned as a window, rows and all
    assert memory_order(out) == memory_order(expected)
    flat, flat_expected = out.reshape(-1), expected.reshape(-1)
    torch.testing.assert_close(flat, flat_expected, atol=1e-4, rtol=1e-4)
    source = graphs[0].source
    assert "extern_kernels.mm(" in source or "extern_kernels.addmm(" in source
    assert graphs[0].fallbacks == []
    sizes = [d for shape in shapes for d in shape if d > 1000]
    for d in sizes:  # each long odd dimension is padded to a multiple of 4 floats
        assert str(-(-d // 4) * 4) in source
    # nothing copies the padded result out: the only kernels pad operands, or compute
    # what the function asks of the product (the 2-d bias's add, the doubling)
    others = [k for k in graphs[0].kernel_names if "pad" not in k]
    assert len(others) == (case in ("mm then pointwise", "addmm, 2-d bias")), others


@pytest.mark.usefixtures("pads_float32")
@pytest.mark.parametrize("device", DEVICES)
def test_padded_output_rows_keep_their_padding(device):
    x, w = randn(2, 3, 64, device=device), randn(1027, 64, device=device)
    bias = randn(1027, device=device)
    torch._dynamo.reset()
    with record_compiled() as graphs:
        logits = torch.compile(F.linear, backend="minductor")(x, w, bias)
    assert logits.stride() == (3 * 1028, 1028, 1)  # rows of 1028, 1027 of them read
    assert "extern_kernels.addmm(" in graphs[0].source  # cuBLAS adds the padded bias
    expected = F.linear(x, w, bias)
    # what a loss does with logits: merge the dimensions before the padded one
    torch.testing.assert_close(
        logits.view(-1, 1027), expected.view(-1, 1027), atol=1e-4, rtol=1e-4
    )


@pytest.mark.usefixtures("pads_float32")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("returned", [False, True])
def test_padded_windows_saved_for_backward_give_eagers_gradients(returned, device):
    """The forward hands the backward a padded window (the product, which the square's
    backward needs); the backward reads it through its real strides."""
    x = randn(5, 32, device=device).requires_grad_()
    w = randn(1027, 32, device=device).requires_grad_()

    def fn(x, w):
        y = x @ w.t()
        loss = (y * y).sum()
        return (loss, y) if returned else loss

    expected = torch.autograd.grad(fn(x, w)[0] if returned else fn(x, w), (x, w))
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="minductor")
    result = compiled(x, w)
    loss = result[0] if returned else result
    if returned:
        assert result[1].stride() == (1028, 1)
        torch.testing.assert_close(result[1], x @ w.t(), atol=1e-4, rtol=1e-4)
    got = torch.autograd.grad(loss, (x, w))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-3, rtol=1e-4)


@pytest.mark.usefixtures("pads_float32")
@pytest.mark.parametrize("device", DEVICES)
def test_aligned_or_short_rows_are_not_padded(device):
    a = randn(8, 64, device=device)
    for row in (1024, 1001):  # aligned; unaligned but short
        torch._dynamo.reset()
        with record_compiled() as graphs:
            torch.compile(lambda a, b: a @ b * 2, backend="minductor")(
                a, randn(64, row, device=device)
            )
        assert f"({row}, 1), device=" in graphs[0].source


@pytest.mark.usefixtures("pads_float32")
@pytest.mark.parametrize("device", DEVICES)
def test_padded_matmuls_give_eagers_gradients(device):
    """An output projection of 1027 classes: forward N, backward K and M padded."""
    x = randn(6, 32, device=device).requires_grad_()
    w = randn(1027, 32, device=device).requires_grad_()

    def loss(x, w):
        return torch.log_softmax(x @ w.t(), -1)[:, 3].sum()

    expected = torch.autograd.grad(loss(x, w), (x, w))
    torch._dynamo.reset()
    with record_compiled() as graphs:
        compiled = torch.compile(loss, backend="minductor")
        got = torch.autograd.grad(compiled(x, w), (x, w))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
    assert all(g.fallbacks == [] for g in graphs)
    assert sum("1028" in g.source for g in graphs) == 2  # padded in both graphs


@pytest.mark.usefixtures("pads_float32")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_a_gradient_both_backward_matmuls_read_is_stored_padded(bias, device):
    """The logits' gradient feeds grad_input (K padded) and, transposed, grad_weight
    (M padded), and with a bias a sum over its rows: the kernel computing it stores it
    padded with zeros, and both matmuls read windows of it; only the weight is copied.
    No compact copy of the gradient exists."""
    x = randn(6, 32, device=device).requires_grad_()
    w = randn(1027, 32, device=device).requires_grad_()
    b = randn(1027, device=device).requires_grad_()
    target = torch.arange(6, device=device)

    def loss(x, w, b):
        return F.cross_entropy(F.linear(x, w, b if bias else None), target)

    expected = torch.autograd.grad(loss(x, w, b), (x, w, b) if bias else (x, w))
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(loss, backend="minductor")(x, w, b)
        got = torch.autograd.grad(out, (x, w, b) if bias else (x, w))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
    backward = graphs[1].source
    lines = backward.splitlines()
    pads = [  # launch lines, not the site's definition
        ln
        for ln in lines
        if ln.strip().startswith("launch_triton_poi_fused_pad") and "CallSite" not in ln
    ]
    assert len(pads) == 1, pads  # the weight's
    assert "(6, 1028), (1028, 1)" in backward  # the gradient, stored padded
    assert "empty_strided_cpu((6, 1027)" not in backward
    assert "empty_strided_cuda((6, 1027)" not in backward
    assert backward.count("extern_kernels.mm(") == 2


@pytest.mark.usefixtures("pads_float32")
@pytest.mark.parametrize("device", DEVICES)
def test_a_returned_matmul_operand_keeps_eagers_strides(device):
    """A value that a matmul reads and the graph returns (here through a view) is not
    stored padded: the output has eager's strides and values."""
    x = randn(6, 1027, device=device)
    w = randn(1027, 8, device=device)

    def f(x, w):
        g = x.exp()
        return g.view(6, 13, 79), g @ w

    expected = f(x, w)
    torch._dynamo.reset()
    got = torch.compile(f, backend="minductor")(x, w)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
        assert g.stride() == e.stride()


@pytest.fixture
def fp32_precision():
    """Sets torch.backends.cuda.matmul.fp32_precision for one test."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision
    yield lambda value: setattr(matmul, "fp32_precision", value)
    matmul.fp32_precision = saved


def test_float32_is_padded_only_when_matmuls_run_as_tf32(fp32_precision):
    # tensor cores want aligned dimensions; float32 reaches them only as TF32
    fp32_precision("ieee")
    assert extern._pads(torch.bfloat16) and extern._pads(torch.float16)
    assert not extern._pads(torch.float32) and not extern._pads(torch.float64)
    assert not extern._pads(torch.int16)
    fp32_precision("tf32")
    assert extern._pads(torch.float32) and not extern._pads(torch.float64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_unaligned_vocabulary_pads_half_precision_matmuls_only(
    dtype, device, fp32_precision
):
    fp32_precision("ieee")
    x, w = (
        randn(6, 32, device=device, dtype=dtype),
        randn(1027, 32, device=device, dtype=dtype),
    )
    torch._dynamo.reset()
    with record_compiled() as graphs:
        logits = torch.compile(lambda x, w: x @ w.t(), backend="minductor")(x, w)
    torch.testing.assert_close(logits, x @ w.t(), atol=1e-2, rtol=1e-2)
    padded = dtype == torch.bfloat16  # rows of 1032: 16 bytes of bfloat16 are 8
    assert logits.stride() == ((1032, 1) if padded else (1027, 1))
    assert ("pad" in " ".join(graphs[0].kernel_names)) == padded
