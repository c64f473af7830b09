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
# # Exercise 25: several kernels for the tiny compiler
#
# **Difficulty:** medium.
#
# **You will:** teach chapter 0's tiny compiler to write more than one kernel. It
# fuses every output of a graph into one kernel, so it refuses outputs of different
# shapes (one kernel has one `xnumel`), and it fuses two chains that share nothing,
# although one kernel then saves no memory traffic at all. You will group the outputs
# into kernels (same shape, and an input read in common, transitively: a small
# union-find), build the body of each group from the chapter's pieces, and write a
# module with one kernel per group and a `call` that launches them all. Checks compile
# functions with your backend and compare with eager PyTorch on odd sizes, size-1
# dimensions, broadcasting, a transposed input, `float16` and empty tensors, and pin
# how many kernels come out and what each one reads.
#
# **It builds on** chapter 0 (*A compiler in an hour*): `make_loader` and `index_of`,
# `pointwise` and `once`, `fused_body`, `TritonPrinter` and `set_handler`,
# `kernel_name`, `kernel_source`, `call_source` and `generate`, `load_module`, and the
# refusals of `why_not`.
#
# **Why it matters.** Fusing is worth it when the nodes it joins share memory: an
# intermediate that is never written, an input read once instead of twice. Two chains
# that read different inputs save no bytes by sharing a kernel (one launch, no more),
# and a kernel that computes outputs of different shapes cannot have one grid for
# them all. So a real compiler decides *which* nodes share a kernel, and its wrapper
# launches several. That is chapter 15's scheduler in miniature. In Inductor,
# `Scheduler.can_fuse` in `torch/_inductor/scheduler.py` asks the Triton backend,
# whose `can_fuse` in `torch/_inductor/codegen/simd.py` refuses two pointwise nodes
# with different numbers of elements, and `InductorChoices.can_fuse_horizontal` in
# `torch/_inductor/choices.py` refuses two siblings that read fewer than
# `config.score_fusion_memory_threshold` bytes in common. `PythonWrapperCodegen` in
# `torch/_inductor/codegen/wrapper.py` writes one launch per kernel in one `call`.

# %% [markdown]
# ## Setup
#
# The backend of this notebook is the tiny backend with one change: its forward
# compiler lets outputs of different shapes through (every other refusal of
# `why_not` stands) and calls your `generate_many` instead of `generate`. As in
# chapter 0, each compiled graph is recorded, with the module's source.

# %%
import os
import re

import torch
from torch._dynamo.backends.common import aot_autograd
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (before Triton is imported; the interpreter on a CPU)
from minductor import tiny
from minductor.tiny import ops  # noqa: F401  (the slot your bodies speak to)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SHAPES = "outputs of different shapes"


def why_not_many(gm: GraphModule) -> str | None:
    """`tiny.why_not`, except that the outputs may have different shapes."""
    reason = tiny.why_not(gm)
    if reason != SHAPES:
        return reason
    *nodes, _ = gm.graph.nodes  # the checks why_not makes after the shapes
    devices = {node.meta["val"].device for node in nodes}
    if len(devices) > 1:
        return f"tensors on {len(devices)} devices"
    device = devices.pop().type
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1)"
    return None if device in ("cpu", "cuda") else f"tensors on {device}"


def compile_graph_many(gm: GraphModule, example_inputs: list):
    """The forward compiler: chapter 0's `compile_graph`, with your `generate_many`."""
    if (reason := why_not_many(gm)) is not None:
        return tiny.eager(gm, reason)
    source = generate_many(gm)
    tiny.note(tiny.Compiled(gm, source, None))
    return tiny.load_module(source).call


many_backend = aot_autograd(fw_compiler=compile_graph_many)  # inference only here


def aten_graph(fn, *args) -> GraphModule:
    """fn's ATen graph, with shapes in its nodes, without Dynamo."""
    return make_fx(fn, tracing_mode="fake")(*args)


def two_shapes(x, w):
    e = x.exp()
    return e, e * w


x, w = torch.randn(5), torch.randn(4, 5)
print("tiny refuses two_shapes:", tiny.why_not(aten_graph(two_shapes, x, w)))
print("this notebook's backend:", why_not_many(aten_graph(two_shapes, x, w)))

# %% [markdown]
# ## Part 1: the inputs an output reads
#
# Write `inputs_of(node)`: the placeholders of the graph (its inputs) whose values
# `node`'s value depends on, as a set. A placeholder reads itself. Walk the
# producers, `node.all_input_nodes`, back to the placeholders; a node reached twice
# (a diamond) is walked once.


# %%
def inputs_of(node: Node) -> set[Node]:
    # BEGIN SOLUTION
    found, seen, todo = set(), set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            found.add(n)
        todo.extend(n.all_input_nodes)
    return found
    # END SOLUTION


# %% [markdown]
# ## Part 2: which outputs share a kernel
#
# Write `kernel_groups(gm)`: the graph's outputs (`tiny.outputs(gm)`, each once)
# split into groups, one kernel each. Two outputs go into one group when they have
# the same shape and read at least one input in common; groups join transitively (if
# `a` shares an input with `b`, and `b` one with `c`, all three are one group, even
# when `a` and `c` share none). A *union-find* does it: every output starts as its own
# group, and each pair that may share a kernel merges its two groups.
#
# Outputs of different shapes never merge, not even through a third output: if `b`
# has another shape than `a` and `c`, it links neither to them. Keep the outputs'
# order inside each group, and order the groups by their first output.


# %%
def kernel_groups(gm: GraphModule) -> list[list[Node]]:
    # BEGIN SOLUTION
    outs = tiny.outputs(gm)
    reads = {out: inputs_of(out) for out in outs}
    parent = {out: out for out in outs}

    def find(out):
        while parent[out] is not out:
            parent[out] = parent[parent[out]]  # halve the path
            out = parent[out]
        return out

    for k, a in enumerate(outs):
        for b in outs[k + 1 :]:
            same_shape = a.meta["val"].shape == b.meta["val"].shape
            if same_shape and reads[a] & reads[b]:
                parent[find(b)] = find(a)
    groups: dict[Node, list[Node]] = {}
    for out in outs:  # a group's key appears first with its first output
        groups.setdefault(find(out), []).append(out)
    return list(groups.values())
    # END SOLUTION


# %% [markdown]
# ## Part 3: one group's kernel
#
# Write `kernel_for(gm, group, k)`, which returns `(name, source, inputs)`: the name
# of the group's kernel, its source (the `@triton.jit` function, as chapter 0's
# `kernel_source` writes it) and the placeholders it reads, in the graph's order.
#
# - The kernel reads only the inputs its outputs depend on. They are its `in_ptr0`,
#   `in_ptr1`, ... in the graph's order of placeholders; the group's outputs are its
#   `out_ptr0`, `out_ptr1`, ... in the group's order.
# - The body is `fused_body`'s, with the group's shape as the output shape: a loader
#   (`tiny.make_loader`) for each input read and a `tiny.pointwise` body for each
#   computed node the group needs, then a store of each output of the group,
#   converted to its dtype as `fused_body` converts it. A producer that another group
#   needs too is computed in both kernels: the tiny compiler inlines everything.
# - The name is `kernel_name`'s pattern, `triton_poi_fused_<ops>_<k>`, with the ATen
#   ops the group computes (sorted, six at most) and the group's number `k`, so that
#   two kernels of one module never share a name.


# %%
def kernel_for(gm: GraphModule, group: list[Node], k: int):
    # BEGIN SOLUTION
    out_shape = group[0].meta["val"].shape
    order = tiny.placeholders(gm)
    inputs = sorted(set().union(*map(inputs_of, group)), key=order.index)
    needed, todo = set(), list(group)  # the nodes the group computes or reads
    while todo:
        node = todo.pop()
        if node not in needed:
            needed.add(node)
            todo.extend(node.all_input_nodes)
    bodies = {}
    for node in gm.graph.nodes:
        if node not in needed:
            continue
        if node.op == "placeholder":
            name = f"in_ptr{inputs.index(node)}"
            bodies[node] = tiny.make_loader(name, node, out_shape)
        else:
            bodies[node] = tiny.pointwise(node, bodies)

    def body(index):
        for j, out in enumerate(group):
            val, value = out.meta["val"], bodies[out](index)
            if val.dtype not in (torch.float32, torch.bool):
                value = ops.to_dtype(value, val.dtype)
            where = tiny.index_of(index, val.shape, val.stride(), out_shape)
            ops.store(f"out_ptr{j}", where, value)

    printer = tiny.TritonPrinter()
    with tiny.set_handler(printer):
        body("xindex")
    computed = [n for n in gm.graph.nodes if n in needed and n.op == "call_function"]
    fused = sorted({n.target.__name__.split(".")[0] for n in computed})
    name = "triton_poi_fused_" + "_".join(fused[:6]) + f"_{k}"
    pointers = [f"in_ptr{j}" for j in range(len(inputs))]
    pointers += [f"out_ptr{j}" for j in range(len(group))]
    source = "\n".join(
        [
            "@triton.jit",
            f"def {name}({', '.join(pointers)}, xnumel, XBLOCK: tl.constexpr):",
            "    xoffset = tl.program_id(0) * XBLOCK",
            "    xindex = xoffset + tl.arange(0, XBLOCK)",
            "    xmask = xindex < xnumel",
            *(f"    {line}" for line in printer.lines),
        ]
    )
    return name, source, inputs
    # END SOLUTION


# %% [markdown]
# ## Part 4: the module
#
# Write `generate_many(gm)`: the source of a module, as chapter 0's `generate` writes
# it (the imports, then the kernels, then `call`), with a kernel for each group of
# `kernel_groups(gm)`, numbered from 0 in that order. `call` takes the graph's inputs
# (named after the placeholders), allocates every output with
# `torch.empty_strided` (`buf0`, `buf1`, ... in the order of `tiny.outputs(gm)`, on
# the first input's device), then launches each kernel with its own arguments: the
# inputs it reads, its outputs' buffers, its `xnumel` and `XBLOCK=tiny.XBLOCK`, on
# `ceil(xnumel / XBLOCK)` programs. A kernel with nothing to compute is not launched.
# `call` returns the buffers in the order of `tiny.returned(gm)`, which may name an
# output twice.


# %%
def generate_many(gm: GraphModule) -> str:
    # BEGIN SOLUTION
    outs = tiny.outputs(gm)
    args = [n.name for n in tiny.placeholders(gm)]
    bufs = {out: f"buf{j}" for j, out in enumerate(outs)}
    kernels, lines = [], [f"def call({', '.join(args)}):"]
    for out, buf in bufs.items():
        val = out.meta["val"]
        lines.append(
            f"    {buf} = torch.empty_strided({tuple(val.shape)}, {val.stride()}, "
            f"dtype={val.dtype}, device={args[0]}.device)"
        )
    for k, group in enumerate(kernel_groups(gm)):
        name, source, inputs = kernel_for(gm, group, k)
        kernels.append(source)
        numel = group[0].meta["val"].numel()
        if numel > 0:
            grid = -(-numel // tiny.XBLOCK)
            launch = [n.name for n in inputs] + [bufs[out] for out in group]
            lines.append(
                f"    {name}[({grid},)]({', '.join(launch)}, {numel}, "
                f"XBLOCK={tiny.XBLOCK})"
            )
    lines.append(f"    return ({', '.join(bufs[n] for n in tiny.returned(gm))},)")
    parts = ["import torch\nimport triton\nimport triton.language as tl"]
    return "\n\n\n".join([*parts, *kernels, "\n".join(lines)]) + "\n"
    # END SOLUTION


# %% [markdown]
# ## Checks
#
# `compile_and_run` compiles a function with this notebook's backend and runs it
# once. `kernels` reads a module's source back: each kernel's name, the number of
# inputs it takes (its `in_ptr` parameters) and the number of loads in its body (the
# printer's CSE writes a load of the same input at the same index once, so these
# graphs load each input a kernel reads once).


# %%
def expect(got, expected, what):
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def compile_and_run(fn, *args):
    """fn compiled with your backend and run once: its result and the module."""
    torch._dynamo.reset()
    with tiny.recording() as compiled:
        result = torch.compile(fn, backend=many_backend, dynamic=False)(*args)
    expect([c.reason for c in compiled], [None], "reasons to run eagerly")
    return result, compiled[0].source


def kernels(source: str) -> list[tuple[str, int, int]]:
    """(name, inputs, loads) of each kernel of a module, in the module's order."""
    found = []
    for text in source.split("@triton.jit")[1:]:
        text = text.split("\n\n\ndef call")[0]
        name, params = re.search(r"def (\w+)\((.*)\):", text).groups()
        found.append((name, params.count("in_ptr"), text.count("tl.load(")))
    return found


def launches(source: str) -> list[str]:
    """The kernels `call` launches, in order."""
    call = source[source.index("def call") :]
    return re.findall(r"(triton_\w+)\[", call)


def same_as_eager(fn, result, *args):
    want = fn(*args)
    got = result if isinstance(want, tuple) else (result,)
    want = want if isinstance(want, tuple) else (want,)
    expect(len(got), len(want), "number of outputs")
    for k, (g, w) in enumerate(zip(got, want)):
        expect((g.shape, g.dtype), (w.shape, w.dtype), f"output {k}: shape, dtype")
        torch.testing.assert_close(g, w, msg=lambda m, k=k: f"output {k}: {m}")


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=dtype, device=DEVICE)


def output_indices(gm, groups):
    """Groups of output nodes as groups of positions in tiny.outputs(gm)."""
    outs = tiny.outputs(gm)
    return [[outs.index(n) for n in group] for group in groups]


def test_inputs_of():
    def fn(x, y, z):
        a = x.sin()
        b = a * y  # x and y
        c = (a + b) * a  # a diamond: x and y
        return a, c, z.cos(), torch.where(z > 0, b, 0.0)

    gm = aten_graph(fn, torch.randn(3), torch.randn(3), torch.randn(3))
    x, y, z = tiny.placeholders(gm)
    outs = tiny.returned(gm)
    expected = [{x}, {x, y}, {z}, {x, y, z}]
    for k, (out, want) in enumerate(zip(outs, expected)):
        got = inputs_of(out)
        expect({n.name for n in got}, {n.name for n in want}, f"inputs of output {k}")
    expect(inputs_of(y), {y}, "inputs of a placeholder")


def test_kernel_groups():
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    v, s = torch.randn(5), torch.randn(4, 1)
    cases = {  # name: (fn, args, the expected groups, as positions of outputs)
        "two chains": (lambda x, y: (x.sin(), y.cos()), (a, b), [[0], [1]]),
        "a shared input": (lambda x, y: (x.sin(), x * y), (a, b), [[0, 1]]),
        "two shapes": (two_shapes, (v, a), [[0], [1]]),
        "a chain through a third": (
            lambda x, y, z: (x.sin(), x * y, y.cos() + z, z.exp()),
            (a, b, a + 1),
            [[0, 1, 2, 3]],
        ),
        "no link through another shape": (  # v and u link 0 and 2 through 1
            lambda x, y, v, u: (x + v, v * u, u - y),
            (a, b, v, v + 1),
            [[0], [1], [2]],
        ),
        "size-1 dims are a shape": (
            lambda s, v: (s.sin(), s * v, v.cos(), (s + 1).exp()),
            (s, v),
            [[0, 3], [1], [2]],
        ),
    }
    for name, (fn, args, expected) in cases.items():
        gm = aten_graph(fn, *args)
        got = output_indices(gm, kernel_groups(gm))
        expect(got, expected, f"{name}: groups of outputs")


def test_two_chains_become_two_kernels():
    def fn(x, y):
        return torch.sigmoid(x) * 2, torch.cos(y) + 1

    x, y = randn(7, 13), randn(7, 13)
    result, source = compile_and_run(fn, x, y)
    same_as_eager(fn, result, x, y)
    got = kernels(source)
    expected = [
        ("triton_poi_fused_mul_sigmoid_0", 1, 1),
        ("triton_poi_fused_add_cos_1", 1, 1),
    ]
    expect(got, expected, "kernels (name, inputs, loads)")
    expect(launches(source), [name for name, _, _ in expected], "launches in call")


def test_a_shared_input_keeps_one_kernel():
    def chain(x, w):  # chapter 0's longer chain: two outputs, one kernel there
        a = torch.tanh(x) * w - torch.sigmoid(x)
        b = torch.where(a > 0, torch.nn.functional.gelu(a), 0.5 * a)
        return b.exp(), torch.maximum(a, torch.cos(b))

    x, w = randn(33, 65), randn(65)
    result, source = compile_and_run(chain, x, w)
    same_as_eager(chain, result, x, w)
    expect([k[1:] for k in kernels(source)], [(2, 2)], "(inputs, loads) of each kernel")
    expect(source.count("tl.store("), 2, "stores")
    expect(len(launches(source)), 1, "launches")


def test_outputs_of_different_shapes():
    def fn(v, w, s):  # (5,), (3, 5), (3, 1)
        e = v.exp()
        return e, e * w, s.sin(), torch.where(w > s, w, e)

    v, w, s = randn(5), randn(3, 5), randn(3, 1)
    result, source = compile_and_run(fn, v, w, s)
    same_as_eager(fn, result, v, w, s)
    got = kernels(source)
    # exp in the (3, 5) kernel too: computed again, never written and read back
    expected = [
        ("triton_poi_fused_exp_0", 1, 1),
        ("triton_poi_fused_exp_gt_mul_where_1", 3, 3),
        ("triton_poi_fused_sin_2", 1, 1),
    ]
    expect(got, expected, "kernels (name, inputs, loads)")
    grids = re.findall(r"\[\((\d+),\)\]\(.*, (\d+), XBLOCK", source)
    expected = [("1", "5"), ("1", "15"), ("1", "3")]
    expect(grids, expected, "(grid, xnumel) of each launch")


def test_awkward_inputs():
    def fn(h, t, b):  # float16 (1025,), a transposed (3, 5), a float16 bias (5,)
        g = torch.nn.functional.gelu(h) - 0.25
        return g, torch.tanh(t) * b, torch.where(b > 0.5, b * 3, -b)

    h = randn(1025, dtype=torch.float16)  # crosses a block: a second program
    t = randn(5, 3).t()  # not contiguous
    b = randn(5, dtype=torch.float16)
    result, source = compile_and_run(fn, h, t, b)
    want = fn(h, t, b)
    # the math is float32, rounded to float16 once, at the store
    once = fn(h.float(), t, b.float())
    for k in range(3):
        expect(result[k].dtype, want[k].dtype, f"output {k}: dtype")
        torch.testing.assert_close(result[k], once[k].to(want[k].dtype))
    got = kernels(source)
    expected = [
        ("triton_poi_fused_gelu_sub_0", 1, 1),
        ("triton_poi_fused_mul_tanh_1", 2, 2),
        ("triton_poi_fused_gt_mul_neg_where_2", 1, 1),
    ]
    expect(got, expected, "kernels (name, inputs, loads)")
    grids = re.findall(r"\[\((\d+),\)\]", source)
    expect(grids, ["2", "1", "1"], "grids of the launches")
    assert ".to(tl.float32)" in source and ".to(tl.float16)" in source, (
        f"got no conversion to and from float16 in:\n{source}"
    )


def test_empty_and_repeated_outputs():
    def fn(x, e):  # x (4, 3), e (0, 3): empty
        a = x.sin()
        return a, e.cos(), a, -a

    x, e = randn(4, 3), randn(0, 3)
    result, source = compile_and_run(fn, x, e)
    same_as_eager(fn, result, x, e)
    expect(result[0] is result[2], True, "the same output returned twice is one tensor")
    expect(len(kernels(source)), 2, "kernels")
    expect(launches(source), ["triton_poi_fused_neg_sin_0"], "launches in call")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The inputs each output of a
# small graph reads, through a diamond:

# %%
test_inputs_of()

# %% [markdown]
# Groups of outputs on six graphs: two chains apart, a shared input, two shapes,
# a group joined through a third output, no link through an output of another shape,
# and size-1 dimensions, which make a shape of their own:

# %%
test_kernel_groups()

# %% [markdown]
# Two chains that share nothing: two kernels, each reading its own input once, both
# launched by one `call`:

# %%
test_two_chains_become_two_kernels()

# %% [markdown]
# Chapter 0's longer chain still compiles to one kernel, which loads `x` and `w`
# once and stores both outputs:

# %%
test_a_shared_input_keeps_one_kernel()

# %% [markdown]
# Outputs of three shapes, which the tiny compiler refuses: a kernel for each, with
# its own grid and `xnumel`, and `exp` computed in both kernels that need it:

# %%
test_outputs_of_different_shapes()

# %% [markdown]
# `float16` in and out, 1025 elements (two programs), a transposed input and a
# broadcast bias:

# %%
test_awkward_inputs()

# %% [markdown]
# An empty output needs no launch, and an output returned twice is one buffer:

# %%
test_empty_and_repeated_outputs()

# %% [markdown]
# ## Going further
#
# 1. A producer needed by two kernels is computed in both. Give `kernel_for` the
#    option to read it from the buffer another kernel stores instead (chapter 0's
#    fourth challenge), launch the kernels in an order that respects it, and count
#    the bytes each choice moves. When is computing again cheaper than loading?
# 2. Two outputs of shapes `(4, 5)` and `(20,)` have the same number of elements.
#    Could they share a kernel and its grid? Write the condition, and the index each
#    output's loads would need.
# 3. Sharing one input of 4 bytes does not make a fusion worth its larger kernel.
#    Weigh each pair of outputs by the bytes they read in common, as chapter 15's
#    `score_fusion` does, and merge only above a threshold; find a graph whose
#    kernels change.
