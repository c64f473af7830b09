# generated from chapters/16_triton_ops.md — edit there

from __future__ import annotations

import math

import torch

TRITON_DTYPES = {
    torch.bool: "tl.int1",
    torch.uint8: "tl.uint8",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
}


class TritonOverrides:
    """Triton source for each math op; arguments are tmp names or literals."""

    add = staticmethod(lambda a, b: f"{a} + {b}")
    sub = staticmethod(lambda a, b: f"{a} - {b}")
    mul = staticmethod(lambda a, b: f"{a} * {b}")
    truediv = staticmethod(lambda a, b: f"{a} / {b}")
    floordiv = staticmethod(lambda a, b: f"helpers.floordiv({a}, {b})")
    truncdiv = staticmethod(lambda a, b: f"{a} // {b}")  # C semantics on ints
    remainder = staticmethod(lambda a, b: f"helpers.remainder({a}, {b})")
    fmod = staticmethod(lambda a, b: f"{a} % {b}")  # C's fmod on floats
    maximum = staticmethod(lambda a, b: f"helpers.maximum({a}, {b})")
    minimum = staticmethod(lambda a, b: f"helpers.minimum({a}, {b})")
    pow = staticmethod(lambda a, b: f"libdevice.pow({a}, {b})")
    eq = staticmethod(lambda a, b: f"{a} == {b}")
    ne = staticmethod(lambda a, b: f"{a} != {b}")
    lt = staticmethod(lambda a, b: f"{a} < {b}")
    le = staticmethod(lambda a, b: f"{a} <= {b}")
    gt = staticmethod(lambda a, b: f"{a} > {b}")
    ge = staticmethod(lambda a, b: f"{a} >= {b}")
    logical_and = staticmethod(lambda a, b: f"{a} & {b}")
    logical_or = staticmethod(lambda a, b: f"{a} | {b}")
    bitwise_and = staticmethod(lambda a, b: f"{a} & {b}")
    bitwise_or = staticmethod(lambda a, b: f"{a} | {b}")
    bitwise_xor = staticmethod(lambda a, b: f"{a} ^ {b}")
    bitwise_not = staticmethod(lambda x: f"~{x}")
    neg = staticmethod(lambda x: f"-{x}")
    abs = staticmethod(lambda x: f"tl.abs({x})")
    exp = staticmethod(lambda x: f"libdevice.exp({x})")
    exp2 = staticmethod(lambda x: f"tl.exp2({x})")
    expm1 = staticmethod(lambda x: f"libdevice.expm1({x})")
    log = staticmethod(lambda x: f"tl.log({x})")
    log2 = staticmethod(lambda x: f"tl.log2({x})")
    log1p = staticmethod(lambda x: f"libdevice.log1p({x})")
    sqrt = staticmethod(lambda x: f"tl.sqrt({x})")
    rsqrt = staticmethod(lambda x: f"tl.rsqrt({x})")
    sin = staticmethod(lambda x: f"tl.sin({x})")
    cos = staticmethod(lambda x: f"tl.cos({x})")
    tanh = staticmethod(lambda x: f"libdevice.tanh({x})")
    sigmoid = staticmethod(lambda x: f"tl.sigmoid({x})")
    erf = staticmethod(lambda x: f"tl.erf({x})")
    floor = staticmethod(lambda x: f"tl.floor({x})")
    ceil = staticmethod(lambda x: f"tl.ceil({x})")
    reciprocal = staticmethod(lambda x: f"1.0 / {x}")
    relu = staticmethod(lambda x: f"helpers.maximum(0, {x})")
    logical_not = staticmethod(lambda x: f"{x} == 0")
    isnan = staticmethod(lambda x: f"{x} != {x}")
    sign = staticmethod(lambda x: f"helpers.sign({x})")
    log10 = staticmethod(lambda x: f"libdevice.log10({x})")
    trunc = staticmethod(lambda x: f"helpers.trunc({x})")
    round = staticmethod(lambda x: f"helpers.round_half_even({x})")
    signbit = staticmethod(lambda x: f"helpers.signbit({x})")
    rand = staticmethod(lambda seed, offset: f"tl.rand({seed}, {offset})")
    randn = staticmethod(lambda seed, offset: f"tl.randn({seed}, {offset})")
    logaddexp = "helpers.logaddexp_libdevice"  # logcumsumexp's combine (ch. 18)


    @staticmethod
    def where(c, a, b):
        return f"tl.where({c}, {a}, {b})"

    @staticmethod
    def stored(value, dtype):  # what a store of value into a dtype buffer writes
        return value

    @staticmethod
    def to_dtype(x, dtype):
        if dtype == torch.bool:
            return f"{x} != 0"
        return f"{x}.to({TRITON_DTYPES[dtype]})"

    @staticmethod
    def constant(value, dtype, shape="[1]"):
        if dtype.is_floating_point:
            value = float(value)
            if value == 0 and math.copysign(1.0, value) < 0:
                return negative_zero(dtype, shape)
            literal = repr(value) if math.isfinite(value) else f'float("{value}")'
        elif dtype == torch.bool:
            literal = repr(bool(value))
        else:  # wrapped into the dtype's range, as a C cast (and eager) does
            info = torch.iinfo(dtype)
            literal = repr((int(value) - info.min) % (1 << info.bits) + info.min)
        # a typed one-element tensor, not a bare literal: Triton treats a literal as a
        # compile-time constant, which some operations (and helpers) do not accept
        return f"tl.full({shape}, {literal}, {TRITON_DTYPES[dtype]})"


def negative_zero(dtype: torch.dtype, shape: str) -> str:
    """-0.0 in dtype, built from its bits: the sign bit alone."""
    bits = torch.finfo(dtype).bits
    sign = f"tl.full({shape}, 1, tl.int{bits}) << {bits - 1}"
    return f"({sign}).to({TRITON_DTYPES[dtype]}, bitcast=True)"


class InterpreterOverrides(TritonOverrides):
    """For kernels run by Triton's interpreter: no libdevice, no tl.sigmoid."""

    pow = staticmethod(lambda a, b: f"helpers.pow({a}, {b})")
    exp = staticmethod(lambda x: f"tl.exp({x})")
    expm1 = staticmethod(lambda x: f"helpers.expm1({x})")
    log1p = staticmethod(lambda x: f"helpers.log1p({x})")
    tanh = staticmethod(lambda x: f"helpers.tanh({x})")
    sigmoid = staticmethod(lambda x: f"helpers.sigmoid({x})")
    log10 = staticmethod(lambda x: f"tl.log2({x}) * 0.30102999566398120")  # log10(2)
    logaddexp = "helpers.logaddexp"

    @staticmethod
    def to_dtype(x, dtype):
        if dtype == torch.bfloat16:  # the interpreter's own conversion truncates
            return f"helpers.to_bfloat16({x})"
        return TritonOverrides.to_dtype(x, dtype)

    @staticmethod
    def stored(value, dtype):
        return f"helpers.to_bfloat16({value})" if dtype == torch.bfloat16 else value
