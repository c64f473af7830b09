# generated from chapters/08_factories.md — edit there

from __future__ import annotations

import math
from typing import Any, Callable

import sympy
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from minductor.capture import aten_passes
from minductor.ir import (
    Buffer,
    FallbackKernel,
    FixedLayout,
    Pointwise,
    TensorBox,
    as_exprs,
)
from minductor.lowering import (
    SUPPORTED_DTYPES,
    Unsupported,
    aten,
    constant_box,
    prims,
    register_lowering,
    store_passes,
    stored_anyway,
)
from minductor.ops import ops
from minductor.pointwise import (
    converting_loader,
    origins_of,
    pointwise,
    scalar_value,
)
from minductor.sizevars import FloorDiv, contiguous_strides, flat_index


@register_lowering(aten.full)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return constant_box(fill_value, size, dtype, device)


@register_lowering(aten.scalar_tensor)
def scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return constant_box(value, (), dtype or torch.get_default_dtype(), device)


@register_lowering(aten.clone, aten.lift_fresh_copy)
def clone(x, *, memory_format=None):
    return pointwise(lambda v: v, [x], dtypes=(x.get_dtype(), x.get_dtype()))


@register_lowering(aten.copy)
def copy(x, src, non_blocking=False):
    """The functional copy_: src, broadcast to x's shape and converted to its dtype."""
    if src.get_device() != x.get_device():
        raise Unsupported("copy between devices")
    load = converting_loader(src, x.get_size(), x.get_dtype())
    return TensorBox(
        Pointwise(x.get_device(), x.get_dtype(), load, x.get_size(), origins_of([src]))
    )


def convert_dtype(x: TensorBox, dtype: torch.dtype) -> TensorBox:
    """x as dtype, elementwise (reductions and scatters widen and narrow with it)."""
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {dtype}")
    return pointwise(
        lambda v: ops.to_dtype(v, dtype), [x], dtypes=(x.get_dtype(), dtype)
    )


@register_lowering(aten._to_copy)
def to_copy(
    x,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    if device is not None and torch.device(device) != x.get_device():
        raise Unsupported("copy between devices")
    return convert_dtype(x, dtype or x.get_dtype())


@register_lowering(prims.convert_element_type)
def convert_element_type(x, dtype):
    return convert_dtype(x, dtype)


def store_narrow(graph, n: torch.fx.Node, box: TensorBox) -> bool:
    """Store a widening conversion's source, not its result."""
    if n.target not in (prims.convert_element_type.default, aten._to_copy.default):
        return False
    source = graph.env.get(n.args[0])
    if not isinstance(source, TensorBox) or type(source.data) is not Pointwise:
        return False
    narrow, wide = source.get_dtype(), box.get_dtype()
    if not (narrow.is_floating_point and wide.is_floating_point):
        return False
    if narrow.itemsize >= wide.itemsize or stored_anyway(n):
        return False
    source.realize(graph)
    box.data = convert_dtype(source, wide).data
    return True


store_passes.register(store_narrow, chapter=8)


def _factory(value: int) -> Callable[..., TensorBox]:
    def lowering(size, *, dtype=None, layout=None, device=None, pin_memory=None):
        return constant_box(value, size, dtype or torch.get_default_dtype(), device)

    return lowering


register_lowering(aten.zeros)(_factory(0))
register_lowering(aten.ones)(_factory(1))


def _new(value_of: Callable[[tuple], Any]) -> Callable[..., TensorBox]:
    def lowering(x, size, *args, dtype=None, layout=None, device=None, pin_memory=None):
        dtype, device = dtype or x.get_dtype(), device or x.get_device()
        return constant_box(value_of(args), size, dtype, device)

    return lowering


register_lowering(aten.new_zeros)(_new(lambda args: 0))
register_lowering(aten.new_ones)(_new(lambda args: 1))
register_lowering(aten.new_full)(_new(lambda args: args[0]))
register_lowering(aten.new_empty, aten.new_empty_strided)(_new(lambda args: 0))


@register_lowering(aten.empty.memory_format, aten.empty_strided)
def empty(size, *stride, dtype=None, layout=None, device=None, **unused):
    return constant_box(0, size, dtype or torch.get_default_dtype(), device)


def _like(value_of: Callable[[tuple], Any]) -> Callable[..., TensorBox]:
    def lowering(x, *args, dtype=None, device=None, memory_format=None, **unused):
        dtype, device = dtype or x.get_dtype(), device or x.get_device()
        return constant_box(value_of(args), x.get_size(), dtype, device)

    return lowering


register_lowering(aten.zeros_like)(_like(lambda args: 0))
register_lowering(aten.ones_like)(_like(lambda args: 1))
register_lowering(aten.full_like)(_like(lambda args: args[0]))


def _numbers(*values: Any) -> bool:
    """True if all are integers (ints or integer sizes such as s0), False if some are
    floats; anything else is declined."""

    def is_int(v: Any) -> bool:
        if type(v) in (int, float):
            return type(v) is int
        if isinstance(v, sympy.Expr) and v.is_integer:
            return True
        raise Unsupported(f"a range over {values}")  # a bool, a tensor

    return all([is_int(v) for v in values])


def _float_compute(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _affine(first: Any, step: Any, i: Any, compute: torch.dtype) -> Any:
    """first + step * i, with i an int64 value, computed in `compute`."""
    if compute != torch.int64:
        i = ops.to_dtype(i, compute)
    scaled = ops.mul(scalar_value(step, compute), i)
    return ops.add(scalar_value(first, compute), scaled)


def _range_box(length: int, dtype, device, at: Callable[[Any], Any]) -> TensorBox:
    """A 1-d tensor whose element i is at(i): a body over the index, loading nothing."""
    if dtype not in SUPPORTED_DTYPES or dtype == torch.bool:
        raise Unsupported(f"a range of {dtype}")
    device = torch.device(device or "cpu")

    def inner_fn(index):
        return ops.to_dtype(at(ops.index_expr(index[0], torch.int64)), dtype)

    return TensorBox(Pointwise(device, dtype, inner_fn, as_exprs([length])))


@register_lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(*bounds, dtype=None, layout=None, device=None, pin_memory=None):
    if len(bounds) == 1:
        bounds = (0, *bounds)
    start, end, step = (*bounds, 1)[:3]
    integers = _numbers(start, end, step)
    dtype = dtype or (torch.int64 if integers else torch.get_default_dtype())
    symbolic = any(isinstance(b, sympy.Expr) for b in (start, end, step))
    if symbolic and not (integers and isinstance(step, int)):
        raise Unsupported(f"arange over {bounds}: a symbolic step, or float bounds")
    if symbolic:  # the same ceiling, for a step of either sign
        size = end - start if step > 0 else start - end
        length, compute = FloorDiv(size + abs(step) - 1, abs(step)), torch.int64
    elif integers:
        length, compute = -((start - end) // step), torch.int64  # an exact ceil
    elif dtype.is_floating_point:
        length, compute = math.ceil((end - start) / step), _float_compute(dtype)
    elif all(float(b).is_integer() for b in (start, end, step)):  # (0, 32, 1.0)
        start, end, step = int(start), int(end), int(step)
        length, compute = -((start - end) // step), torch.int64
    else:  # ATen truncates the bounds first, with length rules of its own
        raise Unsupported(f"arange of {dtype} with bounds {bounds}")
    at = lambda i: _affine(start, step, i, compute)  # noqa: E731
    return _range_box(sympy.Max(length, 0), dtype, device, at)


@register_lowering(prims.iota)
def iota(length, *, start, step, dtype, device, requires_grad=False):
    _numbers(length, start, step)
    at = lambda i: _affine(start, step, i, torch.int64)  # noqa: E731
    return _range_box(length, dtype, device, at)


@register_lowering(aten.linspace.default)
def linspace(
    start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None
):
    _numbers(start, end, steps)
    dtype = dtype or torch.get_default_dtype()
    if not dtype.is_floating_point:  # eager truncates a float it computes per device
        raise Unsupported(f"linspace of {dtype}")
    if steps <= 1:  # no step to take: empty, or just start
        return constant_box(start, [steps], dtype, device)
    compute, step = _float_compute(dtype), (end - start) / (steps - 1)

    def at(i):
        up = _affine(start, step, i, compute)
        back = ops.sub(ops.constant(steps - 1, torch.int64), i)  # points left to end
        down = _affine(end, -step, back, compute)
        return ops.where(ops.lt(i, ops.constant(steps // 2, torch.int64)), up, down)

    return _range_box(steps, dtype, device, at)


def _seed_buffer(graph: Any, device: torch.device) -> Buffer:
    """One int64, drawn by ATen from torch's generator on `device` at every call."""
    layout = FixedLayout.contiguous(device, torch.int64, (1,))
    args, kwargs = (0, 2**63 - 1, [1]), {"dtype": torch.int64, "device": device}
    name = graph.new_buffer_name()
    seed = FallbackKernel(name, layout, aten.randint.low, args, kwargs)
    graph.register_buffer(seed)  # not graph.fallback: no op of the graph fell back
    return seed


def _random(graph, mode: str, size, dtype, device, generator) -> TensorBox:
    if generator is not None:
        raise Unsupported("an explicit torch.Generator: its state is outside the graph")
    dtype = dtype or torch.get_default_dtype()
    if not dtype.is_floating_point or dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"{mode} of {dtype}")
    device = torch.device(device or "cpu")
    load_seed = _seed_buffer(graph, device).make_loader()
    ranges = as_exprs(size)
    strides = contiguous_strides(ranges)
    below_one = 1 - torch.finfo(dtype).eps / 2  # the largest value under 1

    def inner_fn(index):
        seed = load_seed([sympy.Integer(0)])
        offset = ops.index_expr(flat_index(index, strides), torch.int64)
        value = getattr(ops, mode)(seed, offset)
        if dtype == torch.float32:
            return value
        value = ops.to_dtype(value, dtype)
        if mode == "rand" and dtype in (torch.float16, torch.bfloat16):
            value = ops.minimum(value, ops.constant(below_one, dtype))
        return value

    box = TensorBox(Pointwise(device, dtype, inner_fn, ranges))
    graph.realize_intermediate(box)  # computed once, however many read it
    return box


# (layout and pin_memory change nothing a kernel does)
@register_lowering(aten.rand.default, aten.rand.generator, graph=True)
def rand(graph, size, *, generator=None, dtype=None, device=None, **ignored):
    return _random(graph, "rand", size, dtype, device, generator)


@register_lowering(aten.randn.default, aten.randn.generator, graph=True)
def randn(graph, size, *, generator=None, dtype=None, device=None, **ignored):
    return _random(graph, "randn", size, dtype, device, generator)


def _region(gm: torch.fx.GraphModule, copy: torch.fx.Node) -> list | None:
    """What a copy's CPU source is made from, if it is made from arguments and
    constants alone and read nowhere else; None if not."""
    device = copy.kwargs["device"]
    found: dict[torch.fx.Node, None] = {}
    todo = [copy.args[0]]
    while todo:
        node = todo.pop()
        if node in found:
            continue
        if node.op == "get_attr":
            value = getattr(gm, node.target)
        elif node.op == "call_function":
            value = node.meta.get("val")
        else:
            return None  # an input
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return None
        tags = getattr(node.target, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags:
            return None  # the CPU's generator is eager's
        found[node] = None
        todo += node.all_input_nodes
    for node in found:
        for user in node.users:
            to_device = (
                user.target is aten._to_copy.default
                and user.kwargs.get("device") == device
            )
            if user not in found and not to_device:
                return None
    return list(found)


def _move(gm: torch.fx.GraphModule, region: list[torch.fx.Node], device) -> None:
    for node in region:
        if node.op == "get_attr":  # a constant: copied to the device once, here
            name = f"{node.target}_on_{device.type}"
            with unset_fake_temporarily():  # a real copy, inside Dynamo's fake mode
                setattr(gm, name, getattr(gm, node.target).to(device))
            node.target = name
        schema = getattr(node.target, "_schema", None)
        if schema is not None and any(a.name == "device" for a in schema.arguments):
            node.kwargs = {**node.kwargs, "device": device}
        if isinstance(node.meta.get("val"), torch.Tensor):
            node.meta["val"] = node.meta["val"].to(device)


def build_on_the_device(gm: torch.fx.GraphModule) -> None:
    """Tensors made on the CPU only to be copied to a device: made on the device."""
    graph = gm.graph
    for copy in list(graph.find_nodes(op="call_function", target=aten._to_copy.default)):
        device = copy.kwargs.get("device")
        source = copy.args[0]
        if device is None or torch.device(device).type == "cpu":
            continue
        value = source.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            continue
        region = _region(gm, copy)
        if region is None:
            continue
        _move(gm, region, torch.device(device))
        for user in list(source.users):  # the copies: now within one device
            kept = {k: v for k, v in user.kwargs.items() if k != "device"}
            if user.target is aten._to_copy.default and kept.get("dtype") in (
                None, value.dtype,
            ) and not set(kept) - {"dtype", "layout"}:  # fmt: skip
                user.replace_all_uses_with(source)
                graph.erase_node(user)
    graph.eliminate_dead_code()
    gm.recompile()


aten_passes.register(build_on_the_device, chapter=8)
