# generated from chapters/10_runtime.md — edit there

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy
import torch

from minductor.config import config

_modules: dict[str, ModuleType] = {}


def interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


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
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(source)
        tmp.replace(path)  # atomic: a concurrent reader never sees half a file
    spec = importlib.util.spec_from_file_location(f"minductor_generated.{key}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    _modules[key] = module
    return module


_launchers: dict[tuple[int, tuple[int, ...]], Callable] = {}


def launch(kernel, numel: int, *args, XBLOCK: int, num_warps: int) -> None:
    if numel == 0:
        return
    grid = ((numel + XBLOCK - 1) // XBLOCK,)
    key = (id(kernel), grid)
    launcher = _launchers.get(key)
    if launcher is None:
        launcher = _launchers[key] = kernel[grid]
    if interpret_mode():
        # masked-off lanes may compute log(-1) or 1/0; numpy would warn about them
        with numpy.errstate(all="ignore"):
            launcher(*args, numel, XBLOCK=XBLOCK)
    else:
        launcher(*args, numel, XBLOCK=XBLOCK, num_warps=num_warps)


empty_strided = torch.empty_strided


def assert_size_stride(t: torch.Tensor, size: tuple, stride: tuple) -> None:
    if tuple(t.size()) != size or (t.numel() > 1 and tuple(t.stride()) != stride):
        raise AssertionError(
            f"fallback returned size {tuple(t.size())} stride {tuple(t.stride())}, "
            f"but the compiled code expects size {size} stride {stride}"
        )


def rand_strided(size, stride, device="cpu", dtype=torch.float32) -> torch.Tensor:
    needed = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
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
