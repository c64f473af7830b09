# generated from chapters/01_capture.md — edit there

import logging
import os

if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

from minductor.capture import compile_fx, minductor_backend, run_and_get_code  # noqa: E402
from minductor.config import config  # noqa: E402

# every lowering module registers its ops into minductor.lowering.lowerings on import
from minductor import (  # noqa: E402, F401
    lowering,  # ch. 6: the registry, GraphLowering, constants, the fallback
    pointwise,  # ch. 7: broadcasting, type promotion, the elementwise ops
    factories,  # ch. 8: full/zeros/*_like, copies, conversions, arange, rand
    views,  # ch. 9: views, reshape, flip/roll/repeat, pad, slice scatters, cat
    reductions,  # ch. 10: sum ... var_mean, softmax statistics, nll_loss, scans
    indexing,  # ch. 11: gather, index, embedding, scatter, index_put, copy_
    extern,  # ch. 12: mm/bmm/addmm/baddbmm, convolution, attention
    convnets,  # ch. 13: batch norm in training, its backward, pooling
    codegen_reductions,  # ch. 18: not a lowering; joins codegen_triton's kernel kinds
    memory,  # ch. 20: not a lowering; joins the wrapper's memory hooks
    cudagraphs,  # ch. 22: not a lowering; joins capture's graph_wrappers
    partition,  # ch. 23: not a lowering; joins capture's graph_splitters
    debug,  # ch. 24: debug folders, torch's logs and traces, explain
    templates,  # ch. 25: matmul templates; takes mm, bmm and addmm over from ch. 12
    select_algorithm,  # ch. 26: the template's tiles, or cuBLAS, chosen by timing
    cache,  # ch. 27: compiled graphs kept on disk; joins capture's graph_caches
    distributed,  # ch. 28: collectives and their waits; joins the schedule_passes
)


def _register() -> None:
    from torch._dynamo.backends import registry

    # when Dynamo loads us through the entry point, it registers the backend itself
    if "minductor" in registry._COMPILER_FNS or registry._BACKENDS.get("minductor"):
        return
    registry.register_backend(minductor_backend, name="minductor")


from minductor.debug import explain  # noqa: E402  (ch. 24)
from minductor.cache import load_cache_artifacts, save_cache_artifacts  # noqa: E402

_register()
if config.debug:
    logging.getLogger("minductor").setLevel(logging.DEBUG)

__all__ = ["compile_fx", "config", "explain", "load_cache_artifacts", "minductor_backend",
           "run_and_get_code", "save_cache_artifacts"]  # fmt: skip
