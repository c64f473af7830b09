"""Kernels that write an output over an input that dies in them (chapters 17 and 20).

Each case compiles a function, compares it with eager, and counts the outputs written
over an input in the generated `call` (`bufN = bufM  # reuse` before a kernel whose
signature has an `in_out_ptr`). The refusals are the cases where writing over would be
a wrong answer or would hand away memory that is not the wrapper's.
"""

import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from helpers import DEVICES
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import memory
from minductor.capture import record_compiled
from minductor.codegen_triton import inplace_candidates, own_addresses, same_memory
from minductor.config import config
from minductor.ir import FixedLayout, MultiOutputLayout, NonOwningLayout
from minductor.lowering import GraphLowering
from minductor.scheduler import Scheduler
from minductor.wrapper import AllocateLine, ReinterpretLine, ReuseLine, WrapperCodeGen

pytestmark = pytest.mark.ch20

UNFUSED = {"max_fusion_size": 1}  # each node its own kernel: a value between kernels


def compiled(fn, *args, options=None, tol=1e-5):
    """Compile, compare with eager, return the `call` source of the one graph."""
    torch._dynamo.reset()
    with config.patch(options or {}), record_compiled() as graphs:
        got = torch.compile(fn, backend="minductor")(*args)
    expected = fn(*args)
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert (g.dtype, g.shape, g.stride()) == (e.dtype, e.shape, e.stride())
        torch.testing.assert_close(g, e, atol=tol, rtol=tol)
    (graph,) = graphs
    return graph.source


def written_over(source):
    """(old, new) for each `new = old  # reuse` that a kernel's launch then writes."""
    body = source[source.index("def call(args):"):]
    pairs = re.findall(
        r"^\s*(\w+) = (?:reinterpret_tensor\()?(\w+)(?:, .*\))?  # reuse$", body, re.M
    )
    launched = re.findall(r"^\s*(?:launch_)?triton_\w+\((.*)\)$", body, re.M)
    return [(old, new) for new, old in pairs
            if any(new in args.split(", ") for args in launched)]


def in_out_kernels(source):
    return re.findall(r"def (triton_\w+)\(in_out_ptr0", source)


def mm_bias_gelu(x, w, b):
    return F.gelu(x @ w + b)


def two_matmuls(x, w1, w2):
    return torch.tanh(torch.relu(x @ w1) @ w2) * 3


def sum_then_exp(x):
    return x.sum(1).exp() + 1


def int_sum_then_affine(x):
    return x.sum(1) * 3 + 1


def scalar(x):
    return x.sum().exp() * 2


def sum_then_view(x):
    return x.sum(1).view(3, 2, 2).exp()  # one block of memory, another layout


def linear_over_4d(x, w, b):
    return F.gelu(F.linear(x, w, b))  # the matmul runs on a 2-d view of x


def conv_bn_relu(x, w, mean, var, gamma, beta):
    y = F.conv2d(x, w, padding=1)
    return F.relu(F.batch_norm(y, mean, var, gamma, beta, training=False))


def cases(device):
    d = {"device": device}
    cl = torch.channels_last
    return {
        "mm, bias, gelu": (mm_bias_gelu, (torch.randn(5, 7, **d),
                           torch.randn(7, 9, **d), torch.randn(9, **d)), None, 1),
        "two matmuls": (two_matmuls, (torch.randn(3, 8, **d), torch.randn(8, 5, **d),
                        torch.randn(5, 1, **d)), None, 2),
        "a sum, then exp": (sum_then_exp, (torch.randn(7, 13, **d),), UNFUSED, 1),
        "int64 sums": (int_sum_then_affine,
                       (torch.randint(-9, 9, (6, 5), **d),), UNFUSED, 1),
        "0-d": (scalar, (torch.randn(4, 3, **d),), UNFUSED, 1),
        "a view": (sum_then_view, (torch.randn(12, 5, **d),), UNFUSED, 1),
        "linear over 4-d": (linear_over_4d, (torch.randn(2, 3, 1, 8, **d),
                            torch.randn(16, 8, **d), torch.randn(16, **d)), None, 1),
        "conv, bn, relu, channels-last": (conv_bn_relu, (
            torch.randn(2, 3, 5, 1, **d).to(memory_format=cl),
            torch.randn(6, 3, 3, 3, **d).to(memory_format=cl),
            torch.randn(6, **d), torch.rand(6, **d) + 0.5,
            torch.randn(6, **d), torch.randn(6, **d)), None, 1),
    }


CASES = list(cases("cpu"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_a_dying_input_is_written_over(device, case):
    fn, args, options, count = cases(device)[case]
    tol = 1e-2 if device == "cuda" else 1e-5  # TF32 matmuls and convolutions
    source = compiled(fn, *args, options=options, tol=tol)
    pairs = written_over(source)
    assert len(pairs) == count, source
    assert len(in_out_kernels(source)) == count
    body = [line.strip() for line in source[source.index("def call(args):"):].splitlines()]
    for old, new in pairs:  # the old name dies at the hand-over, its last use
        (at,) = [k for k, line in enumerate(body) if line.startswith(f"{new} = ")]
        assert body[at + 1].startswith("del ") and old in body[at + 1]
        assert not any(re.search(rf"\b{old}\b", line) for line in body[at + 2:])


@pytest.mark.parametrize("device", DEVICES)
def test_half_precision_and_training_match_eager(device):
    d = {"device": device}
    for dtype in (torch.float16, torch.bfloat16):
        x, w, b = (torch.randn(*s, **d, dtype=dtype) for s in ((9, 6), (6, 11), (11,)))
        source = compiled(mm_bias_gelu, x, w, b, tol=2e-2)
        assert len(written_over(source)) == 1
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 2, 5), torch.nn.GELU(),
    ).to(device)
    x = torch.randn(2, 3, 5, 4, device=device)
    grads = []
    for fn in (model, torch.compile(model, backend="minductor")):
        model.zero_grad()
        (fn(x) * torch.arange(5.0, device=device)).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    tol = 1e-2 if device == "cuda" else 1e-4
    for got, expected in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, expected, atol=tol, rtol=tol)


def pooled_view(x):
    total = x.sum(2)  # (32, 64)
    rows = total.view(2, 16, 64).relu()  # written over it, viewed as (2, 16, 64)
    both = rows.sum(0) * rows.amax(0)  # its last readers
    return both, x[:, :, 0] * 2  # (32, 64) again: takes the pooled memory


def tensor_layouts(wrapper):
    """The size and stride each name of `call` holds, line by line, as run."""
    held = {}
    for line in wrapper.lines:
        if isinstance(line, AllocateLine):
            held[line.name] = line.layout
        elif isinstance(line, ReuseLine):
            held[line.new] = line.layout or held.get(line.old)
        elif isinstance(line, ReinterpretLine):
            held[line.node.name] = line.node.layout
    return {name: (lay.size, lay.stride) for name, lay in held.items() if lay}


@pytest.mark.parametrize("case", [*CASES, "pooled view"])
def test_every_name_holds_its_own_layout(case):
    """Memory handed over, by a kernel writing over its input or by the pool after,
    is viewed as the new buffer's layout, never left in the old one's."""
    if case == "pooled view":
        fn, args = pooled_view, (torch.randn(32, 64, 3),)
        options = UNFUSED | {"realize_reads_threshold": 0}  # rows is stored
    else:
        fn, args, options, _ = cases("cpu")[case]
    with config.patch(options or {}):
        graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
        wrapper = WrapperCodeGen(graph, Scheduler(graph), interpret=True)
        wrapper.plan()
    planned = {b.name: (b.layout.size, b.layout.stride) for b in graph.buffers
               if type(b.layout) is FixedLayout}
    held = tensor_layouts(wrapper)
    assert any(isinstance(line, ReuseLine) for line in wrapper.lines)
    for name, layout in held.items():
        if name in planned:
            assert layout == planned[name], (name, layout, planned[name])


def test_a_pooled_view_is_viewed_again():
    x = torch.randn(32, 64, 3)
    source = compiled(pooled_view, x, options=UNFUSED | {"realize_reads_threshold": 0})
    assert "reinterpret_tensor(buf1, (32, 64), (64, 1), 0)  # reuse" in source, source


def differences(x):
    total = x.sum(1)
    return total[1:] - total[:-1]  # two addresses of one input


def read_twice(x):
    total = x.sum(1)
    return total.exp(), total.cos()  # two readers


def returned(x):
    total = x.sum(1)
    return total, total.exp()  # the caller keeps the input


def transposed(x):
    total = x.sum(2)  # stored (5, 5)
    return (total.t() + 1).contiguous()  # reads another element than it writes


def flipped(x):
    total = x.sum(1)
    return total.flip(0) * 2  # the same: element n - 1 - i for element i


def sliced(x):
    return x.sum(1)[:-1].exp()  # fewer elements than the input's memory


def converted(x):
    return x.sum(1).to(torch.float16)  # another dtype


def graph_input(x):
    return x.sin() + 1  # the caller's memory


def broadcast(x):
    return x.sum(1, keepdim=True).exp() + torch.zeros(6, 4)


REFUSED = [differences, read_twice, returned, transposed, flipped, sliced,
           converted, graph_input, broadcast]


@pytest.mark.parametrize("fn", REFUSED, ids=lambda f: f.__name__)
def test_what_is_never_written_over(fn):
    x = torch.randn(5, 5, 3) if fn is transposed else torch.randn(6, 5)
    source = compiled(fn, x, options=UNFUSED)
    assert written_over(source) == [] and in_out_kernels(source) == [], source


def test_only_the_wrappers_memory_and_fresh_aten_results(monkeypatch):
    """A candidate whose memory may be a view of something else (an op that may alias)
    or a graph input's is refused by the wrapper, whatever the kernel side says."""
    x, w, b = torch.randn(5, 7), torch.randn(7, 9), torch.randn(9)
    graph = GraphLowering(make_fx(mm_bias_gelu)(x, w, b), [x, w, b]).lower()
    wrapper = WrapperCodeGen(graph, Scheduler(graph), interpret=True)
    candidates = inplace_candidates(wrapper.scheduler)
    assert list(candidates) == ["buf0"]  # the matmul's result, written into our memory
    assert memory.written_over(wrapper) == candidates
    monkeypatch.setattr(memory, "may_alias", lambda op: True)
    assert memory.written_over(wrapper) == candidates  # an extern kernel's out=: ours
    with config.patch({"inplace_buffers": False}):
        assert memory.written_over(wrapper) == {}
        source = wrapper.generate()
    assert "in_out_ptr" not in source and "# reuse" not in source


def test_conv_result_is_refused_when_the_op_may_alias(monkeypatch):
    args = cases("cpu")["conv, bn, relu, channels-last"][1]
    graph = GraphLowering(make_fx(conv_bn_relu)(*args), list(args)).lower()
    wrapper = WrapperCodeGen(graph, Scheduler(graph), interpret=True)
    assert len(memory.written_over(wrapper)) == 1  # convolution returns a fresh tensor
    monkeypatch.setattr(memory, "may_alias", lambda op: True)
    assert memory.written_over(wrapper) == {}


def test_writing_over_lowers_the_planned_peak():
    """Two matmuls, each followed by pointwise work: the peak the plan counts drops
    where the pointwise kernel writes over the matmul's result."""
    x, w1, w2 = torch.randn(64, 32), torch.randn(32, 96), torch.randn(96, 16)
    peaks = {}
    for on in (True, False):
        graph = GraphLowering(make_fx(two_matmuls)(x, w1, w2), [x, w1, w2]).lower()
        wrapper = WrapperCodeGen(graph, Scheduler(graph), interpret=True)
        with config.patch({"inplace_buffers": on}):
            wrapper.plan()
        roots = memory.alias_roots(wrapper.lines)
        group = lambda n: roots.get(n, n)  # noqa: E731
        peaks[on] = max(memory.live_bytes(wrapper.lines, group, graph.sizevars))
        taken = [line for line in wrapper.lines if isinstance(line, ReuseLine)]
        assert len(taken) == (2 if on else 0)
    hidden, out = 64 * 96 * 4, 64 * 16 * 4  # bytes of each matmul's result
    assert peaks[False] == 2 * hidden  # the first matmul's result and its ReLU
    assert peaks[True] == hidden + out  # now the peak is at the second matmul


S = sympy.Symbol("s0", positive=True, integer=True)


@pytest.mark.parametrize(
    "size, stride, expected",
    [
        ((4, 5), (5, 1), True),  # contiguous
        ((2, 3, 4, 5), (60, 1, 15, 3), True),  # channels-last
        ((4, 5), (8, 1), True),  # padded rows
        ((4, 1, 5), (5, 7, 1), True),  # a size-1 dim's stride is never used
        ((), (), True),  # 0-d
        ((4, 5), (0, 1), False),  # a broadcast: rows share addresses
        ((3, 3), (1, 1), False),  # overlapping windows
        ((S, 5), (5, 1), True),  # symbolic, contiguous
        ((S, 5), (1, S), True),  # symbolic, transposed
        ((S, 5), (S + 1, 1), False),  # symbolic padding: unknown, refused
    ],
)
def test_own_addresses(size, stride, expected):
    size, stride = tuple(map(sympy.sympify, size)), tuple(map(sympy.sympify, stride))
    layout = FixedLayout(torch.device("cpu"), torch.float32, size, stride)
    assert own_addresses(layout) is expected
    inside = NonOwningLayout(layout.device, layout.dtype, size, stride, owner="buf9")
    assert not own_addresses(inside)



def test_same_memory():
    def layout(size, stride, dtype=torch.float32, offset=0, device="cpu"):
        return FixedLayout(torch.device(device), dtype, tuple(map(sympy.sympify, size)),
                           tuple(map(sympy.sympify, stride)), sympy.Integer(offset))

    flat = layout((24,), (1,))
    assert same_memory(flat, layout((2, 3, 4), (12, 4, 1)))  # a view
    assert same_memory(flat, layout((4, 6), (1, 4)))  # transposed: still 24 elements
    assert same_memory(layout((S * 4,), (1,)), layout((S, 4), (4, 1)))
    assert not same_memory(flat, layout((23,), (1,)))  # fewer elements
    assert not same_memory(flat, layout((24,), (1,), torch.int32))  # 4 bytes too
    assert not same_memory(flat, layout((24,), (1,), offset=1))
    assert not same_memory(layout((24,), (1,), offset=1), flat)
    assert not same_memory(flat, layout((24,), (1,), device="meta"))
    assert not same_memory(layout((24, 2), (1, 0)), layout((24, 2), (1, 0)))  # shared
    assert not same_memory(MultiOutputLayout(torch.device("cpu")), flat)  # no memory
