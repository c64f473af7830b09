"""Chapter 28: functional collectives as IR, the overlap pass, and DDP/FSDP2 with
compiled graphs, checked against eager on two `gloo` processes.

Structure (IR, schedules, the wrapper's lines) is checked in a world of one process,
inside the test process. The two-process checks start two processes once, run every
scenario in them, and report back as JSON (`_worker` below)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.ch28
c10d = torch.ops._c10d_functional


@pytest.fixture
def world(tmp_path):
    """A process group of one process, for one test; its name, e.g. '0'."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield dist.group.WORLD.group_name
    finally:
        dist.destroy_process_group()


def _lower(fn, *inputs, mode="real"):
    from torch.fx.experimental.proxy_tensor import make_fx

    from minductor.lowering import GraphLowering

    gm = make_fx(fn, tracing_mode=mode)(*inputs)
    return GraphLowering(gm, list(inputs)).lower()


def _schedule(fn, *inputs, on=True) -> list[str]:
    import minductor
    from minductor.scheduler import Scheduler

    with minductor.config.patch({"reorder_for_overlap": on}):
        graph = _lower(fn, *inputs)
        nodes = Scheduler(graph).nodes
    return [type(getattr(n, "node", n)).__name__ for n in nodes]


def _call(fn, *inputs) -> str:
    from minductor.scheduler import Scheduler
    from minductor.wrapper import WrapperCodeGen

    graph = _lower(fn, *inputs)
    source = WrapperCodeGen(graph, Scheduler(graph), interpret=True).generate()
    return source[source.index("def call(") : source.index("def benchmark")]


def _on_the_cpu_compiled() -> None:
    """These graphs hold CPU tensors: compiled only where Triton interprets kernels
    (on a GPU machine, minductor runs CPU graphs with ATen)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("CPU graphs compile with TRITON_INTERPRET=1 only")


def _compiled(fn, *inputs):
    import minductor

    _on_the_cpu_compiled()
    from minductor.capture import record_compiled

    torch._dynamo.reset()
    with record_compiled() as graphs, minductor.config.patch({"graph_cache": False}):
        out = torch.compile(fn, backend="minductor")(*inputs)
    return out, graphs


def _ops(world):
    """Each collective we lower, on a group of one, as a function of x (5, 7)."""
    return {
        "all_reduce": lambda x: c10d.all_reduce(x, "sum", world),
        "all_gather_into_tensor": lambda x: c10d.all_gather_into_tensor(x, 1, world),
        "reduce_scatter_tensor": lambda x: c10d.reduce_scatter_tensor(
            x, "sum", 1, world
        ),
        "all_to_all_single": lambda x: c10d.all_to_all_single(x, [5], [5], world),
    }


OPS = [
    "all_reduce",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_to_all_single",
]


@pytest.mark.parametrize("name", OPS)
def test_each_collective_and_its_wait_are_our_ir_nodes_as_eager_computes(world, name):
    from minductor.distributed import CollectiveKernel, WaitKernel

    start = _ops(world)[name]

    def fn(x):  # a body before (stored for the collective), one after the wait
        return torch.sin(c10d.wait_tensor(start(x.t() * 2))) + 1

    x = torch.randn(7, 5)  # the transpose makes the collective's input a copy
    graph = _lower(fn, x)
    kinds = [type(b).__name__ for b in graph.buffers]
    assert kinds.count("CollectiveKernel") == 1 and kinds.count("WaitKernel") == 1
    assert not graph.fallbacks and "FallbackKernel" not in kinds
    (collective,) = [b for b in graph.buffers if isinstance(b, CollectiveKernel)]
    assert collective.kind() == name and collective.group == world
    (wait,) = [b for b in graph.buffers if isinstance(b, WaitKernel)]
    assert wait.collective is collective
    assert [b.name for b in wait.input_buffers()] == [
        collective.name,
        *(b.name for b in collective.input_buffers()),
    ]
    out, graphs = _compiled(fn, x)
    torch.testing.assert_close(out, fn(x))
    assert graphs[0].fallbacks == [] and len(graphs[0].kernel_names) == 2


def test_an_all_reduce_of_a_value_computed_for_it_alone_reduces_it_in_place(world):
    """The kernel that computes the input writes the memory the all-reduce reduces:
    no copy, and the collective is all_reduce_ on that buffer."""
    fn = lambda x: c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", world)) + 1  # noqa: E731
    x = torch.randn(5, 7)
    out, graphs = _compiled(fn, x)
    torch.testing.assert_close(out, fn(x))
    source = graphs[0].source
    written = re.search(r"launch_triton_poi_fused_mul_0\(arg0_1, (buf\d+)\)", source)
    assert written and f"all_reduce_.default({written.group(1)}, 'sum'" in source
    assert len(graphs[0].kernel_names) == 2  # the product and the add: no copy


@pytest.mark.parametrize("case", ["the graph's input", "read again", "knob off"])
def test_an_all_reduce_of_memory_it_does_not_own_reduces_a_copy(world, case):
    import minductor

    if case == "the graph's input":
        fn = lambda x: c10d.wait_tensor(c10d.all_reduce(x, "sum", world)) * 3  # noqa: E731
    else:
        def fn(x):
            y = x * 2
            return c10d.wait_tensor(c10d.all_reduce(y, "sum", world)) + y

    x = torch.randn(5, 7)
    with minductor.config.patch({"all_reduce_in_place": case != "knob off"}):
        out, graphs = _compiled(fn, x)
    torch.testing.assert_close(out, fn(x))
    source = graphs[0].source
    if case == "knob off":
        assert "all_reduce.default(" in source and "all_reduce_" not in source
        return
    reduced = re.search(r"all_reduce_\.default\((\w+),", source).group(1)
    launches = re.findall(r"launch_triton_\w+\(([^)]*)\)", source)
    writers = [args for args in launches if args.split(", ")[-1] == reduced]
    readers = [args for args in launches if reduced in args.split(", ")[:-1]]
    assert reduced != "arg0_1" and len(writers) == 1 and not readers  # a copy of ours


def _step(world):
    def step(x, w):
        started = c10d.all_gather_into_tensor(x * 2, 1, world)
        gathered = c10d.wait_tensor(started)
        h = torch.relu(x @ w)  # independent of the collective
        return gathered + 1, h

    return step


def test_overlap_moves_independent_work_between_collective_and_wait(world):
    x, w = torch.randn(5, 7), torch.randn(7, 7)
    step = _step(world)
    off = _schedule(step, x, w, on=False)
    on = _schedule(step, x, w, on=True)
    assert off == [
        "ComputedBuffer", "CollectiveKernel", "WaitKernel",
        "ExternKernelOut", "ComputedBuffer", "ComputedBuffer",
    ]  # fmt: skip
    assert on == [
        "ComputedBuffer", "CollectiveKernel", "ExternKernelOut",
        "ComputedBuffer", "WaitKernel", "ComputedBuffer",
    ]  # fmt: skip
    import minductor

    for knob in (False, True):
        with minductor.config.patch({"reorder_for_overlap": knob}):
            out, _ = _compiled(step, x, w)
        for a, b in zip(out, step(x, w)):
            torch.testing.assert_close(a, b)


def test_a_collective_starts_once_its_input_is_ready_in_the_graphs_order(world):
    """A reduction is stored where the graph computes it, so the collective that reads
    it may start early; but never before a collective the graph starts first."""
    from minductor.distributed import CollectiveKernel
    from minductor.scheduler import Scheduler

    def one(x, w):
        b = x.sum(1)  # ready first
        h = x @ w  # work the program runs before starting the collective
        return c10d.wait_tensor(c10d.all_reduce(b, "sum", world)) + 1, h

    def two(x, w):
        b = x.sum(1)  # ready first, but its all-reduce is started second
        a = (x @ w).sum(1)
        s1 = c10d.all_reduce(a, "sum", world)
        s2 = c10d.all_reduce(b, "sum", world)
        return c10d.wait_tensor(s1) * c10d.wait_tensor(s2)

    x, w = torch.randn(5, 7), torch.randn(7, 7)
    off, on = _schedule(one, x, w, on=False), _schedule(one, x, w)
    assert off[:3] == ["ComputedBuffer", "ExternKernelOut", "CollectiveKernel"]
    assert on[:3] == ["ComputedBuffer", "CollectiveKernel", "ExternKernelOut"]
    nodes = Scheduler(_lower(two, x, w)).nodes
    kinds = [type(getattr(n, "node", n)).__name__ for n in nodes]
    assert kinds[:5] == [
        "ComputedBuffer", "ExternKernelOut", "ComputedBuffer",
        "CollectiveKernel", "CollectiveKernel",
    ]  # fmt: skip
    first = nodes[3].node
    assert isinstance(first, CollectiveKernel)
    assert first.input_buffers()[0].name == nodes[2].get_name()  # a: started first
    for fn in (one, two):
        out, _ = _compiled(fn, x, w)
        want = fn(x, w)
        out, want = (out, want) if isinstance(want, tuple) else ((out,), (want,))
        for got, expected in zip(out, want):
            torch.testing.assert_close(got, expected)


def test_a_reader_of_the_result_stays_after_the_wait(world):
    """The side condition's edge: work that reads the wait's result, even through
    another kernel, cannot move before it; work that does not, does."""

    def fn(x, w):
        gathered = c10d.wait_tensor(c10d.all_reduce(x + 1, "sum", world))
        y = gathered @ w  # reads the result
        z = torch.exp(x @ w)  # does not
        return torch.tanh(y), z

    x, w = torch.randn(5, 7), torch.randn(7, 7)
    on = _schedule(fn, x, w)
    wait = on.index("WaitKernel")
    assert on[on.index("CollectiveKernel") + 1 : wait] == [
        "ExternKernelOut", "ComputedBuffer",
    ]  # the exp's matmul and its kernel  # fmt: skip
    assert on[wait + 1 :] == ["ExternKernelOut", "ComputedBuffer"]
    out, _ = _compiled(fn, x, w)
    for a, b in zip(out, fn(x, w)):
        torch.testing.assert_close(a, b)


def test_a_write_into_the_collectives_input_stays_after_the_wait(world):
    """The graph is functional: the all-gather reads x as it was, and the write into x
    (a kernel AOTAutograd adds at the end, which depends on nothing the wait makes)
    must not move before the wait. Eager, which starts the write while gloo may still
    be reading x, is no reference here: the graph's order is."""

    def fn(x):
        started = c10d.all_gather_into_tensor(x, 1, world)  # reads x itself
        x.mul_(3)
        return c10d.wait_tensor(started) + 1

    x = torch.randn(5, 7)
    before = x.clone()
    got, graphs = _compiled(fn, x)
    torch.testing.assert_close(got, before + 1)
    torch.testing.assert_close(x, before * 3)
    call = graphs[0].source.split("def call(")[1]
    assert call.index("wait_tensor") < call.index("launch_triton_poi_fused_copy__mul")


def test_the_wait_keeps_the_inputs_alive_and_unshared(world):
    x, w = torch.randn(6, 8), torch.randn(8, 8)  # the matmul's result: buf0's size
    call = _call(_step(world), x, w)
    started, waited = call.index("all_gather_into_tensor"), call.index("wait_tensor")
    assert "extern_kernels.mm" in call[started:waited]
    assert not re.search(r"del .*\bbuf0\b", call[:waited])
    assert re.search(r"del .*\bbuf0\b", call[waited:])
    assert "= buf0  # reuse" not in call
    # the collective's line starts it and does not look at its result
    line = next(s for s in call.splitlines() if s.strip().startswith("buf1 ="))
    assert line.strip() == (
        f"buf1 = torch.ops._c10d_functional.all_gather_into_tensor.default("
        f"buf0, 1, '{world}')"
    )
    assert "restride(buf1" not in call
    # the wait's line names its collective, and gives the result its strides
    lines = [s.strip() for s in call.splitlines()]
    at = next(k for k, s in enumerate(lines) if s.startswith("buf2 = "))
    assert lines[at] == (
        f"buf2 = extern_kernels.wait_tensor(buf1, \"all_gather_into_tensor (6x8 float32) "
        f"on group '{world}'\")"
    )
    assert lines[at + 1].startswith("buf2 = restride(buf2, "), lines[at : at + 2]


def test_a_read_of_a_result_in_flight_is_refused(world):
    from minductor.lowering import CannotCompile
    from minductor.scheduler import Scheduler

    def fn(x):  # no wait: the sum would read values that have not arrived
        return c10d.all_reduce(x, "sum", world) + 1

    graph = _lower(fn, torch.randn(5, 7), mode="fake")  # fake: nothing left unwaited
    with pytest.raises(CannotCompile, match="without waiting"):
        Scheduler(graph)


def test_a_group_the_process_does_not_have_is_a_clear_error(world):
    from minductor.distributed import process_group

    with pytest.raises(ValueError, match="process group 'elsewhere'"):
        process_group("elsewhere", None)
    with pytest.raises(ValueError, match="to have 2 ranks, but it has 1"):
        process_group(world, 2)
    from torch.fx.experimental.proxy_tensor import make_fx

    from minductor.lowering import GraphLowering

    x = torch.randn(5, 7)
    gm = make_fx(
        lambda x: c10d.wait_tensor(c10d.all_gather_into_tensor(x, 1, world))
    )(x)
    for node in gm.graph.nodes:
        if node.target == c10d.all_gather_into_tensor.default:
            node.args = (node.args[0], 1, "elsewhere")
    gm.recompile()
    with pytest.raises(ValueError, match="'elsewhere', which this process does not"):
        GraphLowering(gm, [x]).lower()


def test_a_tensor_parallel_graph_passes_its_process_group_through(world, caplog):
    """DTensor's graphs take the process group (an object) as an input and return it
    for the backward: both graphs compile, the object passed through by name."""
    import logging

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(7, 12), torch.nn.Linear(12, 7)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))

    torch.manual_seed(0)
    model = MLP()
    mesh = init_device_mesh("cpu", (1,))
    plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    parallelize_module(model, mesh, plan)
    x = torch.randn(5, 7, requires_grad=True)
    with caplog.at_level(logging.INFO, logger="minductor"):
        got, graphs = _compiled(model, x)
        got.sum().backward()
    torch.testing.assert_close(got, model(x))
    assert "running graph with ATen" not in caplog.text
    forward = graphs[0].source
    call = forward[forward.index("def call("):forward.index("def benchmark")]
    returned = call.split("return (")[1].split(")")[0].split(", ")
    bench = forward[forward.index("def benchmark"):]
    objects = re.findall(r"(\w+) = None", bench)  # the benchmark has no group to pass
    assert set(objects) & set(returned), (objects, returned)  # one handed back


# --- ranks that disagree -------------------------------------------------------------


def test_a_graphs_collectives_are_listed_in_order_with_shapes(world):
    from torch.fx.experimental.proxy_tensor import make_fx

    from minductor.distributed import collective_signature

    def fn(x):
        a = c10d.wait_tensor(c10d.all_reduce(x, "sum", world))
        b = c10d.wait_tensor(c10d.all_gather_into_tensor(x.half(), 1, world))
        return a, b

    gm = make_fx(fn)(torch.randn(5, 7))
    assert collective_signature(gm) == [
        ("all_reduce", world, "5x7", "torch.float32"),
        ("all_gather_into_tensor", world, "5x7", "torch.float16"),
    ]


SIG = [("all_reduce", "0", "5x7", "torch.float32"), ("all_to_all_single", "0", "4x7",
       "torch.float32")]  # fmt: skip


@pytest.mark.parametrize("other, expected", [
    (SIG, None),
    ([SIG[0], (*SIG[1][:2], "3x7", SIG[1][3])],
     "collective 1: rank 0 runs all_to_all_single on a 4x7 float32 tensor, rank 2 "
     "all_to_all_single on a 3x7 float32 tensor"),
    ([SIG[1], SIG[0]], "collective 0: rank 0 runs all_reduce on a 5x7 float32 tensor, "
     "rank 2 all_to_all_single on a 4x7 float32 tensor"),
    (SIG[:1], "collective 1: rank 0 runs all_to_all_single on a 4x7 float32 tensor, "
     "rank 2 no collective"),
    ([*SIG, SIG[0]], "collective 2: rank 0 runs no collective, rank 2 all_reduce on a "
     "5x7 float32 tensor"),
])  # fmt: skip
def test_the_first_difference_between_ranks_is_named(other, expected):
    from minductor.distributed import first_difference

    assert first_difference([SIG, SIG, other]) == expected


def test_a_graph_with_collectives_checks_the_ranks_on_its_first_call_only(
    world, monkeypatch
):
    import minductor.distributed as D

    gathered = []
    real = dist.all_gather_object

    def counting(lists, obj, group=None):
        gathered.append(obj)
        return real(lists, obj, group=group)

    monkeypatch.setattr(dist, "all_gather_object", counting)

    def fn(x):
        return torch.cos(c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", world)))

    x = torch.randn(5, 7)
    torch._dynamo.reset()
    import minductor

    _on_the_cpu_compiled()
    with minductor.config.patch({"graph_cache": False}):
        f = torch.compile(fn, backend="minductor")
        for _ in range(3):
            torch.testing.assert_close(f(x), fn(x))
        assert gathered == [[("all_reduce", world, "5x7", "torch.float32")]]
        torch._dynamo.reset()
        with minductor.config.patch({"check_collectives": False}):
            torch.compile(fn, backend="minductor")(x)
    assert len(gathered) == 1  # switched off: not gathered again
    assert D.check_ranks_agree in minductor.pipeline.PIPELINE["graph_wrappers"]


# --- two processes ------------------------------------------------------------------

FAST = ("collectives", "mismatch", "tp", "tp_llama")
SLOW = ("block", "ddp", "fsdp2")


def _close(a, b) -> float:
    """The largest difference between two tensors, relative to b's size."""
    a, b = a.detach().float(), b.detach().float()
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().max() / (b.abs().max() + 1e-6)) if a.numel() else 0.0


def _scenario_collectives(rank: int, report) -> None:
    world = dist.group.WORLD.group_name
    x = torch.arange(35.0).reshape(5, 7) * (rank + 1) - 3  # odd sizes, ranks differ
    ops = {
        "all_reduce": lambda t: c10d.all_reduce(t, "sum", world),
        "all_gather_into_tensor": lambda t: c10d.all_gather_into_tensor(t, 2, world),
        "reduce_scatter_tensor": lambda t: c10d.reduce_scatter_tensor(
            torch.cat([t, t + 1]), "sum", 2, world
        ),
        "all_to_all_single": lambda t: c10d.all_to_all_single(
            t[:4], [2, 2], [2, 2], world
        ),
    }
    for name, start in ops.items():

        def fn(t, start=start):
            return torch.cos(c10d.wait_tensor(start(t * 2)))

        out, graphs = _compiled(fn, x)
        report(f"collective {name}", _close(out, fn(x)), graphs[0].fallbacks == [])

    # reduced in place: a value read again after the all-reduce, and the graph's input,
    # must each keep its own value (the all-reduce reduces a copy of them)
    def read_again(t):
        y = t * 2
        return torch.cos(c10d.wait_tensor(c10d.all_reduce(y, "sum", world))) + y

    def of_the_input(t):
        return c10d.wait_tensor(c10d.all_reduce(t, "sum", world)) * 3

    for name, fn in (("read again", read_again), ("of the input", of_the_input)):
        before = x.clone()
        out, graphs = _compiled(fn, x)
        same = torch.equal(x, before)  # the input is not reduced in place
        report(f"all_reduce {name}", _close(out, fn(x)), same and graphs[0].fallbacks == [])


def _scenario_mismatch(rank: int, report) -> None:
    """Rank 1's tensor has another shape: a clear error on both ranks, not a crash."""
    world = dist.group.WORLD.group_name

    def fn(t):
        return c10d.wait_tensor(c10d.all_gather_into_tensor(t, 2, world)) + 1

    try:
        _compiled(fn, torch.randn(5 + rank, 7))
    except Exception as why:  # noqa: BLE001  (Dynamo wraps the error)
        said = str(why)
        clear = "run different collectives" in said and "5x7" in said and "6x7" in said
        report("mismatch", 0.0, clear)
    else:
        report("mismatch", math.inf, False)


def _scenario_failing_rank(rank: int, report) -> None:
    """Both ranks run a compiled step once; then rank 1 stops, as a rank that failed
    would. Rank 0's next step ends at its group's timeout (3 s), with the collective
    named, instead of hanging."""
    import datetime

    _on_the_cpu_compiled()
    short = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
    name = short.group_name

    def step(t):
        return c10d.wait_tensor(c10d.all_reduce(t * 2, "sum", name)) + 1

    torch._dynamo.reset()
    compiled = torch.compile(step, backend="minductor")
    x = torch.ones(5)
    first = torch.equal(compiled(x), torch.full((5,), 5.0))  # 2 + 2, then + 1
    if rank == 1:
        report("failing rank", 0.0, first)
        return  # and never joins the group again
    start = time.time()
    try:
        compiled(x)
    except Exception as why:  # noqa: BLE001  (the library's error, named by the wait)
        said = str(why)
        named = f"all_reduce (5 float32) on group {name!r}" in said and "rank 0" in said
        report("failing rank", 0.0, first and named and time.time() - start < 30)
    else:
        report("failing rank", math.inf, False)


def _block_parts(seed: int = 0):
    torch.manual_seed(seed)
    d = 8
    return {
        "q": torch.randn(d, d) / 3,
        "k": torch.randn(d, d) / 3,
        "v": torch.randn(d, d) / 3,
        "up": torch.randn(d, 12) / 3,
        "down": torch.randn(12, d) / 3,
    }


def _block(x, p):
    """A transformer block, sequence-parallel: each rank holds 5 of the 10 rows."""
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD
    full = funcol.all_gather_tensor_autograd(x, 0, group)  # (10, 8)
    q, k, v = full @ p["q"], full @ p["k"], full @ p["v"]
    att = torch.softmax(q @ k.t() / math.sqrt(q.shape[-1]), dim=-1) @ v
    h = full + att
    h = h + torch.nn.functional.gelu(h @ p["up"]) @ p["down"]
    return funcol.reduce_scatter_tensor_autograd(h, "sum", 0, group)  # (5, 8)


def _scenario_block(rank: int, report) -> None:
    results = []
    for compiled in (False, True):
        p = {k: v.requires_grad_() for k, v in _block_parts().items()}
        torch.manual_seed(1 + rank)
        x = torch.randn(5, 8, requires_grad=True)
        fn = _block
        if compiled:
            torch._dynamo.reset()
            fn = torch.compile(_block, backend="minductor")
        loss = (fn(x, p) ** 2).sum()
        loss.backward()
        results.append((loss, x.grad, {k: v.grad for k, v in p.items()}))
    (l0, gx0, g0), (l1, gx1, g1) = results
    report("block loss", _close(l1, l0), True)
    report("block grad x", _close(gx1, gx0), True)
    for k in g0:
        report(f"block grad {k}", _close(g1[k], g0[k]), True)


class Block(torch.nn.Module):
    # a class of our own: Dynamo compiles its frame (torch's nn.Linear is skipped)
    def __init__(self, width: int):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.linear(x))


class Layers(torch.nn.Module):
    def __init__(self, width: int, n: int = 3):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(width) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _scenario_ddp(rank: int, report) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from minductor.capture import record_compiled

    runs = []
    for compiled in (False, True):
        torch.manual_seed(0)
        ddp = DDP(Layers(512), bucket_cap_mb=1)  # a bucket, a piece, per layer
        torch.manual_seed(1 + rank)
        x = torch.randn(3, 512)
        model = ddp
        if compiled:
            torch._dynamo.reset()
            model = torch.compile(ddp, backend="minductor")
        with record_compiled() as graphs:
            loss = model(x).pow(2).sum()
            loss.backward()
        runs.append((loss, [p.grad for p in ddp.parameters()], len(graphs)))
    (l0, g0, _), (l1, g1, pieces) = runs
    report("ddp loss", _close(l1, l0), True)
    report("ddp grads", max(_close(a, b) for a, b in zip(g1, g0)), pieces == 6)


def _scenario_fsdp2(rank: int, report) -> None:
    from torch.distributed.fsdp import fully_shard

    from minductor.capture import record_compiled

    def run(how: str):
        torch.manual_seed(0)
        model = Layers(15)  # 15 rows: shards of 8 and 7
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        if how == "blocks":
            for layer in model.layers:
                layer.compile(backend="minductor")
        elif how == "whole":
            model.compile(backend="minductor")
        torch._dynamo.reset()
        torch.manual_seed(1 + rank)
        losses = []
        with record_compiled() as graphs:
            for _ in range(2):  # the second step runs the compiled code again
                loss = model(torch.randn(3, 15)).pow(2).sum()
                loss.backward()
                losses.append(loss.detach())
        grads = [p.grad.full_tensor() for p in model.parameters()]
        return torch.stack(losses), grads, len(graphs)

    l0, g0, _ = run("eager")
    for how in ("blocks", "whole"):
        l1, g1, compiled = run(how)
        report(f"fsdp2 {how} loss", _close(l1, l0), compiled > 0)
        grads = max(_close(a, b) for a, b in zip(g1, g0))
        report(f"fsdp2 {how} grads", grads, compiled > 0)
        report(f"fsdp2 {how} graphs", 0.0, compiled)


class TwoLayers(torch.nn.Module):
    def __init__(self, width: int = 16, hidden: int = 24):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, hidden), torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def _scenario_tp(rank: int, report) -> None:
    """Tensor parallelism: the MLP's first layer split by columns, its second by rows,
    over both ranks; DTensor puts the collectives into the graphs."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from minductor.capture import record_compiled

    def run(compiled: bool):
        torch.manual_seed(0)
        model = TwoLayers()
        mesh = init_device_mesh("cpu", (2,))
        plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
        parallelize_module(model, mesh, plan)
        x = torch.randn(5, 16, requires_grad=True)  # the same on both ranks
        fn = model
        if compiled:
            torch._dynamo.reset()
            fn = torch.compile(model, backend="minductor")
        with record_compiled() as graphs:
            out = fn(x)
            out.pow(2).sum().backward()
        grads = [p.grad.full_tensor() for p in model.parameters()]
        return out, x.grad, grads, graphs

    o0, x0, g0, _ = run(False)
    o1, x1, g1, graphs = run(True)
    source = "".join(g.source for g in graphs)
    report("tp out", _close(o1, o0), len(graphs) == 2)  # forward and backward ours
    report("tp grad x", _close(x1, x0), True)
    report("tp grads", max(_close(a, b) for a, b in zip(g1, g0)), True)
    fallbacks = [f for g in graphs for f in g.fallbacks]  # each collective ours
    reduces = re.findall(r"all_reduce_?\.default\(", source)
    report("tp collectives", 0.0, not fallbacks and len(reduces) >= 2)


# --- a tensor-parallel Llama block ----------------------------------------------------


class RMSNorm(torch.nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        x32 = x.float()
        scale = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * scale).type_as(x) * self.weight


def _rotate(x, cos, sin):  # x (B, S, H, D); cos, sin (S, D)
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def rotary_tables(seq: int, head_dim: int, base: float = 10000.0):
    freqs = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), freqs)  # (S, D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (S, D)
    return angles.cos(), angles.sin()


class Attention(torch.nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.head_dim = d // heads
        self.q, self.k, self.v, self.o = (
            torch.nn.Linear(d, d, bias=False) for _ in range(4)
        )

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        # ColwiseParallel hands back local columns: -1 is this rank's number of heads
        q = self.q(x).view(b, s, -1, self.head_dim)
        k = self.k(x).view(b, s, -1, self.head_dim)
        v = self.v(x).view(b, s, -1, self.head_dim)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, S, D)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(att.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(torch.nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.gate = torch.nn.Linear(d, hidden, bias=False)
        self.up = torch.nn.Linear(d, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


class LlamaBlock(torch.nn.Module):
    def __init__(self, d: int = 16, heads: int = 4, hidden: int = 24, seq: int = 5):
        super().__init__()
        self.attention_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.attention, self.mlp = Attention(d, heads), SwiGLU(d, hidden)
        cos, sin = rotary_tables(seq, d // heads)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x), self.cos, self.sin)
        return h + self.mlp(self.mlp_norm(h))


LLAMA_PLAN = {
    **{f"attention.{n}": "colwise" for n in "qkv"},
    "attention.o": "rowwise",
    "mlp.gate": "colwise",
    "mlp.up": "colwise",
    "mlp.down": "rowwise",
}


def parallelize_llama(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """Llama's usual plan: q, k, v, gate and up split by output columns (each rank
    holds whole heads), o and down by input rows (their outputs all-reduced)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    style = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {name: style[how]() for name, how in LLAMA_PLAN.items()}
    return parallelize_module(model, mesh, plan)


def _full(grad):
    """A parameter's gradient, whole: a DTensor's shards gathered, a plain one as is."""
    return grad.full_tensor() if hasattr(grad, "full_tensor") else grad


def _scenario_tp_llama(rank: int, report) -> None:
    """A Llama block (RMSNorm, rotary q and k, causal attention, SwiGLU), 2-way tensor
    parallel; one forward and one backward graph, every collective ours, and the same
    values with the overlap pass off."""
    from torch.distributed.device_mesh import init_device_mesh

    import minductor
    from minductor.capture import record_compiled

    def run(compiled: bool, overlap: bool = True):
        torch.manual_seed(0)
        model = parallelize_llama(LlamaBlock(), init_device_mesh("cpu", (2,)))
        x = torch.randn(2, 5, 16, requires_grad=True)  # the same on both ranks
        fn = model
        if compiled:
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()  # reset() keeps Dynamo's counts
            fn = torch.compile(model, backend="minductor")
        knobs = {"reorder_for_overlap": overlap}
        with record_compiled() as graphs, minductor.config.patch(knobs):
            out = fn(x)
            out.pow(2).sum().backward()
        grads = [_full(p.grad) for p in model.parameters()]
        made = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        return out, x.grad, grads, graphs, made

    assert minductor.config.reorder_for_overlap  # on unless switched off
    o0, x0, g0, _, _ = run(False)
    o1, x1, g1, graphs, made = run(True)
    one_graph = made == 1 and len(graphs) == 2  # Dynamo's one graph: forward, backward
    report("tp_llama out", _close(o1, o0), one_graph)
    report("tp_llama grad x", _close(x1, x0), True)
    report("tp_llama grads", max(_close(a, b) for a, b in zip(g1, g0)), len(g1) == 9)
    fallbacks = [f for g in graphs for f in g.fallbacks]
    # forward: o's and down's outputs summed; backward: the input gradient of each
    # column-parallel layer (q, k, v, gate, up), a partial sum on each rank
    reduces = [len(re.findall(r"all_reduce_?\.default\(", _call_of(g))) for g in graphs]
    report("tp_llama collectives", 0.0, not fallbacks and reduces == [2, 5])
    on = _overlapped(_call_of(graphs[-1]))  # the backward's
    o2, x2, g2, graphs, _ = run(True, overlap=False)
    same = torch.equal(o2, o1) and torch.equal(x2, x1)
    same = same and all(torch.equal(a, b) for a, b in zip(g2, g1))
    off = _overlapped(_call_of(graphs[-1]))
    moved = on > 0 and off == 0  # the pass at work, and on by default
    report("tp_llama overlap off", _close(o2, o0), same and moved and len(graphs) == 2)


def _call_of(graph) -> str:
    """A compiled graph's call(), without the benchmark that follows it."""
    source = graph.source
    return source[source.index("def call(") : source.index("def benchmark")]


def _overlapped(call: str) -> int:
    """How many matmuls and kernels a graph runs while some collective is in flight:
    between the line that starts it and the line that waits for it."""
    lines = call.splitlines()
    inflight, count = set(), 0
    for line in lines:
        started = re.match(r"\s*(buf\d+) = torch\.ops\._c10d_functional\.", line)
        waited = re.search(r"wait_tensor\((buf\d+),", line)
        if started:
            inflight.add(started.group(1))
        elif waited:
            inflight.discard(waited.group(1))
        elif inflight and re.search(r"extern_kernels\.\w*mm\(|launch_triton_", line):
            count += 1
    return count


def _worker(rank: int, world_size: int, store_path: str, out: str, scenarios: str):
    import datetime

    import minductor  # noqa: F401

    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(
        "gloo",
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    found = {}

    def report(name, error, structure_ok):
        found[name] = {"error": error, "ok": bool(structure_ok)}

    for scenario in scenarios.split(","):
        t = time.time()
        try:
            globals()[f"_scenario_{scenario}"](rank, report)
        except Exception as why:  # reported, so that the test names it
            found[scenario] = {"error": math.inf, "ok": False, "why": repr(why)[:500]}
        found[f"{scenario} seconds"] = {"error": 0.0, "ok": True, "t": time.time() - t}
    dist.destroy_process_group()
    Path(out).write_text(json.dumps(found))


def _run_two(scenarios, timeout: float = 240) -> list[dict]:
    """Rank 0 runs in this process, which has torch and minductor imported already;
    rank 1 in a new one."""
    _on_the_cpu_compiled()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TRITON_INTERPRET": "1", "MINDUCTOR_GRAPH_CACHE": "0"}
        outs = [os.path.join(tmp, f"rank{r}.json") for r in range(2)]
        store, names = os.path.join(tmp, "store"), ",".join(scenarios)
        other = subprocess.Popen(
            [sys.executable, __file__, "1", "2", store, outs[1], names],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            import minductor

            with minductor.config.patch({"graph_cache": False}):
                _worker(0, 2, store, outs[0], names)
            log = other.communicate(timeout=timeout)[0]
        finally:
            if other.poll() is None:
                other.kill()
                other.communicate()
        assert other.returncode == 0, log[-3000:]
        return [json.loads(Path(o).read_text()) for o in outs]


CHECKS_FAST = [f"collective {name}" for name in OPS] + [
    "all_reduce read again", "all_reduce of the input",
    "mismatch", "tp out", "tp grad x", "tp grads", "tp collectives",
    *(f"tp_llama {what}" for what in ("out", "grad x", "grads", "collectives",
                                      "overlap off"))]  # fmt: skip
CHECKS_SLOW = [
    "block loss", "block grad x", "block grad q", "block grad k", "block grad v",
    "block grad up", "block grad down", "ddp loss", "ddp grads",
    *(f"fsdp2 {how} {what}" for how in ("blocks", "whole")
      for what in ("loss", "grads", "graphs")),
]  # fmt: skip


def _failures(results, names) -> list[str]:
    """Each check that a rank did not pass (or did not report), with what it found."""
    failed = []
    for rank, found in enumerate(results):
        for name in names:
            got = found.get(name)
            if got is None or not got["ok"] or not got["error"] < 1e-4:
                failed.append(f"rank {rank}: {name}: {got}")
        failed += [f"rank {rank}: {k}: {v}" for k, v in found.items() if "why" in v]
    return failed


# One test per group of scenarios, so that a parallel run starts the processes once.
def test_two_gloo_processes_run_each_collective_as_eager_does():
    assert _failures(_run_two(FAST), CHECKS_FAST) == []


def test_a_rank_that_stops_ends_the_others_wait_with_the_collective_named():
    assert _failures(_run_two(["failing_rank"]), ["failing rank"]) == []


@pytest.mark.slow
def test_two_gloo_processes_train_as_eager_does():
    """A sequence-parallel transformer block (collectives in the forward and the
    backward graphs), DDP, and FSDP2 with compiled blocks and a compiled model."""
    assert _failures(_run_two(SLOW), CHECKS_SLOW) == []


if __name__ == "__main__":
    rank, world_size, store_path, out, scenarios = sys.argv[1:]
    _worker(int(rank), int(world_size), store_path, out, scenarios)
