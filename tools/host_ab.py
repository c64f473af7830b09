"""Host time per step of the backends, measured in turns in one process, on a GPU.

A step's wall time on a host-bound model is the host's time, and a host's speed drifts
(other jobs, clocks): two backends measured one after the other can differ by tens of
percent for no reason of their own. Here all are compiled first, then timed in
alternating rounds (the order reverses every round), and each round's median is kept;
eager takes its turns too. Then a cProfile of one warm step of each compiled backend,
the functions by their own time, side by side. Run on a GPU:
    PYTHONPATH=$PWD python tools/host_ab.py resnet50 inference bf16 [rounds]
"""

import copy
import cProfile
import pstats
import statistics
import sys

import torch

from minductor.models import DTYPES, frozen_heap, on_device, step, timed

sys.path.insert(0, "tools")
from profile_model import build  # noqa: E402

BACKENDS = ("eager", "inductor", "minductor")
COMPILED = BACKENDS[1:]


def timed_steps(fn, x, training: bool, n: int) -> float:
    """Median wall ms of n steps, each waited for."""
    times = [timed(lambda: step(fn, x, training), "cuda")[1] for _ in range(n)]
    return statistics.median(times) * 1e3


def own_times(fn, x, training: bool) -> dict[str, float]:
    """Microseconds of one step spent in each function itself (cProfile's tottime)."""
    torch.cuda.synchronize()
    with cProfile.Profile() as prof:
        step(fn, x, training)
    torch.cuda.synchronize()
    stats = pstats.Stats(prof).stats
    found: dict[str, float] = {}
    for (path, line, name), (_, _, tottime, _, _) in stats.items():
        key = f"{path.rsplit('/', 1)[-1]}:{name}"
        found[key] = found.get(key, 0.0) + tottime * 1e6
    return found


def main(name: str, mode: str, dtype: str, rounds: int = 8) -> None:
    training = mode == "training"
    reference, inputs = build(name, training)
    x = on_device(inputs, "cuda", DTYPES[dtype])
    fns = {}
    torch._dynamo.reset()
    for backend in BACKENDS:  # two cache entries on one code object; a hit moves its
        # entry to the front, so only a round's first step tries the other's guards
        model = copy.deepcopy(reference).to("cuda", DTYPES[dtype]).train(training)
        fns[backend] = (
            model if backend == "eager" else torch.compile(model, backend=backend)
        )
        for _ in range(3):
            step(fns[backend], x, training)
    medians = {b: [] for b in BACKENDS}
    with frozen_heap():
        for r in range(rounds):
            order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
            for backend in order:
                medians[backend].append(timed_steps(fns[backend], x, training, 10))
    print(f"| {name} {mode} {dtype}, {rounds} rounds | median ms | min ms | max ms |")
    print("|---|---:|---:|---:|")
    for backend, ms in medians.items():
        print(f"| {backend} | {statistics.median(ms):.2f} | {min(ms):.2f} | "
              f"{max(ms):.2f} |")
    profiles = {b: own_times(fns[b], x, training) for b in COMPILED}
    names = sorted(
        set().union(*profiles.values()),
        key=lambda k: -max(p.get(k, 0.0) for p in profiles.values()),
    )
    print("\n| function (own time, µs per step) | " + " | ".join(COMPILED) + " |")
    print("|---|" + "---:|" * len(COMPILED))
    for key in names[:40]:
        cells = " | ".join(f"{profiles[b].get(key, 0.0):.0f}" for b in COMPILED)
        print(f"| {key} | {cells} |")
    totals = " | ".join(f"{sum(profiles[b].values()):.0f}" for b in COMPILED)
    print(f"| total | {totals} |")


if __name__ == "__main__":
    main(*sys.argv[1:4], *map(int, sys.argv[4:5]))
