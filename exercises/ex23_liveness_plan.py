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

# generated from exercises/solutions/ex23_liveness_plan.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 23: where each buffer dies
#
# **Difficulty:** medium.
#
# **You will:** write the liveness pass of the memory plan: given the lines of `call`
# (each makes some names and reads others), put a `del` after each name's last use;
# then find where each block of *memory* dies, which is later when a view still holds
# it. Checks compare your plan with the book's `plan_frees` and `GroupLiveness` on
# seeded random programs and on the edge cases one at a time.
#
# **It builds on** chapter 20 (*The memory plan*): `plan_frees`, alias groups
# (`alias_roots`) and `GroupLiveness`; and chapter 19 (*The wrapper*): the lines of
# `call`, each with its `uses()` and `defines()`, and `FreeLine`, printed as `del`.
#
# **Why it matters.** Without a plan, `call` would hold every intermediate until it
# returns: a training step's peak would be the sum of its activations. With one, a
# buffer goes back to the allocator right after the last kernel that reads it, and
# chapter 20's reuse can hand its memory to the next buffer of its size; a `del` one
# line too early is a crash or a read of freed memory, one too late is memory held for
# nothing. Inductor plans the same way: `MemoryPlanningState` and the lines
# `AllocateLine`, `FreeIfNotReusedLine` and `ReuseLine` of
# `torch/_inductor/codegen/wrapper.py` (its `memory_plan` walks them), and
# `torch/_inductor/memory.py`, which computes each buffer's size and last use to
# reorder nodes for a lower peak.

# %% [markdown]
# ## Setup
#
# A program is a list of lines. Two kinds are enough here: an `Op`, which runs work
# (a kernel, an ATen call) that reads `args` and makes `out`, and chapter 19's
# `ReinterpretLine`, a view: a new name for (part of) the memory of its base. Both
# answer `uses()` and `defines()`, the only two questions liveness asks. A program
# also names its tensor inputs, its size inputs (symbols such as `s0`, which hold no
# memory) and its outputs, which the caller keeps.

# %%
import os
import random
from dataclasses import dataclass
from types import SimpleNamespace

import sympy

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.ir import Buffer, TensorBox
from minductor.memory import GroupLiveness, alias_roots, plan_frees
from minductor.wrapper import FreeLine, ReinterpretLine


@dataclass(frozen=True)
class Op:
    out: tuple[str, ...]
    args: tuple[str, ...] = ()

    def uses(self):
        return self.args

    def defines(self):
        return self.out


@dataclass(frozen=True)
class Node:  # what a ReinterpretLine asks of its node: a name, and a base's
    name: str
    base: "Node | None" = None


def view(name, base):
    return ReinterpretLine(Node(name, Node(base)))


@dataclass
class Program:
    lines: list
    inputs: tuple[str, ...] = ()  # tensors
    outputs: tuple[str, ...] = ()
    sizes: tuple[str, ...] = ()  # size inputs: symbols, no memory

    def graph(self):
        """What plan_frees asks of a GraphLowering, and nothing more."""
        tensors = {n: TensorBox(Buffer(n, None)) for n in self.inputs}
        return SimpleNamespace(
            graph_outputs=[Buffer(n, None) for n in self.outputs],
            graph_input_names=[*self.inputs, *self.sizes],
            graph_inputs={**tensors, **{s: sympy.Symbol(s) for s in self.sizes}},
        )

    def aliases(self):
        """(view, base) for each view line: the pairs of names sharing memory."""
        return [
            (line.node.name, line.node.base.name)
            for line in self.lines
            if isinstance(line, ReinterpretLine)
        ]


def show(lines):
    """The lines as `call` would print them, one a line."""
    out = []
    for line in lines:
        if isinstance(line, Op):
            out.append(f"{', '.join(line.out) or '_'} = op({', '.join(line.args)})")
        elif isinstance(line, ReinterpretLine):
            out.append(f"{line.node.name} = view({line.node.base.name})")
        else:
            out.append(line.codegen())
    return "\n".join(out)


# %% [markdown]
# Here is a small program and the book's plan for it. `buf1` is read by nothing and
# dies where it is made; `arg1` is read by nothing at all and goes at the top;
# `buf2` is a view of `buf0`; `buf3` is returned:

# %%
EXAMPLE = Program(
    lines=[
        Op(("buf0", "buf1"), ("arg0",)),
        view("buf2", "buf0"),
        Op(("buf3",), ("buf2", "arg0")),
    ],
    inputs=("arg0", "arg1"),
    outputs=("buf3",),
    sizes=("s0",),
)
print(show(plan_frees(EXAMPLE.lines, EXAMPLE.graph())))

# %% [markdown]
# ## Part 1: a `del` after each last use
#
# Write `my_plan_frees(lines, inputs, outputs, sizes)`: the lines, in order, with a
# `FreeLine(names)` inserted right after each line that is the last to mention some
# names. The rules of chapter 20:
#
# * a name dies at the last line that uses or defines it (so a name nothing reads
#   dies right after the line that makes it);
# * an output never dies (the caller receives it), even an input that is returned;
# * a tensor input that no line mentions dies at the very top: one `FreeLine` before
#   the first line, the inputs in their order; a size input holds no memory and is
#   not freed there (no line here reads one);
# * the names of one `FreeLine` come in the order the line mentions them, its
#   `uses()` first, then its `defines()`, each name once.
#
# Walking the lines backwards makes this one pass: the first time you meet a name is
# its last use.


# %%
def my_plan_frees(lines, inputs, outputs, sizes=()):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: when memory dies
#
# A `del` drops a *name*. The memory behind it dies only when every name that shares
# it is gone: `del buf0` while its view `buf2` is still to be read frees nothing.
# Write `memory_deaths(planned, aliases)`: `planned` is a plan as above and `aliases`
# the pairs of names that share memory (a view and its base); sharing is transitive
# (a view of a view shares its base's memory), so group the names with a union-find.
# Return one tuple per line of `planned`: for a `FreeLine`, the names it frees after
# which no name of their group is alive; `()` for every other line. A name is alive
# from the line that defines it to the `FreeLine` that frees it; an input is never
# defined by a line, so freeing it kills its group if nothing else of it is alive.
# Take every name of a `FreeLine` out before asking which groups are empty, so that
# `del buf0, buf2` reports both.


# %%
def memory_deaths(planned, aliases):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks
#
# The reference for Part 1 is `plan_frees`, run on the program's lines with a
# stand-in for the graph; for Part 2, chapter 20's `alias_roots` and `GroupLiveness`
# stepped through the book's plan.


# %%
def book_deaths(planned):
    roots = alias_roots(planned)
    liveness = GroupLiveness(lambda name: roots.get(name, name))
    return [tuple(liveness.step(line)) for line in planned]


def check_program(p, what):
    got = my_plan_frees(p.lines, p.inputs, p.outputs, p.sizes)
    expected = plan_frees(p.lines, p.graph())
    assert got == expected, (
        f"{what}: the plan:\n{show(got)}\n\nexpected:\n{show(expected)}"
    )
    deaths = memory_deaths(expected, p.aliases())
    want = book_deaths(expected)
    for k, (line, g, w) in enumerate(zip(expected, deaths, want, strict=True)):
        assert set(g) == set(w), (
            f"{what}: memory that dies at line {k} ({show([line])}): "
            f"got {g!r}, expected {w!r}\nin the plan:\n{show(expected)}"
        )
    return expected, want


def random_program(rng):
    inputs = tuple(f"arg{k}" for k in range(rng.randint(0, 3)))
    sizes = ("s0",) if rng.random() < 0.3 else ()
    names, views, lines = list(inputs), [], []
    for k in range(rng.randint(1, 10)):
        if names and rng.random() < 0.25:  # a view of something made or given
            base = rng.choice(names)
            lines.append(view(f"buf{k}", base))
            views.append(f"buf{k}")
        else:
            args = rng.sample(names, rng.randint(0, min(3, len(names))))
            out = [f"buf{k}"] + ([f"buf{k}_1"] if rng.random() < 0.2 else [])
            lines.append(Op(tuple(out), tuple(args)))
        names += lines[-1].defines()
    outputs = tuple(rng.sample(names, rng.randint(0, min(3, len(names)))))
    return Program(lines, inputs, outputs, sizes)


def test_example():
    planned, _ = check_program(EXAMPLE, "the example")
    expected = [
        FreeLine(("arg1",)),
        EXAMPLE.lines[0],
        FreeLine(("buf1",)),
        EXAMPLE.lines[1],
        FreeLine(("buf0",)),
        EXAMPLE.lines[2],
        FreeLine(("buf2", "arg0")),
    ]
    assert planned == expected, f"got:\n{show(planned)}\nexpected:\n{show(expected)}"


def test_outputs_never_die():
    p = Program(
        lines=[Op(("buf0",), ("arg0",)), Op(("buf1",), ("buf0",))],
        inputs=("arg0", "arg1"),
        outputs=("buf0", "buf1", "arg1"),  # an intermediate, the last, an input
    )
    planned, _ = check_program(p, "outputs")
    freed = {n for line in planned if isinstance(line, FreeLine) for n in line.names}
    assert freed == {"arg0"}, f"names freed: got {freed!r}, expected {{'arg0'}}"


def test_unread_dies_where_made():
    p = Program(
        lines=[
            Op(("buf0", "buf0_1"), ("arg0",)),  # a second result nobody reads
            Op(("buf1",), ("buf0",)),
            Op(("buf2",), ()),  # made, never read, not returned
            Op(("buf3",), ("buf1",)),
        ],
        inputs=("arg0",),
        outputs=("buf3",),
    )
    planned, _ = check_program(p, "unread results")
    after = planned[planned.index(p.lines[2]) + 1]
    assert after == FreeLine(("buf2",)), (
        f"the line after buf2's: got {after!r}, expected {FreeLine(('buf2',))!r}"
    )


def test_unused_inputs_at_the_top():
    p = Program(
        lines=[Op(("buf0",), ("arg1",))],
        inputs=("arg0", "arg1", "arg2"),
        outputs=("buf0",),
        sizes=("s0",),
    )
    planned, _ = check_program(p, "unused inputs")
    top = FreeLine(("arg0", "arg2"))
    assert planned[0] == top, f"the first line: got {planned[0]!r}, expected {top!r}"
    assert not any(
        "s0" in line.names for line in planned if isinstance(line, FreeLine)
    ), f"a size input is freed:\n{show(planned)}"


def test_a_view_keeps_its_base():
    p = Program(
        lines=[
            Op(("buf0",), ("arg0",)),
            view("buf1", "buf0"),
            view("buf2", "buf1"),  # a view of a view: one block of memory
            Op(("buf3",), ("buf2",)),
            Op(("buf4",), ("buf3",)),
        ],
        inputs=("arg0",),
        outputs=("buf4",),
    )
    planned, deaths = check_program(p, "views")
    where = {n: k for k, line in enumerate(planned) for n in line.defines()}
    freed_at = {
        n: k
        for k, line in enumerate(planned)
        if isinstance(line, FreeLine)
        for n in line.names
    }
    # the name buf0 goes after the view is made; its memory after buf2's last read
    got, expected = freed_at["buf0"], where["buf1"] + 1
    assert got == expected, (
        f"the line of `del buf0`: got {got!r}, expected {expected!r}\n{show(planned)}"
    )
    for name, expected in (("buf0", ()), ("buf1", ()), ("buf2", ("buf2",))):
        got = deaths[freed_at[name]]
        assert got == expected, (
            f"memory that dies where {name} is freed: got {got!r}, "
            f"expected {expected!r}\n{show(planned)}"
        )


def test_a_returned_view_keeps_its_base_forever():
    p = Program(
        lines=[
            Op(("buf0",), ("arg0",)),
            view("buf1", "buf0"),
            Op(("buf2",), ("buf0",)),
        ],
        inputs=("arg0",),
        outputs=("buf1", "buf2"),
    )
    planned, deaths = check_program(p, "a returned view")
    dead = sorted(n for names in deaths for n in names)
    assert dead == ["arg0"], f"memory that dies: got {dead!r}, expected ['arg0']"


def test_random_programs():
    rng = random.Random(0)
    for k in range(300):
        check_program(random_program(rng), f"random program {k}")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure prints your plan and the book's. The example above,
# line by line:

# %% tags=["raises-exception"]
test_example()

# %% [markdown]
# Outputs are never freed: an intermediate that is returned, the last result, an
# input that is returned:

# %% tags=["raises-exception"]
test_outputs_never_die()

# %% [markdown]
# A result nobody reads dies on the line after the one that makes it, a second
# result of a multi-output line included:

# %% tags=["raises-exception"]
test_unread_dies_where_made()

# %% [markdown]
# Inputs no line mentions are dropped at the top, in order; a size input is not a
# tensor and is never freed:

# %% tags=["raises-exception"]
test_unused_inputs_at_the_top()

# %% [markdown]
# A view (and a view of that view) keeps its base's memory alive after `del buf0`,
# until the last view's name is freed:

# %% tags=["raises-exception"]
test_a_view_keeps_its_base()

# %% [markdown]
# The memory of a view that is returned never dies, although its base's name does:

# %% tags=["raises-exception"]
test_a_returned_view_keeps_its_base_forever()

# %% [markdown]
# 300 random programs (seeded): inputs used or not, size inputs, views of views,
# multi-output lines, outputs of every kind:

# %% tags=["raises-exception"]
test_random_programs()

# %% [markdown]
# ## Going further
#
# 1. Give each name a size in bytes and compute the peak: the largest sum of the
#    memory alive after any line, counting a block once for its whole alias group.
#    Then move each view line as late as it can go (just before its first reader)
#    and measure how much the peak drops on the random programs.
# 2. The order of the lines is given. Reorder the `Op`s (any order that keeps each
#    name made before it is read) to lower that peak: at each step run, among the
#    ready lines, the one that frees the most and makes the least, as Inductor's
#    `topological_sort_lpmf` does (`torch/_inductor/memory.py`). Plan your order with
#    `my_plan_frees` and compare the peaks.
# 3. A `del` assumes that the kernels which read a buffer are done with it when the
#    allocator gets it back. With two CUDA streams that holds no longer: a buffer made
#    on one stream and read on another may be reused while still read. What must the
#    plan record, and where (compare `Tensor.record_stream`)?
