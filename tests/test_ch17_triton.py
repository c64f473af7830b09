"""Chapter 17: Triton kernels from scheduler nodes.

Kernel text is pinned (golden snippets): loads, stores, masks, CSE and the store cache,
names, block sizes, the index dtype. The ops themselves are chapter 16's
(test_ch16_triton_ops.py).
"""

import dataclasses

import pytest
import sympy
import torch
from helpers import body_lines, kernels_for, one_op_buffer, run_kernel
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.codegen_triton import (
    GeneratedKernel,
    KernelKind,
    PerCallBlocks,
    generate_kernel,
    kernel_name_stem,
    pointwise_config,
)
from minductor.config import config
from minductor.dependencies import SchedulerNode
from minductor.ir import ComputedBuffer, FixedLayout, InputBuffer, Pointwise, TensorBox
from minductor.lowering import GraphLowering
from minductor.ops import ops
from minductor.runtime import interpret_mode
from minductor.scheduler import Scheduler

pytestmark = pytest.mark.ch17

cpu = torch.device("cpu")
INTERPRET = interpret_mode()  # kernels run in the interpreter, or on a GPU




def test_a_kernel_kind_is_an_enum_member_that_names_kernels_by_its_prefix():
    _, (kernel,) = kernels_for(lambda a, b: (a + b,), torch.randn(5), torch.randn(5))
    assert kernel.kind is KernelKind.POINTWISE
    assert kernel.descriptive_name == "poi_fused_add"
    assert f"triton_{kernel.kind}_fused" == "triton_poi_fused"
    assert [str(k) for k in KernelKind] == ["poi", "per", "red", "tem"]
    assert PerCallBlocks("inner") is PerCallBlocks.INNER
    assert repr(PerCallBlocks.INNER) == "'inner'"  # as the wrapper writes it


def test_a_generated_kernel_is_built_by_keyword_and_stays_frozen():
    _, (kernel,) = kernels_for(lambda a: (a * 2,), torch.randn(5))
    fields = [getattr(kernel, f.name) for f in dataclasses.fields(kernel)]
    with pytest.raises(TypeError):
        GeneratedKernel(*fields)
    with pytest.raises(dataclasses.FrozenInstanceError):
        kernel.numel = 6
    assert dataclasses.replace(kernel, numel=5) == kernel


# --- golden kernels -------------------------------------------------------------------

ADD_MUL = """\
@triton.jit
def KERNEL_NAME(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask)
    tmp1 = tl.load(in_ptr1 + (x0), xmask)
    tmp2 = tmp0 * tmp1
    tmp3 = tl.load(in_ptr2 + (x0), xmask)
    tmp4 = tmp2 + tmp3
    tl.store(out_ptr0 + (x0), tmp4, xmask)"""


def test_golden_add_mul_kernel():
    a, b, c = (torch.randn(33, 65) for _ in range(3))
    _, (kernel,) = kernels_for(lambda a, b, c: (a * b + c,), a, b, c)
    assert kernel.source == ADD_MUL
    assert kernel.descriptive_name == "poi_fused_add_mul"
    assert kernel.call_args == ("a_1", "b_1", "c_1", "buf0")
    assert kernel.numel == 2145
    assert dict(kernel.meta) == {"XBLOCK": 1024, "num_warps": 4}
    out = torch.empty(33, 65)
    run_kernel(kernel, {"a_1": a, "b_1": b, "c_1": c, "buf0": out})
    torch.testing.assert_close(out, a * b + c)


def test_golden_broadcast_kernel_keeps_two_dimensions():
    x, bias, y = torch.randn(33, 65), torch.randn(1, 65), torch.randn(33, 65)
    _, (kernel,) = kernels_for(lambda x, bias, y: (x * bias + y,), x, bias, y)
    lines = body_lines(kernel)
    assert lines[3:] == [
        "x0 = (xindex % 65)",
        "x1 = (xindex // 65)",
        "tmp0 = tl.load(in_ptr0 + (x0 + 65*x1), xmask)",
        "tmp1 = tl.load(in_ptr1 + (x0), xmask)",
        "tmp2 = tmp0 * tmp1",
        "tmp3 = tl.load(in_ptr2 + (x0 + 65*x1), xmask)",
        "tmp4 = tmp2 + tmp3",
        "tl.store(out_ptr0 + (x0 + 65*x1), tmp4, xmask)",
    ]
    out = torch.empty(33, 65)
    run_kernel(kernel, {"x_1": x, "bias_1": bias, "y_1": y, "buf0": out})
    torch.testing.assert_close(out, x * bias + y)


def test_three_dimensional_variables():
    x, b = torch.randn(3, 4, 5), torch.randn(4, 1)
    _, (kernel,) = kernels_for(lambda x, b: (x + b,), x, b)
    lines = body_lines(kernel)
    assert lines[3:6] == [
        "x0 = (xindex % 5)",
        "x1 = ((xindex // 5) % 4)",
        "x2 = (xindex // 20)",
    ]
    out = torch.empty(3, 4, 5)
    run_kernel(kernel, {"x_1": x, "b_1": b, "buf0": out})
    torch.testing.assert_close(out, x + b)


def test_transposed_input_kernel_reads_through_strides():
    x, y = torch.randn(7, 5).t(), torch.randn(5, 7)
    _, (kernel,) = kernels_for(lambda x, y: (x * y,), x, y)
    lines = body_lines(kernel)
    # the output takes eager's strides, x's transposed ones, and the loops walk the
    # store's memory order: x is read and the output written contiguously, y strided
    assert "tmp0 = tl.load(in_ptr0 + (x0 + 5*x1), xmask)" in lines
    assert "tmp1 = tl.load(in_ptr1 + (7*x0 + x1), xmask)" in lines
    assert "tl.store(out_ptr0 + (x0 + 5*x1), tmp2, xmask)" in lines
    out = torch.empty_strided((5, 7), (1, 5))
    run_kernel(kernel, {"x_1": x, "y_1": y, "buf0": out})
    torch.testing.assert_close(out, x * y)


def test_zero_dim_input_is_loaded_at_a_constant_index():
    s, v = torch.tensor(3.0), torch.randn(6)
    _, (kernel,) = kernels_for(lambda s, v: (s * v,), s, v)
    assert (
        "tmp0 = tl.load(in_ptr0 + (tl.full([XBLOCK], 0, tl.int32)), xmask)"
        in body_lines(kernel)
    )
    out = torch.empty(6)
    run_kernel(kernel, {"s_1": s, "v_1": v, "buf0": out})
    torch.testing.assert_close(out, s * v)


# --- CSE and the store cache ----------------------------------------------------------


def test_cse_loads_an_input_once():
    x = torch.randn(5, 7)
    _, (kernel,) = kernels_for(lambda x: (x * x + x,), x)
    lines = body_lines(kernel)
    assert sum("tl.load" in line for line in lines) == 1
    assert "tmp1 = tmp0 * tmp0" in lines and "tmp2 = tmp1 + tmp0" in lines


def test_fused_siblings_share_their_loads_and_store_each_output():
    x = torch.randn(5, 7)
    scheduler, (kernel,) = kernels_for(lambda a: (a + 1, a * 2, (a + 1) * (a * 2)), x)
    lines = body_lines(kernel)
    assert sum("tl.load" in line for line in lines) == 1
    assert sum(line.startswith("tl.store") for line in lines) == 3
    assert kernel.call_args == ("a_1", "buf0", "buf1", "buf2")
    outs = [torch.empty(5, 7) for _ in range(3)]
    run_kernel(kernel, {"a_1": x, "buf0": outs[0], "buf1": outs[1], "buf2": outs[2]})
    for got, expected in zip(outs, (x + 1, x * 2, (x + 1) * (x * 2))):
        torch.testing.assert_close(got, expected)


def test_removed_intermediate_is_never_stored_or_loaded():
    saved = config.realize_opcount_threshold
    config.realize_opcount_threshold = 3
    try:

        def f(x, y):
            t = (x * y).exp().sin().cos() + x
            return t + 1, t * 2

        # |x * y| < 1: exp stays small, so sin's argument is one whose float32
        # rounding numpy and torch agree on (an unbounded one flaked at 3e-5)
        torch.manual_seed(0)
        x, y = torch.rand(5, 7) * 2 - 1, torch.rand(5, 7) * 2 - 1
        scheduler, (kernel,) = kernels_for(f, x, y)
    finally:
        config.realize_opcount_threshold = saved
    assert scheduler.removed_buffers == {"buf0"}
    assert "buf0" not in kernel.call_args
    lines = body_lines(kernel)
    assert sum(line.startswith("tl.store") for line in lines) == 2
    assert sum("tl.load" in line for line in lines) == 2  # x and y only
    outs = {"buf1": torch.empty(5, 7), "buf2": torch.empty(5, 7)}
    run_kernel(kernel, {"x_1": x, "y_1": y, **outs})
    t = (x * y).exp().sin().cos() + x
    torch.testing.assert_close(outs["buf1"], t + 1)
    torch.testing.assert_close(outs["buf2"], t * 2)


# --- names and configuration ----------------------------------------------------------


def test_kernel_name_stem_sorts_origins():
    a, b = torch.randn(4), torch.randn(4)
    _, (kernel,) = kernels_for(lambda a, b: (torch.relu(a * b).exp() - a,), a, b)
    assert kernel.descriptive_name == "poi_fused_exp_mul_relu_sub"
    node = SchedulerNode.create(one_op_buffer("neg", [a], torch.float32))
    assert kernel_name_stem(node) == "poi_fused_kernel"  # a body with no origins


@pytest.mark.parametrize("numel", [0, 1, 2, 3, 64, 65, 1000, 1024, 1025, 2145, 10**7])
def test_pointwise_config(numel):
    # in the interpreter: one block if it fits (a GPU's rule is in test_ch17_block_sizes.py)
    cfg = pointwise_config(numel, interpret=True)
    xblock = cfg["XBLOCK"]
    assert xblock & (xblock - 1) == 0  # a power of two
    assert xblock <= config.max_xblock
    assert xblock >= min(max(numel, 1), config.max_xblock)  # one block if it fits
    assert xblock < 2 * max(numel, 1)  # and not much larger than needed
    # a warp per 256 elements, at least 4 while each thread has one element
    assert cfg["num_warps"] == max(1, min(8, max(xblock // 256, min(4, xblock // 32))))


def test_pointwise_config_follows_max_xblock():
    saved = config.max_xblock
    config.max_xblock = 128
    try:
        assert pointwise_config(10_000)["XBLOCK"] == 128
    finally:
        config.max_xblock = saved


def test_huge_kernels_index_in_int64():
    size = (sympy.Integer(2**31),)
    x = TensorBox(InputBuffer("x", FixedLayout.contiguous(cpu, torch.float32, size)))
    load = x.make_loader()
    buf = ComputedBuffer(
        "buf0",
        FixedLayout.contiguous(cpu, torch.float32, size),
        Pointwise(cpu, torch.float32, lambda i: ops.neg(load(i)), size),
    )
    kernel = generate_kernel(SchedulerNode.create(buf), set(), interpret=True)
    assert "xoffset = tl.program_id(0).to(tl.int64) * XBLOCK" in kernel.source
    small = one_op_buffer("neg", [torch.randn(3)], torch.float32)
    small_kernel = generate_kernel(SchedulerNode.create(small), set(), interpret=True)
    assert "xoffset = tl.program_id(0) * XBLOCK" in small_kernel.source


def test_gpu_and_interpreter_kernels_differ_only_in_helpers():
    x = torch.randn(8)
    scheduler = Scheduler(
        GraphLowering(
            make_fx(lambda x: (torch.tanh(x) + torch.sigmoid(x),))(x), [x]
        ).lower()
    )
    (node,) = scheduler.nodes
    gpu = generate_kernel(node, set(), interpret=False).source
    cpu_source = generate_kernel(node, set(), interpret=True).source
    assert "libdevice.tanh(tmp0)" in gpu and "tl.sigmoid(tmp0)" in gpu
    assert "helpers.tanh(tmp0)" in cpu_source and "helpers.sigmoid(tmp0)" in cpu_source
    assert (
        gpu.replace("libdevice.tanh", "helpers.tanh").replace(
            "tl.sigmoid", "helpers.sigmoid"
        )
        == cpu_source
    )
