# generated from chapters/11_extern.md — edit there

from __future__ import annotations

import torch
from torch._ops import OpOverload

from minductor.ir import Buffer, ExternKernelOut, FixedLayout, GenericView, TensorBox
from minductor.lowering import (
    GraphLowering,
    Unsupported,
    add,
    aten,
    lowerings,
    register_lowering,
)


EXTERN_OUT = {  # ATen op -> the function the wrapper calls with out=
    aten.mm.default: "extern_kernels.mm",
    aten.bmm.default: "extern_kernels.bmm",
    aten.addmm.default: "extern_kernels.addmm",
    aten.baddbmm.default: "extern_kernels.baddbmm",
}


def realize_input(graph: GraphLowering, x: TensorBox) -> Buffer:
    """x in memory; a view of a computed value as a strided window on it, if it can."""
    viewed = x
    while isinstance(viewed.data, GenericView):
        viewed = viewed.data.box
    viewed.realize(graph)
    return x.realize(graph)


def extern_out(graph: GraphLowering, op, args, kwargs) -> TensorBox:
    tensors = [a for a in args if isinstance(a, TensorBox)]
    if not all(t.get_dtype().is_floating_point for t in tensors):
        raise Unsupported("matmul of integers: no vendor kernel")
    args = tuple(
        realize_input(graph, a) if isinstance(a, TensorBox) else a for a in args
    )
    meta = graph.current_node.meta["val"]
    layout = FixedLayout.from_tensor(meta)
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
    if beta == 1 and alpha == 1 and users and all(map(_is_pointwise_use, users)):
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


def _extern_alloc(graph, *args, **kwargs):
    target = graph.current_node.target
    return graph.fallback(target, args, kwargs, reason="extern kernel", extern=True)


for _op in EXTERN_ALLOC:
    register_lowering(_op, graph=True)(_extern_alloc)
