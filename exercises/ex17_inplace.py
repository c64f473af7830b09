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

# generated from exercises/solutions/ex17_inplace.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 17: kernels that write over their input
#
# **Difficulty:** medium.
#
# **You will:** add a pass to the wrapper's memory plan that lets a kernel write its
# output into the memory of an input that dies at that kernel, instead of allocating
# new memory: the allocation becomes a `# reuse` line, and the input is no longer
# freed (its memory lives on under the output's name). You will decide when that is
# safe, from the kernel's reads and writes, and measure what it saves at the peak.
#
# **It builds on** chapter 17 (*Wrapper*): the plan as a list of lines
# (`AllocateLine`, `KernelCallLine`, `FreeLine`, `ReuseLine`, ...), `plan_frees`,
# which frees each name after its last use, and `plan_reuse`, which hands memory freed
# *between* two kernels to the next allocation of the same size; chapter 14
# (*Scheduler*) for each node's `reads` and `writes`, `MemoryDep(name, index)`.
#
# **Why it matters.** `plan_reuse` cannot help at the moment a kernel runs: its input
# is still being read, and its output needs memory at the same time, so both are
# live. When the two are the same size and the kernel reads each input element only
# where it writes the same output element, one buffer is enough. Inductor does this
# (`torch/_inductor/codegen/wrapper.py`, `ReuseLine` and the scheduler's
# `decide_inplace_update`). On the small graph below, the first check pins the
# plan's peak: from two 40×37 float32 buffers at once (11,840 bytes) to one of them
# and a 40×5 one (6,720 bytes).

# %% [markdown]
# ## Setup

# %%
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (before Triton is imported)
from minductor.lowering import GraphLowering
from minductor.runtime import load_module
from minductor.scheduler import ExternKernelSchedulerNode, MemoryDep, Scheduler
from minductor.wrapper import (
    AllocateLine,
    FreeLine,
    KernelCallLine,
    ReuseLine,
    WrapperCodeGen,
)


def plan_of(fn, *args, wrapper=WrapperCodeGen):
    """Lower `fn` and plan its wrapper; return (wrapper, source of the module)."""
    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    w = wrapper(graph, Scheduler(graph), interpret=True)
    return w, w.generate()


def call_lines(source):
    return source[source.index("def call") : source.index("def benchmark")].rstrip()


def peak_bytes(lines):
    """The most bytes the plan's own allocations hold at once (inputs not counted)."""
    held, now, peak = {}, 0, 0
    for line in lines:
        if isinstance(line, AllocateLine):
            _, dtype, elements = WrapperCodeGen.reuse_key(line.layout)
            held[line.name] = int(elements) * dtype.itemsize
            now += held[line.name]
            peak = max(peak, now)
        elif isinstance(line, ReuseLine) and line.old in held:
            held[line.new] = held.pop(line.old)
        elif isinstance(line, FreeLine):
            now -= sum(held.pop(name, 0) for name in line.names)
    return peak


# %% [markdown]
# Here is the plan for a matmul, a pointwise epilogue that does not fuse into it (the
# matmul is an extern kernel), a second matmul and a second epilogue. Each epilogue
# reads a buffer that dies right after it (`del buf0`), of the size it writes:


# %%
def mm_chain(x, w, w2):
    return (torch.relu(x @ w) * 2) @ w2 + 1


x, w, w2 = torch.randn(40, 4), torch.randn(4, 37), torch.randn(37, 5)
plain, source = plan_of(mm_chain, x, w, w2)
print(call_lines(source))
print("peak:", peak_bytes(plain.lines), "bytes")

# %% [markdown]
# ## Part 1: when is it safe?
#
# A kernel may write its output `new` into the memory of its input `old` if every
# element it reads of `old` is the element at the place where it writes `new`: then
# each lane reads its element before it writes it, and no lane reads what another
# has already written. With the scheduler's records that is: the node reads `old`
# only through `MemoryDep`s (not a `StarDep`, "all of it", nor an index that depends
# on data), all with the same index, and that index is the one of its only write of
# `new`. The two buffers must also have the same layout (the same index means the
# same address only then).
#
# Write `reads_where_written(node, old, new)`. `node.reads` and `node.writes` are
# frozensets of deps; a `MemoryDep` has `.name` and `.index` (a sympy expression over
# the node's loop variables: `buf0[x0 + 7*x1]`).


# %%
def reads_where_written(node, old, new):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: the pass
#
# Write `plan_inplace(lines, nodes)`, a pass over the finished plan. `nodes` maps each
# `KernelCallLine` (by position in `lines`) to its scheduler node. For each kernel
# call at position `k`, look for an input `old` that
#
# * is one of the kernel's arguments (`line.kernel.call_args`) and is freed by the
#   `FreeLine` right after the call (`lines[k + 1]`): it dies here;
# * was made by an `AllocateLine` of this plan (not a graph input, which is the
#   caller's memory, nor a name that already shares memory through a `ReuseLine`),
#   with the same `layout` as an `AllocateLine` for one of the kernel's outputs
#   `new` that comes before the call;
# * passes `reads_where_written(node, old, new)`.
#
# Then replace that `AllocateLine` by `ReuseLine(old, new)` and take `old` out of the
# `FreeLine` after the call (drop the line if it is left empty). One input per
# output, and at most one output per input. Return the new list of lines.


# %%
def plan_inplace(lines, nodes):
    raise NotImplementedError("your code here")


# %% [markdown]
# The wrapper runs the pass after its own planning. `nodes` comes from the scheduler:
# the wrapper emits one kernel call per node that is not an extern kernel, in order.


# %%
class InPlaceWrapper(WrapperCodeGen):
    def plan(self):
        super().plan()
        kernels = [
            n
            for n in self.scheduler.nodes
            if not isinstance(n, ExternKernelSchedulerNode)
        ]
        calls = [
            k for k, line in enumerate(self.lines) if isinstance(line, KernelCallLine)
        ]
        assert len(calls) == len(kernels), (calls, kernels)
        self.lines = plan_inplace(self.lines, dict(zip(calls, kernels)))


def run(source, *args):
    return load_module(source).call(list(args))


# %% [markdown]
# ## Checks
#
# Structure (the `# reuse` lines, where they may appear and where they must not), the
# peak, and the values: the module runs and matches eager. The shapes are large
# enough that a kernel runs as several programs, so a wrong reuse would show in the
# values too.


# %%
def test_epilogues_write_in_place():
    planned, source = plan_of(mm_chain, x, w, w2, wrapper=InPlaceWrapper)
    text = call_lines(source)
    assert "buf1 = buf0  # reuse" in text, text
    assert "buf3 = buf2  # reuse" in text, text
    assert "del buf0" not in text and "del buf2" not in text, text
    (out,) = run(source, x, w, w2)
    torch.testing.assert_close(out, mm_chain(x, w, w2))
    before, after = peak_bytes(plain.lines), peak_bytes(planned.lines)
    # before: buf0 and buf1 (40x37) at once; after: buf1 is buf0, and the peak is
    # while it is still live and the second matmul's buf2 (40x5) is allocated
    assert (before, after) == (2 * 40 * 37 * 4, 40 * 37 * 4 + 40 * 5 * 4)


def test_not_over_a_graph_input():
    def fn(x, y):
        return torch.relu(x) * y

    a, b = torch.randn(30, 41), torch.randn(30, 41)
    planned, source = plan_of(fn, a, b, wrapper=InPlaceWrapper)
    assert "# reuse" not in source, call_lines(source)
    (out,) = run(source, a, b)
    torch.testing.assert_close(out, fn(a, b))


def test_not_where_other_elements_are_read():
    def fn(x, w):
        z = x @ w
        return z + z.flip(1), (z * 2).sum(0)  # flip: another element of z

    a, b = torch.randn(40, 3), torch.randn(3, 37)
    planned, source = plan_of(fn, a, b, wrapper=InPlaceWrapper)
    text = call_lines(source)
    assert "= buf0  # reuse" not in text, text
    for got, want in zip(run(source, a, b), fn(a, b)):
        torch.testing.assert_close(got, want)


def test_not_while_still_needed():
    def fn(x, w):
        z = x @ w
        return torch.relu(z) * 2, z  # z is returned: it never dies

    planned, source = plan_of(fn, x, w, wrapper=InPlaceWrapper)
    text = call_lines(source)
    assert "# reuse" not in text, text
    for got, want in zip(run(source, x, w), fn(x, w)):
        torch.testing.assert_close(got, want)


def test_layouts_must_match():
    def fn(x, w):
        return (x @ w).to(torch.float16) + 1  # same offsets, not the same bytes

    planned, source = plan_of(fn, x, w, wrapper=InPlaceWrapper)
    assert "# reuse" not in source, call_lines(source)
    (out,) = run(source, x, w)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, fn(x, w))


# %% [markdown]
# ## Run the checks

# %% tags=["raises-exception"]
test_epilogues_write_in_place()
test_not_over_a_graph_input()
test_not_where_other_elements_are_read()
test_not_while_still_needed()
test_layouts_must_match()

# %% [markdown]
# ## Going further
#
# 1. A graph input that the caller hands over and never uses again (Inductor's
#    "donated buffers") could be written over too. What would the wrapper need to know
#    about it, and from whom?
# 2. `reads_where_written` compares indices as expressions. Find a kernel where two
#    different expressions give the same addresses (a size-1 dimension helps), so that
#    the pass refuses a safe reuse. Would `sizevars` simplification fix it?
# 3. A reduction kernel reads a row and writes one value: its output is smaller than
#    its input, so no `AllocateLine` matches. Could the output live at the start of the
#    input's memory anyway? What would the plan have to say about that memory's size?
