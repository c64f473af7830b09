"""What one call of a compiled decoding step costs on the host, and on what.

Each backend's step is compiled and warmed up, then called with the GPU kept busy
(`torch.cuda._sleep`), so that the host never waits for it: the wall time per call is
host time. The pieces are found by taking them away, one more at a time, and timing
again (wrappers that read a clock inside the call would add their own cost, and on
some hosts a clock read costs microseconds):
  launches   Triton launches become no-ops (minductor's sites and `launch`, Inductor's
             CachingAutotuner.run)
  extern     so do the matmuls of the extern_kernels namespaces
  graph      the compiled graph's call returns the last call's outputs at once
             (minductor's CompiledGraph and CUDAGraphed, Inductor's CompiledFxGraph):
             what is left is outside it, Dynamo's guards, AOTAutograd's runtime
             wrappers and the model's Python between graphs
  replay     (CUDA graphs) torch.cuda.CUDAGraph.replay becomes a no-op
The graph's own work is what remains of its call: allocations, argument handling,
frees and views, and for CUDA graphs the bookkeeping around a replay.

Workloads (Llama of 8 layers of width 1024, bf16, the decoding suite's):
  step      the gpt-fast decode step, static sizes, plain launches
  replay    the same step under mode="reduce-overhead"
  dynamic   gpt-fast's prefill under dynamic=True, its prompt one token longer at each
            call (2 to 128 tokens, then again): every call has new sizes
Backends are compiled first, then timed in rounds whose order reverses each round.
Run on a GPU:
    python tools/host_budget.py [step replay dynamic] [--batch 1]
"""

import argparse
import statistics
import time

import torch

from minductor import capture, cudagraphs, runtime
from minductor.harness import decoding

skipped: set[str] = set()  # the pieces taken away now


def skippable(name, fn, result=None):
    """fn, or a no-op returning `result` while `name` is taken away."""

    def wrapper(*args, **kwargs):
        if name in skipped:
            return result
        return fn(*args, **kwargs)

    return wrapper


def skippable_graph(call):
    """A compiled graph's __call__ that, while "graph" is taken away, hands back the
    outputs of its last real call (and empties its arguments, as the call would)."""
    last: dict[int, object] = {}

    def wrapper(self, args):
        if "graph" in skipped and id(self) in last:
            args.clear()
            return last[id(self)]
        out = call(self, args)
        last[id(self)] = out
        return out

    return wrapper


def patch_pieces() -> None:
    """The pieces, made skippable where each backend calls through them."""
    from torch._inductor import output_code, select_algorithm
    from torch._inductor.runtime import triton_heuristics

    for cls in (capture.CompiledGraph, cudagraphs.CUDAGraphed,
                output_code.CompiledFxGraph):  # fmt: skip
        cls.__call__ = skippable_graph(cls.__call__)
    for graph in compiled:  # a module's own `launch`, bound when it loaded
        scope = graph.call.__globals__
        if "launch" in scope:
            scope["launch"] = skippable("launches", scope["launch"])
    for cls in (runtime.CallSite, getattr(runtime, "SizedSite", None)):
        if cls is not None:
            cls.__call__ = skippable("launches", cls.__call__)
    tuner = triton_heuristics.CachingAutotuner
    tuner.run = skippable("launches", tuner.run)
    for ns in (runtime.extern_kernels, select_algorithm.extern_kernels):
        for n in ("mm", "bmm", "addmm", "baddbmm"):
            if hasattr(ns, n):
                setattr(ns, n, skippable("extern", getattr(ns, n)))
    torch.cuda.CUDAGraph.replay = skippable("replay", torch.cuda.CUDAGraph.replay)


def workload(name: str, backend: str, batch: int, reference):
    """A callable making one step, ready to time (compiled and warmed up)."""
    sizes = decoding.REAL
    model = reference
    if name in ("step", "replay"):
        ours = decoding.Transformer.from_hf(model)
        ours.setup_caches(batch, 1024)
        token = torch.randint(1, sizes["vocab"], (batch, 1), device="cuda")
        pos = torch.tensor([100], device="cuda")
        mode = "reduce-overhead" if name == "replay" else None
        fn = torch.compile(decoding.decode_one, backend=backend, mode=mode,
                           fullgraph=True)  # fmt: skip

        def one():
            torch.compiler.cudagraph_mark_step_begin()
            return fn(ours, token, pos)

    else:  # the prefill under dynamic=True, prompts one token longer each call
        ours = decoding.Transformer.from_hf(model)
        ours.setup_caches(batch, 1024)
        fn = torch.compile(decoding.prefill, backend=backend, dynamic=True,
                           fullgraph=True)  # fmt: skip
        prompts = [torch.randint(1, sizes["vocab"], (batch, t), device="cuda")
                   for t in range(LONGEST + 1)]  # fmt: skip
        positions = [torch.arange(t, device="cuda") for t in range(LONGEST + 1)]
        at = [2]  # 1 would be a size of its own (Dynamo specializes 0 and 1)

        def one():
            t = at[0]
            at[0] = 2 + (t - 1) % (LONGEST - 1)  # 2, 3, ..., LONGEST, 2, ...
            return fn(ours, prompts[t], positions[t])

    with torch.no_grad():
        for _ in range(300):  # compiles, records, and passes every length once
            one()
    torch.cuda.synchronize()
    return one


def host_us(one, calls: int, reps: int = 15) -> float:
    """Microseconds of host time per call, with the GPU busy throughout: the median of
    `reps` runs of `calls` calls, few enough that their launches fit in the GPU's
    queue (a full queue makes the host wait)."""
    took = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)  # about 25 ms of GPU work queued first
        with torch.no_grad():
            t = time.perf_counter()
            for _ in range(calls):
                one()
            took.append((time.perf_counter() - t) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(took)


# what is taken away, cumulatively, for each column: its time is the difference
STAGES = {
    "step": [(), ("launches",), ("launches", "extern"), ("graph",)],
    "replay": [(), ("replay",), ("graph",)],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workloads", nargs="*", default=["step", "replay", "dynamic"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    reference = decoding.LLAMA(decoding.REAL).eval().to("cuda", torch.bfloat16)
    backends = ("inductor", "minductor")
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, batch {args.batch}"
    )
    for name in args.workloads:
        torch._dynamo.reset()
        with capture.record_compiled() as graphs:
            steps = {b: workload(name, b, args.batch, reference) for b in backends}
        compiled.extend(graphs)
        times = {b: [] for b in backends}
        for r in range(args.rounds):  # in turns, the order reversed each round
            for b in backends if r % 2 == 0 else backends[::-1]:
                times[b].append(host_us(steps[b], args.calls))
        print(f"\n{name}: host µs per call, median of {args.rounds} rounds (min-max)")
        for b in backends:
            t = times[b]
            print(f"  {b:10s} {statistics.median(t):8.1f} ({min(t):.1f}-{max(t):.1f})")
        budgets[name] = (steps, {b: statistics.median(times[b]) for b in backends})
    patch_pieces()
    print(
        "\n| workload | backend | host µs/call | outside the graph |"
        " graph's own work | launches | extern | replay |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, (steps, median) in budgets.items():
        stages = STAGES["replay" if name == "replay" else "step"]
        for b in backends:
            t = {}
            for r in range(3):  # each stage in turn, medians over rounds
                for stage in stages:
                    skipped.clear()
                    skipped.update(stage)
                    t.setdefault(stage, []).append(host_us(steps[b], args.calls, 9))
            skipped.clear()
            t = {stage: statistics.median(v) for stage, v in t.items()}
            cut = [t[a] - t[z] for a, z in zip(stages, stages[1:])]
            outside = t[("graph",)]
            if name == "replay":
                cells = [t[()] - t[("replay",)] - outside, "—", "—", cut[0]]
            else:
                cells = [t[("launches", "extern")] - outside, cut[0], cut[1], "—"]
            text = [c if isinstance(c, str) else f"{c:.1f}" for c in cells]
            print(
                f"| {name} | {b} | {t[()]:.1f} | {outside:.1f} | {' | '.join(text)} |"
            )
    print(
        "\nEach column is the time saved by taking that piece away too (host µs per "
        "call, medians over rounds); 'host µs/call' is the whole call, measured in "
        "these rounds, beside the first rounds' figure above."
    )


budgets: dict[str, tuple] = {}
LONGEST = 128
compiled: list = []  # minductor's graphs, all workloads'

if __name__ == "__main__":
    main()
