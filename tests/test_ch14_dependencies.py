"""Chapter 14: what each scheduler node reads and writes, found by running its body.

Most graphs come from make_fx + GraphLowering; the refusals that lowering cannot
produce on its own (an index mismatch, two devices) use buffers built by hand.
"""


import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.dependencies import (
    ExternKernelSchedulerNode,
    Group,
    MemoryDep,
    SchedulerNode,
    StarDep,
)
from minductor.lowering import GraphLowering
from minductor.scheduler import Scheduler
from minductor.sizevars import index_vars

pytestmark = pytest.mark.ch14

cpu = torch.device("cpu")
x1, x0 = index_vars(2, "x")[::-1]  # x0 is the innermost merged variable


def schedule(fn, *args):
    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    return Scheduler(graph)


def by_name(scheduler, name):
    return next(n for n in scheduler.nodes if n.get_name() == name)


# --- dependencies ---------------------------------------------------------------------


def test_contiguous_node_reads_and_writes_in_one_merged_variable():
    a, b, c = (torch.randn(33, 65) for _ in range(3))
    s = schedule(lambda a, b, c: (a * b + c,), a, b, c)
    (node,) = s.nodes
    assert isinstance(node, SchedulerNode)
    assert node.loop.sizes == (2145,)
    assert node.reads == {
        MemoryDep("a_1", x0),
        MemoryDep("b_1", x0),
        MemoryDep("c_1", x0),
    }
    assert node.writes == {MemoryDep("buf0", x0)}
    assert node.group == Group(device=cpu, numel=2145, rnumel=1)
    assert node.group == (cpu, 2145, 1)  # a NamedTuple: equal to its tuple


def test_broadcast_node_keeps_two_variables():
    x, bias = torch.randn(33, 65), torch.randn(1, 65)
    s = schedule(lambda x, bias: (x * bias + 1,), x, bias)
    (node,) = s.nodes
    assert node.loop.sizes == (33, 65)
    assert node.reads == {MemoryDep("x_1", x0 + 65 * x1), MemoryDep("bias_1", x0)}
    assert node.writes == {MemoryDep("buf0", x0 + 65 * x1)}


def test_transposed_input_is_read_through_its_strides():
    # eager gives x + y the transposed x's strides (1, 65), and the loops walk the
    # store's memory order: x is read contiguously, y with a stride
    x, y = torch.randn(33, 65).t(), torch.randn(65, 33)
    s = schedule(lambda x, y: (x + y,), x, y)
    (node,) = s.nodes
    assert node.loop.sizes == (33, 65)
    assert node.writes == {MemoryDep("buf0", x0 + 65 * x1)}
    assert node.reads == {
        MemoryDep("x_1", x0 + 65 * x1),
        MemoryDep("y_1", 33 * x0 + x1),
    }


def test_loops_follow_a_channels_last_store():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    scale = torch.randn(3, 1, 1)
    s = schedule(lambda x, scale: (x * scale + 1,), x, scale)
    (node,) = s.nodes
    assert node.writes == {MemoryDep("buf0", x0 + 3 * x1)}  # (n, h, w) then c
    assert node.loop.sizes == (40, 3)
    assert node.reads == {MemoryDep("x_1", x0 + 3 * x1), MemoryDep("scale_1", x0)}


@pytest.mark.usefixtures("cumsum_falls_back")
def test_fallback_depends_on_whole_buffers():
    x = torch.randn(5, 6)
    s = schedule(lambda x: (torch.cumsum(x.sin(), 0).cos(),), x)
    extern = by_name(s, "buf1")
    assert isinstance(extern, ExternKernelSchedulerNode) and extern.is_extern()
    assert extern.reads == {StarDep("buf0")}
    assert extern.writes == {StarDep("buf1")}
    assert by_name(s, "buf2").reads == {MemoryDep("buf1", x0)}


def test_multi_output_depends_on_its_parent():
    x = torch.randn(4, 5)
    s = schedule(lambda x: tuple(torch.sort(x, 1)), x)
    parent, values, indices = s.nodes
    assert parent.reads == {StarDep("x_1")}
    assert values.reads == indices.reads == {StarDep(parent.get_name())}
    assert all(n.is_extern() for n in s.nodes)
