# generated from chapters/07_pointwise.md — edit there

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind
from torch._prims_common import elementwise_dtypes

from minductor.ir import Pointwise, TensorBox
from minductor.lowering import (
    SUPPORTED_DTYPES,
    Unsupported,
    aten,
    prims,
    register_lowering,
)
from minductor.ops import ops


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
            if size == 1 or out[k] == size:
                continue
            if out[k] == 1:
                out[k] = size
            elif out[k].is_number and size.is_number:
                raise RuntimeError(f"shapes {shapes} do not broadcast")
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


def origins_of(args: Sequence[Any]) -> frozenset[str]:
    """The ATen ops that computed args: every lowering that builds a `Pointwise` by
    hand passes them on, for kernel names."""
    found: set[str] = set()
    for a in args:
        if isinstance(a, TensorBox) and isinstance(a.data, Pointwise):
            found |= a.data.origins
    return frozenset(found)


def common_device(args: Sequence[Any]) -> torch.device:
    """The one device of the tensors among args (views and indexing check it too)."""
    devices = {a.get_device() for a in args if isinstance(a, TensorBox)}
    if len(devices) != 1:
        raise Unsupported(f"pointwise op on devices {devices}")
    return devices.pop()


def scalar_value(value: Any, dtype: torch.dtype) -> Any:
    """A number, or a size such as s0, as a value in the body (any lowering's body)."""
    if isinstance(value, sympy.Expr) and not value.is_number:
        return ops.index_expr(value, dtype)
    return ops.constant(value, dtype)


def converting_loader(arg: Any, shape, dtype: torch.dtype) -> Callable:
    """Load `arg` (a TensorBox, a number or a size) broadcast to `shape`, as `dtype`."""
    if not isinstance(arg, TensorBox):
        return lambda index: scalar_value(arg, dtype)
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
    device = common_device(args)

    loaders = [converting_loader(a, shape, compute) for a in args]
    natural = torch.bool if kind is Kind.ALWAYS_BOOL else compute

    def inner_fn(index):
        value = fn(*[load(index) for load in loaders])
        return value if natural == result else ops.to_dtype(value, result)

    return TensorBox(Pointwise(device, result, inner_fn, shape, origins_of(args)))


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
    (aten.log10, "log10", Kind.INT_TO_FLOAT),
    (aten.fmod, "fmod", Kind.DEFAULT),  # C's: the sign of the dividend
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
    if promote([a, b], Kind.DEFAULT)[0] == torch.bool and alpha == 1:
        return pointwise(ops.logical_or, [a, b])  # True + True is True
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
register_lowering(aten.trunc)(_rounding("trunc"))
register_lowering(aten.round.default)(_rounding("round"))


@register_lowering(aten.signbit)
def signbit(x):
    if not _is_float(x.get_dtype()):
        return pointwise(ops.lt, [x, 0], Kind.ALWAYS_BOOL)
    return pointwise(ops.signbit, [x], Kind.ALWAYS_BOOL)


@register_lowering(aten.copysign)
def copysign(a, b):
    def body(x, y):
        magnitude = ops.abs(x)
        return ops.where(ops.signbit(y), ops.neg(magnitude), magnitude)

    return pointwise(body, [a, b], Kind.INT_TO_FLOAT)


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

    device = common_device([cond, a, b])
    origins = origins_of([cond, a, b])
    return TensorBox(Pointwise(device, dtype, inner_fn, shape, origins))


# prims.fma(a, b, c) = a * b + c, which torch's decompositions of addcmul and addcdiv
# (the optimizers' ops) emit; rounded twice here, once in eager's fused instruction.
# torch._inductor.inductor_prims defines it, whoever imports this module first.
import torch._inductor.inductor_prims  # noqa: E402, F401


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
        # eager's pow calls its rsqrt here (the same bits, and -0.0 ** -0.5 is -inf),
        # but for float16 on the CPU, where it calls C's pow (+inf)
        c_pow = result == torch.float16 and base.get_device().type == "cpu"
        if exponent == -0.5 and not c_pow:
            return pointwise(ops.rsqrt, [base], dtypes=(compute, result))
    if not _is_float(promote([base, exponent], Kind.BOOL_TO_LONG)[0]):
        # ops.pow is a floating-point power: 5 ** 1 could come out as 4.9999 -> 4
        raise Unsupported("integer pow other than a small constant exponent")
    return pointwise(ops.pow, [base, exponent], Kind.BOOL_TO_LONG)
