"""Chapter 18: reduction and scan kernels, registered into chapter 17's code generator.

What is pinned here is the seam (the kinds in KERNEL_KINDS and the handler's ops come
from this chapter's module) and the layout of a reduction kernel: which lines go before
the loop, inside it and after it. Values against eager are in test_ch18_reductions_values.py,
test_ch18_reductions_more.py and test_ch18_scans.py; block sizes in test_ch17_block_sizes.py.
"""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import codegen_reductions
from minductor.codegen_triton import (
    KERNEL_KINDS,
    KernelKind,
    KernelOpsHandler,
    generate_kernel,
)
from minductor.lowering import GraphLowering
from minductor.scheduler import Scheduler

pytestmark = pytest.mark.ch18

LOOP = "    for roffset in range(0, rnumel, RBLOCK):"


def kernels_for(fn, *args):
    scheduler = Scheduler(GraphLowering(make_fx(fn)(*args), list(args)).lower())
    return [
        generate_kernel(n, scheduler.removed_buffers, interpret=True)
        for n in scheduler.nodes
        if not n.is_extern()
    ]


def first(lines, text):
    return next(i for i, line in enumerate(lines) if text in line)


def test_reduction_kinds_and_ops_come_from_this_chapter():
    assert KERNEL_KINDS.names() == ["poi", "per", "red", "tem"]  # by chapter, then name
    assert KERNEL_KINDS.names() == list(KernelKind)  # the enum's members, in order
    for kind in (KernelKind.PERSISTENT, KernelKind.LOOPED):
        assert KERNEL_KINDS[kind].blocks is codegen_reductions.reduction_blocks
        assert KERNEL_KINDS[kind].lines is codegen_reductions.reduction_lines
    for op in ("reduction", "store_reduction", "scan"):
        method = getattr(KernelOpsHandler, op)
        assert method.__module__ == "minductor.codegen_reductions"


def test_a_looped_sum_accumulates_in_the_loop_and_collapses_after_it():
    (kernel,) = kernels_for(lambda x: x.sum(1), torch.randn(5, 5000))
    assert kernel.descriptive_name == "red_fused_sum"
    assert kernel.kind is KernelKind.LOOPED
    lines = kernel.source.splitlines()
    acc = lines.index("    _acc0 = tl.full([XBLOCK, RBLOCK], 0, tl.float32)")
    update = lines.index("        _acc0 = tl.where(xmask & rmask, tmp2, _acc0)")
    final = lines.index("    tmp3 = tl.sum(_acc0, 1)[:, None]")
    store = lines.index("    tl.store(out_ptr0 + (x0), tmp3, xmask)")
    assert acc < lines.index(LOOP) < update < final < store


def test_an_epilogue_of_a_looped_kernel_runs_after_the_loop():
    # var_mean: the Welford lanes merge after the loop, and m2 / (N - 1) follows them
    (kernel,) = kernels_for(lambda x: torch.var_mean(x, 1), torch.randn(5, 5000))
    lines = kernel.source.splitlines()
    loop = lines.index(LOOP)
    accumulators = [first(lines, f"_acc{k} = tl.zeros") for k in range(3)]
    assert accumulators == [loop - 3, loop - 2, loop - 1]
    divide = first(lines, "4999.0")
    assert divide > first(lines, "tl.sum(_acc1 + _acc2")
    assert all(not line.startswith("        ") for line in lines[divide:])


def test_a_persistent_kernel_has_no_loop_and_a_scan_masks_its_store():
    (kernel,) = kernels_for(lambda x: x.cumsum(1), torch.randn(4, 100))
    assert kernel.descriptive_name == "per_fused_cumsum"
    assert LOOP not in kernel.source
    assert "tmp3 = tl.cumsum(tmp2, 1)" in kernel.source
    assert "tl.store(out_ptr0 + (r0 + 100*x0), tmp3, xmask & rmask)" in kernel.source
    assert dict(kernel.meta)["RBLOCK"] == 128  # the row, to a power of two


def test_a_reduction_over_size_one_dimensions_is_pointwise():
    (kernel,) = kernels_for(lambda x: x.sum(1), torch.randn(7, 1))
    assert kernel.descriptive_name == "poi_fused_sum"
    assert "RBLOCK" not in kernel.source and "tl.sum" not in kernel.source
