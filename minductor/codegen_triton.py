# generated from chapters/17_triton.md — edit there

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import sympy

from minductor.config import config
from minductor.ir import FixedLayout, MutationBuffer
from minductor.ops import set_handler
from minductor.pipeline import PIPELINE
from minductor.dependencies import (
    BaseSchedulerNode,
    MemoryDep,
    SchedulerNode,
    is_indirect,
    is_persistent,
)
from minductor.scheduler import Scheduler
from minductor.sizevars import (
    FloorDiv,
    ModularIndexing,
    SizeVarAllocator,
    affine_coefficients,
    bound_sympy,
    index_dtype,
    product,
    texpr,
)
from minductor.triton_ops import (  # chapter 16
    TRITON_DTYPES,
    InterpreterOverrides,
    TritonOverrides,
)


@dataclass
class KernelArgs:
    inputs: dict[str, str]
    outputs: dict[str, str]
    # an input -> the output written over its memory, one `in_out_ptrN` for both
    # ("Writing over an input", below)
    over: dict[str, str] = field(default_factory=dict)
    in_out: dict[str, str] = field(default_factory=dict)  # such output -> its pointer

    def input(self, name: str) -> str:
        if name in self.over:
            return self.output(self.over[name])
        if name in self.outputs or name in self.in_out:
            return self.output(name)
        return self.inputs.setdefault(name, f"in_ptr{len(self.inputs)}")

    def output(self, name: str) -> str:
        if name in self.over.values():
            return self.in_out.setdefault(name, f"in_out_ptr{len(self.in_out)}")
        return self.outputs.setdefault(name, f"out_ptr{len(self.outputs)}")

    def call_names(self) -> list[str]:
        return list(self.in_out) + list(self.inputs) + list(self.outputs)

    def signature(self) -> list[str]:
        pointers = (self.in_out, self.inputs, self.outputs)
        return [ptr for names in pointers for ptr in names.values()]


class KernelKind(str, Enum):
    """A kernel's kind, valued by its name's prefix: `triton_poi_fused_add_0`."""

    POINTWISE = "poi"
    PERSISTENT = "per"  # a reduction holding whole rows in registers
    LOOPED = "red"  # a reduction looping over each row
    TEMPLATE = "tem"  # a matmul template and what it absorbed (chapter 25)

    def __str__(self) -> str:  # in an f-string too: the prefix
        return self.value


def kernel_kind(rsizes, persistent: bool) -> KernelKind:
    if not rsizes:
        return KernelKind.POINTWISE
    return KernelKind.PERSISTENT if persistent else KernelKind.LOOPED


class TritonKernel:
    def __init__(
        self,
        sizes,
        removed_buffers: set[str],
        overrides: type[TritonOverrides],
        rsizes=(),
        persistent: bool = True,
    ):
        self.sizes = tuple(sizes)
        self.rsizes = tuple(rsizes)
        self.numel = product(self.sizes)  # a number, or with dynamic shapes s0*s1
        self.rnumel = product(self.rsizes)
        self.kind = kernel_kind(self.rsizes, persistent)
        self.removed_buffers = removed_buffers
        self.overrides = overrides
        self.args = KernelArgs({}, {})
        self.lines: list[str] = []  # the body (inside the loop of a looped reduction)
        self.prologue: list[str] = []  # before that loop: accumulators
        self.suffix: list[str] = []  # after it: final reductions and their stores
        self.after_loop: set[str] = set()  # tmps defined in the suffix
        self.cse: dict[tuple[bool, str], str] = {}  # (after the loop?, expression)
        self.store_cache: dict[tuple[str, str], str] = {}
        self.reduction_cache: dict[tuple[str, str], object] = {}
        self.variables = _symbols("x", len(self.sizes))
        self.rvariables = _symbols("r", len(self.rsizes))
        # indirect indexing: tmps whose value varies along r (they need rmask), the
        # in-bounds flag of each checked index, and whether the kernel asserts
        self.along_r: set[str] = set()
        self.bounds: dict[str, str] = {}
        self.checked: set[str] = set()
        self.asserts = False
        # buffers read through tensor descriptors (chapter 26's persistent template):
        # their memory must start on 16 bytes, and the launch needs Triton's scratch
        self.copy_engine: tuple[str, ...] = ()
        # sizes the kernel takes as arguments (dynamic shapes), every index it prints
        # (to choose the index dtype), and the size each indirect index lies under
        self.size_symbols: set[sympy.Symbol] = set()
        for size in (*self.sizes, *self.rsizes):
            self.size_symbols |= sympy.sympify(size).free_symbols
        self.indexes: set[sympy.Expr] = set()
        self.indirect_sizes: dict[sympy.Symbol, sympy.Expr] = {}
        # the shape of one program's lanes, where an index is the same for all of them:
        # None for the kind's own ([XBLOCK], or a reduction's [XBLOCK, 1]); a matmul
        # template sets its tile's (chapter 25)
        self.lane_shape: str | None = None


    def newvar(self, expr: str, after_loop: bool = False) -> str:
        key = (after_loop, expr)
        if key not in self.cse:
            var = self.cse[key] = f"tmp{len(self.cse)}"
            (self.suffix if after_loop else self.lines).append(f"{var} = {expr}")
            if after_loop:
                self.after_loop.add(var)
        return self.cse[key]

    def accumulator(self, init: str) -> str:
        """A tile declared before a looped kernel's loop."""
        name = f"_acc{len(self.prologue)}"
        self.prologue.append(f"{name} = {init}")
        return name

    def index_str(self, index: sympy.Expr) -> str:
        lanes = {*self.variables, *self.rvariables, *self.indirect_sizes}
        self.size_symbols |= index.free_symbols - lanes
        self.indexes.add(index)
        if not index.free_symbols & lanes:  # one address for every lane
            shape = "[XBLOCK]" if self.kind is KernelKind.POINTWISE else "[XBLOCK, 1]"
            shape = self.lane_shape or shape
            if index.is_Integer:
                return f"tl.full({shape}, {int(index)}, tl.int32)"
            return f"tl.zeros({shape}, tl.int32) + ({texpr(index)})"
        return texpr(index)

    def index_dtype(self, sizevars: SizeVarAllocator) -> str:
        """int32 if every index (and the lane count) provably fits, else int64."""
        ranges = {
            var: (sympy.Integer(0), size - 1)
            for var, size in (
                *zip(self.variables, self.sizes),
                *zip(self.rvariables, self.rsizes),
                *self.indirect_sizes.items(),
            )
        }
        largest = [self.numel * self.rnumel]
        largest += [bound_sympy(index, ranges)[1] for index in self.indexes]
        if any(value.has(sympy.oo) for value in largest):  # no bound: a gather
            return "tl.int64"
        return index_dtype(largest, sizevars)


    def varies_along_r(self, index: sympy.Expr) -> bool:
        names = {s.name for s in index.free_symbols}
        return bool(index.free_symbols & set(self.rvariables) or names & self.along_r)

    def bounds_of(self, index: sympy.Expr) -> list[str]:
        """The in-bounds flags of the unchecked-by-assert indirect indices it uses."""
        names = sorted(s.name for s in index.free_symbols)
        return [self.bounds[n] for n in names if n in self.bounds]

    def mask(self, index: sympy.Expr, after_loop: bool = False) -> str:
        pointwise = self.kind is KernelKind.POINTWISE
        along_r = not pointwise and not after_loop and self.varies_along_r(index)
        masks = ["xmask & rmask" if along_r else "xmask"] + self.bounds_of(index)
        return " & ".join(masks)

    def variable_definitions(self) -> list[str]:
        return _definitions(self.variables, self.sizes, "xindex")

    def rvariable_definitions(self) -> list[str]:
        return _definitions(self.rvariables, self.rsizes, "rindex")


def _symbols(prefix: str, n: int) -> list[sympy.Symbol]:
    # x0 is the innermost dimension, as in the scheduler's merged loops
    return [
        sympy.Symbol(f"{prefix}{k}", integer=True, nonnegative=True)
        for k in reversed(range(n))
    ]


def _definitions(variables, sizes, base: str) -> list[str]:
    flat = sympy.Symbol(base, integer=True, nonnegative=True)
    lines = []
    inner = sympy.Integer(1)
    for var, size in zip(reversed(variables), reversed(sizes)):
        if len(sizes) == 1:
            value = flat
        elif var == variables[0]:  # outermost
            value = FloorDiv(flat, inner)
        else:
            value = ModularIndexing(flat, inner, size)
        lines.append(f"{var} = {texpr(value)}")
        inner = inner * size
    return lines


class KernelOpsHandler:
    def __init__(self, kernel: TritonKernel, node: SchedulerNode, after_loop=False):
        self.kernel = kernel
        self.node = node
        self.after_loop = after_loop  # an epilogue of a looped reduction kernel

    def _index(self, index: sympy.Expr) -> str:
        return self.kernel.index_str(self.node.rewrite_index(index))

    def load(self, name, index):
        index_s = self._index(index)
        cached = self.kernel.store_cache.get((name, index_s))
        if cached is not None:
            return cached
        ptr = self.kernel.args.input(name)
        merged = self.node.rewrite_index(index)
        mask = self.kernel.mask(merged, self.after_loop)
        other = ", other=0" if self.kernel.bounds_of(merged) else ""
        load = f"tl.load({ptr} + ({index_s}), {mask}{other})"
        return self._tracked(load, self.kernel.varies_along_r(merged))

    def store(self, name, index, value, mode=None):
        index_s = self._index(index)
        if mode is None:  # an atomic add leaves the sum in memory, not `value`
            self.kernel.store_cache[(name, index_s)] = value
        if name in self.kernel.removed_buffers:
            return
        ptr = self.kernel.args.output(name)
        mask = self.kernel.mask(self.node.rewrite_index(index), self.after_loop)
        if mode == "atomic_add":
            line = f"tl.atomic_add({ptr} + ({index_s}), {value}, {mask}, sem='relaxed')"
        else:
            value = self.kernel.overrides.stored(value, self.node.node.get_dtype())
            line = f"tl.store({ptr} + ({index_s}), {value}, {mask})"
        (self.kernel.suffix if self.after_loop else self.kernel.lines).append(line)

    def index_expr(self, expr, dtype):
        merged = self.node.rewrite_index(expr)
        cast = f"({self.kernel.index_str(merged)}).to({TRITON_DTYPES[dtype]})"
        return self._tracked(cast, self.kernel.varies_along_r(merged))


    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        k, size = self.kernel, sympy.sympify(size)
        k.size_symbols |= size.free_symbols
        after = self.after_loop or x in k.after_loop
        var = x
        if wrap_neg:
            var = k.newvar(f"tl.where({x} < 0, {x} + {texpr(size)}, {x})", after)
        if x in k.along_r:
            k.along_r.add(var)
        if check and var not in k.checked:
            k.checked.add(var)
            inside = f"(0 <= {var}) & ({var} < {texpr(size)})"
            if config.debug_indexing:
                mask = "xmask & rmask" if var in k.along_r else "xmask"
                where = ", ".join(sorted(self.node.origins))
                message = f"index out of bounds: {var} not in [0, {size}) in {where}"
                line = f'tl.device_assert(({inside}) | ~({mask}), "{message}")'
                (k.suffix if after else k.lines).append(line)
                k.asserts = True
            else:
                k.bounds[var] = k.newvar(inside, after)
        # a symbol named after the tmp: index_str prints it into the address
        symbol = sympy.Symbol(var, integer=True)
        k.indirect_sizes[symbol] = size
        return symbol

    def _tracked(self, expr: str, along_r: bool) -> str:
        var = self.kernel.newvar(expr, self.after_loop)
        if along_r and not self.after_loop:
            self.kernel.along_r.add(var)
        return var


    def constant(self, value, dtype):
        # a reduction kernel's values are two-dimensional, and tl.broadcast_to, which
        # its reductions call, does not add a dimension: its constants are [1, 1]
        shape = "[1]" if self.kernel.kind is KernelKind.POINTWISE else "[1, 1]"
        line = self.kernel.overrides.constant(value, dtype, shape)
        return self.kernel.newvar(line, after_loop=self.after_loop)

    def __getattr__(self, name):
        method = getattr(self.kernel.overrides, name)

        def op(*args):
            names = [a for a in args if isinstance(a, str)]
            after = self.after_loop or any(a in self.kernel.after_loop for a in names)
            var = self.kernel.newvar(method(*args), after_loop=after)
            if not after and any(a in self.kernel.along_r for a in names):
                self.kernel.along_r.add(var)
            return var

        return op


def kernel_op(method):
    """Add method to KernelOpsHandler: chapter 18 adds its reductions and scans so."""
    setattr(KernelOpsHandler, method.__name__, method)
    return method


class PerCallBlocks(str, Enum):
    """How a launch with symbolic sizes chooses its blocks from that call's sizes."""

    POINTWISE = "pointwise"  # a pointwise kernel over a symbolic number of elements
    INNER = "inner"  # a persistent kernel over rows of symbolic length: an inner
    OUTER = "outer"  # or an outer reduction (chapter 18)

    __repr__ = str.__repr__  # 'inner', as the wrapper writes it into its source


@dataclass(frozen=True, kw_only=True)
class GeneratedKernel:
    source: str  # with KERNEL_NAME as the placeholder for the name
    kind: KernelKind
    descriptive_name: str  # e.g. "poi_fused_add_mul"
    call_args: tuple[str, ...]  # buffer names, in signature order
    numel: int | sympy.Expr  # of the outputs: with dynamic shapes, e.g. s0*s1
    meta: tuple[tuple[str, int], ...]  # XBLOCK, (RBLOCK,) num_warps
    rnumel: int | sympy.Expr = 1
    size_args: tuple[str, ...] = ()  # size symbols passed after the buffers
    per_call_blocks: PerCallBlocks | None = None  # None: the blocks of meta, always
    inplace: tuple[tuple[str, str], ...] = ()  # (input, output written over it)
    tile: tuple[int, int] | None = None  # (YBLOCK, XBLOCK) of a two-dimensional tile
    copy_engine: tuple[str, ...] = ()  # buffers read by the copy engine (chapter 26)


@dataclass(frozen=True)
class KindCodegen:
    """What generate_kernel asks of one kind of kernel."""

    # (kernel, node, numel, rnumel, interpret) -> the blocks, and how a launch with
    # symbolic sizes re-chooses them (GeneratedKernel.per_call_blocks)
    blocks: Callable[..., tuple[dict[str, int], PerCallBlocks | None]]
    # (kernel, int64, blocks) -> the lines of the kernel: lanes, masks, variables, body
    lines: Callable[..., list[str]]


# the pipeline's hook of kernel kinds, a KindCodegen by KernelKind: POINTWISE below;
# chapter 18 adds PERSISTENT and LOOPED, chapter 25 TEMPLATE
KERNEL_KINDS = PIPELINE["kernel_kinds"]


def kernel_name_stem(
    node: BaseSchedulerNode, kind: KernelKind = KernelKind.POINTWISE
) -> str:
    origins = sorted(node.origins) or ["kernel"]
    return f"{kind}_fused_" + "_".join(origins)


def generate_kernel(
    node: BaseSchedulerNode,
    removed: set[str],
    interpret: bool,
    sizevars: SizeVarAllocator | None = None,
    over: dict[str, str] | None = None,  # input -> output to write over it
):
    sizevars = sizevars or SizeVarAllocator()
    overrides = InterpreterOverrides if interpret else TritonOverrides
    kernel = TritonKernel(
        node.loop.sizes,
        removed,
        overrides,
        node.rloop.sizes,
        is_persistent(node, sizevars),
    )
    for member in node.snodes:  # a node with a kernel of its own (chapter 25)
        kernel.kind = KernelKind(getattr(member.node, "kernel_kind", kernel.kind))
    outputs = {m.get_name() for m in node.snodes}
    kernel.args.over = {a: b for a, b in (over or {}).items() if b in outputs}
    tile = plan_tile(node, kernel, interpret)  # reads and writes disagree: 2-D tiles
    if tile is not None:
        kernel.lane_shape = f"[{tile.yblock}, {tile.xblock}]"
    for member in node.snodes:
        # a pointwise node over the outputs alone runs after a looped kernel's loop
        epilogue = kernel.kind is KernelKind.LOOPED and not member.rloop.sizes
        with set_handler(KernelOpsHandler(kernel, member, epilogue)):
            member.run_body()
    # block sizes are heuristics: with symbolic sizes they follow this call's hints
    numel, rnumel = sizevars.size_hints((kernel.numel, kernel.rnumel))
    codegen = KERNEL_KINDS[kernel.kind] if tile is None else tile.codegen()
    meta, per_call = codegen.blocks(kernel, node, numel, rnumel, interpret)
    int64 = kernel.index_dtype(sizevars) == "tl.int64"
    symbols = sorted(s.name for s in kernel.size_symbols)
    pointwise = "RBLOCK" not in meta  # one range: a pointwise kernel, a template
    sizes = ["xnumel"] if pointwise else ["xnumel", "rnumel"]
    blocks = [f"{b}: tl.constexpr" for b in ("XBLOCK", "RBLOCK") if b in meta]
    params = ", ".join(kernel.args.signature() + symbols + sizes + blocks)
    # device asserts are compiled in only in Triton's debug mode (chapter 21)
    decorator = "@triton.jit(debug=True)" if kernel.asserts else "@triton.jit"
    source = "\n".join(
        [decorator, f"def KERNEL_NAME({params}):"]
        + ["    " + line for line in codegen.lines(kernel, int64, dict(meta))]
    )
    return GeneratedKernel(
        source=source,
        kind=kernel.kind,
        descriptive_name=kernel_name_stem(node, kernel.kind),
        call_args=tuple(kernel.args.call_names()),
        numel=_int_if_static(kernel.numel),
        meta=tuple(meta.items()),
        rnumel=1 if pointwise else _int_if_static(kernel.rnumel),
        size_args=tuple(symbols),
        per_call_blocks=per_call,
        inplace=tuple(kernel.args.over.items()),
        tile=None if tile is None else (tile.yblock, tile.xblock),
        copy_engine=kernel.copy_engine,
    )


def _int_if_static(size: sympy.Expr) -> int | sympy.Expr:
    return int(size) if size.is_Integer else size


def mask_line(name: str, numel: sympy.Expr, block: int, shape: str) -> str:
    """`xmask`/`rmask`: a constant when the blocks tile the range exactly."""
    if numel.is_Integer and numel > 0 and numel % block == 0:
        # every lane is in range; Triton folds a constant mask out of loads and
        # stores, which lets it use wide vector loads
        return f"{name} = tl.full({shape}, True, tl.int1)"
    return f"{name} = {name[0]}index < {name[0]}numel"


def xoffset_line(int64: bool) -> str:
    # with 64-bit indices the lane numbers start out 64-bit, and so does all
    # arithmetic on them
    pid = "tl.program_id(0).to(tl.int64)" if int64 else "tl.program_id(0)"
    return f"xoffset = {pid} * XBLOCK"


def pointwise_blocks(kernel, node, numel: int, rnumel: int, interpret: bool):
    # over a symbolic number of elements, each launch chooses from its own sizes
    per_call = None if kernel.numel.is_Integer else PerCallBlocks.POINTWISE
    return pointwise_config(numel, interpret), per_call


def pointwise_lines(
    kernel: TritonKernel, int64: bool, meta: dict[str, int]
) -> list[str]:
    return [
        xoffset_line(int64),
        "xindex = xoffset + tl.arange(0, XBLOCK)[:]",
        mask_line("xmask", kernel.numel, meta["XBLOCK"], "[XBLOCK]"),
        *kernel.variable_definitions(),
        *kernel.lines,
    ]


pointwise_kind = KindCodegen(pointwise_blocks, pointwise_lines)
KERNEL_KINDS.register(pointwise_kind, chapter=17, name=KernelKind.POINTWISE)


def inplace_candidates(scheduler: Scheduler) -> dict[str, str]:
    """input -> the output of its only reader that may be written over it."""
    readers: dict[str, set[str]] = {}
    for node in scheduler.nodes:
        for member in getattr(node, "snodes", (node,)):
            for name in member.read_names:
                readers.setdefault(name, set()).add(member.get_name())
    found: dict[str, str] = {}
    for node in scheduler.nodes:
        made_here = {m.get_name() for m in getattr(node, "snodes", ())}
        for member in () if node.is_extern() else node.snodes:
            name, out = member.get_name(), member.node
            write = next(iter(member.writes), None)
            if (
                len(member.writes) != 1
                or member.is_reduction()
                or isinstance(out, MutationBuffer)
                or name in scheduler.removed_buffers
                or not isinstance(write, MemoryDep)
                or is_indirect(write.index)
            ):
                continue
            # an input made in this kernel too never reaches memory: it is removed
            for old in sorted(member.read_names - scheduler.output_names - made_here):
                buf = scheduler.buffer(old)
                if (
                    readers[old] == {name}
                    and old not in scheduler.graph.graph_inputs
                    and {d for d in member.reads if d.name == old} == {
                        MemoryDep(old, write.index)
                    }
                    and buf is not None
                    and same_memory(buf.layout, out.layout)
                    and old not in found
                ):
                    found[old] = name
                    break
    return found


def storage_elements(layout: FixedLayout) -> sympy.Expr:
    """From the first element to one past the last: what `empty_strided` allocates."""
    if any(s == 0 for s in layout.size):
        return sympy.Integer(0)
    return sympy.expand(1 + sum((s - 1) * st for s, st in zip(layout.size, layout.stride)))


def same_memory(a: FixedLayout, b: FixedLayout) -> bool:
    """Are the two layouts one block of memory, each element of b at its own address?"""
    if not (own_addresses(a) and own_addresses(b)):  # plain layouts, no overlaps
        return False
    if (a.device, a.dtype, a.offset, b.offset) != (b.device, b.dtype, 0, 0):
        return False
    return storage_elements(a) == storage_elements(b)


def own_addresses(layout: FixedLayout) -> bool:
    """Is the layout plain (not inside another buffer), each element at an address of
    its own? Dense layouts in any order, or padded ones with known sizes."""
    if type(layout) is not FixedLayout:  # e.g. a slice of a cat's memory
        return False
    dims = [(st, n) for n, st in zip(layout.size, layout.stride) if n != 1]
    span = sympy.Integer(1)  # the elements the dims taken so far cover
    while dims:
        exact = [d for d in dims if sympy.expand(d[0] - span) == 0]
        if exact:
            stride, size = exact[0]
        elif all(st.is_Integer and n.is_Integer for st, n in dims):
            stride, size = min(dims)  # the smallest stride must clear what came before
            if stride < span:
                return False
        else:
            return False
        dims.remove((stride, size))
        span = stride * size
    return True


MIN_PROGRAMS = 128  # about one per SM of an H100 (132): fewer leaves SMs idle


def fill_the_gpu(numel: int, xblock: int, smallest: int) -> int:
    """Halve xblock until numel makes MIN_PROGRAMS programs of it, or it is smallest."""
    while xblock > smallest and -(-numel // xblock) < MIN_PROGRAMS:
        xblock //= 2
    return xblock


def next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def pointwise_config(numel: int, interpret: bool = False) -> dict[str, int]:
    """Block size and warps for a 1-D pointwise kernel: big blocks, enough programs."""
    xblock = min(config.max_xblock, next_power_of_2(max(numel, 1)))
    if not interpret:
        xblock = fill_the_gpu(numel, xblock, smallest=min(xblock, 128))
    # a warp per 256 elements, but up to 4 warps while each thread has one element
    num_warps = max(xblock // 256, min(4, xblock // 32))
    return {"XBLOCK": xblock, "num_warps": max(1, min(8, num_warps))}


TILE_SIDE = 16  # the shortest side of a tile worth making


def _strides(index: sympy.Expr, names: list[str]) -> list[sympy.Expr | None]:
    """Each loop variable's stride in index (chapter 4); None for all if not affine."""
    by_name = {s.name: s for s in index.free_symbols}
    variables = [by_name.get(name, sympy.Symbol(name)) for name in names]
    affine = affine_coefficients(index, variables)
    return list(affine[1]) if affine is not None else [None] * len(names)


def tile_split(node: BaseSchedulerNode, sizes: tuple) -> int | None:
    """How many inner loops a tile's columns take; None: one dimension will do."""
    names = [f"x{d}" for d in range(len(sizes))]  # x0 is the innermost
    split = None
    for member in node.snodes:
        for dep in member.writes | member.reads:
            if not isinstance(dep, MemoryDep):
                continue
            if is_indirect(dep.index):
                return None
            strides = _strides(dep.index, names)
            if dep in member.writes and strides[0] != 1:
                return None  # a write not contiguous along x0
            across = strides[0] is not None and strides[0] not in (0, 1)
            if dep in member.reads and across and 1 in strides[1:]:
                d = strides.index(1, 1)
                split = d if split is None else min(split, d)
    return split


@dataclass(frozen=True)
class Tile:
    split: int  # the innermost loops that are the tile's columns
    ysize: int  # elements along the rows (yindex) and the columns (xindex)
    xsize: int
    yblock: int
    xblock: int
    num_warps: int

    def codegen(self) -> KindCodegen:
        return KindCodegen(self.blocks, self.lines)

    def blocks(self, kernel: TritonKernel, node, numel, rnumel, interpret: bool):
        tiles = -(-self.ysize // self.yblock) * -(-self.xsize // self.xblock)
        kernel.numel = sympy.Integer(tiles)  # the launch: one program per tile
        return {"XBLOCK": 1, "num_warps": self.num_warps}, None

    def lines(self, kernel: TritonKernel, int64: bool, meta: dict) -> list[str]:
        n = len(kernel.sizes) - self.split  # kernel.sizes: the outermost first
        tiles_x = -(-self.xsize // self.xblock)
        pid = "tl.program_id(0).to(tl.int64)" if int64 else "tl.program_id(0)"
        return [
            f"pid = {pid}",
            f"yindex = (pid // {tiles_x}) * {self.yblock}"
            f" + tl.arange(0, {self.yblock})[:, None]",
            f"xindex = (pid % {tiles_x}) * {self.xblock}"
            f" + tl.arange(0, {self.xblock})[None, :]",
            f"xmask = (yindex < {self.ysize}) & (xindex < {self.xsize})",
            *_definitions(kernel.variables[:n], kernel.sizes[:n], "yindex"),
            *_definitions(kernel.variables[n:], kernel.sizes[n:], "xindex"),
            *kernel.lines,
        ]


def plan_tile(node, kernel: TritonKernel, interpret: bool) -> Tile | None:
    """A 2-D tile for a pointwise kernel whose reads and writes disagree, or None."""
    sizes = kernel.sizes
    if kernel.kind is not KernelKind.POINTWISE or len(sizes) < 2:
        return None
    if not all(sympy.sympify(s).is_Integer for s in sizes):
        return None
    split = tile_split(node, sizes)
    if split is None:
        return None
    xsize = int(product(sizes[len(sizes) - split :]))
    ysize = int(product(sizes[: len(sizes) - split]))
    if min(xsize, ysize) < TILE_SIDE:
        return None
    side = 128 if interpret else 64
    yblock, xblock = (min(side, next_power_of_2(s)) for s in (ysize, xsize))
    warps = 8 if yblock * xblock >= 4096 else 4
    return Tile(split, ysize, xsize, yblock, xblock, warps)
