"""Chapter 1: the backend, its registration, compile_fx and its hand-backs to ATen."""

import dataclasses
import importlib.metadata
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import minductor
from minductor.capture import (
    CompiledGraph,
    _observers,
    compile_fx,
    minductor_backend,
    record_compiled,
    run_and_get_code,
)
from minductor.config import config, settings
from minductor.runtime import interpret_mode

pytestmark = pytest.mark.ch01

REPO = Path(__file__).resolve().parent.parent
# compiled kernels run on CPU tensors in the interpreter, or on a GPU
DEVICE = "cpu" if interpret_mode() else "cuda"


def randn(*shape, **kwargs):
    return torch.randn(*shape, device=DEVICE, **kwargs)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def f(a, b, c):
    return a * b + c


def test_backend_works_by_name_after_import():
    a, b, c = (randn(7, 9) for _ in range(3))
    with record_compiled() as graphs:
        out = torch.compile(f, backend="minductor")(a, b, c)
    torch.testing.assert_close(out, f(a, b, c))
    (graph,) = graphs
    assert isinstance(graph, CompiledGraph)
    assert graph.kernel_names == ["triton_poi_fused_add_mul_0"]
    assert graph.fallbacks == []
    assert os.path.exists(graph.path) and Path(graph.path).read_text() == graph.source


def test_compiled_function_is_reused_without_recompiling():
    compiled = torch.compile(f, backend="minductor")
    a, b, c = (randn(4, 5) for _ in range(3))
    with record_compiled() as graphs:
        compiled(a, b, c)
        a2, b2, c2 = (randn(4, 5) for _ in range(3))
        out = compiled(a2, b2, c2)
    assert len(graphs) == 1
    torch.testing.assert_close(out, f(a2, b2, c2))


def test_run_and_get_code_returns_result_and_sources():
    x = randn(5, 6)
    out, sources = run_and_get_code(
        torch.compile(lambda x: x.sin() * 2, backend="minductor"), x
    )
    torch.testing.assert_close(out, x.sin() * 2)
    (source,) = sources
    assert "def call(args):" in source and "@triton.jit" in source
    assert "triton_poi_fused_mul_sin_0" in source


def test_record_compiled_stops_recording_after_the_block():
    before = list(_observers)
    with record_compiled() as found:
        torch.compile(lambda x: x + 1, backend="minductor")(randn(3))
    assert len(found) == 1
    assert _observers == before
    torch.compile(lambda x: x * 3, backend="minductor")(randn(3))
    assert len(found) == 1  # nothing recorded after the block


def test_record_compiled_nests():
    saved = list(_observers)
    compiled = torch.compile(lambda x: x + 1, backend="minductor")
    try:
        with record_compiled() as outer:
            with record_compiled() as inner:
                compiled(randn(3))
            assert len(inner) == 1
            torch.compile(lambda x: x - 1, backend="minductor")(randn(3))
        assert len(outer) == 2 and outer[0] is inner[0] and len(inner) == 1
        assert _observers == saved
    finally:
        _observers[:] = saved


def test_record_compiled_unregisters_after_an_exception():
    before = list(_observers)
    with pytest.raises(ValueError):
        with record_compiled():
            raise ValueError
    assert _observers == before


@pytest.mark.usefixtures("cumsum_falls_back")
def test_graph_with_a_fallback_lists_it():
    x = randn(4, 5)
    with record_compiled() as graphs:
        out = torch.compile(
            lambda x: torch.cumsum(x.sin(), 0) + 1, backend="minductor"
        )(x)
    torch.testing.assert_close(out, torch.cumsum(x.sin(), 0) + 1)
    assert graphs[0].fallbacks == ["aten.cumsum.default"]
    assert len(graphs[0].kernel_names) == 2


# --- inference and training -----------------------------------------------------------


def gelu_mul(x, bias):
    return torch.nn.functional.gelu(x + bias) * x


def test_no_grad_function_is_one_inference_graph():
    x, bias = randn(5, 7, requires_grad=True), randn(7, requires_grad=True)
    compiled = torch.compile(gelu_mul, backend="minductor")
    with torch.no_grad(), record_compiled() as graphs:
        out = compiled(x, bias)
    assert not out.requires_grad
    assert len(graphs) == 1
    with torch.no_grad():
        torch.testing.assert_close(out, gelu_mul(x, bias))


def test_training_forward_and_backward_are_both_compiled(caplog):
    x, bias = randn(5, 7, requires_grad=True), randn(7, requires_grad=True)
    compiled = torch.compile(gelu_mul, backend="minductor")
    with record_compiled() as graphs, caplog.at_level(logging.INFO, logger="minductor"):
        out = compiled(x, bias)
        assert out.requires_grad
        out.sum().backward()
    grads = x.grad.clone(), bias.grad.clone()
    x.grad = bias.grad = None
    expected = gelu_mul(x, bias)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads[0], x.grad)
    torch.testing.assert_close(grads[1], bias.grad)
    assert len(graphs) == 2  # the forward, then the backward
    assert graphs[1].kernel_names and graphs[1].fallbacks == []
    assert not any("running graph with ATen" in r.getMessage() for r in caplog.records)


def test_input_that_does_not_require_grad_gets_no_gradient():
    x, w = randn(6), randn(6, requires_grad=True)
    out = torch.compile(lambda x, w: (x * w).sin(), backend="minductor")(x, w)
    out.sum().backward()
    torch.testing.assert_close(w.grad, x * torch.cos(x * w.detach()))
    assert x.grad is None


# --- hand-backs to ATen ---------------------------------------------------------------


def test_dynamic_shapes_compile_once_for_every_size(caplog):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x.exp() + 1, backend="minductor", dynamic=True)
    with record_compiled() as graphs, caplog.at_level(logging.INFO, logger="minductor"):
        for n in (3, 5, 11):
            x = randn(n, 2)
            torch.testing.assert_close(compiled(x), x.exp() + 1)
    assert len(graphs) == 1  # one artifact served all three sizes
    assert not any("running graph with ATen" in r.getMessage() for r in caplog.records)


def test_graph_on_an_unsupported_device_runs_with_aten():
    gm = make_fx(lambda x: (x * 2 + 1,))(randn(3))
    meta = [torch.empty(3, device="meta")]
    with record_compiled() as graphs:
        fn = compile_fx(gm, meta)
    assert not isinstance(fn, CompiledGraph) and graphs == []
    (out,) = fn([torch.tensor([1.0, 2.0, 3.0])])  # boxed: a list of inputs
    torch.testing.assert_close(out, torch.tensor([3.0, 5.0, 7.0]))


def test_compile_fx_returns_a_boxed_compiled_graph():
    x = randn(3, 4)
    gm = make_fx(lambda x: (x.cos(),))(x)
    compiled = compile_fx(gm, [x])
    assert isinstance(compiled, CompiledGraph) and compiled._boxed_call
    args = [x]
    (out,) = compiled(args)
    assert args == []
    torch.testing.assert_close(out, x.cos())


def test_debug_level_two_logs_the_generated_module(caplog):
    saved = dataclasses.asdict(config)
    config.debug = 2
    try:
        with caplog.at_level(logging.DEBUG, logger="minductor"):
            torch.compile(lambda x: x * 5, backend="minductor")(randn(3))
    finally:
        for key, value in saved.items():
            setattr(config, key, value)
    logged = [r.getMessage() for r in caplog.records if "generated" in r.getMessage()]
    assert logged and "def call(args):" in logged[0]


# --- registration ---------------------------------------------------------------------


def test_backend_is_registered_exactly_once():
    from torch._dynamo.backends import registry

    assert "minductor" in torch._dynamo.list_backends()
    torch._dynamo.list_backends()  # entry-point discovery must not re-register
    assert registry._COMPILER_FNS["minductor"] is minductor_backend
    assert registry.lookup_backend("minductor") is minductor_backend
    minductor._register()  # importing again (or twice) is harmless
    assert registry._COMPILER_FNS["minductor"] is minductor_backend
    assert sorted(torch._dynamo.list_backends()).count("minductor") == 1


def test_installed_entry_point_names_the_backend():
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    if "minductor" not in eps.names:
        pytest.skip("minductor is not pip-installed here (no entry point)")
    (ep,) = [ep for ep in eps if ep.name == "minductor"]
    assert ep.value == "minductor.capture:minductor_backend"
    assert ep.load() is minductor_backend


DISCOVERY = """
import importlib.metadata as md
from importlib.metadata import EntryPoint, EntryPoints

ep = EntryPoint("minductor", "minductor.capture:minductor_backend",
                "torch_dynamo_backends")
real = md.entry_points
md.entry_points = lambda **kw: (EntryPoints([ep])
                                if kw.get("group") == "torch_dynamo_backends"
                                else real(**kw))

import sys
import torch
from torch._dynamo.backends import registry

assert "minductor" not in sys.modules
assert "minductor" in torch._dynamo.list_backends()   # discovered, not imported
assert "minductor" not in registry._COMPILER_FNS
x = torch.randn(5)
out = torch.compile(lambda x: x * 2 + 1, backend="minductor")(x)  # loads it
assert torch.allclose(out, x * 2 + 1)
import minductor
from minductor.capture import minductor_backend
assert registry._COMPILER_FNS["minductor"] is minductor_backend
minductor._register()
print("OK")
"""


def test_entry_point_discovery_then_import_registers_once():
    """The path Dynamo takes for an installed package, with the entry point faked."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DISCOVERY)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")


# --- modes and options ------------------------------------------------------------------


def _chain(x):
    return torch.softmax(x.sin(), -1) * 2  # max, sum and the rest: one kernel, fused


def test_options_set_config_for_this_compile_only_and_reach_the_backward():
    x = torch.randn(5, 3, requires_grad=True)
    counts = {}
    for fusion in (64, 1):
        torch._dynamo.reset()
        with record_compiled() as graphs:
            compiled = torch.compile(
                _chain, backend="minductor", options={"max_fusion_size": fusion}
            )
            out = compiled(x)
            out.sum().backward()
        torch.testing.assert_close(out, _chain(x))
        counts[fusion] = [len(g.kernel_names) for g in graphs]  # forward, backward
    assert counts[64] == [1, 1]
    assert counts[1][0] > 1 and counts[1][1] > 1  # both graphs compiled unfused
    assert config.max_fusion_size == 64  # restored


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_every_mode_compiles_and_runs_right(mode, caplog):
    torch._dynamo.reset()
    x = torch.randn(4, 6)
    with caplog.at_level(logging.WARNING, logger="minductor"):
        out = torch.compile(_chain, backend="minductor", mode=mode)(x)
    torch.testing.assert_close(out, _chain(x))
    said = [r.getMessage() for r in caplog.records if "does not build" in r.getMessage()]
    assert said == []  # every mode is built: CUDA graphs (ch. 22), autotuning (ch. 21)


def test_modes_and_options_set_cudagraphs_and_autotuning():
    assert settings("reduce-overhead", None) == {"cudagraphs": True}
    both = {"cudagraphs": True, "max_autotune": True}
    assert settings("max-autotune", None) == both
    assert settings("max-autotune-no-cudagraphs", None) == {"max_autotune": True}
    assert settings(None, {"cudagraphs": True}) == {"cudagraphs": True}
    # the caller's options win over the mode's
    assert settings("reduce-overhead", {"cudagraphs": False}) == {"cudagraphs": False}
    with pytest.raises(TypeError, match="takes a bool"):
        settings(None, {"cudagraphs": 1})


def test_unknown_option_or_mode_or_wrong_type_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown option 'max_fusion'.*max_fusion_size"):
        settings(None, {"max_fusion": 2})
    with pytest.raises(ValueError, match="unknown mode 'fast'.*reduce-overhead"):
        settings("fast", None)
    with pytest.raises(TypeError, match="takes a int, got True"):
        settings(None, {"max_fusion_size": True})
    torch._dynamo.reset()
    compiled = torch.compile(_chain, backend="minductor", options={"no_such": 1})
    with pytest.raises(Exception, match="unknown option 'no_such'"):
        compiled(torch.randn(3))


@torch.library.custom_op("minductor_test::doubled", mutates_args=())
def _doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_doubled.register_fake
def _(x):
    return torch.empty_like(x)


def _broken_formula(ctx, grad):  # like a PyTorch release's buggy derivative
    # the error is raised inside PyTorch's code, as such a bug's would be
    torch._check(False, lambda: "formula() got multiple values for argument 'scale'")


_doubled.register_autograd(_broken_formula)


def test_a_graph_pytorch_cannot_trace_runs_eagerly(caplog):
    # AOTAutograd traces the backward through the op's formula, which raises: not an
    # error of ours, so the graph runs op by op, and says so
    torch._dynamo.reset()
    x = torch.randn(5, requires_grad=True)
    fn = lambda x: _doubled(x.sin()) + 1  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="minductor"), record_compiled() as g:
        got = torch.compile(fn, backend="minductor")(x)
    torch.testing.assert_close(got, fn(x))
    assert g == []  # nothing compiled
    assert "PyTorch could not trace this graph" in caplog.text
    assert "got multiple values for argument 'scale'" in caplog.text
    with pytest.raises(RuntimeError, match="multiple values"):
        got.sum().backward()  # what eager does with the same formula


def test_an_error_raised_outside_pytorch_propagates():
    # the same failure, raised by code that is not PyTorch's (a test, an exercise)
    @torch.library.custom_op("minductor_test::tripled", mutates_args=())
    def tripled(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    tripled.register_fake(lambda x: torch.empty_like(x))

    def formula(ctx, grad):
        raise NotImplementedError("an exercise's stub")

    tripled.register_autograd(formula)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="an exercise's stub"):
        torch.compile(tripled, backend="minductor")(torch.randn(3, requires_grad=True))


def test_an_error_in_our_own_code_still_propagates(monkeypatch):
    from minductor.lowering import lowerings

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in a lowering")

    monkeypatch.setitem(lowerings, torch.ops.aten.sin.default, broken)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="a bug in a lowering"):
        torch.compile(lambda x: x.sin() + 1, backend="minductor")(torch.randn(3))
