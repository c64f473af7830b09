"""Attention through every SDPA backend, and fallbacks whose results are not all there.

ATen's attention kernels return tuples whose schema promises more than a call may give:
a log-sum-exp only when the backward will need one (CUDA leaves it out, `None` in
Python), Philox seed and offset tensors, sizes. The wrapper must pick out only the
results the graph reads (the scheduler drops the others), and each backend, with each
kind of mask Hugging Face builds and with grouped-query attention, must match eager
forward and backward. The CPU cases run through the interpreter; the backends are
CUDA's.
"""

import re

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, randn, run
from torch.nn.attention import SDPBackend, sdpa_kernel

import minductor  # noqa: F401
from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch12]

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
MASKS = ["none", "causal", "additive", "padding"]


def attention_inputs(device, dtype, heads=4, kv_heads=4, seq=9, dim=16, grad=False):
    q = randn(2, heads, seq, dim, device=device, dtype=dtype)
    k = randn(2, kv_heads, seq, dim, device=device, dtype=dtype)
    v = randn(2, kv_heads, seq, dim, device=device, dtype=dtype)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def masked_attention(mask: str, gqa: bool = False):
    def attend(q, k, v):
        kwargs = {"enable_gqa": True} if gqa else {}
        seq = q.shape[-2]
        if mask == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kwargs)
        if mask == "additive":  # HF's padding mask: (B, 1, T, S) of 0 or the minimum
            bias = torch.zeros(q.shape[0], 1, seq, seq, device=q.device, dtype=q.dtype)
            bias[1, ..., -2:] = torch.finfo(q.dtype).min
            return F.scaled_dot_product_attention(q, k, v, bias, **kwargs)
        if mask == "padding":  # a boolean mask per batch row
            keep = torch.ones(q.shape[0], 1, 1, seq, dtype=torch.bool, device=q.device)
            keep[1, ..., -3:] = False
            return F.scaled_dot_product_attention(q, k, v, keep, **kwargs)
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    return attend


def eager_or_skip(fn, *args):
    """Eager's answer, or a skip where this backend refuses these inputs."""
    try:
        return fn(*args)
    except RuntimeError as e:  # "No available kernel", unsupported dtype or mask
        pytest.skip(f"eager refuses: {str(e).splitlines()[0]}")


def check_forward(fn, args, tolerance):
    with torch.no_grad():
        expected = eager_or_skip(fn, *args)
        _, fallbacks = run(fn, *args, atol=tolerance, rtol=tolerance, expected=expected)
    return fallbacks


def check_backward(fn, args, tolerance):
    def loss(q, k, v):
        return fn(q, k, v).float().pow(2).sum()

    expected = eager_or_skip(loss, *args)
    grads = torch.autograd.grad(expected, args)
    torch._dynamo.reset()
    copies = [a.detach().clone().requires_grad_() for a in args]
    got = torch.compile(loss, backend="minductor")(*copies)
    got_grads = torch.autograd.grad(got, copies)
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)
    for g, e in zip(got_grads, grads, strict=True):
        torch.testing.assert_close(g, e, atol=tolerance * 10, rtol=tolerance * 10)


@pytest.mark.cuda
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_cuda_backend_matches_eager_forward_and_backward(backend, mask, dtype):
    fn = masked_attention(mask)
    tolerance = 2e-2
    with sdpa_kernel(BACKENDS[backend]):
        fallbacks = check_forward(fn, attention_inputs("cuda", dtype), tolerance)
        check_backward(fn, attention_inputs("cuda", dtype, grad=True), tolerance)
    assert not [f for f in fallbacks if "attention" in f]  # planned, not fallbacks


@pytest.mark.cuda
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_inference_reads_no_result_the_kernel_left_out(backend):
    """Under no_grad the CUDA kernels return no log-sum-exp: nothing may pick it."""
    q, k, v = attention_inputs("cuda", torch.bfloat16, seq=64, dim=64)
    fn = masked_attention("causal")
    with sdpa_kernel(BACKENDS[backend]), torch.no_grad():
        eager_or_skip(fn, q, k, v)
        torch._dynamo.reset()
        with record_compiled() as graphs:
            out = torch.compile(fn, backend="minductor")(q, k, v)
        torch.testing.assert_close(out, fn(q, k, v), atol=2e-2, rtol=2e-2)
    # the attention output is result 0; nothing else may be picked from a result tuple
    picked = re.findall(r"= (buf\d+\[\d+\])", graphs[0].source)
    assert all(p.endswith("[0]") for p in picked), picked


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", MASKS)
def test_attention_with_hf_masks_matches_eager(device, mask):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tolerance = 1e-4 if device == "cpu" else 2e-2
    fn = masked_attention(mask)
    check_forward(fn, attention_inputs(device, dtype), tolerance)
    check_backward(fn, attention_inputs(device, dtype, grad=True), tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_query_attention_matches_eager(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tolerance = 1e-4 if device == "cpu" else 2e-2
    fn = masked_attention("causal", gqa=True)
    args = attention_inputs(device, dtype, heads=4, kv_heads=2)
    check_forward(fn, args, tolerance)
    grad_args = attention_inputs(device, dtype, heads=4, kv_heads=2, grad=True)
    check_backward(fn, grad_args, tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_softmax_attention_is_two_matmuls_and_one_kernel(device):
    """HF's "eager" attention path: matmul, scale, mask, softmax, matmul."""

    def attend(q, k, v, bias):
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias
        return torch.softmax(scores, dim=-1) @ v

    q, k, v = attention_inputs(device, torch.float32)
    far = torch.arange(9, device=device) > 6
    bias = torch.zeros(9, device=device).masked_fill(far, -1e9)
    with torch.no_grad():
        kernels, fallbacks = run(attend, q, k, v, bias)
    assert fallbacks == []
    assert len(kernels) == 1  # scale, bias and softmax in one kernel between the bmms


@pytest.mark.parametrize("device", DEVICES)
def test_unused_results_of_a_multi_output_fallback_are_not_picked(device):
    def f(x):
        return torch.sort(x, 1)[0] + 1  # the indices are never read

    x = randn(4, 7, device=device)
    torch._dynamo.reset()
    with record_compiled() as graphs:
        torch.testing.assert_close(torch.compile(f, backend="minductor")(x), f(x))
    source = graphs[0].source
    assert "buf0[0]" in source and "buf0[1]" not in source


@pytest.mark.parametrize("device", DEVICES)
def test_an_op_called_for_its_effect_runs_and_returns_nothing(device):
    """aten._assert_async returns nothing; F.one_hot calls it on the CPU."""

    def checked(x):
        torch._assert_async((x > -100).all(), "too small")
        return x + 1

    def one_hot(x, idx):
        return F.one_hot(idx, 5).to(x.dtype) * x

    x = randn(4, 5, device=device)
    kernels, fallbacks = run(checked, x)
    assert fallbacks == ["aten._assert_async.msg"] and len(kernels) == 1  # all + add
    idx = torch.tensor([0, 2, 4, 1], device=device)
    kernels, fallbacks = run(one_hot, x, idx)
    assert set(fallbacks) <= {"aten._assert_async.msg"}  # its range checks
    if device == "cpu":  # on a GPU a failed device assert would end the process
        bad = torch.tensor([0, 2, -1, 1])
        with pytest.raises(RuntimeError, match="non-negative"):
            torch.compile(one_hot, backend="minductor")(x, bad)


@pytest.mark.cuda
def test_a_cpu_tensor_literal_moved_to_the_gpu():
    def f(x):
        scale = torch.tensor([1.0, 2.0, 3.0]).to(x.device)
        return x * scale + 1

    x = randn(4, 3, device="cuda")
    kernels, fallbacks = run(f, x)
    assert kernels  # the arithmetic is still a kernel on the GPU
    assert set(fallbacks) <= {"aten.lift_fresh_copy.default", "aten._to_copy.default"}


@pytest.mark.parametrize("device", DEVICES)
def test_safe_softmax_is_one_kernel_with_masked_rows_zero(device):
    """aten._safe_softmax (attention's math path, ViT): a row of -inf gives zeros."""

    def f(x):
        return torch.ops.aten._safe_softmax(x, -1) * 2

    x = randn(5, 7, device=device)
    x[1] = float("-inf")
    x[3, :4] = float("-inf")
    kernels, fallbacks = run(f, x)
    assert fallbacks == [] and len(kernels) == 1
    assert torch.compile(f, backend="minductor")(x)[1].eq(0).all()


def folded(fn, *args):
    """What the mask-folding pass makes of fn's attention calls: (mask, is_causal)."""
    from minductor.extern import fold_attention_masks

    calls = []

    def backend(gm, example_inputs):
        fold_attention_masks(gm, example_inputs, False)
        for n in gm.graph.nodes:
            if n.target is F.scaled_dot_product_attention:
                kw = {**dict(zip(("attn_mask", "dropout_p", "is_causal"), n.args[3:])),
                      **n.kwargs}  # fmt: skip
                calls.append((kw.get("attn_mask"), kw.get("is_causal", False)))
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend)(*args)
    torch.testing.assert_close(out, fn(*args), atol=1e-5, rtol=1e-5)
    return [(m if m is None else "kept", c) for m, c in calls]


def library_mask(kind, b, t, s=None, device="cpu", dtype=torch.bool):
    """Masks as a library builds them under torch.compile, from aranges."""
    s = t if s is None else s
    qi, ki = torch.arange(t, device=device)[:, None], torch.arange(s, device=device)
    keep = {"all": ki >= 0, "causal": qi >= ki, "window": (qi - ki).abs() < 2}[kind]
    keep = keep.expand(t, s)[None, None].expand(b, 1, t, s)
    if dtype == torch.bool:
        return keep
    zero = torch.zeros((), device=device, dtype=dtype)
    return torch.where(keep, zero, torch.finfo(dtype).min)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
@pytest.mark.parametrize("kind", ["all", "causal", "window"])
def test_constant_masks_are_dropped_or_made_causal(kind, dtype):
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, library_mask(kind, 2, 9, dtype=dtype))

    expected = {"all": (None, False), "causal": (None, True), "window": ("kept", False)}
    assert folded(fn, *attention_inputs("cpu", torch.float32)) == [expected[kind]]


def test_masks_known_only_at_run_time_are_kept():
    q, k, v = attention_inputs("cpu", torch.float32)
    keep = torch.ones(2, 1, 1, 9, dtype=torch.bool)  # a padding mask: an input

    def from_input(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, keep)

    def random(q, k, v):  # no input reaches it, but it is drawn anew each call
        return F.scaled_dot_product_attention(q, k, v, torch.rand(9, 9) >= 0)

    def written_later(q, k, v):
        mask = library_mask("all", 2, 9)
        mask = mask.clone()
        mask[..., 0] = False  # the value computed alone would keep everything
        return F.scaled_dot_product_attention(q, k, v, mask)

    def not_square(q, k, v):  # the lower triangle of 9 x 9 against 12 keys
        mask = library_mask("causal", 2, 9, 12)
        return F.scaled_dot_product_attention(q, k.repeat(1, 1, 2, 1)[:, :, :12],
                                              v.repeat(1, 1, 2, 1)[:, :, :12], mask)

    def written_through_a_view(q, k, v):
        mask = library_mask("all", 2, 9).clone()
        mask.narrow(-1, 0, 1).fill_(False)  # the write reaches mask through a view
        return F.scaled_dot_product_attention(q, k, v, mask)

    def written_in_place(q, k, v):
        mask = library_mask("all", 2, 9).clone()
        mask &= torch.arange(9) > 0
        return F.scaled_dot_product_attention(q, k, v, mask)

    assert folded(written_through_a_view, q, k, v) == [("kept", False)]
    assert folded(written_in_place, q, k, v) == [("kept", False)]
    assert folded(from_input, q, k, v, keep) == [("kept", False)]
    assert folded(random, q, k, v) == [("kept", False)]
    assert folded(written_later, q, k, v) == [("kept", False)]
    assert folded(not_square, q, k, v) == [("kept", False)]


def test_a_causal_mask_anded_with_a_mask_of_no_padding_is_causal():
    """What a library builds for a decoder with no padding: the triangle & all-true;
    operator.and_ combines them and writes nothing."""

    def fn(q, k, v):
        both = library_mask("causal", 2, 9) & library_mask("all", 2, 9)
        return F.scaled_dot_product_attention(q, k, v, both)

    assert folded(fn, *attention_inputs("cpu", torch.float32)) == [(None, True)]


def test_a_bias_with_other_values_is_kept():
    def alibi(q, k, v):
        pos = torch.arange(9)
        return F.scaled_dot_product_attention(q, k, v, -(pos[:, None] - pos).abs() * 0.5)

    assert folded(alibi, *attention_inputs("cpu", torch.float32)) == [("kept", False)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["all", "causal"])
def test_folded_masks_match_eager_forward_and_backward(device, kind):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tolerance = 1e-4 if device == "cpu" else 2e-2

    def fn(q, k, v):
        mask = library_mask(kind, 2, q.shape[-2], device=q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    args = attention_inputs(device, dtype, seq=33, dim=64)
    torch._dynamo.reset()
    with torch.no_grad(), record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
        torch.testing.assert_close(out, fn(*args), atol=tolerance, rtol=tolerance)
    source = graphs[0].source
    assert "torch.bool" not in source  # no mask is computed
    if device == "cuda":  # a fused kernel, not the float32 math path
        assert "bmm" not in source and "softmax" not in source
    check_backward(fn, attention_inputs(device, dtype, seq=33, dim=64, grad=True), tolerance)



def test_masks_under_dynamic_shapes_add_no_guard_and_match_eager():
    """With symbolic sizes an arange-built mask depends on a size symbol: it is kept,
    and one compiled graph serves every length."""

    def fn(q, k, v):
        mask = library_mask("causal", q.shape[0], q.shape[-2])
        return F.scaled_dot_product_attention(q, k, v, mask)

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="minductor", dynamic=True)
    with record_compiled() as graphs:
        for seq in (9, 12):
            args = attention_inputs("cpu", torch.float32, seq=seq)
            torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-5, rtol=1e-5)
    assert len(graphs) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_rotary_queries_and_keys_are_computed_into_the_layout_attention_reads(device):
    """Llama's attention: q and k are heads-transposed projections, rotated; the
    rotation is one kernel writing straight into the strides the attention call is
    given (no buffer of its own, no copy after it)."""
    b, t, heads, dim = 2, 8, 4, 16

    def rotate(x):
        return torch.cat([-x[..., dim // 2 :], x[..., : dim // 2]], -1)

    def layer(h, wq, wk, wv, cos, sin):
        q, k, v = ((h @ w).view(b, t, heads, dim).transpose(1, 2) for w in (wq, wk, wv))
        q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, t, heads * dim)

    h = randn(b, t, heads * dim, device=device)
    # weights of a real layer's scale: with unit ones the scores reach hundreds, and a
    # rounding of the rotation (fused multiply-adds here, not in eager) moves the softmax
    # by more than the tolerance on a GPU
    weights = [randn(heads * dim, heads * dim, device=device) / 8 for _ in range(3)]
    cos, sin = randn(t, dim, device=device), randn(t, dim, device=device)
    with torch.no_grad():
        kernels, fallbacks = run(layer, h, *weights, cos, sin, atol=1e-4, rtol=1e-4)
    assert fallbacks == [] and len(kernels) == 1, kernels
