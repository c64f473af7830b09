"""Widening conversions that the realize policy would store: the narrow source is
stored instead, and each reader converts it (chapter 8's `store_narrow`)."""

import re

import pytest
import torch
from helpers import DEVICES, randn

from minductor.capture import record_compiled
from minductor.config import config

pytestmark = [pytest.mark.e2e, pytest.mark.ch08]


@pytest.fixture
def realize_eagerly(monkeypatch):
    # a few ops make a value worth storing when several read it, as a batch norm's
    # backward gradient is
    monkeypatch.setattr(config, "realize_opcount_threshold", 3)


def small_ints(device, dtype):
    """Values every 16-bit float holds exactly, and so do the sums and products of the
    tests: eager's rounding after each op and a fused kernel's agree."""
    return torch.randint(-8, 8, (7, 9), device=device).to(dtype)


def compiled(fn, *args):
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    return out, graphs[0].source


def stored_dtypes(source: str, shape: str) -> set[str]:
    """The dtypes of the buffers of this shape the wrapper allocates."""
    found = re.findall(
        rf"empty_strided_\w+\({re.escape(shape)}, \([^)]*\), (torch\.\w+)\)", source
    )
    return set(found)


@pytest.mark.usefixtures("realize_eagerly")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("narrow", [torch.bfloat16, torch.float16])
def test_a_widened_value_read_several_times_is_stored_narrow(narrow, device):
    def f(x, y):
        g = torch.where(x > 0, y * 3 + x, y - x).float()
        return g.sum(0), g.amax(1), g * 2

    x, y = small_ints(device, narrow), small_ints(device, narrow)
    out, source = compiled(f, x, y)
    for o, e in zip(out, f(x, y), strict=True):
        assert o.dtype == e.dtype == torch.float32
        torch.testing.assert_close(o, e, atol=1e-5, rtol=1e-5)
    assert stored_dtypes(source, "(7, 9)") == {"torch.float32", str(narrow)}  # g * 2
    assert source.count(f"(7, 9), (9, 1), {narrow})") == 1


@pytest.mark.usefixtures("realize_eagerly")
@pytest.mark.parametrize("device", DEVICES)
def test_a_widened_value_a_matmul_reads_is_stored_wide(device):
    def f(x, y, w):
        g = torch.where(x > 0, y * 3 + x, y - x).float()
        return g @ w, g * 2

    x, y = small_ints(device, torch.bfloat16), small_ints(device, torch.bfloat16)
    w = randn(9, 5, device=device)
    out, source = compiled(f, x, y, w)
    for o, e in zip(out, f(x, y, w), strict=True):
        torch.testing.assert_close(o, e, atol=1e-4, rtol=1e-4)
    assert stored_dtypes(source, "(7, 9)") == {"torch.float32"}  # g, for the matmul
