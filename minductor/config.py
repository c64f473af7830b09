# generated from chapters/01_capture.md — edit there

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field


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
    # largest block a pointwise kernel uses (ch. 14)
    max_xblock: int = 1024
    # reductions over at most this many elements keep a whole row in registers (ch. 14)
    persistent_reduction_limit: int = 4096
    # ...but only this many when the reduced dimension is not contiguous (ch. 13)
    outer_persistent_limit: int = 64
    # the most scheduler nodes one fused kernel may hold (ch. 13)
    max_fusion_size: int = 64
    # check every indirect index (gather, x[idx], scatter) with a device assert (ch. 14)
    debug_indexing: bool = os.environ.get("MINDUCTOR_DEBUG_INDEXING", "0") == "1"
    # where generated modules are written (ch. 16)
    cache_dir: str = field(default_factory=_default_cache_dir)


config = Config()
