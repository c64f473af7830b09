"""Where one model of the suite spends its GPU time, per backend.

For each backend: the top CUDA kernels of a few warm steps, the GPU time per step
against the wall time per step (a gap is host time: Python and launches), and
minductor's generated modules written to OUTDIR for reading. With a fifth argument,
`host`, a cProfile of minductor's warm steps instead. Run on a GPU:
    PYTHONPATH=$PWD python tools/profile_model.py gpt2 inference bf16 OUTDIR [host]
"""

import copy
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from minductor.capture import record_compiled
from minductor.models import DTYPES, MODELS, frozen_heap, on_device, step


def build(name: str, training: bool):
    """The suite's model at its real size, and its inputs (no labels at inference)."""
    spec = next(m for m in MODELS if m.name == name)
    torch.manual_seed(0)
    model, inputs = spec.build(spec.real), spec.inputs(spec.real)
    if not training:
        inputs.pop("labels", None)
    return model, inputs


def host(name: str, mode: str, dtype: str, backend: str = "minductor") -> None:
    training = mode == "training"
    model, inputs = build(name, training)
    model = model.to("cuda", DTYPES[dtype]).train(training)
    x = on_device(inputs, "cuda", DTYPES[dtype])
    fn = torch.compile(model, backend=backend)
    for _ in range(3):
        step(fn, x, training)
    # one step: a few hundred launches, fewer than the GPU's queue holds, so the
    # host never waits for the GPU
    torch.cuda.synchronize()
    with cProfile.Profile() as prof:
        step(fn, x, training)
    torch.cuda.synchronize()
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(30)


def main(name: str, mode: str, dtype: str, out: str, rows: int = 30) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    training = mode == "training"
    reference, inputs = build(name, training)
    summary = []
    # PROFILE_ORDER=minductor,inductor,eager checks that running last costs nothing
    order = os.environ.get("PROFILE_ORDER", "eager,inductor,minductor").split(",")
    for backend in order:
        torch._dynamo.reset()
        model = copy.deepcopy(reference).to("cuda", DTYPES[dtype]).train(training)
        x = on_device(inputs, "cuda", DTYPES[dtype])
        fn = model if backend == "eager" else torch.compile(model, backend=backend)
        with record_compiled() as graphs:
            for _ in range(3):
                step(fn, x, training)
        for k, g in enumerate(graphs):
            Path(out, f"{name}_{mode}_graph{k}.py").write_text(g.source)
        with frozen_heap():  # as the suite times: earlier objects are never scanned
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(10):
                step(fn, x, training)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t) / 10 * 1e3
            enqueue = []  # the host's own time: the step without waiting for the GPU
            for _ in range(5):
                torch.cuda.synchronize()
                t = time.perf_counter()
                step(fn, x, training)
                enqueue.append((time.perf_counter() - t) * 1e3)
            torch.cuda.synchronize()
            activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
            with profile(activities=activities) as prof:
                for _ in range(5):
                    step(fn, x, training)
                torch.cuda.synchronize()
            events = prof.key_averages()
            kernels = [e for e in events if e.device_type.name == "CUDA"]
            gpu = sum(e.self_device_time_total for e in kernels) / 5 / 1e3
            launches = sum(e.count for e in kernels) / 5
            table = events.table(sort_by="self_cuda_time_total", row_limit=rows)
            print(f"== {name} {mode} {dtype} {backend}: wall {wall:.2f} ms/step, "
                  f"GPU {gpu:.2f} ms/step, {launches:.0f} kernels/step")
            print(table)
            print(events.table(sort_by="self_cpu_time_total", row_limit=12))
            Path(out, f"{name}_{mode}_{backend}_profile.txt").write_text(table)
        summary.append((backend, wall, min(enqueue), gpu, launches))
        del model, fn
    print(f"| {name} {mode} {dtype} | wall ms | host ms | GPU ms | kernels/step |")
    print("|---|---:|---:|---:|---:|")
    for backend, wall, enqueue, gpu, n in summary:
        print(f"| {backend} | {wall:.2f} | {enqueue:.2f} | {gpu:.2f} | {n:.0f} |")


if __name__ == "__main__":
    if sys.argv[5:6] == ["host"]:
        host(*sys.argv[1:4], *sys.argv[6:])
    else:
        main(*sys.argv[1:5])
