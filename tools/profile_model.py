"""Where one step of a workload goes, per backend, on a GPU.

The workload is a model of the suite (chapters/measuring_models.md) in a mode and dtype,
or `gpt-block`: the kernel suite's GPT block, one training step with AdamW
(chapters/measuring_kernels.md). For each backend, after a few warm steps:

  - the CUDA kernels that take the most time, over five steps;
  - wall time per step, the host's own time (a step not waited for) and GPU time per
    step, and launches per step;
  - minductor's (and Inductor's) generated modules, written to OUTDIR for reading.

With --host, the backends are also timed in turns (the harness's `time_in_turns`, the
order reversed each round), and one warm step of each compiled backend runs under
cProfile: the functions by their own time, side by side. Run from the repository root:

    python tools/profile_model.py gpt2 inference bf16 OUTDIR [--host] [--rounds 8]
    python tools/profile_model.py gpt-block training bf16 OUTDIR
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from minductor.capture import record_compiled
from minductor.harness import common, kernels
from minductor.harness.common import BACKENDS, DTYPES
from minductor.harness.models import MODELS, build, on_device, step

GPT_BLOCK = dict(B=8, T=1024, C=1024, heads=16, vocab=8192)  # the kernel suite's


def steps_of(name: str, mode: str, dtype: str):
    """A function of a backend that returns one step of the workload, ready to run."""
    training = mode == "training"
    torch.manual_seed(0)
    if name == "gpt-block":
        s = GPT_BLOCK
        reference = kernels.GPT(s["vocab"], s["T"], s["C"], s["heads"])
        reference = reference.to("cuda", DTYPES[dtype])
        idx = torch.randint(s["vocab"], (s["B"], s["T"]), device="cuda")
        targets = torch.randint(s["vocab"], (s["B"], s["T"]), device="cuda")

        def make(backend):
            model = copy.deepcopy(reference)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            fn = model if backend == "eager" else torch.compile(model, backend=backend)
            return lambda: kernels.training_step(fn, opt, idx, targets)

        return make
    reference, inputs = build(name, training)
    x = on_device(inputs, "cuda", DTYPES[dtype])

    def make(backend):
        model = copy.deepcopy(reference).to("cuda", DTYPES[dtype]).train(training)
        fn = model if backend == "eager" else torch.compile(model, backend=backend)
        return lambda: step(fn, x, training)

    return make


def kernel_profile(one_step, label: str, out: Path, rows: int) -> tuple:
    """Wall, host and GPU ms per step and launches per step; prints the top kernels."""
    with common.frozen_heap():  # as the suites time: earlier objects never scanned
        wall = common.timed(lambda: [one_step() for _ in range(10)], "cuda")[1] / 10
        enqueue = []  # the host's own time: a step not waited for
        for _ in range(5):
            torch.cuda.synchronize()
            t = time.perf_counter()
            one_step()
            enqueue.append(time.perf_counter() - t)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                one_step()
            torch.cuda.synchronize()
    events = prof.key_averages()
    launched = [e for e in events if e.device_type.name == "CUDA"]
    gpu = sum(e.self_device_time_total for e in launched) / 5 / 1e3
    launches = sum(e.count for e in launched) / 5
    table = events.table(sort_by="self_cuda_time_total", row_limit=rows)
    print(f"== {label}: wall {wall * 1e3:.2f} ms/step, host {min(enqueue) * 1e3:.2f}, "
          f"GPU {gpu:.2f} ms/step, {launches:.0f} kernels/step")  # fmt: skip
    print(table)
    print(events.table(sort_by="self_cpu_time_total", row_limit=12))
    (out / f"{label.replace(' ', '_')}_profile.txt").write_text(table)
    return wall * 1e3, min(enqueue) * 1e3, gpu, launches


def own_times(one_step) -> dict[str, float]:
    """Microseconds of one step spent in each function itself (cProfile's tottime)."""
    torch.cuda.synchronize()
    with cProfile.Profile() as prof:
        one_step()
    torch.cuda.synchronize()
    found: dict[str, float] = {}
    for (path, _, name), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
        key = f"{path.rsplit('/', 1)[-1]}:{name}"
        found[key] = found.get(key, 0.0) + tottime * 1e6
    return found


def host_report(steps: dict, label: str, rounds: int) -> None:
    """The backends timed in turns, then their cProfiles side by side."""
    times = {b: [] for b in steps}
    for _ in range(rounds):  # each round a block of 10 steps per backend
        got = common.time_in_turns(steps, "cuda", rounds=2, per_round=5)
        for b, t in got.items():
            times[b].append(t * 1e3)
    print(f"\n| {label}, {rounds} sets of rounds | median ms | min ms | max ms |")
    print("|---|---:|---:|---:|")
    for b, ms in times.items():
        print(f"| {b} | {statistics.median(ms):.2f} | {min(ms):.2f} | {max(ms):.2f} |")
    compiled = [b for b in steps if b != "eager"]
    profiles = {b: own_times(steps[b]) for b in compiled}
    names = sorted(
        set().union(*profiles.values()),
        key=lambda k: -max(p.get(k, 0.0) for p in profiles.values()),
    )
    print("\n| function (own time, µs per step) | " + " | ".join(compiled) + " |")
    print("|---|" + "---:|" * len(compiled))
    for key in names[:40]:
        cells = " | ".join(f"{profiles[b].get(key, 0.0):.0f}" for b in compiled)
        print(f"| {key} | {cells} |")
    totals = " | ".join(f"{sum(profiles[b].values()):.0f}" for b in compiled)
    print(f"| total | {totals} |")


def main() -> None:
    names = ["gpt-block", *(m.name for m in MODELS)]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=names)
    parser.add_argument("mode", choices=["inference", "training"])
    parser.add_argument("dtype", choices=list(DTYPES))
    parser.add_argument("out", help="a directory for the generated modules")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS))
    parser.add_argument("--host", action="store_true", help="turns and cProfiles")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rows", type=int, default=30, help="kernels listed")
    args = parser.parse_args()
    assert torch.cuda.is_available(), "this probe needs a CUDA GPU"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    make = steps_of(args.name, args.mode, args.dtype)
    torch._dynamo.reset()  # once: every backend's code stays cached for the turns
    steps, summary = {}, []
    for backend in args.backends:
        steps[backend] = make(backend)
        with record_compiled() as graphs:
            for _ in range(3):
                steps[backend]()
        prefix = f"{args.name}_{args.mode}_{backend}"
        for k, g in enumerate(graphs):
            (out / f"{prefix}_graph{k}.py").write_text(g.source)
        label = f"{args.name} {args.mode} {args.dtype} {backend}"
        found = kernel_profile(steps[backend], label, out, args.rows)
        summary.append((backend, *found))
    print(f"\n| {args.name} {args.mode} {args.dtype} | wall ms | host ms | GPU ms "
          "| kernels/step |\n|---|---:|---:|---:|---:|")  # fmt: skip
    for backend, wall, host, gpu, n in summary:
        print(f"| {backend} | {wall:.2f} | {host:.2f} | {gpu:.2f} | {n:.0f} |")
    if args.host:
        host_report(steps, f"{args.name} {args.mode} {args.dtype}", args.rounds)


if __name__ == "__main__":
    main()
