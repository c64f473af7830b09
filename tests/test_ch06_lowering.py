"""Chapter 6: GraphLowering, the pointwise lowerings, fallbacks, the realize policy.

Graphs are traced with make_fx and lowered with GraphLowering, whose own check
compares every lowering's dtype and shape with the fake tensor eager produced.
The IR's values are then computed with the EvalHandler (chapter 3), one element at a
time on tiny tensors, and compared with eager: no Triton involved.
"""

import dataclasses
import itertools
import logging
import warnings

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.config import config
from minductor.extern import EXTERN_OUT
from minductor.ir import (
    ComputedBuffer,
    FallbackKernel,
    InputBuffer,
    MultiOutput,
    MultiOutputLayout,
    Pointwise,
    ReinterpretBuffer,
)
from minductor.lowering import (
    GraphLowering,
    MixedDeviceError,
    _moved_to_device,
    _check_devices,
    broadcast_shapes,
    lowerings,
    pointwise,
)
from minductor.ops import EvalHandler, ops, set_handler

pytestmark = pytest.mark.ch06

aten = torch.ops.aten
inf, nan = float("inf"), float("nan")


@pytest.fixture
def restore_config():
    saved = dataclasses.asdict(config)
    try:
        yield config
    finally:
        for key, value in saved.items():
            setattr(config, key, value)


def lower(fn, *args):
    gm = make_fx(fn)(*args)
    return GraphLowering(gm, list(args)).lower()


def evaluate(graph, inputs):
    """Run a lowered graph: bodies with the EvalHandler, fallbacks with ATen."""
    env = dict(zip(graph.graph_input_names, inputs))
    tuples = {}  # results of multi-output fallbacks

    def sub(a):
        if isinstance(a, (InputBuffer, ComputedBuffer, FallbackKernel, MultiOutput)):
            return env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(sub(x) for x in a)
        return a

    for buf in graph.buffers:
        if isinstance(buf, ComputedBuffer):
            lay = buf.layout
            size = [int(s) for s in lay.size]
            env[buf.name] = out = torch.empty_strided(
                size, [int(s) for s in lay.stride], dtype=lay.dtype
            )
            with set_handler(EvalHandler(env)):
                for idx in itertools.product(*map(range, size)):
                    buf.store_output([sympy.Integer(i) for i in idx])
            assert out is env[buf.name]
        elif isinstance(buf, MultiOutput):
            env[buf.name] = tuples[buf.parent.name][buf.index]
        elif isinstance(buf, ReinterpretBuffer):
            base, lay = env[buf.base.name], buf.layout
            offset = base.storage_offset() + int(lay.offset)
            size, stride = [int(s) for s in lay.size], [int(s) for s in lay.stride]
            env[buf.name] = base.as_strided(size, stride, offset)
        elif isinstance(buf.layout, MultiOutputLayout):
            tuples[buf.name] = buf.op(*sub(buf.args), **sub(buf.kwargs))
        else:
            env[buf.name] = buf.op(*sub(buf.args), **sub(buf.kwargs))
    return [None if b is None else env[b.name] for b in graph.graph_outputs]


def assert_same(got, expected, tol=0.0):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype == torch.bool or not expected.is_floating_point():
        assert torch.equal(got, expected), (got, expected)
    else:
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol, equal_nan=True)


def check(fn, *args, tol=1e-6):
    """Lower fn (which returns a tuple), evaluate its IR, compare with eager."""
    graph = lower(fn, *args)
    for got, expected in zip(evaluate(graph, args), fn(*args), strict=True):
        assert_same(got, expected, tol)
    return graph


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
        if "Tensor" in kinds and set(kinds) <= allowed and not not_pointwise:
            found.append(op)
    return found


# reductions are lowered too but are not elementwise; tests/test_reductions.py has them
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


def test_fallback_view_is_read_through_its_strides(monkeypatch):
    # views are lowered now; take t's lowering away to see a strided fallback result
    monkeypatch.delitem(lowerings, aten.t.default)
    x = torch.randn(3, 4)
    graph = check(lambda x: (x.t() + 1, x.t().exp()), x)
    assert set(graph.fallbacks) == {"aten.t.default"}
    t_buf = next(b for b in graph.buffers if isinstance(b, FallbackKernel))
    assert tuple(int(s) for s in t_buf.layout.stride) == (1, 4)


def test_input_buffers_keep_real_strides_and_offsets():
    x = torch.randn(6, 9)[1:, 2:].t()
    graph = check(lambda x: (x * 2,), x)
    (name,) = graph.graph_input_names
    layout = graph.graph_inputs[name].data.layout
    assert tuple(int(s) for s in layout.stride) == x.stride()
    assert int(layout.offset) == x.storage_offset()


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


def test_bool_to_the_power_true():
    check(lambda x: (x**True,), torch.tensor([True, False]))


def test_bool_add_with_alpha():
    a = torch.tensor([True, False, True])
    check(lambda a, b: (torch.add(a, b, alpha=2),), a, a.flip(0).contiguous())


# --- fallbacks ------------------------------------------------------------------------


@pytest.mark.usefixtures("cumsum_falls_back")
def test_op_without_lowering_falls_back_and_is_logged(caplog):
    x = torch.randn(3, 4)
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        graph = check(lambda x: (torch.cumsum(x * 2, dim=0) + 1,), x)
    assert graph.fallbacks == ["aten.cumsum.default"]
    kinds = [type(b).__name__ for b in graph.buffers]
    assert kinds == ["ComputedBuffer", "FallbackKernel", "ComputedBuffer"]
    assert graph.buffers[1].input_buffers() == [graph.buffers[0]]
    assert any(
        "fallback: aten.cumsum.default (no lowering)" in r.getMessage()
        for r in caplog.records
    )


def test_unsupported_dtype_falls_back_with_its_reason(caplog):
    x = torch.randn(4)
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        graph = check(lambda x: (x.to(torch.complex64) * 2,), x)
    assert graph.fallbacks == ["aten._to_copy.default", "aten.mul.Tensor"]
    messages = [r.getMessage() for r in caplog.records]
    assert "fallback: aten._to_copy.default (dtype torch.complex64)" in messages
    assert "fallback: aten.mul.Tensor (dtype torch.complex64)" in messages


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.clone(memory_format=torch.channels_last),),
        lambda x: (x.to(torch.float16, memory_format=torch.channels_last),),
    ],
    ids=["clone", "to"],
)
def test_a_memory_format_is_a_storage_order_not_a_fallback(fn):
    x = torch.randn(2, 3, 4, 5)
    graph = check(fn, x)
    assert graph.fallbacks == []
    (out,) = graph.graph_outputs  # an output: stored in eager's strides
    assert tuple(int(s) for s in out.layout.stride) == (60, 1, 15, 3)


def test_small_integer_powers_are_products():
    x = torch.randn(4)
    n = torch.tensor([-3, 2, 0, 4])
    graph = check(lambda x, n: (x**-2, n**3, n**0, x**2.5), x, n)
    assert graph.fallbacks == []
    bodies = [buf.data.inner_fn_str() for buf in graph.buffers]
    assert ["ops.pow" in body for body in bodies] == [False, False, False, True]
    assert "ops.reciprocal" in bodies[0] and bodies[1].count("ops.mul") == 2


def test_multi_output_fallback_creates_multi_outputs():
    x = torch.randn(4, 5)
    graph = check(lambda x: tuple(torch.sort(x, 1)), x)
    assert graph.fallbacks == ["aten.sort.default"]
    parent, values, indices = graph.buffers
    assert isinstance(parent, FallbackKernel) and isinstance(
        parent.layout, MultiOutputLayout
    )
    assert isinstance(values, MultiOutput) and isinstance(indices, MultiOutput)
    assert (values.parent, values.index) == (parent, 0)
    assert (indices.parent, indices.index) == (parent, 1)
    assert values.layout.dtype == torch.float32 and indices.layout.dtype == torch.int64
    assert graph.graph_outputs == [values, indices]


def test_multi_output_feeds_a_pointwise_consumer():
    x = torch.randn(4, 5)
    graph = check(lambda x: (torch.sort(x, 1)[0] * 2 + torch.sort(x, 1)[1],), x)
    assert isinstance(graph.buffers[-1], ComputedBuffer)


# --- devices --------------------------------------------------------------------------


def test_check_devices_names_every_input_and_its_device():
    a, b = torch.empty(3), torch.empty(3, device="meta")
    with pytest.raises(MixedDeviceError) as info:
        _check_devices(["arg0_1", "arg1_1"], [a, b, 5])
    message = str(info.value)
    assert "arg0_1 on cpu" in message and "arg1_1 on meta" in message
    assert "Move them to one device" in message


def test_check_devices_accepts_one_device_and_ignores_non_tensors():
    assert _check_devices(
        ["a", "n", "b"], [torch.empty(1), 3, torch.empty(2)]
    ) == torch.device("cpu")
    assert _check_devices(["n"], [3]) is None
    assert _check_devices([], []) is None


def test_graph_lowering_refuses_mixed_devices_up_front():
    gm = make_fx(lambda a, b: (a + 1, b + 1))(torch.empty(3), torch.empty(3))
    with pytest.raises(MixedDeviceError, match="a_1 on cpu, b_1 on meta"):
        GraphLowering(gm, [torch.empty(3), torch.empty(3, device="meta")])


def _moved(fn, *inputs):
    return _moved_to_device(make_fx(fn)(*inputs), inputs)


def test_cpu_inputs_that_eager_moves_to_the_gpu_are_moved():
    # "meta" stands in for a GPU: a device other than the CPU
    x, v = torch.empty(5, 3, device="meta"), torch.empty(2, 3, device="meta")
    idx, scale = torch.tensor([1, 3]), torch.tensor(2.0)
    # a 0-dim CPU tensor read as a number, and CPU index tensors: eager copies them
    assert _moved(lambda x, s: x * s, x, scale) == {"s_1"}
    assert _moved(lambda x, i: x[i], x, idx) == {"i_1"}
    assert _moved(
        lambda x, i, v: torch.index_put(x, (i,), v), x, idx, v
    ) == {"i_1"}
    # through a view that stays on the CPU: eager moves the view
    assert _moved(lambda x, i: x[i[:1]], x, idx) == {"i_1"}
    # a reader that computes on the CPU keeps its input there: still an error
    assert _moved(lambda x, i: (x[i], i + 1), x, idx) == set()
    gm = make_fx(lambda x, i: (x[i], i + 1))(x, idx)
    with pytest.raises(MixedDeviceError, match="i_1 on cpu"):
        GraphLowering(gm, [x, idx])
    # one device, or no GPU at all: nothing moves
    assert _moved(lambda a, b: a + b, torch.ones(2), torch.tensor(1.0)) == set()


# --- the check against eager ----------------------------------------------------------


def test_a_lowering_with_the_wrong_dtype_is_caught():
    saved = lowerings[aten.sin.default]
    lowerings[aten.sin.default] = lambda x: pointwise(
        ops.sin, [x], dtypes=(torch.float32, torch.float64)
    )
    try:
        with pytest.raises(AssertionError, match="eager produces torch.float32"):
            lower(lambda x: (x.sin(),), torch.randn(3))
    finally:
        lowerings[aten.sin.default] = saved


def test_origins_name_the_aten_ops_of_a_body():
    graph = lower(
        lambda x, y: (torch.sin(x * y + 1),), torch.randn(3, 4), torch.randn(4)
    )
    (buf,) = graph.buffers
    assert buf.origins == frozenset({"mul", "add", "sin"})


def test_graph_returning_a_single_tensor():
    x, y = torch.randn(3, 4), torch.randn(4)
    graph = lower(lambda x, y: torch.sin(x * y + 1), x, y)
    (out,) = evaluate(graph, [x, y])
    assert_same(out, torch.sin(x * y + 1), 1e-6)


# --- the realize policy ---------------------------------------------------------------


def _two_users(x):
    y = x.exp()
    return y + 1, y * 2


def test_cheap_value_with_two_users_is_inlined(restore_config):
    graph = check(_two_users, torch.randn(3, 4))
    assert len(graph.buffers) == 2  # only the outputs
    for buf in graph.buffers:
        assert buf.data.count_ops().reads == 1
        assert "exp" in buf.origins


def test_value_over_the_opcount_threshold_is_realized(restore_config):
    config.realize_opcount_threshold = 1
    graph = check(_two_users, torch.randn(3, 4))
    assert len(graph.buffers) == 3
    shared = graph.buffers[0]
    assert shared.origins == frozenset({"exp"})
    for out in graph.buffers[1:]:
        reads = []

        class Reads:
            def load(self, name, index):
                reads.append(name)

            def __getattr__(self, op):
                return lambda *a: None

        with set_handler(Reads()):
            out.store_output([sympy.Integer(0), sympy.Integer(0)])
        assert reads == [shared.name]


def test_value_over_the_reads_threshold_is_realized(restore_config):
    def f(a, b, c):
        y = a * b + c  # three loads
        return y + 1, y * 2

    args = [torch.randn(5) for _ in range(3)]
    assert len(check(f, *args).buffers) == 2
    config.realize_reads_threshold = 2
    assert len(check(f, *args).buffers) == 3


def test_value_with_one_user_is_inlined_whatever_its_size(restore_config):
    config.realize_opcount_threshold = 0
    config.realize_reads_threshold = 0
    graph = check(lambda x: ((x.exp() * 2).sin(),), torch.randn(5))
    assert len(graph.buffers) == 1


def test_inline_opcount_limit_realizes_a_long_chain(restore_config):
    def chain(x):
        for _ in range(6):
            x = x * 0.5 + 0.25
        return (x,)

    x = torch.randn(5)
    assert len(check(chain, x).buffers) == 1
    config.inline_opcount_limit = 5
    graph = check(chain, x)
    assert len(graph.buffers) > 2
    for buf in graph.buffers:
        assert isinstance(buf.data, Pointwise)
        assert buf.data.count_ops().count <= 5 + 3  # bounded by the limit (+ one op)


def test_an_op_with_no_aten_fallback_is_a_clear_error():
    def not_aten(x):
        return x * 2

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(not_aten, (x,))
    graph.output((y,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    example = torch.randn(3)
    next(n for n in gm.graph.nodes if n.op == "call_function").meta["val"] = example
    with pytest.raises(NotImplementedError, match="not_aten.*no lowering"):
        GraphLowering(gm, [example]).lower()


def test_a_body_on_another_device_than_the_graph_is_left_to_aten(caplog):
    """A CPU factory in a graph of another device: no kernel could run it there."""

    def f(x):
        return x + 1, torch.ones(3)

    x = torch.randn(4, device="meta")
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        graph = GraphLowering(make_fx(f)(x), [x]).lower()
    assert graph.fallbacks == ["aten.ones.default"]
    assert "computes on cpu; the graph's kernels on meta" in caplog.text


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


def _layout(size, stride):
    from minductor.ir import FixedLayout

    return FixedLayout(
        torch.device("cpu"),
        torch.float32,
        tuple(sympy.sympify(n) for n in size),
        tuple(sympy.sympify(s) for s in stride),
    )


@pytest.mark.parametrize(
    "size, ours, eager, same",
    [
        ((4, 1027), (1028, 1), (1027, 1), True),  # padded rows: eager's order
        ((2, 3, 1027), (3 * 1028, 1028, 1), (3 * 1027, 1027, 1), True),
        ((4, 1027), (1, 4), (1027, 1), False),  # transposed: another order
        ((1, 1027), (7, 1), (1027, 1), True),  # a size-1 dimension's stride is unused
        ((4, 5), (0, 1), (5, 1), False),  # expanded: elements share memory
        ((3, 4, 5), (20, 1, 4), (20, 5, 1), False),  # channels-last-like vs contiguous
    ],
)
def test_windows_returned_as_outputs_keep_eagers_memory_order(size, ours, eager, same):
    from minductor.lowering import _same_order

    assert _same_order(_layout(size, ours), eager) is same


def test_a_window_with_symbolic_strides_is_not_taken_as_eagers():
    from minductor.lowering import _same_order

    s0 = sympy.Symbol("s0", positive=True, integer=True)
    assert _same_order(_layout((4, 5), (s0, 1)), (5, 1)) is False


def test_a_value_a_matmul_reads_is_stored_and_loaded_by_its_other_readers():
    """p = a * b is read by a matmul (which needs it stored) and by a sum: the sum loads
    the stored p instead of recomputing it from a and b, so a and b can be freed once p
    is written. A value whose readers are all our kernels stays inlined."""
    from minductor.scheduler import SchedulerNode

    a, b, w = torch.randn(33, 65), torch.randn(33, 65), torch.randn(65, 7)

    def f(a, b, w):
        p = a * b
        s = p.sum(1)  # lowered before the matmul that stores p
        return torch.mm(p, w), s

    graph = GraphLowering(make_fx(f)(a, b, w), [a, b, w]).lower()
    (total,) = [b for b in graph.buffers if getattr(b, "is_reduction", bool)()]
    reads = SchedulerNode.create(total).read_names()
    assert len(reads) == 1 and not reads & set(graph.graph_inputs), reads

    def g(a, b):
        p = a * b
        return p.sin(), p.sum(1)

    graph = GraphLowering(make_fx(g)(a, b), [a, b]).lower()
    assert len(graph.buffers) == 2  # p is inlined into both readers
