# generated from chapters/18_reductions.md — edit there

from __future__ import annotations

import torch

from minductor.codegen_triton import (
    KERNEL_KINDS,
    MIN_PROGRAMS,
    TRITON_DTYPES,
    KernelKind,
    KindCodegen,
    PerCallBlocks,
    TritonKernel,
    fill_the_gpu,
    kernel_op,
    mask_line,
    next_power_of_2,
    xoffset_line,
)
from minductor.dependencies import has_scan, is_inner_reduction

# reduction type -> (combine two tiles, collapse a tile's columns into [XBLOCK, 1])
REDUCTIONS = {
    "sum": ("{} + {}", "tl.sum({}, 1)[:, None]"),
    "prod": ("{} * {}", "tl.reduce({}, 1, helpers.mul)[:, None]"),
    "max": ("helpers.maximum({}, {})", "helpers.max_with_nan({}, 1)[:, None]"),
    "min": ("helpers.minimum({}, {})", "helpers.min_with_nan({}, 1)[:, None]"),
}
INTEGER_FINALS = {"max": "tl.max({}, 1)[:, None]", "min": "tl.min({}, 1)[:, None]"}


def reduction_identity(reduction_type: str, dtype: torch.dtype) -> str:
    if reduction_type in ("sum", "prod"):
        return "0" if reduction_type == "sum" else "1"
    lowest = reduction_type == "max"
    if dtype.is_floating_point:
        return 'float("-inf")' if lowest else 'float("inf")'
    info = torch.iinfo(dtype)
    return str(info.min if lowest else info.max)


@kernel_op
def reduction(self, dtype, src_dtype, reduction_type, value):
    # the same body reduced the same way twice (a Welford pair, max and argmax
    # of one row) is reduced once
    key = (reduction_type, str(value))
    cache = self.kernel.reduction_cache
    if key not in cache:
        cache[key] = reduce_tile(self.kernel, src_dtype, reduction_type, value)
    return cache[key]


def reduce_tile(k, src_dtype, reduction_type, value):
    """The source that reduces value over the kernel's r lanes, by type."""
    if reduction_type in ("argmax", "argmin"):
        return arg_reduction(k, reduction_type, src_dtype, *value)
    if reduction_type == "welford_reduce":
        return welford_reduction(k, src_dtype, value)
    if reduction_type == "online_softmax_reduce":
        return online_softmax_reduction(k, src_dtype, value)
    if k.kind is KernelKind.POINTWISE:  # every reduced dimension has size 1: nothing
        return value  # to combine
    identity = reduction_identity(reduction_type, src_dtype)
    combine = REDUCTIONS[reduction_type][0]
    final = final_step(reduction_type, src_dtype)
    spread = k.newvar(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])")
    if k.kind is KernelKind.PERSISTENT:  # the row is in registers: mask, then reduce
        masked = k.newvar(f"tl.where(xmask & rmask, {spread}, {identity})")
        return k.newvar(final.format(masked))
    acc = k.accumulator(
        f"tl.full([XBLOCK, RBLOCK], {identity}, {TRITON_DTYPES[src_dtype]})"
    )
    combined = k.newvar(combine.format(acc, spread))
    k.lines.append(f"{acc} = tl.where(xmask & rmask, {combined}, {acc})")
    return k.newvar(final.format(acc), after_loop=True)


@kernel_op
def store_reduction(self, name, index, value):
    index_s = self._index(index)
    self.kernel.store_cache[(name, index_s)] = value
    if name in self.kernel.removed_buffers:
        return
    ptr = self.kernel.args.output(name)
    after = value in self.kernel.after_loop
    value = self.kernel.overrides.stored(value, self.node.node.get_dtype())
    line = f"tl.store({ptr} + ({index_s}), {value}, xmask)"
    (self.kernel.suffix if after else self.kernel.lines).append(line)


def final_step(reduction_type: str, dtype: torch.dtype) -> str:
    """The template that collapses a tile's columns, by dtype (no NaN in integers)."""
    final = REDUCTIONS[reduction_type][1]
    if dtype.is_floating_point:
        return final
    return INTEGER_FINALS.get(reduction_type, final)


def arg_reduction(k, reduction_type: str, src_dtype, value: str, position: str):
    """argmax/argmin: the first position that holds the row's best value."""
    if k.kind is KernelKind.POINTWISE:
        return position
    extremum = "max" if reduction_type == "argmax" else "min"
    identity = reduction_identity(extremum, src_dtype)
    value = k.newvar(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])")
    position = k.newvar(f"tl.broadcast_to({position}, [XBLOCK, RBLOCK])")
    looped = k.kind is KernelKind.LOOPED
    if looped:  # each lane keeps its best (value, position) across chunks
        dtype = TRITON_DTYPES[src_dtype]
        best = k.accumulator(f"tl.full([XBLOCK, RBLOCK], {identity}, {dtype})")
        at = k.accumulator(f"tl.full([XBLOCK, RBLOCK], {LAST_POSITION}, tl.int64)")
        takes = f"helpers.{reduction_type}_takes({value}, {position}, {best}, {at})"
        take = k.newvar(f"xmask & rmask & {takes}")
        k.lines.append(f"{best} = tl.where({take}, {value}, {best})")
        k.lines.append(f"{at} = tl.where({take}, {position}, {at})")
        value, position = best, at
    else:
        value = k.newvar(f"tl.where(xmask & rmask, {value}, {identity})")
    winner = k.newvar(final_step(extremum, src_dtype).format(value), looped)
    first = f"helpers.first_position({value}, {position}, {winner})"
    return k.newvar(first, looped)


LAST_POSITION = 2**63 - 1  # loses every tie


def welford_reduction(k, src_dtype, value: str):
    """(mean, m2, count) of the values, in one pass over memory."""
    dtype = TRITON_DTYPES[src_dtype]
    if k.kind is KernelKind.POINTWISE:  # one element: itself, no spread, a count of 1
        zero = k.newvar(f"tl.full([XBLOCK], 0, {dtype})")
        return value, zero, k.newvar(f"tl.full([XBLOCK], 1, {dtype})")
    value = k.newvar(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])")
    if k.kind is KernelKind.PERSISTENT:  # the row is in registers: two passes are free
        count = k.newvar(f"tl.sum(rmask.to({dtype}), 1)[:, None]")
        masked = k.newvar(f"tl.where(xmask & rmask, {value}, 0)")
        mean = k.newvar(f"tl.sum({masked}, 1)[:, None] / {count}")
        deviation = k.newvar(f"tl.where(xmask & rmask, {value} - {mean}, 0)")
        m2 = k.newvar(f"tl.sum({deviation} * {deviation}, 1)[:, None]")
        return mean, m2, count
    zeros = f"tl.zeros([XBLOCK, RBLOCK], {dtype})"
    mean, m2, weight = (k.accumulator(zeros) for _ in range(3))
    new_weight = k.newvar(f"{weight} + 1")
    delta = k.newvar(f"{value} - {mean}")
    new_mean = k.newvar(f"{mean} + {delta} / {new_weight}")
    new_m2 = k.newvar(f"{m2} + {delta} * ({value} - {new_mean})")
    for acc, new in ((mean, new_mean), (m2, new_m2), (weight, new_weight)):
        k.lines.append(f"{acc} = tl.where(xmask & rmask, {new}, {acc})")
    # combine the lanes: the total count, the weighted mean, and each lane's m2 plus
    # its count times its mean's squared distance from the total mean
    total = k.newvar(f"tl.sum({weight}, 1)[:, None]", True)
    row_mean = k.newvar(f"tl.sum({weight} * {mean}, 1)[:, None] / {total}", True)
    distance = k.newvar(f"{mean} - {row_mean}", True)
    spread = f"{m2} + {weight} * {distance} * {distance}"
    row_m2 = k.newvar(f"tl.sum({spread}, 1)[:, None]", True)
    return row_mean, row_m2, total


def online_softmax_reduction(k, src_dtype, value: str):
    """(max, sum of exp(x - max)) of the values, in one pass over memory."""
    dtype, exp = TRITON_DTYPES[src_dtype], k.overrides.exp
    if k.kind is KernelKind.POINTWISE:
        return value, k.newvar(exp(f"{value} - {value}"))
    value = k.newvar(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])")
    lowest = 'float("-inf")'
    if k.kind is KernelKind.PERSISTENT:
        masked = k.newvar(f"tl.where(xmask & rmask, {value}, {lowest})")
        top = k.newvar(f"helpers.max_with_nan({masked}, 1)[:, None]")
        terms = k.newvar(f"tl.where(xmask & rmask, {exp(f'{value} - {top}')}, 0)")
        return top, k.newvar(f"tl.sum({terms}, 1)[:, None]")
    top = k.accumulator(f"tl.full([XBLOCK, RBLOCK], {lowest}, {dtype})")
    total = k.accumulator(f"tl.zeros([XBLOCK, RBLOCK], {dtype})")
    new_top = k.newvar(f"helpers.maximum({top}, {value})")
    seen_none = k.newvar(f"{new_top} == {lowest}")  # only -inf so far: sum stays 0
    scale = k.newvar(f"tl.where({seen_none}, 0, {exp(f'{top} - {new_top}')})")
    term = k.newvar(f"tl.where({seen_none}, 0, {exp(f'{value} - {new_top}')})")
    new_total = k.newvar(f"{total} * {scale} + {term}")
    for acc, new in ((total, new_total), (top, new_top)):
        k.lines.append(f"{acc} = tl.where(xmask & rmask, {new}, {acc})")
    row_top = k.newvar(f"helpers.max_with_nan({top}, 1)[:, None]", True)
    lane = f"{total} * {exp(f'{top} - {row_top}')}"  # a -inf lane adds 0 * 0
    return row_top, k.newvar(f"tl.sum({lane}, 1)[:, None]", True)


# scan type -> (identity of the masked-off lanes, scan of a tile along its rows)
SCANS = {
    "cumsum": ("0", "tl.cumsum({}, 1)"),
    "cumprod": ("1", "tl.cumprod({}, 1)"),
    "logcumsumexp": ('float("-inf")', "tl.associative_scan({}, 1, {logaddexp})"),
}


@kernel_op
def scan(self, src_dtype, scan_type, value):
    k = self.kernel
    assert k.kind is KernelKind.PERSISTENT, "a scan's kernel holds whole rows (ch. 15)"
    identity, template = SCANS[scan_type]
    spread = k.newvar(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])")
    masked = k.newvar(f"tl.where(xmask & rmask, {spread}, {identity})")
    scan = template.format(masked, logaddexp=k.overrides.logaddexp)
    return self._tracked(scan, along_r=True)


def reduction_config(
    numel: int,
    rnumel: int,
    kind: KernelKind,
    interpret: bool = False,
    inner: bool = True,
) -> dict[str, int]:
    """Block sizes for a reduction: the whole row if persistent, else 1024 chunks."""
    if not inner and not interpret:
        return outer_reduction_config(numel, rnumel, kind)
    rblock = next_power_of_2(rnumel) if kind is KernelKind.PERSISTENT else 1024
    # a GPU program keeps its tile in registers; the interpreter pays per program
    # instead, so it takes tiles 16 times larger
    budget = 65536 if interpret else 4096
    xblock = min(next_power_of_2(max(numel, 1)), max(1, budget // rblock))
    if kind is KernelKind.LOOPED and inner and not interpret:
        xblock = 1  # one long contiguous row per program streams best (H200 sweep)
        if numel < MIN_PROGRAMS:  # few rows: more loads in flight per program
            return {"XBLOCK": 1, "RBLOCK": 4096, "num_warps": 16}
    if not interpret:
        xblock = fill_the_gpu(numel, xblock, smallest=1)
    num_warps = max(1, min(8, xblock * rblock // 256))
    return {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": num_warps}


def outer_reduction_config(numel: int, rnumel: int, kind: KernelKind) -> dict[str, int]:
    """Memory runs along the outputs: a tile wide in x, short in r, is coalesced."""
    xblock, rblock, num_warps = OUTER_REDUCTION_BLOCKS
    if kind is KernelKind.PERSISTENT:
        rblock = next_power_of_2(rnumel)
    xblock = min(xblock, next_power_of_2(max(numel, 1)))
    return {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": num_warps}


OUTER_REDUCTION_BLOCKS = (16, 32, 8)  # XBLOCK, RBLOCK, num_warps: an H200 sweep


def reduction_blocks(kernel, node, numel: int, rnumel: int, interpret: bool):
    inner = is_inner_reduction(node) or has_scan(node)  # a scan's row is whole
    meta = reduction_config(numel, rnumel, kernel.kind, interpret, inner)
    per_call = None
    if kernel.kind is KernelKind.PERSISTENT and not kernel.rnumel.is_Integer:
        inner = is_inner_reduction(node)
        per_call = PerCallBlocks.INNER if inner else PerCallBlocks.OUTER
    return meta, per_call


def reduction_lines(
    kernel: TritonKernel, int64: bool, meta: dict[str, int]
) -> list[str]:
    lanes = ".to(tl.int64)" if int64 else ""
    head = [
        xoffset_line(int64),
        "xindex = xoffset + tl.arange(0, XBLOCK)[:, None]",
        mask_line("xmask", kernel.numel, meta["XBLOCK"], "[XBLOCK, 1]"),
    ]
    rmask = mask_line("rmask", kernel.rnumel, meta["RBLOCK"], "[1, RBLOCK]")
    if kernel.kind is KernelKind.PERSISTENT:
        return head + [
            f"rindex = tl.arange(0, RBLOCK)[None, :]{lanes}",
            rmask,
            *kernel.variable_definitions(),
            *kernel.rvariable_definitions(),
            *kernel.lines,
        ]
    loop = [
        "rindex = roffset + rbase",
        rmask,
        *kernel.rvariable_definitions(),
        *kernel.lines,
    ]
    return head + [
        f"rbase = tl.arange(0, RBLOCK)[None, :]{lanes}",
        *kernel.variable_definitions(),
        *kernel.prologue,
        "for roffset in range(0, rnumel, RBLOCK):",
        *["    " + line for line in loop],
        *kernel.suffix,
    ]


reduction_kind = KindCodegen(reduction_blocks, reduction_lines)
KERNEL_KINDS.register(reduction_kind, chapter=18, name=KernelKind.PERSISTENT)
KERNEL_KINDS.register(reduction_kind, chapter=18, name=KernelKind.LOOPED)
