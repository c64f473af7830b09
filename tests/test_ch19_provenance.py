"""Chapter 19 (with 5 and 6): the comment above each launch names the graph nodes it
computes, `# Topologically Sorted Source Nodes: [...], Original ATen: [...]`.

The origin nodes are gathered by GraphLowering (chapter 6) through every inlined body
and view, kept per buffer in `graph.origin_nodes`, and printed by the wrapper for each
kernel launch and extern call.
"""

import re

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import compile_hooks, record_compiled
from minductor.lowering import GraphLowering
from minductor.runtime import interpret_mode
from minductor.scheduler import Scheduler
from minductor.wrapper import WrapperCodeGen

pytestmark = pytest.mark.ch19

INTERPRET = interpret_mode()
DEVICE = torch.device("cpu") if INTERPRET else torch.device("cuda", 0)
COMMENT = re.compile(
    r"# Topologically Sorted Source Nodes: \[(.*)\], Original ATen: \[(.*)\]$"
)


def randn(*shape, **kwargs):
    return torch.randn(*shape, device=DEVICE, **kwargs)


def compiled(fn, *args, dynamic=False, backward=False):
    """The sources of the graphs compiling fn makes (forward, then backward)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor", dynamic=dynamic)(*args)
        if backward:
            out.sum().backward()
    return [g.source for g in graphs]


def call_lines(source):
    start = source.index("def call(args):")
    end = source.index("def benchmark_compiled_module")
    return [line.strip() for line in source[start:end].splitlines()]


def commented(source):
    """(sources, original ATen ops, the line below) for each comment of `call`."""
    lines = call_lines(source)
    found = []
    for line, below in zip(lines, lines[1:]):
        match = COMMENT.match(line)
        if match:
            names, atens = (g.split(", ") if g else [] for g in match.groups())
            found.append((names, atens, below))
    return found


def launches(source):
    return [(n, a, below) for n, a, below in commented(source) if "launch_" in below]


def test_every_launch_has_its_comment_just_above():
    def f(x, y):
        a = (x * y).sin()
        return a.sum(1), a.cos()

    (source,) = compiled(f, randn(8, 16), randn(8, 16))
    lines = call_lines(source)
    for k, line in enumerate(lines):
        if line.startswith("launch_"):
            assert COMMENT.match(lines[k - 1]), lines[k - 1]
    assert len(launches(source)) == sum(s.startswith("launch_") for s in lines) > 0


def test_a_decomposed_op_is_named_by_its_original_aten_op():
    # layer_norm decomposes into var_mean, add, rsqrt, sub, mul: the kernel is named
    # after those, the comment after the op the model called
    def f(x, w):
        return F.layer_norm(x, (16,), w)

    (source,) = compiled(f, randn(8, 16), randn(16))
    ((names, atens, below),) = launches(source)
    assert "var_mean" in below  # the kernel's name
    assert names == ["layer_norm"]
    assert atens == ["aten.native_layer_norm"]


def test_a_fused_kernel_lists_every_node_in_graph_order():
    # the row sum and the division fuse into one kernel: two scheduler nodes
    def f(x, y):
        s = x.sum(1, keepdim=True)
        q = x / s
        return q + y

    (source,) = compiled(f, randn(8, 16), randn(8, 16))
    ((names, atens, below),) = launches(source)
    assert names == ["s", "q", "add"]
    assert atens == ["aten.sum", "aten.div", "aten.add"]


def test_a_body_inlined_into_two_kernels_is_listed_by_both():
    def f(x):
        t = x.sin()
        return t.sum(0), t.sum(1)

    (source,) = compiled(f, randn(8, 16))
    found = launches(source)
    assert [names for names, _, _ in found] == [["t", "sum_1"], ["t", "sum_2"]]
    assert all(atens == ["aten.sin", "aten.sum"] for _, atens, _ in found)


def test_views_read_by_a_kernel_are_listed():
    def f(x):
        v = x.t()
        return v + 1

    (source,) = compiled(f, randn(8, 16))
    ((names, atens, _),) = launches(source)
    assert names == ["v", "add"]
    assert atens == ["aten.t", "aten.add"]


def test_a_view_of_a_body_brings_the_body_and_the_view():
    def f(x):
        a = x.sin()
        v = a.t()  # a GenericView of a's body, inlined where it is read
        return v * 2

    (source,) = compiled(f, randn(8, 16))
    ((names, atens, _),) = launches(source)
    assert names == ["a", "v", "mul"]
    assert atens == ["aten.sin", "aten.t", "aten.mul"]


def test_a_value_stored_for_a_fallback_keeps_its_own_nodes():
    # lgamma falls back and stores its argument: that kernel is x * 2's, not lgamma's
    def f(x):
        return torch.lgamma(x * 2) + 1

    x = randn(5, 7)
    graph = GraphLowering(make_fx(f)(x), [x]).lower()
    by_name = {
        b.name: sorted(n.name for n in graph.origin_nodes[b.name])
        for b in graph.buffers
    }
    assert list(by_name.values()) == [["mul"], ["lgamma"], ["add"]]


def test_a_deduplicated_kernel_gets_a_comment_per_launch():
    def twice(x, w):
        y = x.sin() @ w
        return y.sin(), y

    (source,) = compiled(twice, randn(16, 16), randn(16, 16))
    found = launches(source)
    assert [below.split("(")[0] for _, _, below in found] == [
        "launch_triton_poi_fused_sin_0",
        "launch_triton_poi_fused_sin_0",
    ]
    assert [names for names, _, _ in found] == [["sin"], ["sin_1"]]
    # the matmul between them is an extern call, with its own comment
    (mm,) = [c for c in commented(source) if "extern_kernels.mm(" in c[2]]
    assert mm[:2] == (["y"], ["aten.mm"])


def test_a_backward_graph_lists_its_own_node_names():
    graphs = []

    def keep(gm, graph, scheduler, wrapper, compiled):
        graphs.append(gm)

    with compile_hooks.using(keep):
        forward, backward = compiled(
            F.gelu, randn(8, 16, requires_grad=True), backward=True
        )
    ((names, atens, _),) = launches(forward)
    assert (names, atens) == (["gelu"], ["aten.gelu"])
    ((names, atens, _),) = launches(backward)
    # gelu_backward decomposed into mul, erf, exp...: listed by their own names, as
    # they have no node of Dynamo's graph; the list is cut at eight
    backward_nodes = [n.name for n in graphs[1].graph.nodes if n.op == "call_function"]
    assert names[:8] == backward_nodes[:8] and "erf" in names
    assert names[8] == f"... {len(backward_nodes) - 8} more"
    assert atens == ["aten.gelu_backward"]


def test_dynamic_shapes_keep_the_comment():
    def f(x, y):
        h = (x + y).relu()
        return h.sum(-1)

    (source,) = compiled(f, randn(8, 16), randn(16), dynamic=True)
    assert "s77" in source or re.search(r"\bs\d+ = ", source)  # sizes are symbols
    ((names, atens, _),) = launches(source)
    assert names == ["add", "h", "sum_1"]
    assert atens == ["aten.add", "aten.relu", "aten.sum"]


def test_a_long_list_is_cut_with_a_count():
    def f(x):
        for _ in range(12):
            x = x * 1.5 + 1
        return x

    (source,) = compiled(f, randn(8))
    ((names, atens, _),) = launches(source)
    assert names == ["mul", "x", "mul_1", "x_1", "mul_2", "x_2", "mul_3", "x_3"] + [
        "... 16 more"
    ]
    assert atens == ["aten.mul", "aten.add"]


def test_each_piece_of_a_cat_names_its_own_input():
    def f(x, y):
        return torch.cat([x.sin(), y.cos()])

    (source,) = compiled(f, randn(8, 16), randn(8, 16))
    assert [names for names, _, _ in launches(source)] == [
        ["sin", "cat"],
        ["cos", "cat"],
    ]


def test_golden_call_of_a_gelu_and_a_layer_norm():
    def block(x, w, b):
        h = F.gelu(x + 1)
        return F.layer_norm(h, (x.shape[-1],), w, b)

    (source,) = compiled(block, randn(8, 32), randn(32), randn(32))
    assert call_lines(source)[:7] == [
        "def call(args):",
        "arg0_1, arg1_1, arg2_1 = args",
        "args.clear()",
        f"buf2 = empty_strided_{DEVICE.type}((8, 32), (32, 1), torch.float32)",
        "# Topologically Sorted Source Nodes: [add, h, layer_norm], "
        "Original ATen: [aten.add, aten.gelu, aten.native_layer_norm]",
        "launch_triton_per_fused_add_gelu_mul_rsqrt_sub_var_mean_0("
        "arg0_1, arg1_1, arg2_1, buf2)",
        "del arg0_1, arg1_1, arg2_1",
    ]


def test_a_make_fx_graph_names_its_own_nodes_and_ops():
    def f(x, y):
        a = torch.relu(x * y + 1)
        return torch.lgamma(a) * 2, a.exp()

    x, y = randn(33, 65), randn(33, 65)
    graph = GraphLowering(make_fx(f)(x, y), [x, y]).lower()
    source = WrapperCodeGen(graph, Scheduler(graph), interpret=INTERPRET).generate()
    assert [c[:2] for c in commented(source)] == [
        (
            ["mul", "add", "relu", "exp"],
            ["aten.mul", "aten.add", "aten.relu", "aten.exp"],
        ),
        (["lgamma"], ["aten.lgamma"]),  # the fallback's call
        (["mul_1"], ["aten.mul"]),
    ]
