"""Chapter 23: graphs split around ops a CUDA graph cannot hold, the rest recorded.

The plan (which node goes in which piece) is checked on traced graphs; a split graph is
run against eager on this machine's device: on a CPU with chapter 22's stand-in
recorder, which stands for a GPU (so CPU tensors count as recordable there, and the ops
left outside are the ones that need the host); on a GPU, with real CUDA graphs, where a
CPU op in a GPU graph is left outside too. Tests marked cuda need a GPU.
"""

import logging

import pytest
import torch
from helpers import said
from torch._inductor import cudagraph_trees
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (registers the backend)
from minductor import partition
from minductor.capture import GraphKind, graph_splitters
from minductor.cudagraphs import RECORDERS, CUDAGraphed, SimulatedRecording
from minductor.partition import SplitGraph, plan_pieces, why_outside
from minductor.runtime import interpret_mode

pytestmark = pytest.mark.ch23
DEVICE = "cpu" if interpret_mode() else "cuda"


@pytest.fixture
def stand_in(monkeypatch):
    """The CPU recorder registered where there is no GPU."""
    if DEVICE == "cpu":
        monkeypatch.setitem(RECORDERS, "cpu", SimulatedRecording)


@pytest.fixture
def splits(stand_in):
    """Every SplitGraph made during the test."""
    found = []

    def spy(info):
        made = partition.split_for_cudagraphs(info)
        if made is not None:
            found.append(made)
        return made

    torch._dynamo.reset()
    dynamic = torch._dynamo.config.patch(
        capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True
    )
    # the spy takes the place of chapter 23's splitter, by its name
    with graph_splitters.using(spy, chapter=23, name="split_for_cudagraphs"), dynamic:
        yield found
    cudagraph_trees.MarkStepBox.mark_step_counter = 0
    torch._dynamo.reset()


def _plan(fn, *inputs):
    gm = make_fx(fn, tracing_mode="symbolic")(*inputs)
    return gm, plan_pieces(gm)


def _names(nodes):
    return [n.name for n in nodes]


# ---- the plan, on traced graphs -----------------------------------------------------


def picks(x):
    y = torch.sin(x) * 2
    where = torch.nonzero(y > 0)
    return torch.cos(y) + 1, where


def test_a_node_that_does_not_read_the_outside_op_stays_in_the_first_piece(stand_in):
    _, pieces = _plan(picks, torch.randn(8, 16))
    assert [p.reason is None for p in pieces] == [True, False]
    assert _names(pieces[0].nodes) == ["sin", "mul", "gt", "cos", "add"]
    assert _names(pieces[0].inputs) == ["x_1"]
    assert _names(pieces[0].outputs) == ["gt", "add"]  # nonzero reads gt; add: output
    assert _names(pieces[1].nodes) == ["nonzero"]
    assert "aten.nonzero" in pieces[1].reason


def leading(x):
    where = torch.nonzero(x)  # reads only an input
    counted = where.float().sum()  # a size from the data: recorded once per count
    return x.sin() * 2 + counted


def test_an_outside_node_that_reads_no_recorded_value_runs_first(stand_in):
    _, pieces = _plan(leading, torch.randn(6))
    assert [p.reason is None for p in pieces] == [False, True]  # one recording
    assert _names(pieces[0].nodes) == ["nonzero"]
    assert {"sin", "mul", "sum_1", "add"} <= set(_names(pieces[1].nodes))


def chain(x, w):
    n = (x > 0).sum().item()  # a number on the host
    h = torch.tanh(x @ w)  # does not need it
    return h * n + 1, h.sum()


def test_levels_follow_what_a_node_reads(stand_in):
    gm, pieces = _plan(chain, torch.randn(8, 16), torch.randn(16, 4))
    where = {n: k for k, p in enumerate(pieces) for n in p.nodes}
    for node in where:  # every value is made before it is read
        for p in node.all_input_nodes:
            assert p not in where or where[p] < where[node] or (
                where[p] == where[node]
                and pieces[where[p]].nodes.index(p) < pieces[where[p]].nodes.index(node)
            )
    assert [p.reason is None for p in pieces] == [True, False, True]
    assert {"mm", "tanh", "sum_2"} <= set(_names(pieces[0].nodes))
    assert "_local_scalar_dense" in _names(pieces[1].nodes)
    assert "mul" in _names(pieces[1].nodes)  # it reads the number: outside too
    assert _names(pieces[2].nodes) == ["add"]  # reads mul, made outside


def test_a_piece_that_launches_nothing_runs_outside(stand_in):
    def f(x):
        i = torch.nonzero(x > 0)
        return i.t(), x.sin()

    _, pieces = _plan(f, torch.randn(4, 4))
    assert [p.reason for p in pieces][:1] == [None]
    views = [p for p in pieces if "t" in _names(p.nodes)]
    assert len(views) == 1 and views[0].reason.startswith("launches nothing")


def test_why_outside_each_reason(stand_in):
    gm, _ = _plan(chain, torch.randn(8, 16), torch.randn(16, 4))
    reasons = {n.name: why_outside(n) for n in gm.graph.nodes}
    assert reasons["mm"] is None and reasons["x_1"] is None
    assert "_local_scalar_dense" in reasons["_local_scalar_dense"]
    assert "reads a number computed from the data" in reasons["mul"]
    with pytest.MonkeyPatch.context() as m:  # a CPU without a recorder: CPU ops
        m.delitem(RECORDERS, "cpu", raising=False)
        mm = next(n for n in gm.graph.nodes if n.name == "mm")
        assert "cpu tensors" in why_outside(mm)


def bumped(x, buf):
    k = (x > 0).sum().item()  # outside
    y = buf * k  # reads the old buf and the number: outside
    buf.add_(1)  # a write: after every reader of the old value
    return y + x.sum()


def test_a_write_waits_for_the_readers_of_the_old_value(stand_in):
    _, pieces = _plan(bumped, torch.randn(5), torch.randn(5))
    where = {n.name: k for k, p in enumerate(pieces) for n in p.nodes}
    assert where["add_"] > where["mul"]  # by data alone add_ would join the first piece
    assert pieces[where["add_"]].reason is None


def test_a_split_graph_that_writes_into_its_input(splits):
    compiled = torch.compile(bumped, backend="minductor", mode="reduce-overhead")
    buf, want_buf = torch.zeros(5, device=DEVICE), torch.zeros(5, device=DEVICE)
    for _ in range(4):
        x = torch.randn(5, device=DEVICE)
        torch.testing.assert_close(compiled(x, buf), bumped(x, want_buf))
        torch.testing.assert_close(buf, want_buf)
    assert len(splits) == 1


def test_split_graph_drops_a_value_after_its_last_reader(stand_in):
    gm, pieces = _plan(chain, torch.randn(8, 16), torch.randn(16, 4))
    inputs = list(gm.graph.find_nodes(op="placeholder"))
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outputs = list(output.args[0])
    runs = [(None, p) for p in pieces]
    split = SplitGraph(runs, inputs, {}, outputs, None, GraphKind.INFERENCE)
    dropped = [_names(dead) for _, _, _, dead in split.steps]
    assert "tanh" in dropped[1]  # read last by mul, outside
    assert "x_1" in dropped[0] and "w_1" in dropped[0]
    for dead in dropped:
        assert not set(dead) & set(_names(outputs))


# ---- split graphs run against eager -------------------------------------------------


def test_nonzero_splits_and_the_rest_replays(splits, caplog):
    compiled = torch.compile(picks, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="minductor"):
        for _ in range(4):
            x = torch.randn(5, 7, device=DEVICE)
            got, want = compiled(x), picks(x)
            torch.testing.assert_close(got[0], want[0])
            assert torch.equal(got[1], want[1])  # a different count each call
    (split,) = splits
    (graphed,) = [run.__self__ for run, *_ in split.steps if hasattr(run, "__self__")]
    assert isinstance(graphed, CUDAGraphed) and len(graphed.recordings) == 1
    # Dynamo's graph checks the count on the host too: those checks are outside
    assert said(caplog, "pieces, 1 recorded; outside: aten.nonzero") == 1
    assert said(caplog, "recording inference of function") == 1


def test_a_number_from_item_is_read_outside(splits, caplog):
    compiled = torch.compile(chain, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="minductor"):
        for _ in range(4):
            x, w = torch.randn(6, 5, device=DEVICE), torch.randn(5, 3, device=DEVICE)
            for got, want in zip(compiled(x, w), chain(x, w)):
                torch.testing.assert_close(got, want)
    assert len(splits) == 1
    assert said(caplog, "_local_scalar_dense") >= 1


def test_pieces_record_in_the_order_they_run(splits, caplog):
    """The second recorded piece reads the first's output and a value made outside:
    both record in the same call, so every later call replays both."""

    def f(x, w):
        n = (x > 0).sum().item()
        h = torch.tanh(x @ w)
        return h * n + h

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        for _ in range(5):
            x, w = torch.randn(6, 5, device=DEVICE), torch.randn(5, 3, device=DEVICE)
            torch.testing.assert_close(compiled(x, w), f(x, w))
    (split,) = splits
    graphed = [run.__self__ for run, *_ in split.steps if hasattr(run, "__self__")]
    assert len(graphed) == 2 and all(len(g.recordings) == 1 for g in graphed)
    assert said(caplog, "plain launches") == 0
    assert said(caplog, "replay of inference") == 2 * 3  # calls 3 to 5, both pieces


def test_after_a_data_dependent_size_the_piece_runs_with_aten(splits, caplog):
    def f(x):
        where = torch.nonzero(x > 0)
        return x.sin() * 2, x[where[:, 0], where[:, 1]].sum()

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="minductor"):
        for _ in range(3):
            x = torch.randn(5, 7, device=DEVICE)
            for got, want in zip(compiled(x), f(x)):
                torch.testing.assert_close(got, want)
    assert said(caplog, "an input's size depends on the data") == 1
    assert said(caplog, "piece 2: the graph runs with ATen") == 1


def test_training_through_a_split_forward(splits):
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8, device=DEVICE)

    def loss_fn(x):
        h = torch.tanh(lin(x))
        return h.pow(2).mean(), torch.nonzero(h > 0)

    compiled = torch.compile(loss_fn, backend="minductor", mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(4, 16, device=DEVICE)
        lin.weight.grad = None
        loss, where = compiled(x)
        loss.backward()
        got = lin.weight.grad
        lin.weight.grad = None
        want_loss, want_where = loss_fn(x)
        want_loss.backward()
        torch.testing.assert_close(loss, want_loss)
        torch.testing.assert_close(got, lin.weight.grad)
        assert torch.equal(where, want_where)
    assert [s.kind for s in splits] == ["forward"]


def test_without_splitting_the_whole_graph_is_skipped(splits, caplog):
    options = {"cudagraphs": True, "cudagraph_split": False}
    compiled = torch.compile(picks, backend="minductor", options=options)
    with caplog.at_level(logging.INFO, logger="minductor"):
        x = torch.randn(5, 7, device=DEVICE)
        for got, want in zip(compiled(x), picks(x)):
            torch.testing.assert_close(got, want)
    assert splits == []
    assert said(caplog, "skipping the inference of function") == 1


# ---- on a GPU only: CPU ops in a GPU graph ------------------------------------------


@pytest.mark.cuda
def test_cuda_a_cpu_input_moved_in_the_graph_is_outside(splits, caplog):
    def f(x, offsets):
        return offsets.to(x.device) - x, (x * 2).sum()

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="minductor"):
        for _ in range(4):
            x = torch.randint(0, 100, (33,), device="cuda")
            offsets = torch.randint(0, 100, (33,))  # on the CPU, new every call
            for got, want in zip(compiled(x, offsets), f(x, offsets)):
                torch.testing.assert_close(got, want)
    (split,) = splits  # the copy first, then all the GPU work in one recording
    graphed = [run.__self__ for run, *_ in split.steps if hasattr(run, "__self__")]
    assert [len(g.recordings) for g in graphed] == [1]
    assert said(caplog, "cpu tensors") >= 1


@pytest.mark.cuda
def test_cuda_a_value_read_on_the_cpu_mid_graph(splits):
    def f(x):
        y = torch.sin(x)
        on_host = y.cpu() * 3  # a CPU op between GPU work
        return torch.cos(y) + on_host.to(x.device), on_host

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(17, 9, device="cuda")
        got, want = compiled(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        assert got[1].device.type == "cpu"
    (split,) = splits
    assert sum(hasattr(run, "__self__") for run, *_ in split.steps) == 2
