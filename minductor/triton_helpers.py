# generated from chapters/16_triton_ops.md, chapters/18_reductions.md — edit there

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def maximum(a, b):
    # NaN wins, as in torch.maximum
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def floordiv(a, b):
    # integer // in Triton truncates toward zero; Python and PyTorch floor
    quotient = a // b
    fix = ((a % b) != 0) & ((a < 0) != (b < 0))
    return tl.where(fix, quotient - 1, quotient)


@triton.jit
def remainder(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def sign(x):
    return tl.where(x > 0, 1, tl.where(x < 0, -1, 0)).to(x.dtype)


@triton.jit
def trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def round_half_even(x):
    f = tl.floor(x)
    d = x - f  # the fraction, in [0, 1]
    even = (f - 2.0 * tl.floor(f * 0.5)) == 0
    r = tl.where((d > 0.5) | ((d == 0.5) & ~even), f + 1.0, f)
    return tl.where(r == 0, x * 0.0, r)  # -0.3 rounds to -0.0, as in eager


@triton.jit
def signbit(x):
    # the sign bit itself: set for -0.0 and for a NaN that carries it
    if x.dtype == tl.float64:
        return x.to(tl.int64, bitcast=True) < 0
    return x.to(tl.float32).to(tl.int32, bitcast=True) < 0


@triton.jit
def expm1(x):
    u = tl.exp(x)
    # for small |x|, (u - 1) * x / log(u) cancels the rounding error of u
    careful = tl.where(u == 1.0, x, (u - 1.0) * x / tl.log(u))
    return tl.where(tl.abs(x) < 0.5, careful, u - 1.0)


@triton.jit
def log1p(x):
    u = 1.0 + x
    careful = tl.where(u == 1.0, x, tl.log(u) * x / (u - 1.0))
    return tl.where((u == float("inf")) | (tl.abs(x) >= 0.5), tl.log(u), careful)


@triton.jit
def tanh(x):
    t = expm1(-2.0 * tl.abs(x))
    y = -t / (2.0 + t)
    return tl.where(x < 0, -y, y)


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def to_bfloat16(x):
    # round to nearest, ties to even; NaN stays NaN (its bits could carry into another)
    x32 = x.to(tl.float32)
    bits = x32.to(tl.uint32, bitcast=True)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    rounded = bits.to(tl.float32, bitcast=True)
    return tl.where(x32 != x32, x32, rounded).to(tl.bfloat16)


@triton.jit
def pow(a, b):
    # in float64, so that exp2(b * log2|a|) keeps float32 accuracy for large results
    x = a.to(tl.float64)
    y = b.to(tl.float64)
    magnitude = tl.exp2(y * tl.log2(tl.abs(x)))
    is_int = y == tl.floor(y)
    half = y * 0.5
    odd = is_int & (tl.abs(y) < 9007199254740992.0) & (half != tl.floor(half))
    negative = (x < 0) | ((x == 0) & (1.0 / x < 0))  # -0.0 counts as negative
    result = tl.where(negative & odd, -magnitude, magnitude)
    finite_negative = (x < 0) & (x > -float("inf"))
    result = tl.where(finite_negative & (y != tl.floor(y)), float("nan"), result)
    result = tl.where((tl.abs(x) == 1.0) & (tl.abs(y) == float("inf")), 1.0, result)
    result = tl.where((y == 0) | (x == 1), 1.0, result)
    return result.to(a.dtype)


@triton.jit
def max_with_nan(x, axis: tl.constexpr):
    # tl.max may drop NaNs; eager's max returns NaN if any element is NaN
    has_nan = tl.max((x != x).to(tl.int8), axis) > 0
    return tl.where(has_nan, float("nan"), tl.max(x, axis))


@triton.jit
def min_with_nan(x, axis: tl.constexpr):
    has_nan = tl.max((x != x).to(tl.int8), axis) > 0
    return tl.where(has_nan, float("nan"), tl.min(x, axis))


@triton.jit
def mul(a, b):
    # a combine function for tl.reduce (prod)
    return a * b


@triton.jit
def argmax_takes(value, position, best, best_position):
    # does (value, position) beat the best so far? NaN beats numbers; ties go first
    value_nan, best_nan = value != value, best != best
    better = (value > best) | (value_nan & (best == best))
    tie = (value == best) | (value_nan & best_nan)
    return better | (tie & (position < best_position))


@triton.jit
def argmin_takes(value, position, best, best_position):
    value_nan, best_nan = value != value, best != best
    better = (value < best) | (value_nan & (best == best))
    tie = (value == best) | (value_nan & best_nan)
    return better | (tie & (position < best_position))


@triton.jit
def first_position(x, position, best):
    # the smallest position along axis 1 where x holds best ([XBLOCK, 1])
    hit = (x == best) | ((x != x) & (best != best))
    return tl.min(tl.where(hit, position, 9223372036854775807), 1)[:, None]


@triton.jit
def logaddexp(a, b):
    # chapter 16's maximum, minimum and log1p, inlined: NaN wins, small x is careful
    top = tl.where((a > b) | (a != a), a, b)
    bottom = tl.where((a < b) | (a != a), a, b)
    x = tl.exp(bottom - top)
    u = 1.0 + x
    careful = tl.where(u == 1.0, x, tl.log(u) * x / (u - 1.0))
    tail = tl.where((u == float("inf")) | (tl.abs(x) >= 0.5), tl.log(u), careful)
    same_infinity = (top == bottom) & (tl.abs(top) == float("inf"))
    return tl.where(same_infinity, top, top + tail)


@triton.jit
def logaddexp_libdevice(a, b):
    top = maximum(a, b)
    bottom = minimum(a, b)
    same_infinity = (top == bottom) & (tl.abs(top) == float("inf"))
    tail = libdevice.log1p(libdevice.exp(bottom - top))
    return tl.where(same_infinity, top, top + tail)
