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

# generated from exercises/solutions/ex32_tile_split.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 32: when a pointwise kernel needs tiles in two dimensions
#
# **Difficulty:** medium.
#
# **You will:** write `tile_split(node, sizes)`, the decision behind a two-dimensional
# tile: from the addresses a fused pointwise kernel reads and writes, decide whether a
# block of consecutive elements would read some input across memory (a transpose, a
# permute, a copy to channels-last), and if so, how many of the innermost loops the
# tile's columns take. Checks compare your answer with hand-made index sets on both
# sides of each rule, then compile transposing copies, permutes and channels-last
# conversions with your decision in place of the chapter's, in Triton (its interpreter
# on a CPU), and compare them with eager PyTorch and with the kernel's text.
#
# **It builds on** chapter 17 (*Generating Triton kernels*): "Tiles in two dimensions",
# `plan_tile` and the `Tile` kind; chapter 14 for `MemoryDep` and the nodes' `reads`
# and `writes`; chapter 4 for `affine_coefficients`; chapter 1 for `record_compiled`.
#
# **Why it matters.** A GPU loads memory for a warp of 32 lanes at a time, and a load is
# fast when the lanes' addresses are neighbours (*coalesced*). `y + x.t()` writes its
# result along rows but reads `x` down its columns: with one block of consecutive
# elements per program, every lane of a warp reads a different memory segment, and the
# kernel runs several times slower than the same bytes moved in order. A tile reads `x`
# along the loop it is contiguous in and writes along the other; the decision is made
# from the index expressions alone, before any code is printed. Inductor's version is
# `SIMDScheduling.select_tiling` in `torch/_inductor/codegen/simd.py`.

# %% [markdown]
# ## Setup
#
# A kernel's loops are named `x0` (innermost), `x1`, `x2`, ...; `sizes` lists them
# outermost first. `strides(index, n)` gives, for an affine index, the stride of each of
# the `n` innermost loop variables (`[stride of x0, stride of x1, ...]`), or `None` for
# each when the index is not affine (a floor division, a modulo):

# %%
from types import SimpleNamespace
from unittest import mock

import sympy
import torch

import minductor  # noqa: F401  (before Triton is imported; the interpreter on a CPU)
from minductor import codegen_triton
from minductor.capture import record_compiled
from minductor.dependencies import MemoryDep, is_indirect
from minductor.sizevars import FloorDiv, affine_coefficients

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def strides(index: sympy.Expr, n: int) -> list:
    """The stride of x0, x1, ..., x(n-1) in index; [None] * n if it is not affine."""
    by_name = {s.name: s for s in index.free_symbols}
    variables = [by_name.get(f"x{d}", sympy.Symbol(f"x{d}")) for d in range(n)]
    affine = affine_coefficients(index, variables)
    return list(affine[1]) if affine is not None else [None] * n


x0, x1, x2 = (sympy.Symbol(f"x{d}", integer=True, nonnegative=True) for d in range(3))
print(strides(x0 + 65 * x1, 2), strides(33 * x0 + x1, 2), strides(FloorDiv(x0, 2), 2))

# %% [markdown]
# ## Your part
#
# `node.snodes` are the fused kernel's members; each has `writes` and `reads`, sets of
# dependencies, of which only `MemoryDep`s (`.name`, `.index`) have addresses. Return
# `None` (one dimension will do) when
#
# * some `MemoryDep` has an indirect index (`is_indirect(dep.index)`): its addresses
#   are data, so no stride says where it reads;
# * some write is not contiguous along `x0` (its stride along `x0` is not 1): the tile
#   writes along its columns, so every write must;
# * no read asks for a tile.
#
# A read *asks* for a tile when it moves across memory along `x0` (its stride along
# `x0` is known and is neither 0 nor 1) and is contiguous along some other loop `x_d`
# (stride 1 for `d >= 1`). It asks for a split of `d`: the tile's columns are the `d`
# innermost loops. A read whose stride along `x0` is 0 (a per-row value, broadcast
# across the columns) costs one address per row however the lanes lie, and asks for
# nothing. When several reads ask, the smallest `d` wins.

# %%
def tile_split(node, sizes: tuple):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks


# %%
def expect(got, expected, what):
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def node_of(writes, reads):
    """A one-member node that writes and reads these MemoryDeps."""
    member = SimpleNamespace(writes=frozenset(writes), reads=frozenset(reads))
    return SimpleNamespace(snodes=(member,))


SIZES = (4, 33, 65)  # x2, x1, x0


def test_the_split_on_both_sides_of_each_rule():
    out = MemoryDep("buf0", x0 + 65 * x1)
    cases = [  # (what, the read's index, expected)
        ("x read down its columns (x.t())", 33 * x0 + x1, 1),
        ("the same index as the write", x0 + 65 * x1, None),
        ("one address for every lane", sympy.Integer(7), None),
        ("a per-row value, broadcast along x0", x1, None),
        ("strided by 2, contiguous along nothing", 2 * x0 + 130 * x1, None),
        ("not affine", FloorDiv(x0, 2) + x1, None),
    ]
    for what, read, expected in cases:
        got = tile_split(node_of({out}, {MemoryDep("a", read)}), SIZES)
        expect(got, expected, what)
    written_across = node_of({MemoryDep("buf0", 65 * x0 + x1)}, {MemoryDep("a", x0 + 33 * x1)})
    expect(tile_split(written_across, SIZES), None, "a write not contiguous along x0")
    indirect = sympy.Symbol("indirect0", integer=True)
    gather = node_of({out}, {MemoryDep("a", 33 * x0 + x1), MemoryDep("b", 65 * indirect + x0)})
    expect(tile_split(gather, SIZES), None, "an indirect read beside a transposed one")


def test_three_loops_and_the_smallest_split():
    out = MemoryDep("buf0", x0 + 65 * x1 + 2145 * x2)
    along_x2 = MemoryDep("a", x2 + 4 * x0 + 260 * x1)  # contiguous along x2
    along_x1 = MemoryDep("b", 33 * x0 + x1 + 2145 * x2)  # contiguous along x1
    expect(tile_split(node_of({out}, {along_x2}), SIZES), 2, "a read along x2")
    expect(tile_split(node_of({out}, {along_x1}), SIZES), 1, "a read along x1")
    both = node_of({out}, {along_x2, along_x1})
    expect(tile_split(both, SIZES), 1, "two reads asking for 2 and 1")
    members = SimpleNamespace(snodes=(node_of({out}, {along_x2}).snodes[0],
                                      node_of({out}, {along_x1}).snodes[0]))  # fmt: skip
    expect(tile_split(members, SIZES), 1, "two members asking for 2 and 1")


def compiled_with_yours(fn, *args):
    """fn compiled with your tile_split in place of the chapter's: (out, sources)."""
    torch._dynamo.reset()
    with (
        mock.patch.object(codegen_triton, "tile_split", tile_split),
        record_compiled() as graphs,
    ):
        out = torch.compile(fn, backend="minductor")(*args)
    return out, [g.source for g in graphs]


def test_transposing_kernels_are_tiled_by_your_split():
    cases = {  # name: (fn, input shapes)
        "y + x.t()": (lambda x, y: y + x.t(), [(65, 33), (33, 65)]),
        "a transposed copy": (lambda x: x.t().contiguous(), [(17, 40)]),
        "b + a.permute(0, 2, 1)": (lambda a, b: b + a.permute(0, 2, 1),
                                   [(2, 17, 33), (2, 33, 17)]),
        "to channels-last": (lambda x: x.contiguous(memory_format=torch.channels_last) * 2,
                             [(2, 19, 5, 7)]),
    }  # fmt: skip
    for name, (fn, shapes) in cases.items():
        args = [torch.randn(*s, device=DEVICE) for s in shapes]
        out, sources = compiled_with_yours(fn, *args)
        expected = fn(*args)
        torch.testing.assert_close(out, expected, msg=name)
        expect(out.stride(), expected.stride(), f"{name}: strides")
        expect("yindex = " in sources[0], True, f"{name}: a tile (yindex) in the kernel")


def test_kernels_whose_accesses_agree_keep_one_dimension():
    cases = {
        "x + y": (lambda x, y: x + y, [(33, 65), (33, 65)]),
        "x * row": (lambda x, b: x * b, [(33, 65), (65,)]),
        "x * column": (lambda x, s: x * s, [(33, 65), (33, 1)]),
    }
    for name, (fn, shapes) in cases.items():
        args = [torch.randn(*s, device=DEVICE) for s in shapes]
        out, sources = compiled_with_yours(fn, *args)
        torch.testing.assert_close(out, fn(*args), msg=name)
        expect(any("yindex" in s for s in sources), False, f"{name}: a tile")


# %% [markdown]
# Your split on hand-made indices, on both sides of each rule: a transposed read asks
# for a tile, a broadcast or a strided read does not, a write across memory or an
# indirect read forbids one:

# %% tags=["raises-exception"]
test_the_split_on_both_sides_of_each_rule()

# %% [markdown]
# Three loops: a read contiguous along `x2` asks for a split of 2, one along `x1` for
# 1, and the smallest wins, within a member and across members:

# %% tags=["raises-exception"]
test_three_loops_and_the_smallest_split()

# %% [markdown]
# Transposes, permutes and a copy to channels-last, compiled with your split: tiled, and
# equal to eager:

# %% tags=["raises-exception"]
test_transposing_kernels_are_tiled_by_your_split()

# %% [markdown]
# And kernels whose reads and writes agree keep one dimension:

# %% tags=["raises-exception"]
test_kernels_whose_accesses_agree_keep_one_dimension()

# %% [markdown]
# ## Going further
#
# 1. The smallest split wins. Build a kernel with two reads, one contiguous along `x1`
#    and one along `x2`: which of them stays uncoalesced under the tile the rule picks,
#    and what would a tile in three dimensions need?
# 2. `plan_tile` refuses a side under 16 elements. Time `x.t().contiguous()` for
#    `(4096, 8)` on a GPU, tiled and not: is 16 the right edge?
# 3. Inductor weighs each candidate split by the bytes it makes coalesced
#    (`codegen/simd_kernel_features.py`). Write that score for the two-read kernel of
#    question 1, and say which split it picks.
