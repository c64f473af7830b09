# generated from chapters/04_sizevars.md — edit there

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sympy
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter


def index_vars(n: int, prefix: str = "i") -> list[sympy.Symbol]:
    return [
        sympy.Symbol(f"{prefix}{k}", integer=True, nonnegative=True) for k in range(n)
    ]


def _is_multiple(term: sympy.Expr, divisor: sympy.Expr) -> bool:
    """term == k * divisor for some integer k, provably."""
    quotient = term / divisor
    # a Rational such as 1/2 can hide in a quotient sympy calls an integer
    return quotient.is_integer is True and all(
        r.q == 1 for r in quotient.atoms(sympy.Rational)
    )


def _split_multiples(
    base: sympy.Expr, divisor: sympy.Expr
) -> tuple[sympy.Expr, sympy.Expr]:
    """base == multiple + rest, every term of `multiple` a multiple of divisor."""
    terms = sympy.Add.make_args(base)
    is_multiple = [_is_multiple(t, divisor) for t in terms]
    multiple = sympy.Add(*(t for t, m in zip(terms, is_multiple) if m))
    rest = sympy.Add(*(t for t, m in zip(terms, is_multiple) if not m))
    return multiple, rest


def _common_factor(base: sympy.Expr, divisor: sympy.Expr) -> int:
    """The largest integer dividing `divisor` and every coefficient of `base`."""
    if not divisor.is_Integer:
        return 1
    factor = int(divisor)
    for term in sympy.Add.make_args(base):
        coefficient = term.as_coeff_Mul()[0]
        if not coefficient.is_Integer:
            return 1
        factor = math.gcd(factor, int(coefficient))
    return factor


class FloorDiv(sympy.Function):
    """a // b for non-negative integer a and positive integer b."""

    nargs = (2,)
    is_integer = True

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv):
            return FloorDiv(base.args[0], base.args[1] * divisor)
        if isinstance(base, ModularIndexing) and divisor.is_Integer:
            x, div, mod = base.args  # ((x // div) % mod) // divisor, divisor | mod
            if mod.is_Integer and int(mod) % int(divisor) == 0:
                return ModularIndexing(x, div * divisor, mod // divisor)
        multiple, rest = _split_multiples(base, divisor)
        if multiple != 0 and rest.is_nonnegative:
            return sympy.expand(multiple / divisor) + FloorDiv(rest, divisor)
        factor = _common_factor(base, divisor)
        if factor > 1:
            return FloorDiv(sympy.expand(base / factor), divisor / factor)
        return None

    def _eval_is_nonnegative(self):
        base, divisor = self.args
        return True if base.is_nonnegative and divisor.is_positive else None


class ModularIndexing(sympy.Function):
    """(base // divisor) % modulus: one digit of a mixed-radix number."""

    nargs = (3,)
    is_integer = True

    @classmethod
    def eval(cls, base, divisor, modulus):
        if base == 0 or modulus == 1:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer and modulus.is_Integer:
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        if isinstance(base, FloorDiv):
            return ModularIndexing(base.args[0], base.args[1] * divisor, modulus)
        multiple, rest = _split_multiples(base, divisor * modulus)
        if multiple != 0 and rest.is_nonnegative:
            return ModularIndexing(rest, divisor, modulus)
        factor = _common_factor(base, divisor)
        if factor > 1:
            base = sympy.expand(base / factor)
            return ModularIndexing(base, divisor / factor, modulus)
        return None

    def _eval_is_nonnegative(self):
        return True if self.args[2].is_positive else None


def contiguous_strides(size: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    strides: list[sympy.Expr] = []
    running = sympy.Integer(1)
    for s in reversed(size):
        strides.append(running)
        running = running * sympy.Max(s, 1)
    return list(reversed(strides))


def flat_index(
    index: Sequence[sympy.Expr], stride: Sequence[sympy.Expr], offset: sympy.Expr = 0
) -> sympy.Expr:
    assert len(index) == len(stride), (index, stride)
    return sympy.sympify(offset) + sum(
        (i * s for i, s in zip(index, stride)), sympy.Integer(0)
    )


def product(xs: Sequence[sympy.Expr]) -> sympy.Expr:
    out = sympy.Integer(1)
    for x in xs:
        out = out * x
    return out


Range = tuple[sympy.Expr, sympy.Expr]  # inclusive (lo, hi); hi may be sympy.oo


def bound_sympy(expr: sympy.Expr, ranges: dict[sympy.Symbol, Range]) -> Range:
    """Bounds of expr while each symbol in `ranges` stays in its range.

    A symbol missing from `ranges` stands for itself: the bounds may contain it.
    """
    expr = sympy.sympify(expr)
    if expr.is_Number:
        return expr, expr
    if expr.is_Symbol:
        return ranges.get(expr, (expr, expr))
    args = [bound_sympy(a, ranges) for a in expr.args]
    if expr.is_Add:
        return sympy.Add(*(lo for lo, _ in args)), sympy.Add(*(hi for _, hi in args))
    if expr.is_Mul:
        out = args[0]
        for arg in args[1:]:
            out = _mul_bounds(out, arg)
        return out
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
        out = args[0]
        for _ in range(int(expr.exp) - 1):
            out = _mul_bounds(out, args[0])
        return out
    if isinstance(expr, (sympy.Min, sympy.Max)):
        f = type(expr)
        return f(*(lo for lo, _ in args)), f(*(hi for _, hi in args))
    if isinstance(expr, FloorDiv):
        (lo, hi), (dlo, dhi) = args
        if lo.is_nonnegative and dlo.is_positive:
            return _floordiv(lo, dhi), _floordiv(hi, dlo)
    if isinstance(expr, ModularIndexing):
        (lo, hi), (dlo, _), (mlo, mhi) = args
        if mlo.is_positive:
            top = mhi - 1
            if lo.is_nonnegative and dlo.is_positive:
                quotient = _floordiv(hi, dlo)
                top = quotient if (quotient - top).is_negative else top
            return sympy.Integer(0), top
    return -sympy.oo, sympy.oo


def _mul_bounds(a: Range, b: Range) -> Range:
    if b[0] == b[1]:
        a, b = b, a  # a constant factor, if there is one, goes first
    (alo, ahi), (blo, bhi) = a, b
    if alo == ahi:
        if alo.is_nonnegative:
            return _times(alo, blo), _times(alo, bhi)
        if alo.is_nonpositive:
            return _times(alo, bhi), _times(alo, blo)
    elif alo.is_nonnegative and blo.is_nonnegative:
        return _times(alo, blo), _times(ahi, bhi)
    return -sympy.oo, sympy.oo


def _times(x: sympy.Expr, y: sympy.Expr) -> sympy.Expr:
    return sympy.Integer(0) if x == 0 or y == 0 else x * y  # never 0 * oo


def _floordiv(x: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr:
    if x == sympy.oo:
        return sympy.oo
    return sympy.Integer(0) if divisor == sympy.oo else FloorDiv(x, divisor)


class NoHint(NotImplementedError):
    """A question needed the value of a symbol that has no hint."""


class SizeVarAllocator:
    """Answers questions about sizes: integers, and symbols with hints and ranges."""

    def __init__(
        self,
        var_to_hint: dict[sympy.Symbol, int] | None = None,
        var_to_range: dict[sympy.Symbol, Range] | None = None,
    ):
        self.var_to_hint = dict(var_to_hint or {})
        self.var_to_range = dict(var_to_range or {})
        self.guards: list[sympy.Basic] = []  # relations assumed from the hints
        self.shape_env = None  # Dynamo's, when the sizes came from it (below)

    def create_symbol(self, hint: int, lo: int = 2, hi=sympy.oo) -> sympy.Symbol:
        assert lo <= hint <= hi, (lo, hint, hi)
        symbol = sympy.Symbol(f"s{len(self.var_to_hint)}", integer=True, positive=True)
        self.var_to_hint[symbol] = hint
        self.var_to_range[symbol] = (sympy.Integer(lo), sympy.sympify(hi))
        return symbol

    def simplify(self, expr: sympy.Expr) -> sympy.Expr:
        return sympy.expand(expr)

    def size_hint(self, expr: sympy.Expr, fallback: int | None = None) -> int:
        """expr at the hints. A symbol with none is a size read from the data (below);
        a question of speed may pass a fallback for it, a question of truth may not."""
        hints = {s: sympy.Integer(h) for s, h in self.var_to_hint.items()}
        value = sympy.sympify(expr).xreplace(hints)
        if value.free_symbols and fallback is not None:
            value = value.xreplace(dict.fromkeys(value.free_symbols, fallback))
        if value.free_symbols:
            missing = ", ".join(sorted(str(s) for s in value.free_symbols))
            raise NoHint(
                f"symbolic size {expr}: no hint for {missing} "
                "(make sizes with create_symbol(hint), or pass var_to_hint)"
            )
        return int(value)

    def size_hints(self, exprs: Sequence[sympy.Expr]) -> tuple[int, ...]:
        return tuple(self.size_hint(e) for e in exprs)

    def has_hint(self, expr: sympy.Expr) -> bool:
        return sympy.sympify(expr).free_symbols <= self.var_to_hint.keys()


    def settle_min_max(self, expr: sympy.Expr) -> sympy.Expr:
        """expr with each Min and Max whose arguments the ranges order replaced by the
        one it picks: Max(0, s0) is s0 where s0 >= 0, Min(2, s0) is 2 where s0 >= 2."""

        def settle(e: sympy.Expr) -> sympy.Expr:
            pick = e.args[0]
            for a in e.args[1:]:
                low, high = (a, pick) if isinstance(e, sympy.Min) else (pick, a)
                if self.statically_known_leq(low, high):
                    pick = low if isinstance(e, sympy.Min) else high
                elif not self.statically_known_leq(high, low):
                    return e  # not ordered everywhere: kept
            return pick

        minmax = (sympy.Min, sympy.Max)
        return sympy.sympify(expr).replace(lambda e: isinstance(e, minmax), settle)

    def statically_known_equals(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        return self._known_nonneg(a - b) and self._known_nonneg(b - a)

    def statically_known_leq(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        return self._known_nonneg(b - a)

    def statically_known_lt(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        return self._known_nonneg(b - a - 1)

    def statically_known_multiple_of(self, numerator, denominator) -> bool:
        numerator = sympy.expand(numerator)
        denominator = sympy.sympify(denominator)
        if denominator == 0:
            return False
        terms = sympy.Add.make_args(numerator)
        return all(_is_multiple(t, denominator) for t in terms)

    def statically_known_true(self, relation) -> bool:
        relation = sympy.sympify(relation)
        if relation in (sympy.true, sympy.false):
            return relation == sympy.true
        a, b = relation.lhs, relation.rhs
        if isinstance(relation, sympy.Ne):
            return self.statically_known_lt(a, b) or self.statically_known_lt(b, a)
        check = {
            sympy.Eq: lambda: self.statically_known_equals(a, b),
            sympy.Le: lambda: self.statically_known_leq(a, b),
            sympy.Lt: lambda: self.statically_known_lt(a, b),
            sympy.Ge: lambda: self.statically_known_leq(b, a),
            sympy.Gt: lambda: self.statically_known_lt(b, a),
        }[type(relation)]
        return check()


    def _known_nonneg(self, expr, var_ranges=None) -> bool:
        """expr >= 0 wherever the ranges allow; False when unsure."""
        expr = sympy.expand(sympy.sympify(expr))
        if expr.is_number:
            return expr.is_extended_nonnegative is True
        ranges = {
            v: (sympy.Integer(0), sympy.sympify(n) - 1)
            for v, n in (var_ranges or {}).items()
        }
        lo = sympy.expand(bound_sympy(expr, ranges)[0])  # may hold size symbols
        if lo.is_extended_nonnegative:  # sympy's assumptions: s0 - 1 >= 0
            return True
        sizes = self._symbol_ranges(lo)
        shifted = lo.xreplace(
            {
                s: s_lo + sympy.Dummy(integer=True, nonnegative=True)
                for s, (s_lo, _) in sizes.items()
                if s_lo.is_finite
            }
        )
        if sympy.expand(shifted).is_extended_nonnegative:  # t0*t1 + 2*t0 + t1
            return True
        lo = bound_sympy(lo, sizes)[0]  # intervals, for upper bounds and divisions
        return lo.is_extended_nonnegative is True

    def _symbol_ranges(self, expr: sympy.Expr) -> dict[sympy.Symbol, Range]:
        ranges = {}
        for s in expr.free_symbols:
            if s in self.var_to_range:
                lo, hi = self.var_to_range[s]
                ranges[s] = (sympy.sympify(lo), sympy.sympify(hi))
            elif s.is_positive or s.is_nonnegative:
                ranges[s] = (sympy.Integer(1 if s.is_positive else 0), sympy.oo)
            else:
                ranges[s] = (-sympy.oo, sympy.oo)
        return ranges


    def guard_equals(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        holds = self.size_hint(a) == self.size_hint(b)
        return self._guard(sympy.Eq(a, b), holds)

    def guard_leq(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        holds = self.size_hint(a) <= self.size_hint(b)
        return self._guard(sympy.Le(a, b), holds)

    def _guard(self, relation, holds: bool) -> bool:
        assumed = relation if holds else sympy.Not(relation)
        if not self.statically_known_true(assumed):
            self.guards.append(assumed)
            if self.shape_env is not None:  # Dynamo checks it before each call
                self._guard_in_dynamo(assumed)
        return holds


    @classmethod
    def from_shape_env(cls, shape_env) -> SizeVarAllocator:
        """The allocator for a graph traced by Dynamo: its symbols, hints and ranges."""

        def bound(value) -> sympy.Expr:  # Dynamo's integer infinity is sympy's oo
            text = str(value)
            if text in ("int_oo", "oo", "-int_oo", "-oo"):
                return -sympy.oo if text.startswith("-") else sympy.oo
            return sympy.Integer(int(value))

        hints = getattr(shape_env, "backed_var_to_val", None) or shape_env.var_to_val
        ranges = {
            s: (bound(vr.lower), bound(vr.upper))
            for s, vr in shape_env.var_to_range.items()
        }
        sizevars = cls({s: int(h) for s, h in hints.items()}, ranges)
        sizevars.shape_env = shape_env
        return sizevars


    # Dynamo's sympy functions, by name, and the ones of ours (or sympy's) they mean
    DYNAMO_FUNCTIONS = {
        "FloorDiv": FloorDiv,
        "CleanDiv": FloorDiv,  # a FloorDiv known to be exact
        "ModularIndexing": ModularIndexing,
        "PythonMod": sympy.Mod,
        "Mod": sympy.Mod,
        "Min": sympy.Min,
        "Max": sympy.Max,
        "PowByNatural": sympy.Pow,
    }

    @staticmethod
    def from_dynamo(expr: sympy.Expr) -> sympy.Expr:
        """A size expression of Dynamo's, rebuilt from our functions."""
        if not expr.args:  # a symbol or a number
            return expr
        args = [SizeVarAllocator.from_dynamo(a) for a in expr.args]
        if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Pow)):
            return expr.func(*args)
        func = SizeVarAllocator.DYNAMO_FUNCTIONS.get(type(expr).__name__)
        if func is None:  # e.g. a float cast: a lowering cannot use it as a size
            raise TypeError(f"size expression {expr} uses {type(expr).__name__}")
        return func(*args)

    def _guard_in_dynamo(self, relation) -> None:
        """Hand a guard to Dynamo, in its own sympy functions; refuse if it cannot."""
        from torch.utils._sympy import functions as dynamo

        theirs = {
            FloorDiv: dynamo.FloorDiv,
            ModularIndexing: dynamo.ModularIndexing,
            sympy.Min: dynamo.Min,
            sympy.Max: dynamo.Max,
        }
        translated = relation.replace(
            lambda e: e.func in theirs, lambda e: theirs[e.func](*e.args)
        )
        try:
            self.shape_env.evaluate_expr(translated)
        except Exception as why:  # an assumption nobody will check is not allowed
            raise NotImplementedError(f"cannot guard on {relation}: {why}") from why


    def simplify_with_ranges(
        self, expr: sympy.Expr, var_ranges: dict[sympy.Symbol, sympy.Expr]
    ) -> sympy.Expr:
        """Simplify an index in which each variable v lies in [0, var_ranges[v])."""
        fixed = {v: sympy.Integer(0) for v, n in var_ranges.items() if n == 1}
        for s, (lo, hi) in self.var_to_range.items():
            if lo == hi:
                fixed[s] = sympy.sympify(lo)
        expr = sympy.expand(sympy.sympify(expr).xreplace(fixed))
        while True:
            new = join_dimensions(expr).replace(
                lambda e: isinstance(e, (FloorDiv, ModularIndexing)),
                lambda e: self._simplify_division(e, var_ranges),
            )
            new = sympy.expand(new)
            if new == expr:
                return new
            expr = new

    def _simplify_division(self, e: sympy.Expr, var_ranges) -> sympy.Expr:
        base, divisor = e.args[:2]
        multiple, rest = _split_multiples(base, divisor)
        if (
            multiple != 0
            and rest != 0
            and self._in_range(rest, divisor, var_ranges)
            and self._known_nonneg(multiple, var_ranges)
        ):
            base = multiple  # 0 <= rest < divisor: it never reaches the quotient
        if isinstance(e, FloorDiv):
            if self._in_range(base, divisor, var_ranges):
                return sympy.Integer(0)
            return FloorDiv(base, divisor)
        modulus = e.args[2]
        if self._in_range(base, divisor * modulus, var_ranges):
            return FloorDiv(base, divisor)
        return ModularIndexing(base, divisor, modulus)

    def _in_range(self, expr: sympy.Expr, end: sympy.Expr, var_ranges) -> bool:
        """0 <= expr < end wherever the ranges allow."""
        return self._known_nonneg(expr, var_ranges) and self._known_nonneg(
            end - 1 - expr, var_ranges
        )


def join_dimensions(expr: sympy.Expr) -> sympy.Expr:
    """c*(x//d % m1) + c*m1*(x//(d*m1) % m2)  ->  c*(x//d % (m1*m2)), and
    c*(x//d % m) + c*m*(x//(d*m))  ->  c*(x//d)."""
    if not isinstance(expr, sympy.Add):
        return expr
    parts = []  # (coefficient, division, term)
    for term in expr.args:
        factors = sympy.Mul.make_args(term)
        divs = [f for f in factors if isinstance(f, (FloorDiv, ModularIndexing))]
        if len(divs) == 1:
            rest = [f for f in factors if f is not divs[0]]
            parts.append((sympy.Mul(*rest), divs[0], term))
    for c1, low, t1 in parts:
        if not isinstance(low, ModularIndexing):
            continue
        x, d, m1 = low.args
        for c2, high, t2 in parts:
            if t2 == t1 or high.args[0] != x or high.args[1] != d * m1:
                continue
            if sympy.expand(c2 - c1 * m1) != 0:
                continue
            if isinstance(high, ModularIndexing):
                joined = ModularIndexing(x, d, m1 * high.args[2])
            else:
                joined = FloorDiv(x, d)
            return join_dimensions(expr - t1 - t2 + c1 * joined)
    return expr


def affine_coefficients(
    expr: sympy.Expr, variables: Sequence[sympy.Symbol]
) -> tuple[sympy.Expr, tuple[sympy.Expr, ...]] | None:
    """expr == offset + sum(c_k * v_k) with constant c_k, or None if not affine."""
    return _affine_coefficients(expr, tuple(variables))


@functools.lru_cache(maxsize=1 << 16)
def _affine_coefficients(expr: sympy.Expr, variables: tuple[sympy.Symbol, ...]):
    coefficients = tuple(sympy.diff(expr, v) for v in variables)
    if any(
        c.free_symbols & set(variables) or c.has(sympy.Derivative) for c in coefficients
    ):
        return None
    offset = expr.subs({v: 0 for v in variables})
    if offset.free_symbols & set(variables):
        return None
    return offset, coefficients


@dataclass(frozen=True)
class SimplifiedLoop:
    """A loop nest after dropping size-1 dims and merging contiguous ones."""

    sizes: tuple[sympy.Expr, ...]  # merged sizes, outermost first
    groups: tuple[tuple[int, ...], ...]  # original dims covered by each merged dim
    variables: tuple[sympy.Symbol, ...]  # one per merged dim; x0 is the innermost
    original_sizes: tuple[sympy.Expr, ...]

    def rewrite(self, expr: sympy.Expr, old: Sequence[sympy.Symbol]) -> sympy.Expr:
        """Express an index over the original variables in the merged ones."""
        return _rewrite(self, expr, tuple(old))

    def _nests(self, coeffs: list[sympy.Expr]) -> bool:
        return all(
            coeffs[outer] == coeffs[inner] * self.original_sizes[inner]
            for group in self.groups
            for outer, inner in zip(group, group[1:])
        )

    def old_to_new(self, old: Sequence[sympy.Symbol]) -> dict[sympy.Symbol, sympy.Expr]:
        """Each original variable as a digit of its merged variable (always exact)."""
        mapping: dict[sympy.Symbol, sympy.Expr] = {v: sympy.Integer(0) for v in old}
        for group, var in zip(self.groups, self.variables):
            divisor = sympy.Integer(1)
            for dim in reversed(group):
                if dim == group[0]:
                    mapping[old[dim]] = FloorDiv(var, divisor)
                else:
                    mapping[old[dim]] = ModularIndexing(
                        var, divisor, self.original_sizes[dim]
                    )
                divisor = divisor * self.original_sizes[dim]
        return mapping


# the scheduler asks for the same rewrite at every fusion it weighs (below)
@functools.lru_cache(maxsize=1 << 16)
def _rewrite(loop: SimplifiedLoop, expr: sympy.Expr, old: tuple[sympy.Symbol, ...]):
    affine = affine_coefficients(expr, old)
    if affine is not None and loop._nests(affine[1]):
        offset, coeffs = affine
        merged = zip(loop.groups, loop.variables)
        return sympy.expand(offset + sum(coeffs[g[-1]] * v for g, v in merged))
    return sympy.expand(expr.xreplace(loop.old_to_new(old)))


def simplify_loops(
    sizes: Sequence[sympy.Expr],
    variables: Sequence[sympy.Symbol],
    indices: Sequence[sympy.Expr],
    prefix: str = "x",
    sizevars: SizeVarAllocator | None = None,
    order: Sequence[int] | None = None,  # the dims, outermost first (default: as given)
) -> SimplifiedLoop:
    sizevars = sizevars or SizeVarAllocator()
    affine = [affine_coefficients(e, variables) for e in indices]
    groups: list[list[int]] = []
    for dim in reversed(order if order is not None else range(len(sizes))):
        if sizevars.statically_known_equals(sizes[dim], 1):
            continue
        if groups and _can_merge(dim, groups[0][0], sizes, affine, sizevars):
            groups[0].insert(0, dim)
        else:
            groups.insert(0, [dim])
    merged = [product([sizes[d] for d in g]) for g in groups]
    names = index_vars(len(groups), prefix)[::-1]  # x0 is the innermost
    return SimplifiedLoop(
        sizes=tuple(merged),
        groups=tuple(tuple(g) for g in groups),
        variables=tuple(names),
        original_sizes=tuple(sizes),
    )


def _can_merge(outer: int, inner: int, sizes, affine, sizevars) -> bool:
    # dims strictly between outer and inner have size 1 and were dropped
    for form in affine:
        if form is None:
            return False
        coeffs = form[1]
        if not sizevars.statically_known_equals(
            coeffs[outer], coeffs[inner] * sizes[inner]
        ):
            return False
    return True


def loop_order(index: sympy.Expr, variables: Sequence[sympy.Symbol]) -> list[int]:
    """The dims ordered as `index` lays them out in memory, the largest stride first.

    Identity unless index is affine with integer coefficients; ties keep their order.
    """
    affine = affine_coefficients(index, variables)
    dims = list(range(len(variables)))
    if affine is None or not all(c.is_Integer for c in affine[1]):
        return dims
    coeffs = affine[1]
    return sorted(dims, key=lambda d: -abs(int(coeffs[d])))


class ExprPrinter(StrPrinter):
    """Prints an integer index expression as Python."""

    def _left(self, expr: sympy.Expr) -> str:  # wrap below `*`: a + b
        return self.parenthesize(expr, PRECEDENCE["Mul"], strict=True)

    def _right(self, expr: sympy.Expr) -> str:  # wrap at `*` too: a*b
        return self.parenthesize(expr, PRECEDENCE["Mul"])

    def _print_FloorDiv(self, expr):
        base, divisor = expr.args
        return f"({self._left(base)} // {self._right(divisor)})"

    def _print_ModularIndexing(self, expr):
        base, divisor, modulus = expr.args
        inner = self._left(base)
        if divisor != 1:
            inner = f"({inner} // {self._right(divisor)})"
        return f"({inner} % {self._right(modulus)})"

    def _print_Mod(self, expr):
        return f"({self._left(expr.args[0])} % {self._right(expr.args[1])})"

    def _print_Pow(self, expr):
        base, exp = expr.args
        if not (exp.is_Integer and exp > 0):
            raise ValueError(f"not an integer index expression: {expr}")
        return "(" + "*".join([self._left(base)] * int(exp)) + ")"

    def _print_Mul(self, expr):
        for f in expr.args:
            if (f.is_Rational and not f.is_Integer) or (f.is_Pow and f.exp.is_negative):
                raise ValueError(f"not an integer index expression: {expr}")
        return super()._print_Mul(expr)

    def _print_Rational(self, expr):
        raise ValueError(f"not an integer index expression: {expr}")

    def _print_Min(self, expr):
        return "min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Max(self, expr):
        return "max(" + ", ".join(self._print(a) for a in expr.args) + ")"


class TritonPrinter(ExprPrinter):
    """Prints an index for a Triton kernel, where min and max see tensors."""

    def _print_Min(self, expr):
        return self._select(expr.args, "<")

    def _print_Max(self, expr):
        return self._select(expr.args, ">")

    def _select(self, args, cmp: str) -> str:
        if len(args) == 1:
            return self._print(args[0])
        a = self._select(args[: len(args) // 2], cmp)
        b = self._select(args[len(args) // 2 :], cmp)
        return f"(({a}) * (({a}) {cmp}= ({b})) + ({b}) * (({b}) {cmp} ({a})))"


def pexpr(expr: sympy.Expr) -> str:
    return ExprPrinter().doprint(expr)


def texpr(expr: sympy.Expr) -> str:
    return TritonPrinter().doprint(expr)


INT32_MAX = 2**31 - 1
UNBACKED_FALLBACK = 8192  # a size read from the data, assumed for speed alone


def index_dtype(
    largest: Iterable[sympy.Expr | int], sizevars: SizeVarAllocator | None = None
) -> str:
    """The Triton type for a kernel's indices, given the largest value each takes."""
    sizevars = sizevars or SizeVarAllocator()
    values = [sympy.sympify(v) for v in largest]
    unsure = [v for v in values if not sizevars.statically_known_leq(v, INT32_MAX)]
    if not all(sizevars.has_hint(v) for v in unsure):  # a size read from the data
        return "tl.int64"
    if any(sizevars.size_hint(v) > INT32_MAX for v in unsure):
        return "tl.int64"
    try:
        for v in unsure:
            sizevars.guard_leq(v, INT32_MAX)
    except NotImplementedError:  # the guard could not be placed: stay safe
        return "tl.int64"
    return "tl.int32"
