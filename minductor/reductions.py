# generated from chapters/10_reductions.md — edit there

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable

import sympy
import torch

from minductor.capture import aten_passes
from minductor.factories import convert_dtype
from minductor.config import config
from minductor.ir import Index, Pointwise, Reduction, Scan, TensorBox
from minductor.lowering import (
    SUPPORTED_DTYPES,
    GraphLowering,
    Unsupported,
    constant_box,
    aten,
    reduction_passes,
    register_lowering,
)
from minductor.pointwise import (
    origins_of,
    scalar_value,
    converting_loader,
    pointwise,
)
from minductor.ops import NullHandler, ops, set_handler
from minductor.sizevars import (
    ModularIndexing,
    contiguous_strides,
    flat_index,
    index_vars,
    product,
)


def _reduced_dims(ndim: int, dims: Any) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if ndim == 0:  # dim 0 (or -1) of a 0-d tensor: its one element, as with no dims
        return []
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(ndim, 1) for d in dims})


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def make_reduction(
    x: TensorBox,
    dims: Any,
    keepdim: bool,
    reduction_type: str,
    dtype: torch.dtype,
    acc_dtype: torch.dtype,
    value_fn: Callable[[Any, Index], Any] | None = None,
    output_index: int = 0,
) -> TensorBox:
    if x.get_dtype() not in SUPPORTED_DTYPES or dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"reduction of {x.get_dtype()} to {dtype}")
    size = x.get_size()
    ndim = len(size)
    reduced = _reduced_dims(ndim, dims)
    kept = [d for d in range(ndim) if d not in reduced]
    if keepdim:
        ranges = tuple(
            sympy.Integer(1) if d in reduced else size[d] for d in range(ndim)
        )
    else:
        ranges = tuple(size[d] for d in kept)
    outer = bool(kept) and max(reduced) < min(kept)  # reduces rows
    reduction_ranges = tuple(size[d] for d in reduced)
    if reduction_type not in ("sum", "prod") and 0 in reduction_ranges:
        raise Unsupported(f"{reduction_type} over zero elements")
    loader = x.make_loader()

    def inner_fn(index, rindex):
        full: list[Any] = [None] * ndim
        outer = [index[d] for d in kept] if keepdim else list(index)
        for d, i in zip(kept, outer):
            full[d] = i
        for d, r in zip(reduced, rindex):
            full[d] = r
        value = loader(full)
        if value_fn is not None:
            return value_fn(value, rindex)
        if x.get_dtype() != acc_dtype:
            value = ops.to_dtype(value, acc_dtype)
        return value

    return TensorBox(
        Reduction(
            x.get_device(),
            dtype,
            inner_fn,
            ranges,
            reduction_ranges,
            reduction_type,
            acc_dtype,
            origins_of([x]),
            output_index,
            "outer" if outer else "inner",
        )
    )


def _sum_dtype(x: TensorBox, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return x.get_dtype() if x.get_dtype().is_floating_point else torch.int64


@register_lowering(aten.sum.default, aten.sum.dim_IntList)
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    out = _sum_dtype(x, dtype)
    return make_reduction(x, dim, keepdim, "sum", out, _accumulator(out))


@register_lowering(aten.prod.default, aten.prod.dim_int)
def prod(x, dim=None, keepdim=False, *, dtype=None):
    out = _sum_dtype(x, dtype)
    return make_reduction(x, dim, keepdim, "prod", out, _accumulator(out))


def _extremum(reduction_type: str) -> Callable[..., TensorBox]:
    def lowering(x, dim=None, keepdim=False):
        if x.get_dtype() == torch.bool:
            raise Unsupported(f"{reduction_type} of bool")
        acc = _accumulator(x.get_dtype())
        return make_reduction(x, dim, keepdim, reduction_type, x.get_dtype(), acc)

    return lowering


register_lowering(aten.amax.default, aten.max.default)(_extremum("max"))
register_lowering(aten.amin.default, aten.min.default)(_extremum("min"))


def _truth(reduction_type: str) -> Callable[..., TensorBox]:
    def lowering(x, dim=None, keepdim=False):
        def nonzero(v, rindex):
            return ops.to_dtype(ops.ne(v, ops.constant(0, x.get_dtype())), torch.int8)

        out = torch.uint8 if x.get_dtype() == torch.uint8 else torch.bool
        return make_reduction(
            x, dim, keepdim, reduction_type, out, torch.int8, value_fn=nonzero
        )

    return lowering


register_lowering(aten.any.default, aten.any.dim, aten.any.dims)(_truth("max"))
register_lowering(aten.all.default, aten.all.dim, aten.all.dims)(_truth("min"))


SPLITTABLE = ("sum", "prod", "max", "min")


class LoadIndices(NullHandler):
    """Records the index of every load a body makes (chapter 13 asks it too)."""

    def __init__(self):
        self.indices: list[sympy.Expr] = []

    def load(self, name, index):
        self.indices.append(index)


def walks_rows(reduction: Reduction) -> bool:
    """Does the body read memory contiguously along its innermost reduced dimension?"""
    loads = LoadIndices()
    index = index_vars(len(reduction.ranges))
    rindex = index_vars(len(reduction.reduction_ranges), "r")
    with set_handler(loads):
        reduction.inner_fn(index, rindex)
    last = rindex[-1] if rindex else None
    return all(
        sympy.diff(i, last) in (0, 1) for i in loads.indices if last is not None
    )


def split_count(reduction: Reduction) -> int:
    """Into how many pieces to cut each reduced row (1: reduce in one stage)."""
    numel, rnumel = product(reduction.ranges), product(reduction.reduction_ranges)
    static = isinstance(numel, sympy.Integer) and isinstance(rnumel, sympy.Integer)
    if reduction.reduction_type not in SPLITTABLE or not static:
        return 1
    numel, rnumel = int(numel), int(rnumel)
    if numel * rnumel < 2**18:
        return 1
    outer = reduction.reduction_hint == "outer" or not walks_rows(reduction)
    programs = max(1, numel // 16) if outer else numel
    splits = 1
    while programs * splits < 1024 and rnumel % (2 * splits) == 0:
        if rnumel // (2 * splits) < 256:
            break
        splits *= 2
    return splits


def in_pieces(red: Reduction, splits: int) -> Reduction:
    """red over pieces of its rows: outputs (piece, *red's outputs)."""
    rsizes = red.reduction_ranges
    piece = product(rsizes) // splits
    rstrides = contiguous_strides(rsizes)

    def first_fn(index, rindex):
        flat = index[0] * piece + rindex[0]  # the position in the whole reduced row
        digits = [ModularIndexing(flat, s, n) for s, n in zip(rstrides, rsizes)]
        return red.inner_fn(index[1:], digits)

    return dataclasses.replace(
        red,
        inner_fn=first_fn,
        ranges=(sympy.Integer(splits), *red.ranges),
        reduction_ranges=(piece,),
    )


def split_reduction(graph: GraphLowering, box: TensorBox) -> None:
    """Replace box's reduction by a second stage over a realized first stage."""
    red = box.data
    splits = split_count(red)
    if splits == 1:
        return
    first = dataclasses.replace(in_pieces(red, splits), dtype=red.src_dtype)
    load = TensorBox(first).realize(graph).make_loader()

    def second_fn(index, rindex):
        return load([rindex[0], *index])

    box.data = dataclasses.replace(
        red, inner_fn=second_fn, reduction_ranges=(sympy.Integer(splits),)
    )


reduction_passes.register(split_reduction, chapter=10)


def _arg_extremum(reduction_type: str) -> Callable[..., TensorBox]:
    def lowering(x, dim=None, keepdim=False):
        if x.get_dtype() == torch.bool:
            raise Unsupported(f"{reduction_type} of bool")
        acc = _accumulator(x.get_dtype())
        size = x.get_size()
        rsizes = [size[d] for d in _reduced_dims(len(size), dim)]

        def with_position(value, rindex):
            position = flat_index(rindex, contiguous_strides(rsizes))
            value = ops.to_dtype(value, acc) if acc != x.get_dtype() else value
            return value, ops.index_expr(position, torch.int64)

        return make_reduction(
            x, dim, keepdim, reduction_type, torch.int64, acc, value_fn=with_position
        )

    return lowering


register_lowering(aten.argmax)(_arg_extremum("argmax"))
register_lowering(aten.argmin)(_arg_extremum("argmin"))


@register_lowering(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    return _extremum("max")(x, dim, keepdim), _arg_extremum("argmax")(x, dim, keepdim)


@register_lowering(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    return _extremum("min")(x, dim, keepdim), _arg_extremum("argmin")(x, dim, keepdim)


def _welford(graph, x, dims, keepdim) -> tuple[TensorBox, TensorBox, sympy.Expr]:
    """The mean and m2 of x over dims (both realized), and the count."""
    if not x.get_dtype().is_floating_point:
        raise Unsupported(f"variance of {x.get_dtype()}")
    acc = _accumulator(x.get_dtype())
    size = x.get_size()
    count = product([size[d] for d in _reduced_dims(len(size), dims)])
    total = make_reduction(x, dims, True, "sum", acc, acc)
    splits = split_count(total.data)
    if splits > 1:  # few long rows: Welford over equal pieces, then combined
        return _split_welford(graph, x, dims, keepdim, total.data, splits, count)
    # the mean is stored in x's dtype; m2 stays in the accumulator's for the variance
    mean, m2 = (
        make_reduction(x, dims, keepdim, "welford_reduce", out, acc, output_index=k)
        for k, out in ((0, x.get_dtype()), (1, acc))
    )
    for box in (mean, m2):
        graph.realize_intermediate(box)
    return mean, m2, count


def _split_welford(graph, x, dims, keepdim, whole: Reduction, splits: int, count):
    # whole: a sum over the rows with every dim kept, whose body reads x as we must
    acc = whole.dtype
    piece = product(whole.reduction_ranges) // splits
    pieces = in_pieces(whole, splits)  # Welford over each piece: its mean and m2
    load_mean_i, load_m2_i = (
        graph.realize_intermediate(
            TensorBox(
                dataclasses.replace(
                    pieces, reduction_type="welford_reduce", output_index=k
                )
            )
        ).make_loader()
        for k in (0, 1)
    )
    size = x.get_size()
    reduced = _reduced_dims(len(size), dims)
    kept = [d for d in range(len(size)) if d not in reduced]

    def full(index):  # an output position, with the reduced dims (at 0) if not kept
        if keepdim:
            return list(index)
        at = [sympy.Integer(0)] * len(size)
        for d, i in zip(kept, index):
            at[d] = i
        return at

    ranges = whole.ranges if keepdim else tuple(whole.ranges[d] for d in kept)
    combine = dataclasses.replace(
        whole, ranges=ranges, reduction_ranges=(sympy.Integer(splits),)
    )

    def summed(term) -> TensorBox:  # sum over the pieces of term(mean_i, m2_i, K)
        def body(index, rindex):
            at, first = [rindex[0], *full(index)], [sympy.Integer(0), *full(index)]
            return term(load_mean_i(at), load_m2_i(at), load_mean_i(first))

        box = TensorBox(dataclasses.replace(combine, inner_fn=body))
        graph.realize_intermediate(box)
        return box

    # deviations from K, the first piece's mean, which is close to every other
    m2s = summed(lambda mean_i, m2_i, k: m2_i)
    deviations = summed(lambda mean_i, m2_i, k: ops.sub(mean_i, k))
    squares = summed(lambda mean_i, m2_i, k: ops.mul(*[ops.sub(mean_i, k)] * 2))
    load_k = lambda index: load_mean_i([sympy.Integer(0), *full(index)])  # noqa: E731
    load_d = deviations.make_loader()

    def mean_fn(index):  # K + sum(d_i) / S
        count = scalar_value(splits, acc)
        return ops.add(load_k(index), ops.truediv(load_d(index), count))

    def m2_fn(m2_sum, d_sum, d2_sum):  # sum(m2_i) + n * (sum(d_i^2) - sum(d_i)^2 / S)
        squared = ops.truediv(ops.mul(d_sum, d_sum), scalar_value(splits, acc))
        spread = ops.sub(d2_sum, squared)
        return ops.add(m2_sum, ops.mul(scalar_value(piece, acc), spread))

    mean = TensorBox(Pointwise(x.get_device(), acc, mean_fn, tuple(ranges)))
    mean = pointwise(lambda m: m, [mean], dtypes=(acc, x.get_dtype()))
    m2 = pointwise(m2_fn, [m2s, deviations, squares], dtypes=(acc, acc))
    for box in (mean, m2):
        graph.realize_intermediate(box)
    return mean, m2, count


def _variance(x, m2: TensorBox, count, correction, root: bool) -> TensorBox:
    acc = m2.get_dtype()
    correction = 1 if correction is None else correction
    denominator = sympy.Max(0, count - sympy.nsimplify(correction))

    def finish(m):  # a symbolic count, max(0, s0 - 1), is computed in the kernel
        var = ops.truediv(m, scalar_value(denominator, acc))
        return ops.sqrt(var) if root else var

    return pointwise(finish, [m2], dtypes=(acc, x.get_dtype()))


def _moments(root: bool, with_mean: bool) -> Callable[..., Any]:
    def lowering(graph, x, dim=None, *, correction=None, keepdim=False):
        mean, m2, count = _welford(graph, x, dim, keepdim)
        spread = _variance(x, m2, count, correction, root)
        if not with_mean:
            return spread
        return spread, mean

    return lowering


register_lowering(aten.var.correction, graph=True)(_moments(False, False))
register_lowering(aten.std.correction, graph=True)(_moments(True, False))
register_lowering(aten.var_mean.correction, graph=True)(_moments(False, True))
register_lowering(aten.std_mean.correction, graph=True)(_moments(True, True))


@torch.library.custom_op("minductor::softmax_stats", mutates_args=())
def softmax_stats_op(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A row's maximum m and the sum of exp(x - m), the row's dim kept."""
    m = torch.amax(x, dim, keepdim=True)
    return m, torch.sum(torch.exp(x - m), dim, keepdim=True)


@softmax_stats_op.register_fake
def _(x, dim):
    size = list(x.shape)
    size[dim % len(size)] = 1
    return x.new_empty(size), x.new_empty(size)


def _one_dim(node: torch.fx.Node, position: int, ndim: int) -> int | None:
    """The one dim a keepdim reduction node reduces, or None."""
    dims = node.args[position] if len(node.args) > position else None
    keep = node.args[position + 1] if len(node.args) > position + 1 else False
    if not keep or node.kwargs or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    return dims[0] % ndim


def _sum_of_exps(top: torch.fx.Node, x, dim: int, ndim: int) -> torch.fx.Node | None:
    """The node sum(exp(x - top), dim), if the graph has one."""
    for sub in top.users:
        if sub.target != aten.sub.Tensor or sub.args != (x, top):
            continue
        for e in sub.users:
            for t in e.users if e.target == aten.exp.default else ():
                if t.target == aten.sum.dim_IntList and _one_dim(t, 1, ndim) == dim:
                    return t
    return None


def fuse_softmax_stats(gm: torch.fx.GraphModule) -> None:
    """amax(x, d), then sum(exp(x - amax), d): one softmax_stats node for both."""
    if not config.online_softmax:
        return
    graph = gm.graph
    for top in list(graph.find_nodes(op="call_function", target=aten.amax.default)):
        x, value = top.args[0], top.meta.get("val")
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        dim = _one_dim(top, 1, value.dim()) if value.dim() else None
        total = None if dim is None else _sum_of_exps(top, x, dim, value.dim())
        if total is None:
            continue
        with graph.inserting_before(top):
            stats = graph.call_function(torch.ops.minductor.softmax_stats.default,
                                        (x, dim))  # fmt: skip
            m, s = (graph.call_function(operator.getitem, (stats, k)) for k in (0, 1))
        stats.meta["val"] = (top.meta["val"], total.meta["val"])
        m.meta["val"], s.meta["val"] = top.meta["val"], total.meta["val"]
        top.replace_all_uses_with(m)
        total.replace_all_uses_with(s)
        for dead in (total, top):
            graph.erase_node(dead)
    graph.eliminate_dead_code()
    gm.recompile()


aten_passes.register(fuse_softmax_stats, chapter=10)


@register_lowering(torch.ops.minductor.softmax_stats, graph=True)
def softmax_stats(graph, x, dim):
    acc = _accumulator(x.get_dtype())
    if split_count(make_reduction(x, dim, True, "sum", acc, acc).data) > 1:
        m = _extremum("max")(x, dim, True)
        graph.realize_intermediate(m)
        shifted = pointwise(lambda v, top: ops.exp(ops.sub(v, top)), [x, m])
        stats = (m, sum_(shifted, dim, True))
    else:
        stats = tuple(
            make_reduction(x, dim, True, "online_softmax_reduce", x.get_dtype(),
                           acc, output_index=k)
            for k in (0, 1)
        )  # fmt: skip
    for box in stats:
        graph.realize_intermediate(box)
    return stats


@register_lowering(aten.nll_loss_forward, graph=True)
def nll_loss_forward(graph, x, target, weight, reduction, ignore_index):
    if len(x.get_size()) != 2 or not x.get_dtype().is_floating_point:
        raise Unsupported("nll_loss over a batch of float rows only")
    acc = _accumulator(x.get_dtype())
    classes = int(x.get_size()[1])
    long = torch.int64
    load_x = converting_loader(x, x.get_size(), acc)
    load_t = converting_loader(target, target.get_size(), long)
    if weight is not None:
        load_w = converting_loader(weight, weight.get_size(), acc)

    def counts(t):  # 1 for a row that is not ignored
        return ops.ne(t, ops.constant(ignore_index, long))

    def picked(index, rindex, of_loss: bool):
        (n,), (c,) = index, rindex
        t = load_t([n])
        hit = ops.logical_and(ops.eq(ops.index_expr(c, long), t), counts(t))
        value = ops.constant(1.0, acc) if weight is None else load_w([c])
        if of_loss:
            value = ops.mul(ops.neg(load_x([n, c])), value)
        return ops.where(hit, value, ops.constant(0.0, acc))

    def over_classes(of_loss: bool) -> TensorBox:
        box = TensorBox(
            Reduction(
                x.get_device(),
                acc,
                lambda index, rindex: picked(index, rindex, of_loss),
                x.get_size()[:1],
                x.get_size()[1:],
                "sum",
                acc,
                origins_of([x]),
            )
        )
        graph.realize_intermediate(box)
        return box

    def per_row(fn: Callable[[Index], Any]) -> TensorBox:
        size = x.get_size()[:1]
        return TensorBox(Pointwise(x.get_device(), acc, fn, size, origins_of([x])))

    load_loss = over_classes(True).make_loader()

    def checked(index):  # a target neither a class nor ignore_index: NaN, see above
        t = load_t(index)
        outside = ops.logical_or(
            ops.lt(t, ops.constant(0, long)), ops.ge(t, ops.constant(classes, long))
        )
        bad = ops.logical_and(outside, counts(t))
        return ops.where(bad, ops.constant(float("nan"), acc), load_loss(index))

    losses = per_row(checked)
    if weight is None:
        counted = per_row(lambda index: ops.to_dtype(counts(load_t(index)), acc))
    else:
        counted = over_classes(False)
    if reduction == 0:  # "none"
        zero = constant_box(0.0, (), x.get_dtype(), x.get_device())
        return convert_dtype(losses, x.get_dtype()), zero
    total = make_reduction(losses, [0], False, "sum", acc, acc)
    total_weight = make_reduction(counted, [0], False, "sum", acc, acc)
    for box in (total, total_weight):
        graph.realize_intermediate(box)
    if reduction == 2:  # "sum"
        loss = convert_dtype(total, x.get_dtype())
    else:
        dtypes = (acc, x.get_dtype())
        loss = pointwise(ops.truediv, [total, total_weight], dtypes=dtypes)
    return loss, convert_dtype(total_weight, x.get_dtype())


def make_scan(
    x: TensorBox, dim: int, scan_type: str, dtype: torch.dtype, acc: torch.dtype
) -> TensorBox:
    if x.get_dtype() not in SUPPORTED_DTYPES or dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"{scan_type} of {x.get_dtype()} to {dtype}")
    size = x.get_size()
    dim = dim % max(len(size), 1)
    n = size[dim] if size else sympy.Integer(1)
    if not n.is_Integer:
        raise Unsupported(f"{scan_type} over a dimension of symbolic size {n}")
    if n <= 1:  # nothing to combine: each element is its own partial result
        return convert_dtype(x, dtype)
    if n > config.persistent_reduction_limit:
        raise Unsupported(f"{scan_type} over {n} elements: more than one block holds")
    loader = x.make_loader()

    def inner_fn(index, rindex):
        value = loader([*index[:dim], *rindex, *index[dim:]])
        if x.get_dtype() != dtype:  # dtype=: eager converts first, then scans
            value = ops.to_dtype(value, dtype)
        return ops.to_dtype(value, acc) if acc != dtype else value

    ranges = (*size[:dim], *size[dim + 1 :])
    body = (inner_fn, ranges, (n,), scan_type, acc, origins_of([x]))
    return TensorBox(Scan(x.get_device(), dtype, *body, dim=dim))


@register_lowering(aten.cumsum.default)
def cumsum(x, dim, *, dtype=None):
    out = _sum_dtype(x, dtype)
    return make_scan(x, dim, "cumsum", out, _accumulator(out))


@register_lowering(aten.cumprod.default)
def cumprod(x, dim, *, dtype=None):
    out = _sum_dtype(x, dtype)
    return make_scan(x, dim, "cumprod", out, _accumulator(out))


@register_lowering(aten.logcumsumexp.default)
def logcumsumexp(x, dim):
    if not x.get_dtype().is_floating_point:
        raise Unsupported(f"logcumsumexp of {x.get_dtype()}")
    out = x.get_dtype()
    return make_scan(x, dim, "logcumsumexp", out, _accumulator(out))
