"""Chapter 3: the `ops` proxy, `set_handler`, and the four handlers.

The math table `MATH_OPS` is the specification of every elementwise op; these tests
check that the evaluating handler follows it, element by element, including on
tensors that are not contiguous (a load receives an offset from the tensor's first
element, counted in its storage).
"""

import itertools

import pytest
import sympy
import torch

from minductor.ops import (
    MATH_OPS,
    CountingHandler,
    EvalHandler,
    NullHandler,
    PrintHandler,
    body_to_str,
    current_handler,
    ops,
    set_handler,
)

pytestmark = pytest.mark.ch03

i0, i1 = sympy.symbols("i0 i1", integer=True, nonnegative=True)


class Tag:
    """A handler that answers every op with its own name (to see which one ran)."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, op):
        if op.startswith("_"):
            raise AttributeError(op)
        return lambda *args: (self.name, op, args)


# --- the handler slot -----------------------------------------------------------------


def test_no_handler_installed_between_tests():
    assert current_handler() is None


def test_ops_without_a_handler_raises_a_clear_error():
    with pytest.raises(RuntimeError, match=r"ops\.sin called with no handler"):
        ops.sin(1)


def test_ops_attribute_can_be_taken_before_a_handler_exists():
    add = ops.add  # stored now, resolved when called
    assert add.__name__ == "add"
    with set_handler(Tag("late")):
        assert add(1, 2) == ("late", "add", (1, 2))


def test_set_handler_yields_and_installs_the_handler():
    h = Tag("a")
    with set_handler(h) as got:
        assert got is h and current_handler() is h
        assert ops.mul(2, 3) == ("a", "mul", (2, 3))
    assert current_handler() is None


def test_set_handler_nesting_restores_each_previous_handler():
    outer, inner, innermost = Tag("outer"), Tag("inner"), Tag("innermost")
    with set_handler(outer):
        with set_handler(inner):
            assert ops.exp(0)[0] == "inner"
            with set_handler(innermost):
                assert ops.exp(0)[0] == "innermost"
            assert ops.exp(0)[0] == "inner"
        assert ops.exp(0)[0] == "outer"
    assert current_handler() is None


def test_set_handler_restores_after_an_exception():
    outer = Tag("outer")
    with set_handler(outer):
        with pytest.raises(ZeroDivisionError):
            with set_handler(Tag("inner")):
                1 / 0
        assert current_handler() is outer
        assert ops.neg(1)[0] == "outer"
    with pytest.raises(KeyError):
        with set_handler(Tag("lonely")):
            raise KeyError("x")
    assert current_handler() is None


def test_ops_repr_names_the_current_handler():
    assert "None" in repr(ops)
    with set_handler(NullHandler()):
        assert "NullHandler" in repr(ops)


# --- EvalHandler against the table ----------------------------------------------------

FLOAT_VALUES = [-2.5, -1.0, -0.0, 0.0, 0.3, 1.0, 2.0, 7.5]
FLOAT_OTHER = [0.5, 3.0, -2.0, 1.5, -0.7, 2.0, 0.0, -3.0]
INT_VALUES = [-7, -3, -1, 0, 1, 2, 5, 9]
INT_OTHER = [2, -2, 3, 5, -3, 1, 4, -4]
INT_ONLY = {
    "floordiv",
    "truncdiv",
    "remainder",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
}
BOOL_OPS = {"logical_and", "logical_or", "logical_not"}


def _inputs_for(name):
    if name in BOOL_OPS:
        a = torch.tensor([True, False, True, False, True, True, False, False])
        b = torch.tensor([True, True, False, False, True, False, True, False])
    elif name in INT_ONLY:
        a, b = torch.tensor(INT_VALUES), torch.tensor(INT_OTHER)
    else:
        a, b = torch.tensor(FLOAT_VALUES), torch.tensor(FLOAT_OTHER)
    return a, b


def _assert_same(got, expected):
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(MATH_OPS))
def test_eval_handler_follows_the_math_table(name):
    arity, fn = MATH_OPS[name]
    a, b = _inputs_for(name)
    operands = [a, b][:arity]
    with set_handler(EvalHandler({"a": a, "b": b})):
        for k in range(len(a)):
            loaded = [ops.load(n, sympy.Integer(k)) for n in ("a", "b")[:arity]]
            got = getattr(ops, name)(*loaded)
            _assert_same(got, fn(*[t[k] for t in operands]))


def test_math_table_arities_match_the_functions():
    x = torch.tensor([1.5, 2.0])
    ints = torch.tensor([3, 4])
    for name, (arity, fn) in MATH_OPS.items():
        assert arity in (1, 2), name
        args = [ints if name in INT_ONLY else x] * arity
        if name in BOOL_OPS:
            args = [x > 1.7] * arity
        fn(*args)  # raises if the arity were wrong
        with pytest.raises(TypeError):
            fn(*args, *args, *args)


def test_eval_handler_rejects_names_outside_the_table():
    with set_handler(EvalHandler({})):
        with pytest.raises(AttributeError):
            ops.atan2(torch.tensor(1.0), torch.tensor(1.0))


def test_eval_handler_structural_ops():
    h = EvalHandler({})
    c = h.constant(3, torch.int16)
    assert c.dtype == torch.int16 and c.item() == 3 and c.dim() == 0
    e = h.index_expr(sympy.Integer(4) * 3 + 1, torch.int64)
    assert e.dtype == torch.int64 and e.item() == 13
    assert h.to_dtype(torch.tensor(2.7), torch.int32).item() == 2
    w = h.where(torch.tensor(False), torch.tensor(1.0), torch.tensor(2.0))
    assert w.item() == 2.0


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(60.0).reshape(5, 12)[1:4, 2:9],  # offset rows and columns
        lambda: torch.arange(60.0).reshape(12, 5).t(),  # transposed
        lambda: torch.arange(60.0).reshape(6, 10)[::2, 1::3],  # stepped, offset
        lambda: torch.arange(60.0)[7:].reshape(53, 1).expand(53, 4),  # stride 0
    ],
    ids=["offset_slice", "transposed", "stepped", "expanded"],
)
def test_eval_handler_loads_non_contiguous_views_by_storage_offset(make):
    view = make()
    assert not view.is_contiguous()
    with set_handler(EvalHandler({"v": view})):
        for i, j in itertools.product(*map(range, view.shape)):
            offset = i * view.stride(0) + j * view.stride(1)  # from the first element
            assert ops.load("v", sympy.Integer(offset)).item() == view[i, j].item()


def test_eval_handler_stores_into_a_non_contiguous_view():
    base = torch.zeros(6, 8)
    view = base[1:, 2:].t()  # (6, 5), strides (1, 8), storage offset 10
    with set_handler(EvalHandler({"out": view})):
        for i, j in itertools.product(range(6), range(5)):
            index = i * view.stride(0) + j * view.stride(1)
            ops.store("out", sympy.Integer(index), torch.tensor(float(10 * i + j)))
    expected = torch.tensor([[10.0 * i + j for j in range(5)] for i in range(6)])
    torch.testing.assert_close(view, expected)
    assert base[0].abs().sum() == 0 and base[:, :2].abs().sum() == 0  # untouched


def test_eval_handler_runs_the_chapter_body():
    def inner_fn(index):
        a, b = index
        x = ops.load("arg0_1", 5 * a + b)
        y = ops.load("arg1_1", b)
        return ops.add(x, ops.mul(y, ops.constant(2.0, torch.float32)))

    x, y = torch.randn(3, 5), torch.randn(5)
    with set_handler(EvalHandler({"arg0_1": x, "arg1_1": y})):
        for a, b in itertools.product(range(3), range(5)):
            value = inner_fn([sympy.Integer(a), sympy.Integer(b)])
            assert value.item() == pytest.approx((x + y * 2.0)[a, b].item(), rel=1e-6)


# --- PrintHandler and body_to_str -----------------------------------------------------


def test_body_to_str_lists_one_line_per_op_and_a_return():
    def body(index):
        a, b = index
        x = ops.load("arg0_1", 65 * a + b)
        y = ops.load("arg1_1", b)
        return ops.add(x, ops.mul(y, ops.constant(2.0, torch.float32)))

    assert body_to_str(body, [i0, i1]).splitlines() == [
        "tmp0 = ops.load(arg0_1, 65*i0 + i1)",
        "tmp1 = ops.load(arg1_1, i1)",
        "tmp2 = ops.constant(2.0, torch.float32)",
        "tmp3 = ops.mul(tmp1, tmp2)",
        "tmp4 = ops.add(tmp0, tmp3)",
        "return tmp4",
    ]


def test_body_to_str_of_a_store_has_no_return():
    def store_body(index):
        ops.store("buf0", index[0], ops.sin(ops.load("x", index[0])))

    assert body_to_str(store_body, [i0]).splitlines() == [
        "tmp0 = ops.load(x, i0)",
        "tmp1 = ops.sin(tmp0)",
        "ops.store(buf0, i0, tmp1)",
    ]


def test_print_handler_numbers_temporaries_in_order():
    h = PrintHandler()
    with set_handler(h):
        names = [ops.exp(k) for k in range(3)]
    assert names == ["tmp0", "tmp1", "tmp2"]
    assert h.lines[2] == "tmp2 = ops.exp(2)"


def test_print_handler_and_body_to_str_leave_no_handler_behind():
    body_to_str(lambda index: ops.neg(ops.load("x", index[0])), [i0])
    assert current_handler() is None


# --- NullHandler and CountingHandler --------------------------------------------------


def test_null_handler_accepts_everything_and_returns_none():
    h = NullHandler()
    with set_handler(h):
        assert ops.load("x", i0) is None
        assert ops.store("y", i0, None) is None
        assert ops.some_op_nobody_declared(1, 2, 3) is None
    assert h.anything(key="word") is None


def test_null_handler_does_not_pretend_to_have_private_attributes():
    # copy, pickle and hasattr probe dunder/underscore names; they must not be "ops"
    with pytest.raises(AttributeError):
        NullHandler()._private
    assert not hasattr(NullHandler(), "__deepcopy_hook__")


def test_counting_handler_counts_ops_and_reads():
    def body(index):
        a = ops.load("x", index[0])
        b = ops.load("y", index[0])
        c = ops.load("x", index[0])  # a second read of the same element still counts
        s = ops.add(ops.mul(a, b), c)
        ops.store("out", index[0], ops.exp(s))

    counter = CountingHandler()
    with set_handler(counter):
        body([i0])
    assert counter.reads == 3
    assert counter.count == 3 + 3 + 1  # loads + (mul, add, exp) + store


def test_counting_handlers_are_independent():
    first, second = CountingHandler(), CountingHandler()
    with set_handler(first):
        ops.sin(ops.load("x", 0))
    assert (first.count, first.reads) == (2, 1)
    assert (second.count, second.reads) == (0, 0)
