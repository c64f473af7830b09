"""Chapter 19: the generated module, its `call`, its memory lines and its benchmark.

The modules are generated from make_fx graphs, loaded with the runtime, run on CPU
tensors in Triton's interpreter and compared with eager.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import record_compiled
from minductor.config import config
from minductor.ir import (
    FixedLayout,
    InputBuffer,
)
from minductor.lowering import GraphLowering, lowerings
from minductor.runtime import interpret_mode, load_module
from minductor.scheduler import Scheduler
from minductor.wrapper import (
    AllocateLine,
    ExternCallLine,
    FreeLine,
    KernelCallLine,
    MultiOutputLine,
    WrapperCodeGen,
    binding,
    codegen_arg,
    codegen_op,
)

pytestmark = pytest.mark.ch19

cpu = torch.device("cpu")
# generated modules run on CPU tensors in the interpreter, or on a GPU
INTERPRET = interpret_mode()
DEVICE = torch.device("cpu") if INTERPRET else torch.device("cuda", 0)


def randn(*shape):
    return torch.randn(*shape, device=DEVICE)


inf, nan = float("inf"), float("nan")


def generate(fn, *args):
    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    wrapper = WrapperCodeGen(graph, Scheduler(graph), interpret=INTERPRET)
    return wrapper, wrapper.generate()


def call_body(source):
    start = source.index("def call(args):")
    end = source.index("\n\n", start)
    lines = [line.strip() for line in source[start:end].splitlines()[1:]]
    return [line for line in lines if not line.startswith("with torch.cuda._Device")]


def run(source, *args):
    return load_module(source).call(list(args))


def check_against_eager(fn, *args):
    wrapper, source = generate(fn, *args)
    outs = run(source, *args)
    for got, expected in zip(outs, fn(*args), strict=True):
        torch.testing.assert_close(got, expected)
    return wrapper, source


NAME = r"[A-Za-z_]\w*"


def uses(line):
    """The names a line of `call` reads (after its `=` for an assignment)."""
    if line.startswith("del "):
        return set()
    rhs = (
        line.split(" = ", 1)[1] if re.match(rf"^{NAME}(, {NAME})*,? = ", line) else line
    )
    rhs = re.sub(r"'[^']*'", "", rhs)  # device strings
    return set(re.findall(NAME, rhs))


def defines(line):
    match = re.match(rf"^({NAME}(?:, {NAME})*),? = ", line)
    return set(match.group(1).split(", ")) if match else set()


def check_memory_lines(source, graph):
    """Every `del` comes after the last use of each name it frees, never frees an
    output, and no name is used after being freed."""
    body = call_body(source)
    outputs = {b.name for b in graph.graph_outputs if b is not None}
    freed = set()
    for k, line in enumerate(body):
        assert not (uses(line) & freed), f"{line!r} uses a freed name"
        if line.startswith("del "):
            names = set(line[4:].split(", "))
            assert not names & outputs, f"{line!r} frees an output"
            later = set().union(*(uses(rest) for rest in body[k + 1 :]))
            assert not names & later, f"{line!r} frees a name used later"
            freed |= names
    return body, freed


# --- the shape of the module ----------------------------------------------------------


def _two_outputs_and_a_fallback(x, y):
    a = torch.relu(x * y + 1)
    return torch.cumsum(a, dim=1) * 2, a.exp()


@pytest.mark.usefixtures("cumsum_falls_back")
def test_module_layout():
    x, y = randn(5, 7), randn(5, 7)
    wrapper, source = check_against_eager(_two_outputs_and_a_fallback, x, y)
    for line in (
        "import torch",
        "import triton",
        "import triton.language as tl",
        "from minductor import triton_helpers as helpers",
        "def call(args):",
        "def benchmark_compiled_module(times=10, repeat=10):",
        'if __name__ == "__main__":',
    ):
        assert line in source.splitlines()
    for name in wrapper.kernels.values():
        assert f"@triton.jit\ndef {name}(" in source
    assert (
        source.index("@triton.jit")
        < source.index("def call(")
        < source.index("def benchmark_compiled_module(")
    )


@pytest.mark.usefixtures("cumsum_falls_back")
def test_call_unpacks_and_clears_its_arguments():
    x, y = randn(5, 7), randn(5, 7)
    _, source = generate(_two_outputs_and_a_fallback, x, y)
    body = call_body(source)
    assert body[:2] == ["x_1, y_1 = args", "args.clear()"]
    args = [x, y]
    load_module(source).call(args)
    assert args == []  # the boxed convention: call owns its inputs


def test_single_input_unpacks_with_a_trailing_comma():
    _, source = generate(lambda x: (x + 1,), randn(3))
    assert call_body(source)[0] == "x_1, = args"
    assert call_body(source)[-1] == "return (buf0,)"


@pytest.mark.usefixtures("cumsum_falls_back")
def test_fallback_result_is_given_its_planned_layout_by_restride(monkeypatch):
    # views are lowered now; take t's lowering away to see a strided fallback result
    monkeypatch.delitem(lowerings, torch.ops.aten.t.default)
    x = randn(5, 7)
    wrapper, source = check_against_eager(lambda x: (x.t() * 2, torch.cumsum(x, 0)), x)
    body = call_body(source)
    t_op = codegen_op(torch.ops.aten.t.default)
    t_line = next(k for k, line in enumerate(body) if f"{t_op}(x_1)" in line)
    name = body[t_line].split(" =")[0]
    assert body[t_line + 1] == f"{name} = restride({name}, (7, 5), (1, 7))"
    assert sum(" = restride(" in line for line in body) == 2


def test_multi_output_lines_index_their_parent():
    x = randn(4, 5)
    _, source = check_against_eager(lambda x: tuple(torch.sort(x, 1)), x)
    body = call_body(source)
    assert "buf0 = aten.sort.default(x_1, 1)" in body
    assert "buf1 = buf0[0]" in body and "buf2 = buf0[1]" in body
    # only the caller reads the indices: an empty tensor from ATen would pass
    assert "buf2 = restride(buf2, (4, 5), (5, 1), aten_only=True)" in body
    assert body.index("del buf0") > body.index("buf2 = buf0[1]")


@pytest.mark.usefixtures("cumsum_falls_back")
def test_results_read_by_generated_code_are_not_aten_only(monkeypatch):
    monkeypatch.delitem(lowerings, torch.ops.aten.t.default)
    x = randn(5, 7)
    _, source = check_against_eager(lambda x: (x.t() * 2, torch.cumsum(x, 0)), x)
    lines = [line for line in call_body(source) if " = restride(" in line]
    flagged = [line for line in lines if "aten_only=True" in line]
    assert len(lines) == 2 and len(flagged) == 1  # the transpose feeds a kernel
    assert f"{codegen_op(torch.ops.aten.cumsum.default)}(" in source


def test_skipped_auxiliary_result_of_an_aten_kernel_passes_through():
    # On a CPU, embedding_bag of bfloat16 weights returns offset2bag empty, where its
    # meta function promises one element per index; only its backward reads it.
    weight = torch.randn(10, 3, dtype=torch.bfloat16, requires_grad=True)
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 9, 0]), torch.tensor([0, 3, 3])

    def bags(w, i, o):
        return torch.nn.functional.embedding_bag(i, w, o, mode="sum") * 2

    want = bags(weight, indices, offsets)
    (grad_want,) = torch.autograd.grad(want.float().square().sum(), weight)
    torch._dynamo.reset()
    got = torch.compile(bags, backend="minductor")(weight, indices, offsets)
    (grad_got,) = torch.autograd.grad(got.float().square().sum(), weight)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad_got, grad_want)


@pytest.mark.usefixtures("cumsum_falls_back")
def test_fallback_keyword_arguments_are_rendered():
    x = randn(4, 5)
    _, source = check_against_eager(
        lambda x: (torch.cumsum(x, 1, dtype=torch.float64) + 1,), x
    )
    cumsum = codegen_op(torch.ops.aten.cumsum.default)
    assert f"buf0 = {cumsum}(x_1, 1, dtype=torch.float64)" in call_body(
        source
    )


def test_removed_buffer_is_not_allocated():
    saved = config.realize_opcount_threshold
    config.realize_opcount_threshold = 3
    try:

        def f(x, y):
            t = (x * y).exp().sin().cos() + x
            return t + 1, t * 2

        wrapper, source = check_against_eager(f, randn(5, 7), randn(5, 7))
    finally:
        config.realize_opcount_threshold = saved
    body = call_body(source)
    assert "buf0" not in " ".join(body)
    assert sum(line.startswith("launch_") for line in body) == 1
    assert [type(line) for line in wrapper.lines] == [
        AllocateLine,
        AllocateLine,
        KernelCallLine,
        FreeLine,
    ]


def test_kernel_launch_line():
    a, b, c = (randn(33, 65) for _ in range(3))
    _, source = check_against_eager(lambda a, b, c: (a * b + c,), a, b, c)
    body = call_body(source)
    assert body[2] == (
        f"buf0 = empty_strided_{DEVICE.type}((33, 65), (65, 1), torch.float32)"
    )
    assert body[3] == (
        "# Topologically Sorted Source Nodes: [mul, add], "
        "Original ATen: [aten.mul, aten.add]"
    )
    assert body[4] == "launch_triton_poi_fused_add_mul_0(a_1, b_1, c_1, buf0)"
    # its site, defined once: sizes and blocks bound; the inputs' alignment checked
    # at each launch, the buffer call allocates not
    assert (
        "launch_triton_poi_fused_add_mul_0 = CallSite(triton_poi_fused_add_mul_0, "
        "(2145,), XBLOCK=1024, num_warps=4, check=(0, 1, 2))"
    ) in source.splitlines()


# --- deduplication --------------------------------------------------------------------


@pytest.mark.usefixtures("cumsum_falls_back")
def test_identical_kernels_are_defined_once_and_launched_twice():
    def f(x):
        a = x.sin()
        b = torch.cumsum(a, 0)
        return b.sin(), b  # b is kept: the second sin writes memory of its own

    x = randn(5, 6)
    wrapper, source = check_against_eager(f, x)
    assert list(wrapper.kernels.values()) == ["triton_poi_fused_sin_0"]
    assert source.count("@triton.jit") == 1
    launches = [line for line in call_body(source) if line.startswith("launch")]
    assert launches == [
        "launch_triton_poi_fused_sin_0(x_1, buf0)",
        "launch_triton_poi_fused_sin_0(buf1, buf2)",
    ]
    # one site for both: the input and the fallback's result are checked
    assert source.count(" = CallSite(") == 1
    assert "XBLOCK=32, num_warps=1, check=(0,))" in source


@pytest.mark.usefixtures("cumsum_falls_back")
def test_different_kernels_are_numbered_in_order():
    x = randn(5, 6)
    wrapper, source = check_against_eager(
        lambda x: (torch.cumsum(x.sin(), 0).cos() + 1,), x
    )
    assert list(wrapper.kernels.values()) == [
        "triton_poi_fused_sin_0",
        "triton_poi_fused_add_cos_1",
    ]


# --- the benchmark harness ------------------------------------------------------------


@pytest.mark.usefixtures("cumsum_falls_back")
def test_benchmark_compiled_module_runs():
    x, y = randn(5, 7), randn(5, 7)
    _, source = generate(_two_outputs_and_a_fallback, x, y)
    module = load_module(source)
    ms = module.benchmark_compiled_module(times=1, repeat=1)
    assert isinstance(ms, float) and ms > 0
    bench = source[source.index("def benchmark_compiled_module") :]
    assert (
        f"x_1 = rand_strided((5, 7), (7, 1), device='{DEVICE}', dtype=torch.float32)"
        in bench
    )


def test_benchmark_inputs_keep_strides_and_scalars():
    x = randn(6, 4).t()
    graph = GraphLowering(make_fx(lambda x: (x * 2,))(x), [x]).lower()
    source = WrapperCodeGen(graph, Scheduler(graph), interpret=INTERPRET).generate()
    assert (
        f"x_1 = rand_strided((4, 6), (1, 4), device='{DEVICE}', dtype=torch.float32)"
        in source
    )
    assert load_module(source).benchmark_compiled_module(times=1, repeat=1) > 0


# --- codegen_arg and codegen_op -------------------------------------------------------


@pytest.mark.parametrize(
    "value,text",
    [
        (torch.float32, "torch.float32"),
        (torch.int64, "torch.int64"),
        (torch.bool, "torch.bool"),
        (torch.strided, "torch.strided"),
        (torch.contiguous_format, "torch.contiguous_format"),
        (torch.channels_last, "torch.channels_last"),
        (torch.device("cpu"), "torch.device('cpu')"),
        (torch.device("cuda", 1), "torch.device('cuda:1')"),
        (inf, 'float("inf")'),
        (-inf, 'float("-inf")'),
        (1.5, "1.5"),
        (3, "3"),
        (True, "True"),
        (None, "None"),
        ("floor", "'floor'"),
        ([1, 2], "[1, 2]"),
        ((3,), "(3,)"),
        ((), "()"),
        ([(1, inf)], '[(1, float("inf"))]'),
    ],
    ids=repr,
)
def test_codegen_arg(value, text):
    assert codegen_arg(value) == text
    namespace = {"torch": torch}
    evaluated = eval(text, namespace)
    assert evaluated == value or repr(evaluated) == repr(value)


def test_codegen_arg_of_nan_and_buffers():
    assert codegen_arg(nan) == 'float("nan")'
    assert math.isnan(eval(codegen_arg(nan)))
    buf = InputBuffer("arg3_1", FixedLayout.contiguous(cpu, torch.float32, (2,)))
    assert codegen_arg(buf) == "arg3_1"
    assert codegen_arg([buf, (buf, 2)]) == "[arg3_1, (arg3_1, 2)]"


def test_codegen_op():
    assert codegen_op(torch.ops.aten.add.Tensor) == "aten.add.Tensor"
    prim = torch.ops.prims.convert_element_type.default
    assert codegen_op(prim) == "torch.ops.prims.convert_element_type.default"
    assert eval(codegen_op(prim), {"torch": torch}) is prim


def test_line_records_report_their_uses():
    x = randn(4, 5)
    wrapper, _ = generate(lambda x: tuple(torch.sort(x, 1)), x)
    extern, first, second = [
        line
        for line in wrapper.lines
        if isinstance(line, (ExternCallLine, MultiOutputLine))
    ]
    assert extern.uses() == ("x_1",)
    assert first.uses() == second.uses() == ("buf0",)


# --- buffer reuse ---------------------------------------------------------------------


def test_call_runs_on_its_gpu_and_allocations_name_a_device_only_when_needed():
    a = randn(3, 5)
    _, source = check_against_eager(lambda a: (a * 2,), a)
    guarded = "    with torch.cuda._DeviceGuard(0):\n        buf0 = empty_strided_cuda("
    assert (guarded in source) == (DEVICE.type == "cuda")
    # with tensors on several GPUs, `call` has no one device: allocations name theirs
    layout = FixedLayout(torch.device("cuda", 1), torch.float16, (2, 3), (3, 1))
    assert AllocateLine("buf4", layout, on_current_device=False).codegen() == (
        "buf4 = empty_strided((2, 3), (3, 1), device='cuda:1', dtype=torch.float16)"
    )
    assert AllocateLine("buf4", layout).codegen() == (
        "buf4 = empty_strided_cuda((2, 3), (3, 1), torch.float16)"
    )


def test_same_kernel_text_over_other_dtypes_is_another_kernel():
    # max-pooling's values and indices, both copied into eager's channels-last
    # strides: one text, but a compiled kernel is specialized for float or int64
    y = torch.randn(2, 3, 6, 5).to(memory_format=torch.channels_last)
    fn = lambda y: torch.nn.functional.max_pool2d(y, 3, 2, 1, return_indices=True)  # noqa: E731
    torch._dynamo.reset()
    with record_compiled() as graphs:
        values, indices = torch.compile(fn, backend="minductor")(y)
    expected = fn(y)
    torch.testing.assert_close(values, expected[0])
    assert torch.equal(indices, expected[1])
    names = graphs[0].kernel_names
    assert len(names) == len(set(names)) == 3  # the pooling, and a copy per dtype


def test_ops_with_an_unambiguous_torch_binding_are_called_through_it():
    aten = torch.ops.aten
    # one overload (and its out= variant): the binding can only mean this op
    assert binding(aten.convolution.default) is torch.convolution
    assert codegen_op(aten.convolution.default) == "torch.convolution"
    # cumsum: bound where this torch gives it no overloads but out= (2.13 does, 2.11
    # also has the Dimname ones)
    only = set(aten.cumsum.overloads()) <= {"default", "out"}
    assert codegen_op(aten.cumsum.default) == (
        "torch.cumsum" if only else "aten.cumsum.default"
    )
    # several overloads: the binding would choose again, from the arguments
    assert binding(aten.add.Tensor) is None
    assert codegen_op(aten.add.Tensor) == "aten.add.Tensor"
    assert codegen_op(aten.convolution.out) == "aten.convolution.out"
    # no binding in torch's namespace, or not an ATen op
    assert codegen_op(aten.convolution_backward.default) == (
        "aten.convolution_backward.default"
    )
    assert binding(torch.ops.prims.convert_element_type.default) is None


def test_a_bound_call_gives_what_the_op_gives():
    torch._dynamo.reset()
    x = torch.randn(2, 3, 7, 5)
    w = torch.randn(4, 3, 3, 3)
    fn = lambda x, w: F.conv2d(x, w, stride=2, padding=1).cumsum(1)  # noqa: E731
    with record_compiled() as graphs:
        got = torch.compile(fn, backend="minductor")(x, w)
    torch.testing.assert_close(got, fn(x, w), atol=1e-5, rtol=1e-5)
    # the code, not the comments (which name the original op, aten.convolution)
    code = [line for line in call_body(graphs[0].source) if not line.startswith("#")]
    call = "\n".join(code)
    assert "torch.convolution(" in call and "aten.convolution" not in call


def test_numbers_moved_to_the_gpu_go_through_number_on_and_tensors_through_to():
    # "meta" stands in for a GPU. A 0-dim CPU input read as a number is read on the
    # host (number_on, no copy that waits for the GPU); a CPU index tensor is copied
    x, idx = torch.empty(5, 3, device="meta"), torch.tensor([1, 3])
    scale = torch.tensor(0.5, dtype=torch.float64)

    def f(x, s, i):
        return x * s.float(), x[i]

    graph = GraphLowering(make_fx(f)(x, scale, idx), [x, scale, idx]).lower()
    body = WrapperCodeGen(graph, Scheduler(graph), interpret=True).generate_call()
    moved = [line.strip() for line in body if line.strip().startswith(("s_1 =", "i_1 ="))]
    assert moved == [
        "i_1 = i_1.to('meta', memory_format=torch.contiguous_format)",
        "s_1 = number_on(s_1, 'meta')",
    ]


# ------------------------------------------------------------------------------------
# Sizes and numbers read from the data (Dynamo's unbacked symbols, u0): the wrapper
# binds sizes from the inputs only, so such a graph runs with ATen, says why, and
# matches eager; nothing on the way (index types, reduction kinds, fusion scores) may
# ask for a hint it does not have.


def _count_scales(x, w):
    n = (x > 0).sum().item()  # a number read from the data, used in a kernel
    h = torch.tanh(x @ w)
    return h * n + 1, h.sum()


def _picked_rows(x):
    rows = torch.nonzero(x[:, 0] > 0).squeeze(1)  # a size read from the data
    return torch.sin(x[rows]) * 2


def _masked_sum(x):
    return (x[x > 0] * 3).sum(), x.cos()  # a reduction over a data-dependent length


def _first_n(x):
    n = (x > 0).sum().item()
    return x.view(-1)[:n].exp()  # a slice whose length is read from the data


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (_count_scales, [(8, 16), (16, 16)]),
        (_picked_rows, [(9, 5)]),
        (_masked_sum, [(7, 13)]),
        (_first_n, [(6, 7)]),
    ],
    ids=["item in a kernel", "nonzero rows", "masked sum", "slice of item length"],
)
def test_sizes_read_from_the_data_run_with_aten_and_match_eager(fn, shapes, caplog):
    import torch._dynamo.config as dynamo_config

    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    torch._dynamo.reset()
    with (
        dynamo_config.patch(
            capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
        ),
        caplog.at_level("INFO", logger="minductor"),
    ):
        got = torch.compile(fn, backend="minductor", fullgraph=True)(*args)
    expected = fn(*args)
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    assert "running graph with ATen" in caplog.text  # with its reason


@pytest.mark.parametrize("on", [True, False])
def test_a_module_compiled_with_torchs_launcher_off_says_so_on_its_gpu_sites(on):
    """Chapter 21's knob is read at compile time and written into the module, so that
    two compiles that differ only in it never share one."""
    x = randn(33, 65)
    sources = {}
    with config.patch({"static_launch": on}):
        for interpret in (False, True):
            graph = GraphLowering(make_fx(lambda a: (a.sin(), a.sum(-1)))(x), [x])
            graph.lower()
            wrapper = WrapperCodeGen(graph, Scheduler(graph), interpret=interpret)
            sources[interpret] = wrapper.generate()
    sites = [ln for ln in sources[False].splitlines() if " = CallSite(" in ln]
    assert len(sites) == 1  # sin and sum in one kernel
    assert all(ln.endswith(", launcher='triton')") == (not on) for ln in sites)
    assert "launcher=" not in sources[True]  # the interpreter launches as it must
