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

if not HAS_CUDA and "TRITON_INTERPRET" not in os.environ:
    assert "triton" not in sys.modules, "triton was imported before TRITON_INTERPRET"
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


@pytest.fixture
def cumsum_falls_back(monkeypatch):
    """cumsum without its lowering (chapter 9): the tests' stand-in for an op that ATen
    runs, chosen when cumsum had no lowering; their expected kernels and lines are
    unchanged by the stand-in."""
    from minductor.lowering import lowerings

    monkeypatch.delitem(lowerings, torch.ops.aten.cumsum.default)
