"""Chapter 4: index arithmetic in sympy, loop simplification, and printing.

Laws about sizes and indices are checked as properties (hypothesis): each test
evaluates expressions at concrete integers and compares with plain Python.
"""

import itertools

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minductor.sizevars import (
    FloorDiv,
    ModularIndexing,
    SizeVarAllocator,
    affine_coefficients,
    contiguous_strides,
    flat_index,
    index_vars,
    pexpr,
    product,
    simplify_loops,
    texpr,
)

pytestmark = pytest.mark.ch04

FAST = settings(max_examples=60, deadline=None)

x_sym = sympy.Symbol("x", integer=True, nonnegative=True)


# --- FloorDiv and ModularIndexing -----------------------------------------------------


@FAST
@given(x=st.integers(0, 10_000), b=st.integers(1, 200))
def test_floordiv_and_modular_indexing_recompose(x, b):
    whole = b * FloorDiv(x, b) + ModularIndexing(x, 1, b)
    assert whole == x
    # and the symbolic forms evaluate to the same once x is known
    sym = b * FloorDiv(x_sym, b) + ModularIndexing(x_sym, 1, b)
    assert sym.subs(x_sym, x) == x


@FAST
@given(x=st.integers(0, 10_000), d=st.integers(1, 50), m=st.integers(1, 50))
def test_modular_indexing_is_a_mixed_radix_digit(x, d, m):
    assert ModularIndexing(x, d, m) == (x // d) % m
    assert FloorDiv(x, d) == x // d


def test_trivial_cases_simplify_symbolically():
    assert FloorDiv(x_sym, 1) == x_sym
    assert FloorDiv(0, 7) == 0
    assert ModularIndexing(x_sym, 3, 1) == 0
    assert ModularIndexing(0, 3, 5) == 0
    assert isinstance(FloorDiv(x_sym, 4), FloorDiv)  # stays unevaluated
    assert FloorDiv(x_sym, 4).is_integer and ModularIndexing(x_sym, 1, 4).is_integer


# --- strides and flat indices ---------------------------------------------------------

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4)


@FAST
@given(shape=shapes)
def test_contiguous_strides_match_torch(shape):
    sym = contiguous_strides([sympy.Integer(s) for s in shape])
    assert tuple(int(s) for s in sym) == torch.empty(shape).stride()


def test_contiguous_strides_with_zero_sized_dims():
    assert [int(s) for s in contiguous_strides([2, 0, 3])] == [3, 3, 1]
    assert torch.empty(2, 0, 3).stride() == (3, 3, 1)


@FAST
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    data=st.data(),
)
def test_flat_index_matches_torch_as_strided(shape, data):
    stride = data.draw(
        st.lists(st.integers(0, 6), min_size=len(shape), max_size=len(shape))
    )
    offset = data.draw(st.integers(0, 5))
    span = offset + 1 + sum((s - 1) * st_ for s, st_ in zip(shape, stride))
    storage = torch.arange(span)
    view = storage.as_strided(shape, stride, offset)
    variables = index_vars(len(shape))
    expr = flat_index(
        variables, [sympy.Integer(s) for s in stride], sympy.Integer(offset)
    )
    for idx in itertools.product(*map(range, shape)):
        value = expr.subs(dict(zip(variables, idx)))
        assert int(value) == view[idx].item()


def test_product_of_no_sizes_is_one():
    assert product([]) == 1
    assert product([sympy.Integer(3), sympy.Integer(5)]) == 15


# --- affine coefficients --------------------------------------------------------------


def test_affine_coefficients():
    a, b = index_vars(2)
    assert affine_coefficients(7 + 65 * a + b, [a, b]) == (7, (65, 1))
    assert affine_coefficients(sympy.Integer(4), [a, b]) == (4, (0, 0))
    assert affine_coefficients(a * b, [a, b]) is None
    assert affine_coefficients(FloorDiv(a, 2) + b, [a, b]) is None
    assert affine_coefficients(ModularIndexing(a, 1, 3), [a, b]) is None


# --- simplify_loops -------------------------------------------------------------------


def _merged_value(group, idx, sizes):
    """The merged variable of `group` for original multi-index `idx` (mixed radix)."""
    value = 0
    for dim in group:
        value = value * int(sizes[dim]) + idx[dim]
    return value


@st.composite
def loop_nests(draw):
    """Sizes plus index expressions from contiguous, transposed, broadcast layouts."""
    ndim = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
    contiguous = [int(s) for s in contiguous_strides(sizes)]
    strides = [contiguous]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["permuted", "broadcast", "random"]))
        if kind == "permuted":
            perm = draw(st.permutations(range(ndim)))
            permuted_sizes = [sizes[p] for p in perm]
            base = contiguous_strides(permuted_sizes)
            stride = [0] * ndim
            for k, p in enumerate(perm):
                stride[p] = int(base[k])
            strides.append(stride)
        elif kind == "broadcast":
            zeros = draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))
            strides.append([0 if z else c for z, c in zip(zeros, contiguous)])
        else:
            strides.append(
                draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim))
            )
    offsets = draw(
        st.lists(st.integers(0, 3), min_size=len(strides), max_size=len(strides))
    )
    return sizes, strides, offsets


@settings(max_examples=80, deadline=None)
@given(nest=loop_nests())
def test_simplify_loops_rewrite_preserves_every_index(nest):
    sizes, strides, offsets = nest
    old = index_vars(len(sizes))
    sym_sizes = [sympy.Integer(s) for s in sizes]
    indices = [
        flat_index(old, [sympy.Integer(s) for s in st_], sympy.Integer(o))
        for st_, o in zip(strides, offsets)
    ]
    loop = simplify_loops(sym_sizes, old, indices)

    assert product(loop.sizes) == product(sym_sizes)  # same iteration space
    assert len(loop.variables) == len(loop.sizes) == len(loop.groups)
    covered = [d for g in loop.groups for d in g]
    assert covered == sorted(covered)  # groups keep the dims in order...
    assert set(covered) == {d for d, s in enumerate(sizes) if s != 1}  # ...minus size 1
    for group, size in zip(loop.groups, loop.sizes):
        between = set(range(group[0], group[-1] + 1)) - set(group)
        assert all(sizes[d] == 1 for d in between)  # only dropped dims in between
        assert size == product([sym_sizes[d] for d in group])

    rewritten = [loop.rewrite(e, old) for e in indices]
    mapping = loop.old_to_new(old)
    for idx in itertools.product(*map(range, sizes)):
        new_values = {
            var: _merged_value(group, idx, sizes)
            for group, var in zip(loop.groups, loop.variables)
        }
        old_values = dict(zip(old, idx))
        for original, new in zip(indices, rewritten):
            assert original.subs(old_values) == new.subs(new_values)
        for var, expr in mapping.items():
            assert expr.subs(new_values) == old_values[var]


def test_simplify_loops_names_x0_innermost():
    a, b, c = index_vars(3)
    loop = simplify_loops([3, 4, 5], [a, b, c], [20 * a + 5 * b + c, c])
    assert [str(v) for v in loop.variables] == ["x1", "x0"]
    assert loop.groups == ((0, 1), (2,))
    assert loop.sizes == (12, 5)


def test_contiguous_body_merges_into_one_loop():
    a, b = index_vars(2)
    loop = simplify_loops([33, 65], [a, b], [65 * a + b, 65 * a + b + 7])
    assert loop.sizes == (2145,)
    (x0,) = loop.variables
    assert loop.rewrite(65 * a + b, [a, b]) == x0
    assert loop.rewrite(65 * a + b + 7, [a, b]) == x0 + 7


def test_broadcast_body_keeps_its_dimensions():
    a, b = index_vars(2)
    loop = simplify_loops([33, 65], [a, b], [65 * a + b, b])  # a (1, 65) bias
    assert loop.sizes == (33, 65)
    x1, x0 = loop.variables
    assert loop.rewrite(65 * a + b, [a, b]) == x0 + 65 * x1
    assert loop.rewrite(b, [a, b]) == x0


def test_transposed_read_blocks_merging():
    a, b = index_vars(2)
    loop = simplify_loops([4, 6], [a, b], [6 * a + b, a + 4 * b])
    assert loop.sizes == (4, 6)


def test_size_one_dims_vanish_and_neighbours_merge():
    a, b, c = index_vars(3)
    loop = simplify_loops([5, 1, 7], [a, b, c], [7 * a + 7 * b + c])
    assert loop.sizes == (35,)
    assert loop.groups == ((0, 2),)
    all_ones = simplify_loops([1, 1], [a, b], [a + b])
    assert all_ones.sizes == () and all_ones.rewrite(a + b + 3, [a, b]) == 3


def test_non_affine_index_is_left_alone():
    a, b = index_vars(2)
    loop = simplify_loops([4, 6], [a, b], [6 * a + b, FloorDiv(6 * a + b, 2)])
    assert loop.sizes == (4, 6)


# --- SizeVarAllocator -----------------------------------------------------------------


def test_size_var_allocator():
    sv = SizeVarAllocator()
    s = sympy.Symbol("s0", integer=True, positive=True)
    assert sv.statically_known_equals(2 * (s + 1), 2 * s + 2)
    assert not sv.statically_known_equals(s, s + 1)
    assert sv.size_hint(sympy.Integer(6) * 7) == 42
    assert sv.size_hints([sympy.Integer(2), 3]) == (2, 3)
    with pytest.raises(NotImplementedError, match="symbolic size"):
        sv.size_hint(s)
    assert sv.simplify(2 * (s + 1)) == 2 * s + 2


# --- printing -------------------------------------------------------------------------

PRINT_NAMES = {"max": max, "min": min}


def _eval_printed(expr, values, printer=pexpr):
    return eval(
        printer(expr), dict(PRINT_NAMES), {str(k): v for k, v in values.items()}
    )


def test_pexpr_keeps_precedence():
    a, b = sympy.symbols("a b", integer=True, nonnegative=True)
    expr = 2 * (a + b)
    assert _eval_printed(expr, {a: 3, b: 4}) == 14 == expr.subs({a: 3, b: 4})


def test_sum_inside_product_and_product_of_sums_print_differently():
    a, b, c, d = sympy.symbols("a b c d", integer=True, nonnegative=True)
    assert pexpr(a + b * (c + d)) == "a + b*(c + d)"
    assert pexpr((a + b) * (c + d)) == "(a + b)*(c + d)"
    values = {a: 2, b: 3, c: 5, d: 7}
    assert _eval_printed(a + b * (c + d), values) == 2 + 3 * (5 + 7)
    assert _eval_printed((a + b) * (c + d), values) == (2 + 3) * (5 + 7)


def test_pexpr_prints_floor_div_and_modular_indexing_as_python():
    assert pexpr(ModularIndexing(x_sym, 1, 65)) == "(x % 65)"
    assert pexpr(FloorDiv(x_sym, 65)) == "(x // 65)"
    assert pexpr(ModularIndexing(x_sym, 65, 33)) == "((x // 65) % 33)"


def test_compound_right_operands_are_parenthesised():
    a, b = sympy.symbols("a b", integer=True, positive=True)
    assert pexpr(FloorDiv(x_sym, a * b)) == "(x // (a*b))"
    assert pexpr(FloorDiv(x_sym, a + 1)) == "(x // (a + 1))"
    assert pexpr(ModularIndexing(x_sym, a, a * b)) == "((x // a) % (a*b))"
    assert pexpr(ModularIndexing(a * x_sym, 1, b)) == "(a*x % b)"  # (a*x) % b
    assert pexpr(FloorDiv(x_sym + a, 3)) == "((a + x) // 3)"
    values = {x_sym: 100, a: 3, b: 4}
    assert _eval_printed(FloorDiv(x_sym, a * b), values) == 100 // 12


def test_powers_print_as_products_and_rationals_are_refused():
    a, b = sympy.symbols("a b", integer=True, nonnegative=True)
    assert pexpr(a**2) == "(a*a)"
    assert pexpr(3 * (a + b) ** 2) == "3*((a + b)*(a + b))"
    assert pexpr(FloorDiv(x_sym, a**2)) == "(x // (a*a))"
    for bad in (a / 2, sympy.Rational(1, 2), a ** (-1), b / a):
        with pytest.raises(ValueError, match="not an integer index"):
            pexpr(bad)


def test_min_max_print_for_python_and_for_triton():
    a, b = sympy.symbols("a b", integer=True, nonnegative=True)
    assert pexpr(sympy.Max(a, b)) == "max(a, b)"
    assert pexpr(sympy.Min(a, b + 1)) == "min(a, b + 1)"
    assert "max" not in texpr(sympy.Max(a, b)) and ">=" in texpr(sympy.Max(a, b))
    for va, vb in [(3, 5), (5, 3), (4, 4)]:
        for e, want in [(sympy.Max(a, b), max(va, vb)), (sympy.Min(a, b), min(va, vb))]:
            assert _eval_printed(e, {a: va, b: vb}, texpr) == want


SYMBOL = dict(integer=True, nonnegative=True)
POSITIVE = dict(integer=True, positive=True)
sa, sb = sympy.symbols("a b", **SYMBOL)
sc, sd = sympy.symbols("c d", **POSITIVE)

leaves = st.one_of(
    st.sampled_from([sa, sb, sc]),
    st.integers(0, 9).map(sympy.Integer),
)
# divisors and moduli stay positive; compound ones exercise the right operand's parens
divisors = st.one_of(
    st.integers(1, 9).map(sympy.Integer),
    st.sampled_from([sc, sd, sc * sd, sc + 1, sc + sd, 2 * sd]),
)


def _extend(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda t: t[0] + t[1]),
        pair.map(lambda t: t[0] - t[1]),
        pair.map(lambda t: t[0] * t[1]),
        st.tuples(children, st.integers(-3, 3)).map(lambda t: t[1] * t[0]),
        st.tuples(children, divisors).map(lambda t: FloorDiv(t[0], t[1])),
        st.tuples(children, divisors, divisors).map(
            lambda t: ModularIndexing(t[0], t[1], t[2])
        ),
        st.tuples(children, st.integers(2, 3)).map(lambda t: t[0] ** t[1]),
        pair.map(lambda t: sympy.Max(t[0], t[1])),
        pair.map(lambda t: sympy.Min(t[0], t[1])),
    )


expressions = st.recursive(leaves, _extend, max_leaves=8)
values = st.fixed_dictionaries(
    {
        sa: st.integers(0, 300),
        sb: st.integers(0, 300),
        sc: st.integers(1, 20),
        sd: st.integers(1, 20),
    }
)


@settings(max_examples=200, deadline=None)
@given(expr=expressions, point=values)
def test_pexpr_and_texpr_evaluate_like_sympy(expr, point):
    expected = expr.xreplace({k: sympy.Integer(v) for k, v in point.items()})
    assert expected.is_Integer, expected
    assert _eval_printed(expr, point) == int(expected)
    assert _eval_printed(expr, point, texpr) == int(expected)
