"""Test-session setup: Triton's interpreter on machines without a CUDA GPU.

TRITON_INTERPRET must be in the environment before triton is first imported, and
triton comes in with torch._dynamo; plain `import torch` does not import it, so the
GPU check below is still in time. This file is loaded before any test module.
"""

import os
import sys

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# Compiled graphs kept on disk (chapter 27) would let one test's compile answer
# another's, in a process whose lowerings or passes a test has patched: off, but in
# the tests of the cache itself, which turn it on.
os.environ.setdefault("MINDUCTOR_GRAPH_CACHE", "0")

if not HAS_CUDA and "TRITON_INTERPRET" not in os.environ:
    assert "triton" not in sys.modules, "triton was imported before TRITON_INTERPRET"
    os.environ["TRITON_INTERPRET"] = "1"


def skip_guard_timing() -> None:
    """Dynamo times each new frame's guards once, for its compile metrics, after
    flushing the CPU's caches: 27 ms of every compile, a quarter of a small test's
    time. The tests (and the exercises' zygote) skip that measurement; it changes
    no guard and no result."""
    import torch._dynamo.guards

    torch._dynamo.guards.profile_guard_manager = lambda *args: 0.0


skip_guard_timing()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


@pytest.fixture
def cumsum_falls_back(monkeypatch):
    """cumsum without its lowering (chapter 10): the tests' stand-in for an op that ATen
    runs, chosen when cumsum had no lowering; their expected kernels and lines are
    unchanged by the stand-in."""
    from minductor.lowering import lowerings

    monkeypatch.delitem(lowerings, torch.ops.aten.cumsum.default)


# MINDUCTOR_GPU_COMPILE=1: every graph the tests compile is also generated as for a
# GPU, and at the end of the session each distinct kernel is compiled for an H100
# (tools/gpu_compile.py; no GPU needed). A kernel that fails fails the session.
_gpu_recording = None


def pytest_sessionstart(session):
    global _gpu_recording
    if os.environ.get("MINDUCTOR_GPU_COMPILE") != "1" or HAS_CUDA:
        return
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    from gpu_compile import record_gpu_kernels

    import minductor  # noqa: F401

    _gpu_recording = record_gpu_kernels()
    session.gpu_kernels = _gpu_recording.__enter__()


def pytest_sessionfinish(session, exitstatus):
    if _gpu_recording is None:
        return
    from gpu_compile import compile_kernels

    _gpu_recording.__exit__(None, None, None)
    kernels = session.gpu_kernels
    failures = compile_kernels(kernels)
    distinct = len({k.key for k in kernels})
    print(f"\nGPU compile: {distinct} distinct kernels, {len(failures)} failed")
    for f in failures:
        print(f"--- {f['name']} ({f['graph']}):\n{f['error']}\n{f['source']}")
    if failures:
        session.exitstatus = 1
