"""Pointwise kernels tiled in two dimensions where their reads and writes disagree on
which loop is contiguous (chapter 17, "Tiles in two dimensions")."""

from types import SimpleNamespace

import pytest
import sympy
import torch
from helpers import DEVICES, randn

from minductor.capture import record_compiled
from minductor.codegen_triton import TILE_SIDE, plan_tile, tile_split
from minductor.dependencies import MemoryDep
from minductor.sizevars import FloorDiv

pytestmark = [pytest.mark.e2e, pytest.mark.ch17]


def compiled_sources(fn, *args):
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    expected = fn(*args)
    assert (out.dtype, out.shape, out.stride()) == (
        expected.dtype,
        expected.shape,
        expected.stride(),
    )
    torch.testing.assert_close(out, expected, atol=1e-3, rtol=1e-3)
    return [g.source for g in graphs]


TILED = {
    "add a transpose": (lambda x, y: y + x.t(), [(65, 33), (33, 65)]),
    "copy a transpose": (lambda x: x.t().contiguous(), [(17, 40)]),
    "permute a 3-d": (lambda a, b: b + a.permute(0, 2, 1), [(2, 17, 33), (2, 33, 17)]),
    "to channels-last": (
        lambda x: x.contiguous(memory_format=torch.channels_last) * 2,
        [(2, 19, 5, 7)],
    ),
    "half, odd sizes": (lambda x, y: (y + x.t()).half(), [(129, 31), (31, 129)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(TILED))
def test_a_transposing_kernel_is_tiled_and_matches_eager(case, device):
    fn, shapes = TILED[case]
    args = [randn(*s, device=device) for s in shapes]
    (source,) = compiled_sources(fn, *args)
    assert "yindex = " in source and "xmask = (yindex < " in source


@pytest.mark.parametrize("device", DEVICES)
def test_a_bool_transpose_is_tiled_too(device):
    x = torch.rand(40, 24, device=device) > 0.5
    (source,) = compiled_sources(lambda x: x.t() & ~x.t(), x)
    (source,) = compiled_sources(lambda x: x.t().contiguous(), x)
    assert "yindex" in source


UNTILED = {
    "contiguous": (lambda x, y: x + y, [(33, 65), (33, 65)]),
    "broadcast row": (lambda x, b: x * b, [(33, 65), (65,)]),
    "broadcast column": (lambda x, s: x * s, [(33, 65), (33, 1)]),
    "a side under 16": (lambda x: x.t().contiguous(), [(40, 9)]),
    "one dimension": (lambda x: x.flip(0) + 1, [(300,)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(UNTILED))
def test_kernels_whose_accesses_agree_keep_one_dimension(case, device):
    fn, shapes = UNTILED[case]
    args = [randn(*s, device=device) for s in shapes]
    for source in compiled_sources(fn, *args):
        assert "yindex" not in source


def _node(writes, reads):
    member = SimpleNamespace(writes=frozenset(writes), reads=frozenset(reads))
    return SimpleNamespace(snodes=(member,))


x0, x1, x2 = (sympy.Symbol(f"x{d}", integer=True, nonnegative=True) for d in range(3))
SIZES = (4, 33, 65)  # outermost first: x2, x1, x0


@pytest.mark.parametrize(
    "write, read, expected",
    [
        (x0 + 65 * x1, 33 * x0 + x1, 1),  # read along x1: columns are x0
        (x0 + 65 * x1 + 2145 * x2, x2 + 4 * x0 + 260 * x1, 2),  # along x2: x0 and x1
        (x0 + 65 * x1, x0 + 65 * x1, None),  # agree
        (x0 + 65 * x1, sympy.Integer(7), None),  # one address for every lane
        (x0 + 65 * x1, x1, None),  # a per-row value, broadcast along x0: no tile
        (x0 + 65 * x1, 2 * x0 + 130 * x1, None),  # strided, but along no loop by one
        (65 * x0 + x1, x0 + 33 * x1, None),  # the write is not contiguous along x0
        (x0 + 65 * x1, FloorDiv(x0, 2) + x1, None),  # not affine: no stride to go by
    ],
)
def test_the_split_is_the_innermost_loop_a_read_is_contiguous_along(
    write, read, expected
):
    node = _node({MemoryDep("buf0", write)}, {MemoryDep("a", read)})
    assert tile_split(node, SIZES) == expected


def test_an_indirect_read_is_never_tiled():
    indirect = sympy.Symbol("indirect0", integer=True)
    node = _node({MemoryDep("buf0", x0 + 65 * x1)}, {MemoryDep("a", 33 * x0 + x1),
                 MemoryDep("b", indirect * 65 + x0)})  # fmt: skip
    assert tile_split(node, SIZES) is None


def test_the_first_split_over_all_reads_wins():
    node = _node(
        {MemoryDep("buf0", x0 + 65 * x1 + 2145 * x2)},
        {MemoryDep("a", x2 + 4 * x0 + 260 * x1), MemoryDep("b", 33 * x0 + x1)},
    )
    assert tile_split(node, SIZES) == 1


def test_the_plan_keeps_tiles_that_pay():
    from minductor.codegen_triton import KernelKind

    node = _node({MemoryDep("buf0", x0 + 65 * x1)}, {MemoryDep("a", 33 * x0 + x1)})

    def kernel(sizes):
        return SimpleNamespace(kind=KernelKind.POINTWISE, sizes=sizes)

    tile = plan_tile(node, kernel((33, 65)), interpret=False)
    assert (tile.ysize, tile.xsize, tile.yblock, tile.xblock) == (33, 65, 64, 64)
    assert tile.num_warps == 8
    assert plan_tile(node, kernel((TILE_SIDE - 1, 65)), interpret=False) is None
    assert plan_tile(node, kernel((s := sympy.Symbol("s0"), 65)), False) is None, s
    reduction = SimpleNamespace(kind=KernelKind.PERSISTENT, sizes=(33, 65))
    assert plan_tile(node, reduction, interpret=False) is None


@pytest.mark.cuda
def test_a_large_transposed_add_on_the_gpu_matches_eager():
    x, y = (
        torch.randn(4099, 2050, device="cuda"),
        torch.randn(2050, 4099, device="cuda"),
    )
    (source,) = compiled_sources(lambda x, y: y + x.t(), x, y)
    assert "yindex" in source
