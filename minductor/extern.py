# generated from chapters/11_extern.md — edit there

from __future__ import annotations

import functools

import sympy
import torch
from torch._ops import OpOverload

from minductor.ir import (
    Buffer,
    ComputedBuffer,
    ExternKernelOut,
    FixedLayout,
    Pointwise,
    ReinterpretView,
    TensorBox,
)
from minductor.lowering import (
    GraphLowering,
    Unsupported,
    add,
    aten,
    lowerings,
    register_lowering,
)
from minductor.ops import ops

EXTERN_OUT = {  # ATen op -> the function the wrapper calls with out=
    aten.mm.default: "extern_kernels.mm",
    aten.bmm.default: "extern_kernels.bmm",
    aten.addmm.default: "extern_kernels.addmm",
    aten.baddbmm.default: "extern_kernels.baddbmm",
}


PAD_DIMS_FROM = 1024  # elements; shorter dimensions cost little either way


def _aligned(n: sympy.Expr, dtype: torch.dtype) -> sympy.Expr:
    """n, or the next multiple of 16 bytes if n is long and not one."""
    if not isinstance(n, sympy.Integer) or int(n) < PAD_DIMS_FROM:
        return n
    per_16_bytes = 16 // dtype.itemsize
    return sympy.Integer(-(-int(n) // per_16_bytes) * per_16_bytes)


def padded(graph: GraphLowering, x: Buffer, size: list[sympy.Expr]) -> Buffer:
    """A 2-d x with zeros up to size, stored in x's own memory order."""
    old, load, dtype = x.get_size(), x.make_loader(), x.get_dtype()
    device = x.get_device()
    order = [1, 0] if x.layout.stride[0] == 1 != x.layout.stride[1] else [0, 1]
    stored = [size[d] for d in order]  # the copy's dimensions, outer first

    def inner_fn(index):
        at = [index[order.index(d)] for d in range(2)]
        zero_index = ops.constant(0, torch.int64)
        inside = [
            ops.lt(ops.index_expr(at[d] - old[d], torch.int64), zero_index)
            for d in range(2)
            if size[d] != old[d]
        ]
        value = load([sympy.Min(at[d], old[d] - 1) for d in range(2)])
        zero = ops.constant(0, dtype)
        return ops.where(functools.reduce(ops.logical_and, inside), value, zero)

    layout = FixedLayout.contiguous(device, dtype, stored)
    body = Pointwise(device, dtype, inner_fn, tuple(stored), frozenset({"pad"}))
    copy = ComputedBuffer(graph.new_buffer_name(), layout, body)
    graph.register_buffer(copy)
    stride = [layout.stride[order.index(d)] for d in range(2)]
    view = FixedLayout(device, dtype, tuple(size), tuple(stride))
    return TensorBox(ReinterpretView(copy, view)).realize(graph)


def needs_padding(a, b) -> bool:
    """Whether a @ b (buffers or boxes) has a long dimension that is not aligned."""
    (m, k), n, dtype = a.get_size(), b.get_size()[1], a.get_dtype()
    return any(_aligned(d, dtype) != d for d in (m, k, n))


def padded_mm(graph: GraphLowering, a: Buffer, b: Buffer) -> TensorBox | None:
    """a @ b over dimensions padded to 16 bytes, or None if none needs it."""
    if not needs_padding(a, b):
        return None
    (m, k), n, dtype = a.get_size(), b.get_size()[1], a.get_dtype()
    mp, kp, np_ = (_aligned(d, dtype) for d in (m, k, n))
    a = padded(graph, a, [mp, kp]) if (mp, kp) != (m, k) else a
    b = padded(graph, b, [kp, np_]) if (kp, np_) != (k, n) else b
    device = a.get_device()
    layout = FixedLayout.contiguous(device, dtype, (mp, np_))
    name, op = graph.new_buffer_name(), aten.mm.default
    out = ExternKernelOut(name, layout, op, (a, b), {}, kernel=EXTERN_OUT[op])
    graph.register_buffer(out)
    graph.extern_kernels.append(out.kernel)
    window = FixedLayout(device, dtype, (m, n), layout.stride)
    return TensorBox(ReinterpretView(out, window))


def extern_out(graph: GraphLowering, op, args, kwargs) -> TensorBox:
    tensors = [a for a in args if isinstance(a, TensorBox)]
    if not all(t.get_dtype().is_floating_point for t in tensors):
        raise Unsupported("matmul of integers: no vendor kernel")
    # a view of a computed value: a strided window on it (chapter 6), no copy
    args = tuple(
        graph.realize_viewed(a) if isinstance(a, TensorBox) else a for a in args
    )
    if op == aten.mm.default and (result := padded_mm(graph, *args)) is not None:
        return result
    layout = FixedLayout.from_tensor(graph.current_node.meta["val"])
    buf = ExternKernelOut(
        graph.new_buffer_name(), layout, op, args, kwargs, kernel=EXTERN_OUT[op]
    )
    graph.register_buffer(buf)
    graph.extern_kernels.append(buf.kernel)
    return TensorBox(buf)


@register_lowering(aten.mm, aten.bmm, graph=True)
def mm(graph, a, b):
    return extern_out(graph, graph.current_node.target, (a, b), {})


@register_lowering(aten.baddbmm, graph=True)
def baddbmm(graph, bias, a, b, *, beta=1, alpha=1):
    kwargs = {"beta": beta, "alpha": alpha}
    return extern_out(graph, aten.baddbmm.default, (bias, a, b), kwargs)


def _is_pointwise_use(node: torch.fx.Node) -> bool:
    target = node.target
    return (
        isinstance(target, OpOverload)
        and torch.Tag.pointwise in target.tags
        and target in lowerings
    )


@register_lowering(aten.addmm, graph=True)
def addmm(graph, bias, a, b, *, beta=1, alpha=1):
    users = graph.current_node.users
    unfuse = users and all(map(_is_pointwise_use, users))
    if beta == 1 and alpha == 1 and (unfuse or needs_padding(a, b)):
        return add(extern_out(graph, aten.mm.default, (a, b), {}), bias)
    kwargs = {"beta": beta, "alpha": alpha}
    return extern_out(graph, aten.addmm.default, (bias, a, b), kwargs)


EXTERN_ALLOC = [
    aten.convolution.default,
    aten.convolution_backward.default,
    *(
        getattr(aten, f"_scaled_dot_product_{kind}{suffix}").default
        for kind in ("flash_attention", "efficient_attention", "cudnn_attention",
                     "flash_attention_for_cpu")
        for suffix in ("", "_backward")
        if hasattr(aten, f"_scaled_dot_product_{kind}{suffix}")
    ),
]


def extern_alloc(graph, *args, **kwargs):
    target = graph.current_node.target
    return graph.fallback(target, args, kwargs, reason="extern kernel", extern=True)


for _op in EXTERN_ALLOC:
    register_lowering(_op, graph=True)(extern_alloc)
