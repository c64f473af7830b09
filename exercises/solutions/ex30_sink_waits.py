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
# # Exercise 30: waits that wait as late as they may
#
# **Difficulty:** medium. A dozen lines; knowing what may not move is the exercise.
#
# **You will:** write the half of chapter 28's overlap pass that moves each wait down
# the schedule, so that the work that does not need a collective's result runs while
# the collective is in flight. Then swap it into the compiler and check the schedules
# and the answers of a few graphs, in a process group of one process.
#
# **It builds on** chapter 28 (*Many GPUs*): `CollectiveKernel`, `WaitKernel`,
# `reorder_for_overlap`; chapter 14's scheduler nodes (`names`, `dep_names`) and its
# `order_mutations`, which makes a write into a collective's input depend on the wait.
#
# ## What may move
#
# A node after a wait may run before it if it does not depend on the wait: not on the
# wait's result, not on a node that depends on the wait, and so on down. Everything
# else stays after the wait, in the order it had. One more rule keeps things simple:
# waits keep their order among themselves, so treat a later wait (and what depends on
# it) as bound to stay after.

# %% [markdown]
# ## Setup

# %%
import contextlib
import os
import tempfile
from unittest import mock

import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor import distributed
from minductor.distributed import WaitKernel
from minductor.lowering import GraphLowering
from minductor.scheduler import Scheduler

c10d = torch.ops._c10d_functional


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


@contextlib.contextmanager
def world_of_one():
    """A process group of one process (gloo, on the CPU), for one check."""
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield dist.group.WORLD.group_name
    finally:
        dist.destroy_process_group()


# %% [markdown]
# ## Your part
#
# Write `sink_waits(nodes)`: it returns the scheduler's nodes in a new order, in which
# each `WaitKernel` comes after the nodes that followed it and do not depend on it.
# A node is a wait when `isinstance(getattr(node, "node", None), WaitKernel)`;
# `node.names` is what a node makes and `node.dep_names` what it needs.

# %%
def sink_waits(nodes: list) -> list:
    # BEGIN SOLUTION
    nodes = list(nodes)
    waits = [n for n in nodes if isinstance(getattr(n, "node", None), WaitKernel)]
    for wait in reversed(waits):
        k = nodes.index(wait)
        needs, free, bound = set(wait.names), [], []
        for node in nodes[k + 1 :]:
            is_wait = isinstance(getattr(node, "node", None), WaitKernel)
            if node.dep_names & needs or is_wait:
                needs |= node.names
                bound.append(node)
            else:
                free.append(node)
        nodes = nodes[:k] + free + [wait] + bound
    return nodes
    # END SOLUTION


# %% [markdown]
# ## The checks
#
# `schedule(fn, *inputs)` traces `fn`, lowers it, and returns the kinds of the
# scheduled nodes, with your `sink_waits` in the overlap pass.

# %%
def schedule(fn, *inputs) -> list[str]:
    graph = GraphLowering(make_fx(fn)(*inputs), list(inputs)).lower()
    with mock.patch.object(distributed, "sink_waits", sink_waits):
        nodes = Scheduler(graph).nodes
    return [type(getattr(n, "node", n)).__name__ for n in nodes]


def compiled(fn, *inputs):
    torch._dynamo.reset()
    with mock.patch.object(distributed, "sink_waits", sink_waits):
        return torch.compile(fn, backend="minductor")(*inputs)


def test_independent_work_runs_before_the_wait():
    with world_of_one() as world:

        def step(x, w):
            gathered = c10d.wait_tensor(c10d.all_gather_into_tensor(x * 2, 1, world))
            return gathered + 1, torch.relu(x @ w)  # the matmul needs no result

        x, w = torch.randn(5, 7), torch.randn(7, 7)
        kinds = schedule(step, x, w)
        start, wait = kinds.index("CollectiveKernel"), kinds.index("WaitKernel")
        expect(kinds[start + 1 : wait], ["ExternKernelOut", "ComputedBuffer"],
               "between the all-gather and its wait")  # fmt: skip
        for got, want in zip(compiled(step, x, w), step(x, w)):
            torch.testing.assert_close(got, want)


def test_readers_of_the_result_stay_after_it():
    with world_of_one() as world:

        def fn(x, w):
            summed = c10d.wait_tensor(c10d.all_reduce(x + 1, "sum", world))
            y = summed @ w  # reads the result
            return torch.tanh(y), torch.exp(x @ w)  # the tanh through y

        x, w = torch.randn(5, 7), torch.randn(7, 7)
        kinds = schedule(fn, x, w)
        after = kinds[kinds.index("WaitKernel") + 1 :]
        expect(after, ["ExternKernelOut", "ComputedBuffer"],
               "after the wait: the matmul of its result, and the tanh")  # fmt: skip
        for got, want in zip(compiled(fn, x, w), fn(x, w)):
            torch.testing.assert_close(got, want)


def test_two_waits_keep_their_order():
    with world_of_one() as world:

        def fn(x):
            a = c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", world))
            b = c10d.wait_tensor(c10d.all_reduce(x * 3, "sum", world))
            return a + b, torch.sin(x)

        x = torch.randn(5, 7)
        kinds = schedule(fn, x)
        waits = [k for k, kind in enumerate(kinds) if kind == "WaitKernel"]
        expect(len(waits), 2, "waits")
        expect(kinds[waits[1] + 1 :], ["ComputedBuffer"], "after the second wait")
        for got, want in zip(compiled(fn, x), fn(x)):
            torch.testing.assert_close(got, want)


# %% [markdown]
# ## Run the checks
#
# The matmul and its `relu` move up, between the all-gather and its wait:

# %%
test_independent_work_runs_before_the_wait()

# %% [markdown]
# A matmul of the result, and the kernel after it, stay below the wait:

# %%
test_readers_of_the_result_stay_after_it()

# %% [markdown]
# Two waits, in their order, and the sum of both results after the second:

# %%
test_two_waits_keep_their_order()

# %% [markdown]
# ## Going further
#
# 1. Turn `config.reorder_for_overlap` off and print the three schedules. Which of the
#    checks above pass anyway, and why?
# 2. Moving every independent node above a wait makes their results live longer. Find
#    a graph in which that raises the peak memory (chapter 20's `live_bytes`), and a
#    rule that moves only as much work as the collective needs.
