"""Backward graphs are compiled by minductor: gradients match eager.

Each case runs forward and backward through `torch.compile(backend="minductor")` and
compares every input's gradient with eager's. Two graphs are compiled per case (forward
and backward); the backward's fallbacks are pinned, so an op that silently stops being
lowered shows up here.
"""

import logging

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES

from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch01]


def grads(fn, shapes, device, *, atol=1e-4, rtol=1e-4, extra=()):
    """Gradients of fn's output (a scalar) from minductor and eager; the two graphs."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    args = [torch.randn(*s, device=device, requires_grad=True) for s in shapes]
    ref = [a.detach().clone().requires_grad_() for a in args]
    extra = [e.to(device) for e in extra]
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args, *extra)
        out.backward()
    expected = fn(*ref, *extra)
    expected.backward()
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad, atol=atol, rtol=rtol)
    assert len(graphs) == 2, "expected one forward and one backward graph"
    return graphs


GATHER_INDEX = torch.tensor([[0, 2], [1, 1], [3, 0]])
TOKENS = torch.tensor([[0, 2, 2], [5, 5, 1]])  # repeated rows: the gradient accumulates
TARGETS = torch.tensor([1, 0, 3, 3, 4])

CASES = {
    "pointwise": (lambda x, w: (x * w).sin().sum(), [(5, 7), (7,)]),
    "broadcast_sub_exp": (lambda x, b: (x - b).exp().mean(), [(3, 1, 5), (4, 1)]),
    "relu_tanh_sigmoid": (
        lambda x: (torch.relu(x) + torch.tanh(x) * torch.sigmoid(x)).sum(),
        [(6, 5)],
    ),
    "gelu_silu": (lambda x: (F.gelu(x) + F.silu(x)).sum(), [(5, 3)]),
    "sum_max": (lambda x: x.sum(0).pow(2).sum() + x.amax(1).sum(), [(6, 4)]),
    "mean_var": (lambda x: x.var(0).sum() + x.mean(), [(6, 4)]),
    "softmax": (lambda x: torch.softmax(x, -1).pow(2).sum(), [(4, 9)]),
    "log_softmax": (lambda x: (torch.log_softmax(x, 1) * 0.3).sum(), [(4, 9)]),
    "layer_norm": (
        lambda x, w, b: F.layer_norm(x, (9,), w, b).pow(2).sum(),
        [(4, 9), (9,), (9,)],
    ),
    "views": (lambda x: (x.t().reshape(-1)[::2] * 3).pow(2).sum(), [(4, 6)]),
    "select_diagonal_unfold": (
        lambda x: x[1].sum() + x.diagonal().pow(2).sum() + x.unfold(1, 2, 1).sum(),
        [(5, 5)],
    ),
    # weight norm by output channel (dim 0) and by the last dimension (dim 2, as in
    # Wav2Vec2's positional convolution): a norm and arithmetic, forward and backward
    "weight_norm_dim0": (
        lambda v, g: torch._weight_norm(v, g, 0).sin().sum(),
        [(4, 3, 5), (4, 1, 1)],
    ),
    "weight_norm_last_dim": (
        lambda v, g: torch._weight_norm(v, g, 2).sin().sum(),
        [(4, 3, 5), (1, 1, 5)],
    ),
    "normalize": (
        lambda x: F.normalize(x, dim=-1).pow(3).sum(),
        [(5, 7)],
    ),
    "cat_pad": (
        lambda x, y: F.pad(torch.cat([x, y * 2], 1), (1, 1)).pow(2).sum(),
        [(3, 4), (3, 2)],
    ),
}

# these take integer inputs after the float ones
INDEXED = {
    "gather": (
        lambda x, i: torch.gather(x, 1, i).pow(2).sum(),
        [(3, 4)],
        (GATHER_INDEX,),
    ),
    "embedding": (
        lambda w, t: F.embedding(t, w).pow(2).sum(),
        [(6, 3)],
        (TOKENS,),
    ),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), [(5, 6)], (TARGETS,)),
    "index_select": (
        lambda x, i: x.index_select(0, i).pow(2).sum(),
        [(5, 3)],
        (torch.tensor([4, 0, 4]),),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_match_eager(case, device):
    fn, shapes = CASES[case]
    forward, backward = grads(fn, shapes, device)
    assert backward.kernel_names, "the backward graph ran no kernel of ours"
    assert forward.fallbacks == backward.fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(INDEXED))
def test_gradients_of_indexing_match_eager(case, device):
    fn, shapes, extra = INDEXED[case]
    forward, backward = grads(fn, shapes, device, extra=extra)
    assert backward.fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_gather_backward_accumulates_with_atomic_adds(device):
    _, backward = grads(
        lambda x, i: torch.gather(x, 1, i).sum(), [(3, 4)], device, extra=(GATHER_INDEX,)
    )
    assert "tl.atomic_add" in backward.source  # scatter_add of the incoming gradient


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("cumsum_falls_back")
def test_an_op_we_cannot_lower_in_backward_falls_back_alone(device, caplog):
    # without its lowering, cumsum's backward (a flipped cumsum) falls back op by op,
    # while the pointwise work around it is still compiled
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        forward, backward = grads(
            lambda x: torch.cumsum(x.sin(), 1).pow(2).sum(), [(4, 5)], device
        )
    assert "aten.cumsum.default" in backward.fallbacks
    assert backward.kernel_names
    assert not any("running graph with ATen" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_gradient_without_a_scatter(reduction, weighted, device):
    # ignore_index hits rows 1 and 4; our decomposition compares class indices with
    # the targets (no zeros-then-scatter), a class weight keeps torch's decomposition
    targets = torch.tensor([2, -100, 0, 2, -100, 5])
    weight = torch.rand(6) + 0.5 if weighted else None

    def fn(x, t):
        out = F.nll_loss(F.log_softmax(x, 1), t, weight=weight, reduction=reduction)
        return out.pow(2).sum()

    if weighted:
        weight = weight.to(device)
    forward, backward = grads(fn, [(6, 6)], device, extra=(targets,))
    assert backward.fallbacks == []
    if not weighted:
        assert "scatter" not in backward.source


SAVED_LAYOUTS = {
    "channels-last": lambda x: x.to(memory_format=torch.channels_last),
    "transposed": lambda x: x.transpose(2, 3),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", list(SAVED_LAYOUTS))
def test_saved_activations_have_the_strides_the_backward_was_compiled_for(
    layout, device
):
    """The forward returns the activations the backward saves, in eager's strides: a
    channels-last ReLU output stored NCHW was read by the backward as channels-last."""
    x = SAVED_LAYOUTS[layout](torch.randn(2, 5, 3, 4, device=device))
    w = torch.randn(5, 1, 1, device=device, requires_grad=True)
    k = torch.randn(3, 5, 3, 3, device=device, requires_grad=True)

    def f(x, w):
        y = torch.relu(x * w + 0.3)  # saved: the convolution's backward reads it
        return F.conv2d(y, k, padding=1).sin().sum()

    x.requires_grad_()
    expected = torch.autograd.grad(f(x, w), (x, w))
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(f, backend="minductor")(x, w), (x, w))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
