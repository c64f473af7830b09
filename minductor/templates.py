# generated from chapters/23_templates.md — edit there

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from minductor import extern  # chapter 12's lowerings, which these take over
from minductor.codegen_triton import (
    KERNEL_KINDS,
    TRITON_DTYPES,
    InterpreterOverrides,
    KernelKind,
    KernelOpsHandler,
    KindCodegen,
    TritonKernel,
    TritonOverrides,
    kernel_op,
    next_power_of_2,
    storage_elements,
)
from minductor.config import config, log
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    FixedLayout,
    GenericView,
    Pointwise,
    ReinterpretBuffer,
    TensorBox,
    as_exprs,
)
from minductor.lowering import VIEW_TARGETS, lowerings, readers, register_lowering
from minductor.ops import NullHandler, ops, set_handler
from minductor.sizevars import index_vars, texpr
from minductor.pointwise import add
from minductor.runtime import interpret_mode
from minductor.scheduler import BaseSchedulerNode, register_fusion_rule

aten = torch.ops.aten
prims = torch.ops.prims
TEMPLATE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class TileConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int = 3
    GROUP_M: int = 8

    def __str__(self) -> str:
        m, n, k = self.BLOCK_M, self.BLOCK_N, self.BLOCK_K
        return f"{m}x{n}x{k}, {self.num_warps} warps, {self.num_stages} stages"


def _block(size: int, largest: int) -> int:
    return max(16, min(largest, next_power_of_2(size)))


def tile_config(m: int, n: int, k: int, dtype: torch.dtype) -> TileConfig:
    """The rule's tiles for an (m, k) @ (k, n) product."""
    deepest = 32 if dtype == torch.float32 else 64
    bm, bn, bk = _block(m, 128), _block(n, 128), _block(k, deepest)
    return TileConfig(bm, bn, bk, num_warps=8 if bm * bn >= 128 * 128 else 4)


@dataclass(frozen=True)
class Operand:
    """A matrix (or a batch of them) as the template reads it: pointer and layout."""

    ptr: str
    stride: tuple[int, int, int]  # (batch, row, column), 0 for a missing batch
    offset: int


def matmul_lines(
    b: int, m: int, n: int, k: int, x: Operand, y: Operand, cfg: TileConfig,
    precision: str, int64: bool, upcast: bool = False,
) -> list[str]:  # fmt: skip
    """C[b] = x[b] @ y[b], one BLOCK_M x BLOCK_N tile of C per program, in `acc`."""
    bm, bn, bk, group = cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.GROUP_M
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    pid = "tl.program_id(0).to(tl.int64)" if int64 else "tl.program_id(0)"
    (xb, xm, xk), (yb, yk, yn) = x.stride, y.stride
    to = ".to(tl.float32)" if upcast else ""
    return [
        f"pid = {pid}",
        f"batch = pid // {tiles_m * tiles_n}",
        f"tile = pid % {tiles_m * tiles_n}",
        f"# grouped order: {group} rows of tiles walk their columns together",
        f"first_m = (tile // {group * tiles_n}) * {group}",
        f"rows = tl.minimum({tiles_m} - first_m, {group})",
        "pid_m = first_m + tile % rows",
        f"pid_n = (tile % {group * tiles_n}) // rows",
        f"rm = pid_m * {bm} + tl.arange(0, {bm})",
        f"rn = pid_n * {bn} + tl.arange(0, {bn})",
        f"rk = tl.arange(0, {bk})",
        f"a_ptrs = {x.ptr} + ({x.offset} + batch * {xb} + rm[:, None] * {xm}"
        f" + rk[None, :] * {xk})",
        f"b_ptrs = {y.ptr} + ({y.offset} + batch * {yb} + rk[:, None] * {yk}"
        f" + rn[None, :] * {yn})",
        f"acc = tl.zeros([{bm}, {bn}], tl.float32)",
        f"for k in tl.range(0, {k}, {bk}, num_stages={cfg.num_stages}):",
        f"    a_mask = (rm[:, None] < {m}) & (rk[None, :] < {k} - k)",
        f"    b_mask = (rk[:, None] < {k} - k) & (rn[None, :] < {n})",
        f"    a = tl.load(a_ptrs, a_mask, other=0.0){to}",
        f"    b = tl.load(b_ptrs, b_mask, other=0.0){to}",
        f'    acc += tl.dot(a, b, input_precision="{precision}")',
        f"    a_ptrs += {bk * xk}",
        f"    b_ptrs += {bk * yk}",
        f"xindex = batch * {m * n} + rm[:, None] * {n} + rn[None, :]",
        f"xmask = (rm[:, None] < {m}) & (rn[None, :] < {n})",
    ]


@dataclass(frozen=True, eq=False, repr=False)
class MatmulTemplate(ComputedBuffer):
    """C = a @ b (a batch of them when a and b are 3-d) by a tiled Triton kernel."""

    a: Buffer  # the buffers whose memory the operands are
    b: Buffer
    a_view: FixedLayout  # each operand's size, strides and offset in that memory
    b_view: FixedLayout
    tiles: TileConfig
    # an operand computed in the kernel instead (below): its body; `a` or `b` then
    # only stands for its size and dtype
    prologues: tuple[Prologue | None, Prologue | None] = (None, None)
    kernel_kind = KernelKind.TEMPLATE.value

    def whole_reads(self) -> tuple[str, ...]:
        loaded = [x.name for x, p in zip((self.a, self.b), self.prologues) if p is None]
        return (*loaded, *(name for p in self.prologues if p for name in p.reads))

    def __repr__(self) -> str:
        size = [int(s) for s in self.layout.size]
        return f"{self.name}: MatmulTemplate({self.a.name} @ {self.b.name}, {size})"


def in_memory(buf: Buffer) -> tuple[Buffer, FixedLayout]:
    """The buffer whose memory buf is, and buf's layout in it: a strided view that the
    wrapper makes (a ReinterpretBuffer) is read straight from what it views."""
    layout, offset = buf.layout, buf.layout.offset
    while isinstance(buf, ReinterpretBuffer):
        buf = buf.base
        if isinstance(buf, ReinterpretBuffer):  # a view of a view: its offset too
            offset += buf.layout.offset
    return buf, dataclasses.replace(layout, offset=offset)


def matmul_template(
    graph, a: Buffer, b: Buffer, cfg: TileConfig, views=None, dtype=None,
    prologues=(None, None),
) -> TensorBox:  # fmt: skip
    """Register the template computing a @ b; its result, boxed. `views`, if given,
    are the operands' layouts in their memory, read instead of their own; `dtype` is
    the result's (the operands', unless told); `prologues`, operands computed in it."""
    (a, a_view), (b, b_view) = in_memory(a), in_memory(b)
    a_view, b_view = views or (a_view, b_view)
    *batch, m, _ = a_view.size
    size = (*batch, m, b_view.size[-1])
    device, name = a.get_device(), graph.new_buffer_name()
    dtype = dtype or a.get_dtype()
    layout = FixedLayout.contiguous(device, dtype, size)
    origins = frozenset({"mm"}).union(*(p.origins for p in prologues if p))
    body = Pointwise(  # named for the product, as Inductor names its templates
        device, dtype, lambda index: ops.matmul_tile(name), size, origins
    )
    node = MatmulTemplate(name, layout, body, a, b, a_view, b_view, cfg, prologues)
    graph.register_buffer(node)
    return TensorBox(node)


@kernel_op
def matmul_tile(self, name: str) -> str:
    kernel, node = self.kernel, self.node.node
    kernel.template = node
    kernel.lane_shape = f"[{node.tiles.BLOCK_M}, {node.tiles.BLOCK_N}]"
    pointers, computed = [], []
    for side, x, prologue in zip("ab", (node.a, node.b), node.prologues):
        pointers.append(None if prologue else kernel.args.input(x.name))
        computed.append(prologue and prologue_lines(kernel, prologue, side, node))
    kernel.template_ptrs, kernel.template_prologues = pointers, computed
    dtype = node.get_dtype()
    if dtype == torch.float32:
        return "acc"
    return kernel.newvar(kernel.overrides.to_dtype("acc", dtype))


def _operand(view: FixedLayout, ptr: str) -> Operand:
    stride = [int(s) for s in view.stride]
    if len(stride) == 2:
        stride = [0, *stride]
    return Operand(ptr, tuple(stride), int(view.offset))


def _size(a: FixedLayout, b: FixedLayout) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a @ b; a batch of 1 for a plain product."""
    *batch, m, k = (int(s) for s in a.size)
    return (batch[0] if batch else 1), m, int(b.size[-1]), k


def template_blocks(kernel: TritonKernel, node, numel, rnumel, interpret: bool):
    b, m, n, _ = _size(kernel.template.a_view, kernel.template.b_view)
    cfg = kernel.template.tiles
    tiles = b * -(-m // cfg.BLOCK_M) * -(-n // cfg.BLOCK_N)
    kernel.numel = sympy.Integer(tiles)  # the launch: one program per tile
    return {"XBLOCK": 1, "num_warps": cfg.num_warps}, None


def template_lines(kernel: TritonKernel, int64: bool, meta: dict) -> list[str]:
    node = kernel.template
    views = (node.a_view, node.b_view)
    b, m, n, k = _size(*views)
    x, y = (_operand(view, p) for view, p in zip(views, kernel.template_ptrs))
    spans = [p.span for p in node.prologues if p]  # what computed operands read
    largest = max(b * m * k, b * k * n, b * m * n, *spans)  # 32-bit indices below 2**31
    int64 = int64 or largest >= 2**31 or x.offset + y.offset >= 2**30
    dtype = node.a.get_dtype()  # the operands' (a split of K stores float32)
    upcast = dtype == torch.bfloat16 and kernel.overrides is InterpreterOverrides
    precision = _precision(dtype)
    lines = matmul_lines(b, m, n, k, x, y, node.tiles, precision, int64, upcast)
    as_dtype = "tl.float32" if upcast else TRITON_DTYPES[dtype]
    for side, computed in zip("ab", kernel.template_prologues):
        if computed:
            lines = computed_operand(lines, side, *computed, as_dtype)
    return [*lines, *kernel.variable_definitions(), *kernel.lines]


KERNEL_KINDS.register(
    KindCodegen(template_blocks, template_lines), chapter=23, name=KernelKind.TEMPLATE
)


def _has_template(node: BaseSchedulerNode) -> bool:
    return any(isinstance(m.node, MatmulTemplate) for m in node.snodes)


@register_fusion_rule(chapter=23)
def template_epilogues(a: BaseSchedulerNode, b: BaseSchedulerNode) -> str | None:
    """a comes before b. A template starts its kernel; what follows is pointwise."""
    if _has_template(b):
        return f"{b.get_name()} is a matmul template: nothing fuses before it"
    if _has_template(a) and any(m.is_reduction() for m in b.snodes):
        return f"{b.get_name()} is a reduction: a template's epilogue is pointwise"
    return None


RIDGE = 300  # operations per byte: an H100's or H200's, in bfloat16 (top of chapter)


def memory_bound(a: TensorBox, b: TensorBox) -> bool:
    """Whether a @ b does fewer operations per byte it moves than the ridge point."""
    *_, m, k = (int(s) for s in a.get_size())
    n, size = int(b.get_size()[-1]), a.get_dtype().itemsize
    return 2 * m * n * k < RIDGE * size * (m * k + k * n + m * n)


@dataclass(frozen=True)
class Prologue:
    """An operand computed where the template loads it: its body (an index over the
    operand's dims to its value), the buffers that reads, the most elements any of them
    spans (for the index width), and the ops it was made of (for the kernel's name)."""

    loader: Callable[[list[sympy.Expr]], Any]
    reads: tuple[str, ...]
    span: int
    origins: frozenset[str]


class NotElementwise(Exception):
    pass


class PrologueCheck(NullHandler):
    """Records the buffers a body loads; an op other than a load or elementwise math
    (one the Triton overrides write as an expression) refuses the body."""

    def __init__(self):
        self.reads: dict[str, None] = {}  # in the order first loaded

    def load(self, name, index):
        self.reads[name] = None

    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        raise NotElementwise("a gather")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        elementwise = hasattr(TritonOverrides, name)  # written as an expression
        if name not in ("constant", "index_expr") and not elementwise:
            raise NotElementwise(name)
        return lambda *args, **kwargs: None


def prologue_of(graph, box: TensorBox) -> Prologue | None:
    """box's body, to compute in the template, if it pays (above); else None."""
    viewed = box
    while isinstance(viewed.data, GenericView):
        viewed = viewed.data.box
    if not config.prologue_fusion or not isinstance(viewed.data, Pointwise):
        return None  # stored already, or a view of memory
    node = graph.current_node
    arg = next((a for a in node.all_input_nodes if graph.env.get(a) is box), None)
    while arg is not None and arg.target in VIEW_TARGETS:
        arg = arg.args[0]
    if arg is None or list(readers(arg)) != [node]:
        return None  # read elsewhere too: stored once for all its readers
    check = PrologueCheck()
    try:
        with set_handler(check):
            box.make_loader()(index_vars(len(box.get_size())))
    except NotElementwise as why:
        log.info("minductor: matmul operand stored, not computed: %s", why)
        return None
    held = {x.name: x for x in graph.buffers}
    inputs = graph.graph_inputs.items()
    held |= {n: v.data for n, v in inputs if isinstance(v, TensorBox)}
    if not all(name in held for name in check.reads):
        return None
    hint = graph.sizevars.size_hint
    spans = [hint(storage_elements(held[n].layout)) for n in check.reads]
    read = sum(s * held[n].get_dtype().itemsize for n, s in zip(check.reads, spans))
    holds = math.prod(int(s) for s in box.get_size()) * box.get_dtype().itemsize
    if read > 1.1 * holds:
        log.info("minductor: matmul operand stored, not computed: it reads %d bytes "
                 "and holds %d", read, holds)  # fmt: skip
        return None
    reads, origins = tuple(check.reads), viewed.data.origins
    return Prologue(box.make_loader(), reads, max(spans, default=1), origins)


def stand_in(box: TensorBox) -> Buffer:
    """What the template and its timing see of a computed operand: its size, dtype
    and device, contiguous; no buffer of that name exists."""
    layout = FixedLayout.contiguous(box.get_device(), box.get_dtype(), box.get_size())
    return Buffer("computed", layout)


class PrologueOpsHandler(KernelOpsHandler):
    """Ops of an operand computed in the template: each index a tile of the
    operand's, each load under the operand's mask."""

    def __init__(self, kernel: TritonKernel, side: str, shape: str):
        super().__init__(kernel, None)
        self.mask, self.shape = f"{side}_mask", shape
        self.lanes = {_lane(side, "m" if side == "a" else "k"),
                      _lane(side, "k" if side == "a" else "n")}  # fmt: skip

    def _index(self, index: sympy.Expr) -> str:
        if index.free_symbols & self.lanes:
            return texpr(index)
        return f"tl.zeros({self.shape}, tl.int32) + ({texpr(index)})"  # one address

    def load(self, name, index):
        ptr = self.kernel.args.input(name)
        load = f"tl.load({ptr} + ({self._index(index)}), {self.mask}, other=0)"
        return self.kernel.newvar(load)

    def index_expr(self, expr, dtype):
        return self.kernel.newvar(f"({self._index(expr)}).to({TRITON_DTYPES[dtype]})")


def _lane(side: str, dim: str) -> sympy.Symbol:
    return sympy.Symbol(f"{side}_{dim}", integer=True, nonnegative=True)


def prologue_lines(kernel: TritonKernel, prologue: Prologue, side: str, node):
    """The lines computing a tile of operand `side` ("a" or "b"), and its name."""
    cfg, batch = node.tiles, len(node.a_view.size) == 3
    if side == "a":
        index = [_lane("a", "m"), _lane("a", "k")]
        shape = f"[{cfg.BLOCK_M}, {cfg.BLOCK_K}]"
    else:
        index = [_lane("b", "k"), _lane("b", "n")]
        shape = f"[{cfg.BLOCK_K}, {cfg.BLOCK_N}]"
    if batch:
        index.insert(0, sympy.Symbol("batch", integer=True, nonnegative=True))
    lines, cse = kernel.lines, kernel.cse
    # the prologue's own lines and expressions; its names still count in `cse`, so
    # that the epilogue's temporaries are numbered after them
    kernel.lines, kernel.cse = [], {("before", key): v for key, v in cse.items()}
    with set_handler(PrologueOpsHandler(kernel, side, shape)):
        value = prologue.loader(index)
    body, kernel.lines = kernel.lines, lines
    kept = {("prologue", key): v for key, v in kernel.cse.items() if key[0] != "before"}
    kernel.cse = cse | kept
    return body, value


def computed_operand(lines: list[str], side: str, body: list[str], value, as_dtype):
    """The template's lines with operand `side` computed where it was loaded: its
    pointers gone, its load replaced by the lines that compute its tile."""
    where = {"a": ("a_m = rm[:, None]", "a_k = k + rk[None, :]"),
             "b": ("b_k = k + rk[:, None]", "b_n = rn[None, :]")}[side]  # fmt: skip
    out = []
    for line in lines:
        if line.lstrip().startswith(f"{side}_ptrs"):  # defined, then stepped
            continue
        if line.startswith(f"    {side} = tl.load("):
            out += ["    " + x for x in (*where, *body)]
            line = f"    {side} = tl.where({side}_mask, {value}, 0).to({as_dtype})"
        out.append(line)
    return out


def _backends() -> set[str]:
    if not config.max_autotune:
        return {"ATEN"}
    chosen = {b.strip().upper() for b in config.max_autotune_gemm_backends.split(",")}
    if not chosen <= {"ATEN", "TRITON"}:
        raise ValueError(
            f"minductor: max_autotune_gemm_backends takes ATEN and TRITON, got "
            f"{config.max_autotune_gemm_backends!r}"
        )
    return chosen


def why_not_template(a: TensorBox, b: TensorBox) -> str | None:
    """Why the template cannot compute a @ b as eager does; None if it can."""
    if a.get_dtype() != b.get_dtype() or a.get_dtype() not in TEMPLATE_DTYPES:
        return f"dtypes {a.get_dtype()} and {b.get_dtype()}"
    sizes = [*a.get_size(), *b.get_size()]
    if not all(isinstance(s, (int, sympy.Integer)) for s in sizes):
        return "sizes known only at run time"
    if any(int(s) == 0 for s in sizes):
        return "an empty dimension"
    device = a.get_device()
    if device.type != "cuda" and not (device.type == "cpu" and interpret_mode()):
        return f"device {device.type}"
    return None


def template_or_none(graph, a: TensorBox, b: TensorBox) -> TensorBox | None:
    """a @ b by the template if it applies and is chosen; else None (cuBLAS)."""
    backends = _backends()
    if "TRITON" not in backends:
        return None
    why = why_not_template(a, b)
    if why is not None:
        log.info("minductor: matmul by cuBLAS, not the template: %s", why)
        return None
    node, prologues = graph.current_node, (None, None)
    if node is not None and memory_bound(a, b):  # an operand computed in it (above)
        prologues = (prologue_of(graph, a), prologue_of(graph, b))
    a, b = (
        stand_in(x) if p else graph.realize_viewed(x) for x, p in zip((a, b), prologues)
    )
    epilogue = node is not None and extern.read_by_pointwise_ops(node)
    computed = tuple(p is not None for p in prologues)
    cfg = choose_tiles(
        a, b, allow_cublas="ATEN" in backends, epilogue=epilogue, computed=computed
    )
    if isinstance(cfg, SplitK):  # below: K in slices, their products summed
        return split_k_product(graph, a, b, cfg)
    if cfg is None:  # cuBLAS: the caller stores any operand computed here
        return None
    return matmul_template(graph, a, b, cfg, prologues=prologues)


CANDIDATES = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
    (64, 64, 64, 4, 4), (64, 256, 32, 8, 4), (32, 64, 128, 4, 4),
    (16, 64, 128, 4, 4), (16, 128, 128, 4, 3), (16, 32, 256, 4, 3),
]  # fmt: skip
SHARED_MEMORY = 200 * 1024  # bytes of an SM's 228 KB the pipelined tiles may take


def candidate_tiles(m: int, n: int, k: int, dtype: torch.dtype) -> list[TileConfig]:
    """The rule's tiles, then each candidate that fits the product and the memory."""
    found = [tile_config(m, n, k, dtype)]
    size = dtype.itemsize
    for bm, bn, bk, warps, stages in CANDIDATES:
        if dtype == torch.float32:
            bk = min(bk, 32)
        if bm > _block(m, 256) or bn > _block(n, 256) or bk > _block(k, 256):
            continue
        if stages * (bm * bk + bk * bn) * size > SHARED_MEMORY:
            continue
        cfg = TileConfig(bm, bn, bk, warps, stages)
        if cfg not in found:
            found.append(cfg)
    return found


# the template alone, storing its tile: chapter 19's header, then this signature
_PLAIN = """
@triton.jit
def kernel(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
"""


def _precision(dtype: torch.dtype) -> str:
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return "tf32" if tf32 else "ieee"


def choose_tiles(
    a: Buffer, b: Buffer, allow_cublas: bool, epilogue=False, computed=(False, False)
) -> TileConfig | SplitK | None:
    """The template's tiles for a @ b (or a split of K), or None for cuBLAS: measured
    on a GPU. `computed`: which operands the template would compute (a prologue),
    which cuBLAS would need a kernel to store first."""
    bsz, m, n, k = _size(a.layout, b.layout)
    dtype, device = a.get_dtype(), a.get_device()
    candidates = candidate_tiles(m, n, k, dtype)
    plain = len(a.get_size()) == 2 and not any(computed)  # a split reads memory
    splits = k_splits(m, n, k) if plain else []
    if device.type != "cuda" or interpret_mode():  # nothing to time: the rules
        if allow_cublas:
            return None
        return split_k(m, n, k, dtype, splits[0]) if splits else candidates[0]
    from minductor.runtime import AutotuneFailed, autotune

    # the examples are made with the operands' strides, from offset 0
    x, y = (Operand(p, _operand(t.layout, p).stride, 0) for t, p in
            ((a, "in_ptr0"), (b, "in_ptr1")))  # fmt: skip
    shape = f"{bsz}x{m}x{n}x{k} ({dtype})"
    plans = candidates + [split_k(m, n, k, dtype, s) for s in splits]
    time_one = _timer(a, b, x, y, shape, plans, epilogue and allow_cublas, computed)
    choices = [dataclasses.asdict(c) for c in candidates]
    choices += [{"split_k": s} for s in splits]
    choices += [{"cublas": 1}] if allow_cublas else []
    text = matmul_lines(bsz, m, n, k, x, y, candidates[0], _precision(dtype), False)
    text += ["# cuBLAS timed with its epilogue's pass"] if epilogue and allow_cublas else []
    for side, c in zip("ab", computed):
        text += [f"# cuBLAS timed with operand {side}'s pass"] if c else []
    fake_off = torch._subclasses.fake_tensor.unset_fake_temporarily
    try:
        with fake_off():
            name = torch.cuda.get_device_name(device)
            sizes = (bsz, m, n, k, str(dtype))  # bf16 and fp16 may share a text
            won = autotune("\n".join(text), sizes, name, choices, time_one)
    except AutotuneFailed as why:
        log.warning("minductor: matmul %s: nothing could be timed: %s", shape, why)
        return None if allow_cublas else candidates[0]
    how = "cached" if won["cached"] else f"of {won['tried']}"
    chosen = _plan(won["config"], m, n, k, dtype)
    log.info("minductor: matmul %s: %s won, %.1f us (%s)", shape,
             chosen or "cuBLAS", won["ms"] * 1e3, how)  # fmt: skip
    return chosen


def _gpu_time(fn) -> float:
    """fn's time on the GPU, in ms: replayed from a CUDA graph, else as launched."""
    from triton.testing import do_bench, do_bench_cudagraph

    try:
        return do_bench_cudagraph(fn, rep=25, return_mode="median")
    except Exception as error:  # noqa: BLE001  (a choice a graph cannot hold)
        why = str(error).splitlines()[0]
        log.info("minductor: timed without a CUDA graph: %s", why)
        return do_bench(fn, warmup=5, rep=25, return_mode="median")


def _pass_time(t: torch.Tensor) -> float:
    """A pointwise kernel's time over t (it reads t and writes as much)."""
    after = torch.empty_like(t)
    return _gpu_time(lambda: torch.neg(t, out=after))


def _timer(a: Buffer, b: Buffer, x: Operand, y: Operand, shape, candidates, epilogue,
           computed=(False, False)):  # fmt: skip
    from concurrent.futures import ThreadPoolExecutor

    from minductor.runtime import KERNEL_HEADER, launch, launcher_for
    from minductor.runtime import load_module, rand_strided

    bsz, m, n, k = _size(a.layout, b.layout)
    dtype, device = a.get_dtype(), a.get_device()
    fake_off = torch._subclasses.fake_tensor.unset_fake_temporarily
    with fake_off():
        sizes = [(t.get_size(), t.layout.stride) for t in (a, b)]
        xs = [rand_strided(size, stride, device, dtype) for size, stride in sizes]
        out = torch.empty(bsz * m * n, dtype=dtype, device=device)
        most = max([p.splits for p in candidates if isinstance(p, SplitK)], default=0)
        parts = torch.empty(most * m * n, dtype=torch.float32, device=device)
        total = torch.empty(m * n, dtype=torch.float32, device=device)
    kernels: dict[TileConfig, tuple] = {}  # each candidate's kernel and its programs

    def build(plan: TileConfig | SplitK) -> None:
        cfg, batch, depth, operands, into = plan, bsz, k, (x, y), out
        if isinstance(plan, SplitK):  # a batch of slices of K, stored in float32
            cfg, batch, depth = plan.tiles, plan.splits, k // plan.splits
            views = split_layouts(a.layout, b.layout, plan.splits)
            operands = [Operand(p, _operand(v, p).stride, 0)
                        for v, p in zip(views, ("in_ptr0", "in_ptr1"))]  # fmt: skip
            into = parts
        precision = _precision(dtype)
        lines = matmul_lines(batch, m, n, depth, *operands, cfg, precision, False)
        lines += ["tl.store(out_ptr0 + xindex, acc, xmask)"]
        body = "\n".join("    " + line for line in lines)
        module = load_module(KERNEL_HEADER + _PLAIN + body + "\n")
        tiles = batch * -(-m // cfg.BLOCK_M) * -(-n // cfg.BLOCK_N)
        kernels[plan] = (module.kernel, tiles)
        try:
            with torch.cuda.device(device):  # a new thread starts on GPU 0
                warps = cfg.num_warps
                launcher = launcher_for(module.kernel, (tiles,), (), 1, None, warps)
                launcher.warm_up(*xs, into, tiles)
        except Exception as error:  # its timing fails too, and drops it
            log.info("minductor: matmul %s: template %s does not compile: %s",
                     shape, cfg, str(error).splitlines()[0])  # fmt: skip

    def time_one(choice: dict) -> float:
        if "cublas" in choice:  # with a kernel storing each computed operand first
            ms = _gpu_time(lambda: torch.matmul(*xs))
            ms += sum(_pass_time(t) for t, c in zip(xs, computed) if c)
            if not epilogue:
                also = " with its operands' passes" if any(computed) else ""
                log.info("minductor: matmul %s: cuBLAS %.1f us%s", shape,
                         ms * 1e3, also)  # fmt: skip
                return ms
            pass_ms = _pass_time(torch.matmul(*xs))
            log.info("minductor: matmul %s: cuBLAS %.1f us + %.1f us for its epilogue's "
                     "pass", shape, ms * 1e3, pass_ms * 1e3)  # fmt: skip
            return ms + pass_ms
        if not kernels:  # the first template asked for: compile them all at once
            with fake_off(), ThreadPoolExecutor(max(1, config.compile_threads)) as pool:
                list(pool.map(build, candidates))
        plan = _plan(choice, m, n, k, dtype)
        kernel, tiles = kernels[plan]
        cfg = plan.tiles if isinstance(plan, SplitK) else plan
        into = parts if isinstance(plan, SplitK) else out

        def run():
            launch(kernel, tiles, *xs, into, XBLOCK=1, num_warps=cfg.num_warps)
            if isinstance(plan, SplitK):  # the slices' sum, then the product's dtype
                slices = parts[: plan.splits * m * n].view(plan.splits, -1)
                out.copy_(torch.sum(slices, 0, out=total))

        run()
        torch.cuda.synchronize()
        ms = _gpu_time(run)
        log.info("minductor: matmul %s: template %s %.1f us", shape, plan, ms * 1e3)
        return ms

    return time_one


@register_lowering(aten.mm, aten.bmm, graph=True, extern=True)
def mm(graph, a, b):
    made = template_or_none(graph, a, b)
    return made if made is not None else extern.mm(graph, a, b)


@register_lowering(aten.addmm, graph=True, extern=True)
def addmm(graph, bias, a, b, *, beta=1, alpha=1):
    made = template_or_none(graph, a, b)
    if made is None:
        return extern.addmm(graph, bias, a, b, beta=beta, alpha=alpha)
    mul = lowerings[aten.mul.Tensor]
    scaled = bias if beta == 1 else mul(bias, beta)
    return add(scaled, made, alpha=alpha)


@dataclass(frozen=True)
class SplitK:
    """a @ b as the sum of `splits` products over slices of K: a batch of products
    by the template, in float32, then a reduction over the batch."""

    splits: int
    tiles: TileConfig  # each slice's product's

    def __str__(self) -> str:
        return f"K in {self.splits} slices, {self.tiles}"


def k_splits(m: int, n: int, k: int) -> list[int]:
    """The ways of splitting K worth timing, in the order they are tried."""
    if k < config.decompose_k_threshold * max(m, n):
        return []
    top = min(k // m, k // n, 256)
    found = [s for s in range(2, top + 1) if k % s == 0 and k // s >= 128]

    def order(s: int) -> tuple[bool, bool, int]:
        piece = k // s
        return piece & (piece - 1) != 0, piece % 32 != 0, s

    return sorted(found, key=order)[: max(0, config.num_decompose_k_splits)]


def split_k(m: int, n: int, k: int, dtype: torch.dtype, splits: int) -> SplitK:
    return SplitK(splits, tile_config(m, n, k // splits, dtype))


def _plan(choice: dict, m: int, n: int, k: int, dtype) -> TileConfig | SplitK | None:
    """A choice as autotuning writes it down, back as what it names."""
    if "cublas" in choice:
        return None
    if "split_k" in choice:
        return split_k(m, n, k, dtype, choice["split_k"])
    return TileConfig(**choice)


def split_layouts(av: FixedLayout, bv: FixedLayout, s: int):
    """a (M, K) and b (K, N) as batches of s slices of K: views, no copy."""
    (m, k), n = av.size, bv.size[1]
    piece = k // s
    (am, ak), (bk, bn) = av.stride, bv.stride
    a3 = FixedLayout(av.device, av.dtype, as_exprs((s, m, piece)),
                     as_exprs((piece * ak, am, ak)), av.offset)  # fmt: skip
    b3 = FixedLayout(bv.device, bv.dtype, as_exprs((s, piece, n)),
                     as_exprs((piece * bk, bk, bn)), bv.offset)  # fmt: skip
    return a3, b3


def split_k_product(graph, a: Buffer, b: Buffer, plan: SplitK) -> TensorBox:
    """a @ b as `plan` says: the slices' products by the template in float32, summed
    by chapter 10's reduction, rounded once to the operands' dtype."""
    (a, av), (b, bv) = in_memory(a), in_memory(b)
    views = split_layouts(av, bv, plan.splits)
    parts = matmul_template(graph, a, b, plan.tiles, views, torch.float32)
    total = lowerings[aten.sum.dim_IntList](parts, [0])
    graph.realize_intermediate(total)  # a reduction is read once stored (chapter 10)
    if a.get_dtype() == torch.float32:
        return total
    return lowerings[prims.convert_element_type.default](total, a.get_dtype())
