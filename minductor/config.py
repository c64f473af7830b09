# generated from chapters/01_capture.md, chapters/06_lowering.md, chapters/10_reductions.md, chapters/11_indexing.md, chapters/13_convnets.md, chapters/14_dependencies.md, chapters/15_scheduler.md, chapters/17_triton.md, chapters/20_memory.md, chapters/21_runtime.md, chapters/22_cudagraphs.md, chapters/23_partition.md, chapters/24_debugging.md, chapters/25_templates.md, chapters/26_choosing.md, chapters/27_cache.md, chapters/28_many_gpus.md — edit there

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("minductor")


def _default_cache_dir() -> str:
    if os.environ.get("MINDUCTOR_CACHE_DIR"):
        return os.environ["MINDUCTOR_CACHE_DIR"]
    user = os.environ.get("USER", "user")
    return os.path.join(tempfile.gettempdir(), f"minductor_{user}")


@dataclass
class Config:
    # 1: log fallbacks and fusion decisions; 2: also print IR and generated modules
    debug: int = int(os.environ.get("MINDUCTOR_DEBUG", "0"))
    # where generated modules are written (chapter 21 loads them from there)
    cache_dir: str = field(default_factory=_default_cache_dir)
    # realize a value read by several consumers if its body is bigger than this
    realize_reads_threshold: int = 4
    # ...or if its body performs more than this many ops
    realize_opcount_threshold: int = 30
    # realize any value whose inlined body would exceed this many ops
    inline_opcount_limit: int = 200
    # a softmax's maximum and sum of exps in one pass over each row
    online_softmax: bool = True
    # reductions over at most this many elements keep a whole row in registers
    persistent_reduction_limit: int = 4096
    # a scatter into an input that the graph copies back writes the input in place
    reinplace_inplaceable_ops: bool = True
    # run a graph's convolutions channels-last where that gains
    layout_optimization: bool = True
    # a reduction over a dimension that is not contiguous keeps a whole row in registers
    # only up to this many elements
    outer_persistent_limit: int = 64
    # the most scheduler nodes one fused kernel may hold
    max_fusion_size: int = 64
    # refuse a fusion that holds more bytes alive longer than this times what it saves
    fusion_memory_factor: int = 32
    # check every indirect index (gather, x[idx], scatter) with a device assert
    debug_indexing: bool = os.environ.get("MINDUCTOR_DEBUG_INDEXING", "0") == "1"
    # largest block a pointwise kernel uses
    max_xblock: int = 1024
    # a kernel writes an output over an input that dies in it, where that is safe
    inplace_buffers: bool = True
    # threads that compile a graph's kernels before its first call; 1: each kernel
    # compiles at its first launch instead
    compile_threads: int = min(8, os.cpu_count() or 1)
    # launch Triton's binaries through torch's launcher where it can (chapter 21)
    static_launch: bool = os.environ.get("MINDUCTOR_STATIC_LAUNCH", "1") == "1"
    # time a few block sizes per kernel on the GPU, keep the fastest
    max_autotune: bool = False
    # most recordings of a graph (one per input shape) before plain launches
    cudagraph_max_recordings: int = 8
    # record compiled graphs on the GPU as CUDA graphs and replay them
    cudagraphs: bool = False
    # split a graph around ops a CUDA graph cannot hold and record the rest
    cudagraph_split: bool = True
    # a debug folder per compiled graph under this one; "" writes none unless
    # TORCH_COMPILE_DEBUG=1, which picks Dynamo's
    debug_dir: str = ""
    # compute a matmul's operand in the template where that pays: a pointwise body that
    # only the product reads, reading no more bytes than it holds
    prologue_fusion: bool = True
    # which kernels a matmul may run under max_autotune: "ATEN" (cuBLAS), "TRITON" (the
    # template), or both, "ATEN,TRITON" (Inductor's default): the faster, measured
    max_autotune_gemm_backends: str = "ATEN,TRITON"
    # the matmul template in persistent form, reading its operands with Hopper's copy
    # engine: "timed" among the candidates on a Hopper GPU; "always" wherever a product
    # can take it (in the interpreter too: to read or test it); "never"
    persistent_tma_matmul: str = "timed"
    # under max_autotune, a matmul whose K is this many times its M and N may be split
    # along K into a batch of products, then summed
    decompose_k_threshold: int = 32
    # the most ways of splitting K that are timed (0: never split)
    num_decompose_k_splits: int = 5
    # keep compiled graphs on disk, under cache_dir, and read them back (chapter 27)
    graph_cache: bool = os.environ.get("MINDUCTOR_GRAPH_CACHE", "1") == "1"
    # lower a functional all_reduce in place, into a buffer the graph owns (chapter 28)
    all_reduce_in_place: bool = True
    # move independent work between a collective and its wait (chapter 28)
    reorder_for_overlap: bool = True
    # on a graph's first call, check that every rank of its groups runs the same
    # collectives on the same shapes, and say where they differ (chapter 28)
    check_collectives: bool = True


    @contextlib.contextmanager
    def patch(self, changes: dict[str, Any]) -> Iterator[None]:
        """These settings inside the block, the old ones restored after it."""
        saved = {name: getattr(self, name) for name in changes}
        for name, value in changes.items():
            setattr(self, name, value)
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(self, name, value)


config = Config()


MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MODE_OPTIONS: dict[str, dict[str, Any]] = {
    "reduce-overhead": {"cudagraphs": True},
    "max-autotune": {"cudagraphs": True, "max_autotune": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}


def settings(mode: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """The config changes that `mode` and `options` ask for; an error for others."""
    mode = mode or "default"
    if mode not in MODES:
        raise ValueError(f"minductor: unknown mode {mode!r}; the modes are {MODES}")
    fields = {f.name: f for f in dataclasses.fields(Config)}
    changes = dict(options or {})
    for name, value in changes.items():
        if name not in fields:
            valid = ", ".join(sorted(fields))
            raise ValueError(
                f"minductor: unknown option {name!r}; the options are: {valid}"
            )
        expected = type(getattr(config, name))
        is_bool = isinstance(value, bool)
        if not isinstance(value, expected) or is_bool != (expected is bool):
            raise TypeError(
                f"minductor: option {name!r} takes a {expected.__name__}, "
                f"got {value!r}"
            )
    return {**MODE_OPTIONS.get(mode, {}), **changes}
