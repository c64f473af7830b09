"""The kernels minductor would launch on a GPU, compiled for one on this machine.

The CPU tests run every kernel in Triton's interpreter, which checks what a kernel
computes but not that Triton's GPU compiler accepts it. tools/gpu_compile.py generates
each graph a second time as for a GPU and compiles its kernels for an H100 (sm_90),
which needs no GPU. The functions below cover the code generator's paths: every math op
in the dtypes it takes, persistent, looped and split reductions, Welford, scans,
indirect loads and atomics, random numbers, windows, half-precision stores, and sizes
known only at run time. (MINDUCTOR_GPU_COMPILE=1 does the same for every kernel that
the whole test suite compiles; see tests/conftest.py.)
"""

import os
import sys

import pytest
import torch
import torch.nn.functional as F
from helpers import INTERPRET

from minductor.runtime import Launcher

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
from gpu_compile import compile_kernels, record_gpu_kernels  # noqa: E402

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.ch17,
    pytest.mark.skipif(not INTERPRET, reason="on a GPU the kernels run for real"),
]


def _float_math(x):
    y = x.abs() + 1
    return (
        x.sin() + x.cos() + x.tanh() + x.sigmoid() + x.erf() + x.exp() + x.expm1(),
        y.log() + y.log2() + y.log10() + y.log1p() + y.sqrt() + y.rsqrt() + y.pow(1.5),
        x.floor() + x.ceil() + x.trunc() + x.round() + x.sign() + x.reciprocal(),
        torch.copysign(x, -x), torch.fmod(x, 0.7), torch.remainder(x, 0.7),
        x // 0.3, torch.signbit(x), x.isnan() | x.isinf(), torch.exp2(x),
        torch.maximum(x, x.flip(-1)), torch.where(x > 0, x, x * 0.1),
        F.gelu(x), F.silu(x), F.softplus(x), F.hardswish(x), F.elu(x),
    )  # fmt: skip


def _int_math(i):
    j = i.flip(-1) | 1
    return (
        i + j, i * j, i // j, i % j, torch.fmod(i, j), i & j, i | j, i ^ j, ~i,
        i.abs(), i.sign(), i.neg(), torch.maximum(i, j), i.pow(2), i > j,
        i.float() / j, i.signbit(), torch.clamp(i, -3, 3),
    )  # fmt: skip


def _reductions(x):
    return (
        x.sum(1), x.amax(0), x.argmax(1), x.argmin(0), torch.var_mean(x, 1),
        x.softmax(-1), x.log_softmax(0), torch.logsumexp(x, 1), x.prod(1),
        x.any(1), (x > 0).all(0), x.norm(dim=1),
    )  # fmt: skip


def _scans(x):  # the interpreter runs a scan's combine one element at a time: small
    return x.cumsum(1), x.cumprod(0), torch.logcumsumexp(x, 1), (x > 0).long().cumsum(1)


def _long_rows(x):  # looped and split reductions, a Welford over many elements
    return x.sum(), x.mean(1), torch.var_mean(x), x.amax(1), x.softmax(1)


def _indexing(x, idx, src):
    out = torch.zeros(40, 9).index_add(0, idx, src)
    return (
        x[idx], torch.gather(x, 1, idx[:, None].expand(-1, 3) % 9),
        out, x.scatter_add(0, idx[:, None].expand(-1, 9) % 40, src),
        x.index_put((idx % 40,), src, accumulate=True), F.embedding(idx, x),
    )  # fmt: skip


def _random(x):
    return torch.rand_like(x) + F.dropout(x, 0.3, True), torch.randn_like(x)


def _windows(img):
    pooled, idx = F.max_pool2d(img, 3, 2, 1, return_indices=True)
    return (
        pooled, idx, F.avg_pool2d(img, 2), F.adaptive_avg_pool2d(img, 1),
        F.interpolate(img, scale_factor=2, mode="bilinear"),
        F.interpolate(img, scale_factor=2, mode="nearest"),
        F.batch_norm(img, None, None, training=True),
        F.group_norm(img, 2), F.pad(img, (1, 2, 0, 1), mode="reflect"),
    )  # fmt: skip


def _block(x, w):  # a training step's kernels: layer norm, GELU, their gradients
    h = F.layer_norm(x @ w, (w.shape[1],))
    return F.cross_entropy(F.gelu(h), torch.arange(x.shape[0]) % w.shape[1])


CASES = [
    ("float math, float32", _float_math, lambda: (torch.randn(7, 33),)),
    ("float math, float16", _float_math, lambda: (torch.randn(7, 33).half(),)),
    ("float math, bfloat16", _float_math, lambda: (torch.randn(7, 33).bfloat16(),)),
    ("float math, float64", _float_math, lambda: (torch.randn(7, 33).double(),)),
    ("int math, int32", _int_math, lambda: (torch.randint(-9, 9, (5, 6)).int(),)),
    ("int math, int64", _int_math, lambda: (torch.randint(-9, 9, (5, 6)),)),
    ("bool", lambda b: (b & ~b.flip(0), b.sum(0), b.any(), b.long().cumsum(0)),
     lambda: (torch.rand(6, 5) > 0.5,)),
    ("reductions, float32", _reductions, lambda: (torch.randn(9, 130),)),
    ("reductions, bfloat16", _reductions, lambda: (torch.randn(9, 130).bfloat16(),)),
    ("scans, float32", _scans, lambda: (torch.randn(5, 19),)),
    ("scans, bfloat16", _scans, lambda: (torch.randn(5, 19).bfloat16(),)),
    ("long rows", _long_rows, lambda: (torch.randn(4, 70000),)),
    ("indexing", _indexing,
     lambda: (torch.randn(40, 9), torch.randint(0, 40, (11,)), torch.randn(11, 9))),
    ("random", _random, lambda: (torch.randn(65, 17),)),
    ("windows, channels-last", _windows,
     lambda: (torch.randn(2, 4, 9, 11).to(memory_format=torch.channels_last),)),
    # batch-norm statistics over few channels and long rows: Welford over pieces of
    # each row, then the pieces combined (chapter 10)
    ("split statistics", lambda x: F.batch_norm(x, None, None, training=True),
     lambda: (torch.randn(4, 16, 64, 64).to(memory_format=torch.channels_last),)),
]  # fmt: skip


def test_kernels_compile_for_a_gpu(monkeypatch):
    # only the kernels' source is wanted: the interpreter need not run them (the
    # other tests do), and a CPU kernel left unrun leaves its output unwritten
    monkeypatch.setattr(Launcher, "__call__", lambda self, *args: None)
    with record_gpu_kernels() as kernels:
        for _, fn, make in CASES:
            torch._dynamo.reset()
            torch.compile(fn, backend="minductor")(*make())
        # a training step (forward and backward graphs), and sizes known at run time
        torch._dynamo.reset()
        w = torch.randn(16, 24, requires_grad=True)
        torch.compile(_block, backend="minductor")(torch.randn(8, 16), w).backward()
        torch._dynamo.reset()
        dynamic = torch.compile(_reductions, backend="minductor", dynamic=True)
        dynamic(torch.randn(5, 40))
    assert len({k.key for k in kernels}) >= 50, "the cases lost their kernels"
    failures = compile_kernels(kernels)
    report = "\n\n".join(f"{f['name']}: {f['error']}\n{f['source']}" for f in failures)
    assert not failures, report
