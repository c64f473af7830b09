"""In-place updates of inputs: eager's results and eager's aliasing.

AOTAutograd keeps each input mutation in the graph as a final copy_ (chapter 1); it
lowers to a kernel that writes into the input's own memory (chapter 11), after every
read of the old value (chapter 15)."""

import pytest
import torch
from helpers import DEVICES, randn

from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch11]


def compare(fn, *args):
    """Run fn compiled on args and eagerly on copies; compare results and inputs."""
    torch._dynamo.reset()
    copies = [a.clone() for a in args]
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    expected = fn(*copies)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    for a, c in zip(args, copies, strict=True):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)  # mutated alike
    (graph,) = graphs
    assert graph.fallbacks == []
    assert "# reuse" in graph.source  # the mutation writes the input's own memory
    return out, graph


def add_one(x):
    x.add_(1)
    return x.sum()


def mul_slice(y):
    y[1:, ::2].mul_(2)
    return y * 1


def sgd(p, g):
    norm = p.pow(2).sum()  # reads the old p
    p.sub_(0.1 * g)
    return norm


def add_flipped(p):
    p.add_(p.flip(0))  # element i reads element n-1-i of the old p
    return p.sum()


def convert(x, y):
    x.copy_(y * 3)  # float64 into float32
    return x + 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(5,), (3, 1, 4), (1,)])
def test_add_in_place(shape, device):
    compare(add_one, randn(*shape, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_slice_of_an_input_mutated(device):
    compare(mul_slice, randn(4, 7, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_mutating_a_view_input_changes_its_base(device):
    base = randn(5, 8, device=device)
    expected = base.clone()

    def scale(v):
        v.mul_(3)
        return v.sum()

    torch._dynamo.reset()
    torch.compile(scale, backend="minductor")(base[1:4, ::3])
    scale(expected[1:4, ::3])
    assert torch.equal(base, expected)  # rows 0 and 4, other columns untouched


@pytest.mark.parametrize("device", DEVICES)
def test_mutating_a_transposed_input(device):
    base = randn(3, 6, device=device)
    expected = base.clone()

    def f(t):
        t.add_(torch.arange(3.0, device=t.device))  # broadcast along t's last dim
        return t * 2

    torch._dynamo.reset()
    out = torch.compile(f, backend="minductor")(base.t())
    torch.testing.assert_close(out, f(expected.t()))
    assert torch.equal(base, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_update_after_a_reduction_of_the_old_value_fuses(device):
    _, graph = compare(sgd, randn(8, 5, device=device), randn(8, 5, device=device))
    assert len(graph.kernel_names) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_update_reading_other_elements_does_not_fuse(device):
    _, graph = compare(add_flipped, randn(7, device=device))
    assert len(graph.kernel_names) == 2
    assert any("overwrites" in line for line in graph.fusion_log)


@pytest.mark.parametrize("device", DEVICES)
def test_copy_converts_dtype(device):
    x = randn(4, 3, device=device)
    y = randn(3, device=device, dtype=torch.float64)
    compare(convert, x, y)


@pytest.mark.parametrize("device", DEVICES)
def test_integer_input_mutated(device):
    def f(i):
        i.mul_(3).add_(1)
        return i.sum()

    compare(f, torch.arange(-4, 5, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_returning_the_mutated_input_returns_the_input_itself(device):
    x = randn(6, device=device)
    expected = x.clone().mul_(2)
    torch._dynamo.reset()

    def f(x):
        x.mul_(2)
        return x

    out = torch.compile(f, backend="minductor")(x)
    assert out is x or out.data_ptr() == x.data_ptr()  # an alias, as in eager
    torch.testing.assert_close(x, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_out_form(device):
    x, y, z = (randn(5, device=device) for _ in range(3))

    def f(x, y, z):
        torch.add(x, y, out=z)
        return z * 2

    compare(f, x, y, z)


@pytest.mark.parametrize("device", DEVICES)
def test_sgd_with_momentum_is_one_kernel_per_parameter(device):
    shapes = [(7, 3), (3,), (1, 5)]
    params = [randn(*s, device=device) for s in shapes]
    grads = [randn(*s, device=device) for s in shapes]
    bufs = [randn(*s, device=device) for s in shapes]

    def step(params, grads, bufs):
        for p, g, buf in zip(params, grads, bufs):
            buf.mul_(0.9).add_(g)  # the momentum, then the parameter, both in place
            p.add_(buf, alpha=-0.1)

    expected = [[t.clone() for t in ts] for ts in (params, grads, bufs)]
    torch._dynamo.reset()
    with record_compiled() as graphs:
        torch.compile(step, backend="minductor")(params, grads, bufs)
    step(*expected)
    for got, want in zip(params + bufs, expected[0] + expected[2], strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    (graph,) = graphs
    # p and its momentum updated by one launch each (one kernel source serves all three)
    assert graph.source.count("    launch_triton") == len(shapes)
    assert len(graph.kernel_names) == 1
    assert graph.fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_adam_style_update_matches_eager(device):
    p, g = randn(6, 5, device=device), randn(6, 5, device=device)
    m, v = randn(6, 5, device=device), randn(6, 5, device=device).abs()

    def adam(p, g, m, v):
        m.lerp_(g, 0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        p.mul_(1 - 0.01 * 0.1).addcdiv_(m, v.sqrt().add_(1e-8), value=-0.01)

    compare_none(adam, p, g, m, v)


def compare_none(fn, *args):
    torch._dynamo.reset()
    copies = [a.clone() for a in args]
    with record_compiled() as graphs:
        torch.compile(fn, backend="minductor")(*args)
    fn(*copies)
    for a, c in zip(args, copies, strict=True):
        torch.testing.assert_close(a, c, atol=1e-6, rtol=1e-5)
    assert all(g.fallbacks == [] for g in graphs)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_running_stats_in_a_training_graph(device):
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(4).to(device)
    ref = torch.nn.BatchNorm1d(4).to(device)
    ref.load_state_dict(bn.state_dict())
    x = randn(6, 4, device=device).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(bn, backend="minductor")(x)
        out.pow(2).sum().backward()
    expected = ref(x_ref)
    expected.pow(2).sum().backward()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    assert bn.num_batches_tracked == ref.num_batches_tracked == 1
    forward = graphs[0]
    assert "# reuse" in forward.source  # the running stats are written in place
