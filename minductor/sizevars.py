# generated from chapters/04_sizevars.md — edit there

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import sympy
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter


def index_vars(n: int, prefix: str = "i") -> list[sympy.Symbol]:
    return [
        sympy.Symbol(f"{prefix}{k}", integer=True, nonnegative=True) for k in range(n)
    ]


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
        return None


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
        return None


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
    return sympy.Integer(offset) + sum(
        (i * s for i, s in zip(index, stride)), sympy.Integer(0)
    )


def product(xs: Sequence[sympy.Expr]) -> sympy.Expr:
    out = sympy.Integer(1)
    for x in xs:
        out = out * x
    return out


class SizeVarAllocator:
    """Answers questions about sizes. With static shapes every size is an Integer."""

    def simplify(self, expr: sympy.Expr) -> sympy.Expr:
        return sympy.expand(expr)

    def statically_known_equals(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        return sympy.simplify(sympy.Integer(0) + a - b) == 0

    def size_hint(self, expr: sympy.Expr) -> int:
        value = sympy.sympify(expr)
        if not value.is_number:
            raise NotImplementedError(
                f"symbolic size {expr} (dynamic shapes come later)"
            )
        return int(value)

    def size_hints(self, exprs: Sequence[sympy.Expr]) -> tuple[int, ...]:
        return tuple(self.size_hint(e) for e in exprs)


def affine_coefficients(
    expr: sympy.Expr, variables: Sequence[sympy.Symbol]
) -> tuple[sympy.Expr, list[sympy.Expr]] | None:
    """expr == offset + sum(c_k * v_k) with constant c_k, or None if not affine."""
    coefficients = [sympy.diff(expr, v) for v in variables]
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
        affine = affine_coefficients(expr, old)
        if affine is not None and self._nests(affine[1]):
            offset, coeffs = affine
            merged = zip(self.groups, self.variables)
            return sympy.expand(offset + sum(coeffs[g[-1]] * v for g, v in merged))
        return sympy.expand(expr.subs(self.old_to_new(old), simultaneous=True))

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


def simplify_loops(
    sizes: Sequence[sympy.Expr],
    variables: Sequence[sympy.Symbol],
    indices: Sequence[sympy.Expr],
    prefix: str = "x",
) -> SimplifiedLoop:
    affine = [affine_coefficients(e, variables) for e in indices]
    groups: list[list[int]] = []
    for dim in reversed(range(len(sizes))):
        if sizes[dim] == 1:
            continue
        if groups and _can_merge(dim, groups[0][0], sizes, affine):
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


def _can_merge(outer: int, inner: int, sizes, affine) -> bool:
    # dims strictly between outer and inner have size 1 and were dropped
    for form in affine:
        if form is None:
            return False
        coeffs = form[1]
        if coeffs[outer] != coeffs[inner] * sizes[inner]:
            return False
    return True


class ExprPrinter(StrPrinter):
    def _print_FloorDiv(self, expr):
        base, divisor = expr.args
        base_s = self.parenthesize(base, PRECEDENCE["Mul"])
        return f"({base_s} // {self.parenthesize(divisor, PRECEDENCE['Mul'])})"

    def _print_ModularIndexing(self, expr):
        base, divisor, modulus = expr.args
        inner = base if divisor == 1 else FloorDiv(base, divisor)
        inner_s = self.parenthesize(inner, PRECEDENCE["Mul"])
        return f"({inner_s} % {self.parenthesize(modulus, PRECEDENCE['Mul'])})"

    def _print_Max(self, expr):
        return "max(" + ", ".join(self._print(a) for a in expr.args) + ")"


def pexpr(expr: sympy.Expr) -> str:
    return ExprPrinter().doprint(expr)
