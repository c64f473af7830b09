"""The kernel workloads (chapters/measuring_kernels.md, minductor/harness/kernels.py).

Everything but the measuring runs on CPU: byte counts, the tables, the SVG, the JSON
round trip, the command line without a GPU. The last test measures a tiny workload on a
GPU and is skipped without one.
"""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from minductor.harness import common, kernels
from minductor.harness.kernels import BACKENDS, Result, Run, Workload

pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
TRAIN = "bench-2026-11-23-h200-train.json"  # a training step, not a Run


def results() -> list[Result]:
    return [
        Result(
            "a*b+c",
            4 * 4096 * 4096 * 4,
            gpu_ms={"eager": 0.1, "minductor": 0.08, "inductor": 0.064},
            host_ms={"eager": 0.11, "minductor": 0.09, "inductor": 0.07},
            cold_s={"minductor": 0.5, "inductor": 2.0},
        ),
        Result(
            "x<y & z, 1 element",  # characters that XML must escape
            16,
            gpu_ms={"eager": 0.0065, "minductor": 0.0041, "inductor": 0.0162},
        ),
    ]


def sample_run(peak=4000.0) -> Run:
    return Run("NVIDIA H200", "2.11.0", "3.6.0", "2026-11-23", peak, results())


# --- bytes and bandwidth --------------------------------------------------------------


def test_gbps_is_bytes_per_nanosecond():
    assert kernels.gbps(4 * 10**9, 1.0) == pytest.approx(4000.0)  # 4 GB in 1 ms
    assert kernels.gbps(2 * 2**30, 0.5) == pytest.approx(2 * 2**30 / 0.5e6)
    r = results()[0]
    assert r.gbps("minductor") == pytest.approx(268435456 / 0.08 / 1e6)


@pytest.mark.parametrize("workload", kernels.WORKLOADS, ids=lambda w: w.name)
def test_stated_bytes_are_inputs_read_once_plus_outputs_written_once(workload):
    inputs = workload.make_inputs("meta")  # shapes and dtypes, no memory
    outputs = common.as_tuple(workload.fn(*inputs))
    moved = sum(t.nbytes for t in inputs) + sum(t.nbytes for t in outputs)
    assert workload.bytes == moved


def test_workloads_of_the_issue_are_there():
    names = [w.name for w in kernels.WORKLOADS]
    assert len(set(names)) == len(names)
    for part in [
        "a*b+c",
        "gelu(x+bias)*0.5+x",
        "softmax, 8192x2048",
        "layer_norm",
        "RMSNorm+residual",
        "x.sum(0)",
        "var_mean",
        "cross_entropy",
        "log_softmax",
        "10-op chain",
        "two outputs",
        "(looped)",
    ]:
        assert any(part in name for name in names), part


def test_select_by_substring():
    assert kernels.select(None) == kernels.WORKLOADS
    names = [w.name for w in kernels.select(["SOFTMAX", "x.sum(0)"])]
    assert names == [
        "x.sum(0), 4096x8192",
        "softmax, 8192x1024",
        "softmax, 8192x2048",
        "log_softmax, 8192x1024",
    ]
    assert kernels.select(["no such workload"]) == []


# --- checking against eager -----------------------------------------------------------


def test_check_close_accepts_rounding_and_rejects_errors():
    want = (torch.linspace(-3, 3, 101),)
    common.check_close("ok", (want[0] * (1 + 1e-6),), want)
    common.check_close("bf16", (want[0].to(torch.bfloat16),), want)
    with pytest.raises(AssertionError, match="wrong, output 0: minductor is not eager"):
        common.check_close("wrong", (want[0] + 1e-2,), want)
    with pytest.raises(AssertionError, match="2 outputs, eager has 1"):
        common.check_close("count", (want[0], want[0]), want)


def test_check_compares_with_eager_in_fp32():
    workload = Workload("tiny", kernels.add_mul, kernels.randn(5, 5, 5), 4 * 5 * 4)
    inputs = workload.make_inputs("cpu")
    kernels.check(workload, kernels.add_mul, inputs)
    with pytest.raises(AssertionError, match="tiny"):
        kernels.check(workload, lambda a, b, c: a * b - c, inputs)
    with pytest.raises(AssertionError, match="dtypes"):
        kernels.check(workload, lambda a, b, c: (a * b + c).double(), inputs)


# --- the tables -----------------------------------------------------------------------


def test_markdown_tables():
    text = kernels.markdown(sample_run())
    lines = text.splitlines()
    assert lines[0] == (
        "Measured 2026-11-23 on NVIDIA H200, torch 2.11.0, triton 3.6.0."
    )
    assert lines[1].startswith("Copy peak: 4000 GB/s (`dst.copy_(src)`, 1 GiB of fp32")
    gpu = [line for line in lines if line.startswith("| a*b+c |")][0]
    assert gpu == (
        "| a*b+c | 268.4 MB | 100.0 | 64.0 | 80.0 | 1.25x | 0.80x "
        "| 3355 (84%) | 4194 (105%) |"
    )
    host = [line for line in lines if line.startswith("| a*b+c |")][1]
    assert host == "| a*b+c | 110.0 | 70.0 | 90.0 | 0.50 | 2.00 |"
    small = [line for line in lines if line.startswith("| x<y & z")]
    assert small[0].startswith("| x<y & z, 1 element | 16 B | 6.5 | 16.2 | 4.1 |")
    assert small[1] == "| x<y & z, 1 element | — | — | — | — | — |"
    for table in text.split("\n\n")[1:]:  # each row has its header's columns
        rows = table.splitlines()
        assert rows[0].startswith("| workload |")
        assert {row.count("|") for row in rows} == {rows[0].count("|")}, rows


def test_markdown_without_a_copy_peak():
    text = kernels.markdown(sample_run(peak=None))
    assert "Copy peak: — GB/s" in text
    assert "| 3355 | 4194 |" in text


# --- the chart ------------------------------------------------------------------------


def test_svg_is_xml_with_a_bar_per_workload_and_backend():
    root = ET.fromstring(kernels.svg(sample_run()))
    assert root.tag == SVG + "svg"
    bars = [r for r in root.iter(SVG + "rect") if "bar" in r.get("class", "").split()]
    assert len(bars) == len(results()) * len(BACKENDS)
    for backend in BACKENDS:
        assert sum(backend in r.get("class").split() for r in bars) == len(results())
    texts = [t.text for t in root.iter(SVG + "text")]
    for r in results():
        assert r.name in texts
    assert {"eager", "minductor", "Inductor"} <= set(texts)
    # lengths are speeds relative to Inductor: eager 0.64x, minductor 0.8x, Inductor 1x
    widths = {r.get("class"): float(r.get("width")) for r in bars[:3]}
    assert widths["bar eager"] / widths["bar inductor"] == pytest.approx(0.64, abs=0.01)
    assert widths["bar minductor"] / widths["bar inductor"] == pytest.approx(
        0.8, abs=0.01
    )


def test_json_round_trip_and_plot(tmp_path):
    run = sample_run()
    assert Run.from_json(run.to_json()) == run
    data, out = tmp_path / "run.json", tmp_path / "run.svg"
    data.write_text(run.to_json())
    assert kernels.main(["--plot", str(data), "--svg", str(out)]) == 0
    assert out.read_text() == kernels.svg(run)


def test_the_page_draws_its_tables_and_chart_from_runs():
    page = (REPO / "chapters" / "performance.md").read_text()
    runs = set(re.findall(r"assets/(bench-[\w-]+\.json)", page)) - {TRAIN}
    assert runs and "kernels.svg(" in page and "kernels.gpu_table(" in page
    for name in runs:
        run = Run.from_json((REPO / "chapters" / "assets" / name).read_text())
        root = ET.fromstring(kernels.svg(run))
        bars = [r for r in root.iter(SVG + "rect") if "bar" in r.get("class", "")]
        assert len(bars) == len(run.results) * len(BACKENDS)


# --- the command line -----------------------------------------------------------------


def run_cli(*args):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "minductor.bench", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_cuda_it_says_so_and_fails(monkeypatch, capsys):
    """In this process (a new one costs 5 s; the slow test below starts the command
    line itself), with the GPU hidden."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert kernels.main([]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "measures on a CUDA GPU and found none" in err


@pytest.mark.slow
def test_plot_works_without_cuda(tmp_path):
    data, out = tmp_path / "run.json", tmp_path / "run.svg"
    data.write_text(sample_run().to_json())
    result = run_cli("--plot", str(data), "--svg", str(out))
    assert result.returncode == 0, result.stderr
    ET.fromstring(out.read_text())


def test_plot_needs_svg():
    with pytest.raises(SystemExit) as stop:
        kernels.parse_args(["--plot", "run.json"])
    assert stop.value.code == 2


# --- on a GPU -------------------------------------------------------------------------


@pytest.mark.cuda
def test_measure_a_tiny_workload_on_the_gpu():
    tiny = Workload(
        "tiny a*b+c", kernels.add_mul, kernels.randn(*[(33, 65)] * 3), 4 * 33 * 65 * 4
    )
    result = kernels.measure(tiny, cold=True)
    assert result.name == "tiny a*b+c" and result.bytes == tiny.bytes
    for times in (result.gpu_ms, result.host_ms):
        assert set(times) == set(BACKENDS)
        assert all(0 < t < 1000 for t in times.values()), times
    assert set(result.cold_s) == {"minductor", "inductor"}
    assert all(0 < s < 600 for s in result.cold_s.values()), result.cold_s
    assert kernels.measure(tiny, cold=False).cold_s == {}
    run = Run(
        "gpu", torch.__version__, "triton", "today", kernels.copy_peak_gbps(), [result]
    )
    assert run.copy_peak_gbps > 10  # GB/s: any GPU copies faster than this
    assert "| tiny a*b+c |" in kernels.markdown(run)
    ET.fromstring(kernels.svg(run))
