# generated from chapters/01_capture.md — edit there

import logging
import os

if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

from minductor.capture import compile_fx, minductor_backend, run_and_get_code  # noqa: E402
from minductor.config import config  # noqa: E402


def _register() -> None:
    from torch._dynamo.backends import registry

    # when Dynamo loads us through the entry point, it registers the backend itself
    if "minductor" in registry._COMPILER_FNS or registry._BACKENDS.get("minductor"):
        return
    registry.register_backend(minductor_backend, name="minductor")


_register()
if config.debug:
    logging.getLogger("minductor").setLevel(logging.DEBUG)

__all__ = ["compile_fx", "config", "minductor_backend", "run_and_get_code"]
