# generated from chapters/26_choosing.md — edit there

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch
import triton.language as tl

from minductor.config import config, log
from minductor.dependencies import (
    BaseSchedulerNode,
    ExternKernelSchedulerNode,
    FusedSchedulerNode,
)
from minductor.ir import Buffer, ExternKernelOut, FixedLayout, TensorBox, as_exprs
from minductor.lowering import lowerings
from minductor.pipeline import PIPELINE
from minductor.runtime import interpret_mode
from minductor.templates import (
    Operand,
    TileConfig,
    _block,
    _operand,
    _precision,
    _size,
    in_memory,
    matmul_choices,
    matmul_lines,
    matmul_template,
    tile_config,
)

aten = torch.ops.aten
prims = torch.ops.prims

CANDIDATES = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
    (64, 64, 64, 4, 4), (64, 256, 32, 8, 4), (32, 64, 128, 4, 4),
    (16, 64, 128, 4, 4), (16, 128, 128, 4, 3), (16, 32, 256, 4, 3),
]  # fmt: skip
SHARED_MEMORY = 200 * 1024  # bytes of an SM's 228 KB the pipelined tiles may take


def fits(cfg: TileConfig, m: int, n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether cfg's blocks suit the product, and its pipelined tiles the memory."""
    bm, bn, bk = cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K
    if bm > _block(m, 256) or bn > _block(n, 256) or bk > _block(k, 256):
        return False
    return cfg.num_stages * (bm * bk + bk * bn) * dtype.itemsize <= SHARED_MEMORY


def candidate_tiles(m: int, n: int, k: int, dtype: torch.dtype) -> list[TileConfig]:
    """The rule's tiles, then each candidate that fits the product and the memory."""
    found = [tile_config(m, n, k, dtype)]
    for bm, bn, bk, warps, stages in CANDIDATES:
        if dtype == torch.float32:
            bk = min(bk, 32)
        cfg = TileConfig(bm, bn, bk, warps, stages)
        if fits(cfg, m, n, k, dtype) and cfg not in found:
            found.append(cfg)
    return found


# the template alone, storing its tile: chapter 21's header, then this signature
_PLAIN = """
@triton.jit
def kernel(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
"""


@matmul_choices.register(chapter=26)
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
    persistent = persistent_tiles(a, b) if plain else []  # (below)
    if persistent and config.persistent_tma_matmul == "always":
        candidates = persistent
    else:
        candidates += [p for p in persistent if p not in candidates]
    if device.type != "cuda" or interpret_mode():  # nothing to time: the rules
        if splits and not allow_cublas:
            return split_k(m, n, k, dtype, splits[0])
        if persistent and candidates == persistent and not allow_cublas:
            return persistent[0]  # the rule's tiles, persistent
        return NotImplemented  # chapter 25's rule
    from minductor.runtime import AutotuneFailed, autotune

    # the examples are made with the operands' strides, from offset 0
    x, y = (Operand(p, _operand(t.layout, p).stride, 0) for t, p in
            ((a, "in_ptr0"), (b, "in_ptr1")))  # fmt: skip
    shape = f"{bsz}x{m}x{n}x{k} ({dtype})"
    plans = candidates + [split_k(m, n, k, dtype, s) for s in splits]
    time_one = _timer(a, b, x, y, shape, plans, epilogue and allow_cublas, computed)
    choices = [_choice(c) for c in candidates]
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
    again = epilogue and not any(computed)  # once the epilogue is fused (below)
    look = second_look(won, m, n, k, dtype, allow_cublas) if again else None
    return look or chosen


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
    from minductor.runtime import load_module, rand_strided, with_scratch

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
        lines = cfg.lines(batch, m, n, depth, *operands, precision, False)
        lines += [cfg.indent + "tl.store(out_ptr0 + xindex, acc, xmask)"]
        body = "\n".join("    " + line for line in lines)
        module = load_module(KERNEL_HEADER + _PLAIN + body + "\n")
        tiles = cfg.programs(batch * -(-m // cfg.BLOCK_M) * -(-n // cfg.BLOCK_N))
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

        if cfg.copy_engine:
            with_scratch()

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


@dataclass(frozen=True)
class PersistentTiles(TileConfig):
    """The template as at most `sms` programs, each walking the tiles `sms` apart,
    reading A and B through tensor descriptors (the copy engine)."""

    sms: int = 132
    indent: ClassVar[str] = "    "  # the epilogue runs in the loop over tiles
    copy_engine: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"{super().__str__()}, persistent on {self.sms} programs"

    def programs(self, tiles: int) -> int:
        return min(tiles, self.sms)

    def lines(self, b, m, n, k, x, y, precision, int64, upcast=False) -> list[str]:
        return persistent_lines(m, n, k, x, y, self, precision, int64)


def read_by_rows(rows: int, cols: int, row_stride: int, col_stride: int) -> bool | None:
    """Whether a descriptor reads a (rows, cols) matrix by rows (True), by columns
    (False: the transpose, by rows), or cannot (None: neither stride is 1). A stride
    along a dimension of size 1 addresses nothing."""
    if (col_stride == 1 and cols > 1) or rows == cols == 1:
        return True
    if row_stride == 1 and rows > 1:
        return False
    return None


def descriptor(x: Operand, rows: int, cols: int, block: tuple[int, int]):
    """A descriptor over the (rows, cols) matrix that x reads, and whether by rows."""
    (_, rs, cs), by_rows = x.stride, read_by_rows(rows, cols, *x.stride[1:])
    if not by_rows:
        rows, cols, rs, cs, block = cols, rows, cs, rs, block[::-1]
    outer = rs if rows > 1 else -(-cols // 16) * 16  # 16 elements: 16-byte multiples
    made = (f"tl.make_tensor_descriptor({x.ptr} + {x.offset}, shape=[{rows}, {cols}], "
            f"strides=[{outer}, 1], block_shape=[{block[0]}, {block[1]}])")  # fmt: skip
    return made, by_rows


def persistent_lines(m, n, k, x, y, cfg, precision, int64) -> list[str]:
    """C = x @ y, a plain product: the program's tiles, each in `acc` in turn."""
    bm, bn, bk, group = cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.GROUP_M
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    make_a, a_rows = descriptor(x, m, k, (bm, bk))
    make_b, b_rows = descriptor(y, k, n, (bk, bn))
    load_a = "a_desc.load([pid_m * {}, k])" if a_rows else "a_desc.load([k, pid_m * {}]).T"
    load_b = "b_desc.load([k, pid_n * {}])" if b_rows else "b_desc.load([pid_n * {}, k]).T"
    wide = ".to(tl.int64)" if int64 else ""
    programs = cfg.programs(tiles_m * tiles_n)
    return [
        f"a_desc = {make_a}",
        f"b_desc = {make_b}",
        f"for tile in tl.range(tl.program_id(0), {tiles_m * tiles_n}, {programs}):",
        f"    # grouped order: {group} rows of tiles walk their columns together",
        f"    first_m = (tile // {group * tiles_n}) * {group}",
        f"    rows = tl.minimum({tiles_m} - first_m, {group})",
        "    pid_m = first_m + tile % rows",
        f"    pid_n = (tile % {group * tiles_n}) // rows",
        f"    rm = pid_m{wide} * {bm} + tl.arange(0, {bm})",
        f"    rn = pid_n{wide} * {bn} + tl.arange(0, {bn})",
        f"    acc = tl.zeros([{bm}, {bn}], tl.float32)",
        f"    for k in tl.range(0, {k}, {bk}, num_stages={cfg.num_stages}):",
        f"        a = {load_a.format(bm)}",
        f"        b = {load_b.format(bn)}",
        f'        acc += tl.dot(a, b, input_precision="{precision}")',
        f"    xindex = rm[:, None] * {n} + rn[None, :]",
        f"    xmask = (rm[:, None] < {m}) & (rn[None, :] < {n})",
    ]


PERSISTENT = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 3),
    (128, 128, 64, 4, 4), (256, 128, 64, 8, 3),
]  # fmt: skip


def readable(view: FixedLayout) -> bool:
    """Whether a tensor descriptor can read this 2-d view of memory whose start is
    16-byte aligned."""
    (rows, cols), (rs, cs) = (int(s) for s in view.size), (int(s) for s in view.stride)
    size, by_rows = view.dtype.itemsize, read_by_rows(rows, cols, rs, cs)
    if by_rows is None or rows * cols >= 2**31 or (int(view.offset) * size) % 16:
        return False
    inner, outers, outer = (cols, rows, rs) if by_rows else (rows, cols, cs)
    return inner * size >= 16 and (outers == 1 or (outer * size) % 16 == 0)


def persistent_tiles(a: Buffer, b: Buffer) -> list[PersistentTiles]:
    """The persistent forms worth trying for a @ b, the rule's tiles first; [] if it
    cannot take the form."""
    mode, dtype, device = config.persistent_tma_matmul, a.get_dtype(), a.get_device()
    views = [in_memory(t)[1] for t in (a, b)]
    if mode == "never" or not hasattr(tl, "make_tensor_descriptor"):
        return []
    if mode == "timed" and dtype == torch.float32:  # CUDA cores: nothing to gain
        return []
    if interpret_mode():
        sms = 3  # a few programs, each walking several tiles
        if dtype == torch.bfloat16:
            return []
    elif device.type != "cuda" or torch.cuda.get_device_capability(device) < (9, 0):
        return []
    else:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    if len(views[0].size) != 2 or not all(readable(v) for v in views):
        return []
    _, m, n, k = _size(*views)
    tiles = [TileConfig(*c) for c in PERSISTENT]
    tiles = [tile_config(m, n, k, dtype), *(t for t in tiles if fits(t, m, n, k, dtype))]
    forms = [PersistentTiles(**dataclasses.asdict(t), sms=sms) for t in tiles]
    return list(dict.fromkeys(forms))  # the rule's may be among the others


@dataclass(frozen=True)
class SecondLook:
    """The template's fastest tiles (the first is lowered), to time again with the
    epilogue the scheduler fuses into it, against cuBLAS if allowed."""

    tiles: tuple[TileConfig, ...]
    cublas: bool

    def lower(self, graph, a: Buffer, b: Buffer) -> TensorBox:
        return matmul_template(graph, a, b, self.tiles[0], second_look=self)


def second_look(won: dict, m, n, k, dtype, allow_cublas: bool) -> SecondLook | None:
    """The plan for a product with an epilogue whose timing chose a template."""
    if not isinstance(_plan(won["config"], m, n, k, dtype), TileConfig):
        return None  # cuBLAS won, or a split of K
    ranked = [_plan(c, m, n, k, dtype) for c in won.get("ranked", [won["config"]])]
    tiles = tuple(p for p in ranked if isinstance(p, TileConfig))[:3]
    return SecondLook(tiles, allow_cublas)


def look_again(scheduler) -> list[BaseSchedulerNode]:
    """Each fused template with a second look coming, timed again whole (above)."""
    found, changed = [], False
    for node in scheduler.nodes:
        members = () if node.is_extern() else node.snodes
        looks = [m for m in members if getattr(m.node, "second_look", None)]
        if not looks or len(members) == 1:  # no epilogue fused: the timing holds
            found.append(node)
            continue
        try:
            found += _timed_again(scheduler, node, looks[0])
            changed = True
        except Exception as error:  # noqa: BLE001  (nothing to time it on: keep it)
            log.info("minductor: no second look at %s: %s", node.get_name(), error)
            found.append(node)
    return scheduler._topological_sort(found) if changed else found


PIPELINE["schedule_passes"].register(look_again, chapter=26)


def _timed_again(scheduler, node, member) -> list[BaseSchedulerNode]:
    from minductor.codegen_triton import generate_kernel
    from minductor.runtime import autotune

    template, rest = member.node, [m for m in node.snodes if m is not member]
    look, shape = template.second_look, "x".join(str(int(s)) for s in template.get_size())
    internal = scheduler._buffers_internal_to_kernels()
    variants = {}
    for cfg in look.tiles:  # the member keeps its loops, as fused; only its node moves
        tiled = dataclasses.replace(template, tiles=cfg, second_look=None)
        swapped = dataclasses.replace(member, node=tiled)
        members = tuple(swapped if m is member else m for m in node.snodes)
        variants[cfg] = FusedSchedulerNode(members)
    epilogue = rest[0] if len(rest) == 1 else FusedSchedulerNode(tuple(rest))
    known = set(scheduler.graph.graph_inputs).union(*(n.names for n in scheduler.nodes))
    operands = template.operands or ()
    cublas = look.cublas and operands and all(x.name in known for x in operands)
    choices = [_choice(cfg) for cfg in variants] + ([{"cublas": 1}] if cublas else [])
    _, m, n, k = _size(template.a_view, template.b_view)
    dtype = template.a.get_dtype()

    def time_one(choice: dict) -> float:
        cfg = _plan(choice, m, n, k, dtype)
        if cfg is not None:
            ms = kernel_time(scheduler, variants[cfg], internal)
            what = f"template {cfg}"
        else:  # the product by cuBLAS, then the epilogue's own kernel reading it
            alone = kernel_time(scheduler, epilogue, internal - {template.name})
            ms, what = cublas_time(template) + alone, "cuBLAS and the epilogue's kernel"
        log.info("minductor: matmul %s with its epilogue: %s %.1f us", shape, what,
                 ms * 1e3)  # fmt: skip
        return ms

    # kept on disk as chapter 21 keeps any timed choice, named by the whole kernel
    graph, device = scheduler.graph, template.get_device()
    first = generate_kernel(variants[look.tiles[0]], internal, interpret_mode(),
                            graph.sizevars)  # fmt: skip
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    won = autotune("# with its epilogue\n" + first.source, (shape, str(dtype)), where,
                   choices, time_one)  # fmt: skip
    chosen = _plan(won["config"], m, n, k, dtype)
    log.info("minductor: matmul %s with its epilogue: %s won%s", shape, chosen or "cuBLAS",
             " (cached)" if won["cached"] else "")  # fmt: skip
    if chosen is None:
        return [ExternKernelSchedulerNode.create(as_cublas(template)), epilogue]
    return [variants[chosen]]


def kernel_time(scheduler, node, internal: set[str]) -> float:
    """The generated kernel of `node`, timed on random inputs, in ms."""
    from minductor.codegen_triton import generate_kernel
    from minductor.runtime import KERNEL_HEADER, launch, load_module, with_scratch

    graph = scheduler.graph
    kernel = generate_kernel(node, internal, interpret_mode(), graph.sizevars)
    layouts = {b.name: b.layout for b in graph.buffers}
    layouts |= {n: v.data.layout for n, v in graph.graph_inputs.items()
                if isinstance(v, TensorBox)}  # fmt: skip
    module = load_module(KERNEL_HEADER + kernel.source.replace("KERNEL_NAME", "kernel"))
    meta = dict(kernel.meta)
    if kernel.copy_engine:
        with_scratch()
    # outside Dynamo's fake mode, where a new tensor (Triton's scratch too) is empty
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        args = [_random(layouts[name]) for name in kernel.call_args]
        return _gpu_time(lambda: launch(module.kernel, int(kernel.numel), *args, **meta))


def _random(layout: FixedLayout) -> torch.Tensor:
    from minductor.runtime import _example

    size, stride = [int(s) for s in layout.size], [int(s) for s in layout.stride]
    return _example(size, stride, layout.dtype, layout.device)


def cublas_time(template) -> float:
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        a, b = (_random(x.layout) for x in template.operands)
        return _gpu_time(lambda: torch.matmul(a, b))


def as_cublas(template) -> ExternKernelOut:
    """The extern call computing the template's product into its buffer."""
    op = aten.mm.default if len(template.get_size()) == 2 else aten.bmm.default
    kernel = "extern_kernels.mm" if op == aten.mm.default else "extern_kernels.bmm"
    name, layout = template.name, template.layout
    return ExternKernelOut(name, layout, op, template.operands, {}, kernel=kernel)


@dataclass(frozen=True)
class SplitK:
    """a @ b as the sum of `splits` products over slices of K: a batch of products
    by the template, in float32, then a reduction over the batch."""

    splits: int
    tiles: TileConfig  # each slice's product's

    def __str__(self) -> str:
        return f"K in {self.splits} slices, {self.tiles}"

    def lower(self, graph, a: Buffer, b: Buffer) -> TensorBox:
        return split_k_product(graph, a, b, self)


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


def _choice(cfg: TileConfig) -> dict:
    """Tiles as autotuning writes them down."""
    found = dataclasses.asdict(cfg)
    return {"persistent": found} if isinstance(cfg, PersistentTiles) else found


def _plan(choice: dict, m: int, n: int, k: int, dtype) -> TileConfig | SplitK | None:
    """A choice as autotuning writes it down, back as what it names."""
    if "cublas" in choice:
        return None
    if "split_k" in choice:
        return split_k(m, n, k, dtype, choice["split_k"])
    if "persistent" in choice:
        return PersistentTiles(**choice["persistent"])
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
