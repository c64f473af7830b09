"""What one call of a compiled decoding step costs on the host, and on what.

Each backend's step is compiled and warmed up, then called with the GPU kept busy
(`torch.cuda._sleep`), so that the host never waits for it: the wall time per call is
host time. Then timing wrappers go around the pieces both backends share, and the time
inside each is summed over the calls:
  graph      the compiled graph's call (minductor's CompiledGraph or CUDAGraphed,
             Inductor's CompiledFxGraph); the rest of a step is outside it: Dynamo's
             guards, AOTAutograd's runtime wrappers, the model's Python between graphs
  launches   Triton launches (minductor's sites and `launch`, Inductor's
             CachingAutotuner.run)
  alloc      torch's C++ allocation entry, which both backends' wrappers call
  extern     matmuls through the extern_kernels namespaces
  replay     torch.cuda.CUDAGraph.replay
and what is left of the graph's call is its own Python: argument unpacking, frees,
views, and for CUDA graphs the bookkeeping around a replay. The wrappers cost time of
their own (each call is counted, so it can be judged).

Workloads (Llama of 8 layers of width 1024, bf16, the decoding page's):
  step      the gpt-fast decode step, static sizes, plain launches
  replay    the same step under mode="reduce-overhead"
  dynamic   gpt-fast's prefill under dynamic=True, its prompt one token longer at each
            call (2 to 128 tokens, then again): every call has new sizes
Backends are compiled first, then timed in rounds whose order reverses each round.
Run on a GPU:
    PYTHONPATH=$PWD python tools/host_budget.py [step replay dynamic] [--batch 1]
"""

import argparse
import collections
import statistics
import time

import torch

# before minductor is imported: generated modules bind the allocator when they load
_guards = torch._C._dynamo.guards
totals: dict[str, float] = collections.defaultdict(float)
counts: dict[str, int] = collections.defaultdict(int)
inside: set[str] = set()  # pieces being timed now: a graph inside a graph counts once


on = [False]  # timing switched on: the pieces' wrappers time only then


def timed(name, fn):
    def wrapper(*args, **kwargs):
        if not on[0] or name in inside:
            return fn(*args, **kwargs)
        inside.add(name)
        t = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter_ns() - t
            counts[name] += 1
            inside.discard(name)

    return wrapper


_guards._empty_strided_cuda = timed("alloc", _guards._empty_strided_cuda)

from minductor import capture, cudagraphs, decoding, runtime  # noqa: E402

PIECES = ("launches", "alloc", "extern", "replay")


def patch_pieces() -> None:
    """Timing wrappers on the class or namespace each backend calls through."""
    from torch._inductor import output_code, select_algorithm
    from torch._inductor.runtime import triton_heuristics

    for cls in (capture.CompiledGraph, cudagraphs.CUDAGraphed,
                output_code.CompiledFxGraph):  # fmt: skip
        cls.__call__ = timed("graph", cls.__call__)
    for graph in compiled:  # a module's own `launch`, bound when it loaded
        scope = graph.call.__globals__
        if "launch" in scope:
            scope["launch"] = timed("launches", scope["launch"])
    for cls in (runtime.CallSite, getattr(runtime, "SizedSite", None)):
        if cls is not None:
            cls.__call__ = timed("launches", cls.__call__)
    tuner = triton_heuristics.CachingAutotuner
    tuner.run = timed("launches", tuner.run)
    for ns in (runtime.extern_kernels, select_algorithm.extern_kernels):
        for n in ("mm", "bmm", "addmm", "baddbmm"):
            if hasattr(ns, n):
                setattr(ns, n, timed("extern", getattr(ns, n)))
    torch.cuda.CUDAGraph.replay = timed("replay", torch.cuda.CUDAGraph.replay)


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
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU work queued first
        with torch.no_grad():
            t = time.perf_counter()
            for _ in range(calls):
                one()
            took.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return statistics.median(took) / calls * 1e6


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
    on[0] = True
    print(
        "\n| workload | backend | host µs/call | outside graph | graph's own Python |"
        " launches | alloc | extern | replay | timing wrappers |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, (steps, median) in budgets.items():
        for b in backends:
            totals.clear(), counts.clear()
            wrapped = host_us(steps[b], args.calls)
            made = args.calls * REPS  # the calls host_us made
            per = {k: totals[k] / made / 1e3 for k in ("graph", *PIECES)}
            n = {k: counts[k] / made for k in ("graph", *PIECES)}
            own = per["graph"] - sum(per[k] for k in PIECES)
            cells = [f"{per[k]:.1f} ({n[k]:.0f})" for k in PIECES]
            print(
                f"| {name} | {b} | {median[b]:.1f} | {wrapped - per['graph']:.1f} | "
                f"{own:.1f} | {' | '.join(cells)} | +{wrapped - median[b]:.1f} |"
            )
    print(
        "\nCells: µs per call (calls of that piece per call). The pieces are timed with"
        " the wrappers on, so 'host µs/call' (without them) is the number to compare."
    )


budgets: dict[str, tuple] = {}
LONGEST = 128
REPS = 15  # host_us's default
compiled: list = []  # minductor's graphs, all workloads'

if __name__ == "__main__":
    main()
