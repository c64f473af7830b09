"""Reinplacing (chapter 11): a scatter into a graph input that the graph copies back is
written into the input itself, with no copy of the input and no copy back.

Each compiled function is compared with eager (its outputs, and every input after the
call), and the wrapper is read: the kernels it launches, and the buffers it allocates
of the cache's size (none, when the pass applies). Each condition of the pass has a case
that breaks it and keeps the old path, still correct.
"""

import logging
import re

import pytest
import torch
from helpers import DEVICES
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import compile_fx, record_compiled
from minductor.harness.decoding import Transformer, generate
from minductor.indexing import reinplace_inplaceable_ops, why_not_reinplace

pytestmark = [pytest.mark.e2e, pytest.mark.ch11]
aten = torch.ops.aten


def compile_and_compare(fn, *args, atol=1e-5, rtol=1e-5, **options):
    """fn compiled on args and eager on copies: outputs and inputs after the call
    agree. Returns the one compiled graph."""
    torch._dynamo.reset()
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor", options=options or None)(*args)
    expected = fn(*copies)
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
    for a, c in zip(args, copies, strict=True):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, c, atol=atol, rtol=rtol)  # mutated alike
    (graph,) = graphs
    return graph


def call_body(graph) -> str:
    source = graph.source
    return source[source.index("def call") : source.index("def benchmark")]


def buffers_of(graph, numel: int) -> int:
    """How many buffers of numel elements the wrapper allocates."""
    found = re.findall(r"empty_strided_\w+\(\(([^)]*)\)", call_body(graph))
    sizes = [[int(n) for n in s.split(",") if n.strip()] for s in found]
    return sum(1 for size in sizes if _product(size) == numel)


def _product(size):
    out = 1
    for n in size:
        out *= n
    return out


def in_place(graph, numel: int, kernels: int) -> None:
    """The pass applied: the scatter writes the input (a reuse of arg0_1's memory),
    nothing of the input's size is allocated, and the kernels are as many as said."""
    assert graph.fallbacks == []
    assert "= arg0_1  # reuse" in call_body(graph)
    assert buffers_of(graph, numel) == 0
    assert len(graph.kernel_names) == kernels, graph.kernel_names


def launches(graph) -> int:
    return len(re.findall(r"launch_\w+\(", call_body(graph)))


def old_path(graph, numel: int) -> None:
    """The pass refused: a copy of the input, scattered into, then copied back (the
    copy back may share a kernel with a reader of the result)."""
    assert buffers_of(graph, numel) >= 1
    assert launches(graph) >= 3


def write(cache, pos, k):
    cache.index_copy_(2, pos, k)
    return cache.sum(-1)


# ---------------------------------------------------------------- the patterns


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 3, 17, 5), (3, 2, 9, 7)])
@pytest.mark.parametrize("where", ["first", "middle", "last", "several"])
def test_index_copy_into_a_cache(shape, where, device):
    B, H, T, D = shape
    positions = {"first": [0], "middle": [T // 2], "last": [T - 1], "several": [2, 5]}
    pos = torch.tensor(positions[where], device=device)
    cache = torch.randn(shape, device=device)
    k = torch.randn(B, H, len(pos), D, device=device)
    graph = compile_and_compare(write, cache, pos, k)
    in_place(graph, cache.numel(), kernels=2)  # the scatter, the sum


@pytest.mark.parametrize("device", DEVICES)
def test_setitem_at_a_tensor_position(device):
    def f(cache, pos, k):
        cache[:, :, pos] = k
        return cache.amax(-1)

    cache = torch.randn(3, 2, 11, 3, device=device)
    pos = torch.tensor([10], device=device)
    graph = compile_and_compare(f, cache, pos, torch.randn(3, 2, 1, 3, device=device))
    in_place(graph, cache.numel(), kernels=2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.int64, torch.bool, torch.float16], ids=str
)
def test_setitem_rows_of_each_dtype(dtype, device):
    def f(x, idx, v):
        x[idx] = v
        return x.sum(0) if dtype != torch.bool else x.any(0)

    x = (torch.randn(7, 5, device=device) * 4).to(dtype)
    v = (torch.randn(3, 5, device=device) * 4).to(dtype)
    idx = torch.tensor([6, 0, 3], device=device)
    graph = compile_and_compare(f, x, idx, v, atol=1e-3, rtol=1e-3)
    in_place(graph, x.numel(), kernels=2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_accumulating_index_put_with_repeated_positions(dtype, device):
    def f(x, idx, v):
        x.index_put_((idx,), v, accumulate=True)
        return x.sum(1)

    x = (torch.randn(6, 4, device=device) * 4).to(dtype)
    v = (torch.randn(5, 4, device=device) * 4).to(dtype)
    idx = torch.tensor([1, 4, 1, 1, 0], device=device)
    graph = compile_and_compare(f, x, idx, v)
    in_place(graph, x.numel(), kernels=2)
    assert "atomic_add" in graph.source


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_and_scatter_add_into_an_input(device):
    def f(x, idx, src):
        x.scatter_(1, idx, src)
        return x.sum()

    def g(x, idx, src):
        x.scatter_add_(0, idx, src)
        return x.sum()

    x = torch.randn(4, 6, device=device)
    perm = torch.stack([torch.randperm(6, device=device)[:3] for _ in range(4)])
    graph = compile_and_compare(f, x, perm, torch.randn(4, 3, device=device))
    in_place(graph, x.numel(), kernels=2)
    idx = torch.tensor([[0, 3, 3, 1, 0, 2]] * 2, device=device)
    graph = compile_and_compare(g, x, idx, torch.randn(2, 6, device=device))
    in_place(graph, x.numel(), kernels=2)


@pytest.mark.parametrize("device", DEVICES)
def test_a_transposed_cache_is_written_through_its_strides(device):
    base = torch.randn(2, 9, 3, 4, device=device)  # (B, T, H, D)
    expected = base.clone()
    pos, k = torch.tensor([4], device=device), torch.randn(2, 3, 1, 4, device=device)
    write(expected.transpose(1, 2), pos, k)
    graph = compile_and_compare(write, base.transpose(1, 2), pos, k)
    in_place(graph, base.numel(), kernels=2)
    torch._dynamo.reset()
    torch.compile(write, backend="minductor")(base.transpose(1, 2), pos, k)
    assert torch.equal(base, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 1, 5, 1)])
def test_caches_of_size_one_dimensions(shape, device):
    cache = torch.randn(shape, device=device)
    pos = torch.tensor([shape[2] - 1], device=device)
    k = torch.randn(*shape[:2], 1, shape[3], device=device)
    graph = compile_and_compare(write, cache, pos, k)
    assert "= arg0_1  # reuse" in call_body(graph) and graph.fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_returning_the_mutated_input_returns_the_input(device):
    def f(cache, pos, k):
        return cache.index_copy_(2, pos, k)

    cache = torch.randn(2, 2, 6, 3, device=device)
    pos, k = torch.tensor([1], device=device), torch.randn(2, 2, 1, 3, device=device)
    graph = compile_and_compare(f, cache.clone(), pos, k)
    in_place(graph, cache.numel(), kernels=1)
    torch._dynamo.reset()
    out = torch.compile(f, backend="minductor")(cache, pos, k)
    assert out.data_ptr() == cache.data_ptr()


# ----------------------------------------------- reads of the input before the write


@pytest.mark.parametrize("device", DEVICES)
def test_a_reduction_of_the_old_input_runs_before_the_write(device):
    def f(x, pos, k):
        y = x.sum()  # the old x
        x.index_copy_(2, pos, k)
        return y + x.sum()  # the new x: the scatter's result

    x = torch.randn(2, 3, 8, 4, device=device)
    pos, k = torch.tensor([3], device=device), torch.randn(2, 3, 1, 4, device=device)
    graph = compile_and_compare(f, x, pos, k)
    in_place(graph, x.numel(), kernels=3)


@pytest.mark.parametrize("device", DEVICES)
def test_a_pending_body_reading_the_old_input_is_stored_first(device):
    """y = x * 2 would be inlined into its reader after the write, and read the new
    x there: the in-place lowering stores it before the write."""

    def f(x, pos, k):
        y = x * 2
        x.index_copy_(2, pos, k)
        return y + x

    x = torch.randn(2, 3, 8, 4, device=device)
    pos, k = torch.tensor([3], device=device), torch.randn(2, 3, 1, 4, device=device)
    graph = compile_and_compare(f, x, pos, k)
    body = call_body(graph)
    assert "= arg0_1  # reuse" in body
    assert body.index("fused_mul_0(arg0_1") < body.index("fused_index_put_1(")
    assert buffers_of(graph, x.numel()) == 1  # y, then the output written over it


@pytest.mark.parametrize("device", DEVICES)
def test_values_computed_from_the_input_are_stored_first(device):
    def f(x, pos, k):
        x.index_copy_(2, pos, x[:, :, 1:2] * 2 + k)
        return x.sum()

    x = torch.randn(2, 3, 8, 4, device=device)
    pos, k = torch.tensor([1], device=device), torch.randn(2, 3, 1, 4, device=device)
    graph = compile_and_compare(f, x, pos, k)
    assert "= arg0_1  # reuse" in call_body(graph)
    assert buffers_of(graph, x.numel()) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_a_stored_view_of_the_old_input_is_read_before_the_write(device):
    """x.t() handed to mm is stored as a view (a ReinterpretBuffer); the add that also
    reads it must run before the write, though it never names x."""

    def f(x, w, pos, k):
        xt = x.t()
        a = xt @ w
        b = xt + 1
        x.index_copy_(0, pos, k)
        return a, b * x.t()

    x, w = torch.randn(6, 6, device=device), torch.randn(6, 6, device=device)
    pos, k = torch.tensor([2], device=device), torch.randn(1, 6, device=device)
    graph = compile_and_compare(f, x, w, pos, k)
    assert "= arg0_1  # reuse" in call_body(graph)


def test_a_copy_into_an_input_follows_the_readers_of_a_stored_view():
    """The same ordering for the plain copy_ (chapter 15's order_mutations): the add
    reading the stored x.t() ran after the copy before readers were filed by memory."""

    def f(x, w):
        xt = x.t()
        a = xt @ w
        b = xt + 1
        x.add_(1)
        return a, b * 2

    compile_and_compare(f, torch.randn(8, 8), torch.randn(8, 8))


def test_a_read_through_a_stored_view_is_not_fused_with_the_write():
    """Whether b's read of x.t() and the write of x meet at one element in one program
    depends on the loop orders chosen: a read through a view is never compared, and
    the two stay apart."""

    def f(x, w, g):
        xt = x.t()
        a = xt @ w
        b = xt * g
        x.add_(g.t())
        return a, b

    args = [torch.randn(64, 64), torch.randn(64, 8), torch.randn(64, 64)]
    graph = compile_and_compare(f, *args)
    assert any("reads arg0_1 through a view" in line for line in graph.fusion_log)


def test_a_gather_at_the_written_positions_is_not_fused_with_the_write():
    """A read of x and an accumulating write at the same indirect index: two entries
    of idx name one row, so a fused kernel's later program would read an element an
    earlier one had already added to."""

    def f(x, idx, v):
        y = x[idx] * 1
        x.index_put_((idx,), v, accumulate=True)
        return y

    idx = torch.zeros(2000, dtype=torch.int64)  # several programs
    graph = compile_and_compare(f, torch.randn(4), idx, torch.ones(2000))
    assert len(graph.kernel_names) == 2
    assert any("overwrites" in line for line in graph.fusion_log)


# ------------------------------------------------------------------- the refusals


def aten_graph(fn, *args):
    """fn traced to ATen as written, copy_ included: graphs Dynamo does not make."""
    gm = make_fx(fn)(*args)
    (copy,) = gm.graph.find_nodes(op="call_function", target=aten.copy_.default)
    return gm, copy


def compile_graph(gm, args):
    """Compile an ATen graph as the backend would, run it on args, return the result
    and the compiled graph."""
    with record_compiled() as graphs:
        compiled = compile_fx(gm, args)
        out = compiled(list(args))
    return (out[0] if len(out) == 1 else tuple(out)), graphs[0]


X, IDX, V = torch.randn(5, 3), torch.tensor([4, 1]), torch.randn(2, 3)


def read_after(x, idx, v):
    r = aten.index_put(x, [idx], v)
    y = x.sum()  # the old x, after the scatter
    x.copy_(r)
    return y + r.sum()


def r_returned(x, idx, v):
    r = aten.index_put(x, [idx], v)
    x.copy_(r)
    return r


def r_and_x_returned(x, idx, v):
    r = aten.index_put(x, [idx], v)
    out = x.copy_(r)
    return out, r[1:]


def values_a_view_of_x(x, idx):
    r = aten.index_put(x, [idx], x[0])
    x.copy_(r)
    return r.sum()


@pytest.mark.parametrize(
    "fn, args, why",
    [
        (read_after, (X, IDX, V), "reads x_1 after index_put"),
        (r_returned, (X, IDX, V), "index_put is a graph output"),
        (r_and_x_returned, (X, IDX, V), "slice_1 is a graph output"),
        (values_a_view_of_x, (X, IDX), "index_put reads a view of x_1"),
    ],
)
def test_refused_graphs_keep_the_copy_and_eagers_answer(fn, args, why):
    gm, copy = aten_graph(fn, *[a.clone() for a in args])
    reason = why_not_reinplace(copy)
    inputs = [a.clone() for a in args]
    out, graph = compile_graph(gm, inputs)
    expected_inputs = [a.clone() for a in args]
    expected = fn(*expected_inputs)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(inputs, expected_inputs)
    # the graph, after the pass, still means what it meant, run op by op
    reinplace_inplaceable_ops(gm)
    ours, theirs = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(gm(*ours), fn(*theirs))
    torch.testing.assert_close(ours, theirs)
    assert reason is not None and why in reason
    old_path(graph, args[0].numel())
    if fn in (r_returned, r_and_x_returned):  # r is a tensor of its own, not x
        returned = out if fn is r_returned else out[1]
        memory = returned.untyped_storage().data_ptr()
        assert memory != inputs[0].untyped_storage().data_ptr()


def test_a_copy_into_a_value_that_is_not_an_input_is_left_alone():
    def f(x, idx, v):
        y = x * 1
        r = aten.index_put(y, [idx], v)
        y.copy_(r)
        return y

    gm, copy = aten_graph(f, X.clone(), IDX, V)
    assert why_not_reinplace(copy) == "mul is not a graph input"


def test_a_hand_made_graph_that_qualifies_is_reinplaced():
    """read_after with the read of the old x moved before the scatter."""
    gm, copy = aten_graph(_sum_first, X.clone(), IDX, V)
    assert why_not_reinplace(copy) is None
    inputs = [X.clone(), IDX, V]
    out, graph = compile_graph(gm, inputs)
    expected_inputs = [X.clone(), IDX, V]
    torch.testing.assert_close(out, _sum_first(*expected_inputs))
    torch.testing.assert_close(inputs[0], expected_inputs[0])
    assert "= x_1  # reuse" in call_body(graph) and buffers_of(graph, X.numel()) == 0


def _sum_first(x, idx, v):
    y = x.sum()
    r = aten.index_put(x, [idx], v)
    x.copy_(r)
    return y + r.sum()


@pytest.mark.parametrize("device", DEVICES)
def test_two_writes_into_one_input_are_kept_whole(device, caplog):
    """The second index_copy_ scatters into the first's result, not into the input:
    the chain keeps its copies (decided: chains are rare in decoding, where each
    cache is written once per step)."""

    def f(cache, pos, k):
        cache.index_copy_(2, pos, k)
        cache.index_copy_(2, pos + 1, k * 2)
        return cache.sum()

    caplog.set_level(logging.DEBUG, logger="minductor")
    cache = torch.randn(2, 2, 7, 3, device=device)
    pos, k = torch.tensor([2], device=device), torch.randn(2, 2, 1, 3, device=device)
    graph = compile_and_compare(f, cache, pos, k)
    old_path(graph, cache.numel())
    assert any("scatters into index_put, not into" in r.message for r in caplog.records)


@pytest.mark.parametrize("device", DEVICES)
def test_a_write_into_a_view_of_an_input_is_kept_whole(device, caplog):
    """cache[0].index_copy_ scatters into a copy of cache[0], and select_scatter puts
    that back into cache, which is what is copied back: no scatter of cache's own."""

    def f(cache, pos, k):
        cache[0].index_copy_(1, pos, k)
        return cache.sum()

    caplog.set_level(logging.DEBUG, logger="minductor")
    cache = torch.randn(2, 3, 7, 2, device=device)
    pos, k = torch.tensor([5], device=device), torch.randn(3, 1, 2, device=device)
    compile_and_compare(f, cache, pos, k)
    said = [r.message for r in caplog.records if "reinplace" in r.message]
    assert said and "select_scatter is not a scatter with an in-place form" in said[0]


@pytest.mark.parametrize("device", DEVICES)
def test_an_input_with_gaps_is_kept_whole(device, caplog):
    """A strided slice has gaps; the scatter's result is dense, laid out otherwise."""
    caplog.set_level(logging.DEBUG, logger="minductor")
    base = torch.randn(2, 3, 12, 2, device=device)
    pos, k = torch.tensor([1], device=device), torch.randn(2, 3, 1, 2, device=device)
    expected = base.clone()
    write(expected[:, :, ::2], pos, k)
    compile_and_compare(write, base.clone()[:, :, ::2], pos, k)
    torch._dynamo.reset()
    torch.compile(write, backend="minductor")(base[:, :, ::2], pos, k)
    assert torch.equal(base, expected)
    assert any("is laid out unlike" in r.message for r in caplog.records)


def test_the_rewritten_graph_still_runs_op_by_op():
    """index_put_ writes x as the copy_ did: if the graph falls back to running op
    by op, the caller sees the same."""
    gm = make_fx(_sum_first)(X.clone(), IDX, V)
    reinplace_inplaceable_ops(gm)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.index_put_.default in targets and aten.copy_.default not in targets
    ours, theirs = [X.clone(), IDX, V], [X.clone(), IDX, V]
    torch.testing.assert_close(gm(*ours), _sum_first(*theirs))
    torch.testing.assert_close(ours[0], theirs[0])


@pytest.mark.parametrize("device", DEVICES)
def test_the_knob_turns_the_pass_off(device):
    cache = torch.randn(2, 3, 9, 4, device=device)
    pos, k = torch.tensor([7], device=device), torch.randn(2, 3, 1, 4, device=device)
    graph = compile_and_compare(write, cache, pos, k, reinplace_inplaceable_ops=False)
    old_path(graph, cache.numel())
    assert launches(graph) == 3  # the copy, the scatter, the copy back with the sum


@pytest.mark.parametrize("device", DEVICES)
def test_float16_sums_and_mask_writes_keep_their_paths(device):
    def add_rows(x, idx, v):
        x.index_put_((idx,), v, accumulate=True)
        return x.float().sum(0)

    def fill(x, mask):
        x[mask] = 0.5
        return x.sum()

    # small integers: every sum exact in float16, whatever the order of the adds
    x = torch.randint(-4, 4, (6, 4), device=device).half()
    idx = torch.tensor([2, 2, 5], device=device)
    v = torch.randint(-4, 4, (3, 4), device=device).half()
    graph = compile_and_compare(add_rows, x, idx, v)
    assert graph.fallbacks == []
    old_path(graph, x.numel())  # summed in float32: a widened copy of x
    y = torch.randn(5, 3, device=device)
    graph = compile_and_compare(fill, y, torch.rand(5, 3, device=device) > 0.5)
    assert graph.fallbacks == [] and launches(graph) == 1  # where(mask, 0.5, x)


def test_a_training_graph_that_saves_the_written_cache_is_refused(caplog):
    """The backward reads cache * w's saved factor: the scatter's result, a forward
    output. Written into the input, it would change with the input: here the cache
    is cleared before the backward (as the next step would overwrite it), and w's
    gradient must not see that."""

    def f(cache, w, pos):
        cache.index_copy_(0, pos, w.detach() * 2)
        return (cache * w).sum()

    caplog.set_level(logging.DEBUG, logger="minductor")
    results = []
    for backend, clear in (("minductor", True), ("eager", False)):
        torch._dynamo.reset()
        cache = torch.linspace(0, 1, 15).reshape(5, 3)
        w = torch.linspace(-1, 1, 3).reshape(1, 3).requires_grad_()
        out = torch.compile(f, backend=backend)(cache, w, torch.tensor([2]))
        written = cache.clone()
        if clear:
            cache.zero_()  # eager's autograd would refuse this; AOTAutograd saved r
        out.backward()
        results.append((out.detach(), written, w.grad))
    torch.testing.assert_close(results[0], results[1])
    assert any("is a graph output" in r.message for r in caplog.records)


def saves_nothing(p, w, pos, k):
    loss = (p * 3).sum()
    with torch.no_grad():
        p.index_copy_(0, pos, k)
    return loss + w.sum()


def saves_the_new_p(p, w, pos, k):
    loss = (p * 3).sum()
    with torch.no_grad():
        p.index_copy_(0, pos, k)
    return loss + (w * p).sum()  # w's gradient is the new p


@pytest.mark.parametrize(
    "fn, said",
    [(saves_nothing, "writes primals_1 in place"), (saves_the_new_p, "graph output")],
)
def test_a_parameter_written_under_no_grad_in_a_training_graph(fn, said, caplog):
    """A mutation autograd does not see stays a copy_ in the training forward, for
    an input that requires a gradient too; the output rule keeps what the backward
    saves."""
    caplog.set_level(logging.DEBUG, logger="minductor")
    results = []
    for backend in ("minductor", "eager"):
        torch._dynamo.reset()
        p = torch.linspace(-1, 1, 15).reshape(5, 3).requires_grad_()
        w = torch.linspace(0, 2, 15).reshape(5, 3).requires_grad_()
        out = torch.compile(fn, backend=backend)(
            p, w, torch.tensor([1]), torch.ones(1, 3)
        )
        out.backward()
        results.append((out.detach(), p.detach().clone(), p.grad, w.grad))
    torch.testing.assert_close(results[0], results[1])
    assert any(said in r.message for r in caplog.records if "reinplace" in r.message)


def test_an_in_place_write_that_falls_back_is_eagers(monkeypatch):
    """A lowering that declines the in-place form hands it to ATen's index_put_, which
    writes the input in place, as the copy_ did."""
    from minductor import indexing

    monkeypatch.setattr(indexing, "ATOMIC_ADD_DTYPES", ())

    def f(x, idx, v):
        x.index_put_((idx,), v, accumulate=True)
        return x * 2

    graph = compile_and_compare(f, torch.randn(5, 3), IDX, V)
    assert graph.fallbacks == ["aten.index_put_.default"]


# ------------------------------------------------------------------------ decoding


def test_a_gpt_fast_step_writes_its_caches_in_place():
    """Each layer's keys and values go into the caches themselves: the step's wrapper
    allocates nothing of a cache's size, and its tokens are eager's."""
    sizes = dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=128)
    torch.manual_seed(0)
    model = Transformer(sizes).eval()
    prompt = torch.randint(1, 128, (1, 5))
    eager = generate(model, prompt, 3)
    torch._dynamo.reset()
    step = torch.compile(
        lambda m, t, p, *rest, **kw: m(t, p)[:, -1].argmax(-1, keepdim=True),
        backend="minductor",
        fullgraph=True,
    )
    with record_compiled() as graphs:
        assert torch.equal(generate(model, prompt, 3, decode_one=step), eager)
    (graph,) = graphs
    cache = model.layers[0].self_attn.kv_cache.k
    assert buffers_of(graph, cache.numel()) == 0
    assert not any("copy_" in k for k in graph.kernel_names)
    # each cache is written where it is: its memory handed to the scatter's name
    written = re.findall(r"= arg\d+_1  # reuse", call_body(graph))
    assert len(written) == 2 * sizes["layers"]  # keys and values, per layer
    # one kernel a layer writes both, the new key's rotation computed in it
    assert len(re.findall(r"launch_\w*index_put\w*\(", call_body(graph))) == 2
