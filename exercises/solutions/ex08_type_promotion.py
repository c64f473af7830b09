# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 8: type promotion and broadcasting, by hand
#
# **Difficulty:** medium.
#
# **You will:** write the two rules every pointwise lowering applies before its one
# line of math: PyTorch's elementwise type promotion, which chapter 7's `promote`
# leaves to `torch._prims_common.elementwise_dtypes`, and broadcasting, of shapes and
# of indices. Then you will put them together into `my_pointwise`, your own version
# of the chapter's helper, lower `add`, `mul`, `div`, `maximum` and `lt` with it in
# place of the chapter's lowerings, and compile functions that mix `int8` with
# `uint8`, booleans with Python numbers, `float16` with 0-d `float32` tensors, on
# shapes such as `(7, 1)` with `(1, 13)`, checking each result against eager.
#
# **It builds on** chapter 7 (*Pointwise lowerings*): `promote` and its two dtypes,
# the computation dtype and the result dtype, `broadcast_shapes`, `broadcast_loader`
# and `pointwise`; chapter 6 (*Lowering*) for the registry and `GraphLowering`'s
# check of every lowering against eager's dtype and shape; chapter 5 (*The IR*) for
# `TensorBox` and `Pointwise`.
#
# **Why it matters.** A wrong promotion is the quietest bug a compiler can have: the
# kernel runs and its numbers look plausible. `int8 + uint8` is `int16` in eager;
# computed in `int8`, `100 + 200` wraps around to `44`. `int32 * 2.5` is `float32`;
# computed in `int32`, it truncates. `GraphLowering` catches a wrong *result* dtype
# (it compares every lowering with eager's fake tensor), but not a wrong
# *computation* dtype: `a * b + c` in `float16` computed in `float16` has the right
# dtype and drifts from eager by a rounding per op. Broadcasting is as quiet: a
# size-1 dimension read at the output's index instead of at 0 reads memory that
# belongs to another tensor, or to nothing.

# %% [markdown]
# ## Setup
#
# `import minductor` must come before anything imports Triton: on a machine without
# a GPU it switches on Triton's interpreter.

# %%
import contextlib
import itertools
import os

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)

# these import Triton: after minductor, which has chosen the interpreter on a CPU
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from minductor.capture import record_compiled
from minductor.ir import FixedLayout, InputBuffer, Pointwise, TensorBox
from minductor.lowering import lowerings, register_lowering
from minductor.ops import ops
from minductor.pointwise import promote

aten = torch.ops.aten
CPU = torch.device("cpu")


def box(dtype, *size):
    """A stand-in for a tensor of this dtype and size, as a lowering receives it."""
    layout = FixedLayout.contiguous(CPU, dtype, [sympy.Integer(n) for n in size])
    return TensorBox(InputBuffer("x", layout))


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def describe(args):
    """`args` in a few words: a tensor as its dtype and size, a number as itself."""
    return ", ".join(
        f"{str(a.get_dtype()).removeprefix('torch.')}{[int(n) for n in a.get_size()]}"
        if isinstance(a, TensorBox)
        else repr(a)
        for a in args
    )


def expect_promote(args, kind, expected):
    what = f"my_promote([{describe(args)}], {kind.name}) as (compute, result)"
    expect(my_promote(args, kind), expected, what)


# %% [markdown]
# The chapter's `promote` returns two dtypes, the one to compute in and the one to
# return. Here it is on a few mixes; your function will have to agree with it on
# every mix:

# %%
i8, u8, i32 = box(torch.int8, 3), box(torch.uint8, 3), box(torch.int32, 3)
i64, h, s = box(torch.int64, 3), box(torch.float16, 3), box(torch.float32)
for name, args, kind in [
    ("int8 + uint8", [i8, u8], Kind.DEFAULT),
    ("int32 * 2.5", [i32, 2.5], Kind.DEFAULT),
    ("float16 + 0-d float32", [h, s], Kind.DEFAULT),
    ("int64 / int64", [i64, i64], Kind.INT_TO_FLOAT),
    ("bool < 3", [box(torch.bool, 3), 3], Kind.ALWAYS_BOOL),
]:
    compute, result = promote(args, kind)
    print(f"{name:22} computes in {str(compute):15} returns {result}")

# %% [markdown]
# ## Part 1: type promotion
#
# Write `my_promote(args, kind)`. `args` holds what a lowering receives: `TensorBox`es
# (their dtype is `a.get_dtype()`, their number of dimensions `len(a.get_size())`)
# and Python numbers (`bool`, `int`, `float`; a `sympy` expression, a symbolic size,
# counts as an `int`). Return `(compute, result)`, as `promote` does. The rule, from
# the docstring of `elementwise_dtypes`:
#
# 1. **The category.** Of `bool < integer < floating point`, take the highest over
#    all the arguments, numbers and tensors alike. (`True` is an `int` to Python:
#    test for `bool` first.)
# 2. **The result dtype.** Among the *tensors* of that category, promote the dtypes
#    of those with one or more dimensions together (`torch.promote_types(a, b)`
#    knows that `uint8` and `int8` meet in `int16`, and `float16` and `bfloat16` in
#    `float32`). If there are none, promote those with zero dimensions; if there are
#    none of those either (`int32 * 2.5`: no float tensor at all), take the
#    category's default: `torch.bool`, `torch.int64`, or `torch.get_default_dtype()`.
# 3. **The kind.** `DEFAULT` computes in the result dtype, except that `float16` and
#    `bfloat16` compute in `float32` ("op math"); `NO_OPMATH` computes in the result
#    dtype itself. `INT_TO_FLOAT` first turns a `bool` or integer result into the
#    default float dtype. `ALWAYS_BOOL` computes as `DEFAULT` does and returns
#    `torch.bool`. `BOOL_TO_LONG` turns a `bool` result into `torch.int64`, for
#    computing too.


# %%
def my_promote(args, kind):
    # BEGIN SOLUTION
    def category(a):
        dtype = a.get_dtype() if isinstance(a, TensorBox) else None
        if isinstance(a, bool) or dtype == torch.bool:
            return 0
        if isinstance(a, (int, sympy.Expr)) or (dtype and not dtype.is_floating_point):
            return 1
        return 2

    highest = max(category(a) for a in args)
    tensors = [a for a in args if isinstance(a, TensorBox) and category(a) == highest]
    dims = [a.get_dtype() for a in tensors if len(a.get_size()) > 0]
    zero_dims = [a.get_dtype() for a in tensors if len(a.get_size()) == 0]
    candidates = dims or zero_dims
    if candidates:
        result = candidates[0]
        for dtype in candidates[1:]:
            result = torch.promote_types(result, dtype)
    else:
        result = [torch.bool, torch.int64, torch.get_default_dtype()][highest]
    if kind is Kind.INT_TO_FLOAT and not result.is_floating_point:
        result = torch.get_default_dtype()
    if kind is Kind.BOOL_TO_LONG and result == torch.bool:
        result = torch.int64
    low = (torch.float16, torch.bfloat16)
    compute = torch.float32 if result in low and kind is not Kind.NO_OPMATH else result
    if kind is Kind.ALWAYS_BOOL:
        result = torch.bool
    return compute, result
    # END SOLUTION


# %% [markdown]
# The checks: a few cases written out, then every pair of dtypes (with and without
# dimensions, and with each kind of Python number), then random mixes of up to four
# arguments, each compared with the chapter's `promote`.

# %%
DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
]  # fmt: skip
KINDS = [Kind.DEFAULT, Kind.NO_OPMATH, Kind.INT_TO_FLOAT, Kind.ALWAYS_BOOL,
         Kind.BOOL_TO_LONG]  # fmt: skip
f16, f32, i64 = torch.float16, torch.float32, torch.int64


def test_promotion_cases():
    D = Kind.DEFAULT
    b1, u8, i8 = box(torch.bool, 3), box(torch.uint8, 3), box(torch.int8, 3)
    i32, h = box(torch.int32, 3), box(f16, 3)
    expect_promote([i8, u8], D, (torch.int16, torch.int16))
    expect_promote([i32, 2.5], D, (f32, f32))
    expect_promote([h, box(f32)], D, (f32, f16))  # a 0-d tensor promotes weakly
    expect_promote([i32, box(torch.float64)], D, (torch.float64, torch.float64))
    expect_promote([b1, 3], D, (i64, i64))
    expect_promote([i8, 3], D, (torch.int8, torch.int8))  # so does a number
    expect_promote([b1, True], D, (torch.bool, torch.bool))
    expect_promote([h, box(torch.bfloat16, 2, 3)], D, (f32, f32))
    expect_promote([box(i64, 3), box(i64, 3)], Kind.INT_TO_FLOAT, (f32, f32))
    expect_promote([h, 1], Kind.ALWAYS_BOOL, (f32, torch.bool))
    expect_promote([h, 0.5], Kind.NO_OPMATH, (f16, f16))
    expect_promote([b1, 2], Kind.BOOL_TO_LONG, (i64, i64))
    expect_promote([i32, sympy.Symbol("s0")], D, (torch.int32, torch.int32))


def test_promotion_of_every_pair():
    numbers = [True, 3, 2.5]
    for a, b, kind in itertools.product(DTYPES, DTYPES, KINDS):
        for da, db in [(1, 1), (1, 0), (0, 1), (0, 0)]:
            args = [box(a, *[2] * da), box(b, *[3] * db)]
            expect_promote(args, kind, promote(args, kind))
        for number in numbers:
            args = [box(a, 2), number]
            expect_promote(args, kind, promote(args, kind))


tensor = st.tuples(st.sampled_from(DTYPES), st.integers(0, 2))
argument = st.one_of(
    tensor.map(lambda t: box(t[0], *[2] * t[1])),
    st.sampled_from([False, True, 0, 7, -1, 0.5, 2.0]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(DTYPES),
    st.lists(argument, min_size=0, max_size=3),
    st.sampled_from(KINDS),
)
def test_promotion_of_any_mix(first, rest, kind):
    args = [box(first, 4), *rest]
    expect_promote(args, kind, promote(args, kind))


# %% [markdown]
# ## Part 2: broadcasting
#
# Write `my_broadcast_shapes(*shapes)`: the shape that tensors of these shapes
# broadcast to. Align the shapes at their last dimension; missing leading dimensions
# count as 1; in each dimension the sizes must be equal, or 1 (which stretches to the
# other). Raise `RuntimeError` when they are neither. Sizes are numbers (ints or
# `sympy.Integer`s); return a tuple.
#
# Then write `broadcast_index(index, size, shape)`: given the index of an element of
# the broadcast result (`index`, one entry per dimension of `shape`), the index of the
# element to read in a tensor of size `size`. Drop the leading entries the tensor
# does not have; where the tensor's size is 1, read at 0.


# %%
def my_broadcast_shapes(*shapes):
    # BEGIN SOLUTION
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for k, size in enumerate(shape, start=ndim - len(shape)):
            if size == 1 or out[k] == size:
                continue
            if out[k] != 1:
                raise RuntimeError(f"shapes {shapes} do not broadcast")
            out[k] = size
    return tuple(out)
    # END SOLUTION


def broadcast_index(index, size, shape):
    # BEGIN SOLUTION
    skip = len(shape) - len(size)
    return [0 if size[k] == 1 else index[skip + k] for k in range(len(size))]
    # END SOLUTION


# %%
def _some_ones(full):
    """Shapes that broadcast to `full`: a suffix of it, some sizes replaced by 1."""
    return st.integers(0, len(full)).flatmap(
        lambda drop: st.lists(
            st.booleans(), min_size=len(full) - drop, max_size=len(full) - drop
        ).map(lambda ones: [1 if o else n for o, n in zip(ones, full[drop:])])
    )


shape_lists = st.lists(st.integers(1, 4), max_size=4).flatmap(
    lambda full: st.lists(_some_ones(full), min_size=1, max_size=4)
)


@settings(max_examples=200, deadline=None)
@given(shape_lists)
def test_broadcast_shapes(shapes):
    got = my_broadcast_shapes(*[[sympy.Integer(n) for n in s] for s in shapes])
    expected = tuple(torch.broadcast_shapes(*shapes))
    expect(tuple(int(n) for n in got), expected, f"my_broadcast_shapes of {shapes}")


def test_shapes_that_do_not_broadcast():
    for shapes in [[(3,), (4,)], [(2, 1), (1, 3), (3, 1)], [(5, 2), (2, 5)]]:
        try:
            my_broadcast_shapes(*shapes)
        except NotImplementedError:
            raise
        except RuntimeError:
            continue
        raise AssertionError(f"{shapes} broadcast, but eager refuses them")


def test_broadcast_index():
    for size, shape in [((3, 1), (2, 3, 4)), ((1,), (5,)), ((), (2, 3)),
                        ((2, 1, 4), (2, 3, 4)), ((1, 1), (1, 1))]:  # fmt: skip
        t = torch.arange(max(1, torch.Size(size).numel())).view(size)
        wide = t.expand(shape)
        for index in itertools.product(*map(range, shape)):
            read = broadcast_index(list(index), size, shape)
            call = f"broadcast_index({list(index)}, {size}, {shape}) = {read}"
            expect(len(read), len(size), f"length of {call}")
            expect(int(t[tuple(read)]), int(wide[index]), f"the element read by {call}")


# %% [markdown]
# ## Part 3: the helper, and lowerings made with it
#
# Write `my_pointwise(fn, args, kind)`, which returns a `TensorBox` holding a
# `Pointwise(device, dtype, inner_fn, ranges)` (no `origins` needed):
#
# * `compute, result = my_promote(args, kind)`; the ranges are the broadcast of the
#   tensors' sizes (`a.get_size()`), the device is that of the tensors (they share
#   one here: `a.get_device()`);
# * `inner_fn(index)` loads every tensor at its broadcast index (`a.make_loader()`
#   returns a function of an index), turns every number into
#   `ops.constant(value, compute)`, converts each loaded value whose dtype is not
#   `compute` with `ops.to_dtype(value, compute)`, applies `fn` to the values, and
#   converts what `fn` returns to `result` if it is not already of that dtype (`fn`
#   returns `torch.bool` for `ALWAYS_BOOL`, and `compute` otherwise).
#
# Make every `ops.*` call inside `inner_fn`: `ops` has a handler only while a body
# runs.


# %%
def my_pointwise(fn, args, kind=Kind.DEFAULT):
    # BEGIN SOLUTION
    compute, result = my_promote(args, kind)
    tensors = [a for a in args if isinstance(a, TensorBox)]
    shape = my_broadcast_shapes(*[a.get_size() for a in tensors])
    device = tensors[0].get_device()

    def loader(a):
        if not isinstance(a, TensorBox):
            return lambda index: ops.constant(a, compute)
        load, size = a.make_loader(), a.get_size()

        def load_one(index):
            value = load(broadcast_index(index, size, shape))
            return value if a.get_dtype() == compute else ops.to_dtype(value, compute)

        return load_one

    loaders = [loader(a) for a in args]
    natural = torch.bool if kind is Kind.ALWAYS_BOOL else compute

    def inner_fn(index):
        value = fn(*[load(index) for load in loaders])
        return value if natural == result else ops.to_dtype(value, result)

    return TensorBox(Pointwise(device, result, inner_fn, shape))
    # END SOLUTION


# %% [markdown]
# The lowerings, given: each is one call of your helper. `registered()` puts them in
# the registry in place of chapter 7's for the duration of a check, and restores the
# registry afterwards, so that running this notebook leaves minductor as it found it.
# (Chapter 7's `add` also makes `True + True` a logical or; yours need not: the checks
# add no two booleans.)

# %%
MY_LOWERINGS = {
    aten.add: lambda a, b: my_pointwise(ops.add, [a, b]),
    aten.mul: lambda a, b: my_pointwise(ops.mul, [a, b]),
    aten.div: lambda a, b: my_pointwise(ops.truediv, [a, b], Kind.INT_TO_FLOAT),
    aten.maximum: lambda a, b: my_pointwise(ops.maximum, [a, b]),
    aten.lt: lambda a, b: my_pointwise(ops.lt, [a, b], Kind.ALWAYS_BOOL),
}


@contextlib.contextmanager
def registered():
    saved = dict(lowerings)
    for op, lowering in MY_LOWERINGS.items():
        register_lowering(op)(lowering)
    try:
        yield
    finally:
        lowerings.clear()
        lowerings.update(saved)


def check(fn, *args, kernels=1):
    """Compile fn with your lowerings; compare every output with eager's, and count
    the kernels (outputs of other shapes, or that share no input, are not fused)."""
    with registered():
        out, graph = compile_once(fn, *args)
    want = fn(*args)
    for k, (got, expected) in enumerate(zip(out, want, strict=True)):
        expect(got.dtype, expected.dtype, f"dtype of output {k}")
        torch.testing.assert_close(got, expected, equal_nan=True)
    expect(graph.fallbacks, [], "fallbacks")
    expect(len(graph.kernel_names), kernels, f"kernels ({graph.kernel_names})")
    return graph


def test_integers_of_two_signs():
    a = torch.randint(-100, 100, (7, 1), dtype=torch.int8)
    u = torch.randint(0, 256, (1, 13), dtype=torch.uint8)
    check(lambda a, u: (a + u, a * u, torch.maximum(a, u)), a, u)  # int16, no wrap


def test_numbers_and_0d_tensors():
    x = torch.randint(-9, 9, (5, 1, 3), dtype=torch.int32)
    s = torch.tensor(0.25)  # a 0-d float32 tensor
    k = torch.randint(-5, 5, (5,), dtype=torch.int8)
    n = torch.tensor(100)  # a 0-d int64 tensor: int8 stays int8
    check(lambda x, s, k, n: (x * 2.5 + s, x + 3, k + n), x, s, k, n, kernels=2)


def test_true_division_of_integers():
    a = torch.randint(-20, 20, (3, 1, 5))
    b = torch.randint(1, 9, (4, 1)) * torch.tensor([[1], [-1], [1], [-1]])
    check(lambda a, b: (a / b, a / 7), a, b, kernels=2)  # int64 / int64: float32


def test_booleans_and_comparisons():
    b = torch.tensor([True])
    i = torch.randint(-5, 5, (6, 7), dtype=torch.int32)
    m = torch.rand(6, 7) > 0.5
    def fn(b, i, m):
        return torch.maximum(b, i), b < i, m * True, m + 3

    check(fn, b, i, m, kernels=2)


def test_half_precision():
    h = torch.randn(33, 1, dtype=torch.float16)
    g = torch.randn(1, 17, dtype=torch.bfloat16)
    s = torch.tensor(3.0)  # 0-d float32: h * s stays float16
    graph = check(lambda h, g, s: (h * g + h, h * s + 1e-3, h / 3), h, g, s, kernels=2)
    # float16 is computed in float32, and converted back where eager rounds
    assert "tl.float32" in graph.source, f"no tl.float32 in:\n{graph.source}"


# %% [markdown]
# ## Run the checks
#
# Parts 1 and 2 run in a moment; part 3 compiles five small functions and runs their
# kernels in Triton's interpreter (on a CPU). One check a cell; a failure says what
# it compared.
#
# Part 1. Promotion, on cases written out:

# %%
test_promotion_cases()

# %% [markdown]
# Promotion of every pair of dtypes, every kind, with and without dimensions, and
# with each kind of Python number, against `promote`:

# %%
test_promotion_of_every_pair()

# %% [markdown]
# Promotion of random mixes of up to four arguments, against `promote`:

# %%
test_promotion_of_any_mix()

# %% [markdown]
# Part 2. `my_broadcast_shapes` on random shapes that broadcast:

# %%
test_broadcast_shapes()

# %% [markdown]
# ... and `RuntimeError` on shapes that do not:

# %%
test_shapes_that_do_not_broadcast()

# %% [markdown]
# `broadcast_index` reads the element that `expand` shows at every position:

# %%
test_broadcast_index()

# %% [markdown]
# Part 3. `int8` with `uint8`: `int16`, no wrap-around:

# %%
test_integers_of_two_signs()

# %% [markdown]
# Python numbers and 0-d tensors promote weakly:

# %%
test_numbers_and_0d_tensors()

# %% [markdown]
# `int64 / int64` is a float32 division:

# %%
test_true_division_of_integers()

# %% [markdown]
# Booleans mixed with integers and numbers, and a comparison:

# %%
test_booleans_and_comparisons()

# %% [markdown]
# `float16` and `bfloat16`, computed in float32:

# %%
test_half_precision()

# %% [markdown]
# ## What to try next
#
# 1. Make `my_promote` compute `float16` in `float16` (return the result dtype as the
#    computation dtype) and run `test_half_precision`: which checks still pass, and
#    how far from eager is `h * g + h`? Why does `GraphLowering` not notice?
# 2. `where(cond, a, b)` promotes `a` and `b` but not `cond`, and `add(a, b,
#    alpha=2)` does not promote with `alpha`. Lower both with `my_pointwise`: what
#    must it accept so that an argument takes part in broadcasting but not in
#    promotion?
# 3. With dynamic shapes, sizes are symbols: `(s0, 1)` with `(1, s1)`. Which of your
#    comparisons in `my_broadcast_shapes` can no longer be answered, and what does
#    chapter 7's `broadcast_shapes` do there instead?
