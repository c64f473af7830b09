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
# # Exercise 26: the order in which a matmul's programs take their tiles
#
# **Difficulty:** medium.
#
# **You will:** write the template's *grouped order*, `tile_of(pid, tiles_m, tiles_n,
# group)`: which tile of `C` program `pid` computes, such that the programs running at
# one moment share rows of `A` and columns of `B`. Then you will count what that buys:
# `wave_footprint(order, tiles_m, tiles_n, wave)`, the number of distinct row blocks of
# `A` and column blocks of `B` that each *wave* of programs (those the GPU runs at the
# same time) reads. Checks compare your order with the numbers that the template's own
# text computes, run in Triton, for every program; compile real matmuls whose kernel
# takes its tiles in your order and compare them with eager PyTorch; and count, on the
# tile grid of a 4096 × 4096 product, what a wave of 132 programs (one per SM of an
# H100) reads in grouped order and in row order.
#
# **It builds on** chapter 25 (*Matmul templates*): the tiled kernel and its grouped
# order, `TileConfig` and its `GROUP_M`, `Operand` and `matmul_lines`, and the way
# `template_or_none` fills the template in under `max_autotune`; chapter 21 for
# `load_module`; chapter 1 for `record_compiled`.
#
# **Why it matters.** A program of a matmul reads a whole row of tiles of `A` (its
# `BLOCK_M` rows, all of `K`) and a whole column of tiles of `B`. Programs that run at
# the same time and read the same blocks find them in the L2 cache; programs that read
# different ones all go to memory. How many programs share which blocks depends only on
# the order in which program numbers are mapped to tiles, a few integer operations at
# the top of the kernel. Inductor's matmul template, `mm_template` in
# `torch/_inductor/kernel/mm.py` (its text in `kernel/templates/triton_mm.py.jinja`),
# opens with the same few lines ("re-order program ID for better L2 performance"),
# as Triton's matmul tutorial does, and its configurations (`GemmConfig` in
# `torch/_inductor/template_heuristics/triton.py`) take `group_m = 8`.

# %% [markdown]
# ## Setup
#
# `picture(order, tiles_m, tiles_n)` draws a tile grid with, in each tile, the number
# of the program that computes it (`order(pid)` is that program's tile, as
# `(pid_m, pid_n)`). Row order, program `pid` taking tile `divmod(pid, tiles_n)`, looks
# like this on a grid of 5 rows and 4 columns of tiles:

# %%
import re
import textwrap
from unittest import mock

import torch

import minductor  # noqa: F401  (before Triton is imported; the interpreter on a CPU)
from minductor import templates
from minductor.capture import record_compiled
from minductor.runtime import load_module
from minductor.templates import Operand, TileConfig, matmul_lines

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FORCED = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}


def picture(order, tiles_m: int, tiles_n: int) -> str:
    """The grid of tiles, each showing the program that computes it (? for none)."""
    grid = [["?"] * tiles_n for _ in range(tiles_m)]
    for pid in range(tiles_m * tiles_n):
        m, n = order(pid)
        if 0 <= m < tiles_m and 0 <= n < tiles_n:
            grid[m][n] = str(pid) if grid[m][n] == "?" else grid[m][n] + "+" + str(pid)
    width = max(len(s) for row in grid for s in row)
    return "\n".join(" ".join(s.rjust(width) for s in row) for row in grid)


def row_order(tiles_n: int):
    return lambda pid: divmod(pid, tiles_n)


print(picture(row_order(4), 5, 4))

# %% [markdown]
# ## Part 1: the grouped order
#
# Write `tile_of(pid, tiles_m, tiles_n, group)`: the tile `(pid_m, pid_n)` that
# program `pid` computes, on a grid of `tiles_m` rows and `tiles_n` columns of tiles.
# The rows of tiles are cut into bands of `group` rows; the last band has fewer when
# `group` does not divide `tiles_m`. Programs take the bands in order, top to bottom.
# Within a band they walk its columns from left to right, and each column from the
# band's top row down. On the grid above, with `group = 2`:
#
# ```
#  0  2  4  6
#  1  3  5  7
#  8 10 12 14
#  9 11 13 15
# 16 17 18 19
# ```
#
# The last band has one row, so it is walked as in row order. With `group = 1` the
# order *is* row order; with a `group` of at least `tiles_m`, one band holds every row
# and the order is column order. Use integer arithmetic only (`//`, `%`, `min`), no
# loop over the programs before `pid`: the same few operations run at the top of every
# program of the kernel.


# %%
def tile_of(pid: int, tiles_m: int, tiles_n: int, group: int) -> tuple[int, int]:
    # BEGIN SOLUTION
    band = group * tiles_n  # the programs of one full band
    first_m = (pid // band) * group  # the band's top row
    rows = min(tiles_m - first_m, group)  # the last band may be shorter
    return first_m + pid % rows, (pid % band) // rows
    # END SOLUTION


# %% [markdown]
# ## Part 2: what a wave reads
#
# A GPU does not run all the programs of a large grid at once: an H100 has 132 SMs,
# and with one program of a 128 × 128 tile on each, the first 132 programs run
# together, then the next 132, and so on (a simplification: in truth a new program
# starts wherever one finishes, but the programs running at any moment are still
# about `wave` consecutive numbers). Each program reads the row block `pid_m` of `A`
# and the column block `pid_n` of `B`, whole. A block that two programs of one wave
# read is read from memory once and then found in L2; one that no earlier program of
# the wave read comes from memory.
#
# Write `wave_footprint(order, tiles_m, tiles_n, wave)`: cut the programs
# `0, 1, ..., tiles_m * tiles_n - 1` into waves of `wave` consecutive programs (the
# last wave may be shorter), and return, for each wave, the pair `(a_blocks,
# b_blocks)`: how many distinct row blocks of `A` (distinct `pid_m`) and distinct
# column blocks of `B` (distinct `pid_n`) its programs read. `order(pid)` gives
# program `pid`'s tile.


# %%
def wave_footprint(order, tiles_m: int, tiles_n: int, wave: int) -> list[tuple]:
    # BEGIN SOLUTION
    programs = tiles_m * tiles_n
    found = []
    for start in range(0, programs, wave):
        tiles = [order(pid) for pid in range(start, min(start + wave, programs))]
        found.append((len({m for m, _ in tiles}), len({n for _, n in tiles})))
    return found
    # END SOLUTION


# %% [markdown]
# ## Checks
#
# `template_order` runs the first lines of the template's text, up to `pid_n`, in a
# kernel of their own that stores, for each program, its `batch`, `pid_m` and `pid_n`:
# the order of the chapter's kernel, computed by Triton (on a CPU, by its
# interpreter), not by Python.


# %%
def expect(got, expected, what):
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def program_lines(b, tiles_m, tiles_n, group, int64=False, block=16):
    """The template's text for a product of tiles_m x tiles_n tiles (of 16 x 16)."""
    m, n = tiles_m * block - 3, tiles_n * block - 5  # odd sizes, the same tiles
    return matmul_lines(
        b, m, n, 20,
        Operand("in_ptr0", (m * 20, 20, 1), 0), Operand("in_ptr1", (20 * n, n, 1), 0),
        TileConfig(block, block, 16, 4, GROUP_M=group), "ieee", int64,
    )  # fmt: skip


def template_order(b, tiles_m, tiles_n, group, int64=False):
    """[(batch, pid_m, pid_n) of each program], as the template's text computes them."""
    lines = program_lines(b, tiles_m, tiles_n, group, int64)
    last = next(k for k, line in enumerate(lines) if line.startswith("pid_n = "))
    body = lines[: last + 1] + [
        "tl.store(out_ptr + 3 * pid, batch)",
        "tl.store(out_ptr + 3 * pid + 1, pid_m)",
        "tl.store(out_ptr + 3 * pid + 2, pid_n)",
    ]
    source = "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    source += "def order_kernel(out_ptr):\n" + textwrap.indent("\n".join(body), "    ")
    kernel = load_module(source + "\n").order_kernel
    programs = b * tiles_m * tiles_n
    out = torch.full((programs, 3), -1, dtype=torch.int64, device=DEVICE)
    kernel[(programs,)](out)
    return [tuple(row) for row in out.tolist()]


def your_order(tiles_m, tiles_n, group):
    return lambda pid: tile_of(pid, tiles_m, tiles_n, group)


def band_walk(tiles_m, tiles_n, group):
    """The grouped order, walked as Part 1 describes it: band by band, each band
    column by column, each column top down. A list: the tile of each program."""
    walk = []
    for top in range(0, tiles_m, group):
        for n in range(tiles_n):
            walk += [(m, n) for m in range(top, min(top + group, tiles_m))]
    return walk


GRIDS = [  # (tiles_m, tiles_n, group)
    (5, 4, 2), (6, 4, 4), (7, 3, 3), (17, 2, 8), (8, 8, 8), (9, 5, 8), (3, 3, 1),
    (4, 6, 1), (1, 5, 8), (5, 1, 2), (1, 1, 1), (1, 1, 8), (3, 4, 8), (12, 7, 5),
]  # fmt: skip


def test_tile_of_visits_every_tile_once():
    for tiles_m, tiles_n, group in GRIDS + [(32, 32, 8), (33, 31, 8), (10, 3, 4)]:
        order = your_order(tiles_m, tiles_n, group)
        got = sorted(order(pid) for pid in range(tiles_m * tiles_n))
        expected = [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
        assert got == expected, (
            f"tiles_m={tiles_m}, tiles_n={tiles_n}, group={group}: the tiles "
            f"programs take, sorted: got {got}, expected each tile once, {expected}; "
            f"your order:\n{picture(order, tiles_m, tiles_n)}"
        )


def test_group_one_is_row_order_and_one_band_is_column_order():
    for tiles_m, tiles_n in [(3, 4), (5, 1), (1, 5), (6, 6), (7, 2)]:
        for group, name, expected_of in [
            (1, "row order", lambda p: divmod(p, tiles_n)),
            (tiles_m, "column order", lambda p: (p % tiles_m, p // tiles_m)),
            (tiles_m + 3, "column order", lambda p: (p % tiles_m, p // tiles_m)),
        ]:
            order = your_order(tiles_m, tiles_n, group)
            got = picture(order, tiles_m, tiles_n)
            expected = picture(expected_of, tiles_m, tiles_n)
            assert got == expected, (
                f"tiles_m={tiles_m}, tiles_n={tiles_n}, group={group} is {name}: "
                f"got\n{got}\nexpected\n{expected}"
            )


def test_tile_of_is_the_templates_order():
    for tiles_m, tiles_n, group in GRIDS:
        order = your_order(tiles_m, tiles_n, group)
        got = [(0, *order(pid)) for pid in range(tiles_m * tiles_n)]
        expected = template_order(1, tiles_m, tiles_n, group)
        assert got == expected, (
            f"tiles_m={tiles_m}, tiles_n={tiles_n}, group={group}: (batch, pid_m, "
            f"pid_n) of each program: got {got}, expected (the template's text) "
            f"{expected}; yours:\n{picture(order, tiles_m, tiles_n)}\nthe template's:"
            f"\n{picture(lambda p: expected[p][1:], tiles_m, tiles_n)}"
        )


def test_a_batch_repeats_the_order_per_matrix():
    for b, tiles_m, tiles_n, group, int64 in [(3, 5, 4, 2, False), (2, 6, 3, 4, True)]:
        order, tiles = your_order(tiles_m, tiles_n, group), tiles_m * tiles_n
        got = [(pid // tiles, *order(pid % tiles)) for pid in range(b * tiles)]
        expected = template_order(b, tiles_m, tiles_n, group, int64)
        expect(got, expected, f"b={b}, {tiles_m}x{tiles_n} tiles, group={group}")


# %% [markdown]
# `in_your_order` compiles matmuls whose template takes its tiles in your order: it
# fills the template in with 16 × 16 tiles and `GROUP_M = 4` (its own pass in the
# pipeline's `matmul_choices`, which answers before the others), and replaces the template's grouped-order lines by a table of
# your answers, one `tl.where` per program, so the kernel runs exactly the order
# `tile_of` returns.


# %%
TILES = TileConfig(16, 16, 16, num_warps=4, GROUP_M=4)
GROUPED = re.compile(r"^(# grouped order|first_m = |rows = |pid_m = |pid_n = )")


def with_your_order(*args, **kwargs):
    """matmul_lines, with the grouped order replaced by a table of tile_of."""
    lines = matmul_lines(*args, **kwargs)
    b, m, n, k, x, y, cfg = args[:7]
    tiles_m, tiles_n = -(-m // cfg.BLOCK_M), -(-n // cfg.BLOCK_N)
    table = ["# your order: tile_of's answer for each program", "pid_m = tile * 0",
             "pid_n = tile * 0"]  # fmt: skip
    for pid in range(tiles_m * tiles_n):
        pid_m, pid_n = tile_of(pid, tiles_m, tiles_n, cfg.GROUP_M)
        table += [
            f"pid_m = tl.where(tile == {pid}, {pid_m}, pid_m)",
            f"pid_n = tl.where(tile == {pid}, {pid_n}, pid_n)",
        ]
    first = next(k for k, line in enumerate(lines) if GROUPED.match(line))
    rest = [line for line in lines[first:] if not GROUPED.match(line)]
    return lines[:first] + table + rest


def in_your_order(fn, *args):
    """fn compiled with the template in your order and run: (result, kernel source)."""
    torch._dynamo.reset()
    with (
        templates.matmul_choices.using(lambda a, b, **how: TILES, name="your_tiles"),
        mock.patch.object(templates, "matmul_lines", with_your_order),
        record_compiled() as graphs,
    ):
        result = torch.compile(fn, backend="minductor", options=FORCED)(*args)
    sources = [g.source for g in graphs]
    kernels = [k for g in graphs for k in g.kernel_names]
    expect(len(kernels), 1, "kernels")
    expect(kernels[0].startswith("triton_tem_"), True, f"{kernels[0]} is a template")
    assert "# your order" in sources[0], f"got no table of your order in:\n{sources[0]}"
    return result, sources[0]


def randn(*shape):
    return torch.randn(shape, device=DEVICE)


def same_as_eager(got, expected, what):
    expect((got.shape, got.dtype), (expected.shape, expected.dtype), what)
    torch.testing.assert_close(
        got, expected, atol=1e-4, rtol=1e-4, msg=lambda m: f"{what}: {m}"
    )


def test_a_linear_in_your_order_matches_eager():
    # M = 83, N = 49: 6 x 4 tiles, a band of 4 rows and a shorter one of 2
    x, w, bias = randn(5 * 16 + 3, 20), randn(20, 3 * 16 + 1), randn(3 * 16 + 1)

    def fn(x, w, bias):
        return torch.relu(x @ w + bias)

    got, source = in_your_order(fn, x, w, bias)
    assert "tile == 23" in source, f"expected a table of 24 programs in:\n{source}"
    same_as_eager(got, fn(x, w, bias), "relu(x @ w + bias)")


def test_a_batch_in_your_order_matches_eager():
    a, b = randn(3, 4 * 16 + 7, 20), randn(3, 20, 5 * 16 + 2)  # 5 x 6 tiles, 3 times
    got, _ = in_your_order(torch.bmm, a, b)
    same_as_eager(got, torch.bmm(a, b), "bmm")


def test_wave_footprint_counts_distinct_blocks():
    walk = band_walk(5, 4, 2)  # the picture of Part 1, as a table
    cases = [  # (what, order, tiles_m, tiles_n, wave, expected)
        ("row order", row_order(4), 3, 4, 5, [(2, 4), (2, 4), (1, 2)]),
        ("grouped, the picture", walk.__getitem__, 5, 4, 6,
         [(2, 3), (4, 3), (3, 4), (1, 2)]),
        ("a wave per program", row_order(3), 2, 3, 1, [(1, 1)] * 6),
        ("one wave for all", walk.__getitem__, 5, 4, 132, [(5, 4)]),
        ("column order", lambda p: (p % 4, p // 4), 4, 3, 6, [(4, 2), (4, 2)]),
        ("one tile", row_order(1), 1, 1, 132, [(1, 1)]),
    ]  # fmt: skip
    for what, order, tiles_m, tiles_n, wave, expected in cases:
        got = wave_footprint(order, tiles_m, tiles_n, wave)
        expect(got, expected, f"{what}, wave={wave}: (A, B) blocks of each wave")


def test_grouped_order_reads_less_per_wave():
    """A 4096^3 product in 128 x 128 tiles: a 32 x 32 grid, waves of 132 programs."""
    tiles, wave, mib = 32, 132, 128 * 4096 * 2 / 2**20  # a block of bfloat16: 1 MiB
    rows = {}
    for name, order, walk in [
        ("row order", row_order(tiles), band_walk(tiles, tiles, 1)),
        ("grouped, 8", your_order(tiles, tiles, 8), band_walk(tiles, tiles, 8)),
    ]:
        got = wave_footprint(order, tiles, tiles, wave)
        expected = []  # counted here from the band walk, wave by wave
        for start in range(0, tiles * tiles, wave):
            some = walk[start : start + wave]
            expected.append((len({m for m, _ in some}), len({n for _, n in some})))
        expect(got, expected, f"{name}: (A, B) blocks of each wave")
        rows[name] = [a + b for a, b in got]
    print(f"{'':12}blocks of each wave (of 1 MiB)       from memory")
    for name, blocks in rows.items():
        print(f"{name:12}{str(blocks):37}{sum(blocks) * mib:5.0f} MiB")
    print(f"{'at least':49}{2 * tiles * mib:5.0f} MiB  (each block once)")
    row, grouped = sum(rows["row order"]), sum(rows["grouped, 8"])
    assert grouped < row, (
        f"blocks read in grouped order: got {grouped}, expected fewer than the "
        f"{row} of row order"
    )


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. Your order takes every tile
# once, on grids with a shorter last band, one band, bands of one row, one row or
# column of tiles, and one tile:

# %%
test_tile_of_visits_every_tile_once()

# %% [markdown]
# Bands of one row are row order; one band holding every row is column order:

# %%
test_group_one_is_row_order_and_one_band_is_column_order()

# %% [markdown]
# Your order is the template's, program by program, on the same grids:

# %%
test_tile_of_is_the_templates_order()

# %% [markdown]
# A batched product repeats the order for each matrix (`bmm`), with 32-bit and
# 64-bit program numbers:

# %%
test_a_batch_repeats_the_order_per_matrix()

# %% [markdown]
# A `Linear` of 83 × 20 by 20 × 49 with a bias and a `relu`, computed by a template
# whose 24 programs take their tiles in your order, against eager:

# %%
test_a_linear_in_your_order_matches_eager()

# %% [markdown]
# Three products of 71 × 20 by 20 × 82 (30 tiles each, a band of 4 rows and one of 1),
# in your order:

# %%
test_a_batch_in_your_order_matches_eager()

# %% [markdown]
# The blocks each wave reads, on small grids counted by hand:

# %%
test_wave_footprint_counts_distinct_blocks()

# %% [markdown]
# And the reason for the order: on the tile grid of a 4096 × 4096 × 4096 product in
# `bfloat16`, each wave of 132 programs in row order reads about 5 row blocks of `A` and
# all 32 column blocks of `B`; in bands of 8 rows it reads 8 row blocks (16 where it
# straddles two bands) and 17 column blocks. The table prints the blocks each wave
# reads from memory, under this wave model, and their total:

# %%
test_grouped_order_reads_less_per_wave()

# %% [markdown]
# ## Going further
#
# 1. Print the total for every `group` from 1 to 32. Which band height reads least
#    for waves of 132 programs on the 32 × 32 grid, and what shape do the tiles of one
#    wave make then? Compare it with the square root of 132. Count again for waves of
#    114 (the SMs of an H100 PCIe) and 108 (an A100).
# 2. The model forgets every block between waves. An H100's L2 holds 50 MB: which
#    blocks of one wave are still there for the next, in row order and in grouped
#    order? Count the blocks a wave reads that the wave before it did not.
# 3. A product with `N` much larger than `M` (a decode step: 16 rows, one row of
#    tiles) has nothing to group. What does grouped order do on a grid of one row, and
#    what would help the L2 there instead?
