"""Softmax's statistics in one pass (chapters 10 and 18): the ATen pass that pairs an
amax with the sum of exp(x - amax), the online reduction that computes both, and the
rows where it must agree with eager: -inf, +inf, NaN, huge values, size-1 rows."""

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, randn, run

from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch10]

inf, nan = float("inf"), float("nan")


def compiled_run(fn, *args, **tolerances):
    """run's kernels and fallbacks, and the generated source."""
    with record_compiled() as graphs:
        kernels, fallbacks = run(fn, *args, **tolerances)
    return kernels, fallbacks, "\n".join(g.source for g in graphs)


SOFTMAXES = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "softmax over dim 0": lambda x: torch.softmax(x, 0),
    "hand-written": lambda x: (lambda e: e / e.sum(-1, keepdim=True))(
        torch.exp(x - x.amax(-1, keepdim=True))
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(SOFTMAXES))
@pytest.mark.parametrize("shape", [(3, 3000), (5, 37), (1, 1), (4, 1), (2, 3, 1500)])
def test_softmax_matches_eager_through_one_stats_reduction(device, name, shape):
    x = randn(*shape, device=device) * 4
    kernels, fallbacks, _ = compiled_run(SOFTMAXES[name], x)
    assert fallbacks == []
    # one reduction computes both statistics: no amax of its own
    assert any("softmax_stats" in k for k in kernels), kernels
    assert not any("amax" in k for k in kernels), kernels


@pytest.mark.parametrize("device", DEVICES)
def test_a_long_row_reads_memory_twice_in_two_kernels(device):
    """A row too long for registers: a looped reduction of both statistics, then the
    pointwise finish; it was three kernels (amax, the sum, the finish)."""
    x = randn(3, 5000, device=device)
    kernels, _, source = compiled_run(lambda x: torch.softmax(x, -1), x)
    assert len(kernels) == 2 and "softmax_stats" in kernels[0], kernels
    assert source.count("for roffset") == 1


@pytest.mark.parametrize("device", DEVICES)
def test_a_short_row_stays_one_kernel(device):
    x = randn(16, 64, device=device)
    kernels, _, _ = compiled_run(lambda x: torch.softmax(x, -1) * 2, x)
    assert len(kernels) == 1, kernels


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [40, 5000])  # persistent, looped
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_rows_of_infinities_and_nans_match_eager(device, length, fn):
    x = randn(6, length, device=device)
    x[0] = -inf  # every score masked: NaN in eager
    x[1, ::2] = -inf  # half masked, the rest finite
    x[2, 7] = inf  # one +inf: NaN in eager
    x[3, 3] = nan
    x[4] = 1e4  # exp(x) overflows unless the maximum is subtracted
    x[5, : length // 2] = -inf  # the first chunks see only -inf, then finite values
    compiled_run(SOFTMAXES[fn], x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes(device, dtype):
    x = randn(3, 2500, device=device, dtype=dtype)
    tolerance = 1e-2 if dtype != torch.float64 else 1e-10
    compiled_run(lambda x: F.log_softmax(x, -1), x, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_rows(device):
    x = randn(2100, 3, device=device).t()  # rows 2100 long, elements 3 apart
    compiled_run(lambda x: torch.softmax(x, -1), x)


@pytest.mark.parametrize("device", DEVICES)
def test_few_rows_that_split_keep_two_reductions(device):
    """Two rows of 2^17: a sum over them splits into many programs per row, which
    beats one pass per row; the pair is left as amax and sum, and both split."""
    x = randn(2, 2**17, device=device)
    kernels, _, source = compiled_run(lambda x: torch.softmax(x, -1), x)
    assert "exp(_acc" not in source  # no running sum rescaled by a running maximum
    assert len(kernels) > 2


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_training_matches_eager(device):
    logits = randn(8, 3000, device=device, dtype=torch.bfloat16).requires_grad_()
    target = torch.randint(0, 3000, (8,), device=device)

    def loss(z):
        return F.cross_entropy(z.float(), target)

    compiled = torch.compile(loss, backend="minductor")
    torch._dynamo.reset()
    got = compiled(logits)
    (grad,) = torch.autograd.grad(got, logits)
    want = loss(logits)
    (want_grad,) = torch.autograd.grad(want, logits)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad, want_grad, atol=1e-2, rtol=1e-2)


def test_the_pass_leaves_other_amaxes_alone():
    """An amax over two dims, one without keepdim, or a sum over another dim."""
    from minductor.reductions import fuse_softmax_stats

    def f(x):
        a = torch.exp(x - x.amax((0, 1), keepdim=True)).sum((0, 1), keepdim=True)
        m = x.amax(-1, keepdim=True)
        b = torch.exp(x - m).sum(0, keepdim=True)
        return a, b

    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 6))
    fuse_softmax_stats(gm)
    targets = {str(n.target) for n in gm.graph.nodes}
    assert "minductor.softmax_stats.default" not in targets
    assert "aten.amax.default" in targets


def test_the_op_runs_eagerly_as_defined():
    x = torch.randn(5, 7)
    m, s = torch.ops.minductor.softmax_stats(x, 1)
    torch.testing.assert_close(m, x.amax(1, keepdim=True))
    torch.testing.assert_close(s, torch.exp(x - m).sum(1, keepdim=True))
