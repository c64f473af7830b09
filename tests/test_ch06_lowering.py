"""Chapter 6: GraphLowering, fallbacks, the check against eager, the realize policy.

Graphs are traced with make_fx and lowered with GraphLowering, whose own check
compares every lowering's dtype and shape with the fake tensor eager produced.
The IR's values are then computed with the EvalHandler (chapter 3), one element at a
time on tiny tensors, and compared with eager: no Triton involved.
"""

import dataclasses
import logging

import pytest
import sympy
import torch
from helpers import assert_same, check, evaluate, lower, run
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.config import config
from minductor.ir import (
    ComputedBuffer,
    FallbackKernel,
    MultiOutput,
    MultiOutputLayout,
    Pointwise,
)
from minductor.lowering import (
    GraphLowering,
    MixedDeviceError,
    _check_devices,
    _moved_to_device,
    lowerings,
)
from minductor.ops import ops, set_handler
from minductor.pointwise import pointwise

pytestmark = pytest.mark.ch06

aten = torch.ops.aten
inf, nan = float("inf"), float("nan")


@pytest.fixture
def restore_config():
    saved = dataclasses.asdict(config)
    try:
        yield config
    finally:
        for key, value in saved.items():
            setattr(config, key, value)


# --- strides of inputs and of fallback results ---------------------------------------


def test_fallback_view_is_read_through_its_strides(monkeypatch):
    # views are lowered now; take t's lowering away to see a strided fallback result
    monkeypatch.delitem(lowerings, aten.t.default)
    x = torch.randn(3, 4)
    graph = check(lambda x: (x.t() + 1, x.t().exp()), x)
    assert set(graph.fallbacks) == {"aten.t.default"}
    t_buf = next(b for b in graph.buffers if isinstance(b, FallbackKernel))
    assert tuple(int(s) for s in t_buf.layout.stride) == (1, 4)


def test_input_buffers_keep_real_strides_and_offsets():
    x = torch.randn(6, 9)[1:, 2:].t()
    graph = check(lambda x: (x * 2,), x)
    (name,) = graph.graph_input_names
    layout = graph.graph_inputs[name].data.layout
    assert tuple(int(s) for s in layout.stride) == x.stride()
    assert int(layout.offset) == x.storage_offset()


# --- fallbacks ------------------------------------------------------------------------


@pytest.mark.usefixtures("cumsum_falls_back")
def test_op_without_lowering_falls_back_and_is_logged(caplog):
    x = torch.randn(3, 4)
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        graph = check(lambda x: (torch.cumsum(x * 2, dim=0) + 1,), x)
    assert graph.fallbacks == ["aten.cumsum.default"]
    kinds = [type(b).__name__ for b in graph.buffers]
    assert kinds == ["ComputedBuffer", "FallbackKernel", "ComputedBuffer"]
    assert graph.buffers[1].input_buffers() == [graph.buffers[0]]
    assert any(
        "fallback: aten.cumsum.default (no lowering)" in r.getMessage()
        for r in caplog.records
    )


def test_unsupported_dtype_falls_back_with_its_reason(caplog):
    x = torch.randn(4)
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        graph = check(lambda x: (x.to(torch.complex64) * 2,), x)
    assert graph.fallbacks == ["aten._to_copy.default", "aten.mul.Tensor"]
    messages = [r.getMessage() for r in caplog.records]
    assert "fallback: aten._to_copy.default (dtype torch.complex64)" in messages
    assert "fallback: aten.mul.Tensor (dtype torch.complex64)" in messages


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.clone(memory_format=torch.channels_last),),
        lambda x: (x.to(torch.float16, memory_format=torch.channels_last),),
    ],
    ids=["clone", "to"],
)
def test_a_memory_format_is_a_storage_order_not_a_fallback(fn):
    x = torch.randn(2, 3, 4, 5)
    graph = check(fn, x)
    assert graph.fallbacks == []
    (out,) = graph.graph_outputs  # an output: stored in eager's strides
    assert tuple(int(s) for s in out.layout.stride) == (60, 1, 15, 3)


def test_multi_output_fallback_creates_multi_outputs():
    x = torch.randn(4, 5)
    graph = check(lambda x: tuple(torch.sort(x, 1)), x)
    assert graph.fallbacks == ["aten.sort.default"]
    parent, values, indices = graph.buffers
    assert isinstance(parent, FallbackKernel) and isinstance(
        parent.layout, MultiOutputLayout
    )
    assert isinstance(values, MultiOutput) and isinstance(indices, MultiOutput)
    assert (values.parent, values.index) == (parent, 0)
    assert (indices.parent, indices.index) == (parent, 1)
    assert values.layout.dtype == torch.float32 and indices.layout.dtype == torch.int64
    assert graph.graph_outputs == [values, indices]


def test_multi_output_feeds_a_pointwise_consumer():
    x = torch.randn(4, 5)
    graph = check(lambda x: (torch.sort(x, 1)[0] * 2 + torch.sort(x, 1)[1],), x)
    assert isinstance(graph.buffers[-1], ComputedBuffer)


# --- devices --------------------------------------------------------------------------


def fake_cuda(*size):  # a CUDA tensor without a GPU: a fake one
    with FakeTensorMode():
        return torch.empty(*size, device="cuda")


def test_check_devices_names_every_input_and_its_device():
    a, b, c = torch.empty(3), torch.empty(3, device="meta"), fake_cuda(3)
    with pytest.raises(MixedDeviceError) as info:
        _check_devices(["arg0_1", "arg1_1", "n", "arg2_1"], [a, b, 5, c])
    message = str(info.value)
    assert "arg0_1 on cpu" in message and "arg1_1 on meta" in message
    assert "Move them to one device" in message


def test_check_devices_picks_the_gpu_and_ignores_non_tensors():
    assert _check_devices(
        ["a", "n", "b"], [torch.empty(1), 3, torch.empty(2)]
    ) == torch.device("cpu")
    # CPU tensors beside one GPU's: the graph's kernels run on the GPU
    meta = torch.device("meta")  # "meta" stands in for a GPU
    beside = [torch.empty(1), torch.empty(1, device=meta)]
    assert _check_devices(["a", "b"], beside) == meta
    assert _check_devices(["n"], [3]) is None
    assert _check_devices([], []) is None


def test_graph_lowering_refuses_two_gpus_up_front():
    gm = make_fx(lambda a, b: (a + 1, b + 1))(torch.empty(3), torch.empty(3))
    with pytest.raises(MixedDeviceError, match="a_1 on meta, b_1 on cuda:0"):
        GraphLowering(gm, [torch.empty(3, device="meta"), fake_cuda(3)])


def _moved(fn, *inputs):
    return _moved_to_device(make_fx(fn)(*inputs), inputs)


def test_cpu_inputs_that_eager_moves_to_the_gpu_are_moved():
    # "meta" stands in for a GPU: a device other than the CPU
    x, v = torch.empty(5, 3, device="meta"), torch.empty(2, 3, device="meta")
    idx, scale = torch.tensor([1, 3]), torch.tensor(2.0)
    # a 0-dim CPU tensor read as a number, and CPU index tensors: eager copies them
    assert _moved(lambda x, s: x * s, x, scale) == {"s_1"}
    assert _moved(lambda x, i: x[i], x, idx) == {"i_1"}
    assert _moved(
        lambda x, i, v: torch.index_put(x, (i,), v), x, idx, v
    ) == {"i_1"}
    # through a view that stays on the CPU: eager moves the view
    assert _moved(lambda x, i: x[i[:1]], x, idx) == {"i_1"}
    # a reader that computes on the CPU keeps its input there (next test)
    assert _moved(lambda x, i: (x[i], i + 1), x, idx) == set()
    # one device, or no GPU at all: nothing moves
    assert _moved(lambda a, b: a + b, torch.ones(2), torch.tensor(1.0)) == set()


def test_numbers_passed_as_cpu_tensors_move_with_their_arithmetic():
    # dynamic=True passes a Python float (eps, a scale) as a 0-dim float64 CPU
    # tensor, which the graph converts before a GPU op reads it
    x = torch.empty(5, 3, device="meta")
    eps, scale = torch.tensor(1e-6, dtype=torch.float64), torch.tensor(0.5)

    def f(x, eps, scale):
        e = eps.to(torch.float64).to(torch.float32)
        return x * e + (scale * 2).sqrt(), x + e

    assert _moved(f, x, eps, scale) == {"eps_1", "scale_1"}
    graph = GraphLowering(make_fx(f)(x, eps, scale), [x, eps, scale]).lower()
    assert graph.fallbacks == []
    assert all(b.get_device() == x.device for b in graph.buffers)
    # a number the graph returns, or reads on the CPU too, stays there
    assert _moved(lambda x, s: (x * s.float(), s.float()), x, eps) == set()
    assert _moved(lambda x, s, i: (x * s.float(), i * s), x, eps, scale) == set()


def test_cpu_work_in_a_gpu_graph_runs_through_aten_on_the_cpu():
    # BEiT's relative positions: arange on the CPU, arithmetic, a cat, then an index
    # into a GPU table; a CPU input that a CPU op reads besides a GPU op; and numbers,
    # 0-dim CPU constants, which stay numbers in the GPU's kernels
    def f(x, table, i):
        coords = torch.arange(3)
        rel = torch.cat([coords[:, None] - coords[None], coords[None] * 2]).flatten()
        numbers = x * torch.tensor(2.0) + torch.tensor(3.0).sqrt()
        return x + table[rel], i + 1, x[i], numbers

    x, table = torch.empty(12, device="meta"), torch.empty(5, device="meta")
    i = torch.tensor([0, 2])
    gm = make_fx(f)(x, table, i)
    graph = GraphLowering(gm, [x, table, i]).lower()
    on_cpu = {
        op
        for op, why in graph.fallback_reasons
        if why.startswith("computes on the CPU")
    }
    assert on_cpu == {
        "aten.arange.default", "aten.sub.Tensor", "aten.mul.Tensor", "aten.cat.default",
        "aten.add.Tensor", "aten.unsqueeze.default", "aten.view.default",
    }
    assert len(graph.fallbacks) == len(on_cpu) + 2  # two unsqueezes more: no constant
    kernels = [b for b in graph.buffers if not isinstance(b, FallbackKernel)]
    assert all(b.get_device() == x.device for b in kernels)
    # each GPU read of a CPU value goes through one copy, made by ATen: the flattened
    # positions, which the GPU's index reads, and the CPU input i, which x[i] reads
    flat = next(
        b for b in graph.buffers
        if isinstance(b, FallbackKernel) and b.op == aten.view.default
        and b.get_size() == (12,)
    )
    copies = [
        b for b in graph.buffers
        if isinstance(b, FallbackKernel) and b.op == aten._to_copy.default
    ]
    assert [c.args[0].name for c in copies] == [flat.name, "i_1"]
    assert flat.get_device().type == "cpu"
    assert all(c.get_device() == x.device for c in copies)


def test_tensor_literals_moved_to_the_gpu_stay_tensors_for_aten():
    # a literal built on the CPU and moved (torch.LongTensor([294]).to(x.device)): one
    # element, not 0-dim, so not a scalar to eager. A constant body for it would be a
    # kernel on the CPU in a GPU graph, handed a CPU pointer at launch
    def f(x):
        one = torch.LongTensor([294]).to(x.device) - x
        two = torch.tensor([1.5, 2.5]).to(x.device) * x[:2]
        number = x * torch.tensor(3)  # 0-dim: a number in the GPU's kernel
        return one, two, number

    x = torch.empty(5, device="meta", dtype=torch.int64)  # "meta" stands in for a GPU
    graph = GraphLowering(make_fx(f)(x), [x]).lower()
    kernels = [b for b in graph.buffers if isinstance(b, ComputedBuffer)]
    assert len(kernels) == 3 and all(k.get_device() == x.device for k in kernels)
    assert sorted(graph.constants) == ["_tensor_constant0", "_tensor_constant1"]
    copies = [
        b.args[0] for b in graph.buffers
        if isinstance(b, FallbackKernel) and b.op == aten._to_copy.default
    ]
    assert [c.op for c in copies] == [aten.lift_fresh_copy.default] * 2
    # on one device nothing changes: the one-element literal is a constant body
    y = torch.ones(5, dtype=torch.int64)
    assert GraphLowering(make_fx(f)(y), [y]).lower().constants.keys() == {
        "_tensor_constant1"
    }


def test_a_kernel_on_the_cpu_in_a_gpu_graph_is_refused_by_name():
    x = torch.empty(3, device="meta")
    graph = GraphLowering(make_fx(lambda x: (x + 1,))(x), [x])
    cpu, one = torch.device("cpu"), lambda i: ops.constant(1.0, torch.float32)
    body = Pointwise(cpu, torch.float32, one, (sympy.Integer(3),))
    with pytest.raises(AssertionError, match="buf9 would be a kernel on the CPU"):
        graph.register_buffer(ComputedBuffer("buf9", graph.layout_for(body), body))


@pytest.mark.cuda
def test_tensor_literals_moved_to_the_gpu_run_on_cuda():
    def f(x):
        return torch.LongTensor([294]).to(x.device) - x, torch.tensor([1.5]).cuda() * x

    x = torch.arange(6, device="cuda")
    kernels, _ = run(f, x)
    assert kernels


# --- the check against eager ----------------------------------------------------------


def test_a_lowering_with_the_wrong_dtype_is_caught():
    saved = lowerings[aten.sin.default]
    lowerings[aten.sin.default] = lambda x: pointwise(
        ops.sin, [x], dtypes=(torch.float32, torch.float64)
    )
    try:
        with pytest.raises(AssertionError, match="eager produces torch.float32"):
            lower(lambda x: (x.sin(),), torch.randn(3))
    finally:
        lowerings[aten.sin.default] = saved


def test_origins_name_the_aten_ops_of_a_body():
    graph = lower(
        lambda x, y: (torch.sin(x * y + 1),), torch.randn(3, 4), torch.randn(4)
    )
    (buf,) = graph.buffers
    assert buf.origins == frozenset({"mul", "add", "sin"})


def test_graph_returning_a_single_tensor():
    x, y = torch.randn(3, 4), torch.randn(4)
    graph = lower(lambda x, y: torch.sin(x * y + 1), x, y)
    (out,) = evaluate(graph, [x, y])
    assert_same(out, torch.sin(x * y + 1), 1e-6)


# --- the realize policy ---------------------------------------------------------------


def _two_users(x):
    y = x.exp()
    return y + 1, y * 2


def test_cheap_value_with_two_users_is_inlined(restore_config):
    graph = check(_two_users, torch.randn(3, 4))
    assert len(graph.buffers) == 2  # only the outputs
    for buf in graph.buffers:
        assert buf.data.count_ops().reads == 1
        assert "exp" in buf.origins


def test_value_over_the_opcount_threshold_is_realized(restore_config):
    config.realize_opcount_threshold = 1
    graph = check(_two_users, torch.randn(3, 4))
    assert len(graph.buffers) == 3
    shared = graph.buffers[0]
    assert shared.origins == frozenset({"exp"})
    for out in graph.buffers[1:]:
        reads = []

        class Reads:
            def load(self, name, index):
                reads.append(name)

            def __getattr__(self, op):
                return lambda *a: None

        with set_handler(Reads()):
            out.store_output([sympy.Integer(0), sympy.Integer(0)])
        assert reads == [shared.name]


def test_value_over_the_reads_threshold_is_realized(restore_config):
    def f(a, b, c):
        y = a * b + c  # three loads
        return y + 1, y * 2

    args = [torch.randn(5) for _ in range(3)]
    assert len(check(f, *args).buffers) == 2
    config.realize_reads_threshold = 2
    assert len(check(f, *args).buffers) == 3


def test_value_with_one_user_is_inlined_whatever_its_size(restore_config):
    config.realize_opcount_threshold = 0
    config.realize_reads_threshold = 0
    graph = check(lambda x: ((x.exp() * 2).sin(),), torch.randn(5))
    assert len(graph.buffers) == 1


def test_inline_opcount_limit_realizes_a_long_chain(restore_config):
    def chain(x):
        for _ in range(6):
            x = x * 0.5 + 0.25
        return (x,)

    x = torch.randn(5)
    assert len(check(chain, x).buffers) == 1
    config.inline_opcount_limit = 5
    graph = check(chain, x)
    assert len(graph.buffers) > 2
    for buf in graph.buffers:
        assert isinstance(buf.data, Pointwise)
        assert buf.data.count_ops().count <= 5 + 3  # bounded by the limit (+ one op)


def test_an_op_with_no_aten_fallback_is_a_clear_error():
    def not_aten(x):
        return x * 2

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(not_aten, (x,))
    graph.output((y,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    example = torch.randn(3)
    next(n for n in gm.graph.nodes if n.op == "call_function").meta["val"] = example
    with pytest.raises(NotImplementedError, match="not_aten.*no lowering"):
        GraphLowering(gm, [example]).lower()


def test_a_body_on_another_device_than_the_graph_is_left_to_aten(caplog):
    """A CPU factory in a graph of another device: no kernel could run it there."""

    def f(x):
        return x + 1, torch.ones(3)

    x = torch.randn(4, device="meta")
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        graph = GraphLowering(make_fx(f)(x), [x]).lower()
    assert graph.fallbacks == ["aten.ones.default"]
    assert "computes on the CPU; the graph's kernels run on meta" in caplog.text




def _layout(size, stride):
    from minductor.ir import FixedLayout

    return FixedLayout(
        torch.device("cpu"),
        torch.float32,
        tuple(sympy.sympify(n) for n in size),
        tuple(sympy.sympify(s) for s in stride),
    )


@pytest.mark.parametrize(
    "size, ours, eager, same",
    [
        ((4, 1027), (1028, 1), (1027, 1), True),  # padded rows: eager's order
        ((2, 3, 1027), (3 * 1028, 1028, 1), (3 * 1027, 1027, 1), True),
        ((4, 1027), (1, 4), (1027, 1), False),  # transposed: another order
        ((1, 1027), (7, 1), (1027, 1), True),  # a size-1 dimension's stride is unused
        ((4, 5), (0, 1), (5, 1), False),  # expanded: elements share memory
        ((3, 4, 5), (20, 1, 4), (20, 5, 1), False),  # channels-last-like vs contiguous
    ],
)
def test_windows_returned_as_outputs_keep_eagers_memory_order(size, ours, eager, same):
    from minductor.lowering import _same_order

    assert _same_order(_layout(size, ours), eager) is same


def test_a_window_with_symbolic_strides_is_not_taken_as_eagers():
    from minductor.lowering import _same_order

    s0 = sympy.Symbol("s0", positive=True, integer=True)
    assert _same_order(_layout((4, 5), (s0, 1)), (5, 1)) is False


def test_a_value_a_matmul_reads_is_stored_and_loaded_by_its_other_readers():
    """p = a * b is read by a matmul (which needs it stored) and by a sum: the sum loads
    the stored p instead of recomputing it from a and b, so a and b can be freed once p
    is written. A value whose readers are all our kernels stays inlined."""
    from minductor.dependencies import SchedulerNode

    a, b, w = torch.randn(33, 65), torch.randn(33, 65), torch.randn(65, 7)

    def f(a, b, w):
        p = a * b
        s = p.sum(1)  # lowered before the matmul that stores p
        return torch.mm(p, w), s

    graph = GraphLowering(make_fx(f)(a, b, w), [a, b, w]).lower()
    (total,) = [b for b in graph.buffers if getattr(b, "is_reduction", bool)()]
    reads = SchedulerNode.create(total).read_names
    assert len(reads) == 1 and not reads & set(graph.graph_inputs), reads

    def g(a, b):
        p = a * b
        return p.sin(), p.sum(1)

    graph = GraphLowering(make_fx(g)(a, b), [a, b]).lower()
    assert len(graph.buffers) == 2  # p is inlined into both readers
