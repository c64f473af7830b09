"""Chapter 16: the Triton expression of every op, and the helpers.

Every op of the math table is run as a generated kernel in Triton's interpreter (or on
a GPU) and compared with the table's own PyTorch function; the helpers in
minductor/triton_helpers.py are checked against PyTorch on hard inputs, in float32, to a
few ulp; bfloat16 conversions and negative zero, bit for bit.
"""

import itertools
import math

import numpy
import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICES, one_op_buffer, run_kernel
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import triton_helpers as helpers
from minductor.codegen_triton import (
    TRITON_DTYPES,
    InterpreterOverrides,
    TritonOverrides,
    generate_kernel,
)
from minductor.dependencies import SchedulerNode
from minductor.lowering import GraphLowering
from minductor.ops import MATH_OPS
from minductor.runtime import interpret_mode
from minductor.scheduler import Scheduler

pytestmark = pytest.mark.ch16

cpu = torch.device("cpu")
inf, nan = float("inf"), float("nan")
# kernels run on CPU tensors in the interpreter, or on CUDA tensors on a GPU
INTERPRET = interpret_mode()
DEVICE = "cpu" if INTERPRET else "cuda"
interpreter_only = pytest.mark.skipif(
    not INTERPRET, reason="a helper only the interpreter uses (GPUs use libdevice)"
)




# --- the overrides cover the math table -----------------------------------------------

STRUCTURAL = ["where", "to_dtype", "constant"]


@pytest.mark.parametrize(
    "overrides", [TritonOverrides, InterpreterOverrides], ids=["gpu", "interpreter"]
)
def test_every_math_op_has_a_translation(overrides):
    for name, (arity, _) in MATH_OPS.items():
        method = getattr(overrides, name, None)
        assert callable(method), f"{overrides.__name__} has no {name}"
        text = method(*["tmp0", "tmp1"][:arity])
        compile(text, name, "eval")  # a well-formed expression
        assert "tmp0" in text and (arity == 1 or "tmp1" in text)
    for name in STRUCTURAL:
        assert callable(getattr(overrides, name))


def test_interpreter_overrides_avoid_gpu_only_functions():
    for name, (arity, _) in MATH_OPS.items():
        text = getattr(InterpreterOverrides, name)(*["tmp0", "tmp1"][:arity])
        assert "libdevice" not in text and "tl.sigmoid" not in text, name
    differing = {
        n
        for n in MATH_OPS
        if getattr(InterpreterOverrides, n) is not getattr(TritonOverrides, n)
    }
    assert differing == {"exp", "pow", "expm1", "log1p", "tanh", "sigmoid", "log10"}


def test_constants_and_conversions():
    c = TritonOverrides.constant
    assert c(2, torch.float32) == "tl.full([1], 2.0, tl.float32)"
    assert c(inf, torch.float32) == 'tl.full([1], float("inf"), tl.float32)'
    assert c(-inf, torch.float16) == 'tl.full([1], float("-inf"), tl.float16)'
    assert c(nan, torch.float64) == 'tl.full([1], float("nan"), tl.float64)'
    assert c(True, torch.bool) == "tl.full([1], True, tl.int1)"
    assert c(2**40, torch.int64) == f"tl.full([1], {2**40}, tl.int64)"
    assert c(3.0, torch.int32) == "tl.full([1], 3, tl.int32)"


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32,
                                   torch.int64])  # fmt: skip
def test_integer_constants_wrap_into_their_dtype_as_torchs_cast_does(dtype):
    info = torch.iinfo(dtype)
    edges = [info.min - 1, info.min, -3, -1, 0, 1, info.max, info.max + 1, 300]
    for value in edges:
        if not -(2**63) <= value < 2**63:
            continue  # not an int64 to cast from
        literal = TritonOverrides.constant(value, dtype).split(", ")[1]
        cast = torch.tensor(value, dtype=torch.int64).to(dtype)
        assert int(literal) == int(cast), (value, literal, cast)
    assert TritonOverrides.to_dtype("tmp0", torch.bool) == "tmp0 != 0"
    assert TritonOverrides.to_dtype("tmp0", torch.bfloat16) == "tmp0.to(tl.bfloat16)"
    assert TritonOverrides.where("a", "b", "c") == "tl.where(a, b, c)"
    assert set(TRITON_DTYPES) >= {torch.bool, torch.int64, torch.float16, torch.float32}


# --- every math op, run as a generated kernel -----------------------------------------

FLOATS_A = [
    -2.5,
    -1.0,
    -0.0,
    0.0,
    0.3,
    1.0,
    2.0,
    7.5,
    inf,
    -inf,
    nan,
    1e-30,
    100.0,
    -0.7,
]
FLOATS_B = [0.5, 3.0, -2.0, 1.5, -0.7, 2.0, 0.0, -3.0, 2.0, 3.0, 1.0, 2.0, 0.5, inf]
INTS_A = [-7, -3, -1, 0, 1, 2, 5, 9, -8, 6, 2**31 - 1, -(2**31) + 1]
INTS_B = [2, -2, 3, 5, -3, 1, 4, -4, 3, -6, 7, -7]
INT_ONLY = {
    "floordiv",
    "truncdiv",
    "remainder",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
}
BOOL_ONLY = {"logical_and", "logical_or", "logical_not"}
ALSO_INTS = {
    "add",
    "sub",
    "mul",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "neg",
    "abs",
    "sign",
    "relu",
}


def _cases():
    for name in sorted(MATH_OPS):
        if name in INT_ONLY:
            yield name, torch.int32
        elif name in BOOL_ONLY:
            yield name, torch.bool
        else:
            yield name, torch.float32
            if name in ALSO_INTS:
                yield name, torch.int32


def _operands(dtype):
    if dtype == torch.bool:
        return (
            torch.tensor([True, False, True, False]),
            torch.tensor([True, True, False, False]),
        )
    if dtype == torch.int32:
        return torch.tensor(INTS_A, dtype=dtype), torch.tensor(INTS_B, dtype=dtype)
    return torch.tensor(FLOATS_A), torch.tensor(FLOATS_B)


@pytest.mark.parametrize("name,dtype", list(_cases()), ids=lambda v: str(v))
def test_generated_kernel_follows_the_math_table(name, dtype):
    arity, fn = MATH_OPS[name]
    a, b = _operands(dtype)
    expected = fn(*[a, b][:arity])
    buf = one_op_buffer(name, [a, b][:arity], expected.dtype)
    kernel = generate_kernel(SchedulerNode.create(buf), set(), interpret=INTERPRET)
    out = torch.empty_like(expected)
    run_kernel(kernel, {"a": a, "b": b, "buf0": out})
    if expected.dtype.is_floating_point:
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-7, equal_nan=True)
    else:
        assert out.dtype == expected.dtype and torch.equal(out, expected)


# --- accuracy of the interpreter helpers ----------------------------------------------


@triton.jit
def _unary(in_ptr, out_ptr, n, OP: tl.constexpr, XBLOCK: tl.constexpr):
    index = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = index < n
    x = tl.load(in_ptr + index, mask)
    if OP == "tanh":
        y = helpers.tanh(x)
    elif OP == "sigmoid":
        y = helpers.sigmoid(x)
    elif OP == "expm1":
        y = helpers.expm1(x)
    elif OP == "log1p":
        y = helpers.log1p(x)
    else:
        y = helpers.sign(x)
    tl.store(out_ptr + index, y, mask)


@triton.jit
def _binary(a_ptr, b_ptr, out_ptr, n, OP: tl.constexpr, XBLOCK: tl.constexpr):
    index = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = index < n
    a = tl.load(a_ptr + index, mask)
    b = tl.load(b_ptr + index, mask)
    if OP == "pow":
        y = helpers.pow(a, b)
    elif OP == "floordiv":
        y = helpers.floordiv(a, b)
    elif OP == "remainder":
        y = helpers.remainder(a, b)
    elif OP == "maximum":
        y = helpers.maximum(a, b)
    else:
        y = helpers.minimum(a, b)
    tl.store(out_ptr + index, y, mask)


def run_helper(op, *inputs):
    inputs = [t.to(DEVICE) for t in inputs]
    out = torch.empty_like(inputs[0])
    kernel = _unary if len(inputs) == 1 else _binary
    grid = (triton.cdiv(out.numel(), 1024),)
    with numpy.errstate(all="ignore"):  # masked-off lanes divide by zero, etc.
        kernel[grid](*inputs, out, out.numel(), OP=op, XBLOCK=1024)
    return out.cpu()


def _ulp(t):
    t = t.abs().to(torch.float32)
    return (torch.nextafter(t, torch.tensor(inf)) - t).double()


HARD_UNARY = torch.tensor(
    [
        0.0,
        -0.0,
        1e-45,
        -1e-45,
        1e-38,
        1e-30,
        -1e-30,
        1e-10,
        -1e-10,
        1e-7,
        -1e-7,
        1e-4,
        -1e-4,
        0.1,
        0.25,
        0.49,
        0.5,
        0.51,
        -0.5,
        1.0,
        -1.0,
        2.0,
        -3.0,
        5.0,
        9.5,
        10.0,
        15.0,
        20.0,
        -20.0,
        30.0,
        44.0,
        80.0,
        88.0,
        88.7,
        89.0,
        -87.0,
        -88.0,
        -89.0,
        -100.0,
        -103.0,
        -104.0,
        1e4,
        -1e4,
        1e30,
        -1e30,
        3.4e38,
        -3.4e38,
        inf,
        -inf,
        nan,
    ]
    + torch.linspace(-10, 10, 2001).tolist()
    + torch.logspace(-38, 38, 400).tolist()
    + (-torch.logspace(-38, 38, 400)).tolist()
)

MAX_ERRORS = {}  # op -> (max relative error, max ulp error vs float64), for the report


@interpreter_only
@pytest.mark.parametrize("op", ["tanh", "sigmoid", "expm1", "log1p", "sign"])
def test_unary_helpers_are_accurate_to_a_few_ulp(op):
    fn = getattr(torch, op)
    got = run_helper(op, HARD_UNARY)
    expected = fn(HARD_UNARY)
    exact = fn(HARD_UNARY.double())
    # special values: the same infinities, NaNs and zeros
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    assert torch.equal(got[torch.isinf(expected)], expected[torch.isinf(expected)])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7, equal_nan=True)
    finite = torch.isfinite(expected) & (expected.abs() > 1e-37)  # normal numbers
    ulps = ((got.double() - exact).abs() / _ulp(expected))[finite]
    rel = ((got - expected).abs() / expected.abs())[finite]
    MAX_ERRORS[op] = (rel.max().item(), ulps.max().item())
    assert ulps.max().item() <= 4.0, MAX_ERRORS[op]


@interpreter_only
def test_tiny_arguments_keep_their_value():
    tiny = torch.tensor([1e-30, -1e-30, 1e-38, 1e-20, -0.0, 0.0])
    for op in ("tanh", "expm1", "log1p"):
        torch.testing.assert_close(run_helper(op, tiny), tiny, rtol=1e-6, atol=0)
    torch.testing.assert_close(run_helper("sigmoid", tiny), torch.full((6,), 0.5))


def _pairs(xs, ys):
    pairs = list(itertools.product(xs, ys))
    return (torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs]))


@interpreter_only
def test_pow_special_cases_that_agree_with_torch():
    base, exponent = _pairs(
        [-8.0, -3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, inf, nan],
        [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 0.5, -0.5, 2.5, nan],
    )
    keep = ~((base == -inf) | ((base == -1.0) & exponent.isinf()))
    base, exponent = base[keep], exponent[keep]
    got = run_helper("pow", base, exponent)
    expected = torch.pow(base, exponent)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0, equal_nan=True)
    # the cases the chapter names
    negative_base = run_helper(
        "pow",
        torch.tensor([-2.0, -2.0, -2.0, -8.0]),
        torch.tensor([3.0, 2.0, -1.0, 1 / 3]),
    )
    assert negative_base[:3].tolist() == [-8.0, 4.0, -0.5]
    assert math.isnan(negative_base[3].item())
    zero_base = run_helper(
        "pow", torch.tensor([0.0, 0.0, 0.0]), torch.tensor([-1.0, 0.0, 2.0])
    )
    assert zero_base.tolist() == [inf, 1.0, 0.0]
    one_nan = run_helper("pow", torch.tensor([1.0, nan]), torch.tensor([nan, 0.0]))
    assert one_nan.tolist() == [1.0, 1.0]


@interpreter_only
def test_pow_special_cases_with_signed_zero_and_infinities():
    base = torch.tensor([-0.0, -0.0, -1.0, -1.0, -inf, -inf, -inf])
    exponent = torch.tensor([-1.0, -3.0, inf, -inf, 0.5, -0.5, 2.5])
    got = run_helper("pow", base, exponent)
    torch.testing.assert_close(got, torch.pow(base, exponent), equal_nan=True)


@interpreter_only
def test_pow_is_accurate_to_a_few_ulp_on_large_results():
    base = torch.tensor([10.0, 10.0, 0.1, 7.3, -7.3, 88.0, 1e-3, 1e30, 1e-30])
    exponent = torch.tensor([31.0, -31.0, 31.0, 10.0, 10.0, 10.0, 10.0, 1 / 3, 1 / 3])
    got = run_helper("pow", base, exponent)
    torch.testing.assert_close(got, torch.pow(base, exponent), rtol=1e-6, atol=0)


@interpreter_only
def test_pow_is_close_on_moderate_random_inputs():
    g = torch.Generator().manual_seed(0)
    base = torch.rand(4000, generator=g) * 20 - 10
    exponent = torch.rand(4000, generator=g) * 8 - 4
    exponent = torch.where(
        torch.rand(4000, generator=g) < 0.5, exponent.round(), exponent
    )
    got = run_helper("pow", base, exponent)
    expected = torch.pow(base, exponent)
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64])
@pytest.mark.parametrize("op", ["floordiv", "remainder"])
def test_integer_division_helpers_floor_like_torch(op, dtype):
    info = torch.iinfo(dtype)
    values = [
        v
        for v in list(range(-9, 10)) + [100, -100, info.max, info.min + 1]
        if info.min <= v <= info.max
    ]
    a, b = _pairs(values, [v for v in values if v != 0])
    a, b = a.to(dtype), b.to(dtype)
    expected = (
        torch.div(a, b, rounding_mode="floor")
        if op == "floordiv"
        else torch.remainder(a, b)
    )
    got = run_helper(op, a, b)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_propagate_nan(op):
    values = [-inf, -2.0, -0.0, 0.0, 1.5, inf, nan]
    a, b = _pairs(values, values)
    got = run_helper(op, a, b)
    expected = getattr(torch, op)(a, b)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    ints_a, ints_b = _pairs([-5, 0, 3, 2**31 - 1], [-(2**31), 0, 4])
    ints_a, ints_b = ints_a.to(torch.int32), ints_b.to(torch.int32)
    assert torch.equal(
        run_helper(op, ints_a, ints_b), getattr(torch, op)(ints_a, ints_b)
    )


def test_sign_of_integers_and_special_floats():
    ints = torch.tensor([-7, 0, 3, -(2**31) + 1], dtype=torch.int32)
    assert torch.equal(run_helper("sign", ints), torch.sign(ints))
    floats = torch.tensor([-inf, -0.0, 0.0, 1e-45, nan, inf])
    torch.testing.assert_close(
        run_helper("sign", floats), torch.sign(floats), equal_nan=True
    )


# --- bfloat16 conversions round to nearest, ties to even ------------------------------


def _bf16_cases() -> torch.Tensor:
    x = torch.randn(20000, generator=torch.Generator().manual_seed(0)) * 300
    special = [float("nan"), float("inf"), -float("inf"), 3.4028234e38, -0.0, 0.0]
    ties = [1.00390625, 1.01171875, -1.00390625, 2.0 + 2**-7 + 2**-8]  # exact halves
    return torch.cat([torch.tensor(special + ties), x])


def test_compiled_bfloat16_conversions_are_eagers_bit_for_bit():
    x = _bf16_cases()
    for fn, arg in [
        (lambda t: t.to(torch.bfloat16), x),  # a conversion
        (lambda t: t * 1.0001 + 0.5, x.to(torch.bfloat16)),  # bf16 arithmetic
        (lambda t: t.to(torch.bfloat16), (x[6:] * 1e5).to(torch.int64)),  # from ints
    ]:
        torch._dynamo.reset()
        got = torch.compile(fn, backend="minductor")(arg)
        torch.testing.assert_close(got, fn(arg), atol=0, rtol=0, equal_nan=True)


def test_a_float32_result_stored_as_bfloat16_is_rounded_to_nearest():
    x = _bf16_cases()[10:].reshape(1000, 20).to(torch.bfloat16)
    fn = lambda t: t.sum(-1)  # noqa: E731  accumulates in float32, stores bfloat16
    torch._dynamo.reset()
    got = torch.compile(fn, backend="minductor")(x)
    # eager rounds the same float32 sums (up to their order): truncating instead
    # would make about half of the results one unit lower
    assert (got == fn(x)).float().mean() > 0.95


def test_interpreter_rounds_bfloat16_where_the_gpu_converts():
    x = torch.randn(8)
    graph = GraphLowering(make_fx(lambda x: (x.to(torch.bfloat16) * 2,))(x), [x])
    (node,) = Scheduler(graph.lower()).nodes
    gpu = generate_kernel(node, set(), interpret=False).source
    cpu_source = generate_kernel(node, set(), interpret=True).source
    assert "helpers.to_bfloat16(" not in gpu and ".to(tl.bfloat16)" in gpu
    assert "helpers.to_bfloat16(tmp0)" in cpu_source


def test_rounding_helpers_on_hard_values():
    # halves go to the even neighbour; a fraction just under one half, which x + 0.5
    # would round up, does not; signs of zeros and NaNs survive
    values = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 0.50000006]
    values += [-0.3, -0.0, 0.0, 8388609.0, -8388609.0, 1e30, -1e-30, inf, -inf, nan]
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor(values, dtype=dtype)
        x = torch.cat([x, -torch.tensor([nan], dtype=dtype)])  # a NaN with its sign bit
        for name in ("round", "trunc", "signbit"):
            expected = getattr(torch, name)(x)
            buf = one_op_buffer(name, [x], expected.dtype)
            kernel = generate_kernel(
                SchedulerNode.create(buf), set(), interpret=INTERPRET
            )
            out = torch.empty_like(expected)
            run_kernel(kernel, {"a": x, "buf0": out})
            assert torch.equal(out.isnan(), expected.isnan()), name
            assert torch.equal(torch.signbit(out), torch.signbit(expected)), name
            assert torch.equal(out.nan_to_num(), expected.nan_to_num()), (name, dtype)


# --- negative zero ----------------------------------------------------------------------

NEGATIVE_ZERO_CASES = {
    "x / -0.0": lambda x: x / -0.0,
    "x * -0.0": lambda x: x * -0.0,
    "where(c, x, -0.0)": lambda x: torch.where(x > 0, x, -0.0),
    "full_like(x, -0.0)": lambda x: torch.full_like(x, -0.0),
    # in a reduction kernel's constants ([1, 1]); dividing by a positive keeps a sign
    # (a max of -0.0 and 0.0 may be either, in eager as in a kernel)
    "-0.0 beside a reduction": lambda x: torch.where(x > 0, x, -0.0)
    / (x.abs().sum() + 1),
}


@pytest.mark.parametrize("case", NEGATIVE_ZERO_CASES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64]
)
@pytest.mark.parametrize("device", DEVICES)
def test_a_negative_zero_constant_keeps_its_sign(device, dtype, case):
    # Triton on a GPU turns tl.full(..., -0.0, ...) into +0.0; the interpreter does not
    fn = NEGATIVE_ZERO_CASES[case]
    x = torch.tensor([1.0, -1.0, 0.0, -0.0, 2.5, -3.0, 7.0], device=device, dtype=dtype)
    torch._dynamo.reset()
    got, want = torch.compile(fn, backend="minductor")(x), fn(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)
    number = ~want.isnan()  # a NaN's sign bit is not eager's promise
    assert torch.equal(got.signbit()[number], want.signbit()[number])


@pytest.mark.parametrize(
    "dtype, bits",
    [(torch.float16, 16), (torch.bfloat16, 16), (torch.float32, 32), (torch.float64, 64)],
)
def test_negative_zero_is_printed_from_its_bits(dtype, bits):
    literal = TritonOverrides.constant(-0.0, dtype, "[1, 1]")
    assert literal == (
        f"(tl.full([1, 1], 1, tl.int{bits}) << {bits - 1})"
        f".to({TRITON_DTYPES[dtype]}, bitcast=True)"
    )
    # +0.0, and integers' zero, are plain
    assert TritonOverrides.constant(0.0, dtype) == f"tl.full([1], 0.0, {TRITON_DTYPES[dtype]})"
    assert TritonOverrides.constant(-0, torch.int32) == "tl.full([1], 0, tl.int32)"


@pytest.mark.parametrize("device", DEVICES)
def test_a_uint8_clamp_at_a_negative_bound_is_eagers(device):
    """Eager casts -3 to uint8 (253): clamp(x, -3, 7) is 7 everywhere, clamp(x, min=-3)
    253 everywhere below it."""
    import minductor  # noqa: F401  (registers the backend)

    x = torch.tensor([0, 5, 100, 250, 254], dtype=torch.uint8, device=device)
    for f in (lambda x: x.clamp(-3, 7), lambda x: x.clamp(min=-3) + 1):
        torch._dynamo.reset()
        got = torch.compile(f, backend="minductor")(x)
        assert got.dtype == torch.uint8 and torch.equal(got, f(x)), (got, f(x))
