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
# # Exercise 33: what a body reads and writes, found by running it
#
# **Difficulty:** easy.
#
# **You will:** write the two halves of chapter 14's dependency analysis. First
# `record(buf, variables, rvariables)`: run a computed buffer's body under a handler of
# your own that writes down every `load` and `store`, and return what it read and wrote
# as sets of `(buffer name, index)`. Then `fused_deps(members)`: what a kernel made of
# several nodes reads from memory and writes to it, given each member's reads and
# writes. Checks compare your record with the chapter's `RecordingHandler` on pointwise
# bodies, broadcasts, views, a reduction and a gather, and your fused dependencies with
# `FusedSchedulerNode` on the nodes the scheduler fuses in real graphs.
#
# **It builds on** chapter 14 (*Scheduler nodes*): `RecordingHandler`, `SchedulerNode`
# and `FusedSchedulerNode`; chapter 3 for handlers (`NullHandler`, `set_handler`) and
# `indirect_indexing`; chapter 6 for `GraphLowering`.
#
# **Why it matters.** The scheduler decides every fusion from dependencies alone: a
# consumer may share a kernel with its producer when it reads what the producer writes
# at the same index, and a buffer that only the kernel's own members read never goes to
# memory. Nobody writes those dependencies down. They are in the body, a Python
# function, and the way to read them is to run it with a handler that listens, which is
# what Inductor's `extract_read_writes` (`torch/_inductor/dependencies.py`) does too.

# %% [markdown]
# ## Setup

# %%
import os

import torch
from torch.fx.experimental.proxy_tensor import make_fx

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (registers the lowerings)
from minductor.dependencies import FusedSchedulerNode, RecordingHandler, _run_body
from minductor.ir import ComputedBuffer
from minductor.lowering import GraphLowering
from minductor.ops import NullHandler, set_handler
from minductor.scheduler import Scheduler
from minductor.sizevars import index_vars


def lowered(fn, *args) -> list[ComputedBuffer]:
    """fn's computed buffers, lowered (chapter 6)."""
    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    return [b for b in graph.buffers if isinstance(b, ComputedBuffer)]


def variables_of(buf: ComputedBuffer):
    """Fresh index variables for buf's loops (x0, x1, ...) and reduction (r0, ...)."""
    rsizes = buf.data.reduction_ranges if buf.is_reduction() else ()
    return tuple(index_vars(len(buf.data.ranges))), tuple(index_vars(len(rsizes), "r"))


# %% [markdown]
# ## Part 1: record
#
# Write `Recorder`, a `NullHandler` (every op it does not define returns a placeholder,
# so the body's math runs without computing anything) whose `load(name, index)` and
# `store(name, index, value, mode=None)` write down `(name, index)`, and whose
# `store_reduction(name, index, value)` counts as a store. Then `record(buf, variables,
# rvariables)`: run the body under your handler and return `(reads, writes)`, two sets.
# A reduction's body takes the two sets of variables (`buf.store_output(variables,
# rvariables)`), a pointwise body only the first (`buf.store_output(variables)`).

# %%
class Recorder(NullHandler):
    def __init__(self):
        # BEGIN SOLUTION
        self.reads, self.writes = set(), set()
        # END SOLUTION

    def load(self, name, index):
        # BEGIN SOLUTION
        self.reads.add((name, index))
        # END SOLUTION

    def store(self, name, index, value, mode=None):
        # BEGIN SOLUTION
        self.writes.add((name, index))
        # END SOLUTION

    def store_reduction(self, name, index, value):
        # BEGIN SOLUTION
        self.writes.add((name, index))
        # END SOLUTION


def record(buf: ComputedBuffer, variables, rvariables):
    # BEGIN SOLUTION
    recorder = Recorder()
    with set_handler(recorder):
        if buf.is_reduction():
            buf.store_output(variables, rvariables)
        else:
            buf.store_output(variables)
    return recorder.reads, recorder.writes
    # END SOLUTION


# %% [markdown]
# ## Part 2: a fused kernel's dependencies
#
# `members` is a list of `(reads, writes)` pairs, each a set of `(name, index)`, in the
# kernel's order. Return `(reads, writes)` of the whole kernel: it writes everything its
# members write, and it reads from memory only what no member writes (a value one
# member writes and another reads stays in the kernel).

# %%
def fused_deps(members):
    # BEGIN SOLUTION
    writes = set().union(*(w for _, w in members))
    written = {name for name, _ in writes}
    reads = {(n, i) for r, _ in members for n, i in r if n not in written}
    return reads, writes
    # END SOLUTION


# %% [markdown]
# ## Checks


# %%
def expect(got, expected, what):
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def the_chapters(buf, variables, rvariables):
    recorder = RecordingHandler()
    with set_handler(recorder):
        _run_body(buf, variables, rvariables)
    return set(recorder.loads), set(recorder.stores)


GRAPHS = {  # name: (fn, args)
    "a * b + c": (lambda a, b, c: a * b + c, [torch.randn(4, 5)] * 3),
    "x + a row": (lambda x, r: x + r, [torch.randn(3, 6), torch.randn(6)]),
    "a transpose": (lambda x: x.t() * 2, [torch.randn(3, 7)]),
    "a reshape": (lambda x: (x + 1).view(6, 4) * 2, [torch.randn(2, 3, 4)]),
    "a sum of rows": (lambda x: x.sum(1), [torch.randn(5, 9)]),
    "a gather": (lambda x, i: x[i] + 1, [torch.randn(8, 3), torch.tensor([2, 0, 7])]),
}


def test_your_record_is_the_chapters():
    for name, (fn, args) in GRAPHS.items():
        for buf in lowered(fn, *args):
            variables, rvariables = variables_of(buf)
            got = record(buf, variables, rvariables)
            expected = the_chapters(buf, variables, rvariables)
            expect(got, expected, f"{name}, {buf.name}: (reads, writes)")
            expect(len(got[1]), 1, f"{name}, {buf.name}: one store")


def test_a_gathers_index_is_a_value_read_from_memory():
    fn, args = GRAPHS["a gather"]
    (buf,) = lowered(fn, *args)
    reads, _ = record(buf, *variables_of(buf))
    indices = {name: index for name, index in reads}
    expect(len(indices), 2, "buffers read by x[i] + 1")
    symbols = {s.name[:8] for index in indices.values() for s in index.free_symbols}
    expect("indirect" in symbols, True, f"an index read from memory in {indices}")


def test_fused_dependencies_are_the_schedulers():
    cases = {
        "softmax": (lambda x: torch.softmax(x, 1), [torch.randn(4, 10)]),
        "two outputs of one input": (lambda x: (x.sin(), x.cos() * 2), [torch.randn(8)]),
        "a shared intermediate": (lambda x: ((y := x * 3) + 1, y.sum()), [torch.randn(6)]),
    }
    fused = 0
    for name, (fn, args) in cases.items():
        graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
        for node in Scheduler(graph).nodes:
            if not isinstance(node, FusedSchedulerNode):
                continue
            fused += 1
            members = [
                ({(d.name, d.index) for d in m.reads}, {(d.name, d.index) for d in m.writes})
                for m in node.snodes
            ]
            reads, writes = fused_deps(members)
            expect(reads, {(d.name, d.index) for d in node.reads}, f"{name}: reads")
            expect(writes, {(d.name, d.index) for d in node.writes}, f"{name}: writes")
    expect(fused > 0, True, "fused nodes among the cases")


# %% [markdown]
# Your record against the chapter's `RecordingHandler`, on every buffer of six graphs:
# pointwise, a broadcast row, a transpose, a reshape, a reduction and a gather:

# %%
test_your_record_is_the_chapters()

# %% [markdown]
# A gather reads its table at an index that is a value loaded from memory:

# %%
test_a_gathers_index_is_a_value_read_from_memory()

# %% [markdown]
# And your fused dependencies against the scheduler's fused nodes:

# %%
test_fused_dependencies_are_the_schedulers()

# %% [markdown]
# ## Going further
#
# 1. Print the reads of `a reshape`'s second buffer before and after chapter 14's
#    `simplify_index`. Which one is affine in the merged loop variable?
# 2. A fallback (an ATen call) has no body to run. What does the scheduler record for
#    it, and what does that cost the fusions around it?
# 3. Record `torch.where(m, x, y)` where `m` is all `True`. Does the body still read
#    `y`? Why must the recorder say so?
