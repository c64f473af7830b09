"""Compiled graphs kept on disk (chapter 27): hits give eager's results bit for bit,
every fact that decides the code is in the key, and a damaged cache recompiles."""

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import cache
from minductor.capture import record_compiled
from minductor.config import config
from minductor.lowering import lowerings
from minductor.runtime import WarmUp

pytestmark = [pytest.mark.e2e, pytest.mark.ch27]


@pytest.fixture
def on(tmp_path):
    """The graph cache on, in an empty directory."""
    with config.patch({"graph_cache": True, "cache_dir": str(tmp_path)}):
        yield tmp_path


def run(fn, *args, options=None):
    """fn compiled afresh by Dynamo: (result, the graphs compiled, the cache's counts)."""
    torch._dynamo.reset()
    before = cache.counters.copy()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor", options=options)(*args)
    return out, graphs, cache.counters - before


def hits(counts):
    return counts["hit"]


def misses(counts):
    return counts["miss"]


def _fn(x, y):
    return torch.sigmoid(x @ y).sum(0) + x.mean()


def test_a_second_compile_reads_the_graph_back_and_matches_bit_for_bit(on):
    x, y = torch.randn(7, 5), torch.randn(5, 3)
    cold, graphs, lines = run(_fn, x, y)
    assert misses(lines) == 1 and hits(lines) == 0, (lines, cache.why_not_kept(None))
    warm, graphs2, lines = run(_fn, x, y)
    assert hits(lines) == 1 and misses(lines) == 0
    assert torch.equal(cold, warm)
    torch.testing.assert_close(warm, _fn(x, y))
    assert graphs2[0].kernel_names == graphs[0].kernel_names
    assert graphs2[0].source == graphs[0].source
    assert len(list((on / "graphs").glob("*.json"))) == 1


def test_a_training_step_reads_back_its_forward_and_backward(on):
    torch.manual_seed(0)
    w = torch.randn(6, 4, requires_grad=True)

    def step(x):
        loss = F.gelu(x @ w).pow(2).mean()
        loss.backward()
        return loss

    x = torch.randn(3, 6)
    loss, _, lines = run(step, x)
    grad, w.grad = w.grad.clone(), None
    assert misses(lines) == 2
    loss2, _, lines = run(step, x)
    assert hits(lines) == 2
    assert torch.equal(loss, loss2) and torch.equal(grad, w.grad)


# each pair: the same code would be wrong for the second; its key must differ
PAIRS = {
    "a held constant's value": (lambda x: x * torch.tensor(2.0), lambda x: x * torch.tensor(3.0), lambda: [torch.randn(5)]),  # noqa: E501
    "an edited graph": (lambda x: x + 1, lambda x: x + 2, lambda: [torch.randn(5)]),
    "another op": (torch.sin, torch.cos, lambda: [torch.randn(5)]),
}  # fmt: skip
INPUTS = {  # the same function, inputs that need other code
    "dtype": (torch.randn(4, 6), torch.randn(4, 6).half()),
    "size": (torch.randn(4, 6), torch.randn(4, 7)),
    "strides": (torch.randn(4, 6), torch.randn(6, 4).t()),
    "offset": (torch.randn(4, 6), torch.randn(5, 6)[1:]),
    "size-1 dim": (torch.randn(4, 6), torch.randn(1, 6)),
    "integers": (torch.randn(4, 6), torch.randint(-5, 5, (4, 6))),
}


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_graphs_that_need_other_code_miss(case, on):
    first, second, make = PAIRS[case]
    args = make()
    run(first, *args)
    out, _, lines = run(second, *args)
    assert misses(lines) == 1 and hits(lines) == 0
    torch.testing.assert_close(out, second(*args))


@pytest.mark.parametrize("case", sorted(INPUTS))
def test_inputs_that_need_other_code_miss(case, on):
    def fn(x):
        return (x * 2).sum(1) + x[:, :1].sum(1)

    a, b = INPUTS[case]
    run(fn, a)
    out, _, lines = run(fn, b)
    assert misses(lines) == 1 and hits(lines) == 0
    torch.testing.assert_close(out, fn(b))


def test_another_config_misses(on):
    x = torch.randn(8, 8)
    run(_fn, x, x)
    _, _, lines = run(_fn, x, x, options={"realize_reads_threshold": 8})
    assert misses(lines) == 1
    _, _, lines = run(_fn, x, x)  # and the default's entry is still there
    assert hits(lines) == 1


def _key_of(fn, x):
    return cache.graph_key(make_fx(fn)(x), [x], None)


def test_the_key_names_the_versions_and_the_compiler(on, monkeypatch):
    x = torch.randn(5)
    before = _key_of(torch.sin, x)
    assert _key_of(torch.sin, x) == before  # the same facts, the same key
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert _key_of(torch.sin, x) != before
    monkeypatch.undo()
    monkeypatch.delitem(lowerings, torch.ops.aten.cos.default)  # another compiler
    assert _key_of(torch.sin, x) != before
    monkeypatch.undo()
    monkeypatch.setattr(cache, "package_hash", lambda: "edited")
    assert _key_of(torch.sin, x) != before


@pytest.mark.parametrize(
    "damage", ["", "{", "[]", "{\"key\": \"another\"}", "not json at all"]
)
def test_a_damaged_entry_is_compiled_again_and_written_over(damage, on):
    x, y = torch.randn(7, 5), torch.randn(5, 3)
    run(_fn, x, y)
    (entry,) = (on / "graphs").glob("*.json")
    entry.write_text(damage)
    out, _, lines = run(_fn, x, y)
    assert lines["damaged"] == 1 and hits(lines) == 0
    torch.testing.assert_close(out, _fn(x, y))
    assert json.loads(entry.read_text())["key"] == entry.stem  # written over, whole
    _, _, lines = run(_fn, x, y)
    assert hits(lines) == 1


def test_a_directory_that_refuses_writes_turns_the_cache_off_with_a_warning(tmp_path):
    (tmp_path / "graphs").write_text("")  # the entries' folder cannot be made
    cache._refused.clear()
    x = torch.randn(5)
    with config.patch({"graph_cache": True, "cache_dir": str(tmp_path)}):
        for _ in range(2):
            out, _, lines = run(torch.sin, x)
            torch.testing.assert_close(out, torch.sin(x))
    assert cache._refused == {str(tmp_path / "graphs")}  # warned once, not per graph
    assert hits(lines) == 0 and misses(lines) == 1


@pytest.mark.parametrize("why", ["off", "debug", "outside"])
def test_graphs_that_cannot_be_named_are_not_kept(why, on, monkeypatch):
    x = torch.randn(6, 5)
    options, dynamic = {}, False
    if why == "off":
        options = {"graph_cache": False}
    elif why == "debug":
        options = {"debug": 1}
    else:
        monkeypatch.setitem(lowerings, torch.ops.aten.cos.default, lambda x: x)
        monkeypatch.setattr(lowerings[torch.ops.aten.cos.default], "__module__", "mine")
    for _ in range(2):
        torch._dynamo.reset()
        out = torch.compile(torch.sin, backend="minductor", dynamic=dynamic,
                            options=options)(x)  # fmt: skip
        torch.testing.assert_close(out, torch.sin(x))
    assert not (on / "graphs").exists()


def test_a_hit_writes_its_code_and_key_to_torch_trace(on):
    """Under TORCH_TRACE (a handler on torch's trace log), a hit writes the code it
    read back, as a fresh compile writes the code it made, and a record of its key."""
    import logging

    from torch._logging._internal import trace_log

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.metadata, record.payload))

    handler, level = Keep(), trace_log.level
    trace_log.addHandler(handler)
    trace_log.setLevel(logging.DEBUG)
    try:
        x, y = torch.randn(7, 5), torch.randn(5, 3)
        _, graphs, cold = run(_fn, x, y)
        fresh = [p for m, p in records if "inductor_output_code" in m]
        records.clear()
        _, graphs2, warm = run(_fn, x, y)
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(level)
    assert misses(cold) == 1 and hits(warm) == 1
    assert fresh == [graphs[0].source]
    assert [p for m, p in records if "inductor_output_code" in m] == [graphs2[0].source]
    named = [p for m, p in records if m.get("artifact", {}).get("name") ==
             "minductor_graph_cache_hit"]  # fmt: skip
    assert len(named) == 1 and graphs2[0].cache_key in named[0]


def test_explain_and_torch_logs_see_a_full_compile_with_the_cache_on(on, capfd):
    import minductor

    x = torch.randn(6, 5)
    for _ in range(2):  # the second would hit, and explain would have nothing to read
        torch._dynamo.reset()
        report = minductor.explain(lambda x: torch.sin(x) + 1, x)
        assert report.graphs and report.graphs[0].kernels, report
    assert not (on / "graphs").exists()
    torch._logging.set_logs(output_code=True)
    try:
        for _ in range(2):
            run(torch.cos, x)
    finally:
        torch._logging.set_logs()
    assert capfd.readouterr().err.count("def call(args)") == 2


def test_writers_racing_on_one_entry_never_leave_half_a_file(on):
    x = torch.randn(5)
    _, graphs, _ = run(torch.sin, x)
    gm = make_fx(torch.sin)(x)
    key = cache.graph_key(gm, [x], None)
    store = cache.GraphCache()

    def write():
        for _ in range(30):
            store.save(key, gm, graphs[0], [])

    writers = [threading.Thread(target=write) for _ in range(3)]
    for t in writers:
        t.start()
    before = cache.counters.copy()
    read = [store.load(key, gm) for _ in range(30)]
    for t in writers:
        t.join()
    assert (cache.counters - before)["damaged"] == 0
    assert all(r is None or r.source == graphs[0].source for r in read)


CHILD = """
import sys, time, torch, minductor
start = time.perf_counter()
w = torch.linspace(-1, 1, 48).reshape(8, 6).requires_grad_()
def step(x):
    loss = torch.nn.functional.gelu(x @ w).pow(2).mean()
    loss.backward()
    return loss
loss = torch.compile(step, backend="minductor")(torch.linspace(0, 1, 32).reshape(4, 8))
from minductor import cache
print("RESULT", loss.item(), w.grad.sum().item(), cache.counters["aot hit"])
"""


def test_a_second_process_starts_warm_with_the_same_results(on):
    """The cold start runs here (a new interpreter costs 5 s), the warm one in a new
    process that has compiled nothing."""
    torch._dynamo.reset()
    before, printed = cache.counters.copy(), io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(CHILD, {})  # noqa: S102  (the same code the second process runs)
    cold = next(s for s in printed.getvalue().splitlines() if s.startswith("RESULT"))
    assert (cache.counters - before)["aot hit"] == 0
    env = dict(os.environ, MINDUCTOR_CACHE_DIR=str(on), MINDUCTOR_GRAPH_CACHE="1",
               MINDUCTOR_DEBUG="0", PYTHONPATH=str(Path(__file__).parent.parent))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    warm = next(s for s in done.stdout.splitlines() if s.startswith("RESULT"))
    assert cold.split()[1:3] == warm.split()[1:3]  # loss and gradient, bit for bit
    assert warm.split()[3] == "1"  # the second process did not trace the step
    assert len(list((on / "graphs").glob("*.json"))) == 2  # forward, backward
    assert len(list((on / "aot").glob("*.json"))) == 1  # and their wiring


def test_launch_records_carry_their_cubins_in_the_entry(on, tmp_path, monkeypatch):
    """A site's launch record travels with its .cubin's bytes, and comes back as a
    file of the cache's own (named by its hash), whatever became of Triton's."""
    cubin = tmp_path / "triton" / "k.cubin"
    cubin.parent.mkdir()
    cubin.write_bytes(b"\x7fELF the binary")
    record = dict(cubin=str(cubin), name="k", warps=4, shared=0, types="OOi", nulls=0,
                  arch=90, taken=None)  # fmt: skip
    module = types.SimpleNamespace(
        launch_a=types.SimpleNamespace(launcher=types.SimpleNamespace(record=record)),
        launch_b=types.SimpleNamespace(launcher=types.SimpleNamespace(record=None)),
    )
    monkeypatch.setattr(cache, "load_module", lambda source: module)
    f32 = torch.float32
    warm_ups = [WarmUp("a", "launch_a", ((f32, True),), (8,), ()),
                WarmUp("b", "launch_b", ((f32, True),), (8,), ()),
                WarmUp("a", "launch_a", ((f32, False),), (8,), ())]  # fmt: skip
    compiled = types.SimpleNamespace(source="# the module")
    kept = json.loads(json.dumps(cache.launch_records(compiled, warm_ups)))
    assert set(kept) == {"launch_a"}  # torch's launcher loaded launch_b's nothing
    cubin.unlink()  # Triton's cache emptied: the entry needs none of it
    found = cache._records(kept)["launch_a"]
    path = Path(found.pop("cubin"))
    assert path.parent == on / "cubins" and path.read_bytes() == b"\x7fELF the binary"
    assert found == {k: v for k, v in record.items() if k != "cubin"}
    path.write_bytes(b"\x7fELF another")  # a file of that name, changed: written over
    cache._records(kept)
    assert path.read_bytes() == b"\x7fELF the binary"
    with pytest.raises(ValueError):  # a damaged entry: compiled again (above)
        cache._records({"launch_a": dict(kept["launch_a"], cubin="not base64!")})


GPU_CHILD = """
import sys, torch, minductor
from triton.runtime.jit import JITFunction
asked = []
run = JITFunction.run
def counted(self, *args, **kwargs):  # Triton's launches and compiles (warmup)
    asked.append(self.__name__)
    return run(self, *args, **kwargs)
JITFunction.run = counted
w = torch.linspace(-1, 1, 4800, device="cuda").reshape(80, 60).requires_grad_()
def step(x):
    loss = torch.nn.functional.gelu(x @ w).pow(2).mean()
    loss.backward()
    return loss
x = torch.linspace(0, 1, 3200, device="cuda").reshape(40, 80)
loss = torch.compile(step, backend="minductor", dynamic=sys.argv[1] == "dynamic")(x)
from minductor import cache
print("RESULT", loss.item(), w.grad.sum().item(), cache.counters["hit"], len(asked))
"""


@pytest.mark.cuda
@pytest.mark.parametrize("shapes", ["static", "dynamic"])
def test_a_warm_process_on_the_gpu_launches_its_kernels_without_triton(tmp_path, shapes):
    """The second process loads every binary from the entries' launch records (the
    loss's one-element reduction too; with symbolic sizes, the binaries of the traced
    sizes' classes): Triton compiles and launches nothing."""
    env = dict(os.environ, MINDUCTOR_CACHE_DIR=str(tmp_path / "minductor"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), MINDUCTOR_GRAPH_CACHE="1",
               PYTHONPATH=str(Path(__file__).parent.parent))  # fmt: skip
    printed = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", GPU_CHILD, shapes], env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        printed.append(next(s for s in done.stdout.splitlines() if "RESULT" in s))
    cold, warm = (p.split()[1:] for p in printed)
    assert cold[:2] == warm[:2]  # loss and gradient, bit for bit
    assert cold[2] == "0" and warm[2] == "2"  # forward and backward read back
    assert int(cold[3]) > 0 and warm[3] == "0"  # Triton asked for nothing warm


# --- what AOTAutograd built, kept too ------------------------------------------------


@pytest.fixture
def no_tracing(monkeypatch):
    """Make AOTAutograd's trace fail, once asked: a hit must not trace."""
    import torch._functorch.aot_autograd as aot

    def refuse():
        def traced(*args, **kwargs):
            raise AssertionError("AOTAutograd traced on a hit")

        monkeypatch.setattr(aot, "create_aot_state", traced)

    return refuse


def _twice(no_tracing, call):
    """call() twice, Dynamo's state thrown away before each and AOTAutograd's trace
    refused the second time: both results, and the cache's counts of the second."""
    found = []
    for attempt in range(2):
        if attempt:
            no_tracing()
        torch._dynamo.reset()
        before = cache.counters.copy()
        found.append(call())
    return found, cache.counters - before


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 5, 5),
    )  # fmt: skip


def _train(model, x, backend="minductor"):
    """One step: the output, each parameter's gradient, each buffer after."""
    torch._dynamo.reset()
    before = cache.counters.copy()
    f = torch.compile(model, backend=backend) if backend else model
    out = f(x)
    # the gradient reaching the output is transposed: not the layout the backward
    # was compiled for
    (out.t().contiguous() * torch.arange(5.0)[:, None]).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return [out.detach(), *grads, *[b.clone() for b in model.buffers()]], cache.counters - before


def test_a_warm_training_step_is_wired_without_tracing_and_matches(on, no_tracing):
    x = torch.randn(3, 3, 5, 7)
    cold, lines = _train(_net(), x)
    assert lines["aot miss"] == 1 and (on / "aot").exists()
    no_tracing()
    warm, lines = _train(_net(), x)
    assert lines["aot hit"] == 1 and lines["hit"] == 2
    for a, b in zip(cold, warm):  # output, gradients, running statistics
        assert torch.equal(a, b)
    eager, _ = _train(_net(), x, backend=None)
    for a, b in zip(eager, warm):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def _two_outputs(x, w):
    y = torch.tanh(x @ w)
    return y, (y > 0).sum(1), y.detach() * 2  # a gradient, an integer, no gradient


def test_outputs_without_a_gradient_and_a_gradient_of_none(on, no_tracing):
    torch.manual_seed(0)
    x, w = torch.randn(4, 6), torch.randn(6, 5, requires_grad=True)

    def call():
        y, count, plain = torch.compile(_two_outputs, backend="minductor")(x, w)
        assert not count.requires_grad and not plain.requires_grad
        y[:, ::2].sum().backward()  # the odd columns' gradient is zero
        grad, w.grad = w.grad, None
        return [y.detach(), count, plain, grad]

    found, lines = _twice(no_tracing, call)
    assert lines["aot hit"] == 1
    for a, b in zip(*found):
        assert torch.equal(a, b)
    torch.testing.assert_close(found[1][3], torch.autograd.grad(
        torch.tanh(x @ w)[:, ::2].sum(), w)[0])  # fmt: skip


def test_an_inference_graph_that_changes_its_input_in_place(on, no_tracing):
    def count(x, seen):
        seen.add_(x.sum(0))
        return x * 2 + seen

    x = torch.randn(5, 3)

    def call():
        seen = torch.zeros(3)
        with torch.no_grad():
            return torch.compile(count, backend="minductor")(x, seen), seen

    results, lines = _twice(no_tracing, call)
    assert lines["aot hit"] == 1
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])  # the input was written on a hit too
    torch.testing.assert_close(results[1][1], x.sum(0))


def _view_of_input(x):
    return x.view(-1), x + 1


def _shared(a, b):
    return a * 2 + b.sum()


NOT_WIRED = {  # each runs right, twice, and is never wired from the cache
    "an output is a view of an input": (_view_of_input, lambda: [torch.randn(3, 4)]),
    "two inputs share memory": (_shared, lambda: (lambda t: [t[:2], t[1:]])(torch.randn(3, 4))),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(NOT_WIRED))
def test_graphs_whose_wiring_is_not_plain_are_traced_every_time(case, on):
    fn, make = NOT_WIRED[case]
    for _ in range(2):
        args = make()
        out, _, lines = run(fn, *args)
        for got, want in zip(out, fn(*args)):
            torch.testing.assert_close(got, want)
    assert lines["aot hit"] == 0 and lines["aot not kept"] == 1
    assert not (on / "aot").exists()


def test_under_autocast_nothing_is_wired(on):
    model, x = _net(), torch.randn(2, 3, 5, 7)
    for _ in range(2):
        torch._dynamo.reset()
        before = cache.counters.copy()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = torch.compile(model, backend="minductor")(x)
    assert (cache.counters - before)["aot not kept"] == 1
    assert out.dtype == torch.bfloat16


def test_the_aot_key_names_grad_mode_requires_grad_and_aotautograds_config(on):
    gm = torch.fx.symbolic_trace(lambda x, w: (x @ w).relu())
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    before = cache.aot_key(gm, [x, w], False)
    assert cache.aot_key(gm, [x, w], False) == before
    assert cache.aot_key(gm, [x, w.requires_grad_()], True) != before
    w.requires_grad_(False)
    assert cache.aot_key(gm, [x, torch.nn.Parameter(w, requires_grad=False)],
                         False) != before  # fmt: skip
    with torch.no_grad():
        assert cache.aot_key(gm, [x, w], False) != before
    with torch._functorch.config.patch(activation_memory_budget=0.5):
        assert cache.aot_key(gm, [x, w], False) != before


@pytest.mark.parametrize("damage", ["", "{", '{"key": "x"}', '{"key": "KEY"}'])
def test_a_damaged_aot_entry_is_traced_again_with_the_same_results(damage, on):
    x = torch.randn(3, 3, 5, 7)
    cold, _ = _train(_net(), x)
    (entry,) = (on / "aot").glob("*.json")
    entry.write_text(damage.replace("KEY", entry.stem))
    warm, lines = _train(_net(), x)
    assert lines["aot damaged"] == 1 and lines["aot hit"] == 0
    assert lines["hit"] == 2  # its graphs still came from the graph cache
    for a, b in zip(cold, warm):
        assert torch.equal(a, b)
    assert json.loads(entry.read_text())["key"] == entry.stem  # written again, whole


def test_an_entry_whose_graph_is_gone_is_a_miss(on):
    x = torch.randn(3, 3, 5, 7)
    cold, _ = _train(_net(), x)
    for graph in (on / "graphs").glob("*.json"):
        graph.unlink()
    warm, lines = _train(_net(), x)
    assert lines["aot miss"] == 1 and lines["aot hit"] == 0 and lines["miss"] == 2
    for a, b in zip(cold, warm):
        assert torch.equal(a, b)


def _halves(x, w):
    a, b = (x @ w).split(2)  # outputs that are views of one product
    return a, b


def test_outputs_that_are_views_of_one_another_are_wired_as_aotautograd_does(on, no_tracing):
    torch.manual_seed(0)
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)

    def call():
        a, b = torch.compile(_halves, backend="minductor")(x, w)
        squares = b.pow(2).sum()  # keeps b for the backward
        a.mul_(3)  # allowed: AOTAutograd hides that a and b share memory
        (a.sum() + 2 * squares).backward()
        grad, w.grad = w.grad, None
        return [a.detach(), b.detach(), grad]

    found, lines = _twice(no_tracing, call)
    assert lines["aot hit"] == 1
    for u, v in zip(*found):
        assert torch.equal(u, v)
    a, b = _halves(x, w)
    (3 * a.sum() + 2 * b.pow(2).sum()).backward()
    torch.testing.assert_close(found[1][2], w.grad)


# --- artifacts carried to another machine --------------------------------------------


def _step_in(directory, x):
    """The training step of _net compiled afresh with directory as the cache."""
    with config.patch({"graph_cache": True, "cache_dir": str(directory)}):
        return _train(_net(), x)


def test_artifacts_carry_a_warm_start_to_an_empty_cache(tmp_path):
    import minductor

    x = torch.randn(2, 3, 5, 7)
    cold, _ = _step_in(tmp_path / "first", x)
    with config.patch({"cache_dir": str(tmp_path / "first")}):
        blob, saved = minductor.save_cache_artifacts()
    assert saved["graphs"] == 2 and saved["aot"] == 1
    with config.patch({"cache_dir": str(tmp_path / "second")}):
        assert minductor.load_cache_artifacts(blob) == saved
    warm, lines = _step_in(tmp_path / "second", x)
    assert lines["aot hit"] == 1 and lines["miss"] == 0
    for a, b in zip(cold, warm):
        assert torch.equal(a, b)


def _blob_of(tmp_path, **files):
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as blob:
        for name, text in files.items():
            blob.writestr(name.replace("__", "/"), text)
    return buffer.getvalue()


def test_damaged_foreign_or_escaping_artifacts_write_nothing(tmp_path, caplog):
    here = json.dumps(cache._manifest())
    elsewhere = json.dumps({**cache._manifest(), "torch": "0.0.0"})
    entry = json.dumps({"key": "k"})
    target = tmp_path / "cache"
    with config.patch({"cache_dir": str(target)}):
        assert cache.load_cache_artifacts(b"not a zip file") == {}
        blob = _blob_of(tmp_path, **{"manifest.json": elsewhere,
                                     "minductor__graphs__k.json": entry})  # fmt: skip
        assert cache.load_cache_artifacts(blob) == {}
        assert not target.exists()
        blob = _blob_of(tmp_path, **{"manifest.json": here,
                                     "minductor__graphs__k.json": entry,
                                     "minductor__..__escaped.json": entry,
                                     "minductor__a__b__c.json": entry})  # fmt: skip
        assert cache.load_cache_artifacts(blob) == {"graphs": 1}
    assert (target / "graphs" / "k.json").read_text() == entry
    assert not (tmp_path / "escaped.json").exists()
    assert sum("not loaded" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.slow  # 18 s in the interpreter: `make test-slow`
def test_a_language_model_step_is_wired_from_the_cache_bit_for_bit(on, no_tracing):
    """Hugging Face's GPT-2 (tiny): two graphs (a graph break), logits AOTAutograd hides
    as a view, dropout off; every loss and gradient of the warm step is the cold one's."""
    pytest.importorskip("transformers")
    from minductor.harness.models import build, step

    def call():
        model, inputs = build("gpt2", training=True, tiny=True)
        out = step(torch.compile(model, backend="minductor"), inputs, True)
        return [out["loss"].detach()] + [p.grad for p in model.parameters()]

    found, lines = _twice(no_tracing, call)
    assert lines["aot hit"] == 2 and lines["aot miss"] == 0 and lines["miss"] == 0
    for a, b in zip(*found):
        assert torch.equal(a, b)


# --- symbolic sizes: the entry keeps the guards its compile added -----------------


def _rows(x):
    return (x * 2).sum(-1)


def run_dynamic(x, fn=_rows):
    """fn compiled afresh with dynamic sizes: (the compiled function, the counts)."""
    torch._dynamo.reset()
    before = cache.counters.copy()
    compiled = torch.compile(fn, backend="minductor", dynamic=True)
    torch.testing.assert_close(compiled(x), fn(x), atol=1e-4, rtol=1e-4)
    return compiled, cache.counters - before


def _entries(directory) -> list[dict]:
    return [json.loads(p.read_text()) for p in (directory / "graphs").glob("*.json")]


def test_a_graph_with_symbolic_sizes_is_kept_with_the_guards_its_lowering_added(on):
    _, lines = run_dynamic(torch.randn(7, 100))
    assert misses(lines) == 1
    (entry,) = _entries(on)
    # chapter 18: a row fits one program; chapter 17: 32-bit indices
    assert "<= 4096" in entry["guards"] and "<= 2147483647" in entry["guards"]
    _, lines = run_dynamic(torch.randn(9, 200))  # other sizes, the same symbols
    assert hits(lines) == 1 and misses(lines) == 0


def test_a_hit_hands_its_guards_to_dynamo_which_compiles_again_past_them(on):
    run_dynamic(torch.randn(7, 100))
    compiled, lines = run_dynamic(torch.randn(9, 200))
    assert hits(lines) == 1
    before = cache.counters.copy()
    x = torch.randn(9, 5000)  # a row past the guard: Dynamo must not reuse the hit
    torch.testing.assert_close(compiled(x), _rows(x), atol=1e-3, rtol=1e-4)
    lines = cache.counters - before
    assert misses(lines) == 1 and hits(lines) == 0  # compiled again; the entry's
    (entry,) = _entries(on)  # guards did not hold, and the new compile wrote its own:
    assert entry["kernel_names"][0].startswith("triton_red")  # a looped reduction
    assert "<= 4096" not in entry["guards"]


def test_an_entry_whose_guards_do_not_hold_is_a_miss_in_a_new_process(on):
    run_dynamic(torch.randn(7, 100))  # a persistent reduction, rows of at most 4096
    _, lines = run_dynamic(torch.randn(9, 5000))
    assert misses(lines) == 1 and hits(lines) == 0


def test_a_looped_reduction_serves_every_row_length_as_in_one_process(on):
    """Compiled past the limit, the reduction loops, which is right for any row: no
    guard was added, and a hit at 100 reuses it, as Dynamo would in one process."""
    run_dynamic(torch.randn(9, 5000))
    _, lines = run_dynamic(torch.randn(7, 100))
    assert hits(lines) == 1


def test_guards_are_checked_on_the_sizes_as_numbers():
    """The hints the guards are checked on: each symbol's value in this trace, and
    for a tensor, a meta tensor of its layout, storage offset included."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    real = torch.randn(40)[3:].view(37)[1:].as_strided((3, 5), (10, 2), 7)
    fake = mode.from_tensor(real)
    assert isinstance(fake.shape[0], torch.SymInt)  # symbols, which have values here
    hinted = cache._hinted(fake)
    assert hinted.device.type == "meta"
    assert (hinted.shape, hinted.stride(), hinted.storage_offset()) == \
        (real.shape, real.stride(), real.storage_offset())  # fmt: skip
    assert cache._hinted(fake.shape[1]) == 5


def test_a_graph_whose_guards_cannot_be_written_down_compiles_and_is_not_kept(on):
    """A number Dynamo traced as a symbol (softshrink's lambda, a float) is no input
    of the graph: the ShapeEnv cannot write its guards over the inputs, so the graph
    is not kept, and the compile goes on."""
    x = torch.randn(5, 5)

    def fn(x, lambd):
        return torch.nn.functional.softshrink(x, lambd)

    torch._dynamo.reset()
    before = cache.counters.copy()
    out = torch.compile(fn, backend="minductor", dynamic=True)(x, 0.0)
    torch.testing.assert_close(out, fn(x, 0.0))
    assert (cache.counters - before)["not kept"] >= 1



def test_an_inference_graph_with_symbolic_sizes_is_wired_without_tracing(on, no_tracing):
    """Dynamo's graph with symbols for sizes: the wiring is kept under the symbols,
    and a new trace at other sizes checks the forward's guards on Dynamo's own
    inputs, then runs without AOTAutograd."""
    run_dynamic(torch.randn(7, 100))
    no_tracing()
    _, lines = run_dynamic(torch.randn(9, 200))
    assert lines["aot hit"] == 1 and hits(lines) == 1 and misses(lines) == 0
    (entry,) = [json.loads(p.read_text()) for p in (on / "aot").glob("*.json")]
    assert entry["backward"] is None  # inference: the forward alone


def test_guards_of_a_wired_graph_hold_dynamo_to_their_sizes(on, caplog):
    """After a wired hit, a row past the persistent reduction's limit must not reuse
    the hit: Dynamo got the guard and compiles again, and the wiring's lookup misses
    on the guards, not on the key."""
    run_dynamic(torch.randn(7, 100))
    compiled, lines = run_dynamic(torch.randn(9, 200))
    assert lines["aot hit"] == 1
    x = torch.randn(9, 5000)
    before = cache.counters.copy()
    with caplog.at_level("INFO", logger="minductor"):
        torch.testing.assert_close(compiled(x), _rows(x), atol=1e-3, rtol=1e-4)
    lines = cache.counters - before
    assert lines["aot miss"] == 1 and misses(lines) == 1 and lines["aot hit"] == 0
    assert "its guards do not hold for these sizes" in caplog.text



def _scaled_rows(x, w):
    """Sizes saved for the backward (the row count is a factor), a matmul, a row sum."""
    return ((x @ w).relu() * x.shape[0]).sum(-1)


def _train_dynamic(fn, *args):
    """A training step of fn compiled afresh with dynamic sizes, checked against
    eager's output and gradients; the cache's counts."""
    torch._dynamo.reset()
    before = cache.counters.copy()
    out = torch.compile(fn, backend="minductor", dynamic=True)(*args)
    got = torch.autograd.grad(out.pow(2).sum(), args)
    want = fn(*args)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    for g, w in zip(got, torch.autograd.grad(want.pow(2).sum(), args)):
        torch.testing.assert_close(g, w, atol=1e-3, rtol=1e-4)
    return cache.counters - before


def test_a_training_graph_with_symbolic_sizes_is_wired_without_tracing(on, no_tracing):
    """Forward and backward, with sizes the backward needs saved from the forward:
    a new trace at other sizes runs both graphs from the cache, untraced."""
    w = torch.randn(100, 3, requires_grad=True)
    _train_dynamic(_scaled_rows, torch.randn(7, 100, requires_grad=True), w)
    (entry,) = [json.loads(p.read_text()) for p in (on / "aot").glob("*.json")]
    assert entry["wiring"]["sizes"] >= 1 and entry["backward"] is not None
    assert entry["wiring"]["tangents"] == ["contiguous_format"]  # symbols: a format
    no_tracing()
    for rows in (9, 5):
        lines = _train_dynamic(_scaled_rows, torch.randn(rows, 100, requires_grad=True), w)
        assert lines["aot hit"] == 1 and hits(lines) == 2 and misses(lines) == 0


def test_a_wired_training_graph_keeps_the_backwards_guards(on):
    """The wiring's guards are every guard the compile added, the backward's too,
    written over Dynamo's inputs: a row past the persistent limit misses on them."""
    fn = lambda x: (x * 2).sin().sum(-1)  # noqa: E731
    _train_dynamic(fn, torch.randn(7, 100, requires_grad=True))
    assert _train_dynamic(fn, torch.randn(9, 200, requires_grad=True))["aot hit"] == 1
    lines = _train_dynamic(fn, torch.randn(9, 5000, requires_grad=True))
    assert lines["aot miss"] == 1 and misses(lines) == 2 and lines["aot hit"] == 0
    (entry,) = [json.loads(p.read_text()) for p in (on / "aot").glob("*.json")]
    assert "<= 4096" not in entry["guards"]  # written again by the looped compile


@pytest.mark.parametrize("case", ["contiguous", "channels_last", "transposed", "static"])
def test_a_gradients_layout_is_kept_as_numbers_or_as_a_memory_format(case):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    real = {"contiguous": torch.randn(2, 3, 4, 5),
            "channels_last": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
            "transposed": torch.randn(3, 4).t(), "static": torch.randn(3, 4).t()}[case]
    if case == "static":
        assert cache.tangent_layout(real) == [[4, 3], [1, 4]]
        return
    fake = FakeTensorMode(shape_env=ShapeEnv()).from_tensor(real)  # sizes: symbols
    want = {"contiguous": "contiguous_format", "channels_last": "channels_last",
            "transposed": None}[case]  # fmt: skip
    assert cache.tangent_layout(fake) == want
    if want is not None:  # the gradient as it comes back, laid out as compiled
        grad = cache._as_compiled(torch.randn(2, 3, 4, 5).transpose(1, 2).contiguous()
                                  .transpose(1, 2), want)  # fmt: skip
        assert grad.is_contiguous(memory_format=getattr(torch, want))


def test_an_entrys_warm_ups_come_back_whole_from_json():
    """A SizedSite's warm-up keeps its size symbols and its kind through the entry."""
    bf16, i64 = torch.bfloat16, torch.int64
    sized = WarmUp("k", "launch_k", ((bf16, False), (i64, True)), (6, 5),
                   (("XBLOCK", 8), ("RBLOCK", 8), ("num_warps", 1)), (5, 6), True)  # fmt: skip
    fixed = WarmUp("j", "launch_j", ((bf16, True),), (64,), (("XBLOCK", 64),))
    for w in (sized, fixed):
        assert cache._from_json(json.loads(json.dumps(cache._warm_up(w)))) == w
