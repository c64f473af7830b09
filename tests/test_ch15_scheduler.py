"""Chapter 15: can_fuse and its reasons, the fusion loop, DCE (the nodes and their
dependencies are chapter 14's, test_ch14_dependencies.py).

Most graphs come from make_fx + GraphLowering; the refusals that lowering cannot
produce on its own (an index mismatch, two devices) use buffers built by hand.
"""

import copy
import dataclasses
from types import SimpleNamespace

import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.config import config
from minductor.decompositions import decomposition_table
from minductor.dependencies import (
    FusedSchedulerNode,
    MemoryDep,
    is_persistent,
)
from minductor.ir import ComputedBuffer, FixedLayout, InputBuffer, Pointwise, TensorBox
from minductor.lowering import GraphLowering
from minductor.ops import ops
from minductor.scheduler import Scheduler, fusion_rules, register_fusion_rule
from minductor.sizevars import SizeVarAllocator, index_vars

pytestmark = pytest.mark.ch15

cpu = torch.device("cpu")
x1, x0 = index_vars(2, "x")[::-1]  # x0 is the innermost merged variable


@pytest.fixture
def restore_config():
    saved = dataclasses.asdict(config)
    try:
        yield config
    finally:
        for key, value in saved.items():
            setattr(config, key, value)


def schedule(fn, *args):
    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    return Scheduler(graph)


def by_name(scheduler, name):
    return next(n for n in scheduler.nodes if n.get_name() == name)


# --- fusion ---------------------------------------------------------------------------


def _three_outputs(a):
    return a + 1, a * 2, (a + 1) * (a * 2)


def test_multi_output_pointwise_function_fuses_into_one_node():
    s = schedule(_three_outputs, torch.randn(33, 65))
    (node,) = s.nodes
    assert isinstance(node, FusedSchedulerNode)
    assert [m.get_name() for m in node.snodes] == ["buf0", "buf1", "buf2"]
    assert node.get_name() == "buf0_buf1_buf2"
    assert node.reads == {MemoryDep("a_1", x0)}
    assert node.names == {"buf0", "buf1", "buf2"}
    assert node.names is node.names and "names" in vars(node)  # computed once, kept
    with pytest.raises(dataclasses.FrozenInstanceError):  # and the node stays frozen
        node.snodes = ()
    assert s.fusion_log == [
        "fuse buf0 + buf1 (saves 8580 bytes)",
        "fuse buf0_buf1 + buf2 (saves 8580 bytes)",
    ]
    assert s.removed_buffers == set()  # all three are outputs


def test_score_fusion_is_bytes_saved_then_proximity():
    x = torch.randn(33, 65)
    graph = GraphLowering(make_fx(_three_outputs)(x), [x]).lower()
    s = Scheduler.__new__(Scheduler)  # score the unfused nodes, before fusion runs
    s.graph = graph
    s.nodes = [Scheduler._create(b) for b in graph.buffers]
    s.order = {n.get_name(): k for k, n in enumerate(s.nodes)}
    n0, n1, n2 = s.nodes
    assert s.score_fusion(n0, n1) == (33 * 65 * 4, -1)
    assert s.score_fusion(n0, n1).bytes_saved == 33 * 65 * 4  # a FusionScore
    assert s.score_fusion(n0, n2) == (33 * 65 * 4, -2)
    assert s.score_fusion(n0, n1) > s.score_fusion(n0, n2)


def test_shared_intermediate_is_fused_and_removed(restore_config):
    config.realize_opcount_threshold = 3

    def f(x, y):
        t = (x * y).exp().sin().cos() + x
        return t + 1, t * 2

    x, y = torch.randn(33, 65), torch.randn(33, 65)
    s = schedule(f, x, y)
    assert len(s.graph.buffers) == 3  # t was realized for its two users...
    (node,) = s.nodes  # ...and fused back with them
    assert [m.get_name() for m in node.snodes] == ["buf0", "buf1", "buf2"]
    assert s.removed_buffers == {"buf0"}  # read only inside the kernel
    assert node.reads == {MemoryDep("x_1", x0), MemoryDep("y_1", x0)}


@pytest.mark.usefixtures("cumsum_falls_back")
def test_scalar_leaves_share_a_kernel_and_a_read_scalar_stays():
    """One-element results that nothing reads (here written into the inputs, as batch
    norm's counters are) fuse into one kernel though they share no buffer; a scalar
    that a later node reads is inlined into it, and a fallback between them stays in
    order."""

    def f(c1, c2, c3, x, s):
        c1.add_(1)
        c2.add_(1)
        y = torch.cumsum(x, 0)  # a fallback between the updates
        c3.add_(1)
        t = s * 2  # one element, read below: not a leaf
        return y * t

    args = [torch.zeros((), dtype=torch.int64) for _ in range(3)]
    args += [torch.randn(5, 3), torch.randn(())]
    sched = schedule(torch.func.functionalize(f), *args)  # the updates: copy_ into c_i
    scalar = [
        n
        for n in sched.nodes
        if not n.is_extern() and n.group.numel == n.group.rnumel == 1
    ]
    counters = [n for n in scalar if len(n.snodes) == 3]
    assert len(counters) == 1, sched.fusion_log  # c1, c2, c3: one kernel
    assert len(scalar) == 1
    names = [m.get_name() for m in counters[0].snodes]
    assert not any(name in n.read_names for n in sched.nodes for name in names)


@pytest.mark.usefixtures("cumsum_falls_back")
def test_fused_nodes_stay_in_topological_order():
    x = torch.randn(6, 7)

    def f(x):
        a = x.sin()
        b = torch.cumsum(a, 0)
        return a * 2, b + 1, a + 3

    s = schedule(f, x)
    seen = set()
    for node in s.nodes:
        members = node.snodes if not node.is_extern() else (node,)
        for name in node.read_names:
            if name.startswith("buf"):
                assert name in seen, f"{node} reads {name} before it is written"
        seen |= {m.get_name() for m in members}


# --- can_fuse refusals, each with its reason ------------------------------------------


@pytest.mark.usefixtures("cumsum_falls_back")
def test_cycle_through_a_fallback_is_refused():
    def f(x):
        a = x.sin()
        b = torch.cumsum(a, 0)
        return (a + b,)

    s = schedule(f, torch.randn(6, 7))
    assert [n.get_name() for n in s.nodes] == ["buf0", "buf1", "buf2"]
    assert s.can_fuse(s.nodes[0], s.nodes[2]) == (
        False,
        "fusing would create a cycle through buf1",
    )
    assert (
        "cannot fuse buf0 with buf2: fusing would create a cycle through buf1"
        in s.fusion_log
    )
    assert s.can_fuse(s.nodes[0], s.nodes[1]) == (False, "buf1 is an extern kernel")


def test_different_numel_is_refused():
    x, y = torch.randn(33, 65), torch.randn(65)
    s = schedule(lambda x, y: (y * 2, x + y * 2), x, y)
    assert len(s.nodes) == 2
    ok, reason = s.can_fuse(*s.nodes)
    assert not ok and reason == "different numel: 65 vs 2145"
    assert s.fusion_log == ["cannot fuse buf0 with buf1: different numel: 65 vs 2145"]


def test_different_loops_over_other_dims_are_refused():
    # the same number of elements, over (33, 65) and (65, 33): no common loops
    x, bias, y = torch.randn(33, 65), torch.randn(1, 65), torch.randn(65, 33)
    s = schedule(lambda x, bias, y: (x * bias, y + 1), x, bias, y)
    ok, reason = s.can_fuse(*s.nodes)
    assert not ok and reason == "different loops: [33, 65] vs [2145]"


def test_loops_over_the_same_dims_are_made_common():
    # x * bias keeps its columns apart (it reads bias per column); x + 1 alone would
    # merge everything into [2145]; together they run on [33, 65], one kernel
    x, bias = torch.randn(33, 65), torch.randn(1, 65)
    s = schedule(lambda x, bias: (x + 1, x * bias), x, bias)
    (node,) = s.nodes
    assert all(m.loop.sizes == (33, 65) for m in node.snodes)
    # a producer and its consumer alike: a per-column scale (an output, so it is
    # stored), then a relu that reads it back
    s = schedule(lambda x, bias: ((y := x * bias), torch.relu(y)), x, bias)
    (node,) = s.nodes
    assert len(node.snodes) == 2
    assert all(m.loop.sizes == (33, 65) for m in node.snodes)


def _hand_built(second_body, second_device=cpu):
    """buf0 = x * 2 broadcast to (4, 4); buf1 = second_body(load buf0, load x)."""
    x = InputBuffer("x", FixedLayout.contiguous(cpu, torch.float32, (1, 4)))
    load_x = TensorBox(x).make_loader()
    size = (sympy.Integer(4), sympy.Integer(4))

    def first(i):
        return ops.mul(
            load_x([sympy.Integer(0), i[1]]), ops.constant(2.0, torch.float32)
        )

    buf0 = ComputedBuffer(
        "buf0",
        FixedLayout.contiguous(cpu, torch.float32, size),
        Pointwise(cpu, torch.float32, first, size),
    )
    load_buf0 = buf0.make_loader()

    def second(i):
        return second_body(load_buf0, lambda j: load_x([sympy.Integer(0), j[1]]), i)

    buf1 = ComputedBuffer(
        "buf1",
        FixedLayout.contiguous(second_device, torch.float32, size),
        Pointwise(second_device, torch.float32, second, size),
    )
    graph = SimpleNamespace(
        buffers=[buf0, buf1],
        graph_outputs=[buf0, buf1],
        graph_inputs={"x": TensorBox(x)},
        sizevars=SizeVarAllocator(),
    )
    return Scheduler(graph)


def test_reading_the_producer_at_another_index_is_refused():
    def transposed(load_buf0, load_x, i):
        return ops.add(load_buf0([i[1], i[0]]), load_x(i))

    s = _hand_built(transposed)
    assert [n.loop.sizes for n in s.nodes] == [(4, 4), (4, 4)]  # same loops...
    ok, reason = s.can_fuse(*s.nodes)
    assert not ok  # ...but buf1 element (i, j) needs buf0 element (j, i)
    assert (
        reason == f"buf1 reads buf0[{4 * x0 + x1}] but buf0 writes buf0[{x0 + 4 * x1}]"
    )
    assert len(s.nodes) == 2


def test_reading_the_producer_at_the_same_index_fuses():
    def same(load_buf0, load_x, i):
        return ops.add(load_buf0(i), load_x(i))

    s = _hand_built(same)
    assert len(s.nodes) == 1 and isinstance(s.nodes[0], FusedSchedulerNode)


def test_different_devices_are_refused():
    def same(load_buf0, load_x, i):
        return ops.add(load_buf0(i), load_x(i))

    s = _hand_built(same, second_device=torch.device("meta"))
    assert s.can_fuse(*s.nodes) == (False, "different devices: cpu vs meta")


# --- fusion rules ---------------------------------------------------------------------


def test_registered_fusion_rule_can_refuse_with_its_reason():
    def no_more_than_two(a, b):
        if len(a.snodes) + len(b.snodes) > 2:
            return f"would make {len(a.snodes) + len(b.snodes)} nodes"
        return None

    assert register_fusion_rule(no_more_than_two) is no_more_than_two
    try:
        s = schedule(_three_outputs, torch.randn(5, 6))
    finally:
        fusion_rules.remove(no_more_than_two)
    assert len(s.nodes) == 2
    assert sorted(len(n.snodes) for n in s.nodes) == [1, 2]
    assert any(line.endswith(": would make 3 nodes") for line in s.fusion_log)
    assert no_more_than_two not in fusion_rules
    assert len(schedule(_three_outputs, torch.randn(5, 6)).nodes) == 1  # rule gone


@pytest.mark.usefixtures("cumsum_falls_back")
def test_fusion_rule_sees_only_legal_pairs():
    seen = []

    def spy(a, b):
        seen.append((a.get_name(), b.get_name()))
        return None

    register_fusion_rule(spy)
    try:
        s = schedule(lambda x: (torch.cumsum(x.sin(), 0).cos(),), torch.randn(5, 6))
    finally:
        fusion_rules.remove(spy)
    assert seen == []  # every pair involves the extern kernel, refused before rules
    assert len(s.nodes) == 3


# --- dead code ------------------------------------------------------------------------


def test_dead_code_elimination_reaches_a_fixed_point(restore_config):
    config.inline_opcount_limit = 0  # realize every value, used or not

    def f(x):
        t = x.sin()
        t.cos()  # dead, and makes t dead
        return (x * 2,)

    s = schedule(f, torch.randn(5))
    assert [b.name for b in s.graph.buffers] == ["buf0", "buf1", "buf2"]
    assert s.fusion_log[:2] == ["removed buf1: no users", "removed buf0: no users"]
    assert [n.get_name() for n in s.nodes] == ["buf2"]


def test_dead_code_elimination_keeps_fallbacks():
    s = schedule(lambda x: (torch.sort(x, 1)[0] + 1,), torch.randn(4, 5))
    names = [n.get_name() for n in s.nodes]
    # the sort (buf0) stays; its unused indices (buf2) are never picked out of its result
    assert names == ["buf0", "buf1", "buf3"]
    assert s.fusion_log.count("removed buf2: no users") == 1
    assert not any("buf0" in line for line in s.fusion_log if line.startswith("removed"))


def test_distant_siblings_stay_apart_when_fusing_would_hold_memory(restore_config):
    """Each layer sums its matmul's result over the batch, masked by one shared mask.
    Fused into one kernel after the last layer, the four sums would hold every layer's
    2 MiB result until the end: refused, with the reason logged. With the check off
    (a huge factor), the same graph fuses them."""

    def f(x, w, mask):
        sums = []
        for _ in range(4):
            g = torch.bmm(x, w)
            x = torch.softmax(g, -1)  # rows: another loop, so g's readers cannot merge
            sums.append(torch.where(mask, g, 0.0).sum(0))
        return x, *sums

    torch.manual_seed(0)
    args = (torch.randn(8, 256, 256), torch.randn(8, 256, 256), torch.rand(256) > 0.5)

    def batch_sums(sched):
        nodes = [n for n in sched.nodes if not n.is_extern()]
        return [n for n in nodes if (n.group.numel, n.group.rnumel) == (65536, 8)]

    sched = schedule(f, *args)
    assert [len(n.snodes) for n in batch_sums(sched)] == [1, 1, 1, 1], sched.fusion_log
    assert any("bytes longer" in line for line in sched.fusion_log)
    # each sum runs in its own layer (after its matmul and softmax, before the next
    # matmul), so its g is freed there
    order = [n.get_name() for n in sched.nodes]
    kinds = ["extern" if n.is_extern() else "sum" for n in sched.nodes]
    assert kinds == ["extern", "extern", "sum"] * 4, order
    config.fusion_memory_factor = 10**12
    fused = schedule(f, *args)
    assert len(batch_sums(fused)) < 4, fused.fusion_log


def test_a_fusion_that_makes_a_kernel_loop_checks_every_member(restore_config):
    # MobileViT's layer norm: h = a + b read with a stride (an unfolded patch), its
    # row sums, and h minus them. The sums and their reader fuse first, a persistent
    # kernel; h then joins, and its strided read makes the rows an outer reduction,
    # which loops (96 > outer_persistent_limit): the reader inside the loop would
    # read the sums before the loop has made them
    def f(a, b):
        h = a + b.permute(0, 2, 1).reshape(-1, 96)
        return h, h - h.sum(1, keepdim=True)

    config.max_fusion_size = 1  # no fusion yet: we fuse by hand, in MobileViT's order
    config.realize_reads_threshold = 1  # h in memory, as MobileViT's is
    s = schedule(f, torch.randn(8, 96), torch.randn(2, 96, 4))
    config.max_fusion_size = 64
    h, sums, centred = s.nodes
    assert sums.is_reduction() and is_persistent(sums)
    assert s.can_fuse(h, sums)[0]  # alone, the sums may loop: nothing reads them early
    stats = FusedSchedulerNode.fuse(*s.align(sums, centred), s.order)
    assert is_persistent(stats)
    s.nodes = s._topological_sort([h, stats])
    s._ancestors_cache = s._ancestors()
    split_h, _ = s.align(h, stats)  # h on the rows' loops
    assert not is_persistent(FusedSchedulerNode(split_h.snodes + stats.snodes))
    assert s.can_fuse(h, stats) == (
        False,
        "buf2 reads buf1 inside the loop, "
        "but a looped kernel has it only after its loop",
    )


def ancestor_sets(scheduler, ancestors) -> dict[str, set[str]]:
    """Each node's ancestors by name, from the masks over scheduler.bit."""
    bits = scheduler.bit
    return {n: {m for m in bits if found & bits[m]} for n, found in ancestors.items()}


def test_ancestor_masks_kept_through_each_fusion_match_a_recount(monkeypatch):
    # the fusion loop updates each node's ancestors in place, fusion by fusion; after
    # every fusion they must equal a recount over the fused graph. The horizontal
    # fusions of independent statistics give new ancestors to later nodes, the case
    # an in-place update must get right
    merge, recounts = Scheduler._merge_ancestors, []

    def merge_and_recount(self, a, b, fused):
        merge(self, a, b, fused)
        fresh = copy.copy(self)  # its own masks and producers, the same nodes
        fresh.nodes = self._topological_sort(self.nodes)
        assert ancestor_sets(self, self._ancestors_cache) == ancestor_sets(
            fresh, fresh._ancestors()
        )
        recounts.append(fused.get_name())

    monkeypatch.setattr(Scheduler, "_merge_ancestors", merge_and_recount)

    def f(x, w, b):
        for k in range(4):
            y = x * w[k] + b[k]
            m = y.mean(1, keepdim=True)
            v = ((y - m) ** 2).mean(1, keepdim=True)
            x = torch.relu((y - m) * torch.rsqrt(v + 1e-5)) + x
        return x, v.sum()

    args = torch.randn(7, 33), torch.randn(4, 33), torch.randn(4, 33)
    gm = make_fx(f, decomposition_table=decomposition_table())(*args)
    s = Scheduler(GraphLowering(gm, list(args)).lower())
    assert len(recounts) >= 10, s.fusion_log
    assert len(s.nodes) < 12


def test_a_fusion_gives_its_descendants_the_ancestors_of_both_members(restore_config):
    # a and b are sibling sums (both read z); only b depends on c. Once they are one
    # kernel, d and e (which follow a) run after c too: a path from c to e exists
    def f(z, u):
        c = u.sum(0)
        a, b = z.sum(0), (z * c).sum(0)
        d = a.sum()
        return c, b, d * 2

    config.max_fusion_size = 1  # no fusion: we fuse a and b by hand
    s = schedule(f, torch.randn(7, 33), torch.randn(5, 33))
    config.max_fusion_size = 64
    c, a, b, d, e = s.nodes
    assert s._path_between(c, e) is None
    fused = FusedSchedulerNode.fuse(*s.align(a, b), s.order)
    s._merge_ancestors(a, b, fused)
    s.nodes = s._topological_sort([c, fused, d, e])
    ancestors, bits = s._ancestors_cache, s.bit
    assert ancestors[e.get_name()] & bits[c.get_name()]
    assert s._path_between(c, e) == d.get_name()
    recount = copy.copy(s)
    assert ancestor_sets(s, ancestors) == ancestor_sets(recount, recount._ancestors())
