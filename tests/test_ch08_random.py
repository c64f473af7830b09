"""Random numbers drawn in the kernel: rand, randn, dropout and bernoulli.

Compiled random numbers come from Philox (chapter 3's `ops.rand`), not from eager's
generator, so the numbers differ from eager's and most tests here are statistical:
with n = 20000 draws every bound is four standard deviations wide, and a broken
generator (a constant, a wrong scale, a mask that keeps the wrong fraction, neighbours
that agree) fails at once. Each compiled call first seeds torch's generator, so the
seeds drawn, and so every number, repeat from run to run: no test is flaky. The rest is
exact: Philox itself against a published test vector and against the kernel, the
scaling of kept elements, gradients against the forward's mask, seeds against
`torch.manual_seed`, and the structure (one kernel, no fallback).
"""

import math
import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from helpers import DEVICES
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import record_compiled
from minductor.codegen_triton import (
    InterpreterOverrides,
    TritonOverrides,
    generate_kernel,
)
from minductor.decompositions import decomposition_table
from minductor.ir import ComputedBuffer, FallbackKernel
from minductor.lowering import GraphLowering
from minductor.ops import (
    EvalHandler,
    body_to_str,
    ops,
    philox,
    philox_rand,
    philox_randn,
    set_handler,
)
from minductor.runtime import interpret_mode, launch, load_module
from minductor.scheduler import Scheduler

pytestmark = [pytest.mark.e2e, pytest.mark.ch08]

N = 20000
SIGMAS = 4


def compiled(fn, *args):
    """Run fn compiled by minductor; return its result and the compiled graphs."""
    torch._dynamo.reset()
    torch.manual_seed(0)  # the seeds the compiled code draws, and so its numbers
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    return out, graphs


def assert_near(value, expected, sd, what):
    assert abs(value - expected) <= SIGMAS * sd, (
        f"{what}: {value:.5f}, expected {expected:.5f} ± {SIGMAS * sd:.5f}"
    )


def lag_correlation(x):
    """Correlation of neighbours: about 0 for independent draws."""
    a, b = x[:-1].double(), x[1:].double()
    return torch.corrcoef(torch.stack([a, b]))[0, 1].item()


def seed_buffers(graph):
    return [
        b
        for b in graph.buffers
        if isinstance(b, FallbackKernel) and b.op is torch.ops.aten.randint.low
    ]


# --- Philox: chapter 3's reference, and what the kernel draws -------------------------


@pytest.mark.ch03
def test_philox_matches_the_published_test_vector():
    # Random123's known-answer test for Philox4x32-10: counter 0, key 0
    assert philox(0, 0) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)


@pytest.mark.ch03
def test_eval_handler_draws_philox_from_seed_and_offset_alone():
    def body(index):
        seed = ops.load("seed", sympy.Integer(0))
        offset = ops.index_expr(index[0], torch.int64)
        return ops.rand(seed, offset), ops.randn(seed, offset)

    seed = 0x123456789ABCDEF  # both words of the key in use

    def draw(k, s=seed):
        with set_handler(EvalHandler({"seed": torch.tensor([s])})):
            return body([sympy.Integer(k)])

    u, z = draw(7)
    assert u.dtype == torch.float32 and z.dtype == torch.float32
    assert torch.equal(u, philox_rand(seed, 7)) and torch.equal(
        z, philox_randn(seed, 7)
    )
    assert torch.equal(draw(7)[0], u)  # a pure function: the same draw again
    assert draw(8)[0] != u and draw(7, seed + 1)[0] != u
    assert 0 <= u < 1


@pytest.mark.ch03
def test_print_handler_shows_the_random_ops():
    def body(index):
        seed = ops.load("seed", sympy.Integer(0))
        return ops.randn(seed, ops.index_expr(index[0], torch.int64))

    i0 = sympy.Symbol("i0", integer=True, nonnegative=True)
    assert body_to_str(body, [i0]).splitlines() == [
        "tmp0 = ops.load(seed, 0)",
        "tmp1 = ops.index_expr(i0, torch.int64)",
        "tmp2 = ops.randn(tmp0, tmp1)",
        "return tmp2",
    ]


@pytest.mark.ch17
def test_triton_translation_of_the_random_ops():
    assert TritonOverrides.rand("tmp0", "tmp1") == "tl.rand(tmp0, tmp1)"
    assert TritonOverrides.randn("tmp0", "tmp1") == "tl.randn(tmp0, tmp1)"
    # the interpreter runs Triton's Philox as it is: one translation for both
    assert InterpreterOverrides.rand is TritonOverrides.rand
    assert InterpreterOverrides.randn is TritonOverrides.randn


def _random_kernel(mode, n):
    """The kernel of torch.<mode>(n), and the names of its seed and result buffers."""
    fn = getattr(torch, mode)
    gm = make_fx(lambda: fn(n))()
    scheduler = Scheduler(GraphLowering(gm, []).lower())
    (seed,) = seed_buffers(scheduler.graph)
    (node,) = [n for n in scheduler.nodes if not n.is_extern()]
    kernel = generate_kernel(
        node, scheduler.removed_buffers, interpret=interpret_mode()
    )
    return kernel, seed.name, node.get_name()


def _launch(kernel, buffers, xblock):
    header = (
        "import triton\nimport triton.language as tl\n"
        "from triton.language.extra import libdevice\n"
        "from minductor import triton_helpers as helpers\n\n"
    )
    source = header + kernel.source.replace("KERNEL_NAME", "kernel") + "\n"
    module = load_module(source)
    meta = dict(kernel.meta, XBLOCK=xblock)
    launch(module.kernel, kernel.numel, *[buffers[n] for n in kernel.call_args], **meta)


@pytest.mark.ch17
@pytest.mark.parametrize("mode", ["rand", "randn"])
def test_kernel_draws_what_the_eval_handler_computes(mode):
    n, seed = 3000, 0xFEDCBA987654321
    kernel, seed_name, out_name = _random_kernel(mode, n)
    device = "cpu" if interpret_mode() else "cuda"
    assert "tl.load(in_ptr0 + (tl.full([XBLOCK], 0, tl.int32))" in kernel.source
    reference = philox_rand if mode == "rand" else philox_randn
    expected = torch.stack([reference(seed, k) for k in range(n)])
    outs = []
    for xblock in (128, 1024):  # the numbers do not depend on the block size
        out = torch.empty(n, device=device)
        buffers = {seed_name: torch.tensor([seed], device=device), out_name: out}
        _launch(kernel, buffers, xblock)
        outs.append(out.cpu())
    assert torch.equal(outs[0], outs[1])
    if mode == "rand":
        assert torch.equal(outs[0], expected)  # bit for bit
    else:  # log, sqrt and cos round differently in places
        torch.testing.assert_close(outs[0], expected, rtol=0, atol=1e-5)


# --- lowering: seeds, realizing, fallbacks --------------------------------------------


@pytest.mark.ch08
def test_each_random_op_gets_its_own_seed_and_is_realized():
    def f(x):
        r = torch.rand(4, 5)
        return r + x, r.t() * 2, torch.randn(4, 5) - x

    gm = make_fx(f, decomposition_table=decomposition_table())(torch.randn(4, 5))
    graph = GraphLowering(gm, [torch.randn(4, 5)]).lower()
    seeds = seed_buffers(graph)
    assert len(seeds) == 2  # one per random op, however often it is read
    for seed in seeds:
        assert seed.args == (0, 2**63 - 1, [1]) and seed.layout.dtype == torch.int64
        assert seed.kwargs == {"dtype": torch.int64, "device": torch.device("cpu")}
    computed = [b for b in graph.buffers if isinstance(b, ComputedBuffer)]
    # each random body is realized alone and appears once: its readers load it
    assert [b.origins for b in computed].count(frozenset({"rand"})) == 1
    assert [b.origins for b in computed].count(frozenset({"randn"})) == 1
    dumps = "\n".join(b.dump() for b in computed)
    assert dumps.count("ops.rand(") == 1 and dumps.count("ops.randn(") == 1
    assert graph.fallbacks == []  # the seeds are not fallbacks


@pytest.mark.ch08
def test_rand_with_a_generator_falls_back():
    generator = torch.Generator().manual_seed(3)
    gm = make_fx(lambda x: x + torch.rand(4, generator=generator))(torch.zeros(4))
    graph = GraphLowering(gm, [torch.zeros(4)]).lower()
    assert graph.fallbacks == ["aten.rand.generator"]
    assert seed_buffers(graph) == []  # ATen draws from the caller's generator


@pytest.mark.parametrize("device", DEVICES)
def test_rand_with_a_generator_gives_the_generators_numbers(device):
    generator = torch.Generator(device=device)

    def f(x):
        return x + torch.rand(8, generator=generator, device=device)

    generator.manual_seed(3)
    out, _ = compiled(f, torch.zeros(8, device=device))
    generator.manual_seed(3)
    assert torch.equal(out, f(torch.zeros(8, device=device)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "case",
    ["dropout", "rand", "randn", "rand_like", "randn_like", "bernoulli", "bernoulli_p"],
)
def test_random_ops_compile_without_fallbacks(case, device):
    fns = {
        "dropout": lambda x: F.dropout(x, 0.4),
        "rand": lambda x: x + torch.rand(x.shape, device=x.device),
        "randn": lambda x: x * torch.randn(x.shape, device=x.device),
        "rand_like": lambda x: torch.rand_like(x) - x,
        "randn_like": lambda x: torch.randn_like(x) - x,
        "bernoulli": lambda x: torch.bernoulli(x.sigmoid()),
        "bernoulli_p": lambda x: x.bernoulli(0.3),
    }
    x = torch.randn(33, 65, device=device)
    out, graphs = compiled(fns[case], x)
    expected = fns[case](x)
    assert (out.dtype, out.shape) == (expected.dtype, expected.shape)
    assert [f for g in graphs for f in g.fallbacks] == []
    assert "tl.rand" in graphs[0].source


# --- statistics -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_rand_is_uniform_on_0_1(device):
    out, graphs = compiled(
        lambda x: torch.rand(x.shape, device=x.device), torch.empty(N, device=device)
    )
    out = out.cpu()
    assert out.dtype == torch.float32
    assert out.min() >= 0 and out.max() < 1
    assert_near(out.mean().item(), 0.5, math.sqrt(1 / 12 / N), "mean")
    assert_near(out.var().item(), 1 / 12, math.sqrt((1 / 80 - 1 / 144) / N), "variance")
    counts = torch.histc(out, bins=10, min=0, max=1) / N
    for k, share in enumerate(counts.tolist()):
        assert_near(share, 0.1, math.sqrt(0.1 * 0.9 / N), f"bin {k}")
    assert_near(lag_correlation(out), 0.0, 1 / math.sqrt(N), "lag-1 correlation")


@pytest.mark.parametrize("device", DEVICES)
def test_randn_is_standard_normal(device):
    out, _ = compiled(
        lambda x: torch.randn(x.shape, device=x.device), torch.empty(N, device=device)
    )
    out = out.cpu().double()
    assert_near(out.mean().item(), 0.0, math.sqrt(1 / N), "mean")
    assert_near(out.var().item(), 1.0, math.sqrt(2 / N), "variance")
    for k, share in ((1, 0.682689), (2, 0.954500)):  # within k standard deviations
        inside = (out.abs() < k).double().mean().item()
        assert_near(inside, share, math.sqrt(share * (1 - share) / N), f"within {k}")
    assert_near((out > 0).double().mean().item(), 0.5, math.sqrt(0.25 / N), "symmetry")
    assert_near(lag_correlation(out), 0.0, 1 / math.sqrt(N), "lag-1 correlation")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_keeps_a_fraction_and_scales_it_exactly(p, device):
    x = torch.randn(N, device=device)  # no zeros: a zero in the output was dropped
    out, graphs = compiled(lambda x: F.dropout(x, p), x)
    kept = out != 0
    assert_near(kept.double().mean().item(), 1 - p, math.sqrt(p * (1 - p) / N), "kept")
    assert torch.equal(out[kept], x[kept] * (1 / (1 - p)))  # eager's rounding, exactly
    assert graphs[0].fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_output_mean_and_variance(p, device):
    # on ones, each output is 1 / (1 - p) with probability 1 - p, else 0:
    # mean 1, variance p / (1 - p); the spread is measured about the true mean 1
    # (for p = 0.5 every output is 1 away from it, so that variance is exact)
    out, _ = compiled(lambda x: F.dropout(x, p), torch.ones(N, device=device))
    out = out.cpu().double()
    var = p / (1 - p)
    assert_near(out.mean().item(), 1.0, math.sqrt(var / N), "mean")
    fourth = (1 - p) * (1 / (1 - p) - 1) ** 4 + p  # E[(out - 1)**4]
    spread = ((out - 1) ** 2).mean().item()
    assert_near(spread, var, math.sqrt((fourth - var**2) / N) + 1e-9, "variance")


@pytest.mark.parametrize("device", DEVICES)
def test_bernoulli_draws_ones_with_each_probability(device):
    probs = torch.full((2, N // 2), 0.1, device=device)
    probs[1] = 0.85
    out, _ = compiled(torch.bernoulli, probs)
    assert out.dtype == probs.dtype
    assert set(out.unique().tolist()) == {0.0, 1.0}
    for row, p in ((0, 0.1), (1, 0.85)):
        share = out[row].double().mean().item()
        assert_near(share, p, math.sqrt(p * (1 - p) / (N // 2)), f"row {row}")
    ones, _ = compiled(lambda x: x.bernoulli(0.3), torch.zeros(N, device=device))
    assert_near(ones.double().mean().item(), 0.3, math.sqrt(0.21 / N), "p=0.3")


# --- dtypes ---------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str
)
def test_rand_in_other_dtypes(dtype, device):
    def f(x):
        return torch.rand(N, dtype=dtype, device=x.device), torch.randn_like(x)

    x = torch.empty(N, dtype=dtype, device=device)
    (u, z), _ = compiled(f, x)
    eager_u, eager_z = f(x)
    assert u.dtype == eager_u.dtype == dtype and z.dtype == eager_z.dtype == dtype
    # rounding to a half dtype must not reach 1.0: rand is [0, 1)
    assert u.min() >= 0 and u.max() < 1
    assert_near(u.double().mean().item(), 0.5, math.sqrt(1 / 12 / N), "mean")
    assert_near(z.double().var().item(), 1.0, math.sqrt(2 / N) + 0.01, "randn variance")


@pytest.mark.parametrize("device", DEVICES)
def test_rand_like_keeps_the_strides(device):
    x = torch.randn(6, 4, device=device).t()
    out, _ = compiled(lambda x: torch.rand_like(x), x)
    assert out.stride() == torch.rand_like(x).stride() == (1, 4)


# --- determinism ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_manual_seed_repeats_and_each_call_draws_anew(device):
    def f(x):
        return F.dropout(x, 0.5), torch.randn(x.shape, device=x.device)

    torch._dynamo.reset()
    g = torch.compile(f, backend="minductor")
    x = torch.randn(1000, device=device)
    torch.manual_seed(0)
    first = g(x)
    torch.manual_seed(0)
    again = g(x)
    fresh = g(x)  # no reseed: the generator has moved on
    torch.manual_seed(1)
    other = g(x)
    for a, b, c, d in zip(first, again, fresh, other):
        assert torch.equal(a, b)
        assert not torch.equal(b, c) and not torch.equal(a, d)


@pytest.mark.parametrize("device", DEVICES)
def test_two_random_ops_in_one_graph_draw_different_numbers(device):
    def f(x):
        return torch.rand(x.shape, device=x.device), torch.rand(
            x.shape, device=x.device
        )

    (a, b), _ = compiled(f, torch.empty(N, device=device))
    assert (a == b).double().mean() < 0.01
    r = torch.corrcoef(torch.stack([a.cpu().double(), b.cpu().double()]))[0, 1].item()
    assert_near(r, 0.0, 1 / math.sqrt(N), "correlation of the two draws")


@pytest.mark.parametrize("device", DEVICES)
def test_one_rand_read_by_several_consumers_is_one_tensor(device):
    def f(x):
        r = torch.rand(50, 40, device=x.device)
        return r + x, r.t() * 2, r.exp(), r

    x = torch.zeros(50, 40, device=device)
    (plus, doubled, exp, r), _ = compiled(f, x)
    assert torch.equal(plus, r) and torch.equal(doubled, r.t() * 2)
    torch.testing.assert_close(exp, r.exp())


# --- training: the mask is saved, the backward is one kernel --------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_gradient_is_the_forward_mask_times_the_scale(device):
    p = 0.3
    x = torch.randn(64, 50, device=device, requires_grad=True)
    grad = torch.randn(64, 50, device=device)
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(lambda x: F.dropout(x.relu(), p) * 2, backend="minductor")(
            x
        )
        out.backward(grad)
    forward, backward = graphs
    kept = out != 0
    relu_kept = (x > 0).detach()
    assert torch.equal(kept, relu_kept & kept)  # nothing with x <= 0 survives
    expected = torch.where(kept, grad * (1 / (1 - p)) * 2, 0.0)
    assert torch.equal(x.grad, expected)
    assert forward.fallbacks == [] and backward.fallbacks == []
    assert len(forward.kernel_names) == 1 and len(backward.kernel_names) == 1
    # the forward stores the mask as bool for the backward, and nothing random after it
    assert re.search(r"= empty_strided_\w+\(.*, torch\.bool\)$", forward.source, re.M)
    assert "tl.rand" not in backward.source and "randint" not in backward.source


@pytest.mark.parametrize("device", DEVICES)
def test_fused_dropout_is_one_kernel(device):
    x = torch.randn(33, 65, device=device)
    out, graphs = compiled(lambda x: F.dropout(x.relu(), 0.3) * 2, x)
    (graph,) = graphs
    assert graph.fallbacks == []
    assert len(graph.kernel_names) == 1
    assert graph.source.count("aten.randint.low(") == 1  # the seed, drawn by ATen
    kernel = graph.source[
        graph.source.index("@triton.jit") : graph.source.index("def call")
    ]
    assert "tl.rand(" in kernel and "maximum(0," in kernel  # relu, draw, mask, scale
    kept = out != 0
    assert torch.equal(out[kept], x.relu()[kept] * (1 / 0.7) * 2)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_before_a_reduction_fuses_into_it(device):
    out, graphs = compiled(
        lambda x: F.dropout(x, 0.5).sum(1), torch.ones(64, 300, device=device)
    )
    assert len(graphs[0].kernel_names) == 1 and graphs[0].fallbacks == []
    assert torch.equal(out, out.round()) and (out.remainder(2) == 0).all()  # 2 per kept
    assert_near(out.double().mean().item(), 300.0, math.sqrt(300 / 64), "row sum")


# --- the edges of dropout -------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_edges_draw_nothing(device):
    x = torch.randn(7, 9, device=device)
    for fn, expected in (
        (lambda x: F.dropout(x, 0.5, training=False) + 1, x + 1),
        (lambda x: F.dropout(x, 0.0) + 1, x + 1),
        (lambda x: F.dropout(x, 1.0) + 1, torch.ones_like(x)),
    ):
        out, graphs = compiled(fn, x)
        assert torch.equal(out, expected)
        assert "tl.rand" not in graphs[0].source and "randint" not in graphs[0].source


@pytest.mark.ch02
def test_native_dropout_decomposes_to_rand():
    table = decomposition_table()

    def f(x):
        return torch.ops.aten.native_dropout(x, 0.25, True)

    gm = make_fx(f, decomposition_table=table)(torch.randn(4, 5))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.native_dropout.default not in targets
    assert torch.ops.aten.rand.default in targets
    out, mask = gm(torch.ones(4, 5))
    assert mask.dtype == torch.bool and torch.equal(out, mask * (1 / 0.75))


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_shapes(device):
    torch._dynamo.reset()
    g = torch.compile(lambda x: F.dropout(x, 0.25), backend="minductor", dynamic=True)
    with record_compiled() as graphs:
        for n in (3000, 4500):
            out = g(torch.ones(n, device=device))
            kept = (out != 0).double().mean().item()
            assert_near(kept, 0.75, math.sqrt(0.1875 / n), f"kept of {n}")
    assert len(graphs) == 1 and graphs[0].fallbacks == []
