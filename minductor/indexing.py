# generated from chapters/11_indexing.md — edit there

from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch

from minductor.ir import (
    Index,
    InputBuffer,
    MutationBuffer,
    Pointwise,
    Scatter,
    TensorBox,
)
from minductor.lowering import (
    SUPPORTED_DTYPES,
    Unsupported,
    aten,
    register_lowering,
)
from minductor.pointwise import (
    _device,
    _origins,
    broadcast_loader,
    broadcast_shapes,
    converting_loader,
)
from minductor.factories import _convert, clone
from minductor.ops import ops
from minductor.sizevars import product
from minductor.views import view


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
            _device([x, index]),
            x.get_dtype(),
            lambda i: loader(where(i)),
            tuple(ranges),
            _origins([x, index]),
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


def _scatter(graph, x, ranges, where, value, mode, origin: str) -> TensorBox:
    """A copy of x, then a MutationBuffer writing value(i) at x's position where(i)."""
    if x.get_dtype() not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {x.get_dtype()}")
    if mode == "atomic_add" and x.get_dtype() in WIDENED:  # sum wide, round once
        wide = WIDENED[x.get_dtype()]
        widened = lambda i: ops.to_dtype(value(i), wide)  # noqa: E731
        summed = _scatter(graph, _convert(x, wide), ranges, where, widened, mode, origin)
        return _convert(summed, x.get_dtype())
    if mode == "atomic_add" and x.get_dtype() not in ATOMIC_ADD_DTYPES:
        raise Unsupported(f"atomic add of {x.get_dtype()}")
    target = graph.realize_intermediate(clone(x))
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
def scatter(graph, x, dim, index, src):
    where, value = _along(x, dim, index), _values(src, x, index.get_size())
    return _scatter(graph, x, index.get_size(), where, value, None, "scatter")


@register_lowering(aten.scatter_add, graph=True)
def scatter_add(graph, x, dim, index, src):
    ranges = index.get_size()
    where, value = _along(x, dim, index), _values(src, x, ranges)
    return _scatter(graph, x, ranges, where, value, "atomic_add", "scatter_add")


@register_lowering(aten.scatter_reduce.two, graph=True)
def scatter_reduce(graph, x, dim, index, src, reduce, *, include_self=True):
    if reduce != "sum" or not include_self:
        raise Unsupported(f"scatter_reduce {reduce!r}, include_self={include_self}")
    return scatter_add(graph, x, dim, index, src)


@register_lowering(aten.index_put, graph=True)
def index_put(graph, x, indices, values, accumulate=False):
    if (masked := _masked_fill(x, indices, values, accumulate)) is not None:
        return masked
    ranges, where, _ = advanced_index(x, indices)
    value = _values(values, x, ranges, broadcast=True)
    mode = "atomic_add" if accumulate else None
    return _scatter(graph, x, ranges, where, value, mode, "index_put")


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
        _origins([src]) | {"copy_"},
        target.layout.make_indexer(),
    )
    buf = MutationBuffer(graph.new_buffer_name(), target.layout, body, target)
    graph.register_buffer(buf)
    return TensorBox(buf)
