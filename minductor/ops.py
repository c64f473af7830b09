# generated from chapters/03_ops.md — edit there

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Protocol

import sympy
import torch


def _floordiv(a, b):
    return torch.div(a, b, rounding_mode="floor")


def _truncdiv(a, b):
    return torch.div(a, b, rounding_mode="trunc")


# name -> (arity, the PyTorch function that defines it)
MATH_OPS: dict[str, tuple[int, Callable[..., torch.Tensor]]] = {
    "add": (2, torch.add),
    "sub": (2, torch.sub),
    "mul": (2, torch.mul),
    "truediv": (2, torch.true_divide),
    "floordiv": (2, _floordiv),
    "truncdiv": (2, _truncdiv),
    "remainder": (2, torch.remainder),
    "fmod": (2, torch.fmod),
    "maximum": (2, torch.maximum),
    "minimum": (2, torch.minimum),
    "pow": (2, torch.pow),
    "eq": (2, torch.eq),
    "ne": (2, torch.ne),
    "lt": (2, torch.lt),
    "le": (2, torch.le),
    "gt": (2, torch.gt),
    "ge": (2, torch.ge),
    "logical_and": (2, torch.logical_and),
    "logical_or": (2, torch.logical_or),
    "bitwise_and": (2, torch.bitwise_and),
    "bitwise_or": (2, torch.bitwise_or),
    "bitwise_xor": (2, torch.bitwise_xor),
    "bitwise_not": (1, torch.bitwise_not),
    "neg": (1, torch.neg),
    "abs": (1, torch.abs),
    "exp": (1, torch.exp),
    "exp2": (1, torch.exp2),
    "expm1": (1, torch.expm1),
    "log": (1, torch.log),
    "log2": (1, torch.log2),
    "log1p": (1, torch.log1p),
    "sqrt": (1, torch.sqrt),
    "rsqrt": (1, torch.rsqrt),
    "sin": (1, torch.sin),
    "cos": (1, torch.cos),
    "tanh": (1, torch.tanh),
    "sigmoid": (1, torch.sigmoid),
    "erf": (1, torch.erf),
    "floor": (1, torch.floor),
    "ceil": (1, torch.ceil),
    "reciprocal": (1, torch.reciprocal),
    "relu": (1, torch.relu),
    "logical_not": (1, torch.logical_not),
    "isnan": (1, torch.isnan),
    "sign": (1, torch.sign),
    "log10": (1, torch.log10),
    "trunc": (1, torch.trunc),
    "round": (1, torch.round),  # halves to even
    "signbit": (1, torch.signbit),  # of -0.0 and of a NaN with its sign bit, too
}


class OpsHandler(Protocol):
    def load(self, name: str, index: sympy.Expr) -> Any: ...

    def store(
        self, name: str, index: sympy.Expr, value: Any, mode: str | None = None
    ) -> None: ...

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> Any: ...

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> Any: ...

    # a value read from memory, as an index in [0, size) (see "Indirect indexing")
    def indirect_indexing(
        self, x: Any, size: sympy.Expr, check: bool = True, wrap_neg: bool = True
    ) -> sympy.Expr: ...

    def to_dtype(self, x: Any, dtype: torch.dtype) -> Any: ...

    def where(self, cond: Any, a: Any, b: Any) -> Any: ...

    # combine `value` over a reduction loop (chapter 5's Reduction)
    def reduction(
        self,
        dtype: torch.dtype,
        src_dtype: torch.dtype,
        reduction_type: str,
        value: Any,
    ) -> Any: ...

    def store_reduction(self, name: str, index: sympy.Expr, value: Any) -> None: ...

    # a float32 that depends on two integers alone: uniform in [0, 1), or normal
    def rand(self, seed: Any, offset: Any) -> Any: ...

    def randn(self, seed: Any, offset: Any) -> Any: ...

    # ...and one method per entry of MATH_OPS


_handler: OpsHandler | None = None


class _OpsProxy:
    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if _handler is None:
                raise RuntimeError(f"ops.{name} called with no handler installed")
            return getattr(_handler, name)(*args, **kwargs)

        call.__name__ = name
        return call

    def __repr__(self) -> str:
        return f"ops(handler={_handler!r})"


ops = _OpsProxy()


@contextlib.contextmanager
def set_handler(handler: OpsHandler) -> Iterator[OpsHandler]:
    global _handler
    previous, _handler = _handler, handler
    try:
        yield handler
    finally:
        _handler = previous


def current_handler() -> OpsHandler | None:
    return _handler


def _flat_storage(t: torch.Tensor) -> torch.Tensor:
    # from the tensor's first element to the end of its storage, as a kernel sees it
    n = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    return t.as_strided((n,), (1,), t.storage_offset())


class EvalHandler:
    """Runs a body with PyTorch on concrete indices, one element at a time."""

    def __init__(self, buffers: dict[str, torch.Tensor]):
        self.flat = {name: _flat_storage(t) for name, t in buffers.items()}
        self.buffers = buffers

    def load(self, name, index):
        return self.flat[name][int(index)]

    def store(self, name, index, value, mode=None):
        if mode == "atomic_add":
            self.flat[name][int(index)] += value
        else:
            self.flat[name][int(index)] = value

    def constant(self, value, dtype):
        return torch.tensor(value, dtype=dtype)

    def index_expr(self, expr, dtype):
        return torch.tensor(int(expr), dtype=dtype)

    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        value = int(x)
        if wrap_neg and value < 0:
            value += int(size)
        if check and not 0 <= value < int(size):
            raise IndexError(f"index {int(x)} is out of bounds for size {size}")
        return sympy.Integer(value)

    def to_dtype(self, x, dtype):
        return x.to(dtype)

    def where(self, cond, a, b):
        return torch.where(cond, a, b)

    def reduction(self, dtype, src_dtype, reduction_type, value):
        raise NotImplementedError(
            "EvalHandler runs one element: reductions need a kernel"
        )

    def rand(self, seed, offset):  # the Philox of "Random numbers", below
        return philox_rand(int(seed), int(offset))

    def randn(self, seed, offset):
        return philox_randn(int(seed), int(offset))

    def __getattr__(self, name):
        if name not in MATH_OPS:
            raise AttributeError(name)
        return MATH_OPS[name][1]


PHILOX_ROUNDS = 10
_LOW = 0xFFFFFFFF  # the low 32 bits


def philox(seed: int, offset: int) -> tuple[int, int, int, int]:
    """Philox4x32-10: four random 32-bit words from counter `offset` and key `seed`."""
    c0, c1, c2, c3 = offset & _LOW, (offset >> 32) & _LOW, 0, 0
    k0, k1 = seed & _LOW, (seed >> 32) & _LOW
    for _ in range(PHILOX_ROUNDS):
        a, b = 0xD2511F53 * c0, 0xCD9E8D57 * c2  # exact 64-bit products
        c0, c1, c2, c3 = (b >> 32) ^ c1 ^ k0, b & _LOW, (a >> 32) ^ c3 ^ k1, a & _LOW
        k0, k1 = (k0 + 0x9E3779B9) & _LOW, (k1 + 0xBB67AE85) & _LOW
    return c0, c1, c2, c3


def _uniform(word: int) -> torch.Tensor:
    x = word - (1 << 32) if word >> 31 else word  # the word as a signed int32
    x = ~x if x < 0 else x  # folded onto [0, 2**31)
    scale = torch.tensor(4.6566127342e-10, dtype=torch.float32)
    return torch.tensor(x, dtype=torch.float32) * scale


def philox_rand(seed: int, offset: int) -> torch.Tensor:
    return _uniform(philox(seed, offset)[0])


def philox_randn(seed: int, offset: int) -> torch.Tensor:
    words = philox(seed, offset)
    u1 = torch.clamp(_uniform(words[0]), min=1e-7)
    u2 = _uniform(words[1])
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(6.283185307179586 * u2)


class PrintHandler:
    """Records each op as a line `tmpN = ops.name(args)`; values are the tmp names."""

    def __init__(self):
        self.lines: list[str] = []

    def _emit(self, name: str, *args: Any) -> str:
        var = f"tmp{len(self.lines)}"
        self.lines.append(f"{var} = ops.{name}({', '.join(map(str, args))})")
        return var

    def load(self, name, index):
        return self._emit("load", name, index)

    def store(self, name, index, value, mode=None):
        extra = f", mode={mode!r}" if mode else ""
        self.lines.append(f"ops.store({name}, {index}, {value}{extra})")

    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        # a symbol named after the tmp, so index expressions print it by name
        return sympy.Symbol(self._emit("indirect_indexing", x, size), integer=True)

    def store_reduction(self, name, index, value):
        self.lines.append(f"ops.store_reduction({name}, {index}, {value})")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: self._emit(name, *args)


def body_to_str(fn: Callable[[list[sympy.Expr]], Any], index: list[sympy.Expr]) -> str:
    """Run `fn` at a symbolic `index` under a PrintHandler and return the listing."""
    handler = PrintHandler()
    with set_handler(handler):
        result = fn(index)
    if result is not None:
        handler.lines.append(f"return {result}")
    return "\n".join(handler.lines)


class NullHandler:
    """Accepts every op and computes nothing; subclass it and override a few."""

    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        # an index must stay usable in sympy arithmetic: a fresh placeholder symbol
        self._indirect = getattr(self, "_indirect", -1) + 1
        return sympy.Symbol(f"indirect{self._indirect}", integer=True)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class CountingHandler(NullHandler):
    """Counts the ops a body performs (the lowering uses it to judge a body's size)."""

    def __init__(self):
        self.count = 0
        self.reads = 0

    def load(self, name, index):
        self.reads += 1
        self.count += 1

    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        self.count += 1
        return super().indirect_indexing(x, size, check, wrap_neg)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def op(*args, **kwargs):
            self.count += 1

        return op
