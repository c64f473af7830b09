"""Block sizes chosen by rule (chapters 17 and 18) and by max-autotune (chapter 21)."""

import json
import logging

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import runtime
from minductor.capture import record_compiled
from minductor.codegen_reductions import reduction_config
from minductor.codegen_triton import (
    MIN_PROGRAMS,
    KernelKind,
    generate_kernel,
    pointwise_config,
)
from minductor.config import config, settings
from minductor.lowering import GraphLowering
from minductor.runtime import (
    AutotuneFailed,
    autotune,
    autotune_path,
    candidate_configs,
)
from minductor.scheduler import Scheduler

POI, PER, RED = KernelKind.POINTWISE, KernelKind.PERSISTENT, KernelKind.LOOPED

pytestmark = [pytest.mark.ch17, pytest.mark.ch18, pytest.mark.ch21]


# --- the rule: enough programs for the SMs, big blocks for big tensors ---------------


@pytest.mark.parametrize(
    "numel, xblock, num_warps",
    [
        (1, 1, 1),
        (5, 8, 1),
        (64, 64, 2),
        (4096, 128, 4),  # the 64x64 chain: 32 programs of one element per thread
        (4224, 128, 4),
        (2**15, 256, 4),  # 128 programs
        (2**16, 512, 4),
        (2**17, 1024, 4),  # from here on, what it always was
        (2**20, 1024, 4),
        (2**24, 1024, 4),
    ],
)
def test_pointwise_blocks_fill_the_gpu(numel, xblock, num_warps):
    assert pointwise_config(numel) == {"XBLOCK": xblock, "num_warps": num_warps}


@pytest.mark.parametrize("numel", [1, 100, 4096, 5000, 2**15, 2**16, 10**6, 2**24])
def test_pointwise_rule_invariants(numel):
    xblock = pointwise_config(numel)["XBLOCK"]
    programs = -(-numel // xblock)
    assert xblock & (xblock - 1) == 0 and xblock <= config.max_xblock
    # enough programs, or the block is already as small as it goes
    assert programs >= MIN_PROGRAMS or xblock <= 128
    # never smaller than needed: half the block would not be needed for the SMs
    assert xblock == config.max_xblock or -(-numel // (2 * xblock)) < MIN_PROGRAMS


def test_the_interpreter_keeps_large_blocks():
    assert pointwise_config(4096, interpret=True) == {"XBLOCK": 1024, "num_warps": 4}
    assert reduction_config(64, 64, PER, interpret=True)["XBLOCK"] == 64


@pytest.mark.parametrize(
    "numel, rnumel, kind, inner, expected",
    [
        (64, 64, PER, True, (1, 64, 1)),  # sum of a 64x64's rows: 64 programs
        (1024, 64, PER, True, (8, 64, 2)),  # 128 programs of 8 rows
        (8192, 1024, PER, True, (4, 1024, 8)),  # softmax 8192x1024: as before
        (8192, 2048, PER, True, (2, 2048, 8)),  # sum of 8192x2048: as before
        (8, 2**20, RED, True, (1, 4096, 16)),  # 8 long rows: more loads in flight
        (64, 50257, RED, True, (1, 4096, 16)),  # softmax over GPT-2's vocabulary
        (128, 50257, RED, True, (1, 1024, 4)),  # a program per SM: as before
        (4096, 8192, RED, False, (16, 32, 8)),  # outer: the tile stays
        (64, 4096, RED, False, (16, 32, 8)),  # outer and small: the tile stays
    ],
)
def test_reduction_blocks(numel, rnumel, kind, inner, expected):
    cfg = reduction_config(numel, rnumel, kind, inner=inner)
    assert (cfg["XBLOCK"], cfg["RBLOCK"], cfg["num_warps"]) == expected


def _kernels(fn, *args, interpret=False):
    gm = make_fx(fn)(*args)
    scheduler = Scheduler(GraphLowering(gm, list(args)).lower())
    return [
        generate_kernel(n, scheduler.removed_buffers, interpret=interpret)
        for n in scheduler.nodes
        if not n.is_extern()
    ]


def test_generated_kernels_carry_the_rule():
    x = torch.randn(64, 64)
    (chain,) = _kernels(lambda x: (x.sin().cos().tanh(),), x)
    assert dict(chain.meta) == {"XBLOCK": 128, "num_warps": 4}
    assert "xmask = tl.full([XBLOCK], True, tl.int1)" in chain.source  # 128 | 4096
    (rows,) = _kernels(lambda x: (x.sum(1),), x)
    assert dict(rows.meta) == {"XBLOCK": 1, "RBLOCK": 64, "num_warps": 1}


@pytest.mark.parametrize("shape", [(64, 64), (33, 65), (1, 7), (300, 3)])
def test_results_unchanged(shape):
    x = torch.randn(shape)
    torch._dynamo.reset()

    def fn(x):
        return x.sin().cos() * 2, x.sum(-1), torch.softmax(x, -1)

    got = torch.compile(fn, backend="minductor")(x)
    for g, want in zip(got, fn(x)):
        torch.testing.assert_close(g, want)


def test_dynamic_pointwise_blocks_are_sized_per_launch():
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x.sin() * 2, backend="minductor", dynamic=True)
    launchers = len(runtime._launchers)
    with record_compiled() as graphs:
        for n in (5, 4096, 3000):
            x = torch.randn(n)
            torch.testing.assert_close(fn(x), x.sin() * 2)
    assert len(runtime._launchers) == launchers  # no launcher kept per size seen
    (graph,) = graphs  # one compile serves every size
    (site,) = [ln for ln in graph.source.splitlines() if "= SizedSite(" in ln]
    assert "per_call='pointwise'" in site  # blocks chosen from each launch's size
    assert "xmask = xindex < xnumel" in graph.source  # no constant mask: any size
    assert runtime.pointwise_blocks(4096) == pointwise_config(4096, True)


# --- max-autotune ---------------------------------------------------------------------


def test_max_autotune_modes_turn_on_the_tuning():
    assert settings("max-autotune", None)["max_autotune"] is True
    assert settings("max-autotune-no-cudagraphs", None) == {"max_autotune": True}
    assert settings("default", None) == {}
    assert settings("max-autotune", {"max_autotune": False})["max_autotune"] is False


def test_candidates_around_the_rule():
    meta = {"XBLOCK": 128, "num_warps": 4}
    found = candidate_configs(POI, 4096, 1, meta)
    assert found[0] == meta  # the rule's own comes first
    assert {(c["XBLOCK"], c["num_warps"]) for c in found} == {
        (x, w) for x in (64, 128, 256) for w in (2, 4, 8)
    }


def test_candidates_respect_constant_masks_and_whole_rows():
    # 4224 = 128 * 33: the kernel has a constant xmask; 256 does not divide 4224
    found = candidate_configs(POI, 4224, 1, {"XBLOCK": 128, "num_warps": 4})
    assert {c["XBLOCK"] for c in found} == {64, 128}
    # 4000 is not a multiple of 128: the mask is real and any block may run
    found = candidate_configs(POI, 4000, 1, {"XBLOCK": 128, "num_warps": 4})
    assert {c["XBLOCK"] for c in found} == {64, 128, 256}
    # a persistent kernel keeps RBLOCK, its whole row
    per = {"XBLOCK": 4, "RBLOCK": 1024, "num_warps": 8}
    assert {c["RBLOCK"] for c in candidate_configs(PER, 8192, 1000, per)} == {1024}
    # a looped one may change its chunk
    red = {"XBLOCK": 1, "RBLOCK": 1024, "num_warps": 4}
    chunks = {c["RBLOCK"] for c in candidate_configs(RED, 64, 50257, red)}
    assert chunks == {512, 1024, 2048}


def test_autotune_measures_once_and_keeps_the_winner_on_disk(tmp_path):
    calls = []

    def fake_timer(cfg):  # pure Python: the smaller the block, the faster
        calls.append(cfg)
        if cfg["XBLOCK"] == 256 and cfg["num_warps"] == 8:
            raise RuntimeError("out of resources")  # a candidate that cannot compile
        return cfg["XBLOCK"] / 100 + cfg["num_warps"] / 1000

    candidates = candidate_configs(POI, 4096, 1, {"XBLOCK": 128, "num_warps": 4})
    with config.patch({"cache_dir": str(tmp_path)}):
        first = autotune("src", (4096, 1), "GPU", candidates, fake_timer)
        assert len(calls) == len(candidates) == 9
        assert first["config"] == {"XBLOCK": 64, "num_warps": 2}
        assert first["tried"] == 8 and not first["cached"]
        assert first["rule_ms"] == pytest.approx(1.284)
        path = autotune_path("src", (4096, 1), "GPU", candidates)
        assert path.parent == tmp_path / "autotune"
        assert json.loads(path.read_text())["config"] == first["config"]
        again = autotune("src", (4096, 1), "GPU", candidates, fake_timer)
        assert len(calls) == 9  # read from disk, not measured
        assert again["cached"] and again["config"] == first["config"]
        # another source, size, GPU or list of candidates is another entry
        assert autotune_path("src2", (4096, 1), "GPU", candidates) != path
        assert autotune_path("src", (4097, 1), "GPU", candidates) != path
        assert autotune_path("src", (4096, 1), "other GPU", candidates) != path
        assert autotune_path("src", (4096, 1), "GPU", candidates[:-1]) != path
        fewer = autotune("src", (4096, 1), "GPU", candidates[:3], fake_timer)
        assert len(calls) == 12 and not fewer["cached"]  # its three, timed


@pytest.mark.parametrize("damage", ["", "{", '{"ms": 1}', '{"config": {"XBLOCK": 7}}', "[]"])
def test_a_damaged_autotune_entry_is_timed_again_with_a_warning(damage, tmp_path, caplog):
    candidates = candidate_configs(POI, 4096, 1, {"XBLOCK": 128, "num_warps": 4})
    calls = []

    def timer(cfg):
        calls.append(cfg)
        return cfg["XBLOCK"] / 100 + cfg["num_warps"] / 1000

    with config.patch({"cache_dir": str(tmp_path)}):
        path = autotune_path("src", (4096, 1), "GPU", candidates)
        path.parent.mkdir(parents=True)
        path.write_text(damage)
        with caplog.at_level(logging.WARNING, logger="minductor"):
            found = autotune("src", (4096, 1), "GPU", candidates, timer)
        assert not found["cached"] and len(calls) == len(candidates)
        assert found["config"] == min(candidates, key=timer)
        assert "damaged, timing again" in caplog.text
        assert autotune("src", (4096, 1), "GPU", candidates, timer)["cached"]  # rewritten


def test_autotune_with_no_candidate_that_runs_keeps_nothing_and_says_why(tmp_path):
    def broken(cfg):
        raise RuntimeError(f"cannot run {cfg['XBLOCK']}")

    candidates = candidate_configs(POI, 4096, 1, {"XBLOCK": 128, "num_warps": 4})
    with config.patch({"cache_dir": str(tmp_path)}):
        with pytest.raises(AutotuneFailed, match="every configuration failed.*cannot"):
            autotune("src", (4096, 1), "GPU", candidates, broken)
        assert not autotune_path("src", (4096, 1), "GPU", candidates).exists()


def test_max_autotune_on_cpu_is_skipped_with_a_log_line(caplog, tmp_path):
    torch._dynamo.reset()
    runtime._skipped.clear()
    x = torch.randn(8, 8)
    fn = torch.compile(lambda x: x.cos() + 1, backend="minductor", mode="max-autotune")
    with config.patch({"cache_dir": str(tmp_path)}):
        with caplog.at_level(logging.WARNING, logger="minductor"):
            with record_compiled() as graphs:
                torch.testing.assert_close(fn(x), x.cos() + 1)
    said = [r.getMessage() for r in caplog.records]
    assert any("max-autotune skips kernels" in m for m in said)
    assert "# autotuned" not in graphs[0].source
    assert not (tmp_path / "autotune").exists()
    assert config.max_autotune is False  # only for that compile


# --- on a GPU -------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(64, 64), (4096, 1000), (8, 50000)])
def test_max_autotune_on_cuda_tunes_and_says_so(shape, tmp_path):
    torch._dynamo.reset()
    x = torch.randn(shape, device="cuda")

    def fn(x):
        return x.sin() * 2, x.sum(-1), torch.softmax(x, -1)

    with config.patch({"cache_dir": str(tmp_path)}):
        compiled = torch.compile(fn, backend="minductor", mode="max-autotune")
        with record_compiled() as graphs:
            got = compiled(x)
    # a sum of n float32 values in another order: a few ulps of the sum's magnitude
    # (about sqrt(n)), which the default absolute tolerance (1e-5) does not allow
    sum_tol = 1e-6 * shape[1] ** 0.5
    for g, want, atol in zip(got, fn(x), (1e-5, sum_tol, 1e-5)):
        torch.testing.assert_close(g, want, atol=atol, rtol=1.3e-6)
    source = graphs[0].source
    lines = [line.strip() for line in source.splitlines()]
    launches = sum(ln.startswith("launch_triton") and "CallSite(" not in ln for ln in lines)
    assert source.count("# autotuned: ") == launches >= 1
    assert len(list((tmp_path / "autotune").glob("*.json"))) >= 1


@pytest.mark.cuda
def test_max_autotune_reads_its_cache_on_a_second_compile(tmp_path):
    x = torch.randn(300, 70, device="cuda")
    with config.patch({"cache_dir": str(tmp_path)}):
        sources = []
        for _ in range(2):
            torch._dynamo.reset()
            compiled = torch.compile(lambda x: x.exp().sum(0), backend="minductor",
                                     mode="max-autotune-no-cudagraphs")
            with record_compiled() as graphs:
                torch.testing.assert_close(compiled(x), x.exp().sum(0))
            sources.append(graphs[0].source)
    assert "tried)" in sources[0] and "cached)" in sources[1]


@pytest.mark.cuda
def test_small_pointwise_kernels_fill_the_gpu_on_cuda():
    torch._dynamo.reset()
    x = torch.randn(64, 64, device="cuda")
    with record_compiled() as graphs:
        out = torch.compile(lambda x: x.sin().cos(), backend="minductor")(x)
    torch.testing.assert_close(out, x.sin().cos())
    assert "XBLOCK=128, num_warps=4" in graphs[0].source


def test_autotune_kernel_times_each_candidate_through_launch(monkeypatch, tmp_path):
    # the GPU path, run in the interpreter: pretend the tensors are on a GPU, and
    # time each candidate with a fake timer that runs it once and checks its result
    x = torch.randn(33, 65)
    (kernel,) = _kernels(lambda x: (x.sin(),), x, interpret=True)
    monkeypatch.setattr(runtime, "interpret_mode", lambda: False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "fake GPU")
    made = []

    def example(size, stride, dtype, device):
        made.append(torch.randn(size))
        return made[-1]

    monkeypatch.setattr(runtime, "_example", example)
    timed = []

    def timer(run):
        made[1].zero_()
        run()
        torch.testing.assert_close(made[1], made[0].sin())  # every candidate is right
        timed.append(1)
        return 1.0 / (len(timed) + 1)  # the later, the faster: the last one wins

    monkeypatch.setattr(runtime.Launcher, "__init__", _interpreting(runtime.Launcher))
    cuda = torch.device("cuda")
    layouts = [((33, 65), (65, 1), torch.float32, cuda)] * 2
    with config.patch({"cache_dir": str(tmp_path)}):
        meta, comment = runtime.autotune_kernel(kernel, layouts, [], (2145, 1), timer)
    candidates = candidate_configs(POI, 2145, 1, dict(kernel.meta))
    assert len(timed) == len(candidates) and meta == candidates[-1]
    assert comment.startswith("# autotuned: XBLOCK=") and comment.endswith("tried)")


def _interpreting(cls):
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.interpret = True  # the kernel was decorated for the interpreter

    return __init__


def test_launch_keeps_a_launcher_per_number_of_warps():
    # autotuning launches one kernel with the same blocks and other warps: each must
    # get its own launcher (and binary), not the first one's
    x = torch.randn(64, 64)
    (kernel,) = _kernels(lambda x: (x.sin(),), x, interpret=True)
    module = runtime.load_module(
        runtime.KERNEL_HEADER + kernel.source.replace("KERNEL_NAME", "kernel")
    )
    out = torch.empty(4096)
    for warps in (2, 4):
        runtime.launch(module.kernel, 4096, x, out, XBLOCK=1024, num_warps=warps)
    found = [
        launcher.num_warps
        for key, launcher in runtime._launchers.items()
        if key[0] == id(module.kernel)
    ]
    assert sorted(found) == [2, 4]
    torch.testing.assert_close(out, x.sin().flatten())
