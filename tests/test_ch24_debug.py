"""Chapter 24: debug folders, torch's logs and structured trace, explain, profiles."""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import minductor
from minductor import debug
from minductor.capture import record_compiled
from minductor.debug import explain, ir_str, pre_fusion_nodes
from minductor.lowering import GraphLowering
from minductor.runtime import interpret_mode
from minductor.scheduler import Scheduler

pytestmark = pytest.mark.ch24

DEVICE = "cpu" if interpret_mode() else "cuda"
ROOT = Path(__file__).resolve().parents[1]
FILES = {
    "fx_graph_readable.py",
    "ir_pre_fusion.txt",
    "ir_post_fusion.txt",
    "fusion_log.txt",
    "fallbacks.txt",
    "output_code.py",
}


def _compile(fn, **options):
    torch._dynamo.reset()
    return torch.compile(fn, backend="minductor", options=options or None)


def _run(code: str, **env) -> subprocess.CompletedProcess:
    """Run code in a new interpreter: TORCH_LOGS and TORCH_TRACE are read at import."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
        cwd=env.get("CWD", str(ROOT)),
    )


def test_debug_folder_per_graph_forward_and_backward(tmp_path):
    def f(x, w):
        return (torch.tanh(x @ w) * 2).sum(1)

    x = torch.randn(6, 5, device=DEVICE, requires_grad=True)
    w = torch.randn(5, 7, device=DEVICE, requires_grad=True)
    compiled = _compile(f, debug_dir=str(tmp_path))
    with record_compiled() as found:
        out = compiled(x, w)
        out.sum().backward()
    expected = f(x.detach(), w.detach())
    torch.testing.assert_close(out, expected)
    folders = sorted((tmp_path / "torchinductor").iterdir())
    names = [p.name for p in folders]
    assert len(names) == 2, names
    # AOTAutograd numbers graphs over the whole process: model__<n>_<kind>_<m>
    assert re.fullmatch(r"model__\d+_backward_\d+\.0", names[0]), names
    assert re.fullmatch(r"model__\d+_forward_\d+\.0", names[1]), names
    assert names[0].split("_")[2] == names[1].split("_")[2]  # the same Dynamo graph
    forward, backward = folders[1], folders[0]
    for folder in folders:
        assert {p.name for p in folder.iterdir()} == FILES
    # the module in the folder is the one that ran, and the log is the scheduler's
    assert (forward / "output_code.py").read_text() == found[0].source
    assert (backward / "output_code.py").read_text() == found[1].source
    fusion = (forward / "fusion_log.txt").read_text().splitlines()
    assert fusion == found[0].fusion_log
    assert "aten.mm" in (forward / "fx_graph_readable.py").read_text()
    assert "extern kernel" in (forward / "fallbacks.txt").read_text()


def test_debug_folder_counts_up_for_the_same_graph_name(tmp_path):
    root = tmp_path
    first = debug.new_debug_folder(root, "model__0_forward_1")
    second = debug.new_debug_folder(root, "model__0_forward_1")
    assert (first.name, second.name) == ("model__0_forward_1.0", "model__0_forward_1.1")


def test_torch_compile_debug_uses_dynamos_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_COMPILE_DEBUG", "1")
    monkeypatch.setattr(torch._dynamo.config, "debug_dir_root", str(tmp_path))
    x = torch.randn(9, device=DEVICE)
    torch.testing.assert_close(_compile(lambda x: x.cos() + 1)(x), x.cos() + 1)
    runs = [p for p in tmp_path.iterdir() if p.name.startswith("run_")]
    assert len(runs) == 1, list(tmp_path.iterdir())
    run = runs[0]
    assert run.name.startswith("run_") and f"-pid_{os.getpid()}" in run.name
    # AOTAutograd writes its own aot_model___0_debug.log beside our folders
    folders = [p for p in (run / "torchinductor").iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    (folder,) = folders
    assert re.fullmatch(r"model__\d+_inference_\d+\.0", folder.name)
    assert "triton_poi_fused_add_cos_0" in (folder / "output_code.py").read_text()


def test_no_folder_unless_asked(monkeypatch):
    monkeypatch.delenv("TORCH_COMPILE_DEBUG", raising=False)
    assert minductor.config.debug_dir == ""
    assert debug.debug_root() is None


def test_fallbacks_with_reasons(tmp_path):
    def f(x):
        return torch.linalg.det(x * 3).exp()

    x = torch.randn(3, 2, 2, device=DEVICE)
    out = _compile(f, debug_dir=str(tmp_path))(x)
    torch.testing.assert_close(out, f(x))
    (folder,) = (tmp_path / "torchinductor").iterdir()
    text = (folder / "fallbacks.txt").read_text()
    assert text == "fallback aten._linalg_det.default: no lowering\n"


def test_ir_before_and_after_fusion():
    def f(x, y):
        return torch.softmax(x + y, dim=-1)

    from torch.fx.experimental.proxy_tensor import make_fx

    from minductor.decompositions import decomposition_table

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    gm = make_fx(f, decomposition_table=decomposition_table())(x, y)
    graph = GraphLowering(gm, [x, y]).lower()
    before = ir_str(pre_fusion_nodes(graph))
    after = ir_str(Scheduler(graph).nodes)
    # one paragraph per node: every lowered buffer before, fewer kernels after
    paragraphs = [p for p in before.split("\n\n\n") if p]
    assert len(paragraphs) == len(graph.buffers) >= 3
    assert all(": SchedulerNode(ComputedBuffer)" in p for p in paragraphs)
    assert "FusedSchedulerNode(" in after and "FusedSchedulerNode(" not in before
    assert "reduction loop [6]" in before
    assert "ops.reduction(torch.float32, torch.float32, max" in before


def test_explain_graphs_breaks_fallbacks_kernels(capsys):
    def h(x, w):
        y = torch.relu(x @ w)
        if y.sum() > 0:  # a graph break: Python needs the value
            y = y * 2
        return torch.linalg.det(y[:, :4].reshape(-1, 2, 2) * 3).exp() + y.mean()

    x, w = torch.randn(4, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
    torch._dynamo.reset()
    report = explain(h, x, w)
    printed = capsys.readouterr().out
    assert report.graph_count == 2 and len(report.graphs) == 2
    (why,) = report.break_reasons
    assert "generic_jump" in why and "test_ch24_debug.py" in why
    first, second = report.graphs
    assert first.extern_kernels == ["extern_kernels.mm"]
    (kernel,) = first.kernels
    assert kernel.origins == ("gt", "relu", "sum")
    assert first.refusals[0] == "cannot fuse buf0 with buf1: buf0 is an extern kernel"
    assert [k.origins for k in second.kernels] == [
        ("mul",),
        ("mul", "sum"),
        ("add", "div", "exp"),
    ]
    assert second.fallbacks == [("aten._linalg_det.default", "no lowering")]
    assert "fallback aten._linalg_det.default: no lowering" in printed
    assert "1 break(s)" in printed


def test_explain_bytes_per_kernel():
    x, y = torch.randn(8, 32, device=DEVICE), torch.randn(8, 32, device=DEVICE)
    torch._dynamo.reset()
    report = explain(lambda x, y: (x.sin() * y).sum(1), x, y)
    (kernel,) = report.graphs[0].kernels
    assert kernel.name.startswith("triton_per_fused_")
    assert kernel.origins == ("mul", "sin", "sum")
    # reads x and y whole (8 * 32 floats each), writes 8 floats
    assert kernel.reads == {"arg0_1": 1024, "arg1_1": 1024}
    assert kernel.writes == {"buf0": 32}
    assert kernel.num_bytes == 2080


def test_explain_names_a_refused_fusion():
    torch._dynamo.reset()
    x = torch.randn(6, 10, device=DEVICE)
    report = explain(lambda x: x.sum(0).sum() + x.sum(1).sum(), x)
    refusals = report.graphs[0].refusals
    assert "cannot fuse buf0 with buf2: different numel: 10x6 vs 6x10" in refusals
    assert len(refusals) == len(set(refusals))


def test_profiler_shows_graph_call_and_kernel_names():
    from torch.profiler import ProfilerActivity, profile

    def mlp(x, w):
        return torch.nn.functional.gelu(x @ w).sum(1)

    fast = _compile(mlp)
    x, w = torch.randn(32, 16, device=DEVICE), torch.randn(16, 16, device=DEVICE)
    with record_compiled() as found:
        fast(x, w)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fast(x, w)
    torch.testing.assert_close(out, mlp(x, w), rtol=1e-4, atol=1e-4)
    names = [e.name for e in prof.events()]
    (kernel,) = found[0].kernel_names
    stem = Path(found[0].path).stem
    assert f"## Call CompiledFxGraph {stem} ##" in names
    assert names.count(kernel) == 1
    assert names.index(f"## Call CompiledFxGraph {stem} ##") < names.index(kernel)


def test_recompiles_log_works_with_minductor():
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    keep = Keep(level=logging.DEBUG)
    logging.getLogger("torch._dynamo").addHandler(keep)
    torch._logging.set_logs(recompiles=True)
    try:
        scale = _compile(lambda x: x * 3)
        scale(torch.randn(4, 8, device=DEVICE))
        assert not any("Recompiling" in m for m in lines)
        scale(torch.randn(5, 8, device=DEVICE))
    finally:
        torch._logging.set_logs()
        logging.getLogger("torch._dynamo").removeHandler(keep)
    text = "\n".join(lines)
    assert "Recompiling function" in text and "size mismatch" in text


SMALL = (
    "import torch, minductor\n"
    "f = torch.compile(lambda x: x * 2 + 1, backend='minductor')\n"
    "print(f(torch.arange(4.0)).tolist())\n"
)


@pytest.fixture(scope="module")
def logged_and_traced(tmp_path_factory):
    """SMALL run once in a new interpreter with both TORCH_LOGS and TORCH_TRACE set
    (starting one costs 5 s): the run, and the folder the trace went to."""
    trace = tmp_path_factory.mktemp("trace")
    return _run(SMALL, TORCH_LOGS="output_code", TORCH_TRACE=str(trace)), trace


def test_torch_logs_output_code_prints_minductors_code(logged_and_traced, capfd):
    done, _ = logged_and_traced
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1.0, 3.0, 5.0, 7.0]"
    assert "[__output_code] Output code:" in done.stderr
    assert "def triton_poi_fused_add_mul_0(" in done.stderr
    assert "Output code written to: " in done.stderr
    # this process has no TORCH_LOGS: the same compile prints nothing
    assert "output_code" not in os.environ.get("TORCH_LOGS", "")
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2 + 1, backend="minductor")
    assert f(torch.arange(4.0, device=DEVICE)).tolist() == [1.0, 3.0, 5.0, 7.0]
    assert "Output code" not in capfd.readouterr().err


@pytest.mark.slow  # two more interpreters started: 9 s
def test_torch_logs_plus_minductor_and_fusion_artifact():
    done = _run(SMALL.replace("x * 2 + 1", "(x * 2).sum() + x"), TORCH_LOGS="fusion")
    assert done.returncode == 0, done.stderr
    assert "[__fusion] model__0_inference_0: fuse buf" in done.stderr
    done = _run(SMALL, TORCH_LOGS="+minductor")
    assert done.returncode == 0, done.stderr
    assert "minductor/debug.py" not in done.stderr  # no artifact was asked for
    assert "fallback" not in done.stderr and "pid" not in done.stdout


def _structured_records(trace_dir: Path) -> list[dict]:
    records = []
    for log in trace_dir.iterdir():
        for line in log.read_text().splitlines():
            if line.startswith(("V", "I", "W")) and "{" in line:
                records.append(json.loads(line[line.index("{") :]))
    return records


def test_torch_trace_has_inductor_output_code(logged_and_traced):
    done, trace = logged_and_traced
    assert done.returncode == 0, done.stderr
    records = _structured_records(trace)
    code = [r for r in records if "inductor_output_code" in r]
    assert len(code) == 1
    assert code[0]["inductor_output_code"]["filename"].endswith(".py")
    names = {r["artifact"]["name"] for r in records if "artifact" in r}
    assert {"minductor_fusion_log", "minductor_fallbacks"} <= names


def _tlparse() -> str | None:
    beside = Path(sys.executable).parent / "tlparse"
    return shutil.which("tlparse") or (str(beside) if beside.exists() else None)


@pytest.mark.slow  # the trace test above reads the same records
@pytest.mark.skipif(_tlparse() is None, reason="tlparse is not installed")
def test_tlparse_shows_our_output_code(tmp_path):
    trace = tmp_path / "trace"
    done = _run(SMALL, TORCH_TRACE=str(trace))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "report"
    (log,) = trace.iterdir()
    parsed = subprocess.run(
        [_tlparse(), str(log), "-o", str(out), "--no-browser"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert parsed.returncode == 0, parsed.stderr
    pages = list(out.rglob("inductor_output_code_*.html"))
    assert len(pages) == 1
    assert "triton_poi_fused_add_mul_0" in pages[0].read_text()
    assert "inductor_output_code" in (out / "index.html").read_text()


@pytest.mark.cuda
def test_cuda_profile_has_triton_kernels_by_name():
    from torch.profiler import ProfilerActivity, profile

    fast = _compile(lambda x: torch.relu(x) * 2)
    x = torch.randn(1000, device="cuda")
    fast(x)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fast(x)
        torch.cuda.synchronize()
    gpu = [
        e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
    ]
    assert "triton_poi_fused_mul_relu_0" in gpu
