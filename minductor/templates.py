# generated from chapters/25_templates.md — edit there

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

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
)
from minductor.lowering import VIEW_TARGETS, lowerings, readers, register_lowering
from minductor.ops import NullHandler, ops, set_handler
from minductor.pipeline import PIPELINE
from minductor.sizevars import index_vars, texpr
from minductor.pointwise import add
from minductor.runtime import interpret_mode
from minductor.dependencies import BaseSchedulerNode
from minductor.scheduler import register_fusion_rule

aten = torch.ops.aten
TEMPLATE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class TileConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int = 3
    GROUP_M: int = 8

    # what follows the tile's lines (the epilogue) is indented by this much; and
    # whether the kernel reads its operands with the copy engine (chapter 26)
    indent: ClassVar[str] = ""
    copy_engine: ClassVar[bool] = False

    def __str__(self) -> str:
        m, n, k = self.BLOCK_M, self.BLOCK_N, self.BLOCK_K
        return f"{m}x{n}x{k}, {self.num_warps} warps, {self.num_stages} stages"

    def programs(self, tiles: int) -> int:
        """How many programs the kernel launches for a product of `tiles` tiles."""
        return tiles  # one per tile

    def lines(self, *product) -> list[str]:
        """The kernel's lines up to the tile in `acc`, `xindex` and `xmask`; the
        arguments are matmul_lines' after its tiles."""
        b, m, n, k, x, y, *rest = product
        return matmul_lines(b, m, n, k, x, y, self, *rest)


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
    # the operands as the graph gave them (views included), for a cuBLAS call instead;
    # and what chapter 26's timing keeps for a second look once the epilogue is fused
    operands: tuple[Buffer, Buffer] | None = None
    second_look: Any = None
    kernel_kind = KernelKind.TEMPLATE.value

    def whole_reads(self) -> tuple[str, ...]:
        loaded = [x.name for x, p in zip((self.a, self.b), self.prologues) if p is None]
        return (*loaded, *(name for p in self.prologues if p for name in p.reads))

    def __repr__(self) -> str:
        size = [int(s) for s in self.layout.size]
        return f"{self.name}: MatmulTemplate({self.a.name} @ {self.b.name}, {size})"


def in_memory(buf: Buffer) -> tuple[Buffer, FixedLayout]:
    """The buffer whose memory buf is, and buf's layout in it: a strided view that the
    wrapper makes (a ReinterpretBuffer) is read straight from what it views. The
    offset counts from where the kernel's pointer points: a buffer's first element
    (an input's storage offset is in its pointer already), plus each view's own."""
    layout, offset = buf.layout, 0
    while isinstance(buf, ReinterpretBuffer):
        offset += buf.layout.offset  # from its base's first element
        buf = buf.base
    return buf, dataclasses.replace(layout, offset=offset)


def matmul_template(
    graph, a: Buffer, b: Buffer, cfg: TileConfig, views=None, dtype=None,
    prologues=(None, None), second_look=None,
) -> TensorBox:  # fmt: skip
    """Register the template computing a @ b; its result, boxed. `views`, if given,
    are the operands' layouts in their memory, read instead of their own; `dtype` is
    the result's (the operands', unless told); `prologues`, operands computed in it."""
    operands = None if views or any(prologues) else (a, b)
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
    node = MatmulTemplate(name, layout, body, a, b, a_view, b_view, cfg, prologues,
                          operands, second_look)  # fmt: skip
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
    kernel.numel = sympy.Integer(cfg.programs(tiles))  # the launch: XBLOCK is 1
    return {"XBLOCK": 1, "num_warps": cfg.num_warps}, None


def _precision(dtype: torch.dtype) -> str:
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return "tf32" if tf32 else "ieee"


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
    precision, cfg = _precision(dtype), node.tiles
    lines = cfg.lines(b, m, n, k, x, y, precision, int64, upcast)
    as_dtype = "tl.float32" if upcast else TRITON_DTYPES[dtype]
    for side, computed in zip("ab", kernel.template_prologues):
        if computed:
            lines = computed_operand(lines, side, *computed, as_dtype)
    if cfg.copy_engine:
        kernel.copy_engine = (node.a.name, node.b.name)
    epilogue = [*tile_variables(kernel, b, m, n), *kernel.lines]
    return [*lines, *(cfg.indent + part for x in epilogue for part in x.split("\n"))]


def tile_variables(kernel: TritonKernel, b: int, m: int, n: int) -> list[str]:
    """The epilogue's index variables. Where its loops are the product's own rows and
    columns, each is the tile's `rm` or `rn` itself: no division and remainder of
    `xindex` for every element of the tile. Otherwise from `xindex`."""
    sizes, names = [int(s) for s in kernel.sizes], kernel.variables
    if sizes == [m, n]:
        return [f"{names[0]} = rm[:, None]", f"{names[1]} = rn[None, :]"]
    if sizes == [b, m, n] and b > 1:  # the batch: one per program, as a [1, 1] tile
        return [f"{names[0]} = tl.full([1, 1], 0, tl.int32) + batch",
                f"{names[1]} = rm[:, None]", f"{names[2]} = rn[None, :]"]  # fmt: skip
    return kernel.variable_definitions()


KERNEL_KINDS.register(
    KindCodegen(template_blocks, template_lines), chapter=25, name=KernelKind.TEMPLATE
)


def _has_template(node: BaseSchedulerNode) -> bool:
    return any(isinstance(m.node, MatmulTemplate) for m in node.snodes)


@register_fusion_rule(chapter=25)
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


# which kernel computes a matmul: tiles for the template, None for cuBLAS, or a plan
# with a .lower(graph, a, b); asked as choose(a, b, allow_cublas=, epilogue=, computed=)
matmul_choices = PIPELINE["matmul_choices"]


def choose(a: Buffer, b: Buffer, **how):
    """The latest chapter's answer; NotImplemented asks the chapter before."""
    for chooser in reversed(list(matmul_choices)):
        plan = chooser(a, b, **how)
        if plan is not NotImplemented:
            return plan
    raise AssertionError("matmul_choices: no pass answered")


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
    plan = choose(
        a, b, allow_cublas="ATEN" in backends, epilogue=epilogue, computed=computed
    )
    if plan is None:  # cuBLAS: the caller stores any operand computed here
        return None
    if not isinstance(plan, TileConfig):  # a plan that lowers itself (chapter 26)
        return plan.lower(graph, a, b)
    return matmul_template(graph, a, b, plan, prologues=prologues)


@matmul_choices.register(chapter=25)
def rule_tiles(a: Buffer, b: Buffer, allow_cublas: bool, epilogue=False, computed=()):
    """cuBLAS where allowed, else the rule's tiles: nothing is measured."""
    if allow_cublas:
        return None
    _, m, n, k = _size(a.layout, b.layout)
    return tile_config(m, n, k, a.get_dtype())


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
