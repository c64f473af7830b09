# generated from chapters/08_triton.md — edit there

import triton
import triton.language as tl


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
def pow(a, b):
    magnitude = tl.exp2(b * tl.log2(tl.abs(a)))
    is_int = b == tl.floor(b)
    odd = is_int & ((b - 2.0 * tl.floor(b * 0.5)) == 1.0)
    signed = tl.where(
        a < 0,
        tl.where(is_int, tl.where(odd, -magnitude, magnitude), float("nan")),
        magnitude,
    )
    return tl.where((b == 0) | (a == 1), 1.0, signed)
