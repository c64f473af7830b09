# generated from chapters/09_views.md — edit there

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import sympy
import torch
from torch._ops import OpOverload

from minductor.factories import clone
from minductor.ir import (
    ComputedBuffer,
    ConcatBuffer,
    FixedLayout,
    GenericView,
    Index,
    InputBuffer,
    NonOwningLayout,
    Pointwise,
    ReinterpretView,
    TensorBox,
    as_expr,
    as_exprs,
    origin_nodes_of,
    strided_view,
)
from minductor.lowering import (
    SUPPORTED_DTYPES,
    CannotCompile,
    Unsupported,
    aten,
    constant_box,
    is_dense,
    register_lowering,
)
from minductor.ops import ops
from minductor.pointwise import (
    common_device,
    converting_loader,
    origins_of,
    scalar_value,
)
from minductor.sizevars import (
    FloorDiv,
    ModularIndexing,
    contiguous_strides,
    flat_index,
    product,
)


def make_view(x: TensorBox, size: Sequence[Any], reindex: Callable) -> TensorBox:
    """x read through `reindex` (view index -> x's index): strided when it can be."""
    size = as_exprs(size)
    strided = strided_view(x.data)
    if strided is not None and (view := strided.reindexed(size, reindex)) is not None:
        return TensorBox(view)
    return TensorBox(GenericView(x, size, reindex))


def _dim(dim: int, ndim: int) -> int:
    return dim % max(ndim, 1)


@register_lowering(aten.permute)
def permute(x, dims):
    ndim = len(x.get_size())
    dims = [_dim(d, ndim) for d in dims]

    def reindex(index):
        old: list[Any] = [None] * ndim
        for k, d in enumerate(dims):
            old[d] = index[k]
        return old

    return make_view(x, [x.get_size()[d] for d in dims], reindex)


@register_lowering(aten.transpose.int)
def transpose(x, dim0, dim1):
    order = list(range(len(x.get_size())))
    if not order:  # a 0-d tensor: its dims 0 and -1 are the tensor itself
        return alias(x)
    a, b = _dim(dim0, len(order)), _dim(dim1, len(order))
    order[a], order[b] = order[b], order[a]
    return permute(x, order)


@register_lowering(aten.t)
def t(x):
    return transpose(x, 0, 1) if len(x.get_size()) == 2 else alias(x)


@register_lowering(aten.alias, aten.detach)  # detach: autograd's concern, not ours
def alias(x):
    return make_view(x, x.get_size(), lambda index: list(index))


@register_lowering(aten.unsqueeze)
def unsqueeze(x, dim):
    size = list(x.get_size())
    dim = dim % (len(size) + 1)
    size.insert(dim, sympy.Integer(1))
    return make_view(x, size, lambda index: list(index[:dim]) + list(index[dim + 1 :]))


@register_lowering(aten.squeeze)
def squeeze(x, dim=None):
    size = x.get_size()
    if dim is None or not size:  # (a 0-d tensor has nothing to squeeze)
        dims = range(len(size))
    else:
        dims = [dim] if isinstance(dim, int) else dim
    gone = {_dim(d, len(size)) for d in dims if size[_dim(d, len(size))] == 1}
    kept = [k for k in range(len(size)) if k not in gone]

    def reindex(index):
        old: list[Any] = [sympy.Integer(0)] * len(size)
        for k, i in zip(kept, index):
            old[k] = i
        return old

    return make_view(x, [size[k] for k in kept], reindex)


@register_lowering(aten.expand)
def expand(x, size, *, implicit=False):
    old = x.get_size()
    skip = len(size) - len(old)
    new = [old[k - skip] if s == -1 else as_expr(s) for k, s in enumerate(size)]

    def reindex(index):
        return [
            sympy.Integer(0) if old[k] == 1 and new[skip + k] != 1 else index[skip + k]
            for k in range(len(old))
        ]

    return make_view(x, new, reindex)


def _clamp(value: int | None, default, n):
    """A slice bound as eager reads it: negative counts from the end, then clamped."""
    if value is None:
        return default
    if isinstance(value, sympy.Expr) and not value.is_Integer:
        return value  # a symbolic bound, already in [0, n]: see slice_lowering
    value = int(value)
    if isinstance(n, int) or n.is_Integer:
        n = int(n)
        return min(max(value + n if value < 0 else value, 0), n)
    # a symbolic length s0: python's slicing rules as expressions (s0 >= 2)
    if value >= 2**62:  # the "to the end" that x[a:] is traced as
        return n
    return sympy.Max(value + n, 0) if value < 0 else sympy.Min(value, n)


def slice_(x, dim=0, start=None, end=None, step=1, length=None):
    size = list(x.get_size())
    dim = _dim(dim, len(size))
    n = size[dim]
    start, end = _clamp(start, 0, n), _clamp(end, n, n)
    if length is None:
        length = sympy.Max(0, FloorDiv(end - start + step - 1, step))
    size[dim] = length

    def reindex(index):
        old = list(index)
        old[dim] = start + index[dim] * step
        return old

    return make_view(x, size, reindex)


def _guarded_bound(sizevars, value, n):
    """A symbolic slice bound in [0, n], the case that holds now guarded, as Dynamo
    guards what it decides on sizes: s1, s1 - n (negative) or n, say."""
    if not isinstance(value, sympy.Expr) or value.is_Integer:
        return value
    if not sizevars.guard_leq(0, value):  # counts from the end
        value = value + n
        if not sizevars.guard_leq(0, value):
            return sympy.Integer(0)
    return value if sizevars.guard_leq(value, n) else n


@register_lowering(aten.slice.Tensor, graph=True)
def slice_lowering(graph, x, dim=0, start=None, end=None, step=1):
    if not any(isinstance(b, sympy.Expr) and not b.is_Integer for b in (start, end)):
        return slice_(x, dim, start, end, step)
    dim = _dim(dim, len(x.get_size()))
    n = x.get_size()[dim]
    start = _clamp(_guarded_bound(graph.sizevars, start, n), 0, n)
    end = _clamp(_guarded_bound(graph.sizevars, end, n), n, n)
    # the length as eager's graph writes it (s0, not 64 - Max(0, 64 - s0)), so that
    # the ops after it see the same symbol
    length = as_expr(graph.current_node.meta["val"].shape[dim])
    return slice_(x, dim, start, end, step, length)


@register_lowering(aten.select.int)
def select(x, dim, index):
    size = list(x.get_size())
    dim = _dim(dim, len(size))
    if isinstance(index, int) and index < 0:  # from the end: size - 1 for -1, say,
        index = index + size[dim]  # which may be a symbol (`x[:, -1]`, dynamic=True)
    at = sympy.sympify(index)

    def reindex(view_index):
        return list(view_index[:dim]) + [at] + list(view_index[dim:])

    return make_view(x, size[:dim] + size[dim + 1 :], reindex)


@register_lowering(aten.diagonal)
def diagonal(x, offset=0, dim1=0, dim2=1):
    size = x.get_size()
    d1, d2 = _dim(dim1, len(size)), _dim(dim2, len(size))
    row, col = max(-offset, 0), max(offset, 0)  # where the diagonal starts
    length = max(0, min(int(size[d1]) - row, int(size[d2]) - col))
    rest = [k for k in range(len(size)) if k not in (d1, d2)]

    def reindex(index):
        old: list[Any] = [None] * len(size)
        for k, i in zip(rest, index):
            old[k] = i
        old[d1], old[d2] = row + index[-1], col + index[-1]
        return old

    return make_view(x, [size[k] for k in rest] + [length], reindex)


@register_lowering(aten.unfold)
def unfold(x, dimension, size, step):
    shape = list(x.get_size())
    if not shape:
        raise Unsupported("unfold of a 0-d tensor")
    d = _dim(dimension, len(shape))
    count = (int(shape[d]) - size) // step + 1
    new = shape[:d] + [count] + shape[d + 1 :] + [size]

    def reindex(index):
        old = list(index[:-1])
        old[d] = index[d] * step + index[-1]
        return old

    return make_view(x, new, reindex)


@register_lowering(aten.split_with_sizes, aten.unsafe_split_with_sizes)
def split_with_sizes(x, split_sizes, dim=0):
    start, pieces = 0, []
    for length in split_sizes:
        pieces.append(slice_(x, dim, start, start + length))
        start += length
    return tuple(pieces)


@register_lowering(aten.split.Tensor, aten.unsafe_split.Tensor)
def split(x, split_size, dim=0):
    n = int(x.get_size()[_dim(dim, len(x.get_size()))])
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] or [0]
    return split_with_sizes(x, sizes, dim)


@register_lowering(aten.unbind.int)
def unbind(x, dim=0):
    n = int(x.get_size()[_dim(dim, len(x.get_size()))])
    return tuple(select(x, dim, k) for k in range(n))


def _less(a: sympy.Expr, b: sympy.Expr) -> bool:
    """a < b for two sizes. Symbolic sizes are ordered only when one divides the
    other (s0 < 4*s0); anything else raises, and the op falls back."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if a.is_number and b.is_number:
        return bool(a < b)
    if (q := sympy.cancel(b / a)).is_integer and q != 1:
        return True
    if sympy.cancel(a / b).is_integer:
        return False
    raise TypeError(f"cannot order the sizes {a} and {b}")


def view_strides(old_size, old_stride, new_size) -> list[sympy.Expr] | None:
    """Strides for `new_size` over memory laid out as (old_size, old_stride), or None."""
    if not old_size or product(old_size) == 0:
        return contiguous_strides(new_size)
    runs: list[tuple[sympy.Expr, sympy.Expr]] = []  # (numel, innermost stride)
    for size, stride in zip(old_size, old_stride):
        if size == 1:
            continue
        if runs and runs[-1][1] == stride * size:  # continues the outer run
            runs[-1] = (runs[-1][0] * size, stride)
        else:
            runs.append((size, stride))
    new_stride: list[Any] = [None] * len(new_size)
    k = len(new_size) - 1
    for numel, stride in reversed(runs):
        covered = sympy.Integer(1)
        while _less(covered, numel):
            if k < 0:
                return None
            new_stride[k] = stride * covered
            covered *= new_size[k]
            k -= 1
        if covered != numel:
            return None  # a new dimension straddles two runs
    for j in range(k, -1, -1):  # what is left can only be size-1 dimensions
        if new_size[j] != 1:
            return None
        new_stride[j] = new_stride[j + 1] * new_size[j + 1] if j + 1 < len(new_size) else 1
    return list(as_exprs(new_stride))


def _reshape_groups(old, new) -> list[tuple[int, int, int, int]] | None:
    """(old dims a:i, new dims b:j) groups with equal products, innermost first."""
    groups, i, j = [], len(old), len(new)
    while i > 0 or j > 0:
        a, b = max(i - 1, 0), max(j - 1, 0)
        have_old = product(old[a:i])
        have_new = product(new[b:j])
        while have_old != have_new:
            if _less(have_old, have_new) and a > 0:
                a -= 1
                have_old *= old[a]
            elif _less(have_new, have_old) and b > 0:
                b -= 1
                have_new *= new[b]
            else:
                return None
        groups.append((a, i, b, j))
        i, j = a, b
    return groups


def reshape_reindex(old, new) -> Callable[[Index], list[sympy.Expr]]:
    old, new = list(old), list(new)
    groups = _reshape_groups(old, new) if product(old) != 0 else None
    if groups is None:  # no elements: any index will do, none is ever read
        groups = [(0, len(old), 0, len(new))]

    def reindex(index):
        result: list[Any] = [None] * len(old)
        for a, i, b, j in groups:
            flat = flat_index(index[b:j], contiguous_strides(new[b:j]))
            inner = sympy.Integer(1)
            for k in range(i - 1, a - 1, -1):
                if k == a:
                    result[k] = FloorDiv(flat, inner)
                else:
                    result[k] = ModularIndexing(flat, inner, old[k])
                inner *= old[k]
        return result

    return reindex


def _infer_size(size: Sequence[int], numel: sympy.Expr) -> list[sympy.Expr]:
    size = list(as_exprs(size))
    if -1 in size:
        known = product([s for s in size if s != -1])
        inferred = sympy.cancel(numel / known) if known != 0 else sympy.Integer(0)
        # 4*s0 elements viewed as (2*s0, -1): the cancelled quotient, 2
        if not inferred.is_integer:
            inferred = FloorDiv(numel, known)
        size[size.index(-1)] = inferred
    return size


@register_lowering(aten.view.default, aten._unsafe_view, aten.reshape)
def view(x, size):
    old = x.get_size()
    new = _infer_size(size, product(old))
    strided = strided_view(x.data)
    if strided is not None:
        stride = view_strides(old, strided.layout.stride, new)
        if stride is not None:
            lay = strided.layout
            layout = FixedLayout(lay.device, lay.dtype, new, tuple(stride), lay.offset)
            return TensorBox(ReinterpretView(strided.data, layout))
    return TensorBox(GenericView(x, new, reshape_reindex(old, new)))


def _eager_storage_strides(graph, x: TensorBox) -> list[sympy.Expr] | None:
    """x's strides in eager, if its storage there holds x and nothing else."""
    meta = graph.current_node.args[0].meta.get("val")
    if not isinstance(meta, torch.Tensor) or meta.storage_offset() != 0:
        return None
    if meta.untyped_storage().nbytes() != meta.numel() * meta.element_size():
        return None
    if meta.is_contiguous():
        return contiguous_strides(x.get_size())
    stride = meta.stride()
    if all(type(s) is int for s in stride) and is_dense(meta.shape, stride):
        return as_exprs(stride)  # a permutation of contiguous: a transposed tensor
    return None


@register_lowering(aten.as_strided, graph=True)
def as_strided(graph, x, size, stride, storage_offset=None):
    strided = strided_view(x.data)
    if strided is None or not isinstance(strided.data, InputBuffer):
        eager = _eager_storage_strides(graph, x)
        if eager is None:
            raise CannotCompile(
                "as_strided of a computed value whose storage in eager holds more "
                "than the value: ours cannot be the same"
            )
        buf = graph.require_strides(graph.realize_intermediate(x), tuple(eager))
        strided = strided_view(buf)
    base = strided.data
    if storage_offset is None:
        offset = strided.layout.offset
    else:  # counted from the storage's start; our offsets from the buffer's first element
        offset = sympy.Integer(storage_offset) - base.layout.offset
    layout = FixedLayout(
        base.layout.device,
        base.layout.dtype,
        as_exprs(size),
        as_exprs(stride),
        offset,
    )
    return TensorBox(ReinterpretView(base, layout))


@register_lowering(aten.flip)
def flip(x, dims):
    size = x.get_size()
    flipped = {_dim(d, len(size)) for d in dims}

    def reindex(index):
        return [
            size[k] - 1 - i if k in flipped else i for k, i in enumerate(index)
        ]

    return TensorBox(GenericView(x, size, reindex))


@register_lowering(aten.roll)
def roll(x, shifts, dims=()):
    size = x.get_size()
    if not dims:  # roll the flattened tensor, then put the shape back
        flat = view(x, [-1])
        return view(roll(flat, shifts, [0]), list(size))
    moved = {_dim(d, len(size)): s for d, s in zip(dims, shifts)}

    def reindex(index):
        old = list(index)
        for d, shift in moved.items():
            n = int(size[d])
            if n:
                old[d] = ModularIndexing(index[d] + (n - shift % n), 1, n)
        return old

    return TensorBox(GenericView(x, size, reindex))


@register_lowering(aten.repeat)
def repeat(x, repeats):
    old = x.get_size()
    skip = len(repeats) - len(old)
    new = [
        r * (old[k - skip] if k >= skip else 1) for k, r in enumerate(repeats)
    ]

    def reindex(index):
        return [
            ModularIndexing(index[skip + k], 1, old[k]) if old[k] != 1 else 0
            for k in range(len(old))
        ]

    return TensorBox(GenericView(x, as_exprs(new), reindex))


def _triangle(upper: bool) -> Callable[..., TensorBox]:
    def lowering(x, diagonal=0):
        load, dtype = x.make_loader(), x.get_dtype()

        def inner_fn(index):
            above = ops.index_expr(index[-1] - index[-2], torch.int64)
            bound = ops.constant(diagonal, torch.int64)
            keep = ops.ge(above, bound) if upper else ops.le(above, bound)
            return ops.where(keep, load(index), ops.constant(0, dtype))

        size, device = x.get_size(), x.get_device()
        return TensorBox(Pointwise(device, dtype, inner_fn, size, origins_of([x])))

    return lowering


register_lowering(aten.triu)(_triangle(True))
register_lowering(aten.tril)(_triangle(False))


def _index_value(expr: sympy.Expr) -> Any:
    return ops.index_expr(expr, torch.int64)


def _within(expr: sympy.Expr, lo: Any, hi: Any) -> Any:
    """lo <= expr < hi, as a boolean value (the bounds may be symbolic sizes)."""
    value = _index_value(expr)
    return ops.logical_and(
        ops.ge(value, scalar_value(lo, torch.int64)),
        ops.lt(value, scalar_value(hi, torch.int64)),
    )


@register_lowering(aten.constant_pad_nd)
def constant_pad_nd(x, pad, value=0):
    size, dtype = list(x.get_size()), x.get_dtype()
    new, shifts = list(size), {}
    for k in range(len(pad) // 2):
        d = len(size) - 1 - k  # pads come in (low, high) pairs from the last dim
        low, high = pad[2 * k], pad[2 * k + 1]
        new[d] = size[d] + low + high
        shifts[d] = (low, size[d])
    if any(n == 0 for _, n in shifts.values()):  # nothing to read: all fill
        return constant_box(value, new, dtype, x.get_device())
    load = x.make_loader()

    def inner_fn(index):
        source, inside = list(index), None
        for d, (low, n) in shifts.items():
            shifted = index[d] - low
            source[d] = sympy.Max(0, sympy.Min(shifted, n - 1))
            here = _within(shifted, 0, n)
            inside = here if inside is None else ops.logical_and(inside, here)
        loaded = load(source)
        if inside is None:
            return loaded
        return ops.where(inside, loaded, ops.constant(value, dtype))

    box = Pointwise(x.get_device(), dtype, inner_fn, tuple(new), origins_of([x]))
    return TensorBox(box)


@register_lowering(aten.slice_scatter)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    size = x.get_size()
    d = _dim(dim, len(size))
    n = size[d]  # may be a symbol: _clamp's bounds are then expressions
    start, end = _clamp(start, 0, n), _clamp(end, n, n)
    count = src.get_size()[d]
    if count == 0:
        return clone(x)
    load_x = x.make_loader()
    load_src = converting_loader(src, src.get_size(), x.get_dtype())

    def inner_fn(index):
        shifted = index[d] - start
        position = sympy.Max(shifted, 0)
        inside = _within(shifted, 0, end - start)
        if step != 1:
            on_step = ops.eq(
                _index_value(ModularIndexing(position, 1, step)),
                ops.constant(0, torch.int64),
            )
            inside = ops.logical_and(inside, on_step)
        source = list(index)
        source[d] = sympy.Min(FloorDiv(position, step), count - 1)
        return ops.where(inside, load_src(source), load_x(index))

    box = Pointwise(x.get_device(), x.get_dtype(), inner_fn, size, origins_of([x, src]))
    return TensorBox(box)


@register_lowering(aten.select_scatter)
def select_scatter(x, src, dim, index):
    size = x.get_size()
    d = _dim(dim, len(size))
    if isinstance(index, int) and index < 0:  # from the end, as `select`
        index = index + size[d]
    load_x = x.make_loader()
    load_src = converting_loader(src, src.get_size(), x.get_dtype())

    def inner_fn(i):
        hit = ops.eq(_index_value(i[d]), scalar_value(index, torch.int64))
        return ops.where(hit, load_src(list(i[:d]) + list(i[d + 1 :])), load_x(i))

    box = Pointwise(x.get_device(), x.get_dtype(), inner_fn, size, origins_of([x, src]))
    return TensorBox(box)


@register_lowering(aten.diagonal_scatter)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    """x with its diagonal replaced by src (diagonal's gradient writes one this way)."""
    size = x.get_size()
    d1, d2 = _dim(dim1, len(size)), _dim(dim2, len(size))
    length = src.get_size()[-1]
    if length == 0:  # the offset is past the edge: an empty diagonal, nothing written
        return clone(x)
    load_x = x.make_loader()
    load_src = converting_loader(src, src.get_size(), x.get_dtype())

    def inner_fn(i):
        # element (a, a + offset) is the diagonal's a-th: a is i[d1], or i[d2] below
        # the main diagonal; off the diagonal, a clamped position keeps src's read inside
        along = i[d1] if offset >= 0 else i[d2]
        rest = [v for k, v in enumerate(i) if k not in (d1, d2)]
        on = ops.eq(_index_value(i[d2] - i[d1]), ops.constant(offset, torch.int64))
        value = load_src([*rest, sympy.Min(along, sympy.Max(length - 1, 0))])
        return ops.where(on, value, load_x(i))

    box = Pointwise(x.get_device(), x.get_dtype(), inner_fn, size, origins_of([x, src]))
    return TensorBox(box)


@register_lowering(aten.as_strided_scatter, graph=True)
def as_strided_scatter(graph, x, src, size, stride, storage_offset=None):
    offset = storage_offset or 0
    static = all(isinstance(v, int) for v in (*size, *stride, offset))
    eager = _eager_storage_strides(graph, x)
    if not (static and eager is not None and is_dense(size, stride)):
        raise Unsupported("as_strided_scatter: not a dense window on a plain tensor")
    full = x.get_size()
    count = product(size)
    load_x = x.make_loader()
    load_src = converting_loader(src, src.get_size(), x.get_dtype())

    def inner_fn(index):
        position = flat_index(index, eager) - offset
        at = sympy.Min(sympy.Max(position, 0), count - 1)
        source = [ModularIndexing(at, st, n) for n, st in zip(size, stride)]
        return ops.where(_within(position, 0, count), load_src(source), load_x(index))

    box = Pointwise(x.get_device(), x.get_dtype(), inner_fn, full, origins_of([x, src]))
    return TensorBox(box)


POINTWISE_CAT_PIECES = 4  # the most pieces a cat read in place by its users may have


def is_pointwise_use(node: torch.fx.Node) -> bool:
    """Whether node is an elementwise ATen op (chapter 12's addmm asks)."""
    target = node.target
    return isinstance(target, OpOverload) and torch.Tag.pointwise in target.tags


def _pointwise_cat(tensors, dim, size, dtype, device) -> TensorBox:
    """cat as one body: each element loads from the piece its index falls in."""
    pieces, start = [], sympy.Integer(0)
    for t in tensors:
        length = t.get_size()[dim]
        pieces.append((converting_loader(t, t.get_size(), dtype), start, length))
        start += length

    def inner_fn(index):
        value = None
        for load, begin, length in reversed(pieces):  # the last piece is the default
            at = index[dim] - begin
            source = list(index)
            source[dim] = sympy.Max(0, sympy.Min(at, length - 1))
            loaded = load(source)
            value = loaded if value is None else ops.where(_within(at, 0, length), loaded, value)
        return value

    size, origins = tuple(size), origins_of(tensors)
    return TensorBox(Pointwise(device, dtype, inner_fn, size, origins))


def _one_kernel_writes(graph, tensors: list[TensorBox]) -> bool:
    """Whether one body may store a cat that its users read from memory: every piece
    stored already but at most one, and that one computed for this cat alone."""
    computed = [t for t in tensors if strided_view(t.data) is None]
    if len(computed) != 1:
        return not computed
    node = graph.current_node
    pieces = node.args[0] if node is not None else ()
    made = [p for p in pieces if graph.env.get(p) is computed[0]]
    return bool(made) and all(len(p.users) == 1 for p in made)


@register_lowering(aten.cat, graph=True)
def cat(graph, tensors, dim=0):
    dtype = functools.reduce(torch.promote_types, [t.get_dtype() for t in tensors])
    device = common_device(tensors)
    tensors = [t for t in tensors if list(t.get_size()) != [0]] or tensors[:1]
    size = list(tensors[0].get_size())
    dim = _dim(dim, len(size))
    size[dim] = sum((t.get_size()[dim] for t in tensors), sympy.Integer(0))
    # a piece empty along dim adds nothing; loaded in one body, it would be read at
    # an index clamped into no elements at all: outside its memory
    tensors = [t for t in tensors if t.get_size()[dim] != 0] or tensors[:1]
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"cat of {dtype}")
    users = graph.current_node.users if graph.current_node is not None else {}
    read_in_place = users and all(map(is_pointwise_use, users))
    if 1 < len(tensors) <= POINTWISE_CAT_PIECES and product(size) != 0 and (
        read_in_place or _one_kernel_writes(graph, tensors)
    ):
        return _pointwise_cat(tensors, dim, size, dtype, device)
    layout = FixedLayout.contiguous(device, dtype, size)
    name = graph.new_buffer_name()
    pieces, start = [], sympy.Integer(0)
    here = {graph.current_node} - {None}  # each piece is traced to it and its input
    for t in tensors:
        part = t.get_size()
        if product(part) != 0:
            offset = start * layout.stride[dim]
            slot = NonOwningLayout(device, dtype, tuple(part), layout.stride, offset, name)
            load = converting_loader(t, part, dtype)
            origins = origins_of([t]) | {"cat"}
            nodes = origin_nodes_of(t) | here  # chapter 19's comments
            body = Pointwise(
                device, dtype, load, tuple(part), origins, origin_nodes=nodes
            )
            piece = ComputedBuffer(graph.new_buffer_name(), slot, body)
            graph.register_buffer(piece)
            pieces.append(piece)
        start += part[dim]
    if not pieces:
        zero = Pointwise(device, dtype, lambda i: ops.constant(0, dtype), tuple(size))
        return TensorBox(zero)
    result = ConcatBuffer(name, layout, tuple(pieces))
    graph.register_buffer(result)
    return TensorBox(result)


@register_lowering(aten.stack, graph=True)
def stack(graph, tensors, dim=0):
    dim = dim % (len(tensors[0].get_size()) + 1)
    return cat(graph, [unsqueeze(t, dim) for t in tensors], dim)
