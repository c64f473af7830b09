# generated from chapters/06_lowering.md — edit there

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import operator
from typing import Any, Callable, Sequence

import sympy
import torch
from torch._ops import OpOverload, OpOverloadPacket
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind
from torch._prims_common import elementwise_dtypes
from torch._subclasses.fake_tensor import unset_fake_temporarily

from minductor.config import config
from minductor.ir import (
    Buffer,
    FallbackKernel,
    FixedLayout,
    GenericView,
    InputBuffer,
    MultiOutput,
    MultiOutputLayout,
    MutationBuffer,
    Pointwise,
    Index,
    Reduction,
    ReinterpretView,
    Scatter,
    TensorBox,
    strided_view,
    as_expr,
    as_exprs,
    ConcatBuffer,
    ComputedBuffer,
    ExternKernelOut,
    NonOwningLayout,
)
from minductor.ops import ops
from minductor.sizevars import (
    FloorDiv,
    ModularIndexing,
    SizeVarAllocator,
    contiguous_strides,
    flat_index,
    product,
)

log = logging.getLogger("minductor")
aten = torch.ops.aten
prims = torch.ops.prims

lowerings: dict[Any, Callable[..., Any]] = {}


class Unsupported(Exception):
    """Raised by a lowering that declines an op; the op then falls back to ATen."""


def register_lowering(
    *targets: OpOverload | OpOverloadPacket | Callable, graph: bool = False
):
    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.wants_graph = graph
        for target in targets:
            if isinstance(target, OpOverloadPacket):
                for name in target.overloads():
                    lowerings[getattr(target, name)] = fn
            else:
                lowerings[target] = fn
        return fn

    return decorator


SUPPORTED_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
}


def _meta_like(x: Any) -> Any:
    if isinstance(x, TensorBox):
        return torch.empty((1,) * len(x.get_size()), dtype=x.get_dtype(), device="meta")
    if isinstance(x, sympy.Expr):  # a symbolic size promotes like a Python int
        return 1
    return x


def promote(args: Sequence[Any], kind: Kind) -> tuple[torch.dtype, torch.dtype]:
    for a in args:
        if isinstance(a, TensorBox) and a.get_dtype() not in SUPPORTED_DTYPES:
            raise Unsupported(f"dtype {a.get_dtype()}")
    return elementwise_dtypes(*[_meta_like(a) for a in args], type_promotion_kind=kind)


def broadcast_shapes(*shapes: Sequence[sympy.Expr]) -> tuple[sympy.Expr, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out: list[sympy.Expr] = [sympy.Integer(1)] * ndim
    for shape in shapes:
        for k, size in enumerate(shape, start=ndim - len(shape)):
            if size != 1:
                if out[k] != 1 and out[k] != size:
                    raise RuntimeError(f"shapes {shapes} do not broadcast")
                out[k] = size
    return tuple(out)


def broadcast_loader(box: TensorBox, shape: Sequence[sympy.Expr]) -> Callable:
    loader = box.make_loader()
    size = box.get_size()
    skip = len(shape) - len(size)

    def load(index):
        inner = [
            sympy.Integer(0)
            if size[k] == 1 and shape[skip + k] != 1
            else index[skip + k]
            for k in range(len(size))
        ]
        return loader(inner)

    return load


def _origins(args: Sequence[Any]) -> frozenset[str]:
    found: set[str] = set()
    for a in args:
        if isinstance(a, TensorBox) and isinstance(a.data, Pointwise):
            found |= a.data.origins
    return frozenset(found)


def _device(args: Sequence[Any]) -> torch.device:
    devices = {a.get_device() for a in args if isinstance(a, TensorBox)}
    if len(devices) != 1:
        raise Unsupported(f"pointwise op on devices {devices}")
    return devices.pop()


def _scalar(value: Any, dtype: torch.dtype) -> Any:
    """A number, or a size such as s0, as a value in the body."""
    if isinstance(value, sympy.Expr) and not value.is_number:
        return ops.index_expr(value, dtype)
    return ops.constant(value, dtype)


def converting_loader(arg: Any, shape, dtype: torch.dtype) -> Callable:
    """Load `arg` (a TensorBox, a number or a size) broadcast to `shape`, as `dtype`."""
    if not isinstance(arg, TensorBox):
        return lambda index: _scalar(arg, dtype)
    loader = broadcast_loader(arg, shape)
    if arg.get_dtype() == dtype:
        return loader
    return lambda index: ops.to_dtype(loader(index), dtype)


def pointwise(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kind: Kind = Kind.DEFAULT,
    dtypes: tuple[torch.dtype, torch.dtype] | None = None,
) -> TensorBox:
    compute, result = dtypes or promote(args, kind)
    boxes = [a for a in args if isinstance(a, TensorBox)]
    shape = broadcast_shapes(*[b.get_size() for b in boxes])
    device = _device(args)

    loaders = [converting_loader(a, shape, compute) for a in args]
    natural = torch.bool if kind is Kind.ALWAYS_BOOL else compute

    def inner_fn(index):
        value = fn(*[load(index) for load in loaders])
        return value if natural == result else ops.to_dtype(value, result)

    return TensorBox(Pointwise(device, result, inner_fn, shape, _origins(args)))


def make_pointwise(op_name: str, kind: Kind = Kind.DEFAULT) -> Callable[..., TensorBox]:
    def lowering(*args: Any) -> TensorBox:
        return pointwise(getattr(ops, op_name), args, kind)

    lowering.__name__ = f"lower_{op_name}"
    return lowering


_TABLE = [
    (aten.neg, "neg", Kind.DEFAULT),
    (aten.abs, "abs", Kind.DEFAULT),
    (aten.relu, "relu", Kind.DEFAULT),
    (aten.sign, "sign", Kind.DEFAULT),
    (aten.exp, "exp", Kind.INT_TO_FLOAT),
    (aten.exp2, "exp2", Kind.INT_TO_FLOAT),
    (aten.expm1, "expm1", Kind.INT_TO_FLOAT),
    (aten.log, "log", Kind.INT_TO_FLOAT),
    (aten.log2, "log2", Kind.INT_TO_FLOAT),
    (aten.log1p, "log1p", Kind.INT_TO_FLOAT),
    (aten.sqrt, "sqrt", Kind.INT_TO_FLOAT),
    (aten.rsqrt, "rsqrt", Kind.INT_TO_FLOAT),
    (aten.sin, "sin", Kind.INT_TO_FLOAT),
    (aten.cos, "cos", Kind.INT_TO_FLOAT),
    (aten.tanh, "tanh", Kind.INT_TO_FLOAT),
    (aten.sigmoid, "sigmoid", Kind.INT_TO_FLOAT),
    (aten.erf, "erf", Kind.INT_TO_FLOAT),
    (aten.reciprocal, "reciprocal", Kind.INT_TO_FLOAT),
    (aten.maximum, "maximum", Kind.DEFAULT),
    (aten.minimum, "minimum", Kind.DEFAULT),
    (aten.mul, "mul", Kind.DEFAULT),
    (aten.eq, "eq", Kind.ALWAYS_BOOL),
    (aten.ne, "ne", Kind.ALWAYS_BOOL),
    (aten.lt, "lt", Kind.ALWAYS_BOOL),
    (aten.le, "le", Kind.ALWAYS_BOOL),
    (aten.gt, "gt", Kind.ALWAYS_BOOL),
    (aten.ge, "ge", Kind.ALWAYS_BOOL),
    (aten.isnan, "isnan", Kind.ALWAYS_BOOL),
]
for _op, _name, _kind in _TABLE:
    register_lowering(_op)(make_pointwise(_name, _kind))


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def _with_alpha(op: Callable, a, b, alpha) -> TensorBox:
    if alpha == 1:
        return pointwise(op, [a, b])
    dtypes = promote([a, b], Kind.DEFAULT)  # alpha does not take part in promotion
    if dtypes[0] == torch.bool:
        raise Unsupported("alpha with bool operands")
    return pointwise(lambda x, y, k: op(x, ops.mul(y, k)), [a, b, alpha], dtypes=dtypes)


@register_lowering(aten.add)
def add(a, b, *, alpha=1):
    return _with_alpha(ops.add, a, b, alpha)


@register_lowering(aten.sub)
def sub(a, b, *, alpha=1):
    return _with_alpha(ops.sub, a, b, alpha)


@register_lowering(aten.div)
def div(a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return pointwise(ops.truediv, [a, b], Kind.INT_TO_FLOAT)
    compute, _ = promote([a, b], Kind.DEFAULT)
    if rounding_mode == "floor":
        if _is_float(compute):
            return pointwise(lambda x, y: _float_floordiv(x, y, compute), [a, b])
        return pointwise(ops.floordiv, [a, b])
    if _is_float(compute):

        def trunc(x, y):
            q = ops.truediv(x, y)
            negative = ops.lt(q, ops.constant(0, compute))
            return ops.where(negative, ops.ceil(q), ops.floor(q))

        return pointwise(trunc, [a, b])
    return pointwise(ops.truncdiv, [a, b])


def _signs_differ(mod, y, compute):
    zero = ops.constant(0, compute)
    return ops.logical_and(
        ops.ne(mod, zero), ops.ne(ops.lt(y, zero), ops.lt(mod, zero))
    )


def _float_remainder(x, y, compute):
    # start from the exact fmod, then move it into the divisor's sign
    mod = ops.fmod(x, y)
    return ops.where(_signs_differ(mod, y, compute), ops.add(mod, y), mod)


def _float_floordiv(x, y, compute):
    # eager's algorithm: divide the exact multiple (x - fmod(x, y)), then round the
    # quotient to the nearest integer, so 1.0 // 0.1 is 9.0 as in Python
    def c(value):
        return ops.constant(value, compute)

    mod = ops.fmod(x, y)
    div = ops.truediv(ops.sub(x, mod), y)
    div = ops.where(_signs_differ(mod, y, compute), ops.sub(div, c(1)), div)
    floor = ops.floor(div)
    floor = ops.where(ops.gt(ops.sub(div, floor), c(0.5)), ops.add(floor, c(1)), floor)
    signed_zero = ops.mul(c(0), ops.truediv(x, y))
    result = ops.where(ops.ne(div, c(0)), floor, signed_zero)
    return ops.where(ops.eq(y, c(0)), ops.truediv(x, y), result)


@register_lowering(aten.floor_divide)
def floor_divide(a, b):
    return div(a, b, rounding_mode="floor")


@register_lowering(aten.remainder)
def remainder(a, b):
    compute, _ = promote([a, b], Kind.DEFAULT)
    if _is_float(compute):
        return pointwise(lambda x, y: _float_remainder(x, y, compute), [a, b])
    return pointwise(ops.remainder, [a, b])


def _rounding(name: str) -> Callable[[TensorBox], TensorBox]:
    def lowering(x):
        if not _is_float(x.get_dtype()):
            return pointwise(lambda v: v, [x])
        return pointwise(getattr(ops, name), [x])

    return lowering


register_lowering(aten.floor)(_rounding("floor"))
register_lowering(aten.ceil)(_rounding("ceil"))


def _truthy(box: Any) -> Any:
    if isinstance(box, TensorBox) and box.get_dtype() != torch.bool:
        return pointwise(ops.ne, [box, 0], Kind.ALWAYS_BOOL)
    return box


@register_lowering(aten.logical_not)
def logical_not(x):
    return pointwise(ops.logical_not, [_truthy(x)], Kind.ALWAYS_BOOL)


@register_lowering(aten.logical_and)
def logical_and(a, b):
    return pointwise(ops.logical_and, [_truthy(a), _truthy(b)], Kind.ALWAYS_BOOL)


@register_lowering(aten.logical_or)
def logical_or(a, b):
    return pointwise(ops.logical_or, [_truthy(a), _truthy(b)], Kind.ALWAYS_BOOL)


@register_lowering(aten.bitwise_not)
def bitwise_not(x):
    if x.get_dtype() == torch.bool:
        return logical_not(x)
    return pointwise(ops.bitwise_not, [x])


def _bitwise(name: str) -> Callable[..., TensorBox]:
    def lowering(a, b):
        compute, _ = promote([a, b], Kind.DEFAULT)
        if _is_float(compute):
            raise Unsupported(f"{name} on floating point")
        return pointwise(getattr(ops, name), [a, b])

    return lowering


for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    register_lowering(getattr(aten, _name))(_bitwise(_name))


@register_lowering(aten.where)
def where(cond, a, b):
    _, result = promote([a, b], Kind.NO_OPMATH)
    return _where(_truthy(cond), a, b, result)


def _where(cond: TensorBox, a: Any, b: Any, dtype: torch.dtype) -> TensorBox:
    boxes = [v for v in (cond, a, b) if isinstance(v, TensorBox)]
    shape = broadcast_shapes(*[v.get_size() for v in boxes])
    load_cond = broadcast_loader(cond, shape)
    load_a, load_b = (converting_loader(v, shape, dtype) for v in (a, b))

    def inner_fn(index):
        return ops.where(load_cond(index), load_a(index), load_b(index))

    device = _device([cond, a, b])
    return TensorBox(Pointwise(device, dtype, inner_fn, shape, _origins([cond, a, b])))


# prims.fma(a, b, c) = a * b + c, which torch's decompositions of addcmul and addcdiv
# (the optimizers' ops) emit; rounded twice here, once in eager's fused instruction
@register_lowering(prims.fma)
def fma(a, b, c):
    return pointwise(lambda x, y, z: ops.add(ops.mul(x, y), z), [a, b, c])


@register_lowering(aten.clamp)
def clamp(x, min=None, max=None):
    args = [x] + [v for v in (min, max) if v is not None]
    compute, result = promote(args, Kind.DEFAULT)

    def fn(v, *bounds):
        k = 0
        if min is not None:
            v, k = ops.maximum(v, bounds[0]), 1
        if max is not None:
            v = ops.minimum(v, bounds[k])
        return v

    return pointwise(fn, args, dtypes=(compute, result))


@register_lowering(aten.clamp_min)
def clamp_min(x, min):
    return clamp(x, min=min)


@register_lowering(aten.clamp_max)
def clamp_max(x, max):
    return clamp(x, max=max)


@register_lowering(aten.gelu)
def gelu(x, *, approximate="none"):
    compute, _ = promote([x], Kind.DEFAULT)

    def c(value: float) -> Any:
        return ops.constant(value, compute)

    def exact(v):
        cdf = ops.mul(c(0.5), ops.add(c(1.0), ops.erf(ops.mul(v, c(math.sqrt(0.5))))))
        return ops.mul(v, cdf)

    def tanh_approximation(v):
        cube = ops.mul(v, ops.mul(v, v))
        inner = ops.mul(
            c(math.sqrt(2 / math.pi)), ops.add(v, ops.mul(c(0.044715), cube))
        )
        return ops.mul(ops.mul(c(0.5), v), ops.add(c(1.0), ops.tanh(inner)))

    return pointwise(tanh_approximation if approximate == "tanh" else exact, [x])


@register_lowering(aten.silu)
def silu(x):
    return pointwise(lambda v: ops.mul(v, ops.sigmoid(v)), [x])


def _int_power(v: Any, n: int, compute: torch.dtype) -> Any:
    if n == 0:
        return ops.constant(1, compute)
    result = v
    for _ in range(abs(n) - 1):
        result = ops.mul(result, v)
    return ops.reciprocal(result) if n < 0 else result


@register_lowering(aten.pow)
def pow(base, exponent):
    values = [v for v in (base, exponent) if isinstance(v, TensorBox)]
    if all(v.get_dtype() == torch.bool for v in values):
        raise Unsupported("pow of booleans")  # eager keeps bool; promotion says int64
    if isinstance(exponent, (int, float)) and isinstance(base, TensorBox):
        compute, result = promote([base, exponent], Kind.BOOL_TO_LONG)
        if float(exponent).is_integer() and abs(exponent) <= 4:
            if exponent < 0 and not _is_float(compute):
                raise Unsupported("integer to a negative power")
            n = int(exponent)
            power = lambda v: _int_power(v, n, compute)  # noqa: E731
            return pointwise(power, [base], dtypes=(compute, result))
        if exponent == 0.5:
            return pointwise(ops.sqrt, [base], dtypes=(compute, result))
    return pointwise(ops.pow, [base, exponent], Kind.BOOL_TO_LONG)


def _default_dtype(value: Any) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.get_default_dtype()


def _constant_box(value, size, dtype, device) -> TensorBox:
    dtype = dtype or _default_dtype(value)
    device = torch.device(device or "cpu")
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {dtype}")
    ranges = as_exprs(size)
    inner_fn = lambda index: ops.constant(value, dtype)  # noqa: E731
    return TensorBox(Pointwise(device, dtype, inner_fn, ranges))


@register_lowering(aten.full)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _constant_box(fill_value, size, dtype, device)


@register_lowering(aten.scalar_tensor)
def scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _constant_box(value, (), dtype or torch.get_default_dtype(), device)


@register_lowering(aten.clone, aten.lift_fresh_copy)
def clone(x, *, memory_format=None):
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        raise Unsupported(f"clone to {memory_format}")
    return pointwise(lambda v: v, [x], dtypes=(x.get_dtype(), x.get_dtype()))


@register_lowering(aten.copy)
def copy(x, src, non_blocking=False):
    """The functional copy_: src, broadcast to x's shape and converted to its dtype."""
    if src.get_device() != x.get_device():
        raise Unsupported("copy between devices")
    load = converting_loader(src, x.get_size(), x.get_dtype())
    return TensorBox(
        Pointwise(x.get_device(), x.get_dtype(), load, x.get_size(), _origins([src]))
    )


def _convert(x: TensorBox, dtype: torch.dtype) -> TensorBox:
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
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        raise Unsupported(f"copy to {memory_format}")
    return _convert(x, dtype or x.get_dtype())


@register_lowering(prims.convert_element_type)
def convert_element_type(x, dtype):
    return _convert(x, dtype)


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
    if dim is None:
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
    new = [
        old[k - skip] if s == -1 else sympy.Integer(s) for k, s in enumerate(size)
    ]

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
    if isinstance(n, int) or n.is_Integer:
        n = int(n)
        return min(max(value + n if value < 0 else value, 0), n)
    # a symbolic length s0: python's slicing rules as expressions (s0 >= 2)
    if value >= 2**62:  # the "to the end" that x[a:] is traced as
        return n
    return sympy.Max(value + n, 0) if value < 0 else sympy.Min(value, n)


@register_lowering(aten.slice.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    size = list(x.get_size())
    dim = _dim(dim, len(size))
    n = size[dim]
    start, end = _clamp(start, 0, n), _clamp(end, n, n)
    size[dim] = sympy.Max(0, FloorDiv(end - start + step - 1, step))

    def reindex(index):
        old = list(index)
        old[dim] = start + index[dim] * step
        return old

    return make_view(x, size, reindex)


@register_lowering(aten.select.int)
def select(x, dim, index):
    size = list(x.get_size())
    dim = _dim(dim, len(size))
    index = index + int(size[dim]) if index < 0 else index

    def reindex(view_index):
        return list(view_index[:dim]) + [sympy.Integer(index)] + list(view_index[dim:])

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


def _eager_storage_is_ours(graph, x: TensorBox) -> bool:
    meta = graph.current_node.args[0].meta.get("val")
    return (
        isinstance(meta, torch.Tensor)
        and meta.is_contiguous()
        and meta.storage_offset() == 0
        and meta.untyped_storage().nbytes() == meta.numel() * meta.element_size()
    )


@register_lowering(aten.as_strided, graph=True)
def as_strided(graph, x, size, stride, storage_offset=None):
    strided = strided_view(x.data)
    if strided is None or not isinstance(strided.data, InputBuffer):
        if not _eager_storage_is_ours(graph, x):
            raise NotImplementedError(
                "minductor: as_strided of a computed value whose storage in eager is "
                "not a plain contiguous tensor"
            )
        strided = strided_view(graph.realize_intermediate(x))
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

        size = x.get_size()
        return TensorBox(Pointwise(x.get_device(), dtype, inner_fn, size, _origins([x])))

    return lowering


register_lowering(aten.triu)(_triangle(True))
register_lowering(aten.tril)(_triangle(False))


def _factory(value: int) -> Callable[..., TensorBox]:
    def lowering(size, *, dtype=None, layout=None, device=None, pin_memory=None):
        return _constant_box(value, size, dtype or torch.get_default_dtype(), device)

    return lowering


register_lowering(aten.zeros)(_factory(0))
register_lowering(aten.ones)(_factory(1))


def _new(value_of: Callable[[tuple], Any]) -> Callable[..., TensorBox]:
    def lowering(x, size, *args, dtype=None, layout=None, device=None, pin_memory=None):
        dtype, device = dtype or x.get_dtype(), device or x.get_device()
        return _constant_box(value_of(args), size, dtype, device)

    return lowering


register_lowering(aten.new_zeros)(_new(lambda args: 0))
register_lowering(aten.new_ones)(_new(lambda args: 1))
register_lowering(aten.new_full)(_new(lambda args: args[0]))


def _like(value_of: Callable[[tuple], Any]) -> Callable[..., TensorBox]:
    def lowering(x, *args, dtype=None, device=None, memory_format=None, **unused):
        dtype, device = dtype or x.get_dtype(), device or x.get_device()
        return _constant_box(value_of(args), x.get_size(), dtype, device)

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
    scaled = ops.mul(_scalar(step, compute), i)
    return ops.add(_scalar(first, compute), scaled)


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
        return _constant_box(start, [steps], dtype, device)
    compute, step = _float_compute(dtype), (end - start) / (steps - 1)

    def at(i):
        up = _affine(start, step, i, compute)
        back = ops.sub(ops.constant(steps - 1, torch.int64), i)  # points left to end
        down = _affine(end, -step, back, compute)
        return ops.where(ops.lt(i, ops.constant(steps // 2, torch.int64)), up, down)

    return _range_box(steps, dtype, device, at)


def _index_value(expr: sympy.Expr) -> Any:
    return ops.index_expr(expr, torch.int64)


def _within(expr: sympy.Expr, lo: Any, hi: Any) -> Any:
    """lo <= expr < hi, as a boolean value (the bounds may be symbolic sizes)."""
    value = _index_value(expr)
    return ops.logical_and(
        ops.ge(value, _scalar(lo, torch.int64)),
        ops.lt(value, _scalar(hi, torch.int64)),
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
        return _constant_box(value, new, dtype, x.get_device())
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

    box = Pointwise(x.get_device(), dtype, inner_fn, tuple(new), _origins([x]))
    return TensorBox(box)


@register_lowering(aten.slice_scatter)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    size = x.get_size()
    d = _dim(dim, len(size))
    n = int(size[d])
    start, end = _clamp(start, 0, n), _clamp(end, n, n)
    count = int(src.get_size()[d])
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

    box = Pointwise(x.get_device(), x.get_dtype(), inner_fn, size, _origins([x, src]))
    return TensorBox(box)


@register_lowering(aten.select_scatter)
def select_scatter(x, src, dim, index):
    size = x.get_size()
    d = _dim(dim, len(size))
    index = index + int(size[d]) if index < 0 else index
    load_x = x.make_loader()
    load_src = converting_loader(src, src.get_size(), x.get_dtype())

    def inner_fn(i):
        hit = ops.eq(_index_value(i[d]), ops.constant(index, torch.int64))
        return ops.where(hit, load_src(list(i[:d]) + list(i[d + 1 :])), load_x(i))

    box = Pointwise(x.get_device(), x.get_dtype(), inner_fn, size, _origins([x, src]))
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

    box = Pointwise(x.get_device(), x.get_dtype(), inner_fn, size, _origins([x, src]))
    return TensorBox(box)


@register_lowering(aten.cat, graph=True)
def cat(graph, tensors, dim=0):
    tensors = [t for t in tensors if list(t.get_size()) != [0] or len(tensors) == 1]
    size = list(tensors[0].get_size())
    dim = _dim(dim, len(size))
    size[dim] = sum((t.get_size()[dim] for t in tensors), sympy.Integer(0))
    dtype = functools.reduce(torch.promote_types, [t.get_dtype() for t in tensors])
    device = _device(tensors)
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"cat of {dtype}")
    layout = FixedLayout.contiguous(device, dtype, size)
    name = graph.new_buffer_name()
    pieces, start = [], sympy.Integer(0)
    for t in tensors:
        part = t.get_size()
        if product(part) != 0:
            offset = start * layout.stride[dim]
            slot = NonOwningLayout(device, dtype, tuple(part), layout.stride, offset, name)
            load = converting_loader(t, part, dtype)
            origins = _origins([t]) | {"cat"}
            body = Pointwise(device, dtype, load, tuple(part), origins)
            piece = ComputedBuffer(graph.new_buffer_name(), slot, body)
            graph.register_buffer(piece)
            pieces.append(piece)
        start += part[dim]
    result = ConcatBuffer(name, layout, tuple(pieces))
    graph.register_buffer(result)
    return TensorBox(result)


@register_lowering(aten.stack, graph=True)
def stack(graph, tensors, dim=0):
    dim = dim % (len(tensors[0].get_size()) + 1)
    return cat(graph, [unsqueeze(t, dim) for t in tensors], dim)


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


def _reduced_dims(ndim: int, dims: Any) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
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
            _origins([x]),
            output_index,
            "outer" if outer else "inner",
        )
    )


def _sum_dtype(x: TensorBox, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return x.get_dtype() if _is_float(x.get_dtype()) else torch.int64


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

        return make_reduction(
            x, dim, keepdim, reduction_type, torch.bool, torch.int8, value_fn=nonzero
        )

    return lowering


register_lowering(aten.any.default, aten.any.dim, aten.any.dims)(_truth("max"))
register_lowering(aten.all.default, aten.all.dim, aten.all.dims)(_truth("min"))


SPLITTABLE = ("sum", "prod", "max", "min")


def split_count(reduction: Reduction) -> int:
    """Into how many pieces to cut each reduced row (1: reduce in one stage)."""
    numel, rnumel = product(reduction.ranges), product(reduction.reduction_ranges)
    static = isinstance(numel, sympy.Integer) and isinstance(rnumel, sympy.Integer)
    if reduction.reduction_type not in SPLITTABLE or not static:
        return 1
    numel, rnumel = int(numel), int(rnumel)
    if numel * rnumel < 2**18:
        return 1
    outer = reduction.reduction_hint == "outer"
    programs = max(1, numel // 16) if outer else numel
    splits = 1
    while programs * splits < 1024 and rnumel % (2 * splits) == 0:
        if rnumel // (2 * splits) < 256:
            break
        splits *= 2
    return splits


def split_reduction(graph: GraphLowering, box: TensorBox) -> None:
    """Replace box's reduction by a second stage over a realized first stage."""
    red = box.data
    splits = split_count(red)
    if splits == 1:
        return
    rsizes = red.reduction_ranges
    piece = product(rsizes) // splits
    rstrides = contiguous_strides(rsizes)

    def first_fn(index, rindex):
        flat = index[0] * piece + rindex[0]  # the position in the whole reduced row
        digits = [ModularIndexing(flat, s, n) for s, n in zip(rstrides, rsizes)]
        return red.inner_fn(index[1:], digits)

    first = dataclasses.replace(
        red,
        dtype=red.src_dtype,
        inner_fn=first_fn,
        ranges=(sympy.Integer(splits), *red.ranges),
        reduction_ranges=(piece,),
    )
    load = TensorBox(first).realize(graph).make_loader()

    def second_fn(index, rindex):
        return load([rindex[0], *index])

    box.data = dataclasses.replace(
        red, inner_fn=second_fn, reduction_ranges=(sympy.Integer(splits),)
    )


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
    if not _is_float(x.get_dtype()):
        raise Unsupported(f"variance of {x.get_dtype()}")
    acc = _accumulator(x.get_dtype())
    size = x.get_size()
    count = product([size[d] for d in _reduced_dims(len(size), dims)])
    # the mean is stored in x's dtype; m2 stays in the accumulator's for the variance
    mean, m2 = (
        make_reduction(x, dims, keepdim, "welford_reduce", out, acc, output_index=k)
        for k, out in ((0, x.get_dtype()), (1, acc))
    )
    for box in (mean, m2):
        graph.realize_intermediate(box)
    return mean, m2, count


def _variance(x, m2: TensorBox, count, correction, root: bool) -> TensorBox:
    acc = m2.get_dtype()
    correction = 1 if correction is None else correction
    denominator = sympy.Max(0, count - sympy.nsimplify(correction))

    def finish(m):  # a symbolic count, max(0, s0 - 1), is computed in the kernel
        var = ops.truediv(m, _scalar(denominator, acc))
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


@register_lowering(aten.nll_loss_forward, graph=True)
def nll_loss_forward(graph, x, target, weight, reduction, ignore_index):
    if len(x.get_size()) != 2 or not _is_float(x.get_dtype()):
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
                _origins([x]),
            )
        )
        graph.realize_intermediate(box)
        return box

    def per_row(fn: Callable[[Index], Any]) -> TensorBox:
        size = x.get_size()[:1]
        return TensorBox(Pointwise(x.get_device(), acc, fn, size, _origins([x])))

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
        zero = _constant_box(0.0, (), x.get_dtype(), x.get_device())
        return _convert(losses, x.get_dtype()), zero
    total = make_reduction(losses, [0], False, "sum", acc, acc)
    total_weight = make_reduction(counted, [0], False, "sum", acc, acc)
    for box in (total, total_weight):
        graph.realize_intermediate(box)
    if reduction == 2:  # "sum"
        loss = _convert(total, x.get_dtype())
    else:
        dtypes = (acc, x.get_dtype())
        loss = pointwise(ops.truediv, [total, total_weight], dtypes=dtypes)
    return loss, _convert(total_weight, x.get_dtype())


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


@register_lowering(aten.index.Tensor)
def index(x, indices):
    ranges, where, boxes = advanced_index(x, indices)
    return _gathered(x, boxes[0], ranges, where)


ATOMIC_ADD_DTYPES = (
    torch.float16,
    torch.float32,
    torch.float64,
    torch.int32,
    torch.int64,
)


def _scatter(graph, x, ranges, where, value, mode, origin: str) -> TensorBox:
    """A copy of x, then a MutationBuffer writing value(i) at x's position where(i)."""
    if x.get_dtype() not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {x.get_dtype()}")
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


class MixedDeviceError(RuntimeError):
    pass


def _check_devices(names: Sequence[str], inputs: Sequence[Any]) -> torch.device | None:
    where = {n: t.device for n, t in zip(names, inputs) if isinstance(t, torch.Tensor)}
    if len({d.type for d in where.values()}) > 1 or len(set(where.values())) > 1:
        listing = ", ".join(f"{n} on {d}" for n, d in where.items())
        raise MixedDeviceError(
            f"minductor compiles a graph for one device, but its inputs are on "
            f"several: "
            f"{listing}. Move them to one device before calling the compiled function."
        )
    return next(iter(where.values()), None)


class GraphLowering(torch.fx.Interpreter):
    def __init__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], shape_env=None
    ):
        super().__init__(gm)
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        self.device = _check_devices(names, example_inputs)
        self.example_inputs = list(example_inputs)
        self.sizevars = (  # Dynamo's symbols, hints and ranges, if sizes are symbolic
            SizeVarAllocator.from_shape_env(shape_env)
            if shape_env is not None
            else SizeVarAllocator()
        )
        self.buffers: list[Buffer] = []
        self.graph_inputs: dict[str, Any] = {}
        self.graph_input_names: list[str] = []
        # a buffer, None, or (dynamic shapes) a size expression such as s0*s1
        self.graph_outputs: list[Buffer | sympy.Expr | None] = []
        self.fallbacks: list[str] = []
        self.extern_kernels: list[str] = []  # planned vendor calls: mm, attention
        self.constants: dict[str, torch.Tensor] = {}  # tensors the graph holds
        self.current_node: torch.fx.Node | None = None
        self._names = 0  # how many buffer names were handed out

    def new_buffer_name(self) -> str:
        name = f"buf{self._names}"
        self._names += 1
        return name

    def register_buffer(self, buf: Buffer) -> None:
        self.buffers.append(buf)

    def lower(self) -> GraphLowering:
        self.run(*self.example_inputs)
        return self


    def placeholder(self, target, args, kwargs):
        value = super().placeholder(target, args, kwargs)
        name = self.current_node.name
        self.graph_input_names.append(name)
        if isinstance(value, torch.Tensor):
            if value.dtype not in SUPPORTED_DTYPES:
                log.debug(
                    "input %s has dtype %s; ops on it fall back", name, value.dtype
                )
            box = TensorBox(InputBuffer(name, FixedLayout.from_tensor(value)))
            self.graph_inputs[name] = box
            return box
        if isinstance(value, torch.SymInt):
            value = as_expr(value)  # a size symbol, bound by the wrapper at run time
        self.graph_inputs[name] = value
        return value

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if not isinstance(value, torch.Tensor):
            return value
        if value.numel() == 1 and value.dtype in SUPPORTED_DTYPES:
            # a number traced as a tensor (the 0 of x[mask] = 0): a constant body; a
            # 0-dim CPU constant is a scalar to eager, so it lives on the graph's device
            device = self.device if value.dim() == 0 and self.device else value.device
            with unset_fake_temporarily():  # we compile inside Dynamo's fake mode
                number = value.item()
            return _constant_box(number, value.shape, value.dtype, device)
        # a real tensor: one more input, which the compiled graph passes itself
        name = self.current_node.name
        self.constants[name] = value
        self.graph_input_names.append(name)
        box = TensorBox(InputBuffer(name, FixedLayout.from_tensor(value)))
        self.graph_inputs[name] = box
        return box

    def call_function(self, target, args, kwargs):
        if target is operator.getitem:
            return args[0][args[1]]
        meta = self.current_node.meta.get("val")
        if isinstance(meta, torch.SymInt):  # arithmetic on sizes: the answer is known
            return as_expr(meta)
        lowering = lowerings.get(target)
        if lowering is not None:
            try:
                if getattr(lowering, "wants_graph", False):
                    return lowering(self, *args, **kwargs)
                return lowering(*args, **kwargs)
            except Unsupported as why:
                return self.fallback(target, args, kwargs, reason=str(why))
            except TypeError as why:  # int(s0), or s0 < 4 asked of sympy
                if self.sizevars.shape_env is None:
                    raise  # with static sizes this is a bug, not a limitation
                reason = f"needs static sizes: {why}"
                return self.fallback(target, args, kwargs, reason=reason)
        return self.fallback(target, args, kwargs, reason="no lowering")

    def output(self, target, args, kwargs):
        (results,) = args
        if not isinstance(results, (tuple, list)):  # make_fx graphs return one value
            results = (results,)
        for value in results:
            if isinstance(value, TensorBox):
                self.graph_outputs.append(value.realize(self))
            elif value is None or isinstance(value, sympy.Expr):
                self.graph_outputs.append(value)
            else:
                raise NotImplementedError(f"graph output {value!r} is not a tensor")
        return results


    def fallback(self, target, args, kwargs, reason: str, extern=False) -> Any:
        op_name = str(target)
        if not isinstance(target, OpOverload):  # a Python function, a higher-order op
            raise NotImplementedError(
                f"minductor cannot compile {op_name}: it has no lowering, and only "
                f"ATen operators can fall back ({reason})"
            )
        if extern:  # planned, not a failure to lower
            self.extern_kernels.append(op_name)
        else:
            log.debug("fallback: %s (%s)", op_name, reason)
            self.fallbacks.append(op_name)

        def realize(a: Any) -> Any:
            if isinstance(a, TensorBox):
                return a.realize(self)
            if isinstance(a, (list, tuple)):
                return type(a)(realize(x) for x in a)
            return a

        args = realize(tuple(args))
        kwargs = {k: realize(v) for k, v in kwargs.items()}
        args, kwargs = self.exact_strides(target, args, kwargs)
        meta = self.current_node.meta.get("val")
        if isinstance(meta, torch.Tensor):
            buf = FallbackKernel(
                self.new_buffer_name(),
                FixedLayout.from_tensor(meta),
                target,
                args,
                kwargs,
            )
            self.register_buffer(buf)
            return TensorBox(buf)
        if isinstance(meta, (list, tuple)) and all(
            isinstance(m, (torch.Tensor, int, torch.SymInt)) or m is None for m in meta
        ):
            device = next(m.device for m in meta if isinstance(m, torch.Tensor))
            parent = FallbackKernel(
                self.new_buffer_name(), MultiOutputLayout(device), target, args, kwargs
            )
            self.register_buffer(parent)
            outputs = []
            for k, m in enumerate(meta):
                if not isinstance(m, torch.Tensor):  # None, or a size the op reports
                    outputs.append(None if m is None else as_expr(m))
                    continue
                out = MultiOutput(
                    self.new_buffer_name(), FixedLayout.from_tensor(m), parent, k
                )
                self.register_buffer(out)
                outputs.append(TensorBox(out))
            return tuple(outputs)
        raise NotImplementedError(f"cannot fall back on {op_name}: it returns {meta!r}")

    def exact_strides(self, target, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Each tensor argument with the strides it has in the graph, unless written."""
        node, schema = self.current_node, target._schema
        names = [a.name for a in schema.arguments]
        written = {
            a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write
        }

        def fix(value, name, fx_arg):
            fixed = isinstance(value, Buffer) and isinstance(value.layout, FixedLayout)
            if name in written or not fixed:
                return value
            meta = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else None
            if not isinstance(meta, torch.Tensor):
                return value
            if tuple(as_exprs(meta.size())) != tuple(value.get_size()):
                return value  # not the graph's argument at this place
            return self.require_strides(value, as_exprs(meta.stride()))

        args = tuple(
            fix(a, names[k] if k < len(names) else None, fx)
            for k, (a, fx) in enumerate(zip(args, node.args))
        )
        kwargs = {k: fix(v, k, node.kwargs.get(k)) for k, v in kwargs.items()}
        return args, kwargs

    def require_strides(self, buf: Buffer, stride: tuple[sympy.Expr, ...]) -> Buffer:
        """buf, or a copy of it with these strides (sizes of 1 do not count)."""
        layout = buf.layout
        pairs = zip(layout.size, layout.stride, stride)
        if all(n == 1 or s == want for n, s, want in pairs):
            return buf
        size = layout.size
        body = Pointwise(layout.device, layout.dtype, buf.make_loader(), size)
        exact = FixedLayout(layout.device, layout.dtype, size, stride)
        copy = ComputedBuffer(self.new_buffer_name(), exact, body)
        self.register_buffer(copy)
        return copy


    def run_node(self, n: torch.fx.Node) -> Any:
        self.current_node = n
        result = super().run_node(n)
        if n.op != "call_function" or n.target is operator.getitem:
            return result
        metas = n.meta.get("val")
        several = isinstance(result, tuple)
        for k, box in enumerate(result if several else (result,)):
            if not isinstance(box, TensorBox):
                continue
            self._check_against_meta(n, box, metas[k] if several else metas)
            self._add_origin(box)
            if isinstance(box.data, Reduction):
                split_reduction(self, box)  # few long rows: two stages
                box.realize(self)  # nothing can read a reduction element-wise
            elif isinstance(box.data, Pointwise):
                self._maybe_realize(n, box)
            elif isinstance(box.data, GenericView):  # decide for the viewed value
                viewed = box.data.box
                while isinstance(viewed.data, GenericView):
                    viewed = viewed.data.box
                if isinstance(viewed.data, Pointwise):
                    self._maybe_realize(n, viewed)
        return result

    def _add_origin(self, box: TensorBox) -> None:
        if isinstance(box.data, (Pointwise, Reduction)):
            target = self.current_node.target
            name = getattr(target, "__name__", str(target)).split(".")[0]
            origins = box.data.origins | {name}
            box.data = dataclasses.replace(box.data, origins=origins)

    def realize_intermediate(self, box: TensorBox) -> Buffer:
        """Store a value that a lowering goes on to read (a graph=True lowering)."""
        self._add_origin(box)
        return box.realize(self)

    def _check_against_meta(self, n: torch.fx.Node, box: TensorBox, meta) -> None:
        if not isinstance(meta, torch.Tensor):
            return
        size, expected = box.get_size(), as_exprs(meta.shape)
        same = len(size) == len(expected) and all(
            sympy.expand(a - b) == 0 for a, b in zip(size, expected)
        )
        if same and box.get_dtype() == meta.dtype:
            return
        hints = self.sizevars.size_hints
        if box.get_dtype() == meta.dtype and len(size) == len(expected):
            if hints(size) == hints(expected):  # equal for these sizes, maybe not all
                raise NotImplementedError(
                    f"cannot prove that {n.target}'s size {list(size)} is eager's "
                    f"{list(expected)}"
                )
        raise AssertionError(
            f"lowering of {n.target} produced {box.get_dtype()} {list(size)}, "
            f"but eager produces {meta.dtype} {list(meta.shape)}"
        )

    def _maybe_realize(self, n: torch.fx.Node, box: TensorBox) -> None:
        counts = box.data.count_ops()
        heavy = (
            counts.count > config.realize_opcount_threshold
            or counts.reads > config.realize_reads_threshold
        )
        if (len(n.users) > 1 and heavy) or counts.count > config.inline_opcount_limit:
            box.realize(self)
