# generated from chapters/12_extern.md — edit there

from __future__ import annotations

import functools

import sympy
import torch

from minductor.ir import (
    Buffer,
    ComputedBuffer,
    ExternKernelOut,
    FixedLayout,
    Pointwise,
    ReinterpretBuffer,
    ReinterpretView,
    TensorBox,
)
from minductor.lowering import (
    GraphLowering,
    Unsupported,
    aten,
    lowerings,
    readers,
    register_lowering,
    store_passes,
)
from minductor.ops import ops
from minductor.pointwise import add
from minductor.views import is_pointwise_use

EXTERN_OUT = {  # ATen op -> the function the wrapper calls with out=
    aten.mm.default: "extern_kernels.mm",
    aten.bmm.default: "extern_kernels.bmm",
    aten.addmm.default: "extern_kernels.addmm",
    aten.baddbmm.default: "extern_kernels.baddbmm",
}


PAD_DIMS_FROM = 1024  # elements; shorter dimensions cost little either way


def _pads(dtype: torch.dtype) -> bool:
    """Whether cuBLAS multiplies dtype on tensor cores, whose kernels want alignment."""
    if dtype.itemsize == 2:
        return dtype.is_floating_point
    precision = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    return dtype == torch.float32 and precision == "tf32"


def _aligned(n: sympy.Expr, dtype: torch.dtype) -> sympy.Expr:
    """n, or the next multiple of 16 bytes if n is long and not one."""
    if not isinstance(n, sympy.Integer) or int(n) < PAD_DIMS_FROM or not _pads(dtype):
        return n
    per_16_bytes = 16 // dtype.itemsize
    return sympy.Integer(-(-int(n) // per_16_bytes) * per_16_bytes)


def padded(graph: GraphLowering, x: Buffer, size: list[sympy.Expr]) -> Buffer:
    """x (a matrix, or a bias vector) with zeros up to size, stored in x's own memory
    order."""
    old, load, dtype = x.get_size(), x.make_loader(), x.get_dtype()
    device, dims = x.get_device(), range(len(old))
    order = list(dims)
    if len(old) == 2 and x.layout.stride[0] == 1 != x.layout.stride[1]:
        order = [1, 0]  # a transposed matrix is padded as the matrix it views
    stored = [size[d] for d in order]  # the copy's dimensions, outer first
    stride = [x.layout.stride[d] for d in order]
    root = x
    while isinstance(root, ReinterpretBuffer):
        root = root.base
    # a gradient and its transpose, padded for a backward's two matmuls, are one copy
    key = ("padded", root.name, x.layout.offset, dtype, *stored, *stride)
    key += tuple(old[d] for d in order)
    if key in graph.copies:
        return _window(graph, graph.copies[key], order, size)

    within = _within_padding(graph, x, root, size)
    if within is not None:  # x's own storage has zeros where the padding goes
        return within
    origins = frozenset({"pad"})
    copy = _zero_padded(graph, load, old, size, order, dtype, device, origins)
    graph.copies[key] = copy
    return _window(graph, copy, order, size)


def _zero_padded(graph, load, old, size, order, dtype, device, origins) -> Buffer:
    """A buffer of the padded size, in memory order `order`: load's values where the
    old size has them, zeros elsewhere."""
    dims = range(len(old))
    stored = [size[d] for d in order]

    def inner_fn(index):
        at = [index[order.index(d)] for d in dims]
        zero_index = ops.constant(0, torch.int64)
        inside = [
            ops.lt(ops.index_expr(at[d] - old[d], torch.int64), zero_index)
            for d in dims
            if size[d] != old[d]
        ]
        value = load([sympy.Min(at[d], old[d] - 1) for d in dims])
        zero = ops.constant(0, dtype)
        return ops.where(functools.reduce(ops.logical_and, inside), value, zero)

    layout = FixedLayout.contiguous(device, dtype, stored)
    body = Pointwise(device, dtype, inner_fn, tuple(stored), origins)
    buf = ComputedBuffer(graph.new_buffer_name(), layout, body)
    graph.register_buffer(buf)
    return buf


def store_padded(graph: GraphLowering, n: torch.fx.Node, box: TensorBox) -> bool:
    """Store a value that matmuls read, whose last dimension is long and not aligned,
    with that dimension padded with zeros; the value is then a window onto it."""
    size, dtype = box.get_size(), box.get_dtype()
    if len(size) < 2 or _aligned(size[-1], dtype) == size[-1]:
        return False
    if not isinstance(box.data, Pointwise) or not _read_by_matmul(n):
        return False
    padded_size = [*size[:-1], _aligned(size[-1], dtype)]
    order = list(range(len(size)))
    origins = box.data.origins
    buf = _zero_padded(
        graph, box.make_loader(), size, padded_size, order, dtype, box.get_device(),
        origins,
    )  # fmt: skip
    graph.zero_padded[buf.name] = tuple(size)
    window = FixedLayout(buf.get_device(), dtype, tuple(size), buf.layout.stride)
    box.data = ReinterpretView(buf, window)
    return True


def _read_by_matmul(n: torch.fx.Node) -> bool:
    """Whether an mm or addmm reads n's value, directly or through views, and nothing
    returns it (an output keeps eager's strides)."""
    found = list(readers(n))
    matmuls = (aten.mm.default, aten.addmm.default)
    returned = any(r.op == "output" for r in found)
    return not returned and any(r.target in matmuls for r in found)


def _within_padding(graph, x: Buffer, root: Buffer, size) -> Buffer | None:
    """x padded to size as a window onto root, if root was stored zero-padded
    (`store_padded`) and x views it from its start, each dimension to pad being root's
    padded one."""
    old_root = graph.zero_padded.get(root.name)
    if old_root is None or x.layout.offset != 0:
        return None
    for d, (new, old) in enumerate(zip(size, x.get_size())):
        if new == old:
            continue
        if x.layout.stride[d] != 1 or old != old_root[-1]:
            return None
        if new != root.layout.size[-1]:
            return None
    view = FixedLayout(x.get_device(), x.get_dtype(), tuple(size), x.layout.stride)
    return TensorBox(ReinterpretView(root, view)).realize(graph)


store_passes.register(store_padded, chapter=12)


def _window(graph: GraphLowering, copy: Buffer, order: list[int], size) -> Buffer:
    """The padded copy seen with the operand's dimensions (its memory order is order)."""
    stride = [copy.layout.stride[order.index(d)] for d in range(len(size))]
    view = FixedLayout(copy.get_device(), copy.get_dtype(), tuple(size), tuple(stride))
    return TensorBox(ReinterpretView(copy, view)).realize(graph)


def per_column(bias, a, b) -> bool:
    """Whether an addmm's bias holds one value per column of the result."""
    size = bias.get_size()
    return len(size) == 1 and size[0] == b.get_size()[1]


def needs_padding(a, b) -> bool:
    """Whether a @ b (buffers or boxes) has a long dimension that is not aligned."""
    (m, k), n, dtype = a.get_size(), b.get_size()[1], a.get_dtype()
    return any(_aligned(d, dtype) != d for d in (m, k, n))


def padded_mm(
    graph: GraphLowering, a: Buffer, b: Buffer, bias: Buffer | None = None, **scales
) -> TensorBox | None:
    """a @ b over dimensions padded to 16 bytes, or None if none needs it; with a
    bias of one value per column, addmm."""
    if not needs_padding(a, b):
        return None
    (m, k), n, dtype = a.get_size(), b.get_size()[1], a.get_dtype()
    mp, kp, np_ = (_aligned(d, dtype) for d in (m, k, n))
    a = padded(graph, a, [mp, kp]) if (mp, kp) != (m, k) else a
    b = padded(graph, b, [kp, np_]) if (kp, np_) != (k, n) else b
    device = a.get_device()
    layout = FixedLayout.contiguous(device, dtype, (mp, np_))
    name, op, args = graph.new_buffer_name(), aten.mm.default, (a, b)
    if bias is not None:
        bias = padded(graph, bias, [np_]) if np_ != n else bias
        op, args = aten.addmm.default, (bias, a, b)
    out = ExternKernelOut(name, layout, op, args, scales, kernel=EXTERN_OUT[op])
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
    result = None
    if op == aten.mm.default:
        result = padded_mm(graph, *args)
    elif op == aten.addmm.default and per_column(*args):
        bias, a, b = args
        result = padded_mm(graph, a, b, bias, **kwargs)
    if result is not None:
        return result
    layout = FixedLayout.from_tensor(graph.current_node.meta["val"])
    buf = ExternKernelOut(
        graph.new_buffer_name(), layout, op, args, kwargs, kernel=EXTERN_OUT[op]
    )
    graph.register_buffer(buf)
    graph.extern_kernels.append(buf.kernel)
    return TensorBox(buf)


@register_lowering(aten.mm, aten.bmm, graph=True, extern=True)
def mm(graph, a, b):
    return extern_out(graph, graph.current_node.target, (a, b), {})


@register_lowering(aten.baddbmm, graph=True, extern=True)
def baddbmm(graph, bias, a, b, *, beta=1, alpha=1):
    kwargs = {"beta": beta, "alpha": alpha}
    return extern_out(graph, aten.baddbmm.default, (bias, a, b), kwargs)


def read_by_pointwise_ops(node: torch.fx.Node) -> bool:
    """Whether node has readers, through views (a Linear on 3-d), and every one is a
    pointwise op we lower (chapter 25 asks too, for a template's epilogue)."""
    found = list(readers(node))
    return bool(found) and all(is_pointwise_use(r) and r.target in lowerings for r in found)


@register_lowering(aten.addmm, graph=True, extern=True)
def addmm(graph, bias, a, b, *, beta=1, alpha=1):
    unfuse = read_by_pointwise_ops(graph.current_node)
    split = unfuse or (needs_padding(a, b) and not per_column(bias, a, b))
    if beta == 1 and alpha == 1 and split:
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
    register_lowering(_op, graph=True, extern=True)(extern_alloc)


import operator  # noqa: E402

import torch.nn.functional as F  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from minductor.capture import graph_passes  # noqa: E402
from minductor.config import log  # noqa: E402

CONSTANT_LIMIT = 1 << 24  # elements: the most a folded node may hold


class _RandomDraws(TorchDispatchMode):
    """Notes whether any ATen op that draws random numbers ran inside it."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen |= torch.Tag.nondeterministic_seeded in func.tags
        return func(*args, **(kwargs or {}))


_ARITHMETIC = "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift"
# x += y and x[i] = y as Dynamo records them: Python's operators, or Tensor's dunders
IN_PLACE_OPERATORS = {getattr(operator, f"i{op}") for op in _ARITHMETIC.split()}
IN_PLACE_OPERATORS.add(operator.setitem)
IN_PLACE_DUNDERS = {f"__i{op}__" for op in _ARITHMETIC.split()} | {"__setitem__"}


def _writes_into(user: torch.fx.Node) -> bool:
    """Whether user may write into its first argument: torch's in-place ops end in an
    underscore (operator.and_ does not write: Python's module is told apart)."""
    if "out" in user.kwargs or user.target in IN_PLACE_OPERATORS:
        return True
    if user.op == "call_method":
        name = user.target
    elif getattr(user.target, "__module__", None) in ("operator", "_operator"):
        return False
    else:
        name = getattr(user.target, "__name__", "")
    return isinstance(name, str) and (
        name in IN_PLACE_DUNDERS or name.endswith("_") and not name.endswith("__")
    )


def _shares_storage(value: Any, storage: StorageWeakRef) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_shares_storage(v, storage) for v in value)
    return (
        isinstance(value, torch.Tensor)
        and StorageWeakRef(value.untyped_storage()) == storage
    )


def _written_later(node: torch.fx.Node, needed: set[torch.fx.Node]) -> bool:
    """Whether an op outside `needed` may write into node's memory, directly or
    through a view of it (a user whose example value shares node's storage)."""
    storage = StorageWeakRef(node.meta["example_value"].untyped_storage())
    stack, seen = list(node.users), set()
    while stack:
        user = stack.pop()
        if user in seen or user in needed:
            continue
        seen.add(user)
        if _writes_into(user):
            return True
        if _shares_storage(user.meta.get("example_value"), storage):
            stack.extend(user.users)  # a view: its users reach node's memory too
    return False


def constant_value(node: torch.fx.Node) -> torch.Tensor | None:
    """The value of node computed now, if nothing known only at run time reaches it."""
    needed, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        value = n.meta.get("example_value")
        if n.op not in ("call_function", "call_method") or not isinstance(
            value, torch.Tensor
        ):
            return None
        numel = value.numel()  # a SymInt where a size is symbolic: never compared
        if not isinstance(numel, int) or numel > CONSTANT_LIMIT:
            return None
        needed.add(n)
        stack.extend(n.all_input_nodes)
    if any(_written_later(n, needed) for n in needed):
        return None
    values: dict[torch.fx.Node, Any] = {}
    try:
        with _RandomDraws() as draws:
            for n in node.graph.nodes:  # graph order: every input before its users
                if n in needed:
                    args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), values.get)
                    if n.op == "call_method":
                        values[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
                    else:
                        values[n] = n.target(*args, **kwargs)
    except Exception as error:  # an op that only makes sense while tracing, say
        log.debug("minductor: cannot compute %s now: %s", node.name, error)
        return None
    return None if draws.seen else values[node]


def mask_meaning(mask: torch.Tensor, queries: int, keys: int) -> str | None:
    """"all" if the mask keeps every score, "causal" if exactly the lower triangle."""
    if mask.is_floating_point():
        lowest = torch.finfo(mask.dtype).min
        if not ((mask == 0) | (mask <= lowest)).all():
            return None  # a bias with other values: ALiBi, T5's positions
        mask = mask == 0
    elif mask.dtype != torch.bool:
        return None
    if mask.all():
        return "all"
    # symbolic sizes are not compared: a comparison would add a guard to the graph
    if isinstance(queries, int) and isinstance(keys, int) and queries == keys:
        lower = torch.ones(queries, keys, dtype=torch.bool, device=mask.device).tril()
        if mask.shape[-2:] == (queries, keys) and (mask == lower).all():
            return "causal"
    return None


def fold_attention_masks(gm: torch.fx.GraphModule, example_inputs, needs_grad) -> None:
    """Drop attention masks that keep every score; say is_causal for causal ones."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not F.scaled_dot_product_attention:
            continue
        # torch's binding takes the mask, dropout_p and is_causal by position or name
        kwargs = {**dict(zip(("attn_mask", "dropout_p", "is_causal"), node.args[3:])),
                  **node.kwargs}  # fmt: skip
        mask = kwargs.get("attn_mask")
        if not isinstance(mask, torch.fx.Node) or kwargs.get("is_causal", False):
            continue
        query, key = (a.meta.get("example_value") for a in node.args[:2])
        value = constant_value(mask)
        if value is None or not isinstance(query, torch.Tensor):
            continue
        meaning = mask_meaning(value, query.shape[-2], key.shape[-2])
        if meaning is None:
            continue
        log.info("minductor: the mask of %s %s", node.name,
                 "keeps every score: dropped" if meaning == "all" else
                 "is causal: is_causal=True instead")  # fmt: skip
        kwargs.update(attn_mask=None, is_causal=meaning == "causal")
        node.args, node.kwargs = node.args[:3], kwargs
        _erase_unused(mask)
        changed = True
    if changed:
        gm.recompile()


def _erase_unused(node: torch.fx.Node) -> None:
    """Erase node if nothing reads it any more, then its inputs the same way."""
    stack, erased = [node], set()
    while stack:
        n = stack.pop()
        if n in erased or n.users or n.op not in ("call_function", "call_method"):
            continue
        stack.extend(n.all_input_nodes)
        n.graph.erase_node(n)
        erased.add(n)


graph_passes.register(fold_attention_masks, chapter=12)
