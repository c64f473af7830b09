# generated from chapters/11_indexing.md — edit there

from __future__ import annotations

import logging
import operator
from typing import Any, Callable, Sequence

import sympy
import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq
from torch.multiprocessing.reductions import StorageWeakRef

from minductor.capture import aten_passes
from minductor.config import config
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    GenericView,
    Index,
    InputBuffer,
    MutationBuffer,
    Pointwise,
    Reduction,
    ReinterpretBuffer,
    ReinterpretView,
    Scatter,
    TensorBox,
)
from minductor.lowering import (
    SUPPORTED_DTYPES,
    Unsupported,
    aten,
    lowerings,
    register_lowering,
)
from minductor.pointwise import (
    common_device,
    origins_of,
    broadcast_loader,
    broadcast_shapes,
    converting_loader,
)
from minductor.factories import convert_dtype, clone
from minductor.ops import NullHandler, ops, set_handler
from minductor.sizevars import index_vars, product
from minductor.views import view

log = logging.getLogger("minductor")


INDEX_DTYPES = (torch.int32, torch.int64)


def indirect_loader(
    index: TensorBox, shape, x: TensorBox, dim: int, wrap_neg: bool
) -> Callable[[Index], sympy.Expr]:
    """index (broadcast to shape) as a position along dimension dim of x."""
    if index.get_dtype() not in INDEX_DTYPES:
        raise Unsupported(f"index tensor of dtype {index.get_dtype()}")
    load = broadcast_loader(index, shape)
    size = x.get_size()[dim]
    # an int32 position times a stride could overflow int32 in a tensor this large
    widen = index.get_dtype() != torch.int64 and product(x.get_size()) >= 2**31

    def position(i: Index) -> sympy.Expr:
        value = load(i)
        if widen:
            value = ops.to_dtype(value, torch.int64)
        return ops.indirect_indexing(value, size, True, wrap_neg)

    return position


def _gathered(x: TensorBox, index: TensorBox, ranges, where: Callable) -> TensorBox:
    """A Pointwise over ranges that reads x at where(i), a list of positions."""
    if x.get_dtype() not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {x.get_dtype()}")
    loader = x.make_loader()
    return TensorBox(
        Pointwise(
            common_device([x, index]),
            x.get_dtype(),
            lambda i: loader(where(i)),
            tuple(ranges),
            origins_of([x, index]),
        )
    )


def _along(x: TensorBox, dim: int, index: TensorBox) -> Callable[[Index], list]:
    """i -> i with position dim replaced by index[i]: gather's (and scatter's) rule."""
    size, ranges = x.get_size(), index.get_size()
    if not size or len(ranges) != len(size):
        raise Unsupported("an index whose rank is not x's, or a 0-d x")
    dim %= len(size)
    if any(ranges[d] > size[d] for d in range(len(size)) if d != dim):
        raise Unsupported("an index larger than x")  # eager raises; so will ATen
    position = indirect_loader(index, index.get_size(), x, dim, False)

    def where(i):
        full = list(i)
        full[dim] = position(i)
        return full

    return where


@register_lowering(aten.gather)
def gather(x, dim, index, sparse_grad=False):
    return _gathered(x, index, index.get_size(), _along(x, dim, index))


@register_lowering(aten.index_select)
def index_select(x, dim, index):
    size = x.get_size()
    if not size or len(index.get_size()) > 1:
        raise Unsupported("index_select of a 0-d tensor or with a 2-d index")
    dim %= len(size)
    n = product(index.get_size())
    position = indirect_loader(index, index.get_size(), x, dim, False)
    one_d = len(index.get_size()) == 1

    def where(i):
        full = list(i)
        full[dim] = position([i[dim]] if one_d else [])
        return full

    return _gathered(x, index, (*size[:dim], n, *size[dim + 1 :]), where)


@register_lowering(aten.embedding)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if len(weight.get_size()) != 2:
        raise Unsupported("embedding of a table that is not 2-d")
    rows, width = weight.get_size()
    n = len(indices.get_size())
    position = indirect_loader(indices, indices.get_size(), weight, 0, False)
    ranges = (*indices.get_size(), width)
    return _gathered(weight, indices, ranges, lambda i: [position(i[:n]), i[n]])


def advanced_index(x: TensorBox, indices: Sequence[Any]):
    """The output shape of x[indices], and the function from an output index to x's."""
    size = x.get_size()
    if len(indices) > len(size):
        raise Unsupported("more indices than dimensions")
    indices = list(indices) + [None] * (len(size) - len(indices))
    dims = [d for d, t in enumerate(indices) if t is not None]
    if not dims:
        raise Unsupported("no index tensors")
    if any(indices[d].get_dtype() in (torch.bool, torch.uint8) for d in dims):
        raise Unsupported("a boolean mask index: the result's size depends on data")
    try:
        shape = broadcast_shapes(*[indices[d].get_size() for d in dims])
    except RuntimeError:  # eager raises; so will ATen
        raise Unsupported("index tensors that do not broadcast") from None
    position = {d: indirect_loader(indices[d], shape, x, d, True) for d in dims}
    rest = [d for d in range(len(size)) if d not in position]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    first = dims[0] if adjacent else 0  # where the broadcast dims go in the output
    ranges = (
        *[size[d] for d in rest[:first]],
        *shape,
        *[size[d] for d in rest[first:]],
    )

    def where(i):
        inner = i[first : first + len(shape)]
        full: list[Any] = [None] * len(size)
        for d, v in zip(rest, [*i[:first], *i[first + len(shape) :]]):
            full[d] = v
        for d in dims:
            full[d] = position[d](inner)
        return full

    return ranges, where, [indices[d] for d in dims]


@register_lowering(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(x, indices):
    ranges, where, boxes = advanced_index(x, indices)
    return _gathered(x, boxes[0], ranges, where)


ATOMIC_ADD_DTYPES = (
    torch.float32,
    torch.float64,
    torch.int32,
    torch.int64,
)


WIDENED = {torch.float16: torch.float32, torch.bfloat16: torch.float32}  # to sum in


def _scatter(graph, x, ranges, where, value, mode, origin: str, into=None) -> TensorBox:
    """A copy of x (or x's own memory, into), then a MutationBuffer writing value(i)
    at x's position where(i)."""
    if x.get_dtype() not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {x.get_dtype()}")
    if mode == "atomic_add" and x.get_dtype() in WIDENED:  # sum wide, round once
        if into is not None:
            raise Unsupported(f"a sum of {x.get_dtype()} in place, unwidened")
        wide = WIDENED[x.get_dtype()]
        widened = lambda i: ops.to_dtype(value(i), wide)  # noqa: E731
        wide_x = convert_dtype(x, wide)
        summed = _scatter(graph, wide_x, ranges, where, widened, mode, origin)
        return convert_dtype(summed, x.get_dtype())
    if mode == "atomic_add" and x.get_dtype() not in ATOMIC_ADD_DTYPES:
        raise Unsupported(f"atomic add of {x.get_dtype()}")
    target = into if into is not None else graph.realize_intermediate(clone(x))
    indexer = target.layout.make_indexer()
    body = Scatter(
        x.get_device(),
        x.get_dtype(),
        value,
        tuple(ranges),
        frozenset({origin}),
        lambda i: indexer(where(i)),
        mode,
    )
    buf = MutationBuffer(graph.new_buffer_name(), target.layout, body, target)
    graph.register_buffer(buf)
    return TensorBox(buf)


def _values(src: Any, x: TensorBox, ranges, broadcast=False) -> Callable:
    """What a scatter writes at i: src[i] (broadcast for index_put), or a number."""
    if not isinstance(src, TensorBox):
        return lambda i: ops.constant(src, x.get_dtype())
    if src.get_dtype() != x.get_dtype():
        raise Unsupported("a scatter source of another dtype")
    if not broadcast:  # scatter: src may be larger than the index; read src[i]
        if len(src.get_size()) != len(ranges) or any(
            r > s for r, s in zip(ranges, src.get_size())
        ):
            raise Unsupported("a scatter source smaller than the index")
        return src.make_loader()
    if not _broadcasts_to(src.get_size(), ranges):  # eager raises; so will ATen
        raise Unsupported("values that do not broadcast to the indexed shape")
    return broadcast_loader(src, ranges)


def _broadcasts_to(size, shape) -> bool:
    try:
        return broadcast_shapes(shape, size) == tuple(shape)
    except RuntimeError:
        return False


@register_lowering(aten.scatter.src, aten.scatter.value, graph=True)
def scatter(graph, x, dim, index, src, into=None):
    where, value = _along(x, dim, index), _values(src, x, index.get_size())
    return _scatter(graph, x, index.get_size(), where, value, None, "scatter", into)


@register_lowering(aten.scatter_add, graph=True)
def scatter_add(graph, x, dim, index, src, into=None):
    ranges = index.get_size()
    where, value = _along(x, dim, index), _values(src, x, ranges)
    return _scatter(graph, x, ranges, where, value, "atomic_add", "scatter_add", into)


@register_lowering(aten.scatter_reduce.two, graph=True)
def scatter_reduce(graph, x, dim, index, src, reduce, *, include_self=True, into=None):
    if reduce != "sum" or not include_self:
        raise Unsupported(f"scatter_reduce {reduce!r}, include_self={include_self}")
    return scatter_add(graph, x, dim, index, src, into)


@register_lowering(aten.index_put, graph=True)
def index_put(graph, x, indices, values, accumulate=False, into=None):
    masked = None if into is not None else _masked_fill(x, indices, values, accumulate)
    if masked is not None:
        return masked
    ranges, where, _ = advanced_index(x, indices)
    value = _values(values, x, ranges, broadcast=True)
    mode = "atomic_add" if accumulate else None
    return _scatter(graph, x, ranges, where, value, mode, "index_put", into)


def _masked_fill(x: TensorBox, indices, values, accumulate: bool) -> TensorBox | None:
    """x[mask] = v with one value v: where(mask, v, x). None if it is not that."""
    if accumulate or len(indices) != 1 or not isinstance(indices[0], TensorBox):
        return None
    mask = indices[0]
    if mask.get_dtype() != torch.bool:
        return None
    size, covered = x.get_size(), mask.get_size()
    if tuple(covered) != tuple(size[: len(covered)]):
        return None
    if not isinstance(values, TensorBox) or product(values.get_size()) != 1:
        return None
    if len({x.get_device(), mask.get_device(), values.get_device()}) != 1:
        return None
    trailing = [sympy.Integer(1)] * (len(size) - len(covered))
    load_mask = broadcast_loader(view(mask, [*covered, *trailing]), size)
    load_value = converting_loader(view(values, []), size, x.get_dtype())
    load_x = x.make_loader()

    def inner_fn(index):
        return ops.where(load_mask(index), load_value(index), load_x(index))

    origins = frozenset({"index_put"})
    return TensorBox(Pointwise(x.get_device(), x.get_dtype(), inner_fn, size, origins))


@register_lowering(aten.copy_, graph=True)
def copy_(graph, dst, src, non_blocking=False):
    if not (isinstance(dst, TensorBox) and isinstance(dst.data, InputBuffer)):
        raise NotImplementedError("copy_ into a value that is not a graph input")
    target = dst.data
    if not isinstance(src, TensorBox) or src.get_device() != target.get_device():
        raise Unsupported("copy_ from another device")
    if target.get_dtype() not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {target.get_dtype()}")
    size = target.get_size()
    body = Scatter(
        target.get_device(),
        target.get_dtype(),
        converting_loader(src, size, target.get_dtype()),
        tuple(size),
        origins_of([src]) | {"copy_"},
        target.layout.make_indexer(),
    )
    buf = MutationBuffer(graph.new_buffer_name(), target.layout, body, target)
    graph.register_buffer(buf)
    return TensorBox(buf)


# views that OpOverload.is_view does not call views: a piece of a list of views, and
# the view that ATen declares fresh
VIEW_OPS = (operator.getitem, aten._unsafe_view.default)
# a functional scatter -> its in-place form, which returns its first argument
INPLACEABLE = {
    aten.index_put.default: aten.index_put_.default,
    aten.scatter.src: aten.scatter_.src,
    aten.scatter.value: aten.scatter_.value,
    aten.scatter_add.default: aten.scatter_add_.default,
    aten.scatter_reduce.two: aten.scatter_reduce_.two,
}
IN_PLACE_RESULTS = {*INPLACEABLE.values(), aten.copy_.default}  # return their input


def _memory(node: Any) -> StorageWeakRef | None:
    """The storage a node's value lives in: a view shares its input's."""
    value = _val(node)
    if not isinstance(value, torch.Tensor):
        return None
    return StorageWeakRef(value.untyped_storage())


def _aliases(node: torch.fx.Node) -> bool:
    """Whether node's value lives in its first argument's memory: a view, or an op
    that writes its first argument in place and returns it."""
    target = node.target
    viewing = getattr(target, "is_view", False) or target in VIEW_OPS
    return viewing or target in IN_PLACE_RESULTS


def _views(of: torch.fx.Node) -> set[torch.fx.Node]:
    """of and the nodes that view its memory: reached through view ops and in-place
    writes, or sharing its storage (where the graph's fake tensors keep that)."""
    found, todo = set(), [of]
    while todo:
        node = todo.pop()
        if node in found:
            continue
        found.add(node)
        for user in node.users:
            if _aliases(user) and user.args and user.args[0] is node:
                todo.append(user)
    memory = _memory(of)
    if memory is not None:
        found |= {n for n in of.graph.nodes if (m := _memory(n)) and m == memory}
    return found


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    same = sym_eq(tuple(a.shape), tuple(b.shape)) and sym_eq(a.stride(), b.stride())
    return a.dtype == b.dtype and statically_known_true(same)


def _sums_16_bit(r: torch.fx.Node) -> bool:
    accumulate = r.target == aten.index_put.default and len(r.args) > 3 and r.args[3]
    sums = accumulate or r.target in (aten.scatter_add.default, aten.scatter_reduce.two)
    return bool(sums) and r.meta["val"].dtype in WIDENED


def _masked(r: torch.fx.Node) -> bool:
    if r.target != aten.index_put.default:
        return False
    dtypes = [getattr(_val(i), "dtype", None) for i in r.args[1]]
    return torch.bool in dtypes or torch.uint8 in dtypes


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _copied(copy: torch.fx.Node) -> Any:
    """The value copy_(x, source) writes back: source, or the value source clones
    (a non-contiguous input's new value is cloned into contiguous strides first)."""
    source = copy.args[1]
    if isinstance(source, torch.fx.Node) and source.target == aten.clone.default:
        return source.args[0]
    return source


def why_not_reinplace(copy: torch.fx.Node) -> str | None:
    """None if copy_(x, r) may go, the scatter r writing x in place; else why not."""
    x, r = copy.args[0], _copied(copy)
    if x.op != "placeholder":
        return f"{x} is not a graph input"
    if not isinstance(r, torch.fx.Node) or r.target not in INPLACEABLE:
        return f"{r} is not a scatter with an in-place form"
    if r.args[0] is not x:
        return f"{r} scatters into {r.args[0]}, not into {x}"
    why = _why_not_written(r, x, _views(x) - {copy}, readers_after={copy})
    if why is not None:
        return why
    (output,) = r.graph.find_nodes(op="output")
    returned = [a for a in output.all_input_nodes if a in _views(r)]
    if returned:
        return f"{returned[0]} is a graph output"
    return None


def _why_not_written(r, x, shared: set, readers_after=frozenset()) -> str | None:
    """The conditions on the scatter r into x, whatever x is: layouts, sums, masks,
    and no read of memory in `shared` (x's) by r itself, or after r but by the
    readers allowed (the copy_ that the write replaces)."""
    if not _same_layout(_val(x), _val(r)):
        return f"{r} is laid out unlike {x}"
    if _sums_16_bit(r):
        return f"{r} sums {_val(x).dtype}, in float32 in a copy"
    if _masked(r):
        return f"{r} writes through a boolean mask, already in one pass"
    nodes = list(r.graph.nodes)
    for n in nodes[nodes.index(r) + 1 :]:
        read = [a for a in n.all_input_nodes if a in shared]
        if read and n not in readers_after:
            return f"{n} reads {read[0]} after {r} writes it"
    if any(a in shared for a in r.all_input_nodes if a is not x):
        return f"{r} reads a view of {x}, which it writes"
    return None


def reinplace_inplaceable_ops(gm: torch.fx.GraphModule) -> None:
    """Each scatter into an input that the graph copies back, and each scatter into a
    value the graph made that nothing reads afterwards: written in place."""
    if not config.reinplace_inplaceable_ops:
        return
    graph = gm.graph
    for copy in list(graph.find_nodes(op="call_function", target=aten.copy_.default)):
        x, r = copy.args[0], _copied(copy)
        why = why_not_reinplace(copy)
        if why is not None:
            log.debug("reinplace: kept %s and copy_(%s, %s): %s", r, x, r, why)
            continue
        log.debug("reinplace: %s writes %s in place", r, x)
        r.target = INPLACEABLE[r.target]
        copy.replace_all_uses_with(r)
        graph.erase_node(copy)
    for r in list(graph.nodes):  # in order: a chain's next link sees this one's write
        if r.op != "call_function" or r.target not in INPLACEABLE:
            continue
        why = why_not_reinplace_in_graph(r)
        if why is not None:
            log.debug("reinplace: kept %s: %s", r, why)
            continue
        log.debug("reinplace: %s writes %s in place", r, r.args[0])
        r.target = INPLACEABLE[r.target]
    gm.recompile()


aten_passes.register(reinplace_inplaceable_ops, chapter=11)


class _Loads(NullHandler):
    def __init__(self):
        self.names: set[str] = set()

    def load(self, name, index):
        self.names.add(name)


def _loads(box: TensorBox) -> set[str]:
    """The names of the buffers a value's body loads."""
    handler = _Loads()
    with set_handler(handler):
        box.make_loader()(index_vars(len(box.get_size())))
    return handler.names


def store_readers(graph, x: Buffer) -> None:
    """Store each value still to be read whose body reads x: x is about to change."""
    names = {x.name}
    for buf in graph.buffers:  # stored views of x, and views of those
        if isinstance(buf, ReinterpretBuffer) and buf.base.name in names:
            names.add(buf.name)
    for value in pytree.tree_leaves(list(graph.env.values())):
        if not isinstance(value, TensorBox) or value.is_realized():
            continue
        if not _loads(value) & names:
            continue
        viewed = value
        while isinstance(viewed.data, GenericView):
            viewed = viewed.data.box
        if isinstance(viewed.data, Pointwise):
            graph.realize_viewed(value)
        else:  # a window on x's memory: copy what it shows now
            device, dtype = value.get_device(), value.get_dtype()
            loader, size = value.make_loader(), tuple(value.get_size())
            value.data = Pointwise(device, dtype, loader, size, frozenset({"clone"}))
            value.realize(graph)


def _in_place(lowering: Callable) -> Callable:
    """A scatter lowering's in-place form: it writes into x's own memory, a graph
    input's, or one the graph made for x alone (below); else into a copy of x."""

    def lower(graph, x, *args, **kwargs):
        if not isinstance(x, TensorBox):
            raise Unsupported("an in-place scatter into a value that is not a tensor")
        node = graph.current_node.args[0]
        if node.op == "placeholder":  # the input that the graph copied back
            if not isinstance(x.data, InputBuffer):
                raise Unsupported("an in-place scatter into a constant")
            target = x.data
        else:
            target = own_memory(graph, x, node)
        if target is None:  # x's memory is another value's too: write a copy of x
            return lowering(graph, x, *args, **kwargs)
        store_readers(graph, target)
        return lowering(graph, x, *args, **kwargs, into=target)

    return lower


for functional, in_place in INPLACEABLE.items():
    register_lowering(in_place, graph=True)(_in_place(lowerings[functional]))


def _root(node: Any) -> Any:
    """The node whose memory node's value lives in: back through views and in-place
    writes, which return (a view of) their first argument."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function":
        if not _aliases(node):
            break
        node = node.args[0]
    return node


def why_not_reinplace_in_graph(r: torch.fx.Node) -> str | None:
    """None if the scatter r may write its input x in place, x living in memory the
    graph made that nothing reads after r; else why not."""
    x = r.args[0]
    root = _root(x)
    if not isinstance(root, torch.fx.Node) or root.op != "call_function":
        return f"{x} lives in {root}'s memory, which is not the graph's"
    if getattr(x.target, "is_view", False) or x.target in VIEW_OPS:
        return f"{x} is a view of {x.args[0]}"
    return _why_not_written(r, x, _views(root))


def _reaches(value: TensorBox, x: TensorBox) -> bool:
    """Whether value is x, a view of x, or a window on or a write into x's memory."""
    while isinstance(value.data, GenericView) and value is not x:
        value = value.data.box
    if value is x:
        return True
    name = getattr(x.data, "name", None)
    data = value.data
    under = getattr(data, "base", None) or getattr(data, "target", None)
    if isinstance(data, ReinterpretView):
        under = data.data
    return name is not None and getattr(under, "name", None) == name


def own_memory(graph, x: TensorBox, node: torch.fx.Node) -> Buffer | None:
    """x stored in memory the graph made for it alone, or None: x is not a body or a
    kernel's output, or a value still to be read shares its memory."""
    if not isinstance(x.data, (Pointwise, Reduction, ComputedBuffer)):
        return None  # a view, an input, a constant, or ATen's memory
    for other, value in graph.env.items():
        if other is node:
            continue
        for v in pytree.tree_leaves(value):
            if isinstance(v, TensorBox) and _reaches(v, x):
                return None
    return x.realize(graph)
