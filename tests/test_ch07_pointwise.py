"""Chapter 7: the pointwise lowerings, broadcasting and type promotion.

Every pointwise lowering of the registry, on every dtype, against eager; mixed dtypes
and 0-d tensors through PyTorch's promotion rules; broadcasting; the values that break
obvious formulas. As in test_ch06_lowering.py, graphs are lowered with GraphLowering
(which checks dtypes and shapes against eager) and their IR is evaluated element by
element with the EvalHandler, except where a test compiles to run the kernels.
"""

import warnings

import pytest
import sympy
import torch
from helpers import assert_same, check, evaluate, lower
from hypothesis import given, settings
from hypothesis import strategies as st

from minductor.extern import EXTERN_OUT
from minductor.lowering import lowerings
from minductor.pointwise import broadcast_shapes

pytestmark = pytest.mark.ch07

aten = torch.ops.aten
inf, nan = float("inf"), float("nan")



# --- every pointwise lowering, every dtype --------------------------------------------

DTYPES = [torch.bool, torch.int32, torch.int64, torch.float16, torch.float32]


def _pointwise_overloads():
    found = []
    for op in lowerings:
        schema = getattr(op, "_schema", None)
        if schema is None or any(a.is_out for a in schema.arguments):
            continue
        if [str(r.type) for r in schema.returns] != ["Tensor"]:
            continue
        positional = [a for a in schema.arguments if not a.kwarg_only]
        kinds = [str(a.type) for a in positional]
        allowed = {"Tensor", "number", "Optional[number]", "Optional[Tensor]"}
        not_pointwise = op in REDUCTIONS or op in EXTERN_OUT
        not_pointwise |= op.namespace == "_c10d_functional"  # a wait (chapter 28)
        if "Tensor" in kinds and set(kinds) <= allowed and not not_pointwise:
            found.append(op)
    return found


# reductions are lowered too but are not elementwise; tests/test_ch18_reductions_values.py has them
REDUCTIONS = {
    aten.sum.default, aten.prod.default, aten.amax.default, aten.amin.default,
    aten.max.default, aten.min.default, aten.any.default, aten.all.default,
}


POINTWISE = _pointwise_overloads()


def test_the_sweep_covers_the_registry():
    names = {op.__name__ for op in POINTWISE}
    for expected in (
        "add.Tensor",
        "mul.Scalar",
        "div.Tensor_mode",
        "where.self",
        "clamp.default",
        "pow.Tensor_Scalar",
        "bitwise_xor.Tensor",
        "sigmoid.default",
        "logical_not.default",
        "remainder.Scalar",
    ):
        assert expected in names
    assert len(POINTWISE) >= 70


def _tensor(dtype, seed, shape=(2, 3)):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    values = torch.randint(-5, 6, shape, generator=g)
    return torch.where(values == 0, 3, values).to(dtype)  # no division by zero


def _calls(op, dtype):
    """Argument lists for op with tensors of `dtype` and a few Python scalars."""
    positional = [a for a in op._schema.arguments if not a.kwarg_only]
    required = [
        a
        for a in positional
        if not a.has_default_value() or str(a.type).startswith("Optional")
    ]
    scalars = (
        [2, 0.5, True] if any("number" in str(a.type) for a in required) else [None]
    )
    if op is aten.pow.Tensor_Scalar:
        scalars = [2, 3, -1, 0, 0.5, 2.5]  # True: see test_bool_to_the_power_true
    for scalar in scalars:
        args = []
        for k, a in enumerate(required):
            args.append(_tensor(dtype, k) if "Tensor" in str(a.type) else scalar)
        for kwargs in EXTRA_KWARGS.get(op.__name__, [{}]):
            if "alpha" in kwargs and dtype == torch.bool:
                continue  # see test_bool_add_with_alpha
            yield args, kwargs


EXTRA_KWARGS = {
    "div.Tensor_mode": [{"rounding_mode": m} for m in (None, "floor", "trunc")],
    "div.Scalar_mode": [{"rounding_mode": m} for m in (None, "floor", "trunc")],
    "add.Tensor": [{}, {"alpha": 2}],
    "sub.Tensor": [{}, {"alpha": 2}],
    "gelu.default": [{}, {"approximate": "tanh"}],
}


def _bind(op, args, kwargs):
    """fn(*tensors): op called with the tensors put back among the scalars."""

    def fn(*tensors):
        it = iter(tensors)
        full = [next(it) if isinstance(a, torch.Tensor) else a for a in args]
        return (op(*full, **kwargs),)

    return fn


@pytest.mark.parametrize("op", POINTWISE, ids=lambda op: op.__name__)
def test_pointwise_lowering_matches_eager_dtype_and_values(op):
    ran = lowered = 0
    for dtype in DTYPES:
        for args, kwargs in _calls(op, dtype):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    expected = op(*args, **kwargs)
            except (RuntimeError, TypeError):
                continue  # eager rejects this dtype: nothing to compare
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            # lower() raises if the dtype or shape disagrees with eager's
            graph = lower(_bind(op, args, kwargs), *tensors)
            (got,) = evaluate(graph, tensors)
            tol = 1e-2 if dtype == torch.float16 else 1e-5
            assert_same(got, expected, tol)
            ran += 1
            lowered += not graph.fallbacks
    assert ran > 0 and lowered > 0  # compared, and not always through a fallback


PROMOTION_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "eq": torch.eq,
    "lt": torch.lt,
    "where": lambda a, b: torch.where(a > 1, a, b),
    "mul_scalar": lambda a, b: a * 2.5 + b,
    "add_int_scalar": lambda a, b: a + 3,
}


@pytest.mark.parametrize("second_dim", [1, 0], ids=["nd_nd", "nd_0d"])
@pytest.mark.parametrize("dtype_a", PROMOTION_DTYPES, ids=str)
def test_type_promotion_matches_eager_for_mixed_dtypes(dtype_a, second_dim):
    for dtype_b in PROMOTION_DTYPES:
        a = _tensor(dtype_a, 1, (3,))
        b = _tensor(dtype_b, 2, (3,) if second_dim else ())
        works = {}
        for name, f in BINARY.items():
            try:
                f(a, b)
                works[name] = f
            except RuntimeError:
                pass

        def fn(a, b):
            return tuple(f(a, b) for f in works.values())

        tol = (
            1e-2
            if torch.float16 in (dtype_a, dtype_b)
            or (torch.bfloat16 in (dtype_a, dtype_b))
            else 1e-6
        )
        check(fn, a, b, tol=tol)


# --- broadcasting ---------------------------------------------------------------------

broadcastable = st.lists(st.integers(1, 4), min_size=0, max_size=4).flatmap(
    lambda full: st.tuples(
        *[
            st.integers(0, len(full)).flatmap(
                lambda drop, full=full: st.lists(
                    st.booleans(), min_size=len(full) - drop, max_size=len(full) - drop
                ).map(
                    lambda ones, drop=drop, full=full: [
                        1 if one else s for one, s in zip(ones, full[drop:])
                    ]
                )
            )
            for _ in range(3)
        ]
    )
)


@settings(max_examples=60, deadline=None)
@given(shapes=broadcastable)
def test_broadcast_shapes_matches_torch(shapes):
    sym = [[sympy.Integer(s) for s in shape] for shape in shapes]
    assert tuple(int(s) for s in broadcast_shapes(*sym)) == torch.broadcast_shapes(
        *shapes
    )


def test_broadcast_shapes_keeps_the_first_of_two_ways_to_write_a_size():
    # traced sizes that are equal (the fake tensors' broadcast checked them), written
    # two ways: the first is kept, as eager's broadcast keeps it
    s0 = sympy.Symbol("s0", positive=True, integer=True)
    cut = 20 - sympy.Max(0, 20 - s0)
    assert broadcast_shapes([sympy.Integer(3), cut], [s0]) == (3, cut)
    assert broadcast_shapes([s0], [sympy.Integer(1), cut]) == (1, s0)


def test_broadcast_shapes_rejects_mismatch():
    with pytest.raises(RuntimeError, match="do not broadcast"):
        broadcast_shapes([sympy.Integer(3)], [sympy.Integer(4)])


@pytest.mark.parametrize(
    "shapes",
    [((3, 1), (4,)), ((1, 5), (2, 1)), ((), (2, 3)), ((2, 1, 3), (4, 1)), ((1,), ())],
    ids=str,
)
def test_broadcasting_values(shapes):
    a, b = (torch.randn(s) for s in shapes)
    graph = check(lambda a, b: (a * b + a, torch.where(a > b, a, b)), a, b)
    assert graph.fallbacks == []


# --- hard values ----------------------------------------------------------------------


HARD = torch.tensor([-inf, -3.0, -1.0, -0.5, -0.0, 0.0, 1e-30, 0.5, 1.0, 7.0, inf, nan])


def test_hard_values_through_activations_and_comparisons():
    graph = check(
        lambda x, y: (
            torch.sign(x),
            torch.relu(x),
            x.clamp(-1, 1),
            torch.isnan(x),
            torch.sigmoid(x),
            torch.tanh(x),
            torch.nn.functional.silu(x),
            x**2,
            x**-1,
            x**3,
            x**0,
            torch.floor(x),
            torch.ceil(x),
            torch.maximum(x, y),
            torch.minimum(x, y),
            x > y,
            x != x,
        ),
        HARD,
        HARD.flip(0).contiguous(),
    )
    assert graph.fallbacks == []


def test_integer_division_rounds_like_eager():
    a = torch.tensor([-7, -6, -1, 0, 1, 6, 7, -(2**31), 2**31 - 1], dtype=torch.int32)
    b = torch.tensor([2, -4, 3, -3, -2, 4, -7, 3, -5], dtype=torch.int32)
    check(
        lambda a, b: (
            a // b,
            torch.remainder(a, b),
            torch.div(a, b, rounding_mode="trunc"),
            a / b,
        ),
        a,
        b,
    )


def test_float_floor_divide_matches_eager_on_inexact_quotients():
    a = torch.tensor([1.0, -7.0])
    b = torch.tensor([0.1, 0.7])
    check(lambda a, b: (torch.floor_divide(a, b),), a, b)


def test_float_remainder_matches_eager_on_inexact_quotients():
    a = torch.tensor([1.0, -1.0, 7.0, 0.3])
    b = torch.tensor([0.1, 0.1, 0.7, 0.1])
    check(lambda a, b: (torch.remainder(a, b),), a, b, tol=1e-6)


def test_pow_one_half_is_eager_sqrt_even_at_minus_infinity():
    # eager's Tensor ** 0.5 is sqrt too (nan at -inf, unlike C pow's +inf)
    graph = check(lambda x: (x**0.5,), torch.tensor([-inf, -0.0, 4.0, inf, nan]))
    assert "sqrt" in graph.buffers[0].data.inner_fn_str()


def test_pow_minus_one_half_is_eager_rsqrt():
    # eager's Tensor ** -0.5 calls rsqrt (the same bits in float32; -0.0 gives -inf),
    # but C's pow for float16 on the CPU (-inf gives 0, -0.0 gives +inf)
    x = torch.tensor([-inf, -1.0, -0.0, 0.0, 1e-30, 0.37695, 4.0, 7.5, inf, nan])
    graph = check(lambda x: (x**-0.5, x.half() ** -0.5), x)
    bodies = [buf.data.inner_fn_str() for buf in graph.buffers]
    assert "ops.rsqrt" in bodies[0] and "ops.pow" not in bodies[0], bodies[0]
    assert "ops.pow" in bodies[1], bodies[1]  # these tensors are on the CPU
    # bfloat16 too (eager's own bfloat16 rsqrt can be an ulp away from the rounded
    # float32 one: 0.377 ** -0.5 is 1.6328 in eager, 1.625 nearest)
    graph = check(lambda x: (x.bfloat16() ** -0.5,), x, tol=1e-2)
    assert "ops.rsqrt" in graph.buffers[0].data.inner_fn_str()


def test_bool_to_the_power_true():
    check(lambda x: (x**True,), torch.tensor([True, False]))


def test_bool_add_with_alpha():
    a = torch.tensor([True, False, True])
    check(lambda a, b: (torch.add(a, b, alpha=2),), a, a.flip(0).contiguous())


def test_small_integer_powers_are_products():
    x = torch.randn(4)
    n = torch.tensor([-3, 2, 0, 4])
    graph = check(lambda x, n: (x**-2, n**3, n**0, x**2.5), x, n)
    assert graph.fallbacks == []
    bodies = [buf.data.inner_fn_str() for buf in graph.buffers]
    assert ["ops.pow" in body for body in bodies] == [False, False, False, True]
    assert "ops.reciprocal" in bodies[0] and bodies[1].count("ops.mul") == 2


ROUNDING_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@pytest.mark.parametrize("dtype", ROUNDING_DTYPES + [torch.int32, torch.int64])
def test_rounding_signs_and_fmod_lower_to_kernels(dtype):
    torch.manual_seed(0)
    if dtype.is_floating_point:
        x = torch.randn(5, 7) * 4
        x[0, :4] = torch.tensor([0.5, 2.5, -0.5, -0.0])
        x[1, :2] = torch.tensor([nan, -nan])
        x, y = x.to(dtype), (torch.randn(7) * 3).to(dtype)
    else:
        x = torch.randint(-20, 20, (5, 7), dtype=dtype)
        y = torch.tensor([1, -2, 3, -4, 5, -6, 7], dtype=dtype)

    def fn(x, y):
        return (
            torch.round(x), torch.trunc(x), torch.signbit(x), torch.copysign(x, y),
            torch.fmod(x, y), torch.log10(x.abs() + 1),
        )  # fmt: skip

    graph = lower(fn, x, y)
    assert graph.fallbacks == []
    torch._dynamo.reset()
    got = torch.compile(fn, backend="minductor")(x, y)
    for g, want in zip(got, fn(x, y), strict=True):
        assert g.dtype == want.dtype
        torch.testing.assert_close(g, want, equal_nan=True)
        if want.dtype.is_floating_point:  # the signs of zeros too
            number = ~want.isnan()
            assert torch.equal(torch.signbit(g[number]), torch.signbit(want[number]))
