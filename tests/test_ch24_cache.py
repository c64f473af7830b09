"""Compiled graphs kept on disk (chapter 24): hits give eager's results bit for bit,
every fact that decides the code is in the key, and a damaged cache recompiles."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import cache
from minductor.capture import record_compiled
from minductor.config import config
from minductor.lowering import lowerings

pytestmark = [pytest.mark.e2e, pytest.mark.ch24]


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


@pytest.mark.parametrize("why", ["off", "symbols", "debug", "outside"])
def test_graphs_that_cannot_be_named_are_not_kept(why, on, monkeypatch):
    x = torch.randn(6, 5)
    options, dynamic = {}, False
    if why == "off":
        options = {"graph_cache": False}
    elif why == "symbols":
        dynamic = True
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
print("RESULT", loss.item(), w.grad.sum().item(), time.perf_counter() - start)
"""


def test_a_second_process_starts_warm_with_the_same_results(tmp_path):
    env = dict(os.environ, MINDUCTOR_CACHE_DIR=str(tmp_path), MINDUCTOR_GRAPH_CACHE="1",
               MINDUCTOR_DEBUG="0", PYTHONPATH=str(Path(__file__).parent.parent))  # fmt: skip
    found = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        line = next(s for s in done.stdout.splitlines() if s.startswith("RESULT"))
        found.append(line.split()[1:])
    assert found[0][:2] == found[1][:2]  # loss and gradient, bit for bit (as text)
    assert len(list((tmp_path / "graphs").glob("*.json"))) == 2  # forward, backward
