"""Chapter 22: CUDA graphs (mode="reduce-overhead").

The decisions (which graphs are recorded, and why not) are checked on fake graphs. The
life of a wrapped graph (warm-up, recording, replay, steps, invalidation) runs on this
machine's device: on a CPU, with the chapter's stand-in recorder, whose memory behaves
as a CUDA graph's; on a GPU, with real CUDA graphs. Tests marked cuda need a GPU.
"""

import copy
import dataclasses
import logging

import pytest
import torch
import torch.nn.functional as F
from helpers import said
from torch._inductor import cudagraph_trees
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (registers the backend)
from minductor.capture import GraphKind, graph_wrappers
from minductor.cudagraphs import (
    RECORDERS,
    CUDAGraphed,
    CUDARecording,
    SimulatedRecording,
    graph_facts,
    skip_reason,
)
from minductor.runtime import interpret_mode

pytestmark = pytest.mark.ch22
DEVICE = "cpu" if interpret_mode() else "cuda"


@pytest.fixture
def graphed():
    """Every CUDAGraphed made during the test (the CPU stand-in records on a CPU)."""
    found = []

    def spy(compiled, info):
        if isinstance(compiled, CUDAGraphed):
            found.append(compiled)
        return compiled

    graph_wrappers.register(spy)
    added = DEVICE == "cpu" and "cpu" not in RECORDERS
    if added:
        RECORDERS["cpu"] = SimulatedRecording
    torch._dynamo.reset()
    try:
        yield found
    finally:
        graph_wrappers.remove(spy)
        if added:
            del RECORDERS["cpu"]
        cudagraph_trees.MarkStepBox.mark_step_counter = 0
        torch._dynamo.reset()


def _assert_invalidated(t):
    if hasattr(torch._C, "_set_storage_access_error_msg"):
        with pytest.raises(RuntimeError, match="overwritten"):
            t + 1
    else:  # a PyTorch without CUDA: the chapter empties the tensor instead
        assert t.numel() == 0


# ---- the decisions, on fake graphs ------------------------------------------------


def _facts(fn, *inputs, static=(), mode="fake", on_gpu=True):
    gm = make_fx(fn, tracing_mode=mode)(*inputs)
    facts = graph_facts(gm, inputs, GraphKind.INFERENCE, frozenset(static))
    if on_gpu:
        facts = dataclasses.replace(facts, devices=frozenset({"cuda"}))
    return facts


X, W = torch.randn(8, 16), torch.randn(16, 16)
DECISIONS = [
    ("matmul and tanh", lambda x, w: torch.tanh(x @ w), (X, W), {1}, None),
    ("add_ on a copied input", lambda x: x.add_(1), (X,), (), "mutates input 0"),
    ("copy_ into a copied input", lambda x, y: x.copy_(y), (X, X + 1), (),
     "mutates input 0"),
    ("mul_ on a static buffer", lambda x, m: m.mul_(0.9), (X, W), {1}, None),
    ("a broadcast input", lambda x: x * 2, (torch.randn(16).expand(8, 16),), (),
     "input 0 is broadcast"),
    ("a broadcast static input", lambda x: x * 2, (torch.randn(16).expand(8, 16),),
     {0}, None),
    ("nonzero", lambda x: x.nonzero(), (X,), (), "aten.nonzero"),
    ("returns a view of its input", lambda x: (x.t(), x.sin()), (X,), (), None),
]


@pytest.mark.parametrize(
    "name, fn, inputs, static, expected", DECISIONS, ids=[d[0] for d in DECISIONS]
)
def test_skip_decisions(name, fn, inputs, static, expected):
    reason = skip_reason(_facts(fn, *inputs, static=static))
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def test_item_needs_the_host():
    facts = _facts(lambda x: x * x.sum().item(), X, mode="symbolic")
    assert "_local_scalar_dense" in skip_reason(facts)


def test_devices_decide_first():
    facts = _facts(lambda x: x.add_(1), X, on_gpu=False)
    assert skip_reason(facts) == "cpu tensors: a CUDA graph records GPU work"
    both = dataclasses.replace(facts, devices=frozenset({"cpu", "cuda"}))
    assert "more than one device (cpu, cuda)" in skip_reason(both)
    aten_graph = dataclasses.replace(
        _facts(torch.sin, X), compiled=False
    )
    assert "runs with ATen" in skip_reason(aten_graph)


def test_facts_of_a_graph():
    facts = _facts(lambda x, m: (m.mul_(0.9), x + 1), X, W, static={1})
    assert facts.mutated_inputs == {1}
    assert facts.static_inputs == {1}
    assert facts.input_bytes == (8 * 16 * 4, 16 * 16 * 4)
    assert torch.ops.aten.add in facts.ops


# ---- plumbing ---------------------------------------------------------------------


def _f(x):
    return torch.sin(x) * torch.cos(x) + 1


def test_default_mode_wraps_nothing(graphed):
    out = torch.compile(_f, backend="minductor")(torch.randn(5, 7, device=DEVICE))
    assert graphed == [] and out.shape == (5, 7)


@pytest.mark.parametrize(
    "how", [{"mode": "reduce-overhead"}, {"options": {"cudagraphs": True}}]
)
def test_mode_or_option_wraps(graphed, how):
    x = torch.randn(5, 7, device=DEVICE)
    torch.testing.assert_close(torch.compile(_f, backend="minductor", **how)(x), _f(x))
    assert len(graphed) == 1 and graphed[0].kind == "inference"


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU graphs, no stand-in")
def test_cpu_graphs_are_skipped_without_a_recorder(caplog):
    torch._dynamo.reset()
    x = torch.randn(5, 7)
    with caplog.at_level(logging.INFO, logger="minductor"):
        compiled = torch.compile(_f, backend="minductor", mode="reduce-overhead")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), _f(x))
    assert said(caplog, "skipping the inference of function") == 1
    assert said(caplog, "cpu tensors: a CUDA graph records GPU work") == 1


# ---- the life of a wrapped graph ----------------------------------------------------


def test_warm_up_record_replay(graphed, caplog):
    compiled = torch.compile(_f, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        for _ in range(5):
            x = torch.randn(33, 65, device=DEVICE)
            torch.testing.assert_close(compiled(x), _f(x))
    assert said(caplog, "warm-up of inference of function") == 1
    assert said(caplog, "recording inference of function") == 1
    assert said(caplog, "replay of inference of function") == 3
    (wrapped,) = graphed
    (recording,) = wrapped.recordings.values()
    assert [p is not None for p in recording.placeholders] == [True]


def test_static_inputs_are_not_copied(graphed):
    lin = torch.nn.Linear(16, 8).to(DEVICE)
    compiled = torch.compile(lin, backend="minductor", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(4, 16, device=DEVICE)
            torch.testing.assert_close(compiled(x), lin(x))
    (wrapped,) = graphed
    (recording,) = wrapped.recordings.values()
    assert len(wrapped.static) == 2  # weight and bias
    for i in wrapped.static:
        assert recording.placeholders[i] is None
    held = recording.held
    assert held == {lin.weight.data_ptr(), lin.bias.data_ptr()}
    copied = [i for i, p in enumerate(recording.placeholders) if p is not None]
    assert len(copied) == 1  # x


def test_a_replay_is_found_without_the_full_key(graphed, monkeypatch):
    lin = torch.nn.Linear(16, 8).to(DEVICE)
    compiled = torch.compile(lin, backend="minductor", mode="reduce-overhead")
    keys = []
    real_key = CUDAGraphed._key
    monkeypatch.setattr(
        CUDAGraphed, "_key", lambda self, *a: keys.append(1) or real_key(self, *a)
    )
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(4, 16, device=DEVICE)
            torch.testing.assert_close(compiled(x), lin(x))
        assert len(keys) == 2  # the warm-up's and the recording's; replays: none
        # a parameter at a new address is a new key: warm-up, then a new recording
        lin.weight.data = lin.weight.data.clone()
        for _ in range(3):
            torch.testing.assert_close(compiled(x), lin(x))
    (wrapped,) = graphed
    # the old weight's memory was freed with it: its recording was dropped
    assert len(wrapped.recordings) == 1 and len(keys) == 4


def test_a_copied_input_of_another_layout_is_not_replayed(graphed):
    compiled = torch.compile(_f, backend="minductor", mode="reduce-overhead")
    for _ in range(3):
        compiled(torch.randn(6, 5, device=DEVICE))
    (wrapped,) = graphed
    (recording,) = wrapped.recordings.values()
    x = torch.randn(6, 5, device=DEVICE)
    assert wrapped._matches(recording, [x])
    assert not wrapped._matches(recording, [torch.randn(5, 6, device=DEVICE).t()])
    assert not wrapped._matches(recording, [x.double()])


def test_an_output_of_an_earlier_step_is_invalidated(graphed):
    compiled = torch.compile(_f, backend="minductor", mode="reduce-overhead")
    a, b = (torch.randn(9, 10, device=DEVICE) for _ in range(2))
    for _ in range(3):
        compiled(a)  # warm-up, recording, replay
    old = compiled(a)
    torch.testing.assert_close(old, _f(a))
    new = compiled(b)  # overwrites old's memory
    torch.testing.assert_close(new, _f(b))
    _assert_invalidated(old)
    kept = compiled(a).clone()  # a clone is the caller's own
    compiled(b)
    torch.testing.assert_close(kept, _f(a))


def test_mark_step_begin(graphed, caplog):
    compiled = torch.compile(_f, backend="minductor", mode="reduce-overhead")
    a, b = (torch.randn(9, 10, device=DEVICE) for _ in range(2))
    for _ in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        compiled(a)
    with caplog.at_level(logging.INFO, logger="minductor"):
        torch.compiler.cudagraph_mark_step_begin()
        ya = compiled(a)  # replay
        yb = compiled(b)  # same step: a replay would overwrite ya
        torch.testing.assert_close(ya, _f(a))
        torch.testing.assert_close(yb, _f(b))
        torch.compiler.cudagraph_mark_step_begin()
        yc = compiled(b)  # a new step: replays, ya's memory is overwritten
    torch.testing.assert_close(yc, _f(b))
    torch.testing.assert_close(yb, _f(b))  # plain launches: its own memory
    _assert_invalidated(ya)
    assert said(caplog, "plain launches for inference") == 1


def _mlp(lin1, lin2):
    def step(x):
        return (lin2(torch.tanh(lin1(x))) ** 2).mean()

    return step


def test_training_matches_eager(graphed):
    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(16, 32).to(DEVICE), torch.nn.Linear(32, 4).to(DEVICE)
    step = _mlp(lin1, lin2)
    compiled = torch.compile(step, backend="minductor", mode="reduce-overhead")
    params = [*lin1.parameters(), *lin2.parameters()]
    for _ in range(5):
        x = torch.randn(8, 16, device=DEVICE)
        for p in params:
            p.grad = None
        loss = compiled(x)
        loss.backward()
        got = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        expected = step(x)
        expected.backward()
        torch.testing.assert_close(loss.detach(), expected.detach())
        for g, p in zip(got, params):
            torch.testing.assert_close(g, p.grad)
    kinds = sorted(w.kind for w in graphed)
    assert kinds == ["backward", "forward"]
    assert all(len(w.recordings) == 1 for w in graphed)
    assert graphed[0].pool is graphed[1].pool  # one pool for forward and backward


def test_two_forwards_before_one_backward(graphed, caplog):
    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(16, 32).to(DEVICE), torch.nn.Linear(32, 4).to(DEVICE)
    step = _mlp(lin1, lin2)
    compiled = torch.compile(step, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="minductor"):
        for _ in range(4):
            x1, x2 = (torch.randn(8, 16, device=DEVICE) for _ in range(2))
            lin1.zero_grad(set_to_none=True)
            lin2.zero_grad(set_to_none=True)
            (compiled(x1) + compiled(x2)).backward()
            got = lin1.weight.grad.clone()
            lin1.zero_grad(set_to_none=True)
            (step(x1) + step(x2)).backward()
            torch.testing.assert_close(got, lin1.weight.grad)
    assert said(caplog, "a backward is pending") >= 1


def test_mutated_input_is_skipped_and_still_right(graphed, caplog):
    def f(x):
        x.add_(1)
        return x * 2

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="minductor"):
        for _ in range(3):
            x = torch.randn(6, 5, device=DEVICE)
            expected = x * 2 + 2
            torch.testing.assert_close(compiled(x), expected)
            torch.testing.assert_close(x * 2, expected)  # x itself was updated
    assert said(caplog, "mutates input 0, which is copied") == 1
    assert graphed == []


def test_an_output_that_is_an_input_view_is_the_callers(graphed):
    def f(x, y):
        return x.t(), (x + y).sin()

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    for _ in range(4):
        x, y = (torch.randn(6, 5, device=DEVICE) for _ in range(2))
        t, s = compiled(x, y)
        torch.testing.assert_close(s, (x + y).sin())
        assert t.data_ptr() == x.data_ptr() and torch.equal(t, x.t())


def test_random_numbers_are_fresh_at_every_replay(graphed):
    def f(x):
        return torch.rand_like(x) + x

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    x = torch.zeros(64, 64, device=DEVICE)
    draws = [compiled(x).clone() for _ in range(5)]  # warm-up, record, 3 replays
    for i in range(len(draws)):
        for j in range(i):
            assert not torch.equal(draws[i], draws[j])
    for d in draws:
        assert abs(d.mean().item() - 0.5) < 0.05


def test_one_recording_per_shape_then_plain(graphed, caplog):
    compiled = torch.compile(
        _f,
        backend="minductor",
        options={"cudagraphs": True, "cudagraph_max_recordings": 1},
        dynamic=True,
    )
    with caplog.at_level(logging.INFO, logger="minductor"):
        for shape in [(5, 7)] * 3 + [(6, 3)] * 3 + [(5, 7)] * 2:
            x = torch.randn(*shape, device=DEVICE)
            torch.testing.assert_close(compiled(x), _f(x))
    (wrapped,) = graphed
    assert len(wrapped.recordings) == 1
    made = "1 recordings made, one per input shape or static input address"
    assert said(caplog, made) == 1


def test_a_recording_per_shape(graphed):
    compiled = torch.compile(
        _f, backend="minductor", mode="reduce-overhead", dynamic=True
    )
    for shape in [(5, 7)] * 3 + [(6, 3)] * 3 + [(5, 7), (6, 3)] * 2:
        x = torch.randn(*shape, device=DEVICE)
        torch.testing.assert_close(compiled(x), _f(x))
    (wrapped,) = graphed
    assert len(wrapped.recordings) == 2


def _decode_step(x, cache, pos):
    cache.index_copy_(0, pos, x)  # a key/value cache, written in place
    return cache.sum(0) * 2 + x[0]


@pytest.mark.parametrize("hold", [False, True], ids=["dropped", "kept"])
def test_a_new_static_cache_per_generate_reuses_or_replaces_recordings(
    graphed, caplog, hold
):
    # Hugging Face's generate makes a new static cache per call and drops the last;
    # its address is a static input of the compiled step
    compiled = torch.compile(
        _decode_step, backend="minductor", mode="reduce-overhead", fullgraph=True
    )
    old = []
    with caplog.at_level(logging.INFO, logger="minductor"):
        for generate in range(11):
            cache = torch.zeros(16, 8, device=DEVICE)
            torch._dynamo.mark_static_address(cache)
            expected = cache.clone()
            for step in range(4):
                x = torch.randn(1, 8, device=DEVICE)
                pos = torch.tensor([step], device=DEVICE)
                want = _decode_step(x, expected, pos)
                torch.testing.assert_close(compiled(x, cache, pos), want)
                torch.testing.assert_close(cache, expected)
            if hold:  # the caller keeps every cache: each is a new address
                old.append(cache)
    assert said(caplog, "plain launches") == (1 if hold else 0)
    (wrapped,) = graphed
    if hold:
        assert len(wrapped.recordings) == 8  # config.cudagraph_max_recordings
        assert said(caplog, "recordings dropped") == 0
    else:  # a freed cache's recording is reused at its address, or dropped
        assert len(wrapped.recordings) <= 2
        last = [r for r in wrapped.recordings.values() if cache.data_ptr() in r.held]
        assert len(last) == 1  # the last generate's cache replays a recording


# ---- on a GPU only -----------------------------------------------------------------


@pytest.mark.cuda
def test_cuda_records_real_graphs(graphed):
    compiled = torch.compile(_f, backend="minductor", mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(64, 64, device="cuda")
        torch.testing.assert_close(compiled(x), _f(x))
    (wrapped,) = graphed
    (recording,) = wrapped.recordings.values()
    assert isinstance(recording.recorder, CUDARecording)


@pytest.mark.cuda
def test_cuda_overwritten_output_raises(graphed):
    compiled = torch.compile(_f, backend="minductor", mode="reduce-overhead")
    a, b = (torch.randn(64, 64, device="cuda") for _ in range(2))
    for _ in range(3):
        compiled(a)
    old = compiled(a)
    compiled(b)
    with pytest.raises(RuntimeError, match="overwritten"):
        old.sum()


@pytest.mark.cuda
def test_cuda_dropout_masks_differ(graphed):
    def f(x):
        return F.dropout(x, p=0.5, training=True)

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    x = torch.ones(256, 256, device="cuda")
    masks = [(compiled(x) != 0).clone() for _ in range(5)]
    (wrapped,) = graphed
    assert len(wrapped.recordings) == 1
    for i in range(len(masks)):
        for j in range(i):
            assert not torch.equal(masks[i], masks[j])
    for m in masks:
        assert abs(m.float().mean().item() - 0.5) < 0.02
    assert abs(compiled(x).mean().item() - 1.0) < 0.03  # kept values scaled by 2


@pytest.mark.cuda
def test_cuda_training_static_params_not_copied(graphed):
    lin = torch.nn.Linear(64, 64, device="cuda")
    compiled = torch.compile(
        lambda x: lin(x).relu().sum(), backend="minductor", mode="reduce-overhead"
    )
    for _ in range(4):
        lin.zero_grad(set_to_none=True)
        compiled(torch.randn(32, 64, device="cuda")).backward()
    forward = next(w for w in graphed if w.kind == "forward")
    (recording,) = forward.recordings.values()
    held = recording.held
    assert {lin.weight.data_ptr(), lin.bias.data_ptr()} <= held
    backward = next(w for w in graphed if w.kind == "backward")
    assert len(backward.recordings) == 1


@pytest.mark.cuda
def test_cuda_recording_holds_one_copy_of_its_outputs(graphed):
    """The plain run before the capture drops its outputs, and a replay computes the
    recording call's values: its peak is one output, not two."""

    def f(x, v):
        return (x[:, None] * v[None, :]).sin()

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    x, v = (torch.randn(4096, device="cuda") for _ in range(2))
    compiled(x, v)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = compiled(x, v)  # the recording
    torch.cuda.synchronize()
    grew = torch.cuda.max_memory_allocated() - before
    nbytes = out.numel() * out.element_size()
    assert grew < 1.5 * nbytes, (grew, nbytes)
    torch.testing.assert_close(out, f(x, v))
    (wrapped,) = graphed
    assert len(wrapped.recordings) == 1 and not wrapped.mutates
    y = torch.randn(4096, device="cuda")
    torch.testing.assert_close(compiled(y, v), f(y, v))  # a replay


@pytest.mark.cuda
def test_cuda_matmul_workspace_is_freed_into_the_pool(graphed):
    """cuBLAS's workspace for the capture stream is taken inside the pool and freed
    into it after the capture; the main stream's is dropped: after the recording, the
    memory allocated has grown by the output alone, not by a 32 MiB workspace."""

    def f(a, b):
        return (a @ b).relu() + 1

    compiled = torch.compile(f, backend="minductor", mode="reduce-overhead")
    a, b = (torch.randn(256, 256, device="cuda") for _ in range(2))
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()  # whatever earlier tests left
    before = torch.cuda.memory_allocated()
    for _ in range(3):  # warm-up, recording, a replay
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(a, b)
    torch.cuda.synchronize()
    grew = torch.cuda.memory_allocated() - before
    assert grew <= 4 * out.numel() * out.element_size(), grew  # output, input copies
    torch.testing.assert_close(out, f(a, b))
    c = torch.randn(256, 256, device="cuda")
    torch.compiler.cudagraph_mark_step_begin()
    torch.testing.assert_close(compiled(c, b), f(c, b))  # a replay, workspace intact


@pytest.mark.cuda
def test_cuda_running_statistics_are_updated_once_per_call(graphed):
    """Batch norm writes its running statistics (static inputs): the recording call
    keeps its plain run's values instead of replaying on top of them."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(16, device="cuda")
    ref = copy.deepcopy(bn)
    compiled = torch.compile(bn, backend="minductor", mode="reduce-overhead")
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(32, 16, device="cuda") + step
            torch.testing.assert_close(compiled(x), ref(x))
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    assert int(bn.num_batches_tracked) == 4
    assert any(w.mutates and w.recordings for w in graphed)
