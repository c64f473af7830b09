"""The persistent template (chapter 26): tensor descriptors read each operand by rows
or by columns, a few programs walk the tiles, and an input whose memory starts off a
16-byte boundary is copied first. Against eager, and the descriptor rule against what
a descriptor really reads."""

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, INTERPRET, KERNEL_DEVICE, TOL, compile_and_compare, randn

from minductor import select_algorithm as sa
from minductor.ir import FixedLayout, as_exprs
from minductor.runtime import aligned, load_module
from minductor.templates import Operand

pytestmark = [pytest.mark.e2e, pytest.mark.ch26]

ALWAYS = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON",
          "persistent_tma_matmul": "always"}  # fmt: skip


def _dtypes(device):
    # the interpreter reads bfloat16 descriptors wrong: there the form is not taken
    return [torch.float16, torch.float32] + (
        [torch.bfloat16] if device == "cuda" else []
    )


def _persistent(sources) -> bool:
    return any("tl.make_tensor_descriptor" in s for s in sources)


# --- the descriptor rule, against what a descriptor reads -------------------------

_READ = """
import triton
import triton.language as tl

@triton.jit
def kernel(in_ptr0, out_ptr0):
    desc = {made}
    block = desc.load([0, 0]){t}
    r = tl.arange(0, {rows})
    c = tl.arange(0, {cols})
    tl.store(out_ptr0 + r[:, None] * {cols} + c[None, :], block)
"""


def _layouts():
    """(rows, cols, strides, offset), fp32, over a few ways of storing a matrix."""
    for rows, cols in [(8, 12), (1, 8), (8, 1), (1, 1), (5, 6)]:
        yield rows, cols, (cols, 1), 0  # by rows
        yield rows, cols, (1, rows), 0  # by columns
        yield rows, cols, (cols + 4, 1), 4  # padded rows, an aligned offset
        yield rows, cols, (cols, 1), 1  # an offset off 16 bytes
        yield rows, cols, (2 * cols, 2), 0  # no unit stride


@pytest.mark.skipif(not INTERPRET, reason="reads descriptors in the interpreter")
@pytest.mark.parametrize("rows, cols, stride, offset", list(_layouts()))
def test_a_readable_view_reads_through_its_descriptor_as_the_tensor_it_is(
    rows, cols, stride, offset
):
    view = FixedLayout(torch.device("cpu"), torch.float32, as_exprs((rows, cols)),
                       as_exprs(stride), offset)  # fmt: skip
    by_rows = sa.read_by_rows(rows, cols, *stride)
    inner = (cols if by_rows else rows) if by_rows is not None else 0
    outer = (stride[0] if by_rows else stride[1]) if by_rows is not None else 0
    outers = (rows if by_rows else cols) if by_rows is not None else 0
    expected = (by_rows is not None and inner * 4 >= 16 and offset * 4 % 16 == 0
                and (outers == 1 or outer * 4 % 16 == 0))  # fmt: skip
    assert sa.readable(view) == expected
    if not expected:
        return
    span = offset + 1 + (rows - 1) * stride[0] + (cols - 1) * stride[1]
    storage = torch.randn(span + 64)
    tensor = torch.as_strided(storage, (rows, cols), stride, offset)
    pad = 16  # block dims of at least 16: a descriptor's rows hold 16 bytes or more
    made, by_rows = sa.descriptor(Operand("in_ptr0", (0, *stride), offset), rows, cols,
                                  (pad, pad))  # fmt: skip
    module = load_module(_READ.format(made=made, t="" if by_rows else ".T", rows=pad,
                                      cols=pad))  # fmt: skip
    out = torch.full((pad, pad), float("nan"))
    module.kernel[(1,)](storage, out)
    torch.testing.assert_close(out[:rows, :cols], tensor, atol=0, rtol=0)
    assert (out[rows:, :] == 0).all() and (
        out[:, cols:] == 0
    ).all()  # zeros past the edge


# --- compiled products, against eager ------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "m, n, k", [(1, 8, 8), (17, 24, 40), (65, 136, 64), (300, 136, 24)]
)
def test_a_persistent_product_with_a_broadcast_epilogue_matches_eager(m, n, k, device):
    for dtype in _dtypes(device):
        x, w = (
            randn(m, k, device=device, dtype=dtype),
            randn(n, k, device=device, dtype=dtype),
        )
        bias, res = (
            randn(n, device=device, dtype=dtype),
            randn(m, 1, device=device, dtype=dtype),
        )

        def fn(x, w, bias, res):
            return F.gelu(F.linear(x, w, bias)) * res

        _, sources = compile_and_compare(fn, x, w, bias, res, options=ALWAYS,
                                         tol=TOL[dtype] * 2)  # fmt: skip
        assert _persistent(sources)
        assert "aligned(" in sources[0]  # the inputs' starts are checked per call


@pytest.mark.parametrize("device", DEVICES)
def test_operands_read_by_columns_and_programs_that_walk_several_tiles(device):
    """x.t() @ w.t(): both operands stored by columns; 6 tiles over the programs."""
    xt, wt = randn(40, 300, device=device), randn(136, 40, device=device)
    _, sources = compile_and_compare(lambda a, b: a.t() @ b.t(), xt, wt, options=ALWAYS)
    assert sources[0].count("]).T") == 2  # each loaded by columns, then transposed
    programs = 3 if device == "cpu" else min(6, torch.cuda.get_device_properties(0).
                                             multi_processor_count)  # fmt: skip
    assert f"for tile in tl.range(tl.program_id(0), 6, {programs}):" in sources[0]


@pytest.mark.parametrize("device", DEVICES)
def test_a_product_a_descriptor_cannot_read_takes_the_plain_template(device):
    """K of 17 in float32 (rows of 68 bytes), and a batched product: the plain form."""
    a, b = randn(33, 17, device=device), randn(17, 24, device=device)
    kernels, sources = compile_and_compare(lambda a, b: a @ b, a, b, options=ALWAYS)
    assert kernels[0].startswith("triton_tem") and not _persistent(sources)
    a, b = randn(2, 16, 8, device=device), randn(2, 8, 16, device=device)
    kernels, sources = compile_and_compare(lambda a, b: a @ b, a, b, options=ALWAYS)
    assert kernels[0].startswith("triton_tem") and not _persistent(sources)


@pytest.mark.parametrize("device", DEVICES)
def test_an_input_that_starts_off_16_bytes_is_copied_and_read_right(device):
    """A view one float32 in: the compiled code checks its start and copies it."""
    storage = randn(1 + 24 * 32, device=device)
    x = storage[1:].view(24, 32)  # 4 bytes past an aligned start
    w = randn(32, 16, device=device)
    fn = lambda x, w: torch.relu(x @ w)  # noqa: E731
    assert x.data_ptr() % 16 == 4
    _, sources = compile_and_compare(fn, x, w, options=ALWAYS)
    assert _persistent(sources) and "aligned(" in sources[0]


@pytest.mark.parametrize("device", DEVICES)
def test_aligned_copies_only_what_starts_off_16_bytes_keeping_its_strides(device):
    base = randn(64, device=device)
    assert aligned(base) is base
    for t in (
        base[1:33].view(4, 8),
        base[1:9].view(8, 1).expand(8, 5),  # stride 0
        torch.as_strided(base, (6, 4), (2, 1), 3),
    ):  # rows that overlap
        got = aligned(t)
        assert got.data_ptr() % 16 == 0 and got.stride() == t.stride()
        assert torch.equal(got, t)


def test_a_persistent_choice_reads_back_as_what_it_names():
    tiles = sa.PersistentTiles(128, 256, 64, 8, 3, sms=132)
    assert sa._plan(sa._choice(tiles), 4096, 4096, 4096, torch.bfloat16) == tiles
    plain = sa.TileConfig(128, 256, 64, 8, 3)
    assert sa._plan(sa._choice(plain), 4096, 4096, 4096, torch.bfloat16) == plain
    assert (
        tiles != plain and tiles.programs(1000) == 132 and plain.programs(1000) == 1000
    )


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's choice, without timing")
def test_the_mode_knob_decides_where_the_form_is_taken():
    a, b = randn(64, 32, device=KERNEL_DEVICE), randn(32, 48, device=KERNEL_DEVICE)
    fn = lambda a, b: a @ b  # noqa: E731
    for mode, taken in [("always", True), ("timed", False), ("never", False)]:
        options = {**ALWAYS, "persistent_tma_matmul": mode}
        _, sources = compile_and_compare(fn, a, b, options=options)
        assert _persistent(sources) == taken, mode
