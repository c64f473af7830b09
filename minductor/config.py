# generated from chapters/01_capture.md — edit there

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
    user = os.environ.get("USER", "user")
    return os.path.join(tempfile.gettempdir(), f"minductor_{user}")


@dataclass
class Config:
    # 1: log fallbacks and fusion decisions; 2: also print IR and generated modules
    debug: int = int(os.environ.get("MINDUCTOR_DEBUG", "0"))
    # realize a value read by several consumers if its body is bigger than this (ch. 6)
    realize_reads_threshold: int = 4
    realize_opcount_threshold: int = 30
    # realize any value whose inlined body would exceed this many ops (ch. 6)
    inline_opcount_limit: int = 200
    # refuse a fusion that holds more bytes alive longer than this times what it saves
    fusion_memory_factor: int = 32
    # largest block a pointwise kernel uses (ch. 15)
    max_xblock: int = 1024
    # a kernel writes an output over an input that dies in it, where that is safe
    # (ch. 15, 17)
    inplace_buffers: bool = True
    # reductions over at most this many elements keep a whole row in registers (ch. 16)
    persistent_reduction_limit: int = 4096
    # ...but only this many when the reduced dimension is not contiguous (ch. 14)
    outer_persistent_limit: int = 64
    # the most scheduler nodes one fused kernel may hold (ch. 14)
    max_fusion_size: int = 64
    # a softmax's maximum and sum of exps in one pass over each row (ch. 10)
    online_softmax: bool = True
    # a scatter into an input that the graph copies back writes the input in place
    # (ch. 11)
    reinplace_inplaceable_ops: bool = True
    # run a graph's convolutions channels-last where that gains (ch. 13)
    layout_optimization: bool = True
    # check every indirect index (gather, x[idx], scatter) with a device assert (ch. 15)
    debug_indexing: bool = os.environ.get("MINDUCTOR_DEBUG_INDEXING", "0") == "1"
    # where generated modules are written (ch. 19)
    cache_dir: str = field(default_factory=_default_cache_dir)
    # time a few block sizes per kernel on the GPU, keep the fastest (ch. 19)
    max_autotune: bool = False
    # threads that compile a graph's kernels before its first call; 1: each kernel
    # compiles at its first launch instead (ch. 19)
    compile_threads: int = min(8, os.cpu_count() or 1)
    # record compiled graphs on the GPU as CUDA graphs and replay them (ch. 20)
    cudagraphs: bool = False
    # most recordings of a graph (one per input shape) before plain launches (ch. 20)
    cudagraph_max_recordings: int = 8
    # split a graph around ops a CUDA graph cannot hold and record the rest (ch. 21)
    cudagraph_split: bool = True
    # a debug folder per compiled graph under this one; "" writes none unless
    # TORCH_COMPILE_DEBUG=1, which picks Dynamo's (ch. 22)
    debug_dir: str = ""


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
