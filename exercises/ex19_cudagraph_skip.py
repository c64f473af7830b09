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

# generated from exercises/solutions/ex19_cudagraph_skip.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 19: a new reason not to record a CUDA graph
#
# **Difficulty:** easy. A few lines of code; reading chapter 22's table is most of the
# work.
#
# **You will:** write a check for chapter 22's decision table that refuses to record
# a graph whose replays would copy too many bytes of inputs, register it in
# `SKIP_CHECKS`, and watch a compiled function run with plain launches, its reason in
# the log, and its results still right.
#
# **It builds on** chapter 22 (*CUDA graphs*): `GraphFacts`, `graph_facts`,
# `skip_reason` and its list of checks `SKIP_CHECKS`; the static inputs that are never
# copied; the CPU stand-in recorder (`SimulatedRecording`) that lets a machine without
# a GPU run the whole life of a wrapped graph.
#
# ## Why a graph might not be worth recording
#
# The checks in chapter 22 are all about correctness: a graph that needs the host,
# or that writes into an input we would copy, cannot be replayed right. Your check is
# about cost. A replay saves the host's launch overhead, some microseconds per kernel.
# It also adds work: every input that is not static is copied into its placeholder
# before each replay. A graph that takes a large activation as a copied input (a
# backward's incoming gradient, an image batch) pays a device copy of all of it at
# every replay; past some size, that copy costs more than the launches it saves.
# Inductor has no such check, but it does count what it copies: the static inputs
# exist precisely so that parameters are not copied.
#
# A check is a function of a `GraphFacts` that returns `None` (no objection) or a
# string, the reason. `facts.input_bytes` holds the bytes of each input (0 for a
# non-tensor or a symbolic size) and `facts.static_inputs` the positions of the
# static ones.

# %% [markdown]
# ## Setup
#
# `import minductor` comes first: without a GPU, it switches on Triton's interpreter
# before Triton is imported.

# %%
import contextlib
import dataclasses
import logging

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (before Triton is imported; registers the backend)
from minductor.capture import GraphKind, graph_wrappers
from minductor.cudagraphs import (
    RECORDERS,
    SKIP_CHECKS,
    CUDAGraphed,
    SimulatedRecording,
    graph_facts,
    skip_reason,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def facts_of(fn, *inputs, static=()):
    """The facts of fn's graph (traced with fake tensors), read as on a GPU."""
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    facts = graph_facts(gm, inputs, GraphKind.INFERENCE, frozenset(static))
    return dataclasses.replace(facts, devices=frozenset({"cuda"}))


@contextlib.contextmanager
def using_check(check):
    """Register a skip check (first in the table) for the duration of a block."""
    SKIP_CHECKS.insert(0, check)
    try:
        yield check
    finally:
        SKIP_CHECKS.remove(check)


def expect(got, expected, what):
    """A check: fail with both values when `got != expected` (`is`, for None)."""
    ok = got is None if expected is None else got == expected
    assert ok, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# ## Part 1: what a replay copies
#
# Write `copied_bytes(facts)`: the bytes copied into placeholders before each
# replay, the sum of `input_bytes` over the inputs that are not static.

# %%
def copied_bytes(facts):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: the check
#
# Write `limit_copied_bytes(limit)`, which returns a check: a function `check(facts)`
# that returns `None` when a replay copies at most `limit` bytes, and otherwise the
# reason, in exactly this form (the checks look for it in the log):
#
# ```
# copies 4096 bytes of inputs per replay, more than 1024
# ```

# %%
def limit_copied_bytes(limit):
    def check(facts):
        raise NotImplementedError("your code here")

    return check


# %% [markdown]
# ## Checks on facts
#
# A linear layer's input `x` (8 × 16 floats, 512 bytes) is copied; its weight
# (16 × 16 floats, 1024 bytes) is static when marked so, and copied otherwise.

# %%
def linear(x, w):
    return x @ w


X, W = torch.randn(8, 16), torch.randn(16, 16)


def test_copied_bytes():
    got = copied_bytes(facts_of(linear, X, W, static={1}))
    expect(got, 512, "copied_bytes, the weight static")
    got = copied_bytes(facts_of(linear, X, W))
    expect(got, 512 + 1024, "copied_bytes, none static")
    got = copied_bytes(facts_of(linear, X, W, static={0, 1}))
    expect(got, 0, "copied_bytes, both static")


def test_check_on_facts():
    facts = facts_of(linear, X, W)
    expect(limit_copied_bytes(1536)(facts), None, "limit 1536, 1536 bytes copied")
    expect(
        limit_copied_bytes(1535)(facts),
        "copies 1536 bytes of inputs per replay, more than 1535",
        "limit 1535, 1536 bytes copied",
    )
    with using_check(limit_copied_bytes(1000)):
        got = skip_reason(facts_of(linear, X, W, static={1}))
        expect(got, None, "skip_reason with limit 1000, 512 bytes copied")
        reason = skip_reason(facts)
    expect(
        reason,
        "copies 1536 bytes of inputs per replay, more than 1000",
        "skip_reason with limit 1000, 1536 bytes copied",
    )
    # the table is as it was
    expect(skip_reason(facts), None, "skip_reason once the check is removed")


# %% [markdown]
# ## Checks through `torch.compile`
#
# With the check registered, a compiled function whose input is too big runs with
# plain launches, and says why once; a smaller input is still recorded. On a machine
# without a GPU the stand-in recorder takes the place of CUDA graphs.


# %%
def compile_and_run(fn, x, limit, calls=3):
    """Compile fn with CUDA graphs and the check; return (results, wrapped, log)."""
    wrapped, log = [], []

    def spy(compiled, info):
        if isinstance(compiled, CUDAGraphed):
            wrapped.append(compiled)
        return compiled

    class Collect(logging.Handler):
        def emit(self, record):
            log.append(record.getMessage())

    handler, logger = Collect(), logging.getLogger("minductor")
    saved_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    graph_wrappers.register(spy)
    added = DEVICE == "cpu" and "cpu" not in RECORDERS
    if added:
        RECORDERS["cpu"] = SimulatedRecording
    torch._dynamo.reset()
    try:
        with using_check(limit_copied_bytes(limit)):
            compiled = torch.compile(fn, backend="minductor", mode="reduce-overhead")
            results = [compiled(x).clone() for _ in range(calls)]
    finally:
        graph_wrappers.remove(spy)
        if added:
            del RECORDERS["cpu"]
        logger.removeHandler(handler)
        logger.setLevel(saved_level)
    return results, wrapped, log


def gelu_chain(x):
    return torch.nn.functional.gelu(x * 2 + 1)


def test_a_big_input_is_not_recorded():
    x = torch.randn(32, 32, device=DEVICE)  # 4096 bytes
    results, wrapped, log = compile_and_run(gelu_chain, x, limit=1024)
    for got in results:
        torch.testing.assert_close(got, gelu_chain(x))
    expect(wrapped, [], "graphs wrapped for recording")
    said = [m for m in log if "copies 4096 bytes of inputs per replay" in m]
    expect(len(said), 1, f"log lines with the reason (log: {log})")


def test_a_small_input_is_still_recorded():
    x = torch.randn(8, 8, device=DEVICE)  # 256 bytes
    results, wrapped, log = compile_and_run(gelu_chain, x, limit=1024)
    for got in results:
        torch.testing.assert_close(got, gelu_chain(x))
    expect(len(wrapped), 1, "graphs wrapped for recording")
    expect(len(wrapped[0].recordings), 1, "recordings of the wrapped graph")
    expect([m for m in log if "copies" in m], [], "log lines with a reason")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The bytes a replay of the
# linear layer copies, with its weight static, with none, with both:

# %% tags=["raises-exception"]
test_copied_bytes()

# %% [markdown]
# The check on those facts, alone and registered in `SKIP_CHECKS`:

# %% tags=["raises-exception"]
test_check_on_facts()

# %% [markdown]
# Through `torch.compile`, a 4096-byte input is not recorded, and the log says why
# once:

# %% tags=["raises-exception"]
test_a_big_input_is_not_recorded()

# %% [markdown]
# A 256-byte input is still recorded:

# %% tags=["raises-exception"]
test_a_small_input_is_still_recorded()

# %% [markdown]
# ## Going further
#
# 1. A fixed byte limit ignores what a replay saves. Estimate both: launches saved
#    (count `CompiledGraph.kernel_names`, at a few microseconds each) against bytes
#    copied (at your GPU's copy bandwidth). Which facts would the check need?
# 2. A copied input that the caller passes at the placeholder's own address is not
#    copied (chapter 22's replay compares data pointers). When does that happen in a
#    training loop, and could the decision know it in advance?
