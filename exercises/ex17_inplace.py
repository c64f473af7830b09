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
# # Exercise 17: writing over donated inputs
#
# **Difficulty:** medium.
#
# **You will:** let a kernel write its output over a graph input that dies in it, when
# the caller has promised never to use that input again. You write a version of
# chapter 17's `inplace_candidates` that accepts such *donated* inputs, and a handover
# for the wrapper that adds their pairs to chapter 20's, without giving away memory it
# does not own. Then you watch a training step's backward
# write the gradient of a GELU over the activation its forward saved.
#
# **It builds on** chapter 20 (*Memory plan*): `written_over`, which keeps the
# candidates whose memory is the wrapper's own (never a graph input), `live_bytes` and
# `alias_roots`; chapter 19 (*Wrapper*): `plan`, which asks the pipeline's `handovers`
# for those pairs and writes `buf0 = arg  # reuse` (or a `reinterpret_tensor` of it
# when the layouts differ) before the kernel, and the `args.clear()` at the top of
# `call`; chapter 17 (*Triton kernels*), section "Writing over an input":
# `inplace_candidates`, `same_memory` and the `in_out_ptr`; chapter 15 (*Scheduler*)
# for each node's `reads` and `writes`; chapter 1 (*Capture*) for AOTAutograd, which
# compiles a training step as a forward graph and a backward graph.
#
# **Why it matters.** A graph input is the caller's memory, and the caller may read it
# after the call, so chapter 20 never lets a kernel write over one. In training that
# leaves memory on the table. Most of a backward graph's inputs are activations that
# the forward saved for it, and nothing reads them after the backward. Take
# `GELU(Linear(x))`. The forward saves the Linear's output, `(300, 70)` floats; the
# backward's first kernel reads it and the incoming gradient, and writes the gradient
# of the Linear's output, of the same size. Written over the activation, it needs no
# 84,000 bytes of its own, and the backward's peak drops from 168,000 bytes to
# 97,720. AOTAutograd works out which saved tensors share their memory with nothing
# the caller can still see (`collect_bw_donated_buffer_idxs` in
# `torch/_functorch/_aot_autograd/graph_compile.py`) and hands their positions to the
# compiler as `bw_donated_idxs`; Inductor makes those inputs `DonatedBuffer`s
# (`torch/_inductor/graph.py`), the one kind of graph input its wrapper's `can_reuse`
# (`torch/_inductor/codegen/wrapper.py`) lets a kernel write over.

# %% [markdown]
# ## Setup

# %%
import os
import re
from unittest import mock

import torch
import torch.nn.functional as F
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor import memory
from minductor.capture import compile_hooks
from minductor.codegen_triton import inplace_candidates, same_memory
from minductor.config import config
from minductor.ir import MutationBuffer
from minductor.lowering import GraphLowering
from minductor.runtime import empty_strided_cpu, load_module
from minductor.dependencies import MemoryDep, is_indirect
from minductor.scheduler import Scheduler
from minductor.wrapper import FreeLine, WrapperCodeGen, handovers

UNFUSED = {"max_fusion_size": 1}  # each node its own kernel


def lowered(fn, *args, fuse=False):
    """The graph of `fn` (a function, or an FX graph as it is) and its scheduler. A
    function's mutations become a `copy_` at the end, as AOTAutograd makes them."""
    if not isinstance(fn, torch.fx.GraphModule):
        fn = make_fx(functionalize(fn, remove="mutations"))(*args)
    graph = GraphLowering(fn, list(args)).lower()
    with config.patch({} if fuse else UNFUSED):
        return graph, Scheduler(graph)


def plan_of(fn, *args, donated=None):
    """Plan `fn`'s wrapper: chapter 19's if `donated` is None, else yours (Part 2)
    with those input names donated. Returns (wrapper, source of the module)."""
    graph, scheduler = lowered(fn, *args)
    if donated is None:
        wrapper = WrapperCodeGen(graph, scheduler, interpret=True)
    else:
        wrapper = DonatingWrapper(graph, scheduler, interpret=True, donated=donated)
    return wrapper, wrapper.generate()


def call_lines(source):
    return source[source.index("def call") : source.index("def benchmark")].rstrip()


def run(source, *args):
    """Run `call` on `args`; return its outputs and the bytes of each buffer it
    allocated. `call` gets a list of its own, as from AOTAutograd."""
    module = load_module(source)
    allocated = []

    def recording(size, stride, dtype):
        tensor = empty_strided_cpu(size, stride, dtype)
        allocated.append(tensor.untyped_storage().nbytes())
        return tensor

    with mock.patch.object(module, "empty_strided_cpu", recording):
        return module.call(list(args)), allocated


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def expect_equal(got, expected, what):
    """A check on tensors: the same shape and elements, exactly."""
    assert torch.equal(got, expected), f"{what}: got\n{got}\nexpected\n{expected}"


# %% [markdown]
# Here is where donated inputs come from. We compile a training step of `Linear(48,
# 70)` and `GELU` with minductor, and a hook (chapter 1's `compile_hooks`, called for
# every graph compiled) keeps the backward's FX graph and, from the tracing context
# AOTAutograd compiles it in, its `bw_donated_idxs`: positions among the backward's
# inputs.


# %%
def training_step_backward(batch=300):
    """The backward graph of GELU(Linear(48, 70)), its input names, and the names of
    the inputs AOTAutograd donates."""
    found = []

    def keep(gm, graph, scheduler, wrapper, compiled):
        meta = torch._guards.TracingContext.try_get().fw_metadata
        found.append((gm, list(graph.graph_input_names), meta.bw_donated_idxs))

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 70), torch.nn.GELU())
    compile_hooks.register(keep)
    try:
        compiled = torch.compile(model, backend="minductor")
        compiled(torch.randn(batch, 48)).sum().backward()
    finally:
        compile_hooks.remove(keep)
    gm, names, positions = found[-1]  # the forward is compiled first, then this
    return gm, names, {names[i] for i in positions}


def example_inputs(gm):
    """Random tensors shaped like the graph's inputs."""
    values = [node.meta["val"] for node in gm.graph.find_nodes(op="placeholder")]
    return [torch.empty_strided(v.shape, v.stride()).normal_() for v in values]


backward, names, donated = training_step_backward()
print("backward inputs:", names, " donated:", sorted(donated))
bw_inputs = example_inputs(backward)
plain, plain_source = plan_of(backward, *bw_inputs)
print(call_lines(plain_source))

# %% [markdown]
# `primals_3` is the model's input `x`, which the caller still holds; `tangents_1` is
# the incoming gradient; `addmm` is the saved activation, the only input donated. The
# GELU's backward kernel reads `tangents_1` and `addmm` where it writes `buf0`, and
# both die there, yet `buf0` gets 84,000 bytes of its own: chapter 20 gives away no
# graph input.
#
# Why may `call` write over `addmm` at all, when the caller passed it in? Because of
# what happens around the call. Before AOTAutograd calls the compiled backward, it
# clears the saved tensors from the autograd context (`ctx.maybe_clear_saved_tensors()`
# in `CompiledFunction._backward_impl`, `torch/_functorch/_aot_autograd/
# runtime_wrappers.py`) and hands over the list of inputs (`steal_args=True`); `call`
# unpacks the list into its own names and clears it (`args.clear()`). From then on
# `call` holds the only reference to `addmm`: its `del addmm` frees it, and a kernel
# may as well write over it first. A donation is the caller's promise; the compiled
# code cannot check it, only keep to what it was promised.

# %% [markdown]
# ## Part 1: the candidates
#
# Start from chapter 17's rules (read `inplace_candidates` in
# `minductor/codegen_triton.py`, or chapter 17). For a member that stores plainly,
# an input `old` it reads may be written over when `old` is not a graph output, not
# made in the same kernel, has this member as its only reader, is read only where the
# member writes, and its layout is `same_memory` as the output's. Chapter 17 also
# refuses every graph input. Before you let a donated one through, check that the
# other rules still protect an input that the caller gave away but the graph itself
# still needs:
#
# * **returned as it is**: a graph output (`scheduler.output_names` holds input names
#   too). The caller gets it back, and will read it;
# * **another name for it**: a view of an input that the graph returns becomes a
#   `ReinterpretBuffer` (a node of its own, reading the input), and an ATen op that may
#   return a view reads it too: either is a second reader. A view that a kernel reads
#   through is no node at all: it is folded into the kernel's index, which the index
#   rule sees (of a `(50, 60)` input, `x.t().contiguous()` reads `x_1[60*x0 + x1]`
#   where it writes `buf0[x0 + 50*x1]`);
# * **written by the graph**: an input mutated in place (`x.add_(1)`, which becomes a
#   `MutationBuffer` into `x_1` at the end of the graph) is read by that mutation;
# * **its layout**: `scheduler.buffer(name)` gives a graph input's `InputBuffer`,
#   whose layout is the tensor's at compile time (its `offset` is the storage offset,
#   so `same_memory` refuses an input that starts inside its storage). A size input
#   (a `SymInt`) has no buffer: `None`.
#
# One thing no rule of chapter 17 covers: a graph's **constants** (`graph.constants`,
# tensors that `make_fx` or Dynamo lifted out of the program) are graph inputs too,
# passed by the compiled graph itself to every call (`CompiledGraph.__call__`, chapter
# 1), and held by it between calls. No caller can give one away, whatever it names.
#
# Write `candidates(scheduler, donated)`: chapter 17's rules, but a graph input may be
# written over when it is in `donated` and is not a constant. With `donated` empty it
# must return what `inplace_candidates` returns. `readers_of(scheduler)` and
# `stores_plainly(scheduler, member)` below do the parts that do not change.
#
# For each kernel (`scheduler.nodes`, leaving out `node.is_extern()` ones) and each of
# its members (`node.snodes`, each a `SchedulerNode` whose `node` is the output buffer
# and whose `get_name()` is its name) that `stores_plainly`, try the names it reads
# (`member.read_names`) in sorted order, and give the member the first `old` that
#
# * is not a graph output, nor made by a member of the same kernel;
# * is not a graph input (`scheduler.graph.graph_inputs`), unless it is donated and
#   not a constant (`scheduler.graph.constants`);
# * has this member as its only reader: `readers[old] == {member.get_name()}`;
# * is read through one dependency, `MemoryDep(old, write.index)`, where `write` is
#   the member's only write: `{d for d in member.reads if d.name == old}` is that set;
# * is a buffer (`scheduler.buffer(old)` is not `None`) whose layout is
#   `same_memory` as the member's output layout;
# * was not given to another output already.
#
# Return `{old: output name}`, as `inplace_candidates` does.


# %%
def readers_of(scheduler):
    """name -> the names of the nodes that read it, kernel members one by one."""
    readers = {}
    for node in scheduler.nodes:
        for member in getattr(node, "snodes", (node,)):
            for name in member.read_names:
                readers.setdefault(name, set()).add(member.get_name())
    return readers


def stores_plainly(scheduler, member):
    """Does the member store each element once, at an address known before it runs?
    Not a reduction (it stores after its loop), a scatter or other mutation, an
    indirect store, nor a buffer the scheduler removed (it never reaches memory)."""
    write = next(iter(member.writes), None)
    return (
        len(member.writes) == 1
        and isinstance(write, MemoryDep)
        and not is_indirect(write.index)
        and not member.is_reduction()
        and not isinstance(member.node, MutationBuffer)
        and member.get_name() not in scheduler.removed_buffers
    )


def candidates(scheduler, donated):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: the wrapper
#
# `DonatingWrapper` is chapter 19's wrapper with a set of donated input names, which
# plans with your `donating_written_over` in the place of chapter 20's `written_over`
# in the pipeline's `handovers`. It must return chapter 20's pairs (memory the wrapper
# owns, filtered by its rules: keep them, do not copy them) plus the pairs of your
# candidates whose input is donated. Nothing else changes: `plan` writes the `# reuse`
# line (a `reinterpret_tensor` when the layouts differ), `plan_frees` the `del` of the
# input's name, and chapter 17's kernel gives each pair an `in_out_ptr`.
#
# Mind two things. `config.inplace_buffers = False` switches all writing over off,
# donated or not. And a kernel gets one pointer per output: an output may be written
# over one input, never two. Your candidates and chapter 17's can disagree about an
# output that reads both a dying buffer of the wrapper's and a donated input (each
# takes the first name in sorted order that it accepts, and `addmm_1` sorts before
# `buf0`).


# %%
def donating_written_over(wrapper):
    """Chapter 20's pairs, and your candidates' pairs whose input is in
    `wrapper.donated`: input -> output."""
    raise NotImplementedError("your code here")


class DonatingWrapper(WrapperCodeGen):
    def __init__(self, graph, scheduler, interpret, donated=()):
        super().__init__(graph, scheduler, interpret)
        self.donated = frozenset(donated)

    def plan(self):
        # your handover in the place of chapter 20's, while this wrapper plans
        with handovers.using(donating_written_over, chapter=20, name="written_over"):
            super().plan()


# %% [markdown]
# ## Checks
#
# The backward first: its GELU kernel written over the saved activation, the values
# compared with the backward run eagerly on copies of the same inputs, the memory
# counted; then views, the inputs that stay the caller's, and the rules an input
# must still pass. Shapes are large enough that a pointwise kernel runs as several
# programs in the interpreter (a block has at most 1024 elements), one after
# another: a program that wrote over what a later one still has to load would show
# in the values.
#
# How to count the saving honestly? `live_bytes` counts the buffers `call` makes and
# leaves out graph inputs, which are there all along. A donated input is not: the
# caller let go of it, so `call` holds it until its last name is deleted, and that is
# when its memory goes back. `held_bytes` adds each donated input to `live_bytes`
# until then. Written over, its memory lives on under the output's name (the
# `# reuse` line joins the two names' groups, `alias_roots`), and `live_bytes`
# counts no new buffer for the output: alone, it would say the backward's peak fell
# from 97,720 bytes to 13,720, forgetting the block `buf0` lives in. Both plans are
# given the same donated inputs; only what they do with them differs.


# %%
def held_bytes(wrapper, donated):
    """The most bytes `call` holds at once: the plan's buffers (`live_bytes`) and the
    donated inputs, each until the last name of its memory is deleted."""
    roots = memory.alias_roots(wrapper.lines)

    def group(name):
        return roots.get(name, name)

    names = {group(n): {n} for n in donated}  # group -> its names not yet deleted
    sizevars = wrapper.graph.sizevars
    sizes = {group(n): memory.nbytes(wrapper.layouts[n], sizevars) for n in donated}
    inputs, peak = sum(sizes.values()), 0
    profile = memory.live_bytes(wrapper.lines, group, sizevars)
    for line, live in zip(wrapper.lines, profile):
        for name in line.defines():
            names.get(group(name), set()).add(name)
        if isinstance(line, FreeLine):
            for name in line.names:
                g = group(name)
                if g in names:
                    names[g].discard(name)
                    if not names[g]:
                        inputs -= sizes.pop(g)
                        del names[g]
        peak = max(peak, live + inputs)
    return peak


def written_over(source):
    """The `# reuse` lines of `call`, and the kernels with an `in_out_ptr`."""
    lines = call_lines(source).splitlines()
    reuses = [line.strip() for line in lines if "# reuse" in line]
    return reuses, len(re.findall(r"def triton_\w+\(in_out_ptr0", source))


def test_the_backward_writes_over_its_saved_activation():
    (saved,) = donated
    planned, source = plan_of(backward, *bw_inputs, donated=donated)
    expect(
        written_over(source),
        ([f"buf0 = {saved}  # reuse"], 1),
        f"(reuse lines, in_out_ptr kernels) of\n{call_lines(source)}\n",
    )
    inputs = dict(zip(names, example_inputs(backward)))
    copies = {name: t.clone() for name, t in inputs.items()}
    expected = backward(*copies.values())
    # what the GELU kernel computes: the gradient of the Linear's output
    gradient = torch.ops.aten.gelu_backward(copies["tangents_1"], copies[saved])
    got, allocated = run(source, *inputs.values())
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
    # the caller's saved tensor now holds the gradient: it must not be used again
    torch.testing.assert_close(inputs[saved], gradient, atol=1e-4, rtol=1e-4)
    activation, weight, bias = 300 * 70 * 4, 70 * 48 * 4, 70 * 4  # bytes
    _, plain_allocated = run(plain_source, *example_inputs(backward))
    expect(
        sorted(plain_allocated),
        sorted(allocated + [activation]),
        "sizes allocated by chapter 19's plan (expected: yours and the activation's)",
    )
    # chapter 20's plan holds the saved activation and buf0 while the kernel runs;
    # yours, at most the activation's memory and the weight's and bias's gradients
    peaks = held_bytes(plain, donated), held_bytes(planned, donated)
    expected = (2 * activation, activation + weight + bias)
    expect(peaks, expected, "peak bytes held (chapter 20's plan, yours)")


def view_as_matrix(x):
    return x.view(50, 60).relu()  # reads x_1[x0], writes (50, 60)


def transposed(x):
    return x.t() * 2  # eager keeps the input's order: stored (60, 50), (1, 60)


def test_a_donated_input_in_another_layout():
    cases = [
        (view_as_matrix, torch.randn(3000), "(50, 60), (60, 1)"),
        (transposed, torch.randn(50, 60), "(60, 50), (1, 60)"),
    ]
    for fn, x, view in cases:
        _, source = plan_of(fn, x, donated={"x_1"})
        reuses, in_out = written_over(source)
        view_of_x = f"reinterpret_tensor(x_1, {view}, 0)"
        assert len(reuses) == 1 and view_of_x in reuses[0], (
            f"{fn.__name__}: reuse lines: got {reuses}, expected one with {view_of_x!r}"
        )
        expect(in_out, 1, f"{fn.__name__}: kernels with an in_out_ptr in\n{source}\n")
        expected, address = fn(x.clone()), x.data_ptr()
        (out,), allocated = run(source, x)
        # nothing new: the output is x's memory
        expect(allocated, [], f"{fn.__name__}: bytes allocated")
        expect(out.data_ptr(), address, f"{fn.__name__}: address of the output")
        expect(out.stride(), expected.stride(), f"{fn.__name__}: output strides")
        torch.testing.assert_close(out, expected)


def gelu_of_product(a, b):
    return F.gelu(a * b)  # both die in the one kernel


def sum_then_exp(x):
    return (x.sum(1) * 2).exp()  # one kernel: the sums never reach memory


def test_what_is_not_donated_stays_the_callers():
    a, b, square = torch.randn(3000), torch.randn(3000), torch.randn(50, 60)
    _, plain_source = plan_of(gelu_of_product, a, b)
    for fn, args in [
        (gelu_of_product, (a, b)),
        (view_as_matrix, (a,)),
        (backward, bw_inputs),
    ]:
        name = getattr(fn, "__name__", "the backward")
        graph, scheduler = lowered(fn, *args)
        expect(
            candidates(scheduler, set()),
            inplace_candidates(scheduler),
            f"{name}: candidates with nothing donated (expected chapter 17's)",
        )
        ours, chapters = plan_of(fn, *args, donated=set())[1], plan_of(fn, *args)[1]
        assert ours == chapters, (
            f"{name}: with nothing donated, got the module\n{ours}\n"
            f"expected chapter 19's\n{chapters}"
        )
    for fn, args in [(sum_then_exp, (square,)), (backward, bw_inputs)]:
        _, scheduler = lowered(fn, *args, fuse=True)  # kernels of several members
        expect(
            candidates(scheduler, set()),
            inplace_candidates(scheduler),
            "fused kernels: candidates with nothing donated (expected chapter 17's)",
        )
    _, source = plan_of(gelu_of_product, a, b, donated={"b_1"})
    expect(
        written_over(source),
        (["buf0 = b_1  # reuse"], 1),
        f"(reuse lines, in_out_ptr kernels) of\n{call_lines(source)}\n",
    )
    kept, expected = a.clone(), gelu_of_product(a, b)
    for code in (plain_source, source):  # chapter 19's, then yours with b donated
        (out,), _ = run(code, a, b.clone())
        torch.testing.assert_close(out, expected)
        expect_equal(a, kept, "a, not donated, after the call")  # as it was


def mirrored(x):
    return x - x.flip(0)  # two addresses of one input, one of them another's


def read_twice(x):
    return x.exp(), x.cos()  # two kernels read it


def returned(x):
    return x, x.exp()  # the caller gets it back


def returned_view(x):
    return x.view(50, 60), x.exp()  # another name for it: a ReinterpretBuffer


def transposed_read(x):
    return x.t().contiguous() * 2  # the same layout, another element


def bumped(x):
    x.add_(1)  # a mutation of the input: the graph writes it
    return x.exp()


def to_float(x):
    return x.float() * 0.5  # int32 to float32: four bytes each, another type


def fewer(x):
    return x[:1000].exp()  # reads where it writes, but 2000 elements fewer


def exp_of(x):
    return x.exp()  # of an input that starts 10 elements into its storage


VALUES = torch.linspace(-1, 1, 3000).tolist()


def with_constant(x):
    return torch.tensor(VALUES) * x.sum()  # a constant the graph holds


def outputs(value):
    return value if isinstance(value, tuple) else (value,)


def test_what_stays_refused():
    x, square = torch.randn(3000), torch.randn(50, 60)
    cases = [
        (mirrored, x),
        (read_twice, x),
        (returned, x),
        (returned_view, x),
        (transposed_read, square),
        (bumped, x),
        (to_float, torch.randint(-9, 10, (3000,), dtype=torch.int32)),
        (fewer, x),
        (exp_of, torch.randn(3010)[10:]),
        (with_constant, torch.randn(10)),
    ]
    written = []  # the cases where an input was written over
    for fn, arg in cases:
        graph, scheduler = lowered(fn, arg)
        everything = set(graph.graph_input_names)  # the constant's name too
        _, source = plan_of(fn, arg, donated=everything)
        if set(candidates(scheduler, everything)) - {b.name for b in graph.buffers} or (
            source != plan_of(fn, arg)[1]  # donating must change nothing
        ):
            written.append(fn.__name__)
            continue
        constants = list(graph.constants.values())
        kept, eager_arg = [t.clone() for t in constants], arg.clone()
        for _ in range(2):  # a constant written over would change the second call
            expected = outputs(fn(eager_arg))
            got, _ = run(source, arg, *constants)
            for g, e in zip(got, expected, strict=True):
                torch.testing.assert_close(g, e)
            # as eager leaves it
            expect_equal(arg, eager_arg, f"{fn.__name__}: the input after the call")
            for constant, before in zip(constants, kept, strict=True):
                expect_equal(constant, before, f"{fn.__name__}: a constant")
    expect(written, [], "cases where an input was written over")


def mm_times_sigmoid(addmm, x, w):
    return (x @ w) * addmm.sigmoid()  # the matmul's result and addmm die here


def test_one_input_per_output():
    a, b = torch.randn(3000), torch.randn(3000)
    _, scheduler = lowered(gelu_of_product, a, b)
    got = candidates(scheduler, {"a_1", "b_1"})
    expect(got, {"a_1": "buf0"}, "candidates with a and b donated")  # the first
    mm_args = (torch.randn(300, 70), torch.randn(300, 48), torch.randn(48, 70))
    for fn, args, given in [
        (gelu_of_product, (a, b), {"a_1", "b_1"}),
        (mm_times_sigmoid, mm_args, {"addmm_1"}),  # and the matmul's result, buf0
    ]:
        _, source = plan_of(fn, *args, donated=given)
        reuses, in_out = written_over(source)
        output = "buf1" if fn is mm_times_sigmoid else "buf0"
        assert len(reuses) == 1 and reuses[0].startswith(f"{output} = "), (
            f"{fn.__name__}: reuse lines: got {reuses}, expected one, '{output} = ...'"
        )
        expect(in_out, 1, f"{fn.__name__}: kernels with an in_out_ptr in\n{source}\n")
        expected = fn(*(t.clone() for t in args))
        (out,), _ = run(source, *args)
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def conv_and_sigmoid(saved, x, w):
    return F.conv2d(x, w).exp(), saved.sigmoid()


def test_chapter_18s_rules_stay():
    args = (torch.randn(3000), torch.randn(2, 3, 30, 30), torch.randn(4, 3, 3, 3))
    graph, scheduler = lowered(conv_and_sigmoid, *args)
    wrapper = DonatingWrapper(graph, scheduler, interpret=True, donated={"saved_1"})
    expect(
        donating_written_over(wrapper),
        {"buf0": "buf1", "saved_1": "buf2"},
        "donating_written_over",
    )
    # were convolution an op that may return a view of its input, its result would
    # not be the wrapper's memory to give; the donated input still is
    with mock.patch.object(memory, "may_alias", lambda op: True):
        expect(
            donating_written_over(wrapper),
            {"saved_1": "buf2"},
            "donating_written_over, were the convolution's result maybe a view",
        )
    with config.patch({"inplace_buffers": False}):
        expect(
            donating_written_over(wrapper),
            {},
            "donating_written_over with inplace_buffers = False",
        )


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The backward's GELU kernel
# writes over the saved activation, with eager's values and a lower peak:

# %% tags=["raises-exception"]
test_the_backward_writes_over_its_saved_activation()

# %% [markdown]
# A donated input written over through another layout (a `reinterpret_tensor`):

# %% tags=["raises-exception"]
test_a_donated_input_in_another_layout()

# %% [markdown]
# With nothing donated, chapter 17's candidates and chapter 19's module; an input not
# donated is left as it was:

# %% tags=["raises-exception"]
test_what_is_not_donated_stays_the_callers()

# %% [markdown]
# Donated inputs that the other rules still protect (read twice, returned, viewed,
# mutated, another layout, a constant) are never written over:

# %% tags=["raises-exception"]
test_what_stays_refused()

# %% [markdown]
# An output is written over one input, never two:

# %% tags=["raises-exception"]
test_one_input_per_output()

# %% [markdown]
# Chapter 20's pairs and rules stay, and `inplace_buffers = False` switches all off:

# %% tags=["raises-exception"]
test_chapter_18s_rules_stay()

# %% [markdown]
# ## Going further
#
# 1. Pass the donations through the capture. In `compile_backward` (chapter 1), the
#    tracing context's `fw_metadata.bw_donated_idxs` are positions among the
#    backward graph's placeholders, in the order of `graph.graph_input_names`. What
#    would `compile_fx` need to hand the wrapper? AOTAutograd raises "This backward
#    function was compiled with non-empty donated buffers" when a backward compiled
#    with them runs under `backward(retain_graph=True)`: why would a second backward
#    find the promise broken?
# 2. A donated input that the caller holds anyway, as the checks hold `addmm`, now
#    holds a gradient: a wrong answer later, not an error now. What if two inputs
#    share one storage (the same tensor passed twice, or two views of one) and only
#    one is donated? Which of our rules could see it, and which of AOTAutograd's does
#    (`collect_fw_donated_buffer_idxs` compares `StorageWeakRef`s)?
# 3. A donated input that no pointwise kernel can write over (read by an `mm`, or by
#    a reduction) is freed at its `del`, and that is all: Inductor does the same
#    (`codegen_free`: a graph input, donated or not, "can be freed but not reused").
#    Could chapter 20's pool hand its memory to a later allocation of its size? What
#    would `plan_reuse` (its `holders`) and `live_bytes` need to know about it?
# 4. A reduction stores after its loop, so chapter 17 refuses it. Could `x.sum(1)`
#    over a donated `(M, N)` input write its `M` sums into the first `M` elements of
#    `x`? Which program stores into a row that another program may still be reading,
#    and in what order of programs would it be safe? What would `same_memory` and the
#    pool have to say about an output whose storage is `N` times its size?
