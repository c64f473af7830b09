"""Chapter 0: the tiny compiler (minductor/tiny.py) against eager, its one kernel, and
every refusal with its logged reason."""

import collections
import logging
import re
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (Triton's interpreter on a machine without a GPU)
from minductor import tiny

pytestmark = pytest.mark.ch00
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
aten = torch.ops.aten


def compile_and_run(fn, *args, **options):
    """fn compiled by the tiny backend and run once: its result, what was recorded."""
    torch._dynamo.reset()
    with tiny.recording() as compiled:
        result = torch.compile(fn, backend="minductor_tiny", **options)(*args)
    return result, compiled


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=dtype, device=DEVICE)


def f(x, y):
    return torch.relu(torch.sin(x) * y + 1)


@pytest.mark.parametrize(
    "x_shape, y_shape",
    [
        ((1,), (1,)),
        ((7,), (7,)),
        ((1025,), (1025,)),  # crosses a block of 1024
        ((), ()),
        ((4, 5), (5,)),  # a bias
        ((2, 3), ()),  # a 0-d tensor against a matrix
        ((3, 1, 5), (1, 4, 1)),  # both broadcast
        ((1, 1), (1,)),
        ((0, 5), (5,)),  # empty: no launch
    ],
)
def test_a_chain_matches_eager_as_one_kernel(x_shape, y_shape):
    x, y = randn(*x_shape), randn(*y_shape)
    (result, compiled) = compile_and_run(f, x, y)
    torch.testing.assert_close(result, f(x, y))
    assert [c.reason for c in compiled] == [None]
    assert compiled[0].source.count("@triton.jit") == 1


def test_the_kernel_and_call_of_the_running_example():
    x, y = randn(4, 5), randn(5)
    _, compiled = compile_and_run(f, x, y)
    source = compiled[0].source
    kernel = source[source.index("@triton.jit") : source.index("\n\n\ndef call")]
    assert kernel.splitlines()[1:] == [
        "def triton_poi_fused_add_mul_relu_sin_0"
        "(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):",
        "    xoffset = tl.program_id(0) * XBLOCK",
        "    xindex = xoffset + tl.arange(0, XBLOCK)",
        "    xmask = xindex < xnumel",
        "    tmp0 = tl.load(in_ptr0 + (xindex), xmask)",
        "    tmp1 = tl.sin(tmp0)",
        "    tmp2 = tl.load(in_ptr1 + (xindex % 5), xmask)",
        "    tmp3 = tmp1 * tmp2",
        "    tmp4 = tmp3 + 1.0",
        "    tmp5 = tl.where((tmp4 > 0.0) | (tmp4 != tmp4), tmp4, 0.0)",
        "    tl.store(out_ptr0 + (xindex), tmp5, xmask)",
    ]
    call = source[source.index("def call") :]
    assert "buf0 = torch.empty_strided((4, 5), (5, 1), dtype=torch.float32" in call
    assert "[(1,)](arg0_1, arg1_1, buf0, 20, XBLOCK=1024)" in call
    assert "buf1" not in call  # no intermediate buffer: sin, mul, add live in registers


def test_two_outputs_of_a_longer_chain_share_one_kernel():
    def chain(x, w):
        a = torch.tanh(x) * w - torch.sigmoid(x)
        b = torch.where(a > 0, torch.nn.functional.gelu(a), 0.5 * a)
        return b.exp(), torch.maximum(a, torch.cos(b))

    x, w = randn(33, 65), randn(65)
    result, compiled = compile_and_run(chain, x, w)
    for got, want in zip(result, chain(x, w)):
        torch.testing.assert_close(got, want)
    source = compiled[0].source
    assert source.count("@triton.jit") == 1 and source.count("tl.store(") == 2
    assert source.count("tl.load(") == 2  # x and w, each once


def nan_and_friends(*shape):
    x = randn(*shape) * 3
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    x.view(-1)[: len(special)] = special[: x.numel()]
    return x


# every row of the table, against eager on values that include NaN, inf, 0 and big ones
TABLE_CASES = {
    aten.add.Tensor: lambda a, b: a + b,
    aten.sub.Tensor: lambda a, b: a - b,
    aten.rsub.Scalar: lambda a, b: 1 - a,
    aten.mul.Tensor: lambda a, b: a * b,
    aten.div.Tensor: lambda a, b: a / b,
    aten.neg.default: lambda a, b: -a,
    aten.exp.default: lambda a, b: torch.exp(a),
    aten.sin.default: lambda a, b: torch.sin(a),
    aten.cos.default: lambda a, b: torch.cos(a),
    aten.maximum.default: lambda a, b: torch.maximum(a, b),
    aten.relu.default: lambda a, b: torch.relu(a),
    aten.sigmoid.default: lambda a, b: torch.sigmoid(a * 40),
    aten.tanh.default: lambda a, b: torch.tanh(a * 40),
    aten.gelu.default: lambda a, b: torch.nn.functional.gelu(a),
    aten.gt.Tensor: lambda a, b: a > b,
    aten.gt.Scalar: lambda a, b: a > 0.5,
    aten.lt.Tensor: lambda a, b: a < b,
    aten.lt.Scalar: lambda a, b: a < -0.5,
    aten.where.self: lambda a, b: torch.where(a > b, a, b * 2),
    aten.scalar_tensor.default: lambda a, b: torch.where(a > 0, a, -1.5),
}


def test_the_cases_cover_the_table():
    assert set(TABLE_CASES) == set(tiny.LOWERINGS)


@pytest.mark.parametrize("op", list(TABLE_CASES), ids=str)
def test_each_op_of_the_table_matches_eager(op):
    fn = TABLE_CASES[op]
    a, b = nan_and_friends(7, 3), nan_and_friends(3).flip(0)  # a NaN meets a number
    if op is aten.gelu.default:  # eager's CPU gelu(inf) is nan; the formula gives inf
        a, b = a.nan_to_num(nan=float("nan"), posinf=30.0, neginf=-30.0), b
    result, compiled = compile_and_run(fn, a, b)
    assert compiled[0].reason is None
    assert op in {n.target for n in compiled[0].graph.graph.nodes}
    torch.testing.assert_close(result, fn(a, b), equal_nan=True)


@pytest.mark.parametrize(
    "make",
    [
        lambda: randn(5, 4).t(),  # transposed
        lambda: randn(9, 8)[1:, ::2],  # a strided view with a storage offset
        lambda: randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        lambda: randn(1, 5).expand(3, 5),  # stride 0
    ],
    ids=["transposed", "sliced", "channels_last", "expanded"],
)
def test_any_strides_in_and_eager_strides_out(make):
    x = make()
    y = randn(x.shape[-1])
    result, compiled = compile_and_run(f, x, y)
    assert compiled[0].reason is None
    want = f(x, y)
    torch.testing.assert_close(result, want)
    assert result.stride() == want.stride()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_in_and_out_math_in_float32(dtype):
    """Loaded, converted to float32, computed, rounded once at the store: eager rounds
    after every op, so the reference is the float32 computation, rounded once."""
    x, y, z = randn(1025, dtype=dtype), randn(1025, dtype=dtype), randn(1025)
    result, compiled = compile_and_run(lambda x, y: f(x, y) * 0.3, x, y)
    assert result.dtype == dtype
    once = (f(x.float(), y.float()) * torch.tensor(0.3, dtype=dtype).item()).to(dtype)
    torch.testing.assert_close(result, once)  # the dtype's tolerance: an ulp or so
    torch.testing.assert_close(result, f(x, y) * 0.3, atol=2e-2, rtol=0)
    source = compiled[0].source
    assert ".to(tl.float32)" in source and f".to(tl.{str(dtype)[6:]})" in source
    mixed, _ = compile_and_run(f, x, z)  # float16 * float32 promotes
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, f(x.float(), z))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_number_is_rounded_to_the_dtype_it_meets(dtype):
    """Eager compares float16 0.3 (0.30005) with 0.3 rounded to float16: not greater.
    Compared with float32's 0.3 it would be."""
    x = torch.tensor([0.3, 0.1, 0.7, -2.5], dtype=dtype, device=DEVICE)
    result, compiled = compile_and_run(lambda x: (x > 0.3, x < 0.1), x)
    assert compiled[0].reason is None
    for got, want in zip(result, (x > 0.3, x < 0.1)):
        assert torch.equal(got, want)


def test_a_shared_producer_runs_once_per_handler():
    """A chain of diamonds: without `once`, each level would double the calls."""

    def diamonds(x):
        for _ in range(12):
            x = torch.sin(x) * torch.cos(x)
        return x

    class Count:
        def __init__(self):
            self.calls = collections.Counter()

        def __getattr__(self, name):
            def op(*args):
                self.calls[name] += 1
                return name

            return op

    gm = make_fx(diamonds, tracing_mode="fake")(torch.randn(8))
    count = Count()
    with tiny.set_handler(count):
        tiny.fused_body(gm)("xindex")
    assert count.calls["sin"] == count.calls["cos"] == count.calls["mul"] == 12


@pytest.mark.parametrize(
    "shape, strides, out_shape, expected",
    [
        ((4, 5), (5, 1), (4, 5), "xindex"),
        ((5,), (1,), (4, 5), "xindex % 5"),
        ((4, 1), (1, 1), (4, 5), "xindex // 5"),
        ((4, 5), (1, 4), (4, 5), "xindex // 5 + xindex % 5 * 4"),
        ((), (), (4, 5), "0"),
        (
            (2, 3, 4),
            (12, 1, 3),
            (2, 3, 4),
            "xindex // 12 * 12 + xindex // 4 % 3 + xindex % 4 * 3",
        ),
    ],
)
def test_index_of(shape, strides, out_shape, expected):
    assert tiny.index_of("xindex", shape, strides, out_shape) == expected


def refusal(fn, *args, expect: str, caplog, **options):
    """fn runs eagerly, for the expected reason, which the log says too."""
    caplog.set_level(logging.INFO, logger="minductor")
    result, compiled = compile_and_run(fn, *args, **options)
    reasons = [c.reason for c in compiled]
    assert any(r and expect in r for r in reasons), reasons
    logged = [r.getMessage() for r in caplog.records if r.name == "minductor"]
    assert any(expect in line and "eagerly" in line for line in logged), logged
    return result


REFUSALS = {
    "int input": (
        lambda x, i: x + i,
        lambda: (randn(5), torch.arange(5, device=DEVICE)),
        "dtype torch.int64",
    ),
    "bool input": (
        lambda m, x: torch.where(m, x, 0.0),
        lambda: (randn(5) > 0, randn(5)),
        "dtype torch.bool",
    ),
    "float64": (
        lambda x: x.sin(),
        lambda: (randn(5, dtype=torch.float64),),
        "dtype torch.float64",
    ),
    "not pointwise": (
        lambda x: torch.cumsum(x.sin(), 0),
        lambda: (randn(5),),
        "aten.cumsum.default is not in the table",
    ),
    "alpha": (
        lambda x, y: torch.add(x, y, alpha=2),
        lambda: (randn(5), randn(5)),
        "keyword arguments {'alpha': 2}",
    ),
    "gelu tanh": (
        lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
        lambda: (randn(5),),
        "approximate",
    ),
    "bool math": (lambda x: (x > 0) * x, lambda: (randn(5),), "computes with a bool"),
    "half compare": (
        lambda h: (h + h) > 0.5,
        lambda: (randn(5, dtype=torch.float16),),
        "compares a torch.float16",
    ),
    "two shapes": (
        lambda x, b: (x.sin(), x + b),
        lambda: (randn(5), randn(4, 5)),
        "outputs of different shapes",
    ),
    "no inputs": (lambda: torch.ones(3) * 2, lambda: (), "no tensor inputs"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_run_eagerly_and_log_why(case, caplog):
    fn, make_args, expect = REFUSALS[case]
    args = make_args()
    result = refusal(fn, *args, expect=expect, caplog=caplog)
    want = fn(*args)
    for got, w in zip(result, want) if isinstance(want, tuple) else [(result, want)]:
        torch.testing.assert_close(got, w)


def test_training_runs_eagerly_with_its_gradients(caplog):
    x = randn(4, 5).requires_grad_()
    result = refusal(torch.sin, x, expect="requires grad", caplog=caplog)
    result.sum().backward()
    torch.testing.assert_close(x.grad, torch.cos(x.detach()))
    with torch.no_grad():  # without grad mode, the same graph compiles
        _, compiled = compile_and_run(torch.sin, x)
    assert compiled[0].reason is None


def test_sizes_that_change_run_eagerly(caplog):
    caplog.set_level(logging.INFO, logger="minductor")
    torch._dynamo.reset()
    g = torch.compile(lambda x: x.sin() + 1, backend="minductor_tiny")
    with tiny.recording() as compiled:
        g(randn(4))
        second = g(x := randn(6))
    torch.testing.assert_close(second, x.sin() + 1)
    assert compiled[0].reason is None
    assert "SymInt, not a tensor" in compiled[1].reason  # Dynamo made the size symbolic
    with tiny.recording() as compiled:
        torch.compile(lambda x: x.sin(), backend="minductor_tiny", dynamic=True)(x)
    assert "symbolic sizes" in compiled[0].reason or "SymInt" in compiled[0].reason


def test_cpu_tensors_need_the_interpreter(caplog, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.randn(5)
    result = refusal(torch.sin, x, expect="TRITON_INTERPRET=1", caplog=caplog)
    torch.testing.assert_close(result, torch.sin(x))


def test_refusals_seen_only_in_graphs_dynamo_does_not_make():
    def why(fn, *args):
        return tiny.why_not(make_fx(fn, tracing_mode="fake")(*args))

    assert why(lambda x: (x, x.sin()), randn(3)) == (
        "an output is not computed by the graph"
    )
    huge = randn(1).expand(2**31)  # 2**31 elements, one of memory
    assert "too large for int32" in why(lambda x: x.sin(), huge)
    assert why(lambda x: x.sin(), randn(3)) is None


@pytest.mark.cuda
def test_tensors_on_two_devices_run_eagerly(caplog):
    x, y = torch.randn(5, device="cuda"), torch.randn((), device="cpu")
    result = refusal(lambda x, y: x * y, x, y, expect="devices", caplog=caplog)
    torch.testing.assert_close(result, x * y)


def test_registered_by_import_and_by_entry_point():
    assert "minductor_tiny" in torch._dynamo.list_backends()
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    entry = re.search(r'^minductor_tiny = "([\w.]+):(\w+)"$', pyproject, re.M)
    assert entry and entry.groups() == ("minductor.tiny", "tiny_backend")


def test_it_stands_alone():
    """The tiny compiler imports nothing of minductor's and registers no pass."""
    source = Path(tiny.__file__).read_text()
    assert not re.search(r"^\s*(from|import) minductor", source, re.M)
    assert "PIPELINE" not in source
