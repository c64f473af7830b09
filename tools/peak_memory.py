"""What is alive at the peak of one warm step, per backend, and who allocated it.

The suite reports each backend's peak memory; this says what the peak is made of. For
each backend, one warm step runs with the CUDA caching allocator recording every
allocation and its Python stack. Replaying the record finds the moment the most memory
was allocated, and the blocks alive then are grouped by the line that allocated them:
the first frame in a generated module (minductor's or Inductor's wrapper), else the
first frame outside torch's own files. It also names the allocation that reached the
peak, and lists the block sizes alive then whose counts differ from the first backend's
(a float32 copy of a bfloat16 activation shows up as one block of twice the size). Run
on a GPU:
    python tools/peak_memory.py t5 training bf16 [backends] [mode]
where mode is torch.compile's (reduce-overhead: the record covers the first steps,
where CUDA graphs are recorded).
"""

import copy
import linecache
import sys
from collections import Counter

import torch

from minductor.harness.common import DTYPES
from minductor.harness.models import build, on_device, step

MiB = 2**20


def where(frames: list[dict]) -> str:
    """The line a block is charged to: a generated module's, else the first of ours."""
    for f in frames:  # innermost first
        name = f["filename"]
        if "/tmp" in name or "torchinductor" in name or "minductor_" in name:
            text = linecache.getline(name, f["line"]).strip()
            return f"{name.rsplit('/', 1)[-1][:12]}:{f['line']} {text[:90]}"
    for f in frames:
        name = f["filename"]
        if "/torch/" not in name and "/functorch/" not in name:
            return f"{name.rsplit('/', 1)[-1]}:{f['line']} {f['name']}"
    f = frames[0] if frames else {"filename": "?", "line": 0, "name": "?"}
    return f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}"


def live_at_peak(trace: list[dict]) -> tuple[int, dict[int, dict], dict]:
    """Replays allocations and frees; returns the peak (bytes above the step's start),
    the blocks alive at that moment, and the allocation that reached it."""
    live: dict[int, dict] = {}
    now = peak = 0
    at_peak: dict[int, dict] = {}
    last: dict = {"frames": []}
    for event in trace:
        action = event["action"]
        if action == "alloc":
            live[event["addr"]] = event
            now += event["size"]
            if now > peak:
                peak, at_peak, last = now, dict(live), event
        elif action == "free_requested" and event["addr"] in live:
            now -= live.pop(event["addr"])["size"]
    return peak, at_peak, last


def size_classes(first: Counter, other: Counter) -> str:
    """The block sizes alive at the peak whose counts differ between two backends."""
    lines = ["| MiB per block | first backend | this one |", "|---:|---:|---:|"]
    for size in sorted(first.keys() | other.keys(), reverse=True):
        if first[size] != other[size]:
            lines.append(f"| {size / MiB:.2f} | {first[size]} | {other[size]} |")
    return "\n".join(lines)


def main(
    name: str,
    mode: str,
    dtype: str,
    backends: str = "eager,inductor,minductor",
    compile_mode: str = "default",
):
    training = mode == "training"
    reference, inputs = build(name, training)
    x = on_device(inputs, "cuda", DTYPES[dtype])
    classes: list[Counter] = []
    # with CUDA graphs the memory is taken while recording, in the first steps: then
    # the record covers the first three steps (warm-up, recording, a replay)
    graphed = compile_mode == "reduce-overhead"
    for backend in backends.split(","):
        torch._dynamo.reset()
        model = copy.deepcopy(reference).to("cuda", DTYPES[dtype]).train(training)
        fn = model
        if backend != "eager":
            fn = torch.compile(model, backend=backend, mode=compile_mode)

        def one_step():
            if graphed:
                torch.compiler.cudagraph_mark_step_begin()
            step(fn, x, training)

        for _ in range(0 if graphed else 3):
            one_step()
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        for _ in range(3 if graphed else 1):
            one_step()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        if graphed:  # what CUDA graphs' private pools reserve once recorded
            pools = [s for s in snap["segments"] if tuple(s["segment_pool_id"]) != (0, 0)]
            print(f"\n== {name} {mode} {dtype} {backend}: CUDA graph pools reserve "
                  f"{sum(s['total_size'] for s in pools) / MiB:.0f} MiB in "
                  f"{len(pools)} segments, {sum(s['allocated_size'] for s in pools) / MiB:.0f}"
                  f" MiB of it allocated")
        trace = snap["device_traces"][torch.cuda.current_device()]
        peak, blocks, last = live_at_peak(trace)
        groups: dict[str, list[int]] = {}
        for b in blocks.values():
            groups.setdefault(where(b["frames"]), []).append(b["size"])
        print(f"\n== {name} {mode} {dtype} {backend}: held before the step "
              f"{held / MiB:.0f} MiB, peak above it {peak / MiB:.0f} MiB "
              f"(allocator's peak {torch.cuda.max_memory_allocated() / MiB:.0f} MiB), "
              f"{len(blocks)} blocks alive at the peak, "
              f"reached at {where(last['frames'])}")
        print("| MiB | blocks | allocated at |")
        print("|---:|---:|---|")
        ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
        for at, sizes in ranked[:25]:
            print(f"| {sum(sizes) / MiB:.1f} | {len(sizes)} | {at} |")
        rest = sum(sum(s) for _, s in ranked[25:])
        print(f"| {rest / MiB:.1f} | {sum(len(s) for _, s in ranked[25:])} | others |")
        classes.append(Counter(b["size"] for b in blocks.values()))
        if len(classes) > 1:
            first = backends.split(",")[0]
            print(f"\nBlocks at the peak by size, {first} and {backend}:")
            print(size_classes(classes[0], classes[-1]))
        del model, fn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(*sys.argv[1:6])
