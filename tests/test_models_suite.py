"""The real-model suite (chapters/measuring_models.md, minductor/harness/models.py), on
CPU at tiny sizes.

The measuring child runs in this process (`measure_model`), which saves starting a
Python per model; the command line runs as a subprocess once, where nothing needs a
compile: a torchvision model (not importable here) and a child killed by its timeout.
Two fake backends check that the suite can fail: one nudges every output by one part in
10^4, one raises.
"""

import dataclasses
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from minductor.harness import common, models
from minductor.harness.models import (
    Row,
    check,
    markdown,
    measure_model,
    parse_args,
    select,
)

pytestmark = pytest.mark.e2e
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
COLUMNS = {f.name for f in dataclasses.fields(Row)}


def nudged(gm, example_inputs):
    def run(*args):
        outs = gm(*args)
        return type(outs)(o * (1 + 1e-4) if o.is_floating_point() else o for o in outs)

    return run


def broken(gm, example_inputs):
    raise RuntimeError("no kernels today")


for fake in (nudged, broken):
    if fake.__name__ not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(fake)


@pytest.mark.parametrize("name", ["gpt2", pytest.param("bert", marks=pytest.mark.slow)])
def test_inference_matches_eager(name):
    eager, compiled = measure_model(
        name, "inference", "fp32", ["eager", "minductor"], True
    )
    assert (eager.backend, compiled.backend) == ("eager", "minductor")
    assert eager.status == compiled.status == "ok", compiled.detail
    assert eager.out_abs == 0 and eager.speedup == 1
    assert compiled.out_rel < 1e-5 and compiled.ratio < 1
    assert compiled.err64 < 1e-5 and compiled.err64_eager < 1e-5
    assert compiled.grad_rel is None  # no gradients in inference
    assert compiled.cold_s > 0 and compiled.step_ms > 0 and compiled.speedup > 0
    assert (compiled.peak_mib is None) == (not torch.cuda.is_available())
    assert compiled.graphs == 1 and compiled.graph_breaks == 0
    assert compiled.compiled_graphs == 1 and compiled.kernels > 0


@pytest.mark.slow
def test_training_checks_every_gradient():
    eager, compiled = measure_model(
        "bert", "training", "fp32", ["eager", "minductor"], True
    )
    assert compiled.status == "ok", compiled.detail
    assert 0 < compiled.grad_rel < 1e-5
    assert compiled.compiled_graphs == 2  # forward and backward
    # the keys' bias, one per layer, has a gradient that is zero up to rounding:
    # eager's own value has no correct digit, so it is not compared
    assert eager.noise == compiled.noise == 2
    assert compiled.worst.startswith("grad ") or compiled.worst in ("loss", "logits")


@pytest.mark.slow
def test_reduce_overhead_runs_both_steps_with_marks():
    """--compile-mode reaches torch.compile; on the CPU, CUDA graphs are skipped and the
    training step still matches eager, each step begun with
    cudagraph_mark_step_begin."""
    marks = []
    real = torch.compiler.cudagraph_mark_step_begin
    torch.compiler.cudagraph_mark_step_begin = lambda: (marks.append(1), real())[1]
    try:
        eager, compiled = measure_model(
            "gpt2", "training", "fp32", ["eager", "minductor"], True, "reduce-overhead"
        )
    finally:
        torch.compiler.cudagraph_mark_step_begin = real
    assert compiled.status == "ok", compiled.detail
    assert (eager.compile_mode, compiled.compile_mode) == ("", "reduce-overhead")
    assert compiled.grad_rel < 1e-5
    # the cold step, the warm-up steps and the timed ones; eager's steps have no mark
    assert len(marks) == 1 + models.WARMUP["cpu"] + models.STEPS["cpu"]
    assert "| minductor (reduce-overhead) |" in markdown([eager, compiled])
    assert "mode=reduce-overhead" in models.svg([eager, compiled])


def test_backends_are_timed_in_turns_and_a_failing_step_is_reported():
    calls = []

    def step_of(name, fail_at=None):
        def one_step():
            calls.append(name)
            if calls.count(name) == fail_at:
                raise ValueError(f"{name} broke")

        return one_step

    steps = {"eager": step_of("eager"), "a": step_of("a"), "b": step_of("b", 2)}
    per_block = models.STEPS["cpu"] // models.ROUNDS["cpu"]
    times = common.time_in_turns(steps, "cpu", models.ROUNDS["cpu"], per_block)
    blocks = [calls[i] for i in range(0, len(calls), per_block)]
    # round 1 in order, round 2 reversed; b failed in its second block and left
    assert blocks == ["eager", "a", "b", "b", "a", "eager"][: len(blocks)]
    assert calls.count("b") == 2 and calls.count("a") == models.STEPS["cpu"]
    assert isinstance(times["b"], ValueError) and times["a"] > 0 and times["eager"] > 0


@pytest.mark.slow
def test_wrong_results_and_errors_are_reported():
    rows = list(measure_model("gpt2", "inference", "fp32", ["nudged", "broken"], True))
    assert [r.backend for r in rows] == ["nudged", "broken"]  # eager ran, unreported
    nudge, error = rows
    assert nudge.status.startswith("wrong: logits is ")
    assert nudge.ratio > 1 and 5e-5 < nudge.out_rel < 2e-4
    assert error.status == "error: RuntimeError: no kernels today"
    assert "RuntimeError" in error.detail


def test_check_rules():
    def judge(got, eager, fp64):
        row = Row("m", "inference", "fp32", "b")
        return row, check(row, got, eager, fp64)

    ref = torch.linspace(-1, 1, 1000, dtype=torch.float64)
    eager, fp64 = {"logits": ref.float() + 1e-7}, {"logits": ref}
    assert judge({"logits": ref.float()}, eager, fp64)[1] == ""
    row, problem = judge({"logits": ref.float() + 1e-4}, eager, fp64)
    assert problem.startswith("logits is ") and row.ratio > 1
    nan = ref.float().clone()
    nan[3] = float("nan")
    assert judge({"logits": nan}, eager, fp64)[1] == "logits: not finite"
    assert "shape" in judge({"logits": ref.float()[:5]}, eager, fp64)[1]
    assert "only one of" in judge({}, eager, fp64)[1]
    # a tensor that eager gets wrong by more than its size is not compared at all
    noisy = {"grad b": torch.full((10,), 1e-9)}
    zero = {"grad b": torch.full((10,), 1e-17, dtype=torch.float64)}
    row, problem = judge({"grad b": torch.full((10,), -3e-9)}, noisy, zero)
    assert problem == "" and row.noise == 1 and row.grad_rel is None


@pytest.mark.slow
def test_command_line_skips_and_times_out(tmp_path):
    """torchvision does not import on a CPU-only machine; GPT-2 has 1 s to run."""
    out, plot = tmp_path / "run.json", tmp_path / "run.svg"
    args = ["--tiny", "--models", "resnet18", "gpt2", "--mode", "inference"]
    args += ["--dtype", "fp32", "--backends", "eager", "minductor", "--timeout", "1"]
    args += ["--json", str(out), "--svg", str(plot)]
    done = subprocess.run(
        [sys.executable, "-m", "minductor.models", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert all(set(r) == COLUMNS for r in rows)
    status = {(r["model"], r["backend"]): r["status"] for r in rows}
    assert status[("gpt2", "eager")] == "error: timed out after 1 s"
    why = common.missing("torchvision")  # on a machine where it imports: a timeout
    skipped = f"skipped: {why}" if why else "error: timed out after 1 s"
    assert status[("resnet18", "minductor")] == skipped
    table = done.stdout.strip().splitlines()
    assert table[0].startswith("| model | mode | dtype | backend | status |")
    assert len(table) == 2 + 4 and table[-1].startswith("| resnet18 (B=2 image=64) |")
    ET.parse(plot)  # no speed-ups to draw, and still a well-formed SVG


def test_markdown_and_svg():
    rows = [
        Row("gpt2", "training", "bf16", "eager", shape="B=8 T=512", step_ms=9.0),
        Row("gpt2", "training", "bf16", "inductor", step_ms=6.0, speedup=1.5),
        Row("gpt2", "training", "bf16", "minductor", speedup=1.2, fallbacks={"a": 2}),
        Row("gpt2", "training", "bf16", "minductor", "error: a|b"),
    ]
    lines = markdown(rows).splitlines()
    assert len(lines) == 2 + 4
    assert all(line.count(" | ") == 15 for line in lines)
    assert "| a ×2 |" in lines[4] and "error: a\\|b" in lines[5]
    svg = ET.fromstring(models.svg(rows))
    bars = [
        r
        for r in svg.iter("{http://www.w3.org/2000/svg}rect")
        if "bar" in r.get("class", "")
    ]
    assert [b.get("class") for b in bars] == ["bar inductor", "bar minductor"]


def test_summary_without_eager_rows_reads_eagers_time_from_the_speed_ups():
    rows = [  # --backends inductor minductor: eager ran, and kept no row
        Row("gpt2", "inference", "bf16", "inductor", step_ms=2.0, speedup=3.0, cold_s=9.0),
        Row("gpt2", "inference", "bf16", "minductor", step_ms=1.5, speedup=4.0, cold_s=3.0),
        Row("bert", "inference", "bf16", "inductor", step_ms=1.0, speedup=2.0),
        Row("bert", "inference", "bf16", "minductor", step_ms=2.0, speedup=1.0),
    ]
    lines = models.summary(rows)
    assert len(lines) == 2 + 2
    gpt2 = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert gpt2[2:8] == ["6.00", "2.00", "1.50", "4.00x", "1.33x", "9.0 / 3.0"]
    bert = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert bert[2:7] == ["2.00", "1.00", "2.00", "1.00x", "0.50x"]


def test_flags():
    args = parse_args([])
    assert args.mode == args.dtype == "both" and not args.tiny and args.timeout == 600
    assert args.backends == ["eager", "inductor", "minductor"]
    assert args.compile_mode == "default"
    graphed = parse_args(["--compile-mode", "reduce-overhead"])
    assert graphed.compile_mode == "reduce-overhead"
    assert [m.name for m in select(["bert"])] == ["bert"]  # a name: that model only
    assert [m.name for m in select(["resnet"])] == ["resnet18", "resnet50"]
    assert len(select(None)) == 12
    bad_flags = (["--backends", "tvm"], ["--models", "alexnet"], ["--mode", "train"])
    for bad in (*bad_flags, ["--compile-mode", "fast"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
