"""Chapter 4, deeper: exact division rules, bounds, range-aware simplification, the
allocator's statically-known checks and guards, symbolic loop merging, index dtype,
and printed indices run inside a Triton kernel.

Every simplification is checked against plain Python evaluation of the original
expression over the points its ranges allow.
"""

import importlib.util
import itertools

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minductor.sizevars import (
    INT32_MAX,
    UNBACKED_FALLBACK,
    FloorDiv,
    ModularIndexing,
    NoHint,
    SizeVarAllocator,
    bound_sympy,
    contiguous_strides,
    flat_index,
    index_dtype,
    index_vars,
    join_dimensions,
    pexpr,
    simplify_loops,
    texpr,
)

pytestmark = pytest.mark.ch04

I0, I1, I2 = VARS = index_vars(3)
X = sympy.Symbol("x", integer=True, nonnegative=True)


def _value(expr, point):
    out = sympy.sympify(expr).xreplace({k: sympy.Integer(v) for k, v in point.items()})
    out = out.doit()  # xreplace may leave Min(1, 2) unevaluated
    assert out.is_Integer, out
    return int(out)


def _points(var_ranges):
    names = list(var_ranges)
    for values in itertools.product(*(range(int(n)) for n in var_ranges.values())):
        yield dict(zip(names, values))


def _compiled(expr, names):
    """Python evaluation of expr through its printed form (fast, for many points)."""
    return eval(f"lambda {', '.join(names)}: {pexpr(expr)}", {"max": max, "min": min})


# --- exact rules in FloorDiv / ModularIndexing ----------------------------------------


def test_exact_rules_hold_for_every_value():
    i, j = I0, I1
    assert FloorDiv(8 * i + j, 8) == i + FloorDiv(j, 8)
    assert FloorDiv(FloorDiv(j, 4), 8) == FloorDiv(j, 32)
    assert FloorDiv(4 * i, 8) == FloorDiv(i, 2)
    assert ModularIndexing(32 * i + j, 1, 32) == ModularIndexing(j, 1, 32)
    assert ModularIndexing(8 * i, 8, 4) == ModularIndexing(i, 1, 4)
    assert ModularIndexing(FloorDiv(j, 4), 2, 8) == ModularIndexing(j, 8, 8)
    assert FloorDiv(ModularIndexing(j, 1, 32), 8) == ModularIndexing(j, 8, 4)
    # a remainder that may be negative blocks the split: the base stays non-negative
    assert isinstance(FloorDiv(8 * i - j, 8), FloorDiv)
    assert FloorDiv(j, 8).is_nonnegative and ModularIndexing(i - j, 1, 3).is_nonnegative
    assert FloorDiv(i - j, 8).is_nonnegative is None


@settings(max_examples=150, deadline=None)
@given(
    coeffs=st.lists(st.integers(0, 40), min_size=3, max_size=3),
    const=st.integers(0, 20),
    d=st.integers(1, 12),
    m=st.integers(1, 12),
    nested=st.integers(1, 4),
    point=st.lists(st.integers(0, 30), min_size=3, max_size=3),
)
def test_division_rules_agree_with_python(coeffs, const, d, m, nested, point):
    base = const + sum(c * v for c, v in zip(coeffs, VARS))
    raw = const + sum(c * p for c, p in zip(coeffs, point))
    at = dict(zip(VARS, point))
    assert _value(FloorDiv(base, d), at) == raw // d
    assert _value(ModularIndexing(base, d, m), at) == (raw // d) % m
    assert _value(FloorDiv(FloorDiv(base, nested), d), at) == (raw // nested) // d
    assert _value(ModularIndexing(FloorDiv(base, nested), d, m), at) == (
        (raw // nested) // d % m
    )


# --- bounds ---------------------------------------------------------------------------

bounded_leaves = st.one_of(st.sampled_from(VARS), st.integers(-5, 9).map(sympy.Integer))


def _extend_bounded(children):
    pair = st.tuples(children, children)
    positive = st.integers(1, 7)
    return st.one_of(
        pair.map(lambda t: t[0] + t[1]),
        pair.map(lambda t: t[0] - t[1]),
        pair.map(lambda t: t[0] * t[1]),
        st.tuples(children, positive).map(lambda t: FloorDiv(t[0], t[1])),
        st.tuples(children, positive, positive).map(
            lambda t: ModularIndexing(t[0], t[1], t[2])
        ),
        pair.map(lambda t: sympy.Max(t[0], t[1])),
        pair.map(lambda t: sympy.Min(t[0], t[1])),
    )


bounded_exprs = st.recursive(bounded_leaves, _extend_bounded, max_leaves=6)
small_sizes = st.lists(st.integers(1, 5), min_size=3, max_size=3)


@settings(max_examples=150, deadline=None)
@given(expr=bounded_exprs, sizes=small_sizes)
def test_bound_sympy_contains_every_value(expr, sizes):
    ranges = {v: (sympy.Integer(0), sympy.Integer(n - 1)) for v, n in zip(VARS, sizes)}
    lo, hi = bound_sympy(expr, ranges)
    assert lo.is_number and hi.is_number, (lo, hi)
    for point in _points(dict(zip(VARS, sizes))):
        assert lo <= _value(expr, point) <= hi


def test_bound_sympy_keeps_symbols_without_ranges():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    zero = sympy.Integer(0)
    assert bound_sympy(s0 - I0, {I0: (zero, s0 - 1)}) == (1, s0)
    assert bound_sympy(65 * I0 + I1, {I0: (zero, 32), I1: (zero, 64)}) == (0, 2144)
    assert bound_sympy((I0 - I1) ** 2, {I0: (zero, 3), I1: (zero, 3)}) == (
        -sympy.oo,
        sympy.oo,
    )


# --- simplify_with_ranges -------------------------------------------------------------


def test_range_rules():
    sv = SizeVarAllocator()
    i, j = I0, I1
    r = {i: 4, j: 8}
    assert sv.simplify_with_ranges(FloorDiv(8 * i + j, 8), r) == i
    assert sv.simplify_with_ranges(ModularIndexing(8 * i + j, 1, 8), r) == j
    assert sv.simplify_with_ranges(ModularIndexing(i, 1, 8), r) == i
    assert sv.simplify_with_ranges(FloorDiv(j, 8), r) == 0
    assert sv.simplify_with_ranges(ModularIndexing(j, 2, 4), r) == FloorDiv(j, 2)
    # 8*i + j < 32 = 4*8: the modulus goes, the division stays
    assert sv.simplify_with_ranges(ModularIndexing(8 * i + j, 4, 8), r) == (
        2 * i + FloorDiv(j, 4)
    )
    # the small part j < 8 never reaches the quotient by 8
    assert sv.simplify_with_ranges(ModularIndexing(8 * i + j, 8, 2), r) == (
        ModularIndexing(i, 1, 2)
    )
    # a size-1 variable is 0
    assert sv.simplify_with_ranges(5 * i + j + FloorDiv(i, 2), {i: 1, j: 8}) == j


def test_range_rules_do_not_fire_without_the_range():
    sv = SizeVarAllocator()
    i, j = I0, I1
    assert sv.simplify_with_ranges(FloorDiv(8 * i + j, 8), {i: 4, j: 9}) == (
        i + FloorDiv(j, 8)
    )
    assert sv.simplify_with_ranges(ModularIndexing(i, 1, 8), {i: 9}) == (
        ModularIndexing(i, 1, 8)
    )
    # a variable with no range may be any non-negative integer
    assert sv.simplify_with_ranges(FloorDiv(j, 8), {i: 4}) == FloorDiv(j, 8)


def test_join_dimensions():
    x = X
    split = ModularIndexing(x, 1, 32) + 32 * ModularIndexing(x, 32, 4)
    assert join_dimensions(split) == ModularIndexing(x, 1, 128)
    assert join_dimensions(3 * split + 7) == 3 * ModularIndexing(x, 1, 128) + 7
    whole = ModularIndexing(x, 4, 8) + 8 * FloorDiv(x, 32)
    assert join_dimensions(whole) == FloorDiv(x, 4)
    wrong_scale = ModularIndexing(x, 1, 32) + 16 * ModularIndexing(x, 32, 4)
    assert join_dimensions(wrong_scale) == wrong_scale
    sv = SizeVarAllocator()
    assert sv.simplify_with_ranges(split, {x: 128}) == x


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_digits_of_a_flat_index_simplify_to_the_variables(sizes, data):
    """Read a contiguous flat index back as digits: each digit is a variable."""
    variables = VARS[: len(sizes)]
    strides = contiguous_strides(sizes)
    flat = flat_index(variables, strides)
    sv = SizeVarAllocator()
    var_ranges = dict(zip(variables, sizes))
    for k, (v, n) in enumerate(zip(variables, sizes)):
        digit = (
            ModularIndexing(flat, strides[k], n) if k else FloorDiv(flat, strides[0])
        )
        assert sv.simplify_with_ranges(digit, var_ranges) == (v if n > 1 else 0)
    # and a prefix of the digits is a flat index of the leading dims
    k = data.draw(st.integers(0, len(sizes) - 1))
    lead = sv.simplify_with_ranges(FloorDiv(flat, strides[k]), var_ranges)
    want = flat_index(variables[: k + 1], contiguous_strides(sizes[: k + 1]))
    assert lead == sympy.expand(
        want.xreplace({v: 0 for v, n in var_ranges.items() if n == 1})
    )


def _extend_index(children):
    pair = st.tuples(children, children)
    divisor = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16])
    return st.one_of(
        pair.map(lambda t: t[0] + t[1]),
        st.tuples(children, st.sampled_from([1, 2, 3, 4, 8, 16])).map(
            lambda t: t[1] * t[0]
        ),
        st.tuples(children, divisor).map(lambda t: FloorDiv(t[0], t[1])),
        st.tuples(children, divisor, divisor).map(
            lambda t: ModularIndexing(t[0], t[1], t[2])
        ),
    )


index_exprs = st.recursive(
    st.one_of(st.sampled_from(VARS), st.integers(0, 9).map(sympy.Integer)),
    _extend_index,
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(expr=index_exprs, sizes=st.lists(st.integers(1, 10), min_size=3, max_size=3))
def test_simplify_with_ranges_preserves_values(expr, sizes):
    var_ranges = dict(zip(VARS, sizes))
    simple = SizeVarAllocator().simplify_with_ranges(expr, var_ranges)
    names = [str(v) for v in VARS]
    before, after = _compiled(expr, names), _compiled(simple, names)
    for point in _points(var_ranges):
        args = [point[v] for v in VARS]
        assert before(*args) == after(*args), (expr, simple, point)


@settings(max_examples=150, deadline=None)
@given(
    d=st.integers(1, 8),
    m=st.integers(1, 8),
    k=st.integers(1, 3),
    const=st.integers(0, 9),
    sizes=st.lists(st.integers(1, 12), min_size=2, max_size=2),
)
def test_small_terms_are_dropped_only_when_small(d, m, k, const, sizes):
    """(k*d*i0 + i1 + c) // d and its digits, on both sides of i1 + c == d."""
    base = k * d * I0 + I1 + const
    var_ranges = dict(zip(VARS, sizes))
    sv = SizeVarAllocator()
    for expr in (
        FloorDiv(base, d),
        ModularIndexing(base, d, m),
        ModularIndexing(base, 1, m),
    ):
        simple = sv.simplify_with_ranges(expr, var_ranges)
        for point in _points(var_ranges):
            assert _value(simple, point) == _value(expr, point), (expr, simple, point)


# --- symbolic sizes -------------------------------------------------------------------


def test_symbols_hints_and_size_hint():
    sv = SizeVarAllocator()
    s0, s1 = sv.create_symbol(hint=5), sv.create_symbol(hint=7, lo=4, hi=64)
    assert (str(s0), str(s1)) == ("s0", "s1") and s0.is_positive and s0.is_integer
    assert sv.var_to_hint == {s0: 5, s1: 7}
    assert sv.var_to_range[s1] == (4, 64)
    assert sv.size_hint(s0 * s1 + FloorDiv(s1, 2)) == 38
    assert sv.size_hints([s0, 2 * s1, 3]) == (5, 14, 3)
    stranger = sympy.Symbol("u0", integer=True, positive=True)
    with pytest.raises(NotImplementedError, match="symbolic size .*no hint for u0"):
        sv.size_hint(s0 + stranger)
    with pytest.raises(AssertionError):
        sv.create_symbol(hint=1)  # sizes 0 and 1 are not symbols


def test_constructor_takes_tables():
    s = sympy.Symbol("s9", integer=True, positive=True)
    sv = SizeVarAllocator(var_to_hint={s: 12}, var_to_range={s: (8, 16)})
    assert sv.size_hint(2 * s) == 24
    assert sv.statically_known_leq(s, 16) and not sv.statically_known_leq(s, 15)
    assert sv.statically_known_lt(7, s) and sv.guards == []


def test_statically_known_checks():
    sv = SizeVarAllocator()
    s0, s1 = sv.create_symbol(hint=5), sv.create_symbol(hint=5)
    assert sv.statically_known_equals(2 * (s0 + 1), 2 * s0 + 2)
    assert not sv.statically_known_equals(s0, s1)  # equal hints prove nothing
    assert sv.statically_known_leq(s0, s0 + 1) and sv.statically_known_lt(s0, s0 + 1)
    assert not sv.statically_known_lt(s0, s0)
    assert sv.statically_known_lt(1, s0)  # symbols start at 2
    assert sv.statically_known_leq(2, s0 * s1 - s1)  # s1*(s0 - 1) >= 2
    assert not sv.statically_known_leq(s0, 8) and not sv.statically_known_leq(8, s0)
    assert sv.statically_known_leq(1, FloorDiv(s0, 2))  # s0 >= 2
    assert sv.statically_known_leq(FloorDiv(s0, 2) + 1, FloorDiv(s0, 2) + s1)
    assert sv.statically_known_multiple_of(6 * s0 + 2 * s1, 2)
    assert sv.statically_known_multiple_of(s0 * s1, s0)
    assert not sv.statically_known_multiple_of(s0, 2)
    assert not sv.statically_known_multiple_of(4 * s0, 8)
    assert sv.statically_known_multiple_of(24, 8)
    assert not sv.statically_known_multiple_of(25, 8)
    assert sv.statically_known_true(sympy.Ne(s0, s0 + 3))
    assert sv.statically_known_true(sympy.Gt(s0 * s1, s1))
    assert not sv.statically_known_true(sympy.Eq(s0, 5))
    assert sv.guards == []  # asking never guards


affine_in_sizes = st.tuples(
    st.lists(st.integers(-3, 3), min_size=3, max_size=3), st.integers(-10, 10)
)


@settings(max_examples=150, deadline=None)
@given(
    form=affine_in_sizes,
    lo=st.lists(st.integers(2, 6), min_size=2, max_size=2),
    width=st.lists(st.integers(0, 4), min_size=2, max_size=2),
    data=st.data(),
)
def test_statically_known_leq_never_guesses(form, lo, width, data):
    """Whatever it proves holds at every size in the ranges (sampled exhaustively)."""
    (c0, c1, c01), const = form
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    s1 = sympy.Symbol("s1", integer=True, positive=True)
    ranges = {s0: (lo[0], lo[0] + width[0]), s1: (lo[1], lo[1] + width[1])}
    sv = SizeVarAllocator(var_to_range=ranges)
    expr = c0 * s0 + c1 * s1 + c01 * s0 * s1 + const
    values = [
        _value(expr, {s0: a, s1: b})
        for a in range(ranges[s0][0], ranges[s0][1] + 1)
        for b in range(ranges[s1][0], ranges[s1][1] + 1)
    ]
    if sv.statically_known_leq(0, expr):
        assert min(values) >= 0
    if sv.statically_known_lt(expr, 0):
        assert max(values) < 0
    if sv.statically_known_equals(expr, const):
        assert set(values) == {const}


def test_guards_record_what_the_hints_decided():
    sv = SizeVarAllocator()
    s0 = sv.create_symbol(hint=5)
    assert sv.guard_equals(s0, 5) is True
    assert sv.guard_leq(s0, 4) is False
    assert sv.guard_equals(s0 + 1, 7) is False
    assert sv.guards == [sympy.Eq(s0, 5), sympy.Gt(s0, 4), sympy.Ne(s0 + 1, 7)]
    assert sv.guard_equals(2 * s0, 7) is False  # sympy knows 2*s0 is even: no guard
    # statically known facts need no guard
    assert sv.guard_leq(s0, 2 * s0) and sv.guard_equals(3, 3)
    assert not sv.guard_equals(3, 4)
    assert len(sv.guards) == 3
    # every recorded guard holds at the hints
    hints = {s: sympy.Integer(h) for s, h in sv.var_to_hint.items()}
    assert all(g.xreplace(hints) == sympy.true for g in sv.guards)


def test_simplify_with_ranges_over_symbolic_sizes():
    sv = SizeVarAllocator()
    s0, s1 = sv.create_symbol(hint=3), sv.create_symbol(hint=7)
    i, j = I0, I1
    flat = s1 * i + j
    r = {i: s0, j: s1}
    assert sv.simplify_with_ranges(FloorDiv(flat, s1), r) == i
    assert sv.simplify_with_ranges(ModularIndexing(flat, 1, s1), r) == j
    assert sv.simplify_with_ranges(ModularIndexing(flat, 1, s0 * s1), r) == flat
    assert sv.simplify_with_ranges(FloorDiv(j, s1), r) == 0
    too_wide = {i: s0, j: s1 + 1}
    assert sv.simplify_with_ranges(ModularIndexing(flat, 1, s1), too_wide) == (
        ModularIndexing(j, 1, s1)
    )
    # a symbol pinned by its range is substituted
    pinned = SizeVarAllocator(var_to_range={s0: (4, 4)})
    assert pinned.simplify_with_ranges(s0 * i + FloorDiv(j, s0), {i: 2, j: 4}) == 4 * i


@settings(max_examples=40, deadline=None)
@given(a=st.integers(2, 5), b=st.integers(2, 5), extra=st.integers(0, 3))
def test_symbolic_simplification_agrees_at_every_size(a, b, extra):
    sv = SizeVarAllocator()
    s0, s1 = sv.create_symbol(hint=a), sv.create_symbol(hint=b)
    i, j = I0, I1
    flat = s1 * i + j + extra
    exprs = [
        FloorDiv(flat, s1),
        ModularIndexing(flat, 1, s1),
        ModularIndexing(flat, s1, s0),
        FloorDiv(s1 * i + j, s1) * s1 + ModularIndexing(s1 * i + j, 1, s1),
    ]
    for expr in exprs:
        simple = sv.simplify_with_ranges(expr, {i: s0, j: s1})
        for vi, vj in itertools.product(range(a), range(b)):
            at = {s0: a, s1: b, i: vi, j: vj}
            assert _value(simple, at) == _value(expr, at), (expr, simple)


def test_simplify_loops_merges_symbolic_sizes_only_when_proven():
    sv = SizeVarAllocator()
    s0, s1 = sv.create_symbol(hint=3), sv.create_symbol(hint=7)
    i, j = I0, I1
    loop = simplify_loops([s0, s1], [i, j], [s1 * i + j], sizevars=sv)
    assert loop.sizes == (s0 * s1,)
    (x0,) = loop.variables
    assert loop.rewrite(s1 * i + j + 2, [i, j]) == x0 + 2
    # a stride that only equals s1 at the hint must not merge
    s2 = sv.create_symbol(hint=7)
    kept = simplify_loops([s0, s1], [i, j], [s2 * i + j], sizevars=sv)
    assert kept.sizes == (s0, s1)
    # integer sizes behave as before without an allocator
    assert simplify_loops([4, 6], [i, j], [6 * i + j]).sizes == (24,)


# --- index dtype ----------------------------------------------------------------------


def test_index_dtype_at_the_int32_boundary():
    assert INT32_MAX == 2**31 - 1 == torch.iinfo(torch.int32).max
    assert index_dtype([2**31 - 1]) == "tl.int32"
    assert index_dtype([2**31]) == "tl.int64"
    assert index_dtype([10, 2**31 - 1, sympy.Integer(5)]) == "tl.int32"
    assert index_dtype([10, sympy.Integer(2**31)]) == "tl.int64"
    assert index_dtype([]) == "tl.int32"
    # a kernel over numel elements in blocks of XBLOCK reaches numel + XBLOCK - 2
    xblock = 1024
    numel = 2**31 + 1 - xblock  # the last lane of the last block is exactly 2**31 - 1
    assert index_dtype([numel + xblock - 2]) == "tl.int32"
    assert index_dtype([numel + 1 + xblock - 2]) == "tl.int64"


def test_index_dtype_with_symbolic_sizes_guards_on_the_hint():
    sv = SizeVarAllocator()
    s0 = sv.create_symbol(hint=2**20)
    assert index_dtype([2048 * s0 - 1], sv) == "tl.int32"  # exactly 2**31 - 1
    assert sv.guards == [sympy.Le(2048 * s0 - 1, INT32_MAX)]
    assert index_dtype([2048 * s0], sv) == "tl.int64"  # exactly 2**31: no guard
    assert len(sv.guards) == 1
    bounded = SizeVarAllocator()
    s1 = bounded.create_symbol(hint=4, hi=2**20)
    assert index_dtype([2048 * s1 - 1], bounded) == "tl.int32"
    assert bounded.guards == []  # the range proves it


def test_a_size_read_from_the_data_has_no_hint_and_takes_the_safe_path():
    sv = SizeVarAllocator()
    s0 = sv.create_symbol(hint=6)
    u0 = sympy.Symbol("u0", integer=True, nonnegative=True)  # Dynamo's unbacked kind
    assert sv.has_hint(4 * s0 + 1) and not sv.has_hint(s0 * u0)
    with pytest.raises(NoHint, match="no hint for u0"):
        sv.size_hint(s0 * u0)
    assert issubclass(NoHint, NotImplementedError)  # callers that catch it still do
    # a fallback stands in for the symbols with no hint, and only for those
    assert sv.size_hint(s0 * u0 + 1, fallback=UNBACKED_FALLBACK) == 6 * 8192 + 1
    assert sv.size_hint(s0 + 1, fallback=3) == 7
    # 64 bits, however small the fallback or the other sizes: no guard can be placed
    assert index_dtype([u0 - 1], sv) == "tl.int64"
    assert index_dtype([s0 * u0], sv) == "tl.int64" and sv.guards == []
    assert index_dtype([2 * s0], sv) == "tl.int32"  # the hinted one still guards
    assert sv.guards == [sympy.Le(2 * s0, INT32_MAX)]
    with pytest.raises(NoHint):  # a guard is a question of truth: no fallback
        sv.guard_leq(u0, 10)


# --- printed indices inside a Triton kernel -------------------------------------------

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def kernel(out_ptr, a, b, N: tl.constexpr):
    x = tl.arange(0, N)
{stores}
"""


def test_texpr_indices_compute_the_same_in_triton(tmp_path):
    a, b = sympy.symbols("a b", integer=True, positive=True)
    x = sympy.Symbol("x", integer=True, nonnegative=True)
    exprs = [
        FloorDiv(x, a * b),
        ModularIndexing(x + a, b, a + 1),
        sympy.Max(x, a * b) - sympy.Min(x, b + 3),
        (x + a) ** 2,
        3 * (x + 1) - 2 * FloorDiv(x, 3),
        ModularIndexing(a * x, 1, b + 2) + FloorDiv(x + 7, a),
        sympy.Max(x, 5, 2 * a) + 2 * (x + a),
    ]
    stores = "\n".join(
        f"    tl.store(out_ptr + {k} * N + x, {texpr(e)})" for k, e in enumerate(exprs)
    )
    path = tmp_path / "printed_kernel.py"
    path.write_text(KERNEL.format(stores=stores))
    spec = importlib.util.spec_from_file_location("printed_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    n, va, vb = 64, 3, 5
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = torch.zeros(len(exprs) * n, dtype=torch.int32, device=device)
    module.kernel[(1,)](out, va, vb, N=n)
    got = out.view(len(exprs), n).cpu().tolist()
    for k, e in enumerate(exprs):
        want = [_value(e, {x: v, a: va, b: vb}) for v in range(n)]
        assert got[k] == want, (k, texpr(e))


@pytest.mark.parametrize("expr_text, lo, settled", [
    ("Max(0, s)", 0, "s"),  # ordered from s's lowest value on
    ("Max(0, s)", -3, None),  # s may be below 0: kept
    ("Min(2, s) - 1", 2, "1"),  # hsplit of a size known to be at least 2
    ("Min(2, s) - 1", 1, None),  # s may be 1: kept
    ("Max(0, s + t + 1)", 0, "s + t + 1"),
    ("Min(s, s + 3)", -5, "s"),  # ordered for every s
    ("Max(1, Min(s, 4))", 1, "Min(4, s)"),  # the inner one is not ordered
])  # fmt: skip
def test_settle_min_max_agrees_with_evaluation_across_the_edge(expr_text, lo, settled):
    s, t = sympy.symbols("s t", integer=True)
    sv = SizeVarAllocator(var_to_range={s: (lo, 64), t: (0, 8)})
    expr = sympy.sympify(expr_text, locals={"s": s, "t": t})
    got = sv.settle_min_max(expr)
    if settled is None:
        assert got == expr
    else:
        assert got == sympy.sympify(settled, locals={"s": s, "t": t})
    for sv_value in range(lo, lo + 8):  # across the range's lower edge
        for tv in (0, 3, 8):
            at = {s: sv_value, t: tv}
            assert got.xreplace(at) == expr.xreplace(at), (at, got, expr)
