# generated from chapters/13_convnets.md — edit there

from __future__ import annotations

import functools
import logging
from typing import Any

import sympy
import torch

from minductor.config import config
from minductor.decompositions import (
    BORROWED,
    MISLEADING_META,
    batch_norm_stats_dtype,
    register_decomposition,
    upcast,
)
from minductor.extern import extern_alloc
from minductor.ir import (
    FallbackKernel,
    FixedLayout,
    MultiOutput,
    MultiOutputLayout,
    Pointwise,
    TensorBox,
    as_exprs,
)
from minductor.lowering import (
    Unsupported,
    aten,
    layout_decisions,
    layout_rules,
    register_lowering,
)
from minductor.ops import EvalHandler, ops, set_handler
from minductor.pointwise import add
from minductor.reductions import LoadIndices
from minductor.sizevars import (
    FloorDiv,
    ModularIndexing,
    affine_coefficients,
    index_vars,
)
from minductor.views import view

log = logging.getLogger("minductor")


def _per_channel(x: torch.Tensor) -> list[int]:
    return [-1] + [1] * (x.dim() - 2)  # (C, 1, 1): broadcasts along dim 1


def _normalize(x, mean, rstd, weight, bias):
    shape = _per_channel(x)
    y = (upcast(x) - mean.view(shape)) * rstd.view(shape)
    if weight is not None:
        y = y * weight.view(shape)
    if bias is not None:
        y = y + bias.view(shape)
    return y.to(x.dtype)


def _batch_statistics(x, eps):
    dims = [0, *range(2, x.dim())]
    var, mean = torch.var_mean(upcast(x), dims, correction=0)
    return mean, torch.rsqrt(var + eps), var, x.numel() // x.shape[1]


def _saved(x, params, *stats):
    """The statistics in the dtype eager returns them in (chapter 2's rule)."""
    return tuple(s.to(batch_norm_stats_dtype(x, *params)) for s in stats)


@register_decomposition(aten._native_batch_norm_legit_functional)
def batch_norm_training(
    x, weight, bias, running_mean, running_var, training, momentum, eps
):
    if not training:  # eval mode: the running statistics, which stay as they are
        y, *saved = aten._native_batch_norm_legit_no_training(
            x, weight, bias, running_mean, running_var, momentum, eps
        )
        return y, *saved, running_mean.clone(), running_var.clone()
    mean, rstd, var, n = _batch_statistics(x, eps)
    unbiased = var * (n / max(n - 1, 1))
    new_mean = running_mean + momentum * (mean - running_mean)
    new_var = running_var + momentum * (unbiased.to(running_var.dtype) - running_var)
    y = _normalize(x, mean, rstd, weight, bias)
    params = weight, bias, running_mean, running_var
    saved = _saved(x, params, mean, rstd)
    return y, *saved, new_mean.to(running_mean.dtype), new_var


MISLEADING_META[aten._native_batch_norm_legit_functional.default] = (
    "16-bit running statistics: eager's kernels keep their dtype, its meta function "
    "returns float32"
)


@register_decomposition(aten._native_batch_norm_legit.no_stats)
def batch_norm_without_running_stats(x, weight, bias, training, momentum, eps):
    mean, rstd, _, _ = _batch_statistics(x, eps)
    saved = _saved(x, (weight, bias), mean, rstd)
    return _normalize(x, mean, rstd, weight, bias), *saved


@register_decomposition(aten.native_batch_norm_backward)
def batch_norm_backward(
    dy, x, weight, running_mean, running_var, save_mean, save_rstd, train, eps, mask
):
    shape = _per_channel(x)
    dims = [0, *range(2, x.dim())]
    if train:
        mean, rstd = save_mean, save_rstd
    else:
        mean = running_mean.to(torch.float32) if x.dtype.itemsize < 4 else running_mean
        rstd = torch.rsqrt(running_var.to(mean.dtype) + eps)
    dyf = upcast(dy)
    xhat = (upcast(x) - mean.view(shape)) * rstd.view(shape)
    sum_dy = dyf.sum(dims)
    sum_dy_xhat = (dyf * xhat).sum(dims)
    scale = rstd if weight is None else rstd * weight
    if train:
        n = x.numel() // x.shape[1]
        centred = dyf - (sum_dy / n).view(shape) - xhat * (sum_dy_xhat / n).view(shape)
        dx = centred * scale.view(shape)
    else:
        dx = dyf * scale.view(shape)
    grads = [dx.to(x.dtype), sum_dy_xhat, sum_dy]
    if weight is not None:
        grads[1:] = [g.to(weight.dtype) for g in grads[1:]]
    return tuple(g if wanted else None for g, wanted in zip(grads, mask, strict=True))


BORROWED.extend([aten.native_group_norm, aten.native_group_norm_backward])


def _pairs(value, default=None) -> list[int]:
    value = default if value in (None, []) else value
    value = [value] if isinstance(value, int) else list(value)
    return value * 2 if len(value) == 1 else value


def pool_size(size, kernel, stride, padding, dilation, ceil_mode) -> int:
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1  # the last window would start in the padding: eager drops it
    return out


MAX_WINDOW = 25  # elements in a pooling window we unroll


def _window_sizes(x: TensorBox, kernel, stride, padding, dilation, ceil_mode):
    if kernel[0] * kernel[1] > MAX_WINDOW:
        raise Unsupported(f"a pooling window of {kernel[0]} x {kernel[1]} elements")
    size = x.get_size()
    if any(not isinstance(s, sympy.Integer) for s in size[-2:]):
        raise Unsupported("pooling over symbolic spatial sizes")
    spatial = [int(s) for s in size[-2:]]
    out = [
        pool_size(spatial[d], kernel[d], stride[d], padding[d], dilation[d], ceil_mode)
        for d in range(2)
    ]
    return spatial, out


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype.itemsize < 4 else dtype  # as every body computes


# a body runs many times (each scheduling pass, each kernel), and sympy checks every
# Min and Max it builds: a window's few clamps are kept
@functools.lru_cache(maxsize=1 << 14)
def _clamp(position: sympy.Expr, size: int) -> sympy.Expr:
    return sympy.Min(sympy.Max(position, 0), size - 1)


def _max_window(x, kernel, stride, padding, dilation, ceil_mode, hw, index):
    *batch, oh, ow = index
    load, dtype = x.make_loader(), x.get_dtype()
    compute = _compute_dtype(dtype)
    best = where_best = found = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            h = oh * stride[0] - padding[0] + i * dilation[0]
            w = ow * stride[1] - padding[1] + j * dilation[1]
            position = ops.index_expr(h * hw[1] + w, torch.int64)
            inside = _inside(h, hw[0], padding[0], ceil_mode)
            inside = inside & _inside(w, hw[1], padding[1], ceil_mode)
            if inside.value is not True:  # an address inside, whatever the value
                h, w = (_clamp(p, n) for p, n in zip((h, w), hw))
            value = ops.to_dtype(load([*batch, h, w]), compute)
            if best is None:  # the first offset
                best, where_best, found = value, position, inside
                continue
            take = ops.logical_or(ops.gt(value, best), ops.isnan(value))
            if found.value is not True:  # nothing inside yet: the first inside wins
                take = ops.logical_or(take, ops.logical_not(found.value))
            if inside.value is not True:
                take = ops.logical_and(take, inside.value)
            best = ops.where(take, value, best)
            where_best = ops.where(take, position, where_best)
            found = found | inside
    return best, where_best


class _Condition:
    """A bound test known to be true at compile time, or a boolean value in the body."""

    def __init__(self, value: Any = True):
        self.value = value

    def __and__(self, other: _Condition) -> _Condition:
        if self.value is True:
            return other
        if other.value is True:
            return self
        return _Condition(ops.logical_and(self.value, other.value))

    def __or__(self, other: _Condition) -> _Condition:
        if self.value is True or other.value is True:
            return _Condition()
        return _Condition(ops.logical_or(self.value, other.value))


def _inside(position: sympy.Expr, size: int, padding: int, ceil: bool) -> _Condition:
    if padding == 0 and not ceil:
        # every window starts inside, and the output size keeps its end inside
        return _Condition()
    value = ops.index_expr(position, torch.int64)
    low = ops.ge(value, ops.constant(0, torch.int64))
    high = ops.lt(value, ops.constant(size, torch.int64))
    return _Condition(ops.logical_and(low, high))


@register_lowering(aten.max_pool2d_with_indices)
def max_pool2d_with_indices(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False
):
    kernel = _pairs(kernel_size)
    stride, padding = _pairs(stride, kernel), _pairs(padding)
    dilation = _pairs(dilation)
    if not x.get_dtype().is_floating_point:
        raise Unsupported(f"max_pool2d of {x.get_dtype()}")
    hw, out = _window_sizes(x, kernel, stride, padding, dilation, ceil_mode)
    size = [*x.get_size()[:-2], *map(sympy.Integer, out)]
    window = functools.partial(
        _max_window, x, kernel, stride, padding, dilation, ceil_mode, hw
    )
    device, origins = x.get_device(), frozenset({"max_pool2d"})
    values = Pointwise(device, x.get_dtype(), lambda i: window(i)[0], size, origins)
    indices = Pointwise(device, torch.int64, lambda i: window(i)[1], size, origins)
    return TensorBox(values), TensorBox(indices)


def _candidate(position, offset, padding, stride, out_size):
    """The output row whose window holds `position` at this offset, and a test that
    there is one: position + padding - offset must be a multiple of stride in range."""
    shift = stride * -(-offset // stride)  # a multiple of stride: the numerator >= 0
    numerator = position + padding - offset + shift
    row = FloorDiv(numerator, stride) - shift // stride
    exact = ops.eq(
        ops.index_expr(ModularIndexing(numerator, 1, stride), torch.int64),
        ops.constant(0, torch.int64),
    )
    value = ops.index_expr(row, torch.int64)
    in_range = ops.logical_and(
        ops.ge(value, ops.constant(0, torch.int64)),
        ops.lt(value, ops.constant(out_size, torch.int64)),
    )
    return _clamp(row, out_size), ops.logical_and(exact, in_range)


@register_lowering(aten.max_pool2d_with_indices_backward)
def max_pool2d_backward(
    grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    kernel = _pairs(kernel_size)
    stride, padding = _pairs(stride, kernel), _pairs(padding)
    dilation = _pairs(dilation)
    hw, out = _window_sizes(x, kernel, stride, padding, dilation, ceil_mode)
    load_grad, load_index = grad.make_loader(), indices.make_loader()
    dtype = grad.get_dtype()
    compute = _compute_dtype(dtype)

    def inner_fn(index):
        *batch, h, w = index
        here = ops.index_expr(h * hw[1] + w, torch.int64)
        total = ops.constant(0, compute)
        for i in range(kernel[0]):
            oh, has_row = _candidate(h, i * dilation[0], padding[0], stride[0], out[0])
            for j in range(kernel[1]):
                ow, has_col = _candidate(
                    w, j * dilation[1], padding[1], stride[1], out[1]
                )
                picked = ops.eq(load_index([*batch, oh, ow]), here)
                take = ops.logical_and(ops.logical_and(has_row, has_col), picked)
                g = ops.to_dtype(load_grad([*batch, oh, ow]), compute)
                total = ops.add(total, ops.where(take, g, ops.constant(0, compute)))
        return ops.to_dtype(total, dtype)

    origins = frozenset({"max_pool2d_backward"})
    size = x.get_size()
    return TensorBox(Pointwise(x.get_device(), dtype, inner_fn, size, origins))


def _avg_divisor(oh, ow, kernel, stride, padding, hw, include_pad, compute, override):
    """What the window at (oh, ow) divides its sum by, as a value of the kernel."""
    if override:
        return ops.constant(override, compute)

    def integer(n):
        return ops.constant(n, torch.int64)

    bounds = []
    for o, k, s, p, n in zip((oh, ow), kernel, stride, padding, hw):
        start = ops.index_expr(o * s - p, torch.int64)
        end = ops.minimum(ops.add(start, integer(k)), integer(n + p))  # the padded end
        if not include_pad:  # only what lies inside the input
            start = ops.maximum(start, integer(0))
            end = ops.minimum(end, integer(n))
        bounds.append(ops.sub(end, start))
    return ops.to_dtype(ops.mul(*bounds), compute)


def _avg_options(kernel_size, stride, padding):
    kernel = _pairs(kernel_size)
    return kernel, _pairs(stride, kernel), _pairs(padding)


@register_lowering(aten.avg_pool2d)
def avg_pool2d(
    x, kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None,
):
    kernel, stride, padding = _avg_options(kernel_size, stride, padding)
    if not x.get_dtype().is_floating_point:
        raise Unsupported(f"avg_pool2d of {x.get_dtype()}")
    hw, out = _window_sizes(x, kernel, stride, padding, [1, 1], ceil_mode)
    load, dtype = x.make_loader(), x.get_dtype()
    compute = _compute_dtype(dtype)

    def inner_fn(index):
        *batch, oh, ow = index
        total = ops.constant(0, compute)
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                h = oh * stride[0] - padding[0] + i
                w = ow * stride[1] - padding[1] + j
                inside = _inside(h, hw[0], padding[0], ceil_mode)
                inside = inside & _inside(w, hw[1], padding[1], ceil_mode)
                if inside.value is not True:
                    h, w = (_clamp(p, n) for p, n in zip((h, w), hw))
                value = ops.to_dtype(load([*batch, h, w]), compute)
                if inside.value is not True:
                    value = ops.where(inside.value, value, ops.constant(0, compute))
                total = ops.add(total, value)
        divisor = _avg_divisor(
            oh, ow, kernel, stride, padding, hw, count_include_pad, compute,
            divisor_override,
        )
        divided = ops.truediv(total, divisor)
        return ops.to_dtype(divided, dtype)

    size = [*x.get_size()[:-2], *map(sympy.Integer, out)]
    origins = frozenset({"avg_pool2d"})
    return TensorBox(Pointwise(x.get_device(), dtype, inner_fn, size, origins))


@register_lowering(aten.avg_pool2d_backward)
def avg_pool2d_backward(
    grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override,
):
    kernel, stride, padding = _avg_options(kernel_size, stride, padding)
    hw, out = _window_sizes(x, kernel, stride, padding, [1, 1], ceil_mode)
    load_grad, dtype = grad.make_loader(), grad.get_dtype()
    compute = _compute_dtype(dtype)

    def inner_fn(index):
        *batch, h, w = index
        total = ops.constant(0, compute)
        for i in range(kernel[0]):
            oh, has_row = _candidate(h, i, padding[0], stride[0], out[0])
            for j in range(kernel[1]):
                ow, has_col = _candidate(w, j, padding[1], stride[1], out[1])
                divisor = _avg_divisor(
                    oh, ow, kernel, stride, padding, hw, count_include_pad, compute,
                    divisor_override,
                )
                g = ops.to_dtype(load_grad([*batch, oh, ow]), compute)
                share = ops.truediv(g, divisor)
                take = ops.logical_and(has_row, has_col)
                total = ops.add(total, ops.where(take, share, ops.constant(0, compute)))
        return ops.to_dtype(total, dtype)

    origins = frozenset({"avg_pool2d_backward"})
    return TensorBox(Pointwise(x.get_device(), dtype, inner_fn, x.get_size(), origins))


def _uniform_windows(x, out_size):
    h, w = x.shape[-2:]
    oh, ow = out_size
    if oh == 0 or ow == 0 or h % oh or w % ow:
        return None
    return h // oh, w // ow


@register_decomposition(aten._adaptive_avg_pool2d)
def adaptive_avg_pool2d(x, output_size):
    window = _uniform_windows(x, output_size)
    if window is None or not x.dtype.is_floating_point:
        return NotImplemented
    (kh, kw), (oh, ow) = window, output_size
    if (oh, ow) == (1, 1):  # the global pool: no reshape (channels-last: not a view)
        return x.mean((-2, -1), keepdim=True)
    split = x.reshape(*x.shape[:-2], oh, kh, ow, kw)
    return split.mean((-3, -1))


@register_decomposition(aten._adaptive_avg_pool2d_backward)
def adaptive_avg_pool2d_backward(grad, x):
    window = _uniform_windows(x, grad.shape[-2:])
    if window is None:
        return NotImplemented
    kh, kw = window
    *batch, oh, ow = grad.shape
    spread = grad.reshape(*batch, oh, 1, ow, 1).expand(*batch, oh, kh, ow, kw)
    return (spread / (kh * kw)).reshape(x.shape).to(x.dtype)


def _whole_image(x, kernel_size, stride, padding, ceil_mode) -> int | None:
    """The divisor of an avg_pool2d whose one window covers the whole image, or None."""
    kernel, stride, padding = _avg_options(kernel_size, stride, padding)
    hw = x.shape[-2:]
    if any(padding) or not all(isinstance(n, int) for n in hw):
        return None
    out = [pool_size(n, k, s, 0, 1, ceil_mode) for n, k, s in zip(hw, kernel, stride)]
    if out != [1, 1] or any(k < n for k, n in zip(kernel, hw)):
        return None
    return hw[0] * hw[1]


@register_decomposition(aten.avg_pool2d)
def avg_pool2d_of_whole_image(
    x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
    divisor_override=None,
):
    count = _whole_image(x, kernel_size, stride, padding, ceil_mode)
    if count is None or not x.dtype.is_floating_point:
        return NotImplemented
    if divisor_override is None:
        return x.mean((-2, -1), keepdim=True)
    wide = torch.promote_types(x.dtype, torch.float32)  # one rounding, as eager's
    total = x.sum((-2, -1), keepdim=True, dtype=wide)
    return (total / divisor_override).to(x.dtype)


@register_decomposition(aten.avg_pool2d_backward)
def avg_pool2d_backward_of_whole_image(
    grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override,
):
    count = _whole_image(x, kernel_size, stride, padding, ceil_mode)
    if count is None:
        return NotImplemented
    return (grad / (divisor_override or count)).expand(x.shape).to(x.dtype)


# where each op keeps its convolution's input, weight and groups among its arguments
CONVOLUTIONS = {
    aten.convolution.default: (0, 1, 8),
    aten.convolution_backward.default: (1, 2, 9),
}


def _convolutions(graph) -> list[tuple[str, torch.Tensor, torch.Tensor, int]]:
    """(name, input, weight, groups) of every 2-d convolution or its gradient."""
    found = []
    for n in graph.module.graph.nodes:
        if n.target in CONVOLUTIONS:
            x, w, groups = CONVOLUTIONS[n.target]
            x, w = n.args[x].meta["val"], n.args[w].meta["val"]
            if x.dim() == 4:
                found.append((n.name, x, w, n.args[groups]))
    return found


def layout_decision(graph) -> tuple[bool, str]:
    """Whether the graph's convolutions should run channels-last, and why."""
    convs = _convolutions(graph)
    if not config.layout_optimization:
        return False, "layout_optimization is off"
    if not convs:
        return False, "no 2-d convolution"
    if len(graph.module.graph.nodes) >= 300 * len(convs):
        return False, f"{len(convs)} convolution(s) in a large graph"
    sizes = [s for _, x, w, _ in convs for s in (*x.shape, *w.shape)]
    if any(isinstance(s, torch.SymInt) for s in sizes):
        return False, "symbolic sizes"
    for name, _, w, groups in convs:
        out_channels, in_per_group, *window = w.shape
        if groups > 1 and in_per_group > 1:
            return False, f"{name} is a grouped convolution"
        if 2 * out_channels <= in_per_group and max(window) > 1:
            return False, f"{name} shrinks its channels"
    if all(max(w.shape[:2]) <= 64 for _, _, w, _ in convs):
        return False, "every convolution is narrow"
    return True, f"{len(convs)} convolution(s)"


def decide_layout_opt(graph) -> bool:
    chosen, why = layout_decision(graph)
    log.info("layout: %s (%s)", "channels-last" if chosen else "as given", why)
    return chosen


layout_decisions.register(decide_layout_opt, chapter=13)


def channels_last_strides(size) -> tuple[sympy.Expr, ...]:
    n, c, h, w = size
    return (c * h * w, sympy.Integer(1), w * c, c)


def _channels_last(graph, x):
    if x is None:
        return None
    if len(x.get_size()) != 4:
        return x.realize(graph)
    return graph.realize_as(x, channels_last_strides(x.get_size()))


def _layout(meta: torch.Tensor) -> FixedLayout:
    """The fake result's layout, channels-last if it is an image."""
    size = as_exprs(meta.shape)
    if meta.dim() != 4:
        return FixedLayout.from_tensor(meta)
    return FixedLayout(meta.device, meta.dtype, size, channels_last_strides(size))


@register_lowering(aten.convolution, graph=True, extern=True)
def convolution(graph, x, weight, bias, *options):
    if bias is not None:  # a pointwise add, which fuses into the next kernel
        out = convolution(graph, x, weight, None, *options)
        per_channel = [bias.get_size()[0]] + [1] * (len(x.get_size()) - 2)
        return add(out, view(bias, per_channel))
    if not graph.layout_opt or len(x.get_size()) != 4:
        return extern_alloc(graph, x, weight, None, *options)
    x, weight = _channels_last(graph, x), _channels_last(graph, weight)
    target, meta = aten.convolution.default, graph.current_node.meta["val"]
    buf = FallbackKernel(
        graph.new_buffer_name(), _layout(meta), target, (x, weight, None, *options), {}
    )
    graph.register_buffer(buf)
    graph.extern_kernels.append(str(target))
    return TensorBox(buf)


@register_lowering(aten.convolution_backward, graph=True, extern=True)
def convolution_backward(graph, grad, x, weight, *options):
    if not graph.layout_opt or len(x.get_size()) != 4:
        return extern_alloc(graph, grad, x, weight, *options)
    grad, x, weight = (_channels_last(graph, t) for t in (grad, x, weight))
    target = aten.convolution_backward.default
    parent = FallbackKernel(
        graph.new_buffer_name(),
        MultiOutputLayout(grad.get_device()),
        target,
        (grad, x, weight, *options),
        {},
    )
    graph.register_buffer(parent)
    graph.extern_kernels.append(str(target))
    results = []
    for k, meta in enumerate(graph.current_node.meta["val"]):
        if meta is None:  # a gradient output_mask did not ask for
            results.append(None)
            continue
        out = MultiOutput(graph.new_buffer_name(), _layout(meta), parent, k)
        graph.register_buffer(out)
        results.append(TensorBox(out))
    return tuple(results)


def _order(strides: dict[int, Any]) -> list[int] | None:
    """The dims by decreasing stride, if each has a stride of its own."""
    known = [s for s in strides.values() if s is not None and s.is_Number and s != 0]
    if len(known) < len(strides) or len({abs(s) for s in known}) < len(known):
        return None
    return sorted(strides, key=lambda d: -abs(strides[d]))


class _Walk(EvalHandler):
    """Runs a body at one position, noting the offset of every load."""

    def __init__(self):
        super().__init__({})
        self.offsets: list[int] = []

    def load(self, name, index):
        self.offsets.append(int(index))
        return torch.tensor(float("nan"))  # what it reads does not exist yet


def _offsets(body, position: list[int]) -> list[int] | None:
    walk = _Walk()
    try:
        with set_handler(walk):
            body.inner_fn([sympy.Integer(p) for p in position])
    except Exception:  # an index read from memory, an op with no meaning here
        return None
    return walk.offsets


def _measured_strides(body, dims) -> list[dict[int, Any]]:
    """Per load, the stride along each of dims, measured by running the body."""
    if not all(sympy.sympify(r).is_Integer for r in body.ranges):
        return []
    sizes = [int(r) for r in body.ranges]
    moved: dict[int, list[sympy.Rational]] = {}
    for d in dims:
        lo, hi = sizes[d] // 4, max(3 * sizes[d] // 4, sizes[d] // 4 + 1)
        at = [n // 2 for n in sizes]
        start = _offsets(body, at[:d] + [lo] + at[d + 1 :])
        end = _offsets(body, at[:d] + [hi] + at[d + 1 :])
        if start is None or end is None or len(start) != len(end):
            return []
        moved[d] = [sympy.Rational(b - a, hi - lo) for a, b in zip(start, end)]
    loads = len(next(iter(moved.values()), []))
    return [{d: moved[d][k] for d in dims} for k in range(loads)]


def channels_last_rule(graph, body) -> FixedLayout | None:
    if not graph.layout_opt or type(body) is not Pointwise or len(body.ranges) != 4:
        return None
    dims = [d for d in range(4) if not graph.sizevars.statically_known_equals(
        body.ranges[d], 1
    )]
    wanted = [d for d in (0, 2, 3, 1) if d in dims]
    if wanted == dims:  # channels-last and contiguous are the same memory
        return None
    variables = index_vars(4)
    loads = LoadIndices()
    with set_handler(loads):
        body.inner_fn(variables)
    # an indirect index is a placeholder symbol here, not a constant: walk the body
    plain = all(i.free_symbols <= set(variables) for i in loads.indices)
    affine = [affine_coefficients(i, variables) for i in loads.indices]
    if plain and all(a is not None for a in affine):
        strides = [{d: a[1][d] for d in dims} for a in affine]
    else:  # a window, or an index computed in the body: walk it
        strides = _measured_strides(body, dims)
    if any(_order(s) == wanted for s in strides):
        strides = channels_last_strides(body.ranges)
        return FixedLayout(body.device, body.dtype, tuple(body.ranges), strides)
    return None


layout_rules.register(channels_last_rule, chapter=13)
