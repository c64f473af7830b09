# generated from chapters/02_decompositions.md — edit there

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.fx.experimental.symbolic_shapes import statically_known_true

aten = torch.ops.aten
log = logging.getLogger(__name__)

decompositions: dict[OpOverload, Callable[..., object]] = {}


def _overloads(op: OpOverload | OpOverloadPacket) -> list[OpOverload]:
    if isinstance(op, OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    return [op]


def register_decomposition(*ops_: OpOverload | OpOverloadPacket):
    def decorator(fn: Callable[..., object]) -> Callable[..., object]:
        for op in ops_:
            for overload in _overloads(op):
                decompositions[overload] = fn
        return fn

    return decorator


@register_decomposition(aten.addcmul)
def addcmul(self, tensor1, tensor2, *, value=1):
    return self + value * tensor1 * tensor2


@register_decomposition(aten.addcdiv)
def addcdiv(self, tensor1, tensor2, *, value=1):
    return self + value * (tensor1 / tensor2)


@register_decomposition(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(start, end, weight):
    # two formulas, as in eager: each is exact at its own end (weight 0 or weight 1)
    diff = end - start
    if isinstance(weight, torch.Tensor):
        near_start = torch.abs(weight) < 0.5
        return torch.where(near_start, start + weight * diff, end - diff * (1 - weight))
    if abs(weight) < 0.5:
        return start + weight * diff
    return end - diff * (1 - weight)


@register_decomposition(aten.hardtanh)
def hardtanh(x, min_val=-1.0, max_val=1.0):
    if not x.dtype.is_floating_point:  # the bounds take the tensor's dtype, as in eager
        min_val, max_val = int(min_val), int(max_val)
    return torch.clamp(x, min_val, max_val)


@register_decomposition(aten.hardsigmoid)
def hardsigmoid(x):
    return torch.clamp(x + 3, 0.0, 6.0) / 6


@register_decomposition(aten.hardswish)
def hardswish(x):
    # eager's formula, operation for operation (so hardswish(-inf) is nan, as in eager)
    return x * torch.clamp(x + 3, 0.0, 6.0) / 6


@register_decomposition(aten.leaky_relu)
def leaky_relu(x, negative_slope=0.01):
    return torch.where(x > 0, x, x * negative_slope)


@register_decomposition(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(self, other, alpha=1):
    # not `other - alpha * self`: with a Python number `other`, that is rsub again
    return -(self * alpha) + other


def _memory_order(x):
    """x's dims from outermost to innermost in memory, or None if x is not dense."""
    order = sorted(range(x.dim()), key=lambda d: -x.stride(d))
    expected = 1
    for d in reversed(order):
        if x.shape[d] != 1 and x.stride(d) != expected:
            return None
        expected *= x.shape[d]
    return order


@register_decomposition(aten.full_like)
def full_like(
    x,
    fill_value,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    memory_format=None,
):
    dtype, device = dtype or x.dtype, device or x.device
    keep_strides = memory_format in (None, torch.preserve_format)
    order = _memory_order(x)
    if not keep_strides or x.is_contiguous() or order is None:
        return torch.full(x.shape, fill_value, dtype=dtype, device=device)
    # same strides as x: fill in x's memory order, then permute back (a view)
    shape = [x.shape[d] for d in order]
    filled = torch.full(shape, fill_value, dtype=dtype, device=device)
    return filled.permute([order.index(d) for d in range(x.dim())])


@register_decomposition(aten.zeros_like)
def zeros_like(
    x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return full_like(x, 0, dtype=dtype, device=device)


@register_decomposition(aten.ones_like)
def ones_like(
    x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return full_like(x, 1, dtype=dtype, device=device)


@register_decomposition(aten.mean.default, aten.mean.dim)
def mean(x, dim=None, keepdim=False, *, dtype=None):
    out = dtype or x.dtype
    acc = torch.float32 if out in (torch.float16, torch.bfloat16) else out
    dims = range(x.dim()) if dim is None or len(dim) == 0 else dim
    total = torch.sum(x, dim=list(dims), keepdim=keepdim, dtype=acc)
    return (total / _numel(x, dims)).to(out)


def _numel(x, dims):
    """How many elements a reduction over `dims` combines."""
    count = 1
    for d in dims if x.dim() else ():  # a 0-d tensor's dim 0 is its one element
        count *= x.shape[d]
    return count


def upcast(x):
    """x in float32 if it is half precision (chapter 13's norms compute so too)."""
    half = x.dtype in (torch.float16, torch.bfloat16)
    return x.to(torch.float32) if half else x


@register_decomposition(aten._softmax)
def softmax(x, dim, half_to_float):
    # subtract the row maximum first, so exp never overflows
    xf = upcast(x)
    if x.numel() == 0:  # no element: amax over a row of none would raise
        return xf.clone() if half_to_float else x.clone()
    e = torch.exp(xf - torch.amax(xf, dim, keepdim=True))
    out = e / torch.sum(e, dim, keepdim=True)
    return out if half_to_float else out.to(x.dtype)


@register_decomposition(aten._log_softmax)
def log_softmax(x, dim, half_to_float):
    xf = upcast(x)
    if x.numel() == 0:
        return xf.clone() if half_to_float else x.clone()
    shifted = xf - torch.amax(xf, dim, keepdim=True)
    out = shifted - torch.log(torch.sum(torch.exp(shifted), dim, keepdim=True))
    return out if half_to_float else out.to(x.dtype)


@register_decomposition(aten.softplus)
def softplus(x, beta=1, threshold=20):
    scaled = x * beta
    return torch.where(scaled > threshold, x, torch.log1p(torch.exp(scaled)) / beta)


@register_decomposition(aten._softmax_backward_data.default)
def softmax_backward_data(grad_output, output, dim, input_dtype):
    g, y = upcast(grad_output), upcast(output)
    grad_input = y * (g - torch.sum(g * y, dim, keepdim=True))
    return grad_input.to(input_dtype)


@register_decomposition(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad_output, output, dim, input_dtype):
    g, y = upcast(grad_output), upcast(output)
    grad_input = g - torch.exp(y) * torch.sum(g, dim, keepdim=True)
    return grad_input.to(input_dtype)


def _layer_norm_stats_dtype(x, weight, bias):
    acc = upcast(x).dtype
    if x.device.type != "cpu":
        return acc
    params = [p.dtype for p in (weight, bias) if p is not None]
    return acc if acc != x.dtype and acc in params else x.dtype


@register_decomposition(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    xf = upcast(x)
    var, mean = torch.var_mean(xf, dims, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    out = (xf - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    stats = _layer_norm_stats_dtype(x, weight, bias)
    return out.to(x.dtype), mean.to(stats), rstd.to(stats)


@register_decomposition(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask
):
    axis = x.dim() - len(normalized_shape)
    inner, outer = list(range(axis, x.dim())), list(range(axis))
    n = _numel(x, inner)
    dy, rstd = upcast(grad_out), upcast(rstd)
    x_hat = (upcast(x) - upcast(mean)) * rstd
    g = dy * weight if weight is not None else dy
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        sum_g = torch.sum(g, inner, keepdim=True)
        sum_g_x_hat = torch.sum(g * x_hat, inner, keepdim=True)
        grad_input = (rstd / n * (n * g - sum_g - x_hat * sum_g_x_hat)).to(x.dtype)

    def over_rows(t):  # a sum over no dims would sum over all of them
        return torch.sum(t, outer) if outer else t.clone()

    if output_mask[1] and weight is not None:
        grad_weight = over_rows(dy * x_hat).to(weight.dtype)
    if output_mask[2] and bias is not None:
        grad_bias = over_rows(dy).to(bias.dtype)
    return grad_input, grad_weight, grad_bias


@register_decomposition(aten.logsumexp.default)
def logsumexp(x, dim, keepdim=False):
    if x.is_complex():
        return NotImplemented
    if not x.dtype.is_floating_point:
        x = x.to(torch.get_default_dtype())
    xf = upcast(x)
    if xf.numel() == 0:
        return torch.log(torch.sum(torch.exp(xf), dim, keepdim)).to(x.dtype)

    def finite_max(keep):
        m = torch.amax(xf, dim, keepdim=keep)
        return torch.where(torch.abs(m) == float("inf"), 0.0, m)

    total = torch.sum(torch.exp(xf - finite_max(True)), dim, keepdim=keepdim)
    return (torch.log(total) + finite_max(keepdim)).to(x.dtype)


@register_decomposition(aten.nll_loss_backward.default)
def nll_loss_backward(
    grad, x, target, weight, reduction, ignore_index, total_weight
):
    if weight is not None:
        from torch._decomp import decomposition_table as torch_decompositions

        general = torch_decompositions[aten.nll_loss_backward.default]
        return general(grad, x, target, weight, reduction, ignore_index, total_weight)
    channel = x.dim() - 1  # (C,) or (N, C)
    if reduction == 1:  # mean
        grad = grad / total_weight
    target = target.unsqueeze(channel)
    if grad.dim() > 0:
        grad = grad.unsqueeze(channel)
    classes = torch.arange(x.shape[channel], device=x.device)
    hit = (classes == target) & (target != ignore_index)
    return torch.where(hit, -grad, torch.zeros((), dtype=x.dtype, device=x.device))


@register_decomposition(aten.detach.default)
def detach(x):
    return aten.alias(x)  # autograd's concern is over; to us it is a view


def _generator(generator) -> dict:
    return {} if generator is None else {"generator": generator}


def _uniform(x, generator=None):
    """float32 numbers in [0, 1), one per element of x (chapter 8 lowers rand)."""
    return torch.rand(
        x.shape, dtype=torch.float32, device=x.device, **_generator(generator)
    )


@register_decomposition(aten.native_dropout.default)
def native_dropout(x, p, train):
    if not train or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:  # everything dropped; 1 / (1 - p) would divide by zero
        return torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    keep = _uniform(x) > p
    return keep * x * (1.0 / (1.0 - p)), keep


@register_decomposition(aten.native_dropout_backward.default)
def native_dropout_backward(grad_output, mask, scale):
    # an integer or bool gradient times the float scale is float32, as in eager
    dtype = torch.result_type(grad_output, scale)
    g = upcast(grad_output.to(dtype))  # a half gradient is rounded once, as in eager
    return (g * (mask.to(g.dtype) * scale)).to(dtype)


@register_decomposition(aten.bernoulli.default)
def bernoulli(x, *, generator=None):
    return bernoulli_p(x, x, generator=generator)  # x holds the probabilities


@register_decomposition(aten.bernoulli.p, aten.bernoulli.Tensor)
def bernoulli_p(x, p=0.5, *, generator=None):
    return (_uniform(x, generator) < p).to(x.dtype)


def _random_like(draw: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """rand_like or randn_like: `draw` with x's size, dtype, device and strides."""

    def decomposition(
        x,
        *,
        generator=None,
        dtype=None,
        layout=None,
        device=None,
        pin_memory=None,
        memory_format=None,
    ):
        options = {"dtype": dtype or x.dtype, "device": device or x.device}
        options.update(_generator(generator))
        order = _memory_order(x)
        keep_strides = memory_format in (None, torch.preserve_format)
        if not keep_strides or x.is_contiguous() or order is None:
            return draw(x.shape, **options)
        drawn = draw([x.shape[d] for d in order], **options)  # in x's memory order
        return drawn.permute([order.index(d) for d in range(x.dim())])

    return decomposition


rand_like = register_decomposition(aten.rand_like.default, aten.rand_like.generator)(
    _random_like(torch.rand)
)
randn_like = register_decomposition(
    aten.randn_like.default, aten.randn_like.generator
)(_random_like(torch.randn))


def batch_norm_stats_dtype(x, *params) -> torch.dtype:
    """The dtype of the statistics eager's batch norm returns for input x."""
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    if x.device.type != "cpu":
        return compute
    other = [p.dtype for p in params if p is not None and p.dtype != x.dtype]
    return other[0] if other else x.dtype


@register_decomposition(aten._native_batch_norm_legit_no_training)
def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    per_channel = [-1] + [1] * (x.dim() - 2)  # (C, 1, 1): broadcasts along dim 1
    invstd = 1 / torch.sqrt(running_var.to(compute) + eps)
    mean = running_mean.to(compute)
    y = (x.to(compute) - mean.view(per_channel)) * invstd.view(per_channel)
    if weight is not None:
        y = y * weight.view(per_channel)
    if bias is not None:
        y = y + bias.view(per_channel)
    if x.device.type == "cpu":
        stats = batch_norm_stats_dtype(x, weight, bias, running_mean, running_var)
        saved = x.new_zeros((0,), dtype=stats), x.new_zeros((0,), dtype=stats)
    else:
        saved = mean, invstd
    return y.to(x.dtype), *saved


@register_decomposition(aten.linalg_vector_norm)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if ord != 2 or x.is_complex() or not x.dtype.is_floating_point:
        return NotImplemented
    if dtype is not None:
        x = x.to(dtype)
    xf = upcast(x)
    dims = list(range(x.dim())) if dim is None or dim == [] else dim
    return torch.sqrt(torch.sum(xf * xf, dims, keepdim=keepdim)).to(x.dtype)


def _all_but(x, dim) -> list[int]:
    return [d for d in range(x.dim()) if d != dim % x.dim()]


def _weight_norm_compute(v) -> torch.dtype:
    low = v.dtype in (torch.float16, torch.bfloat16)
    return torch.float32 if low else v.dtype


@register_decomposition(aten._weight_norm_interface)
def weight_norm(v, g, dim=0):
    compute = _weight_norm_compute(v)
    v32, g32 = v.to(compute), g.to(compute)
    norm = v32.norm(2, _all_but(v, dim), keepdim=True)
    norm_dtype = torch.float32 if g.dtype == torch.bfloat16 else g.dtype
    return (v32 * (g32 / norm)).to(v.dtype), norm.to(norm_dtype)


@register_decomposition(aten._weight_norm_interface_backward)
def weight_norm_backward(grad_w, v, g, norm, dim=0):
    compute = _weight_norm_compute(v)
    grad_w, v32, g32, norm = (t.to(compute) for t in (grad_w, v, g, norm))
    s = (grad_w * v32).sum(_all_but(v, dim), keepdim=True)
    grad_v = g32 / norm * (grad_w - v32 * (s / (norm * norm)))
    return grad_v.to(v.dtype), (s / norm).to(g.dtype)


@register_decomposition(aten.fmax.default)
def fmax(a, b):
    return torch.where(b.isnan(), a, torch.where(a.isnan(), b, torch.maximum(a, b)))


@register_decomposition(aten.fmin.default)
def fmin(a, b):
    return torch.where(b.isnan(), a, torch.where(a.isnan(), b, torch.minimum(a, b)))


@register_decomposition(aten.round.decimals)
def round_decimals(x, *, decimals=0):
    y, scale = upcast(x), 10.0 ** abs(decimals)
    if decimals >= 0:
        return (torch.round(y * scale) / scale).to(x.dtype)
    return (torch.round(y / scale) * scale).to(x.dtype)


# torch._decomp's decompositions we take by name (chapter 13 adds group norm's)
BORROWED = [
    aten.elu,
    aten.mish,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.threshold_backward,
    aten.silu_backward,
    aten.gelu_backward,
    aten.hardtanh_backward,
    aten.hardsigmoid_backward,  # MobileNetV3's squeeze-excite gate
    aten.hardswish_backward,
    aten.leaky_relu_backward,
    aten.elu_backward,
    aten.celu,
    aten.glu,
    aten.glu_backward,
    aten.log_sigmoid_forward,
    aten.log_sigmoid_backward,
    aten._prelu_kernel,
    aten._prelu_kernel_backward,
    aten.logit,
    aten.logit_backward,
    # elementwise tests and arithmetic: comparisons, selects and rounding
    aten.frac,
    aten.heaviside,
    aten.logical_xor,
    aten.isinf,
    aten.isposinf,
    aten.isneginf,
    aten.sgn,
    # losses of regression and detection models, and their gradients
    aten.mse_loss,
    aten.mse_loss_backward,
    aten.smooth_l1_loss,
    aten.smooth_l1_loss_backward,
    # data movement as views and gathers: pixel and channel shuffles, mirrored and
    # repeated borders, and the *_copy twins of the views
    aten.pixel_shuffle,
    aten.pixel_unshuffle,
    aten.channel_shuffle,
    aten.reflection_pad1d,
    aten.reflection_pad2d,
    aten.reflection_pad1d_backward,
    aten.replication_pad1d,
    aten.replication_pad2d,
    aten.alias_copy,
    aten.view_copy,
    aten.permute_copy,
    aten.squeeze_copy,
    aten.unsqueeze_copy,
    aten.transpose_copy,
    aten.t_copy,


    # sliding windows as gathers (nn.Unfold, nn.Fold), blocks on a diagonal, cross
    # products, counts and membership
    aten.im2col,
    aten.col2im,
    aten.block_diag,
    aten.linalg_cross,
    aten.count_nonzero,
    aten.isin,
    # gradients of views, gathers and losses: zeros with a slice, a diagonal, rows
    # or targets written in (slice_scatter, index_put with accumulate, scatter)
    aten.slice_backward,
    aten.select_backward,
    aten.diagonal_backward,
    aten.unfold_backward,
    aten.embedding_dense_backward,
    aten._unsafe_masked_index_put_accumulate,  # what embedding's backward becomes
    aten._unsafe_index_put,
    aten.masked_fill,  # a where
    aten.index_add,  # index_select's backward: an accumulating index_put
    aten.nll_loss_backward,
    # softmax that gives 0, not NaN, on a row masked out entirely (every score -inf):
    # what attention's math path calls; a softmax, a test of the row and a where
    aten._safe_softmax,
    # x[..., 0] = 3 and x.fill_(3): a full_like, or a copy of a 0-dim tensor
    aten.fill,
    # arithmetic on one or two values: angles, log-sum-exp of two, both extremes of
    # a reduction at once
    aten.deg2rad,
    aten.rad2deg,
    aten.logaddexp,
    aten.logaddexp2,
    aten.aminmax,
    # products with a vector, as a multiply and a sum, which fuse
    aten.mv,
    aten.dot,
    aten.vdot,
    aten.addmv,
    aten.addr,


    # copies of views, unpooling (a scatter), per-pixel losses, batch norm's other
    # entry points, and factories with tensor arguments
    aten.expand_copy,
    aten.diagonal_copy,
    aten.max_unpool2d,
    aten.max_unpool3d,
    aten.nll_loss2d_forward,
    aten.nll_loss2d_backward,
    aten._batch_norm_with_update_functional,
    aten.batch_norm_backward,
    aten.new_zeros,
    aten.linspace.Tensor_Tensor,
    aten.linspace.Tensor_Scalar,
    aten.linspace.Scalar_Tensor,
    # losses of detection and multi-label models (binary cross-entropy, Huber) and
    # their gradients, two more activation gradients, and elementwise odds and ends
    aten.binary_cross_entropy,
    aten.binary_cross_entropy_backward,
    aten.binary_cross_entropy_with_logits,
    aten.huber_loss,
    aten.huber_loss_backward,
    aten.softplus_backward,
    aten.mish_backward,
    aten.threshold,
    aten.nan_to_num,
    aten.sinc,
    aten.special_xlog1py,
    aten.special_entr,
    aten.nansum,
    aten.trace,
    # copies of views, and writing rows at indices
    aten.narrow_copy,
    aten.split_with_sizes_copy,
    aten.unbind_copy,
    aten.unfold_copy,
    aten.zero,
    aten.index_copy,
]


def decomposition_table() -> dict[OpOverload, Callable[..., object]]:
    global _last_table
    made_from = (tuple(BORROWED), tuple(decompositions.items()), tuple(MISLEADING_META))
    if _last_table is None or _last_table[0] != made_from:
        from torch._decomp import get_decompositions

        table = dict(get_decompositions(BORROWED))
        table.update(decompositions)
        wrapped = {
            op: fn if op in MISLEADING_META else held_to_meta(op, fn)
            for op, fn in table.items()
        }
        _last_table = (made_from, wrapped)
    return dict(_last_table[1])


_last_table: tuple[tuple, dict[OpOverload, Callable[..., object]]] | None = None


# ops whose meta function disagrees with eager's own kernel, with how: a decomposition
# of one follows eager, and is not held to the meta (later chapters add entries)
MISLEADING_META: dict[OpOverload, str] = {}


def _disagreement(out: object, expected: object) -> str | None:
    got, want = pytree.tree_leaves(out), pytree.tree_leaves(expected)
    got = [t for t in got if isinstance(t, torch.Tensor)]
    want = [t for t in want if isinstance(t, torch.Tensor)]
    if len(got) != len(want):
        return f"{len(got)} tensors, the op returns {len(want)}"
    for g, w in zip(got, want):
        if g.dtype != w.dtype:
            return f"{g.dtype}, the op returns {w.dtype}"
        different = len(g.shape) != len(w.shape) or any(
            statically_known_true(a != b) for a, b in zip(g.shape, w.shape)
        )
        if different:
            return f"size {list(g.shape)}, the op returns {list(w.shape)}"
    return None


def held_to_meta(op: OpOverload, fn: Callable[..., object]) -> Callable[..., object]:
    """fn, a decomposition of op, checked against op's own meta function."""

    @functools.wraps(fn)  # the checked function is decomposition.__wrapped__
    def decomposition(*args, **kwargs):
        out = fn(*args, **kwargs)
        leaves = pytree.tree_leaves((args, kwargs))
        fake = any(isinstance(x, FakeTensor) for x in leaves)
        if out is NotImplemented or op._schema.is_mutable or not fake:
            return out
        with disable_proxy_modes_tracing():
            why = _disagreement(out, op(*args, **kwargs))
        if why is None:
            return out
        log.warning("minductor: %s decomposed to %s: the op is kept whole", op, why)
        return NotImplemented

    return decomposition
