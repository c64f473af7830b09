"""Indirect indexing: gather, index_select, x[idx], embedding (reads) and the scatter
family (writes), compared with eager on awkward inputs, with the structure pinned."""

import pytest
import sympy
import torch
import torch.nn.functional as F
from helpers import DEVICES, INTERPRET, run
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import record_compiled
from minductor.config import config
from minductor.dependencies import RecordingHandler, is_indirect
from minductor.lowering import GraphLowering
from minductor.ops import (
    CountingHandler,
    EvalHandler,
    NullHandler,
    body_to_str,
    ops,
    set_handler,
)
from minductor.scheduler import Scheduler
from minductor.sizevars import index_vars, simplify_loops

pytestmark = [pytest.mark.e2e, pytest.mark.ch11]
cpu_only = pytest.mark.skipif(not INTERPRET, reason="CPU kernels need the interpreter")


def compiled_sources(fn, *args):
    """Compile and run fn once; return (result, the generated modules' sources)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    return out, "\n".join(g.source for g in graphs)


# --- the op in every handler ------------------------------------------------------


def _gather_body(index):  # out[i0, i1] = x[i0, idx[i0, i1]] with x (3, 5), idx (3, 2)
    i0, i1 = index
    column = ops.indirect_indexing(ops.load("idx", 2 * i0 + i1), 5)
    return ops.load("x", 5 * i0 + column)


def test_eval_handler_wraps_negative_and_raises_out_of_range():
    x = torch.arange(15.0).reshape(3, 5)
    one = [sympy.Integer(1), sympy.Integer(1)]
    for bad, expected in ((-1, x[1, 4]), (-5, x[1, 0]), (4, x[1, 4])):
        idx = torch.tensor([[0, 0], [0, bad], [0, 0]])
        with set_handler(EvalHandler({"x": x, "idx": idx})):
            assert _gather_body(one) == expected
    for bad in (5, -6):
        idx = torch.tensor([[0, 0], [0, bad], [0, 0]])
        with set_handler(EvalHandler({"x": x, "idx": idx})):
            with pytest.raises(IndexError, match="out of bounds for size 5"):
                _gather_body(one)
    with set_handler(EvalHandler({"x": x, "idx": torch.tensor([[-1]])})):
        with pytest.raises(IndexError):
            ops.indirect_indexing(ops.load("idx", 0), 5, True, False)


def test_print_handler_names_the_symbol_after_its_tmp():
    text = body_to_str(_gather_body, index_vars(2))
    assert "tmp1 = ops.indirect_indexing(tmp0, 5)" in text
    assert "ops.load(x, 5*i0 + tmp1)" in text


def test_null_and_counting_handlers_give_fresh_symbols():
    handler = NullHandler()
    with set_handler(handler):
        a = ops.indirect_indexing(None, 5)
        b = ops.indirect_indexing(None, 5, check=False, wrap_neg=False)
    assert a != b and {a.name, b.name} == {"indirect0", "indirect1"}
    assert (3 * a + b + 1).free_symbols == {a, b}  # usable in index arithmetic
    counter = CountingHandler()
    with set_handler(counter):
        _gather_body(index_vars(2))
    assert counter.reads == 2 and counter.count == 3


def test_recording_handler_puts_a_placeholder_in_the_dependency():
    recorder = RecordingHandler()
    with set_handler(recorder):
        _gather_body(index_vars(2))
    (_, idx_index), (name, x_index) = recorder.loads
    assert name == "x" and is_indirect(x_index) and not is_indirect(idx_index)


def test_simplify_loops_treats_the_indirect_symbol_as_a_constant():
    i0, i1 = index_vars(2)
    k = sympy.Symbol("indirect0", integer=True)
    loop = simplify_loops((4, 6), (i0, i1), [6 * i0 + i1 + 24 * k, 6 * i0 + i1])
    assert loop.sizes == (24,)
    (x0,) = loop.variables
    assert loop.rewrite(6 * i0 + i1 + 24 * k, (i0, i1)) == x0 + 24 * k


def test_gathering_from_a_realized_buffer_does_not_fuse_and_says_why():
    x, idx = torch.randn(4, 6), torch.tensor([0, 3, 3, -1])
    gm = make_fx(lambda x, i: x.sum(1)[i])(x, idx)
    scheduler = Scheduler(GraphLowering(gm, [x, idx]).lower())
    assert len(scheduler.nodes) == 2
    assert any("at an indirect index" in line for line in scheduler.fusion_log)


# --- gather, index_select, embedding, x[idx] against eager ------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_gather_then_pointwise_is_one_kernel(device):
    x = torch.randn(5, 7, device=device)
    idx = torch.randint(0, 7, (5, 3), device=device)
    kernels, fallbacks = run(lambda x, i: x.gather(1, i).sin() * 2, x, idx)
    assert kernels == ["triton_poi_fused_gather_mul_sin_0"] and fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_gather_of_a_pointwise_value_inlines_it(device):
    x = torch.randn(5, 7, device=device)
    idx = torch.randint(0, 5, (2, 7), device=device)
    kernels, fallbacks = run(lambda x, i: (x * 3 + 1).gather(0, i), x, idx)
    assert len(kernels) == 1 and fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_gather_non_contiguous_and_awkward_shapes(device):
    x = torch.randn(7, 5, device=device).t()  # (5, 7), transposed strides
    idx = torch.randint(0, 7, (5, 4), device=device)
    run(lambda x, i: x.gather(1, i), x, idx)
    base = torch.randn(6, 9, device=device)
    sliced = base[1:, ::2]  # (5, 5), offset and stride 2
    run(lambda x, i: x.gather(0, i), sliced, torch.randint(0, 5, (3, 5), device=device))
    run(lambda x, i: x.gather(1, i), x, torch.randint(0, 7, (5, 1), device=device))
    run(lambda x, i: x.gather(1, i), x, torch.randint(0, 7, (5, 0), device=device))
    run(lambda x, i: x.gather(1, i), x[:1], torch.randint(0, 7, (1, 3), device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float16])
def test_gather_and_index_of_other_dtypes(device, dtype):
    x = (torch.randn(4, 6, device=device) * 5).to(dtype)
    idx = torch.randint(0, 6, (4, 3), device=device)
    kernels, _ = run(lambda x, i: x.gather(1, i), x, idx)
    assert len(kernels) == 1
    run(lambda x, i: x[i], x, torch.tensor([3, -1, 0, 3], device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_select(device, index_dtype):
    x = torch.randn(6, 5, device=device).t()
    idx = torch.tensor([4, 0, 0, 5], device=device, dtype=index_dtype)
    kernels, fallbacks = run(lambda x, i: x.index_select(1, i) + 1, x, idx)
    assert len(kernels) == 1 and fallbacks == []
    run(lambda x, i: x.index_select(0, i), x, idx[:2].clamp(max=4))
    run(lambda x, i: x.index_select(0, i), x, idx[:0])
    run(lambda x, i: x.index_select(1, i), x, torch.tensor(2, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_embedding_then_add_is_one_kernel(device, index_dtype):
    weight = torch.randn(10, 8, device=device)
    idx = torch.tensor([[0, 9, 3], [3, 3, 1]], device=device, dtype=index_dtype)
    bias = torch.randn(8, device=device)
    kernels, fallbacks = run(lambda w, i, b: F.embedding(i, w) + b, weight, idx, bias)
    assert kernels == ["triton_poi_fused_add_embedding_0"] and fallbacks == []
    run(lambda w, i: F.embedding(i, w), weight[:, 1:], idx[:, :0])
    run(lambda w, i: F.embedding(i, w).sum(-1), weight.t(), idx[:1].clamp(max=7))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_advanced_indexing_wraps_negative_indices(device, index_dtype):
    x = torch.randn(5, 6, device=device)
    idx = torch.tensor([0, -1, 4, -5], device=device, dtype=index_dtype)
    kernels, fallbacks = run(lambda x, i: x[i], x, idx)
    assert len(kernels) == 1 and fallbacks == []
    run(lambda x, i: x[:, i] * 2, x.t(), idx)
    run(lambda x, i: x[i], x, idx[:0])
    run(lambda x, i: x[i], x[:1], idx[:2] * 0 - 1)


@pytest.mark.parametrize("device", DEVICES)
def test_advanced_indexing_places_broadcast_dims_like_eager(device):
    y = torch.randn(3, 4, 5, 6, device=device)
    i = torch.tensor([0, 2, -1], device=device)
    j = torch.tensor([[1], [-3]], device=device)  # broadcasts with i to (2, 3)
    run(lambda y, i, j: y[:, i, j], y, i, j)  # adjacent: (3, 2, 3, 6)
    run(lambda y, i, j: y[i, :, j], y, i, j)  # not adjacent: (2, 3, 4, 6)
    run(lambda y, i, j: y[:, i, :, j], y, i, j)  # not adjacent: (2, 3, 3, 5)
    run(lambda y, i, j: y[i, j], y, i, j)  # leading: (2, 3, 5, 6)
    run(lambda y, i: y[..., i], y, i)


@pytest.mark.parametrize("device", DEVICES)
def test_boolean_mask_index_is_never_lowered(device):
    x = torch.randn(5, 6, device=device)
    kernels, fallbacks = run(lambda x, m: x[m] * 2, x, x > 0)
    # Dynamo splits the graph at the data-dependent size, or the lowering declines
    assert all("index" not in k for k in kernels)
    gm = make_fx(lambda x, m: x[m])(x, x > 0)
    graph = GraphLowering(gm, [x, x > 0]).lower()
    assert graph.fallbacks == ["aten.index.Tensor"]


# --- bad indices ------------------------------------------------------------------


@cpu_only
def test_debug_indexing_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(config, "debug_indexing", True)
    x = torch.randn(4, 6)
    good = torch.tensor([[0, 1, 5], [0, 0, 0], [1, 2, 3], [5, 5, 4]])
    out, source = compiled_sources(lambda x, i: x.gather(1, i) + 1, x, good)
    torch.testing.assert_close(out, x.gather(1, good) + 1)
    assert "@triton.jit(debug=True)" in source and "tl.device_assert(" in source
    for bad in (6, -1):  # eager's gather rejects negative indices too
        idx = good.clone()
        idx[3, 1] = bad
        with pytest.raises(Exception, match="index out of bounds: tmp0 not in"):
            compiled_sources(lambda x, i: x.gather(1, i) + 1, x, idx)
    with pytest.raises(Exception, match=r"index out of bounds: .* not in \[0, 4\)"):
        compiled_sources(lambda x, i: x[i], x, torch.tensor([0, 4]))


@cpu_only
def test_without_debug_an_out_of_range_index_reads_zero_and_nothing_else():
    x = torch.randn(4, 6)
    idx = torch.tensor([[0, 1, 9], [0, 0, 0], [1, 2, 3], [5, 5, -1]])
    out, source = compiled_sources(lambda x, i: x.gather(1, i), x, idx)
    assert "tl.device_assert" not in source and "other=0" in source
    inside = (idx >= 0) & (idx < 6)
    expected = torch.where(inside, x.gather(1, idx.clamp(0, 5)), 0.0)
    torch.testing.assert_close(out, expected)


def test_kernel_source_wraps_only_where_eager_does():
    x = torch.randn(4, 6)
    idx = torch.tensor([1, -1])
    _, wrapped = compiled_sources(lambda x, i: x[:, i], x, idx)
    assert "tl.where(tmp0 < 0, tmp0 + 6, tmp0)" in wrapped
    _, plain = compiled_sources(lambda x, i: x.index_select(1, i), x, idx.abs())
    assert "tl.where(tmp0 < 0" not in plain and "(0 <= tmp0) & (tmp0 < 6)" in plain


# --- the scatter family -------------------------------------------------------------


def _unique_columns(rows, k, n, device):
    """An index of shape (rows, k) with distinct entries in [0, n) in every row."""
    return torch.stack([torch.randperm(n, device=device)[:k] for _ in range(rows)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.int64, torch.bool, torch.float16]
)
def test_scatter_src_and_value(device, dtype):
    x = (torch.randn(7, 5, device=device) * 4).to(dtype).t()  # (5, 7), transposed
    src = (torch.randn(6, 9, device=device) * 4).to(dtype)  # larger than the index
    idx = _unique_columns(5, 3, 7, device)
    kernels, fallbacks = run(lambda x, i, s: x.scatter(1, i, s), x, idx, src)
    assert len(kernels) == 2 and fallbacks == []
    fill = True if dtype == torch.bool else 3
    run(lambda x, i: x.scatter(1, i, fill), x, idx)
    run(lambda x, i, s: x.scatter(0, i, s), x, idx[:1, :].clamp(max=4), src)
    run(lambda x, i, s: x.scatter(1, i, s), x, idx[:, :0], src)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16])
def test_scatter_add_sums_repeated_positions(device, dtype):
    x = (torch.randn(4, 6, device=device) * 4).to(dtype)
    idx = torch.tensor([[0, 0, 0, 5], [1, 1, 2, 2], [5, 5, 5, 5], [3, 0, 3, 0]])
    src = (torch.randn(4, 4, device=device) * 4).to(dtype)
    tol = 1e-2 if dtype == torch.float16 else 1e-5
    kernels, fallbacks = run(
        lambda x, i, s: x.scatter_add(1, i, s),
        x,
        idx.to(device),
        src,
        atol=tol,
        rtol=tol,
    )
    # a half-precision target sums in float32: widened first, rounded after
    assert len(kernels) == (3 if dtype == torch.float16 else 2) and fallbacks == []
    rows = torch.randint(0, 4, (9, 6), device=device)
    run(
        lambda x, i, s: x.scatter_add(0, i, s),
        x.t().contiguous().t(),
        rows,
        (torch.randn(9, 6, device=device) * 4).to(dtype),
        atol=tol,
        rtol=tol,
    )
    run(
        lambda x, i, s: x.scatter_reduce(1, i, s, "sum"),
        x,
        idx.to(device),
        src,
        atol=tol,
        rtol=tol,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_add_then_pointwise_and_its_wrapper(device):
    x = torch.randn(4, 6, device=device)
    idx = torch.randint(0, 6, (4, 3), device=device)
    src = torch.randn(4, 3, device=device)
    fn = lambda x, i, s: x.scatter_add(1, i, s) * 2  # noqa: E731
    kernels, _ = run(fn, x, idx, src)
    assert [k.rsplit("_", 1)[0] for k in kernels] == [
        "triton_poi_fused_scatter_add",  # the copy of x
        "triton_poi_fused_scatter_add",  # the scatter, into the copy
        "triton_poi_fused_mul",  # its reader: never fused with a scatter
    ]
    _, source = compiled_sources(fn, x, idx, src)
    assert "buf1 = buf0  # reuse" in source and "buf1 = empty_strided" not in source
    assert "tl.atomic_add(out_ptr0 + (" in source and "sem='relaxed')" in source


def test_scatter_nodes_order_and_never_fuse():
    x, idx, src = torch.randn(4, 6), torch.randint(0, 6, (4, 6)), torch.randn(4, 6)
    gm = make_fx(lambda x, i, s: x.scatter(1, i, s) + x)(x, idx, src)
    scheduler = Scheduler(GraphLowering(gm, [x, idx, src]).lower())
    names = [n.get_name() for n in scheduler.nodes]
    assert names == ["buf0", "buf1", "buf2"]
    assert "buf0" in scheduler.nodes[1].read_names  # after the copy it updates
    assert any("buf1 scatters into buf0 in place" in ln for ln in scheduler.fusion_log)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_put(device, index_dtype):
    x = torch.randn(5, 4, device=device)
    rows = torch.tensor([0, -1, 0, 2], device=device, dtype=index_dtype)
    values = torch.randn(4, 4, device=device)
    kernels, fallbacks = run(
        lambda x, i, v: x.index_put((i,), v, accumulate=True), x, rows, values
    )
    assert len(kernels) == 2 and fallbacks == []
    unique = torch.tensor([3, -1, 0], device=device, dtype=index_dtype)
    row = torch.randn(5, device=device)
    run(lambda x, i, v: x.index_put((i,), v), x.t(), unique, row)  # broadcast

    def set_columns(x, i, v):
        y = x.clone()
        y[:, i] = v
        return y + 1

    run(set_columns, x, unique, torch.randn(1, 3, device=device))
    run(lambda x, i, v: x.index_put((i,), v), x, unique[:0], values[:0])


@pytest.mark.parametrize("device", DEVICES)
def test_scatters_that_fall_back(device):
    x = torch.randn(4, 6, device=device)
    idx = torch.randint(0, 6, (4, 3), device=device)
    src = torch.randn(4, 3, device=device)
    _, fallbacks = run(
        lambda x, i, s: x.scatter_reduce(1, i, s, "sum", include_self=False),
        x,
        idx,
        src,
    )
    assert fallbacks == ["aten.scatter_reduce.two"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_sums_of_a_scatter_are_taken_in_float32(device, dtype):
    # a relative-position table's backward: a few entries, hundreds of gradients each,
    # all positive, so that roundings at every add would pile up
    table = torch.randn(7, 3, device=device).to(dtype)
    idx = torch.randint(0, 7, (600,), device=device)
    grads = torch.rand(600, 3, device=device).to(dtype)
    ulp = 2**-7 if dtype == torch.bfloat16 else 2**-10  # relative, one unit

    def accumulate(t, i, g):
        return t.index_put((i,), g, accumulate=True)

    exact = accumulate(table.double(), idx, grads.double()).to(dtype)
    kernels, fallbacks = run(
        accumulate, table, idx, grads, atol=0, rtol=ulp, expected=exact
    )
    assert fallbacks == [] and len(kernels) == 3  # widen, add atomically, round
    columns = torch.randint(0, 3, (7, 40), device=device)
    wide = torch.rand(7, 40, device=device).to(dtype)
    exact = table.double().scatter_add(1, columns, wide.double()).to(dtype)
    _, fallbacks = run(
        lambda t, i, s: t.scatter_add(1, i, s), table, columns, wide,
        atol=0, rtol=ulp, expected=exact,
    )
    assert fallbacks == []


@cpu_only
def test_scatter_out_of_range(monkeypatch):
    x, src = torch.zeros(3, 4), torch.ones(3, 2)
    idx = torch.tensor([[0, 4], [1, 1], [-1, 3]])
    out, source = compiled_sources(lambda x, i, s: x.scatter_add(1, i, s), x, idx, src)
    inside = (idx >= 0) & (idx < 4)
    expected = x.scatter_add(1, idx.clamp(0, 3), torch.where(inside, src, 0.0))
    torch.testing.assert_close(out, expected)  # dropped, and nothing else touched
    monkeypatch.setattr(config, "debug_indexing", True)
    with pytest.raises(Exception, match="index out of bounds"):
        compiled_sources(lambda x, i, s: x.scatter_add(1, i, s), x, idx, src)
    with pytest.raises(Exception, match="index out of bounds"):
        compiled_sources(lambda x, i, v: x.index_put((i,), v), x, idx[0], src[0, :1])


def test_shapes_eager_rejects_are_declined_not_read_out_of_bounds():
    from minductor.ir import FixedLayout, InputBuffer, TensorBox
    from minductor.lowering import Unsupported, lowerings

    def box(name, *size, dtype=torch.float32):
        return TensorBox(InputBuffer(name, FixedLayout.contiguous("cpu", dtype, size)))

    aten = torch.ops.aten
    x, wide = box("x", 4, 6), box("i", 5, 2, dtype=torch.int64)  # 5 rows > 4
    with pytest.raises(Unsupported, match="larger than x"):
        lowerings[aten.gather.default](x, 1, wide)
    small, idx = box("s", 4, 1), box("j", 4, 2, dtype=torch.int64)
    with pytest.raises(Unsupported, match="smaller than the index"):
        lowerings[aten.scatter_add.default](None, x, 1, idx, small)
    a, b = box("a", 3, dtype=torch.int64), box("b", 2, dtype=torch.int64)
    with pytest.raises(Unsupported, match="do not broadcast"):
        lowerings[aten.index.Tensor](x, [a, b])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("debug", [False, True])
def test_indirect_loads_inside_reductions(device, debug, monkeypatch):
    monkeypatch.setattr(config, "debug_indexing", debug)
    x = torch.randn(3, 5000, device=device)
    idx = torch.randint(0, 5000, (3, 4500), device=device)  # varies along r: rmask
    kernels, _ = run(lambda x, i: x.gather(1, i).sum(1), x, idx, atol=1e-3)
    assert kernels == ["triton_red_fused_gather_sum_0"]
    small = torch.randint(0, 7, (3, 3), device=device)
    kernels, _ = run(lambda x, i: x.gather(1, i).sum(1), x[:, 2:9], small)
    assert kernels == ["triton_per_fused_gather_sum_0"]
    rows = torch.tensor([3, 49, 0], device=device)
    w = torch.randn(50, 5000, device=device)
    run(lambda w, i: F.embedding(i, w).amax(1), w, rows)
    y, i = torch.randn(10, device=device), torch.randint(-10, 10, (3,), device=device)
    kernels, _ = run(lambda x, y, i: x.sum(1) + y[i], x, y, i, atol=1e-3)  # epilogue
    assert kernels == ["triton_red_fused_add_index_sum_0"]


# --- writing through a boolean mask, and tensors the graph holds ----------------------


@pytest.mark.parametrize("device", DEVICES)
def test_masked_assignment_of_one_value_is_a_pointwise_where(device):
    def fill(x):
        y = x.clone()
        y[x > 0] = 0
        return y * 2

    kernels, fallbacks = run(fill, torch.randn(7, 5, device=device))
    assert (len(kernels), fallbacks) == (1, [])

    def fill_rows(x, mask):  # a 2-d mask over a 3-d tensor: whole rows of x
        y = x.clone()
        y[mask] = -1.5
        return y

    x = torch.randn(4, 3, 5, device=device).transpose(1, 2)
    kernels, fallbacks = run(fill_rows, x, torch.rand(4, 5, device=device) > 0.5)
    assert fallbacks == []

    def fill_ints(x):
        y = x.clone()
        y[x % 3 == 0] = 7
        return y

    assert run(fill_ints, torch.arange(-6, 9, device=device))[1] == []


@pytest.mark.parametrize("device", DEVICES)
def test_masked_assignment_of_many_values_falls_back(device):
    def fill(x, v):
        y = x.clone()
        y[x > 0] = v  # one value per True: the k-th True takes v[k]
        return y

    x = torch.tensor([1.0, -1.0, 2.0, -2.0], device=device)
    kernels, fallbacks = run(fill, x, torch.tensor([10.0, 20.0], device=device))
    assert fallbacks == ["aten.index_put.default"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_tensor_constant_in_the_graph_is_passed_as_an_input(device):
    def f(x):  # the tensor is made while tracing, and held by the graph
        return x * torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device) + 1

    torch._dynamo.reset()
    with record_compiled() as graphs:
        kernels, fallbacks = run(f, torch.randn(3, 4, device=device))
    assert (len(kernels), fallbacks) == (1, [])
    assert [c.tolist() for c in graphs[-1].constants] == [[1.0, 2.0, 3.0, 4.0]]


@pytest.mark.cuda
@pytest.mark.parametrize(
    "case", ["index", "index_put", "index_put accumulate", "0-dim scalar", "setitem"]
)
def test_cpu_index_tensors_and_scalars_with_cuda_tensors(case):
    # eager copies CPU index tensors and 0-dim CPU tensors to the GPU itself
    x = torch.randn(7, 5, device="cuda")
    idx = torch.tensor([4, 0, 4, 6])  # on the CPU, with a repeat
    v = torch.randn(4, 5, device="cuda")
    scale = torch.tensor(3.0)  # on the CPU

    def fn(x, idx, v, scale):
        if case == "index":
            return x[idx] * 2
        if case == "index_put":
            return torch.index_put(x, (idx,), v)
        if case == "index_put accumulate":
            return torch.index_put(x, (idx,), v, accumulate=True)
        if case == "0-dim scalar":
            return x * scale + v.sum()
        y = x.clone()
        y[idx[:2]] = 0.5
        return y

    torch._dynamo.reset()
    with record_compiled() as graphs:
        got = torch.compile(fn, backend="minductor")(x, idx, v, scale)
    torch.testing.assert_close(got, fn(x, idx, v, scale))
    calls = "".join(g.source[g.source.index("def call"):] for g in graphs)
    if case == "0-dim scalar":  # a number: copied without waiting for the GPU (ch. 19)
        assert "number_on(arg" in calls and ".to('cuda:0'" not in calls
    else:
        assert ".to('cuda:0', memory_format=torch.contiguous_format)" in calls
