# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 18: an autotuner for `launch`
#
# **Difficulty:** medium.
#
# **You will:** write a drop-in replacement for the runtime's `launch` that, the
# first time it sees a kernel at some size, runs it with each of a few `XBLOCK`
# values, times them, remembers the fastest and launches with it from then on. The
# catch is in chapter 21's last challenge: a kernel that writes its own inputs must
# find them unchanged after every trial, or tuning computes the wrong answer.
#
# **It builds on** chapter 21 (*Runtime*): `load_module` (one module per source,
# cached), `launch(kernel, numel, *args, XBLOCK=..., num_warps=..., rnumel=...,
# RBLOCK=...)`, the general launch, the `CallSite` each launch line of a generated
# `call` goes through (its `through(f)` makes the site's launches with `f`, a
# function like `launch`), and `benchmark`; chapter 19 (*Wrapper*) for the `call`
# that makes those launches; and chapter 11 for the in-place update of an input
# (`copy_`), the kernel that must not run twice.
#
# **Why it matters.** minductor picks block sizes by rule (chapters 17 and 18). A rule is
# right for the shapes it was measured on: the performance page records, on an H200,
# `x.sum(0)` going from 0.56x to 1.01x of eager once a sweep of `XBLOCK` × `RBLOCK` ×
# warps found a better tile for it (45.5 µs over 4096×8192). Inductor makes that sweep
# per kernel, at run time (`CachingAutotuner` in
# `torch/_inductor/runtime/triton_heuristics.py`), and it clones the arguments a kernel
# mutates before benchmarking, for the reason this exercise's last check shows.

# %% [markdown]
# ## Setup

# %%
import os

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import record_compiled
from minductor.runtime import CallSite, benchmark, launch, load_module


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


def measure_ms(run, blocks):
    """Default timer: median ms of `run()` (the candidate's launch), 3 timings."""
    return benchmark(run, times=1, repeat=3)


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# A compiled graph's module is an ordinary Python module. Each launch line of its
# `call` names a `CallSite`, defined at the module's top with the kernel's sizes and
# blocks, and `call` looks that name up in the module's globals each time it runs. So
# a tuner can be installed in one module, without touching the runtime: replace each
# site with `site.through(tuner)`, which launches through the tuner with the
# arguments the site would have given `launch`. Here are the sites and the launch
# lines of a small graph:

# %%
x = torch.randn(37, 29)
_, graph = compile_once(lambda x: (x.sin() + 1, x.sum(1)), x)
module = load_module(graph.source)
launches = [line.strip() for line in graph.source.splitlines() if "launch_" in line]
print("\n".join(launches))

# %% [markdown]
# ## The tuner
#
# Complete `Autotuner.__call__`. It has `launch`'s signature. For a kernel at a size
# it has not seen (the key is `self.key(...)`, given):
#
# 1. count a miss; for each `XBLOCK` in `self.candidates`, time one launch with
#    `self.measure(run, blocks)`, where `run` is a function of no arguments that
#    launches the kernel with that `XBLOCK` (and everything else as given) and
#    `blocks` is the dict `{"XBLOCK": ..., "RBLOCK": ...}` it uses (leave `RBLOCK`
#    as given: a persistent reduction needs the whole row in one block); store the
#    times in `self.timings[key]` as `{XBLOCK: ms}`;
# 2. **after every trial, put every tensor argument back as it was** (save copies with
#    `.clone()` before the first trial, restore with `.copy_()`): a trial may have
#    written an input in place, or added into an output with an atomic add;
# 3. store the fastest `XBLOCK` in `self.best[key]`.
#
# For a size it has seen, count a hit. Either way, finish with one real launch with
# the best `XBLOCK`, through the runtime's own `launch`.


# %%
class Autotuner:
    def __init__(self, candidates=(16, 64, 256), measure=measure_ms):
        self.candidates = candidates
        self.measure = measure
        self.best: dict[tuple, int] = {}
        self.timings: dict[tuple, dict[int, float]] = {}
        self.hits = self.misses = 0

    def key(self, kernel, numel, rnumel):
        return (id(kernel), numel, rnumel)

    def __call__(
        self, kernel, numel, *args, XBLOCK, num_warps, rnumel=None, RBLOCK=None
    ):
        key = self.key(kernel, numel, rnumel)
        # BEGIN SOLUTION
        options = {"num_warps": num_warps, "rnumel": rnumel, "RBLOCK": RBLOCK}
        if key in self.best:
            self.hits += 1
        else:
            self.misses += 1
            saved = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
            times = {}
            for block in self.candidates:

                def run(block=block):
                    launch(kernel, numel, *args, XBLOCK=block, **options)

                times[block] = self.measure(run, {"XBLOCK": block, "RBLOCK": RBLOCK})
                for arg, copy in zip(args, saved):
                    if copy is not None:
                        arg.copy_(copy)  # undo what the trial wrote
            self.timings[key] = times
            self.best[key] = min(times, key=times.get)
        launch(kernel, numel, *args, XBLOCK=self.best[key], **options)
        # END SOLUTION


def tuned(fn, tuner, *args):
    """Compile `fn` (running it once on `args`), then install `tuner` as `launch` in
    its module; return the compiled function, whose later calls are tuned."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="minductor")
    with record_compiled() as graphs:
        compiled(*args)
    (graph,) = graphs
    module = load_module(graph.source)
    for name, site in list(vars(module).items()):
        if isinstance(site, CallSite):
            setattr(module, name, site.through(tuner))
    return compiled, graph


# %% [markdown]
# ## Checks
#
# Results against eager, on odd sizes (1073 elements: no candidate divides it) and on
# a reduction; hit and miss counts; the choice, with a timer that is told which
# candidate is fastest; and two kernels that would go wrong if a trial's writes
# stayed: an in-place update of an input, and an atomic add.


# %%
def test_tunes_once_then_hits():
    def fn(x):
        return x.sin() + 1, x.sum(1)

    x = torch.randn(37, 29)
    tuner = Autotuner()
    compiled, graph = tuned(fn, tuner, x)
    n = len(graph.kernel_names)
    for _ in range(2):
        for got, want in zip(compiled(x), fn(x)):
            torch.testing.assert_close(got, want)
    expect((tuner.misses, tuner.hits), (n, n), f"(misses, hits) over {n} kernels")
    assert all(len(t) == 3 for t in tuner.timings.values()), (
        f"timings: got {tuner.timings}, expected 3 candidates timed per kernel"
    )
    assert all(t > 0 for times in tuner.timings.values() for t in times.values()), (
        f"timings: got {tuner.timings}, expected every time > 0"
    )


def test_picks_the_fastest():
    def fake(run, blocks):  # runs the candidate, then reports a made-up time
        run()
        return {16: 3.0, 64: 1.0, 256: 2.0}[blocks["XBLOCK"]]

    def fn(x):
        return x * 2 - 1

    x = torch.randn(5, 211)
    tuner = Autotuner(measure=fake)
    compiled, _ = tuned(fn, tuner, x)
    torch.testing.assert_close(compiled(x), fn(x))
    expect(list(tuner.best.values()), [64], "best XBLOCKs")
    timings = list(tuner.timings.values())
    expect(timings, [{16: 3.0, 64: 1.0, 256: 2.0}], "timings")


def test_in_place_input_survives_tuning():
    def fn(x, y):
        x.mul_(2).add_(y)  # writes its input
        return x.cos()

    x, y = torch.randn(9, 13), torch.randn(13)
    tuner = Autotuner()
    compiled, _ = tuned(fn, tuner, x.clone(), y)
    got_x, want_x = x.clone(), x.clone()
    out, want = compiled(got_x, y), fn(want_x, y)
    assert tuner.misses >= 1, f"the tuner never ran: got {tuner.misses} misses"
    torch.testing.assert_close(got_x, want_x)  # updated once, not four times
    torch.testing.assert_close(out, want)


def test_atomic_add_survives_tuning():
    def fn(x, i, v):
        return x.index_put((i,), v, accumulate=True) * 3

    x, v = torch.randn(7, 5), torch.randn(11, 5)
    i = torch.tensor([0, 6, 3, 0, 0, 2, 6, 1, 3, 5, 4])
    tuner = Autotuner()
    compiled, graph = tuned(fn, tuner, x, i, v)
    assert "atomic_add" in graph.source, f"no atomic_add in:\n{graph.source}"
    torch.testing.assert_close(compiled(x, i, v), fn(x, i, v))
    expect(tuner.misses, len(graph.kernel_names), "misses (one per kernel)")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. Eager's results; each kernel
# tuned at the first call (a miss) and not at the second (a hit):

# %%
test_tunes_once_then_hits()

# %% [markdown]
# With a timer that says which candidate is fastest, the tuner picks it:

# %%
test_picks_the_fastest()

# %% [markdown]
# An input updated in place is updated once, not once per trial:

# %%
test_in_place_input_survives_tuning()

# %% [markdown]
# An atomic add into an output adds once:

# %%
test_atomic_add_survives_tuning()

# %% [markdown]
# ## Going further
#
# 1. Saving and restoring every tensor argument costs a copy of each. Only the
#    buffers a kernel writes need it, and of those only the ones it also reads (or
#    adds into). The wrapper knows which they are (chapter 19): how would it tell
#    the tuner, as Inductor's `mutated_arg_names` does?
# 2. Tune `num_warps` too, and for looped reductions `RBLOCK`. The space grows as a
#    product: how does Inductor's coordinate descent (`coordinate_descent_tuner.py`)
#    keep the number of trials down?
# 3. The first call of a tuned graph is slow by design. Keep `tuner.best` on disk,
#    keyed by the kernel's source rather than `id(kernel)`, so that a second process
#    skips the trials, as Inductor's autotune cache does.
