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
# # Exercise 2: write a fusion rule
#
# **Difficulty:** easy. A few lines of code; reading the scheduler is most of the work.
#
# **You will:** add a rule to the scheduler's `can_fuse` that refuses a fusion when
# the fused kernel would read and write too many distinct buffers, register it with
# `register_fusion_rule`, and watch it split a kernel in two, with its reason in the
# fusion log.
#
# **It builds on** chapter 15 (*The scheduler*): `SchedulerNode`,
# `FusedSchedulerNode`, their `reads`/`writes`, `Scheduler.can_fuse`,
# `register_fusion_rule`, `fusion_rules` and the fusion log; and chapter 1 for
# `record_compiled` and `CompiledGraph.fusion_log`.
#
# ## Legality and profitability
#
# The scheduler asks two different questions about a pair of nodes, and keeps them
# apart:
#
# * **`can_fuse`: may they share a kernel?** A veto, with a reason. The built-in rules
#   are about correctness: one iteration space, a consumer reading its producer at
#   the index it was written, no cycle through a node left outside.
# * **`score_fusion`: which fusion first?** An ordering of the legal pairs by the
#   bytes they save, then by proximity. It never refuses anything.
#
# The rule you will write is a veto that is *not* about correctness: the fused
# kernel would compute the same values. It is about what a kernel can hold. Every
# buffer a kernel touches is a pointer argument and a stream of loads or stores in
# flight; a kernel that touches dozens of them runs short of registers (they spill
# to slow memory) and its memory streams compete, so past some point two kernels are
# faster than one. Inductor makes exactly this kind of refusal in its `can_fuse`
# (`torch/_inductor/choices.py`, `InductorChoices.can_fuse`), whose docstring says
# its heuristics are not needed for correctness: `config.max_fusion_size` (64 nodes)
# and, when set, `config.max_fusion_unique_io_buffers`, which is the rule of this
# exercise. It belongs with the vetoes rather than in the score because it is a hard
# limit, not a preference: a fusion past it is not worth less, it is not worth doing.
#
# A rule is a function of the two candidate nodes that returns `None` (no
# objection) or a string, the reason to refuse. `can_fuse` calls the registered
# rules after its checks of devices, loops and indices (so neither node is an extern
# kernel) and before the cycle check, and the scheduler writes the reason into its
# fusion log: `cannot fuse buf0 with buf1: <reason>`.

# %% [markdown]
# ## Setup
#
# `import minductor` comes first: without a GPU, it switches on Triton's interpreter
# before Triton is imported.

# %%
import contextlib
import os

import torch
from torch.fx.experimental.proxy_tensor import make_fx

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import record_compiled
from minductor.config import config
from minductor.lowering import GraphLowering
from minductor.dependencies import FusedSchedulerNode, SchedulerNode
from minductor.scheduler import fusion_rules, register_fusion_rule


def compile_once(fn, *args):
    """Compile `fn` afresh with minductor, run it once; return (result, graph)."""
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    (graph,) = graphs
    return out, graph


@contextlib.contextmanager
def using_rule(rule):
    """Register a fusion rule for the duration of a block."""
    register_fusion_rule(rule)
    try:
        yield rule
    finally:
        fusion_rules.remove(rule)


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# Here is the function the checks compile. It returns three values computed from
# one input, so lowering realizes three buffers; the scheduler then fuses them
# *horizontally* (they share their input `x`) into a single kernel that reads `x`
# once and writes three outputs. The fusion log shows two fusions, first a pair,
# then the pair with the third node:


# %%
def three_outputs(x):
    return x + 1, x * 2, (x - 3).to(torch.float16)


x = torch.randn(5, 7, 3)
_, graph = compile_once(three_outputs, x)
print(graph.kernel_names)
print("\n".join(graph.fusion_log))

# %% [markdown]
# ## Part 1: which buffers would the fused kernel touch?
#
# Write `io_buffers(a, b)`: the names of the buffers that a kernel made of `a` and
# `b` together would read from or write to memory. Each node knows what it reads
# (`read_names`) and writes (`names`). The point is to count what the
# *kernel* touches, not what each node touches:
#
# * a buffer both nodes read is one input: the kernel loads it once (CSE removes the
#   second load, chapter 17);
# * a buffer `a` writes and `b` reads is one output: `b` takes the value from a
#   register (the store cache, chapter 17), it does not load it back.
#
# That second buffer is still counted, as a write, although its store may disappear
# too: if no node outside the pair reads it and it is not a graph output, it never
# reaches memory. The scheduler only settles that once fusion is over
# (`removed_buffers`), so counting it makes the rule conservative: it may refuse a
# fusion that would have fit, never allow one that does not.
#
# `a` and `b` can be `SchedulerNode`s or `FusedSchedulerNode`s; both have these
# methods.


# %%
def io_buffers(a, b):
    # BEGIN SOLUTION
    return a.read_names | b.read_names | a.names | b.names
    # END SOLUTION


# %% [markdown]
# ## Part 2: the rule
#
# Write `limit_io_buffers(limit)`, which returns a fusion rule: a function `rule(a, b)`
# that returns `None` when the fused kernel would touch at most `limit` buffers, and
# otherwise the reason, in exactly this form (the checks look for it in the log):
#
# ```
# fused kernel would touch 4 buffers, more than max_fusion_unique_io_buffers=3
# ```


# %%
def limit_io_buffers(limit):
    def rule(a, b):
        # BEGIN SOLUTION
        n = len(io_buffers(a, b))
        if n > limit:
            return (
                f"fused kernel would touch {n} buffers, "
                f"more than max_fusion_unique_io_buffers={limit}"
            )
        return None
        # END SOLUTION

    return rule


# %% [markdown]
# ## Checks on scheduler nodes
#
# The first checks call your functions on scheduler nodes directly, built the way
# chapter 15 builds them: lower a graph with `GraphLowering`, then make one
# `SchedulerNode` per buffer, *before* any fusion. In `g`, `t` has two users, and
# with `realize_opcount_threshold = 0` lowering realizes it, so there are three
# buffers: `buf0 = t` (reads `x`, `y`), `buf1 = t + x` (reads `buf0`, `x`) and
# `buf2 = t - y` (reads `buf0`, `y`).


# %%
def g(x, y):
    t = x * y
    return t + x, t - y


def unfused_nodes():
    x, y = torch.randn(9, 5), torch.randn(9, 5)
    saved, config.realize_opcount_threshold = config.realize_opcount_threshold, 0
    try:
        graph = GraphLowering(make_fx(g)(x, y), [x, y]).lower()
    finally:
        config.realize_opcount_threshold = saved
    nodes = [SchedulerNode.create(buf) for buf in graph.buffers]
    names = [n.get_name() for n in nodes]
    expect(names, ["buf0", "buf1", "buf2"], "the unfused nodes of g")
    order = {n.get_name(): k for k, n in enumerate(nodes)}
    return graph.graph_input_names, nodes, order


def test_io_buffers():
    (x, y), (n0, n1, n2), order = unfused_nodes()
    # producer and consumer: buf0 is handed over, x is read once
    expect(io_buffers(n0, n1), {x, y, "buf0", "buf1"}, "io_buffers(buf0, buf1)")
    expect(io_buffers(n1, n0), {x, y, "buf0", "buf1"}, "io_buffers(buf1, buf0)")
    # two consumers of buf0: it is read from memory, once
    all5 = {x, y, "buf0", "buf1", "buf2"}
    expect(io_buffers(n1, n2), all5, "io_buffers(buf1, buf2)")
    # a fused node with a third
    fused = FusedSchedulerNode.fuse(n0, n1, order)
    expect(io_buffers(fused, n2), all5, "io_buffers(buf0+buf1 fused, buf2)")
    expect(io_buffers(n2, fused), all5, "io_buffers(buf2, buf0+buf1 fused)")


def test_rule_on_nodes():
    _, (n0, n1, n2), order = unfused_nodes()
    fused = FusedSchedulerNode.fuse(n0, n1, order)
    expect(limit_io_buffers(4)(n0, n1), None, "limit 4, buf0 with buf1")
    expect(limit_io_buffers(5)(fused, n2), None, "limit 5, buf0+buf1 with buf2")
    expect(
        limit_io_buffers(3)(n0, n1),
        "fused kernel would touch 4 buffers, more than max_fusion_unique_io_buffers=3",
        "limit 3, buf0 with buf1",
    )
    reason = limit_io_buffers(4)(fused, n2)
    assert isinstance(reason, str) and "touch 5 buffers" in reason, (
        f"limit 4, buf0+buf1 with buf2: got {reason!r}, "
        f"expected a reason with 'touch 5 buffers'"
    )


# %% [markdown]
# ## Checks through `torch.compile`
#
# Now the rule in the scheduler. With no rule, `three_outputs` is one kernel. Each
# node alone touches two buffers (`x` and its output), a pair three, all three four.
# So a limit of 3 lets the first pair fuse and refuses the third node (two
# kernels); a limit of 2 refuses every pair (three kernels); a limit of 4 changes
# nothing. Whatever the limit, the results are eager's.


# %%
def check_three_outputs(limit):
    x = torch.randn(5, 7, 3)
    x[0, 0, 0] = float("nan")
    with using_rule(limit_io_buffers(limit)):
        out, graph = compile_once(three_outputs, x)
    for got, want in zip(out, three_outputs(x)):
        expect(got.dtype, want.dtype, "dtype")
        torch.testing.assert_close(got, want, equal_nan=True)
    expect(graph.fallbacks, [], "fallbacks")
    return graph


def test_limit_3_splits_the_kernel():
    _, graph = compile_once(three_outputs, torch.randn(5, 7, 3))
    kernels = graph.kernel_names
    expect(len(kernels), 1, f"kernels without the rule ({kernels})")

    graph = check_three_outputs(3)
    log = "\n".join(graph.fusion_log)
    expect(len(graph.kernel_names), 2, f"kernels with limit 3; fusion log:\n{log}\n")
    refused = [line for line in graph.fusion_log if line.startswith("cannot fuse")]
    reason = (
        ": fused kernel would touch 4 buffers, more than max_fusion_unique_io_buffers=3"
    )
    assert any(line.endswith(reason) for line in refused), (
        f"no 'cannot fuse' line ends with {reason!r}; fusion log:\n{log}"
    )
    fusions = sum(line.startswith("fuse ") for line in graph.fusion_log)
    expect(fusions, 1, f"fusions with limit 3; fusion log:\n{log}\n")


def test_limit_2_and_4():
    graph = check_three_outputs(2)
    log = "\n".join(graph.fusion_log)
    expect(len(graph.kernel_names), 3, f"kernels with limit 2; fusion log:\n{log}\n")
    fused = [line for line in graph.fusion_log if line.startswith("fuse ")]
    expect(fused, [], "fusions with limit 2")

    graph = check_three_outputs(4)
    log = "\n".join(graph.fusion_log)
    expect(len(graph.kernel_names), 1, f"kernels with limit 4; fusion log:\n{log}\n")
    refused = [line for line in graph.fusion_log if "cannot fuse" in line]
    expect(refused, [], "refusals with limit 4")


def test_vertical_fusion_counts_handed_over_buffers_once():
    def h(x, y):
        # tanh, not exp: sin of a large exponential would turn one ulp into 1e-5
        t = (x * y).tanh().sin().cos() + x  # two users and heavy: realized
        return t + 1, t * 2

    torch.manual_seed(0)
    x, y = torch.randn(6, 11), torch.randn(6, 11)
    saved, config.realize_opcount_threshold = config.realize_opcount_threshold, 3
    try:
        # t (buf0), t + 1 (buf1), t * 2 (buf2): x, y and three outputs, 5 buffers
        with using_rule(limit_io_buffers(5)):
            out, graph = compile_once(h, x, y)
    finally:
        config.realize_opcount_threshold = saved
    for got, want in zip(out, h(x, y)):
        torch.testing.assert_close(got, want)
    log = "\n".join(graph.fusion_log)
    expect(len(graph.kernel_names), 1, f"kernels with limit 5; fusion log:\n{log}\n")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. `io_buffers` on unfused and
# fused nodes of `g`:

# %%
test_io_buffers()

# %% [markdown]
# The rule on the same nodes: `None` within the limit, the exact reason past it:

# %%
test_rule_on_nodes()

# %% [markdown]
# Through `torch.compile`, a limit of 3 splits `three_outputs` into two kernels and
# logs the reason:

# %%
test_limit_3_splits_the_kernel()

# %% [markdown]
# A limit of 2 refuses every fusion; a limit of 4 refuses none:

# %%
test_limit_2_and_4()

# %% [markdown]
# A buffer handed from producer to consumer counts once, so a limit of 5 keeps `h`
# in one kernel:

# %%
test_vertical_fusion_counts_handed_over_buffers_once()

# %% [markdown]
# ## Going further
#
# 1. Make the count exact: a buffer written by one node, read only by the other and
#    not a graph output is never stored. What does the rule need to know that
#    `rule(a, b)` does not receive? Compare `Scheduler._buffers_internal_to_kernels`.
# 2. A kernel's arguments grow with the distinct buffers it reads. Add a limit on
#    those alone (reads that are not also written inside the kernel), and find a graph
#    where it and the buffer limit above disagree.
# 3. A rule that *prefers* some fusions over others is not a veto. Where in chapter 15
#    would it go instead, and what would it return?
