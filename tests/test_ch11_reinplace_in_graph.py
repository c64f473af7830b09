"""Chapter 11: scatters into values the graph made are written in place.

A chain of functional scatters (`r2 = index_put(r1, ...)`) copies the whole tensor at
every link unless each link writes into the memory of the one before. The pass decides
on the ATen graph (`why_not_reinplace_in_graph`), the lowering on the values
(`own_memory`); both are compared with eager on graphs where they must refuse.
"""

import pytest
import torch
from helpers import DEVICES
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import indexing
from minductor.capture import compile_fx, record_compiled
from minductor.config import config
from minductor.indexing import reinplace_inplaceable_ops, why_not_reinplace_in_graph
from minductor.lowering import lowerings

pytestmark = pytest.mark.ch11
aten = torch.ops.aten


def compiled_call(fn, *args, options=None):
    """Compile fn with minductor, compare with eager; the `call` body and its launches."""
    torch._dynamo.reset()
    expected = fn(*torch.utils._pytree.tree_map(torch.clone, args))
    with config.patch(options or {}), record_compiled() as graphs:
        got = torch.compile(fn, backend="minductor")(*args)
    torch.testing.assert_close(got, expected)
    source = graphs[-1].source
    body = source[source.index("def call") : source.index("def benchmark")]
    return body, [line.strip() for line in body.splitlines() if "launch_" in line]


def fill_rows(x, positions, rows):
    out = x.clone()
    for i in range(rows.shape[0]):
        out.index_put_((positions[i : i + 1],), rows[i : i + 1])
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("steps", [1, 2, 5])
def test_a_chain_of_scatters_copies_once(device, steps):
    x = torch.randn(37, 9, device=device)
    rows = torch.randn(steps, 9, device=device)
    positions = torch.randperm(37, device=device)[:steps]
    _, on = compiled_call(fill_rows, x, positions, rows)
    _, off = compiled_call(
        fill_rows, x, positions, rows, options={"reinplace_inplaceable_ops": False}
    )
    assert len(on) == 1 + steps and sum("clone" in k for k in on) == 1, on
    assert sum("clone" in k for k in off) == steps, off  # a copy per link


def add_twice(table, a, b, grads):
    # two lookups' gradients summed into one table, then read
    t = table * 3
    t = t.index_put((a,), grads[0], accumulate=True)
    t = t.index_put((b,), grads[1], accumulate=True)
    return t.sum(0), t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_accumulating_chain_with_repeated_positions(device, dtype):
    table = torch.arange(33 * 5, device=device).reshape(33, 5).to(dtype)
    a = torch.tensor([3, 3, 0, 32], device=device)
    b = torch.tensor([32, 7, 3], device=device)
    grads = [
        torch.arange(20, device=device).reshape(4, 5).to(dtype),
        torch.ones(3, 5, device=device, dtype=dtype),
    ]
    _, launches = compiled_call(add_twice, table, a, b, grads)
    assert not any("clone" in k for k in launches), launches  # `table * 3` is ours


def read_between(x, positions, rows):
    out = x * 2
    out = out.index_put((positions[:1],), rows[:1])
    total, scaled = out.sum(), out * 3  # read between the links: the first write only
    out = out.index_put((positions[1:],), rows[1:])
    return total, scaled + out  # one kernel reads scaled's body after the second write


@pytest.mark.parametrize("device", DEVICES)
def test_a_read_between_links_sees_the_value_of_its_moment(device):
    x, rows = torch.randn(8, 3, device=device), torch.randn(2, 3, device=device)
    positions = torch.tensor([6, 1], device=device)
    compiled_call(read_between, x, positions, rows)


# ---- the decision on the ATen graph, across the edge of each condition -------------


def _scatters(gm):
    return [n for n in gm.graph.nodes if n.target is aten.index_put.default]


def _why(fn, *args):
    gm = make_fx(fn)(*args)
    return [why_not_reinplace_in_graph(r) for r in _scatters(gm)]


X, IDX, V = torch.randn(6, 4), torch.tensor([4, 1]), torch.ones(2, 4)


def test_a_computed_value_read_by_nothing_after_is_written_in_place():
    assert _why(lambda x, i, v: aten.index_put(x * 2, [i], v), X, IDX, V) == [None]


def test_a_graph_input_is_not_the_graphs_memory():
    (why,) = _why(lambda x, i, v: aten.index_put(x, [i], v), X, IDX, V)
    assert "is not the graph's" in why


def test_a_value_read_after_the_scatter_keeps_its_copy():
    def late(x, i, v):
        y = x * 2
        r = aten.index_put(y, [i], v)
        return r, y.sum()

    (why,) = _why(late, X, IDX, V)
    assert "reads mul after" in why


def test_a_view_is_refused_and_so_is_a_view_of_an_input():
    i, v = torch.tensor([3, 1]), torch.ones(2, 6)
    (why,) = _why(lambda x, i, v: aten.index_put((x * 2).t(), [i], v), X, i, v)
    assert "is a view of" in why
    (why,) = _why(lambda x, i, v: aten.index_put(x.t(), [i], v), X, i, v)
    assert "is not the graph's" in why  # its memory is the input's


def test_a_half_precision_sum_is_refused():
    x, v = X.half(), V.half()
    (why,) = _why(lambda x, i, v: aten.index_put(x * 2, [i], v, True), x, IDX, v)
    assert "sums torch.float16" in why
    (ok,) = _why(lambda x, i, v: aten.index_put(x * 2, [i], v, True), X, IDX, V)
    assert ok is None  # float32 sums in place


def test_the_pass_links_a_chain_in_order():
    gm = make_fx(fill_rows)(torch.randn(8, 3), torch.tensor([5, 2, 7]), torch.ones(3, 3))
    reinplace_inplaceable_ops(gm)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.index_put_.default) == 3
    assert aten.index_put.default not in targets


# ---- the decision on the values: a lowering that hands back its input -------------


@pytest.fixture
def to_copy_is_identity():
    """A stand-in lowering that returns its input's value for a conversion to the same
    dtype: two ATen nodes then share one value, which the ATen graph cannot see."""
    saved = lowerings[aten._to_copy.default]
    lowerings[aten._to_copy.default] = lambda x, **kwargs: x
    try:
        yield
    finally:
        lowerings[aten._to_copy.default] = saved


def shared(a, idx, v):
    y = a * 2
    z = aten._to_copy.default(y, dtype=torch.float32)
    r = aten.index_put.default(z, [idx], v)
    return r, y + 1  # y read after the write into z, its value


@pytest.mark.usefixtures("to_copy_is_identity")
def test_a_value_another_node_still_reads_is_copied_not_written():
    a, idx, v = torch.randn(8, 4), torch.tensor([1, 5]), torch.randn(2, 4)
    gm = make_fx(shared)(a, idx, v)
    (r,) = _scatters(gm)
    assert why_not_reinplace_in_graph(r) is None  # the ATen graph sees no sharing
    seen = []
    real = indexing.own_memory

    def spy(graph, x, node):
        seen.append(real(graph, x, node))
        return seen[-1]

    indexing.own_memory = spy
    try:
        got = compile_fx(gm, [a, idx, v])([a, idx, v])
    finally:
        indexing.own_memory = real
    assert seen == [None]  # the value is mul's too: written into a copy
    for g, w in zip(got, shared(a, idx, v)):
        torch.testing.assert_close(g, w)
