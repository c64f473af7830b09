"""Chapter 5: layouts, loop bodies, buffers, fallbacks and TensorBox.

Everything is built by hand here (no lowering), and its meaning is checked by
running bodies under the EvalHandler against eager PyTorch.
"""

import dataclasses
import itertools

import pytest
import sympy
import torch

from minductor.ir import (
    Buffer,
    ComputedBuffer,
    FallbackKernel,
    FixedLayout,
    InputBuffer,
    MultiOutput,
    MultiOutputLayout,
    Pointwise,
    TensorBox,
)
from minductor.ops import EvalHandler, ops, set_handler
from minductor.sizevars import index_vars

pytestmark = pytest.mark.ch05

cpu = torch.device("cpu")
aten = torch.ops.aten


class TinyGraph:
    def __init__(self):
        self.buffers = []

    def new_buffer_name(self):
        return f"buf{len(self.buffers)}"

    def register_buffer(self, buf):
        self.buffers.append(buf)


def ints(*values):
    return [sympy.Integer(v) for v in values]


def every_index(size):
    return itertools.product(*[range(int(s)) for s in size])


def input_box(name, t):
    return TensorBox(InputBuffer(name, FixedLayout.from_tensor(t)))


# --- layouts --------------------------------------------------------------------------

VIEWS = {
    "contiguous": lambda: torch.arange(35.0).reshape(5, 7),
    "transposed": lambda: torch.arange(35.0).reshape(7, 5).t(),
    "offset_slice": lambda: torch.arange(80.0).reshape(8, 10)[2:7, 3:10],
    "stepped_offset": lambda: torch.arange(200.0).reshape(10, 20)[1::2, 5::2],
    "expanded": lambda: torch.arange(9.0)[4:9].reshape(5, 1).expand(5, 7),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_fixed_layout_from_tensor_keeps_size_stride_offset(name):
    t = VIEWS[name]()
    layout = FixedLayout.from_tensor(t)
    assert tuple(int(s) for s in layout.size) == tuple(t.shape)
    assert tuple(int(s) for s in layout.stride) == t.stride()
    assert int(layout.offset) == t.storage_offset()
    assert layout.device == t.device and layout.dtype == t.dtype
    assert int(layout.numel()) == t.numel()
    assert all(isinstance(s, sympy.Integer) for s in (*layout.size, *layout.stride))


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_indexer_counts_from_the_first_element(name):
    t = VIEWS[name]()
    indexer = FixedLayout.from_tensor(t).make_indexer()
    storage = torch.tensor([], dtype=t.dtype).set_(t.untyped_storage())  # all of it
    for idx in every_index(t.shape):
        offset = indexer(ints(*idx))
        assert offset == sum(i * s for i, s in zip(idx, t.stride()))
        # a kernel receives data_ptr(), which already includes the storage offset
        assert storage[t.storage_offset() + int(offset)].item() == t[idx].item()


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_input_buffer_loader_reads_the_view(name):
    t = VIEWS[name]()
    loader = input_box("v", t).make_loader()
    with set_handler(EvalHandler({"v": t})):
        for idx in every_index(t.shape):
            assert loader(ints(*idx)).item() == t[idx].item()


def test_indexer_is_symbolic():
    layout = FixedLayout.from_tensor(torch.empty(3, 4).t())
    i0, i1 = index_vars(2)
    assert layout.make_indexer()([i0, i1]) == i0 + 4 * i1


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4), (2, 0, 3), (1, 1)])
def test_contiguous_layout_matches_torch(shape):
    layout = FixedLayout.contiguous(cpu, torch.float16, shape)
    t = torch.empty(shape, dtype=torch.float16)
    assert tuple(int(s) for s in layout.stride) == t.stride()
    assert tuple(int(s) for s in layout.size) == tuple(t.shape)
    assert layout.offset == 0 and int(layout.numel()) == t.numel()


def test_layouts_are_frozen_and_print_on_one_line():
    layout = FixedLayout.contiguous(cpu, torch.float32, (33, 65))
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.dtype = torch.float16
    assert repr(layout) == "FixedLayout(cpu, float32, size=[33, 65], stride=[65, 1])"
    assert "\n" not in repr(InputBuffer("arg0_1", layout))


# --- Pointwise ------------------------------------------------------------------------


def _add_mul_ir():
    a, b, c = (torch.randn(3, 4) for _ in range(3))
    boxes = [input_box(n, t) for n, t in zip(("a", "b", "c"), (a, b, c))]
    la, lb, lc = (box.make_loader() for box in boxes)
    size = boxes[0].get_size()
    mul = Pointwise(
        cpu, torch.float32, lambda i: ops.mul(la(i), lb(i)), size, frozenset({"mul"})
    )
    lm = mul.make_loader()
    add = Pointwise(
        cpu,
        torch.float32,
        lambda i: ops.add(lm(i), lc(i)),
        size,
        frozenset({"add", "mul"}),
    )
    return add, {"a": a, "b": b, "c": c}


def test_pointwise_loader_is_its_body():
    add, env = _add_mul_ir()
    assert add.make_loader() is add.inner_fn
    assert add.get_size() == tuple(ints(3, 4))
    assert add.get_dtype() == torch.float32 and add.get_device() == cpu
    with set_handler(EvalHandler(env)):
        for idx in every_index((3, 4)):
            expected = env["a"][idx] * env["b"][idx] + env["c"][idx]
            assert add.inner_fn(ints(*idx)).item() == pytest.approx(expected.item())


def test_pointwise_count_ops_counts_the_inlined_body():
    add, _ = _add_mul_ir()
    counts = add.count_ops()
    assert counts.reads == 3  # a, b and c: the product was inlined
    assert counts.count == 5  # three loads, a mul and an add


def test_pointwise_count_ops_with_constants_and_casts():
    x = input_box("x", torch.randn(4))
    lx = x.make_loader()

    def body(i):
        v = ops.to_dtype(lx(i), torch.float64)
        return ops.where(ops.gt(v, ops.constant(0.0, torch.float64)), v, ops.neg(v))

    counts = Pointwise(cpu, torch.float64, body, x.get_size()).count_ops()
    assert (counts.count, counts.reads) == (6, 1)


def test_pointwise_inner_fn_str():
    add, _ = _add_mul_ir()
    assert add.inner_fn_str().splitlines() == [
        "tmp0 = ops.load(a, 4*i0 + i1)",
        "tmp1 = ops.load(b, 4*i0 + i1)",
        "tmp2 = ops.mul(tmp0, tmp1)",
        "tmp3 = ops.load(c, 4*i0 + i1)",
        "tmp4 = ops.add(tmp2, tmp3)",
        "return tmp4",
    ]
    assert repr(add) == "Pointwise(cpu, float32, ranges=[3, 4], origins=['add', 'mul'])"


# --- ComputedBuffer -------------------------------------------------------------------


def test_computed_buffer_store_output_reproduces_eager():
    add, env = _add_mul_ir()
    buf = ComputedBuffer(
        "buf0", FixedLayout.contiguous(cpu, torch.float32, (3, 4)), add
    )
    out = torch.full((3, 4), float("nan"))
    with set_handler(EvalHandler({**env, "buf0": out})):
        for idx in every_index((3, 4)):
            buf.store_output(ints(*idx))
    torch.testing.assert_close(out, env["a"] * env["b"] + env["c"])
    assert buf.origins == frozenset({"add", "mul"})


def test_computed_buffer_stores_through_its_own_strides():
    x = torch.randn(3, 5)
    lx = input_box("x", x).make_loader()
    body = Pointwise(cpu, torch.float32, lambda i: ops.exp(lx(i)), tuple(ints(3, 5)))
    layout = FixedLayout(cpu, torch.float32, tuple(ints(3, 5)), tuple(ints(1, 3)))
    buf = ComputedBuffer("buf0", layout, body)
    out = torch.empty_strided((3, 5), (1, 3))
    with set_handler(EvalHandler({"x": x, "buf0": out})):
        for idx in every_index((3, 5)):
            buf.store_output(ints(*idx))
    torch.testing.assert_close(out, x.exp())


def test_computed_buffer_of_a_zero_dim_body():
    s = torch.tensor(2.5)
    ls = input_box("s", s).make_loader()
    body = Pointwise(cpu, torch.float32, lambda i: ops.mul(ls(i), ls(i)), ())
    buf = ComputedBuffer("buf0", FixedLayout.contiguous(cpu, torch.float32, ()), body)
    out = torch.empty(())
    with set_handler(EvalHandler({"s": s, "buf0": out})):
        buf.store_output([])
    assert out.item() == 6.25


def test_computed_buffer_dump_shows_the_whole_body():
    add, _ = _add_mul_ir()
    buf = ComputedBuffer(
        "buf0", FixedLayout.contiguous(cpu, torch.float32, (3, 4)), add
    )
    lines = buf.dump().splitlines()
    assert lines[0] == (
        "buf0: ComputedBuffer(FixedLayout(cpu, float32, size=[3, 4], stride=[4, 1]))"
    )
    assert lines[1] == "  origins: add, mul"
    assert lines[-1] == "  ops.store(buf0, 4*i0 + i1, tmp4)"
    assert sum("ops.load" in line for line in lines) == 3


def test_buffer_loader_loads_by_name():
    layout = FixedLayout.contiguous(cpu, torch.float32, (2, 3))
    buf = ComputedBuffer("buf7", layout, None)
    seen = []

    class Recorder:
        def load(self, name, index):
            seen.append((name, index))

    i0, i1 = index_vars(2)
    with set_handler(Recorder()):
        buf.make_loader()([i0, i1])
    assert seen == [("buf7", 3 * i0 + i1)]


# --- fallbacks ------------------------------------------------------------------------


def _buf(name, shape=(2, 2)):
    return InputBuffer(name, FixedLayout.contiguous(cpu, torch.float32, shape))


def test_fallback_input_buffers_walks_nested_lists_and_kwargs():
    a, b, c, d = (_buf(n) for n in "abcd")
    node = FallbackKernel(
        "buf9",
        FixedLayout.contiguous(cpu, torch.float32, (8, 2)),
        aten.cat.default,
        ([a, (b, [c])], 0, "text", None),
        {"out": [d], "alpha": 2},
    )
    assert [x.name for x in node.input_buffers()] == ["a", "b", "c", "d"]
    assert "inputs=[a, b, c, d]" in repr(node)


def test_fallback_without_buffers_has_no_inputs():
    node = FallbackKernel(
        "buf0",
        FixedLayout.contiguous(cpu, torch.float32, (3,)),
        aten.full.default,
        ([3], 1.0),
        {"dtype": torch.float32},
    )
    assert node.input_buffers() == []


def test_multi_output_points_at_its_parent():
    parent = FallbackKernel(
        "buf0", MultiOutputLayout(cpu), aten.max.dim, (_buf("x"), 1), {}
    )
    values = MultiOutput(
        "buf1", FixedLayout.contiguous(cpu, torch.float32, (2,)), parent, 0
    )
    assert values.parent is parent and values.index == 0
    assert repr(values).startswith("buf1: MultiOutput(buf0[0], ")
    assert parent.layout.device == cpu


# --- TensorBox ------------------------------------------------------------------------


def test_realize_swaps_the_box_and_registers_once():
    add, _ = _add_mul_ir()
    box = TensorBox(add)
    graph = TinyGraph()
    assert not box.is_realized()
    first = box.realize(graph)
    assert isinstance(first, ComputedBuffer) and first.name == "buf0"
    assert box.data is first and box.is_realized()
    assert first.data is add  # the body is kept, not copied
    assert tuple(int(s) for s in first.layout.stride) == (4, 1)
    second = box.realize(graph)
    assert second is first
    assert graph.buffers == [first]


def test_consumers_holding_the_box_see_the_buffer_after_realize():
    add, env = _add_mul_ir()
    box = TensorBox(add)
    box.realize(TinyGraph())
    loader = box.make_loader()  # a loader taken after realizing loads the buffer
    seen = []

    class Recorder:
        def load(self, name, index):
            seen.append(name)

    with set_handler(Recorder()):
        loader(ints(1, 2))
    assert seen == ["buf0"]


def test_realizing_an_input_is_a_no_op():
    graph = TinyGraph()
    box = input_box("x", torch.randn(3))
    assert box.is_realized()
    assert box.realize(graph) is box.data
    assert graph.buffers == []


def test_records_are_frozen():
    add, _ = _add_mul_ir()
    with pytest.raises(dataclasses.FrozenInstanceError):
        add.ranges = ()
    buf = _buf("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        buf.name = "y"
    assert isinstance(buf, Buffer)
