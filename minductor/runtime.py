# generated from chapters/21_runtime.md — edit there

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
import math
import os
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy
import torch

from minductor.codegen_triton import KernelKind, PerCallBlocks
from minductor.config import config

log = logging.getLogger("minductor")
_modules: dict[str, ModuleType] = {}


def interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def write_whole(path: Path, data: str | bytes) -> None:
    """Write data (text or bytes) to path so that no reader ever sees half of it: under
    a name of this writer's own (process and thread), then renamed, which replaces a
    file at once."""
    tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    tmp.replace(path)


def module_path(source: str) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    return Path(config.cache_dir) / f"c{digest}.py"


def load_module(source: str) -> ModuleType:
    path = module_path(source)
    key = path.stem
    if key in _modules:
        return _modules[key]
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != source:
        write_whole(path, source)
    spec = importlib.util.spec_from_file_location(f"minductor_generated.{key}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    _modules[key] = module
    return module


class Launcher:
    """Launches one kernel on one grid; after the first call, skips Triton's binder."""

    def __init__(
        self, kernel, grid: tuple[int, ...], blocks: dict[str, int], num_warps: int,
        torchs: bool | None = None,
    ):  # fmt: skip
        self.kernel = kernel
        self.grid = grid
        self.blocks = blocks  # the constexpr block sizes, in signature order
        self.num_warps = num_warps
        # fixed when the kernel was decorated: @triton.jit read the variable then
        self.interpret = interpret_mode()
        self.binary = None  # the compiled kernel, once built for aligned pointers
        self.device = -1  # the CUDA device it was built and loaded on
        self.pointers: tuple[int, ...] = ()  # positions of the tensor arguments
        self.dtypes: tuple[torch.dtype, ...] = ()  # their types, the binary's
        self.static: tuple | None = None  # how torch's launcher launches it, if it can
        # may torch's launcher launch it? (the generated module says; else the knob)
        self.torchs = config.static_launch if torchs is None else torchs
        self.record: dict | None = None  # what torch's launcher loaded (chapter 27)

    def __call__(self, *args) -> None:
        if self.interpret:
            # masked-off lanes may compute log(-1) or 1/0; numpy would warn about them
            with numpy.errstate(all="ignore"), _interpreter_asserts(self.kernel):
                self.kernel[self.grid](*args, **self.blocks)
            return
        b = self.binary
        if b is not None and _current_device() == self.device:
            for i, dtype in zip(self.pointers, self.dtypes):
                a = args[i]
                if a.data_ptr() % 16 or a.dtype is not dtype:
                    break  # unaligned, or other types: not the binary's
            else:
                stream = torch._C._cuda_getCurrentRawStream(self.device)
                if self.static is not None:  # torch's launcher (below)
                    function, warps, shared, types, extra, taken = self.static
                    if taken is not None:  # integers compiled in as constants
                        args = tuple(args[i] for i in taken)
                    _static_launch(function, *self.grid3, warps, shared, types,
                                   args + extra, stream)  # fmt: skip
                    return
                b.run(
                    *self.grid3,
                    stream,
                    b.function,
                    b.packed_metadata,
                    None,  # launch metadata
                    None,  # enter hook
                    None,  # exit hook
                    *args,
                    *self.blocks.values(),
                )
                return
        if self.binary is None and self.adopt(args):
            self(*args)  # the binary is in place, loaded by torch's launcher
            return
        pointers = [a for a in args if isinstance(a, torch.Tensor)]
        aligned = all(p.data_ptr() % 16 == 0 for p in pointers)
        binary = self.kernel[self.grid](*args, **self.blocks, num_warps=self.num_warps)
        if aligned and self.binary is None and _has_direct_launch(binary):
            self.keep(binary, args, None)


    def named(self, *args) -> None:
        """A launch in a profiler range named after the kernel, while one runs."""
        if _autograd_profiler._is_profiler_enabled:
            with torch._C._profiler._RecordFunctionFast(self.kernel.__name__):
                self(*args)
            return
        self(*args)

    def warm_up(self, *args) -> None:
        """Compile the binary for arguments like these, and load it, launching
        nothing (`precompile`, below; `_init_handles` is private to Triton, so it is
        used only where this Triton has it)."""
        binary = self.kernel.warmup(
            *args, grid=self.grid, **self.blocks, num_warps=self.num_warps
        )
        if self.adopt(args, binary):
            return  # loaded by torch's launcher, and kept for the launches
        load = getattr(binary, "_init_handles", None)
        if load is not None:  # on the GPU, with its launcher built
            load()


    def adopt(self, args, binary=None, record=None) -> bool:
        """Keep a binary for these arguments, loaded by torch's launcher, where that
        launcher can launch it (aligned pointers, on the GPU): the binary given, or
        compiled or found now, or the one a launch record names (a warm start's,
        chapter 27: Triton is not asked). False: nothing kept, Triton launches it."""
        pointers = [a for a in args if isinstance(a, torch.Tensor)]
        if self.interpret or not self.torchs or not static_launch_here(pointers):
            return False
        if record is None:
            if binary is None:
                binary = self.kernel.warmup(
                    *args, grid=self.grid, **self.blocks, num_warps=self.num_warps
                )
            record = launch_record(binary, len(args))
        static = None if record is None else load_record(record, _current_device())
        if static is None:
            return False
        self.record = record
        self.keep(record if binary is None else binary, args, static)
        return True

    def keep(self, binary, args, static: tuple | None) -> None:
        """Take the direct path from now on, with this binary."""
        self.pointers = tuple(
            i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
        )
        self.dtypes = tuple(args[i].dtype for i in self.pointers)
        self.device = _current_device()
        self.grid3 = self.grid + (1,) * (3 - len(self.grid))
        self.static = static
        self.binary = binary  # last: another thread may be reading the rest


# read at every launch: torch sets it while a profiler runs
_autograd_profiler = torch.autograd.profiler

# torch.cuda.current_device() checks that CUDA is initialized first: three Python calls
# per launch; the C function alone, where this torch has CUDA
_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


@contextlib.contextmanager
def _interpreter_asserts(kernel):
    """Run tl.device_assert in the interpreter for a kernel jitted with debug=True."""
    if not getattr(kernel, "kwargs", {}).get("debug"):
        yield
        return
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    saved = builder.options
    builder.options = dataclasses.replace(saved, debug=True)
    try:
        yield
    finally:
        builder.options = saved


def _has_direct_launch(binary) -> bool:
    return all(hasattr(binary, a) for a in ("run", "function", "packed_metadata"))


_launchers: dict[tuple, Launcher] = {}


@functools.lru_cache(maxsize=None)
def pointwise_blocks(numel: int) -> dict[str, int]:
    """Blocks for a pointwise kernel over a number of elements known only now."""
    from minductor.codegen_triton import pointwise_config

    return pointwise_config(numel, interpret_mode())


@functools.lru_cache(maxsize=None)
def persistent_blocks(numel: int, rnumel: int, inner: bool) -> dict[str, int]:
    """Blocks for a persistent kernel whose row length is known only now (chapter 18's
    rule, applied to this call's sizes): RBLOCK holds the whole row."""
    from minductor.codegen_reductions import reduction_config

    persistent = KernelKind.PERSISTENT
    return reduction_config(numel, rnumel, persistent, interpret_mode(), inner)


def launcher_for(kernel, sizes, symbols, XBLOCK, RBLOCK, num_warps) -> Launcher:
    """The Launcher of one call site: made at its first launch, then looked up."""
    key = (id(kernel), sizes, symbols, XBLOCK, RBLOCK, num_warps)
    launcher = _launchers.get(key)
    if launcher is None:
        grid = ((sizes[0] + XBLOCK - 1) // XBLOCK,)
        blocks = {"XBLOCK": XBLOCK}
        if RBLOCK is not None:
            blocks["RBLOCK"] = RBLOCK
        launcher = _launchers[key] = Launcher(kernel, grid, blocks, num_warps)
    return launcher


def launch(
    kernel,
    numel: int,
    *args,
    XBLOCK: int,
    num_warps: int,
    rnumel: int | None = None,
    RBLOCK: int | None = None,
) -> None:
    """Launch over `numel` outputs; reductions also pass rnumel and RBLOCK."""
    if numel == 0:
        return
    sizes = (numel,) if rnumel is None else (numel, rnumel)
    # the sizes are in the key, not only the grid: Triton specializes integer
    # arguments (an xnumel of 1 becomes a constant), so a binary is only good for its
    # own sizes; so are the size symbols a dynamic-shape kernel takes, which come
    # after the buffers (a kernel without them ends with a buffer)
    symbols = ()
    if args and not isinstance(args[-1], torch.Tensor):
        symbols = tuple(a for a in args if not isinstance(a, torch.Tensor))
    launcher = launcher_for(kernel, sizes, symbols, XBLOCK, RBLOCK, num_warps)
    launcher.named(*args, *sizes)  # in a range named after the kernel, if profiling


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


class CallSite:
    """The launcher of one launch line whose sizes are numbers: kernel, sizes and
    blocks bound when the module loads; `call` passes only the buffers."""

    def __init__(
        self, kernel, sizes, *, XBLOCK, num_warps, RBLOCK=None, check=(),
        scratch=False, launcher="torch",
    ):  # fmt: skip
        blocks = {"XBLOCK": XBLOCK}
        if RBLOCK is not None:
            blocks["RBLOCK"] = RBLOCK
        grid = ((sizes[0] + XBLOCK - 1) // XBLOCK,)
        self.kernel, self.sizes, self.blocks = kernel, sizes, blocks
        self.num_warps = num_warps
        # launcher="triton": the module was compiled with torch's launcher off
        self.launcher = Launcher(kernel, grid, blocks, num_warps, launcher == "torch")
        self.check = check  # positions of the buffers that may be unaligned
        self.tail = (*sizes, *blocks.values())  # what follows the buffers
        self.grid3 = grid + (1,) * (3 - len(grid))
        self.scratch = scratch  # the kernel makes tensor descriptors (chapter 26)

    def __call__(self, *buffers) -> None:
        if self.scratch:
            with_scratch()
        launcher = self.launcher
        b = launcher.binary
        if (
            b is not None
            and not _autograd_profiler._is_profiler_enabled
            and _current_device() == launcher.device
        ):
            for i in self.check:
                if buffers[i].data_ptr() % 16:
                    break  # not what the binary was compiled for
            else:
                stream = _raw_stream(launcher.device)
                static = launcher.static
                if static is not None:  # torch's launcher
                    function, warps, shared, types, extra, taken = static
                    args = buffers + self.sizes
                    if taken is not None:  # integers compiled in as constants
                        args = tuple(args[i] for i in taken)
                    _static_launch(function, *self.grid3, warps, shared, types,
                                   args + extra, stream)  # fmt: skip
                    return
                b.run(
                    *self.grid3,
                    stream,
                    b.function,
                    b.packed_metadata,
                    None,  # launch metadata
                    None,  # enter hook
                    None,  # exit hook
                    *buffers,
                    *self.tail,
                )
                return
        launcher.named(*buffers, *self.sizes)

    def through(self, launch_fn: Callable) -> Callable:
        """This site's launches made by `launch_fn`, a function like `launch`."""
        meta = dict(self.blocks, num_warps=self.num_warps)
        if len(self.sizes) == 2:
            meta["rnumel"] = self.sizes[1]
        numel = self.sizes[0]
        return lambda *buffers: launch_fn(self.kernel, numel, *buffers, **meta)


def int_class(value: int) -> int:
    """What Triton specializes an integer argument on: 1 (a constant of the binary),
    a multiple of 16, or neither; plus its type: 4 for 64 bits, 8 for unsigned."""
    wide = 0 if -(2**31) <= value < 2**31 else 4 if value < 2**63 else 8
    return wide + (1 if value == 1 else 2 if value % 16 == 0 else 0)


class SizedSite:
    """The launcher of one launch line whose sizes are symbols: each call passes its
    sizes, buffers and size symbols, and finds a binary by the classes of its integers."""

    def __init__(
        self, kernel, buffers: int, *, per_call=None, check=(), launcher="torch",
        **meta: int,
    ):  # fmt: skip
        self.kernel = kernel
        self.torchs = launcher == "torch"  # as CallSite's
        self.buffers = buffers  # how many leading arguments are pointers
        self.sizes = 2 if "RBLOCK" in meta else 1  # xnumel, and rnumel for a reduction
        self.meta = meta  # XBLOCK, (RBLOCK,) num_warps, when not chosen per call
        # how the blocks are chosen per call (the source names it: 'inner'), or None
        self.per_call = None if per_call is None else PerCallBlocks(per_call)
        self.check = check  # positions of the buffers that may be unaligned
        # (blocks, warps, integer classes) -> (binary, device, constexprs, static)
        self.binaries: dict[tuple, tuple] = {}
        self.seen: dict[tuple, tuple] = {}  # the integers themselves -> the same
        self.records: dict[tuple, dict] = {}  # the same -> its launch record

    def choose(self, sizes: tuple[int, ...]) -> dict[str, int]:
        if self.per_call is None:
            return self.meta
        if self.per_call is PerCallBlocks.POINTWISE:
            return pointwise_blocks(sizes[0])
        return persistent_blocks(*sizes, inner=self.per_call is PerCallBlocks.INNER)


    def __call__(self, *args) -> None:
        sizes, args = args[: self.sizes], args[self.sizes :]
        ints = args[self.buffers :] + sizes
        found = self.seen.get(ints)  # these very sizes before: the blocks follow
        if found is None:
            if sizes[0] == 0:
                return
            meta = self.choose(sizes)
            key = (*meta.values(), *map(int_class, ints))
            found = self.binaries.get(key)
            if found is None:
                self.compile_and_launch(key, meta, args, sizes)
                return
            if len(self.seen) >= 1024:
                self.seen.clear()  # sizes that never come back: keep few
            self.seen[ints] = found
        if _autograd_profiler._is_profiler_enabled:  # a launch in a named range
            self.compile_and_launch(None, self.choose(sizes), args, sizes)
            return
        b, device, constexprs, static = found
        if _current_device() == device:
            for i in self.check:
                if args[i].data_ptr() % 16:
                    break  # not what the binary was compiled for
            else:
                programs = (sizes[0] + constexprs[0] - 1) // constexprs[0]
                stream = _raw_stream(device)
                if static is not None:  # torch's launcher
                    function, warps, shared, types, extra, taken = static
                    args = args + sizes
                    if taken is not None:  # integers compiled in as constants
                        args = tuple(args[i] for i in taken)
                    _static_launch(function, programs, 1, 1, warps, shared, types,
                                   args + extra, stream)  # fmt: skip
                    return
                b.run(
                    programs, 1, 1,
                    stream,
                    b.function,
                    b.packed_metadata,
                    None,  # launch metadata
                    None,  # enter hook
                    None,  # exit hook
                    *args,
                    *sizes,
                    *constexprs,
                )  # fmt: skip
                return
        self.compile_and_launch(None, self.choose(sizes), args, sizes)


    def compile_and_launch(self, key, meta, args, sizes) -> None:
        """Launch through a Launcher made for this call, which compiles or finds the
        binary; keep it under `key` if its pointers were aligned."""
        launcher = self.launcher_of(meta, sizes)
        launcher.named(*args, *sizes)
        self.keep(key, launcher)

    def launcher_of(self, meta: dict[str, int], sizes: tuple[int, ...]) -> Launcher:
        blocks = {name: v for name, v in meta.items() if name != "num_warps"}
        grid = ((sizes[0] + blocks["XBLOCK"] - 1) // blocks["XBLOCK"],)
        return Launcher(self.kernel, grid, blocks, meta["num_warps"], self.torchs)

    def keep(self, key: tuple | None, launcher: Launcher) -> None:
        if key is not None and launcher.binary is not None:
            found = (launcher.binary, launcher.device,
                     tuple(launcher.blocks.values()), launcher.static)  # fmt: skip
            self.binaries[key] = found
            if launcher.record is not None:
                self.records[key] = launcher.record

    def classes(self, ints: tuple[int, ...], sizes: tuple[int, ...]) -> tuple:
        """The key a call with these size symbols and sizes finds its binary by."""
        return (*self.choose(sizes).values(), *map(int_class, (*ints, *sizes)))

    def prepare(self, args: list, sizes: tuple[int, ...], record=None) -> bool:
        """Before the first call: the binary for a call with these arguments (stand-in
        buffers, then the size symbols) compiled, or loaded from its launch record,
        and kept where torch's launcher took it. True: kept, launches go direct."""
        key = self.classes(tuple(args[self.buffers :]), sizes)
        if key in self.binaries:
            return True  # this module was loaded before, in this process
        launcher = self.launcher_of(self.choose(sizes), sizes)
        if record is None:
            launcher.warm_up(*args, *sizes)
        else:
            launcher.adopt([*args, *sizes], record=record)
        self.keep(key, launcher)
        return launcher.binary is not None

    def through(self, launch_fn: Callable) -> Callable:
        """This site's launches made by `launch_fn`, a function like `launch`."""

        def run(*args) -> None:
            sizes, args = args[: self.sizes], args[self.sizes :]
            meta = dict(self.choose(sizes))
            if len(sizes) == 2:
                meta["rnumel"] = sizes[1]
            launch_fn(self.kernel, sizes[0], *args, **meta)

        return run


@dataclasses.dataclass(frozen=True)
class WarmUp:
    """One launch that can be compiled before the graph's first call."""

    kernel: str  # its name in the generated module
    site: str  # the name of its launch line's CallSite there
    buffers: tuple[tuple[torch.dtype, bool], ...]  # each pointer's dtype, and aligned?
    sizes: tuple[int, ...]  # xnumel, and rnumel for a reduction
    blocks: tuple[tuple[str, int], ...]  # XBLOCK, (RBLOCK,) num_warps
    ints: tuple[int, ...] = ()  # a SizedSite's size symbols, as traced
    sized: bool = False  # the site is a SizedSite: symbolic sizes, at their hints


def precompile(
    module: ModuleType, warm_ups: list[WarmUp], device: torch.device,
    records: dict[str, dict] | None = None,
):  # fmt: skip
    """Compile a module's kernels on a pool of threads, for the launches to come;
    first load those a warm start holds launch records for (chapter 27)."""
    if interpret_mode() or device.type != "cuda":
        return
    fake_off = torch._subclasses.fake_tensor.unset_fake_temporarily
    with fake_off():  # compiling happens inside Dynamo's fake mode
        base = {d: torch.empty(32, dtype=d, device=device) for w in warm_ups
                for d, _ in w.buffers}  # fmt: skip

    def stand_in(dtype: torch.dtype, aligned: bool) -> torch.Tensor:
        return base[dtype] if aligned else base[dtype][1:]  # one element in

    if records:
        with torch.cuda.device(device):  # a warm start's binaries, from their records
            loaded = [w for w in warm_ups if _installed(module, w, records, stand_in)]
        warm_ups = [w for w in warm_ups if w not in loaded]
    threads = min(config.compile_threads, len({w.kernel for w in warm_ups}))
    if config.compile_threads <= 1 or threads == 0:
        return  # each kernel compiles at its first launch
    by_kernel: dict[str, list[tuple[object, WarmUp]]] = {}
    for w in warm_ups:  # the sites the first call will use; a kernel's on one thread
        by_kernel.setdefault(w.kernel, []).append((getattr(module, w.site), w))

    def compile_kernel(name: str) -> None:
        with torch.cuda.device(device):  # a new thread starts on GPU 0
            for site, w in by_kernel[name]:
                args = [stand_in(*b) for b in w.buffers]
                try:
                    if w.sized:
                        site.prepare([*args, *w.ints], w.sizes)
                    else:
                        site.launcher.warm_up(*args, *w.sizes)
                except Exception as error:  # the launch will compile it, and say
                    log.debug("minductor: warm-up of %s failed: %s", name, error)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(compile_kernel, by_kernel))
    log.info(
        "minductor: compiled %d kernels on %d threads in %.2f s",
        len(by_kernel), threads, time.perf_counter() - start,
    )  # fmt: skip


def _installed(module: ModuleType, w: WarmUp, records: dict, stand_in) -> bool:
    """Has this launch's site loaded its binary from the launch record it kept?"""
    record = records.get(record_name(w))
    if record is None or not all(aligned for _, aligned in w.buffers):
        return False
    site, args = getattr(module, w.site), [stand_in(*b) for b in w.buffers]
    if w.sized:
        return site.prepare([*args, *w.ints], w.sizes, record)
    if site.launcher.binary is not None:
        return True  # this module was loaded before, in this process
    return site.launcher.adopt(args + list(w.sizes), record=record)


def record_name(w: WarmUp) -> str:
    """The name a launch's record goes by in an entry: its site's, and for a
    SizedSite the sizes it was warmed up at too (a binary per class)."""
    return f"{w.site}{(*w.sizes, *w.ints)}" if w.sized else w.site


def site_record(site, w: WarmUp) -> dict | None:
    """The launch record of the binary torch's launcher loaded for this launch."""
    if w.sized:
        return site.records.get(site.classes(w.ints, w.sizes))
    return site.launcher.record


_static = getattr(torch._C, "_StaticCudaLauncher", None)  # a CUDA build of torch
_static_launch = getattr(_static, "_launch_kernel", None)

# Triton's scalar types, as the letters torch's launcher reads
_STATIC_TYPES = {"i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l",
                 "u1": "I", "u8": "B", "u16": "H", "u32": "I", "u64": "K",
                 "fp16": "f", "bf16": "f", "fp32": "f", "fp64": "d"}  # fmt: skip


def static_launch_here(pointers: list[torch.Tensor]) -> bool:
    """Can torch's launcher launch a binary for these pointers, in this process?"""
    if _static is None:
        return False
    import triton

    hooks = getattr(getattr(triton, "knobs", None), "runtime", None)
    if hooks is not None and (
        _hooked(getattr(hooks, "launch_enter_hook", None))
        or _hooked(getattr(hooks, "launch_exit_hook", None))
    ):
        return False  # only Triton's launcher calls them
    return all(p.is_cuda and p.data_ptr() % 16 == 0 for p in pointers)


def _hooked(hook) -> bool:
    return hook is not None and len(getattr(hook, "calls", (hook,))) > 0


def static_types(binary) -> str | None:
    """One letter per argument the binary takes (constants left out), or None where
    an argument has no letter."""
    params = static_params(binary)
    return None if params is None else "".join(letter for _, letter in params)


def static_params(binary) -> list[tuple[int, str]] | None:
    """The arguments the binary takes, constants left out: (position, letter) each;
    None where one has no letter."""
    src = binary.src
    names = list(src.fn.arg_names)

    def position(k) -> int:  # Triton names arguments, or numbers them in tuples
        if isinstance(k, str):
            return names.index(k)
        return k[0] if isinstance(k, tuple) else k

    constants = {position(k) for k in getattr(src, "constants", {})}
    params = []
    for k, ty in sorted((position(k), ty) for k, ty in src.signature.items()):
        if ty == "constexpr" or k in constants:
            continue
        letter = "O" if ty.startswith("*") else _STATIC_TYPES.get(ty)
        if letter is None:
            return None
        params.append((k, letter))
    return params


def launch_record(binary, count: int) -> dict | None:
    """What torch's launcher needs to load a binary and launch it with `count`
    arguments: its .cubin file, name, warps, shared memory, letters, the null
    pointers after the arguments, its GPU's architecture. None where it cannot."""
    meta = getattr(binary, "metadata", None)
    if meta is None or getattr(meta, "num_ctas", 1) != 1:
        return None
    if getattr(meta, "tensordesc_meta", None):
        return None
    nulls = 0
    for scratch in ("global_scratch_size", "profile_scratch_size"):
        if hasattr(meta, scratch):
            if getattr(meta, scratch):
                return None  # memory per program, which Triton's launcher allocates
            nulls += 1  # a null pointer for the parameter the binary has
    params = static_params(binary)
    if params is None or any(k >= count for k, _ in params):
        return None
    taken = [k for k, _ in params]  # the call's arguments the binary takes
    types = "".join(letter for _, letter in params)
    cubin = [p for name, p in binary.metadata_group.items() if name.endswith(".cubin")]
    if not cubin:
        return None
    arch = getattr(getattr(meta, "target", None), "arch", None)
    return dict(cubin=cubin[0], name=meta.name, warps=meta.num_warps,
                shared=meta.shared, types=types + "O" * nulls, nulls=nulls, arch=arch,
                taken=None if taken == list(range(count)) else taken)  # fmt: skip


def load_record(record: dict, device: int) -> tuple | None:
    """Load a record's binary on a device with torch's launcher: (function, warps,
    shared memory, letters, trailing arguments, the positions of the arguments it
    takes where not all), or None."""
    if record["arch"] is not None and record["arch"] != _arch(device):
        return None  # compiled for another GPU
    path, name, shared = record["cubin"], record["name"], record["shared"]
    try:
        try:
            loaded = _static._load_kernel(path, name, shared, device)
        except TypeError:  # an older torch's takes no device: it loads on the current
            loaded = _static._load_kernel(path, name, shared)
    except Exception as error:  # Triton's launcher will say what is wrong
        log.debug("minductor: torch's launcher cannot load %s: %s", name, error)
        return None
    function = loaded[-3]  # (module,) function, registers, spills
    taken = None if record["taken"] is None else tuple(record["taken"])
    nulls = (None,) * record["nulls"]
    return function, record["warps"], shared, record["types"], nulls, taken


def load_static(binary, count: int, device: int) -> tuple | None:
    record = launch_record(binary, count)
    return None if record is None else load_record(record, device)


@functools.lru_cache(maxsize=None)
def _arch(device: int) -> int:
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor  # as Triton writes it: 90 for an H100


def _cpp(name: str, fallback: Callable) -> Callable:
    return getattr(torch._C._dynamo.guards, name, None) or fallback


empty_strided = torch.empty_strided
empty_strided_cpu = _cpp(
    "_empty_strided_cpu",
    lambda size, stride, dtype: empty_strided(size, stride, dtype=dtype, device="cpu"),
)
empty_strided_cuda = _cpp(  # on the current device: the wrapper's `call` sets it
    "_empty_strided_cuda",
    lambda size, stride, dtype: empty_strided(size, stride, dtype=dtype, device="cuda"),
)
reinterpret_tensor = _cpp(
    "_reinterpret_tensor",
    lambda t, size, stride, offset: t.as_strided(
        size, stride, t.storage_offset() + offset
    ),
)
extern_kernels = types.SimpleNamespace(
    mm=torch.mm, bmm=torch.bmm, addmm=torch.addmm, baddbmm=torch.baddbmm
)


_numbers: dict[tuple, torch.Tensor] = {}  # (value, sign, dtype, device) -> on device


def number_on(x: torch.Tensor, device: str) -> torch.Tensor:
    """A 0-dim CPU tensor as a 0-dim tensor on `device`, with no copy that waits for
    the GPU: its value read on the host, one tensor kept per value."""
    value = x.item()
    sign = math.copysign(1.0, value) if isinstance(value, float) else 0.0
    key = (value, sign, x.dtype, device)
    found = _numbers.get(key)
    if found is None:
        if len(_numbers) >= 1024:
            _numbers.clear()  # numbers that change at every call: keep few
        with torch.inference_mode(False):  # kept for later calls, which may train
            found = torch.full((), value, dtype=x.dtype, device=device)
        _numbers[key] = found
    return found


def restride(
    t: torch.Tensor | None, size: tuple, stride: tuple, aten_only: bool = False
) -> torch.Tensor:
    """t if it has this layout (sizes of 1 aside), else a copy of t that has it."""
    if t is not None and t.stride() == stride and t.size() == size:
        return t  # the usual answer, first: one comparison per convolution of a step
    if t is None:
        raise AssertionError(f"fallback returned no tensor where {size} is read")
    if aten_only and t.numel() == 0:  # a result the kernel skipped (chapter 19)
        return t
    if tuple(t.size()) != size:
        raise AssertionError(
            f"fallback returned size {tuple(t.size())} stride {tuple(t.stride())}, "
            f"but the compiled code expects size {size} stride {stride}"
        )
    pairs = zip(size, t.stride(), stride)
    if t.numel() <= 1 or all(n == 1 or s == want for n, s, want in pairs):
        return t
    log.debug("fallback returned strides %s, copied into %s", t.stride(), stride)
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


def span(size, stride) -> int:
    """The elements a tensor of this layout reaches, from its first: 0 if it is empty."""
    return 1 + sum((n - 1) * st for n, st in zip(size, stride)) if all(size) else 0


def aligned(t: torch.Tensor) -> torch.Tensor:
    """t if its memory starts on 16 bytes, else a copy of it that does, with the same
    strides (the same bytes, copied whole: strides of 0 and overlaps are kept)."""
    if t.data_ptr() % 16 == 0 or t.numel() == 0:
        return t
    n = span(t.size(), t.stride())
    fresh = torch.empty(n, dtype=t.dtype, device=t.device)
    fresh.copy_(torch.as_strided(t, (n,), (1,)))
    log.debug("an input at an address not 16-byte aligned: copied")
    return fresh.as_strided(t.size(), t.stride())


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")  # the current GPU's


def with_scratch() -> None:
    """Give Triton, in this thread, memory for kernels that need scratch at launch (a
    tensor descriptor made on the GPU), unless it has some."""
    import triton
    from triton.runtime import _allocation

    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(_scratch)


def rand_strided(size, stride, device="cpu", dtype=torch.float32) -> torch.Tensor:
    needed = span(size, stride)
    if dtype.is_floating_point:
        storage = torch.randn(needed, device=device, dtype=dtype)
    elif dtype == torch.bool:
        storage = torch.rand(needed, device=device) > 0.5
    else:
        storage = torch.randint(0, 10, (needed,), device=device, dtype=dtype)
    return torch.as_strided(storage, size, stride)


def benchmark(fn: Callable[[], object], times: int = 10, repeat: int = 10) -> float:
    """Median milliseconds per call of fn, over `repeat` timings of `times` calls."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn()
    sync()
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(times):
            fn()
        sync()
        timings.append((time.perf_counter() - start) * 1000 / times)
    return sorted(timings)[len(timings) // 2]


_skipped: set[str] = set()  # reasons already logged
KERNEL_HEADER = """import triton
import triton.language as tl
from triton.language.extra import libdevice

from minductor import triton_helpers as helpers

"""


def candidate_configs(
    kind: KernelKind, numel: int, rnumel: int, meta: dict[str, int]
) -> list[dict[str, int]]:
    """The rule's configuration and its neighbours that the kernel's masks allow."""
    x, r, w = meta["XBLOCK"], meta.get("RBLOCK"), meta["num_warps"]
    shapes = [(x, r), (x // 2, r), (x * 2, r)]
    if kind is KernelKind.LOOPED:  # a looped reduction's chunk may change too
        shapes += [(x, r // 2), (x, r * 2)]
    found = []
    for xblock, rblock in shapes:
        if not _fits(numel, x, xblock) or (r and not _fits(rnumel, r, rblock)):
            continue
        if r and xblock * rblock > 16384:  # a tile that large spills its registers
            continue
        for warps in (w, w // 2, w * 2):
            cfg = {"XBLOCK": xblock, "num_warps": warps}
            if r:
                cfg = {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps}
            if 1 <= warps <= 16 and cfg not in found:
                found.append(cfg)
    return found


def _fits(size: int, block: int, candidate: int) -> bool:
    """May a kernel generated for `block` run with `candidate` over `size`?"""
    if candidate < 1 or candidate > max(block, _next_power_of_2(size)):
        return False
    exact = size % block == 0  # the kernel's mask is then a constant True
    return not exact or size % candidate == 0


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def autotune_path(source: str, sizes: tuple, device: str, candidates: list) -> Path:
    listed = json.dumps(candidates, sort_keys=True)
    key = f"{source}\n{sizes}\n{device}\n{listed}".encode()
    name = hashlib.sha256(key).hexdigest()[:20]
    return Path(config.cache_dir) / "autotune" / f"{name}.json"


def _read_winner(path: Path, candidates: list) -> dict | None:
    """The winner kept at path, or None if there is none or it cannot be read."""
    try:
        kept = json.loads(path.read_text())
        if kept["config"] in candidates:
            return kept
        raise ValueError(f"its winner {kept['config']} is not a candidate")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("minductor: autotune entry %s is damaged, timing again: %s", path, error)
        return None


class AutotuneFailed(RuntimeError):
    pass


def autotune(
    source: str,
    sizes: tuple,
    device: str,
    candidates: list[dict[str, int]],
    time_one: Callable[[dict[str, int]], float],
) -> dict:
    """The fastest candidate, by time_one (ms), measured once and kept on disk."""
    path = autotune_path(source, sizes, device, candidates)
    kept = _read_winner(path, candidates)
    if kept is not None:
        return {**kept, "cached": True}
    timings, failure = [], None
    for cfg in candidates:
        try:
            timings.append((time_one(cfg), cfg))
        except Exception as error:  # e.g. out of registers: not a candidate
            log.debug("autotune: %s failed: %s", cfg, error)
            failure = error
    if not timings:  # nothing ran: the caller keeps the rule's blocks
        raise AutotuneFailed(f"every configuration failed, the last with: {failure}")
    ms, best = min(timings, key=lambda t: t[0])
    result = {"config": best, "ms": ms, "rule_ms": timings[0][0], "tried": len(timings)}
    result["ranked"] = [cfg for _, cfg in sorted(timings, key=lambda t: t[0])]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(result))
    return {**result, "cached": False}


def autotune_kernel(kernel, layouts, symbol_hints, sizes, timer=None):
    """(meta, comment) for a GeneratedKernel: the measured winner where possible."""
    meta = dict(kernel.meta)
    if kernel.kind is KernelKind.TEMPLATE or kernel.tile:  # one program per tile
        return meta, ""
    devices = {device.type for *_, device in layouts}
    why = None
    if interpret_mode():
        why = "kernels run in Triton's interpreter, with nothing to measure"
    elif devices != {"cuda"}:
        why = "its tensors are not all on a GPU"
    elif kernel.per_call_blocks:
        why = "its blocks are sized at each launch"
    if why:
        if why not in _skipped:
            _skipped.add(why)
            log.warning("minductor: max-autotune skips kernels: %s", why)
        return meta, ""
    numel, rnumel = sizes
    kind = kernel.kind
    source = kernel.source.replace("KERNEL_NAME", "kernel")
    module = load_module(KERNEL_HEADER + source)
    # compiling happens inside Dynamo's fake mode, where a new tensor has no memory
    fake_off = torch._subclasses.fake_tensor.unset_fake_temporarily
    with fake_off():
        args = [_example(*layout) for layout in layouts] + list(symbol_hints)
    if timer is None:
        from triton.testing import do_bench

        timer = functools.partial(do_bench, warmup=5, rep=25, return_mode="median")

    reduction = {} if kind is KernelKind.POINTWISE else {"rnumel": rnumel}

    def time_one(cfg: dict[str, int]) -> float:
        def run():
            launch(module.kernel, numel, *args, **reduction, **cfg)

        run()  # compiles this configuration
        torch.cuda.synchronize()
        return timer(run)

    candidates = candidate_configs(kind, numel, rnumel, meta)
    device = torch.cuda.get_device_name(layouts[0][3])
    key = (numel, rnumel, *symbol_hints)
    try:
        with fake_off():
            result = autotune(kernel.source, key, device, candidates, time_one)
    except AutotuneFailed as why:
        log.warning("minductor: max-autotune kept the rule's blocks: %s", why)
        return meta, ""
    won = result["config"]
    shown = ", ".join(f"{k}={v}" for k, v in won.items())
    how = "cached" if result["cached"] else f"{result['tried']} tried"
    comment = (
        f"# autotuned: {shown}, {result['ms'] * 1000:.1f} us "
        f"(rule's: {result['rule_ms'] * 1000:.1f} us; {how})"
    )
    return won, comment


def _example(size, stride, dtype, device) -> torch.Tensor:
    """An input with this layout: random floats, zeros otherwise (maybe indices)."""
    if dtype.is_floating_point:
        return rand_strided(size, stride, device, dtype)
    needed = span(size, stride)
    storage = torch.zeros(needed, dtype=dtype, device=device)
    return torch.as_strided(storage, size, stride)
