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

# generated from exercises/solutions/ex27_launch_sites.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 27: a launcher for each launch line
#
# **Difficulty:** medium.
#
# **You will:** write the last pass of the wrapper's plan, the one that gives each
# launch line of `call` its *site*: the `CallSite` or `SizedSite` that makes the
# launch, defined once at the top of the module. First `aligned_names`: the names that
# `call` binds to memory aligned to 16 bytes whatever its inputs are, followed through
# reuses and views. Then `plan_sites`: which launch lines share a site, the name the
# wrapper gives each site, and the buffers each site must check for alignment at every
# launch. Last `site_lines`: the site's definition and the launch as the module prints
# them, with what each takes and in which order. Checks compare your answers with the
# book's (`WrapperCodeGen.aligned_names` and `plan_sites`, `KernelCallLine`'s
# `site_definition` and `launch_line`) on hand-made programs, on seeded random ones and
# on the lines of real compiled graphs. Then they compile functions with your three
# functions in place of the book's: the module must be the same text, and its results
# must match eager PyTorch.
#
# **It builds on** chapter 19 (*The wrapper: the Python that runs the kernels*): the
# line records (`AllocateLine`, `ReuseLine`, `ReinterpretLine`, `KernelCallLine` and
# its `static_sizes`), `plan`, and the kernel table that defines identical kernels
# once; chapter 21 (*Runtime: loading modules and launching kernels*): `CallSite` and
# `SizedSite`, and the alignment a compiled binary assumes; chapter 20 (*The memory
# plan*) for the `# reuse` lines; chapter 9 (*Views and data movement*) for a `cat`
# whose pieces are written into slices of its buffer.
#
# **Why it matters.** A training step launches kernels by the hundred, so the wrapper
# binds what never changes about a launch line (its kernel, sizes, blocks and grid)
# once, when the module loads. Sharing is where this can go wrong: if two launches of
# one kernel at different sizes shared a site, the second would run at the first's
# sizes, leaving part of its output unwritten or writing past its end. Alignment is the
# other fact a site must get right. Triton compiles a kernel for pointers that are
# multiples of 16 bytes where they are, and then uses vector loads; such a binary, given
# a pointer that is not aligned, faults with a misaligned address. So a site tests, at
# each launch, the buffers that may be unaligned, and only those, since each test costs
# host time. Inductor decides alignment the same way, from a buffer's offset in bytes
# (`is_aligned` in `config_of`, `torch/_inductor/codegen/triton_utils.py`). It takes the
# graph's inputs to be aligned and copies those that are not, once per call
# (`get_input_idxs_to_check` in `compile_fx.py`, `copy_misaligned_inputs` in
# `utils.py`). It binds nothing per launch line: each launch goes through its kernel's
# `CachingAutotuner.run` (`torch/_inductor/runtime/triton_heuristics.py`), which
# computes the grid at every call.

# %% [markdown]
# ## Setup
#
# A program is a list of chapter 19's line records. Small helpers build them:
# `alloc` an allocation, `aten` an ATen call (which returns memory of ATen's own),
# `reuse` a `# reuse` line, `view` a `reinterpret_tensor` of another name's memory,
# `free` a `del`, and `launch` a kernel's launch line. A name that no line defines is
# one of the graph's inputs. `show` prints a program, each launch line with its sizes
# and blocks, and each view with its dtype and its offset in bytes.

# %%
import contextlib
import dataclasses
import os
import random
from types import SimpleNamespace
from unittest import mock

import sympy
import torch
import torch.nn.functional as F

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import record_compiled
from minductor.codegen_triton import GeneratedKernel, KernelKind, PerCallBlocks
from minductor.ir import (
    Buffer,
    FallbackKernel,
    FixedLayout,
    MultiOutput,
    MultiOutputLayout,
    ReinterpretBuffer,
)
from minductor.sizevars import pexpr
from minductor.wrapper import (
    AllocateLine,
    ExternCallLine,
    FreeLine,
    KernelCallLine,
    MultiOutputLine,
    ReinterpretLine,
    ReuseLine,
    WrapperCodeGen,
)

CPU = torch.device("cpu")
s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)


def layout(dtype=torch.float32, offset=0, n=64):
    size, stride = (sympy.Integer(n),), (sympy.Integer(1),)
    return FixedLayout(CPU, dtype, size, stride, sympy.sympify(offset))


def alloc(name, dtype=torch.float32):
    return AllocateLine(name, layout(dtype))


def aten(name, source, dtype=torch.float32):
    args = (Buffer(source, None), 0)
    op = torch.ops.aten.cumsum.default
    return ExternCallLine(FallbackKernel(name, layout(dtype), op, args, {}))


def aten_outputs(name, source, *outputs):
    """torch.sort's call and its outputs: an ATen call, then one line per output."""
    args, op = (Buffer(source, None), 1), torch.ops.aten.sort.default
    parent = FallbackKernel(name, MultiOutputLayout(CPU), op, args, {})
    return [ExternCallLine(parent)] + [
        MultiOutputLine(MultiOutput(out, layout(), parent, k))
        for k, out in enumerate(outputs)
    ]


def reuse(old, new, dtype=None):
    return ReuseLine(old, new, None if dtype is None else layout(dtype))


def view(name, base, offset=0, dtype=torch.float32):
    node = ReinterpretBuffer(name, layout(dtype, offset, 8), Buffer(base, None))
    return ReinterpretLine(node)


def free(*names):
    return FreeLine(names)


POINTWISE = (("XBLOCK", 32), ("num_warps", 1))


def launch(name, *args, numel=20, meta=POINTWISE, rnumel=1, size_args=(),
           per_call=None):  # fmt: skip
    """A launch line of kernel `name` on buffers `args`."""
    kind = KernelKind.PERSISTENT if "RBLOCK" in dict(meta) else KernelKind.POINTWISE
    kernel = GeneratedKernel(
        source="", kind=kind, descriptive_name=name, call_args=tuple(args),
        numel=sympy.sympify(numel), meta=tuple(meta), rnumel=sympy.sympify(rnumel),
        size_args=tuple(size_args), per_call_blocks=per_call,
    )  # fmt: skip
    return KernelCallLine(name, kernel)


def show(lines):
    """The program as text, one line a record."""
    out = []
    for line in lines:
        if isinstance(line, KernelCallLine):
            k = line.kernel
            sizes = line.static_sizes()
            if sizes is None:
                rnumel = f", rnumel={k.rnumel}" if "RBLOCK" in dict(k.meta) else ""
                sizes = f"xnumel={k.numel}{rnumel}"
                if k.per_call_blocks or k.size_args:
                    sizes += f", per_call={k.per_call_blocks}, size_args={k.size_args}"
            meta = ", ".join(f"{key}={value}" for key, value in k.meta)
            args = ", ".join(k.call_args)
            out.append(f"{line.kernel_name}({args})  # sizes {sizes}, {meta}")
        elif isinstance(line, ReinterpretLine):
            lay = line.node.layout
            out.append(
                f"{line.node.name} = reinterpret_tensor({line.node.base.name}, "
                f"offset={lay.offset})  # {lay.dtype}: "
                f"{lay.offset * lay.dtype.itemsize} bytes in"
            )
        elif isinstance(line, ExternCallLine):
            n = line.node
            source = n.args[0].name
            out.append(f"{n.name} = aten.{n.op._schema.name[6:]}({source}, ...)")
        else:
            out.append(line.codegen().split("\n")[0])
    return "\n".join(out)


EXAMPLE = [
    alloc("buf0"),
    view("buf1", "buf0", offset=0),
    launch("triton_poi_fused_sin_0", "arg0_1", "buf1"),
    view("buf2", "buf0", offset=6),
    launch("triton_poi_fused_sin_0", "arg1_1", "buf2"),
    *aten_outputs("buf3", "arg0_1", "buf4", "buf5"),
    reuse("buf4", "buf6"),
    launch("triton_poi_fused_sin_0", "buf6", "buf0", numel=64),
    free("buf4"),
]
print(show(EXAMPLE))

# %% [markdown]
# The book's plan for it: `buf0` is `call`'s own memory, `buf1` starts where it does,
# `buf2` starts 24 bytes in; `buf6` is the memory of `torch.sort`'s result. The first
# two launches run one kernel at the same sizes and blocks and share a site, which
# checks the input and the view at 24 bytes; the third runs at other sizes, so it
# gets a site of its own, which checks `buf6`. Then the sites' definitions (the module
# prints each once) and the three launches.


# %%
def book_plan(lines, aligned=None):
    """The book's aligned names, (site, check) of each launch line, and its planned
    launch lines. With `aligned` given, the sites are planned from it instead of the
    book's aligned names."""
    wrapper = SimpleNamespace(lines=list(lines), interpret=True)  # as on the CPU
    book_aligned = WrapperCodeGen.aligned_names(wrapper)
    wrapper.aligned_names = lambda: set(book_aligned if aligned is None else aligned)
    WrapperCodeGen.plan_sites(wrapper)
    launches = [line for line in wrapper.lines if isinstance(line, KernelCallLine)]
    sites = [(line.site, line.check) for line in launches]
    return book_aligned, sites, launches


aligned, sites, launches = book_plan(EXAMPLE)
print("aligned:", sorted(aligned))
for site in sites:
    print(site)
print()
for definition in dict.fromkeys(line.site_definition() for line in launches):
    print(definition)
for line in launches:
    print(line.launch_line())

# %% [markdown]
# ## Part 1: the names bound to aligned memory
#
# Write `aligned_names(lines)`: the set of names that `call` binds to memory aligned
# to 16 bytes, whatever its inputs are. Walk the lines in order:
#
# - `AllocateLine`: memory of `call`'s own, from the caching allocator, whose blocks
#   are aligned to 512 bytes. Its `name` is aligned.
# - `ReuseLine(old, new, layout)`: `new` is `old`'s memory from its first byte,
#   whether `layout` views it another way or not. `new` is aligned when `old` is.
# - `ReinterpretLine`: its `node.name` is a view of `node.base.name` that starts
#   `node.layout.offset` elements in, each of `node.layout.dtype.itemsize` bytes. It is
#   aligned when its base is and that offset, in bytes, is a number and a multiple of
#   16 bytes. An offset with a size symbol in it (`4*s0` elements) is not a number:
#   count it unaligned, even where it would always be a multiple of 16 (the book does
#   not try to prove it). `sympy.sympify(offset * itemsize).is_Integer` tells a number.
# - Every other line makes nothing aligned: a launch, an ATen call and its outputs
#   (ATen's memory, which may be a view at any offset), a `del`, a cat's comment (the
#   cat's buffer was allocated before its pieces). A name that no line defines is an
#   input of the graph, and may be anywhere.


# %%
def aligned_names(lines) -> set[str]:
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: the sites
#
# Write `plan_sites(lines, aligned)`: for each `KernelCallLine` of `lines`, in order,
# the pair `(site, check)`, as a list (the other lines give nothing).
#
# - Launch lines share a site when they launch the same kernel (`line.kernel_name`)
#   with the same sizes (`line.static_sizes()`: a tuple of numbers where a `CallSite`
#   can bind them, `None` where they are symbols) and the same blocks
#   (`line.kernel.meta`). Two launches of one kernel with symbolic sizes and the same
#   blocks share one `SizedSite`, which takes the sizes at each call.
# - A site is named after its kernel: the first site of kernel `k`, in the order of
#   the launches, is `launch_k`; the second site of the same kernel is `launch_k_1`,
#   the third `launch_k_2`, and so on.
# - `check` is the sorted tuple of the positions `i` of `line.kernel.call_args` whose
#   name is not in `aligned`, gathered over *every* launch line of the site: a site
#   serves all of its lines with one binary, so a position that may be unaligned in
#   any one of them is tested at each launch.


# %%
def plan_sites(lines, aligned: set[str]) -> list[tuple[str, tuple[int, ...]]]:
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 3: the site's two lines
#
# A launch line whose `site` and `check` are planned becomes two lines of the module:
# the site's definition, at its top, and the launch, in `call`. Write
# `site_lines(line)`, which returns both, `(definition, launch)`:
#
# - Where `line.static_sizes()` gives numbers, a `CallSite` binds them with the
#   kernel, the blocks and the check, and the launch passes the buffers alone:
#
#   ```
#   launch_k = CallSite(k, (20,), XBLOCK=32, num_warps=1, check=(0,))
#   launch_k(arg0_1, buf0)
#   ```
#
#   The sizes are the tuple `static_sizes()` returns (`(8, 12)` for a reduction: its
#   rows and their length); the blocks are `line.kernel.meta`, each `key=value`, in
#   its order; `check` is the line's, printed as Python prints a tuple.
# - Otherwise a `SizedSite`, bound to the kernel, the number of its buffers, how it
#   chooses its blocks at each call (`line.kernel.per_call_blocks`, printed with
#   `!r`: `'inner'`, or `None` for fixed blocks), the check and the blocks. Its launch
#   passes this call's sizes first: the kernel's `numel`, then its `rnumel` if it is a
#   reduction (its blocks include `RBLOCK`), each printed by chapter 4's `pexpr`; then
#   the buffers; then the size symbols the kernel takes (`line.kernel.size_args`):
#
#   ```
#   launch_k = SizedSite(k, 2, per_call='pointwise', check=(0,), XBLOCK=64, num_warps=2)
#   launch_k(7*s77, arg1_1, buf0, s77)
#   ```


# %%
def site_lines(line) -> tuple[str, str]:
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks
#
# The hand-made checks name what each case is about. The random programs are made by
# `random_program(rng)`: allocations, ATen calls, reuses, views at offsets of 0 to 48
# elements (or symbolic ones) in eight dtypes, `del`s, and launches of four kernels
# at sizes that are numbers, 0 or symbols, with two choices of blocks each.


# %%
def expect(got, expected, what):
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def expect_aligned(lines, expected, what):
    got = aligned_names(lines)
    assert got == set(expected), (
        f"{what}: aligned names: got {sorted(got)}, expected {sorted(expected)}, "
        f"in\n{show(lines)}"
    )


def expect_sites(lines, aligned, expected, what):
    got = plan_sites(lines, set(aligned))
    assert got == expected, (
        f"{what}: (site, check) of each launch: got {got!r}, expected {expected!r}, "
        f"aligned {sorted(aligned)}, in\n{show(lines)}"
    )


def expect_site_lines(launches, what):
    for line in launches:
        got = site_lines(line)
        expected = (line.site_definition(), line.launch_line())
        assert got == expected, (
            f"{what}: site_lines of\n{show([line])}\nwith site {line.site!r} and "
            f"check {line.check}: got\n{got[0]}\n{got[1]}\nexpected\n{expected[0]}"
            f"\n{expected[1]}"
        )


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.bool,
          torch.int64, torch.float64, torch.int32]  # fmt: skip
OFFSETS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, s0, 4 * s0, 16 * s0, s0 + 16]
PERSISTENT = (("XBLOCK", 8), ("RBLOCK", 64), ("num_warps", 2))
KERNELS = {  # name -> (buffers, [blocks])
    "triton_poi_fused_sin_0": (2, [POINTWISE, (("XBLOCK", 256), ("num_warps", 4))]),
    "triton_poi_fused_add_mul_1": (3, [POINTWISE, (("XBLOCK", 64), ("num_warps", 2))]),
    "triton_per_fused_sum_2": (2, [PERSISTENT, (("XBLOCK", 1), ("RBLOCK", 1024),
                                                ("num_warps", 8))]),
    "triton_red_fused_var_mean_3": (4, [PERSISTENT, (("XBLOCK", 1), ("RBLOCK", 64),
                                                     ("num_warps", 8))]),
}  # fmt: skip


def random_launch(rng, names):
    kernel = rng.choice(sorted(KERNELS))
    count, blocks = KERNELS[kernel]
    reduction = "RBLOCK" in dict(blocks[0])
    numel = rng.choice([20, 20, 64, 0, s0, 4 * s0])
    rnumel = rng.choice([33, 64, s1]) if reduction else 1
    size_args, per_call = (), None
    if not all(sympy.sympify(n).is_Integer for n in (numel, rnumel)):
        per_call = rng.choice([None, PerCallBlocks.POINTWISE, PerCallBlocks.INNER])
        size_args = rng.choice([(), ("s0",)])
    elif rng.random() < 0.05:  # a symbol in an index only: no CallSite either
        size_args = ("s0",)
    args = rng.sample(names, count)
    return launch(kernel, *args, numel=numel, meta=rng.choice(blocks), rnumel=rnumel,
                  size_args=size_args, per_call=per_call)  # fmt: skip


def random_program(rng):
    names = [f"arg{k}_1" for k in range(rng.randint(1, 3))]  # the graph's inputs
    lines, made = [], 0

    def new():
        nonlocal made
        made += 1
        return f"buf{made - 1}"

    for _ in range(rng.randint(4, 16)):
        kind = rng.choices(
            ["alloc", "aten", "outputs", "reuse", "view", "free", "launch"],
            [3, 1, 0.3, 2, 3, 1, 4],
        )[0]
        if kind == "launch" and len(names) < 4:
            kind = "alloc"
        if kind == "alloc":
            lines.append(alloc(new(), rng.choice(DTYPES)))
        elif kind == "aten":
            lines.append(aten(new(), rng.choice(names)))
        elif kind == "outputs":
            parent, *outs = new(), new(), new()
            lines += aten_outputs(parent, rng.choice(names), *outs)
            names += outs
            continue
        elif kind == "reuse":
            lines.append(reuse(rng.choice(names), new(),
                               rng.choice([None, rng.choice(DTYPES)])))  # fmt: skip
        elif kind == "view":
            lines.append(view(new(), rng.choice(names), rng.choice(OFFSETS),
                              rng.choice(DTYPES)))  # fmt: skip
        elif kind == "free":
            lines.append(free(rng.choice(names)))
            continue
        else:
            lines.append(random_launch(rng, names))
            continue
        names.append(lines[-1].defines()[0])
    while sum(isinstance(line, KernelCallLine) for line in lines) < 3:
        while len(names) < 4:
            lines.append(alloc(new()))
            names.append(lines[-1].name)
        lines.append(random_launch(rng, names))
    return lines


def test_aligned_by_construction():
    lines = [
        alloc("buf0"),
        alloc("buf1", torch.int8),
        reuse("buf0", "buf2"),
        reuse("buf2", "buf3", torch.float16),  # a reuse in another layout
        reuse("arg0_1", "buf4"),  # an input's memory
        aten("buf5", "buf0"),
        reuse("buf5", "buf6"),  # ATen's memory
        *aten_outputs("buf7", "buf1", "buf8", "buf9"),
        reuse("buf8", "buf10"),
        free("buf0"),
        launch("triton_poi_fused_sin_0", "buf3", "buf4"),
    ]
    expected = {"buf0", "buf1", "buf2", "buf3"}
    expect_aligned(lines, expected, "allocations, reuses, inputs, ATen's results")
    expect_aligned([], set(), "an empty program")
    expect_aligned([free("arg0_1"), reuse("arg0_1", "buf0")], set(), "inputs only")


def test_aligned_views():
    f16, i8, f64, i64 = torch.float16, torch.int8, torch.float64, torch.int64
    lines = [
        alloc("buf0"),
        view("buf1", "buf0", 0),
        view("buf2", "buf0", 4),  # 16 bytes
        view("buf3", "buf0", 2),  # 8 bytes
        view("buf4", "buf0", 8, f16),  # 16 bytes
        view("buf5", "buf0", 4, f16),  # 8 bytes
        view("buf6", "buf0", 16, i8),
        view("buf7", "buf0", 8, i8),
        view("buf8", "buf0", 2, f64),
        view("buf9", "buf0", 1, i64),
        view("buf10", "buf0", 32, torch.bool),
        view("buf11", "buf0", 12, torch.bfloat16),  # 24 bytes
        view("buf12", "buf2", 4),  # a view of an aligned view
        view("buf13", "buf3", 2),  # of an unaligned one, 8 more bytes in
        view("buf14", "buf3", 4),
        view("buf15", "arg0_1", 0),  # of an input
        view("buf16", "buf15", 4),
        view("buf17", "buf0", 4 * s0),  # symbolic offsets
        view("buf18", "buf0", s0 + 16, i8),
        reuse("buf17", "buf19"),
        reuse("buf12", "buf20"),
        view("buf21", "buf20", 4),
        aten("buf22", "buf0"),
        view("buf23", "buf22", 0),  # of ATen's memory
    ]
    expected = {"buf0", "buf1", "buf2", "buf4", "buf6", "buf8", "buf10", "buf12"}
    expected |= {"buf20", "buf21"}
    expect_aligned(lines, expected, "views at offsets, of views, of inputs, symbolic")


def test_aligned_names_on_random_programs():
    rng = random.Random(27)
    for case in range(400):
        lines = random_program(rng)
        expected, _, _ = book_plan(lines)
        expect_aligned(lines, expected, f"random program {case}")


def test_one_site_per_kernel_sizes_and_blocks():
    sin, add = "triton_poi_fused_sin_0", "triton_poi_fused_add_1"
    wide = (("XBLOCK", 256), ("num_warps", 4))
    symbolic = {"numel": 4 * s0, "per_call": PerCallBlocks.POINTWISE}
    lines = [
        alloc("buf0"),
        alloc("buf1"),
        alloc("buf2"),
        launch(sin, "buf0", "buf1"),
        launch(add, "buf0", "buf1", "buf2"),
        launch(sin, "buf1", "buf2"),  # the same sizes and blocks: the same site
        launch(sin, "buf1", "buf2", numel=64),  # other sizes
        launch(sin, "buf1", "buf2", meta=wide),  # other blocks
        launch(sin, "buf2", "buf0", **symbolic),  # symbolic sizes: a SizedSite
        launch(add, "buf0", "buf1", "buf2", numel=64),
        launch(sin, "buf0", "buf1", **symbolic),
        launch(sin, "buf0", "buf1", numel=0),  # 0 elements: no CallSite
        launch(sin, "buf0", "buf1", numel=20, size_args=("s0",)),  # a symbol
        launch(sin, "buf0", "buf1", numel=64),
    ]
    names = ["", "", "", "_1", "_2", "_3", "_1", "_3", "_3", "_3", "_1"]
    kernels = [sin, add, sin, sin, sin, sin, add, sin, sin, sin, sin]
    expected = [(f"launch_{k}{n}", ()) for k, n in zip(kernels, names, strict=True)]
    expect_sites(lines, {"buf0", "buf1", "buf2"}, expected, "sizes, blocks, symbols")
    red = "triton_per_fused_sum_2"
    lines = [
        launch(red, "arg0_1", "buf0", numel=8, rnumel=r, meta=PERSISTENT)
        for r in (33, 64, 33, s1)
    ]
    names = ["", "_1", "", "_2"]
    expected = [(f"launch_{red}{n}", (0,)) for n in names]
    expect_sites(lines, {"buf0"}, expected, "a reduction's rows and their length")
    expect_sites([alloc("buf0"), free("buf0")], {"buf0"}, [], "no launch")


def test_a_site_checks_what_any_of_its_launches_must():
    sin, add = "triton_poi_fused_sin_0", "triton_poi_fused_add_1"
    lines = [
        launch(sin, "buf0", "buf1"),
        launch(add, "buf0", "buf1", "buf2"),
        launch(sin, "arg0_1", "buf1"),  # its input: position 0 of the site
        launch(sin, "buf1", "buf3"),  # buf3 may be unaligned: position 1 too
        launch(sin, "buf3", "buf0", numel=64),  # another site
        launch(add, "buf3", "buf1", "arg0_1"),
    ]
    expected = [
        (f"launch_{sin}", (0, 1)),
        (f"launch_{add}", (0, 2)),
        (f"launch_{sin}", (0, 1)),
        (f"launch_{sin}", (0, 1)),
        (f"launch_{sin}_1", (0,)),
        (f"launch_{add}", (0, 2)),
    ]
    aligned = {"buf0", "buf1", "buf2"}
    expect_sites(lines, aligned, expected, "the union over a site's launches")
    lines = [launch(add, "arg0_1", "arg1_1", "buf0")]
    expect_sites(lines, set(), [(f"launch_{add}", (0, 1, 2))], "nothing aligned")


def test_plan_sites_on_random_programs():
    rng = random.Random(2027)
    for case in range(400):
        lines = random_program(rng)
        names = sorted({n for line in lines for n in line.defines()} | {"arg0_1"})
        # your sites from the book's aligned names, and from two names picked at random
        for aligned in (book_plan(lines)[0], set(rng.sample(names, 2))):
            _, expected, _ = book_plan(lines, aligned)
            expect_sites(lines, aligned, expected, f"random program {case}")


def test_site_lines_by_hand():
    poi, per = "triton_poi_fused_sin_0", "triton_per_fused_sum_1"
    wide = (("XBLOCK", 64), ("num_warps", 2))
    pointwise = {"per_call": PerCallBlocks.POINTWISE, "meta": wide}
    inner = {"per_call": PerCallBlocks.INNER, "meta": PERSISTENT}
    p, r = "XBLOCK=32, num_warps=1", "XBLOCK=8, RBLOCK=64, num_warps=2"
    cases = [  # (launch line, site, check, its definition, its launch)
        (launch(poi, "arg0_1", "buf0"), "launch_p", (0,),
         f"CallSite({poi}, (20,), {p}, check=(0,))", "(arg0_1, buf0)"),
        (launch(per, "buf1", "buf0", numel=8, rnumel=12, meta=PERSISTENT), "launch_r",
         (), f"CallSite({per}, (8, 12), {r}, check=())", "(buf1, buf0)"),
        (launch(poi, "arg1_1", "buf0", numel=7 * s0, size_args=("s0",), **pointwise),
         "launch_p", (0,), f"SizedSite({poi}, 2, per_call='pointwise', check=(0,), "
         "XBLOCK=64, num_warps=2)", "(7*s0, arg1_1, buf0, s0)"),
        (launch(per, "arg0_1", "arg1_1", "buf0", numel=s0, rnumel=s1,
                size_args=("s1", "s0"), **inner), "launch_r_2", (0, 1),
         f"SizedSite({per}, 3, per_call='inner', check=(0, 1), {r})",
         "(s0, s1, arg0_1, arg1_1, buf0, s1, s0)"),
        (launch(per, "buf0", "buf1", numel=2 * s0, rnumel=64, **inner), "launch_r",
         (), f"SizedSite({per}, 2, per_call='inner', check=(), {r})",
         "(2*s0, 64, buf0, buf1)"),
        (launch(poi, "buf0", "buf1", numel=s0 * s1), "launch_p", (),
         f"SizedSite({poi}, 2, per_call=None, check=(), {p})", "(s0*s1, buf0, buf1)"),
        (launch(poi, "buf0", "buf1", numel=0), "launch_p_1", (),
         f"SizedSite({poi}, 2, per_call=None, check=(), {p})", "(0, buf0, buf1)"),
    ]  # fmt: skip
    for line, site, check, definition, call in cases:
        line = dataclasses.replace(line, site=site, check=check)
        got, expected = site_lines(line), (f"{site} = {definition}", f"{site}{call}")
        assert got == expected, (
            f"site_lines of\n{show([line])}\nwith site {site!r} and check {check}: "
            f"got\n{got[0]}\n{got[1]}\nexpected\n{expected[0]}\n{expected[1]}"
        )
        # (the book prints the same)
        assert expected == (line.site_definition(), line.launch_line()), expected


def test_site_lines_on_random_programs():
    rng = random.Random(1027)
    for case in range(400):
        _, _, launches = book_plan(random_program(rng))
        expect_site_lines(launches, f"random program {case}")


# %% [markdown]
# `planned_lines` compiles a function with the book's wrapper and keeps, for each
# graph, the lines as they stand when the sites are planned: after the memory plan, so
# with its `del` and `# reuse` lines. `with_your_plan` is chapter 19's `plan_sites`
# with your first two functions in its place. `compiled` compiles and runs a function
# with the book's wrapper, or with your three functions: then each module must be the
# book's text before it is loaded, since a site at the wrong sizes may write past the
# end of a buffer, and a program that does that can crash.


# %%
def planned_lines(fn, *args, options=None, dynamic=None):
    found = []
    book = WrapperCodeGen.plan_sites

    def keep(self):
        found.append(list(self.lines))
        book(self)

    torch._dynamo.reset()
    with mock.patch.object(WrapperCodeGen, "plan_sites", keep):
        torch.compile(fn, backend="minductor", options=options, dynamic=dynamic)(*args)
    return found


def with_your_plan(self):
    launches = [
        k for k, line in enumerate(self.lines) if isinstance(line, KernelCallLine)
    ]
    sites = plan_sites(list(self.lines), aligned_names(list(self.lines)))
    expect(len(sites), len(launches), "plan_sites: pairs, one per launch line")
    for k, (site, check) in zip(launches, sites, strict=True):
        self.lines[k] = dataclasses.replace(self.lines[k], site=site, check=check)


def same_module(mine, theirs, what):
    differ = [
        (a, b)
        for a, b in zip(mine.splitlines(), theirs.splitlines(), strict=False)
        if a != b
    ]
    got, expected = differ[0] if differ else (mine, theirs)
    assert mine == theirs, (
        f"{what}: a line of the module: got\n{got}\nexpected (the book's)\n{expected}"
    )


YOURS = [
    (WrapperCodeGen, "plan_sites", with_your_plan),
    (KernelCallLine, "site_definition", lambda self: site_lines(self)[0]),
    (KernelCallLine, "launch_line", lambda self: site_lines(self)[1]),
]


@contextlib.contextmanager
def planning(book=None, what=""):
    """Compile, inside the block, with the book's wrapper; or, given the book's
    modules, with your functions, each module compared with the book's before it is
    loaded (a launch at the wrong sizes may write past the end of its buffers).
    Yields the list of graphs compiled."""
    generate = WrapperCodeGen.generate
    made = []

    def checked(self):
        source = generate(self)
        expected = book[len(made)] if len(made) < len(book) else ""
        same_module(source, expected, f"{what}, graph {len(made)}")
        made.append(source)
        return source

    torch._dynamo.reset()
    with contextlib.ExitStack() as stack:
        if book is not None:
            for cls, name, method in YOURS + [(WrapperCodeGen, "generate", checked)]:
                stack.enter_context(mock.patch.object(cls, name, method))
        graphs = stack.enter_context(record_compiled())
        yield graphs
    if book is not None:
        expect(len(made), len(book), f"{what}: graphs compiled")


def compiled(fn, calls, book=None, what="", options=None, dynamic=None):
    """Compile fn with the book's wrapper, or with your functions given the book's
    modules, and call it on each args of `calls`: (the results, the module of each
    graph)."""
    with planning(book, what) as graphs:
        fn = torch.compile(fn, backend="minductor", options=options, dynamic=dynamic)
        results = [fn(*args) for args in calls]
    return results, [g.source for g in graphs]


def same_as_eager(got, expected, what):
    torch.testing.assert_close(
        got, expected, atol=1e-4, rtol=1e-4, msg=lambda m: f"{what}: {m}"
    )


def two_sizes(x, y):
    return x.sin(), y.sin()


def cat_of_pieces(a, b, c):  # five pieces: a buffer, written in slices
    return torch.cat([a.sin(), b.sin(), c.sin(), a.cos(), b.cos()], 0)


def sorted_then(x):
    values, indices = torch.sort(x, 1)
    return values.sin() + 1, indices


def linear(x, w, b):
    return torch.relu(x @ w + b).sum(1)


def slices(x):
    x = x.t()[1:]
    return x.sin()[:, 1:] * 2, torch.softmax(x, -1)


def rows(x, y):
    return (x.sin() + y).sum(1) * x.shape[0], x.cos()


UNFUSED = {"max_fusion_size": 1}


def real_graphs():
    randn = torch.randn
    marked = randn(5, 7)
    torch._dynamo.mark_dynamic(marked, 0)
    return {
        "one kernel at two sizes": planned_lines(two_sizes, randn(4, 5), randn(5, 6)),
        "a cat's pieces": planned_lines(
            cat_of_pieces, randn(3, 2), randn(3, 2), randn(3, 2), options=UNFUSED
        ),
        "torch.sort, then a kernel": planned_lines(sorted_then, randn(6, 5)),
        "a matmul and a reduction": planned_lines(
            linear, randn(8, 16), randn(16, 12), randn(12)
        ),
        "slices, unfused": planned_lines(slices, randn(6, 9), options=UNFUSED),
        "dynamic shapes": planned_lines(rows, randn(5, 7), randn(7), dynamic=True),
        "one size symbolic": planned_lines(two_sizes, marked, randn(7, 30)),
    }


def test_real_graphs():
    for what, graphs in real_graphs().items():
        for lines in graphs:
            expected, sites, launches = book_plan(lines)
            expect_aligned(lines, expected, what)
            expect_sites(lines, expected, sites, what)
            expect_site_lines(launches, what)


def test_one_kernel_at_two_sizes_matches_eager():
    calls = [(torch.randn(4, 5), torch.randn(5, 6))]
    _, book = compiled(two_sizes, calls)
    (got,), yours = compiled(two_sizes, calls, book, "sin at two sizes")
    for line in ("launch_triton_poi_fused_sin_0(arg0_1, buf0)",
                 "launch_triton_poi_fused_sin_0_1(arg1_1, buf1)"):  # fmt: skip
        assert line in yours[0], f"expected the line {line!r} in\n{yours[0]}"
    for k, (mine, eager) in enumerate(zip(got, two_sizes(*calls[0]), strict=True)):
        same_as_eager(mine, eager, f"output {k}")


def test_a_cats_pieces_match_eager():
    calls = [(torch.randn(3, 2), torch.randn(3, 2), torch.randn(3, 2))]
    _, book = compiled(cat_of_pieces, calls, options=UNFUSED)
    (got,), yours = compiled(cat_of_pieces, calls, book, "a cat", options=UNFUSED)
    site = ("launch_triton_poi_fused_cat_sin_0 = CallSite(triton_poi_fused_cat_sin_0, "
            "(6,), XBLOCK=8, num_warps=1, check=(0, 1))")  # fmt: skip
    assert site in yours[0], f"expected the line {site!r} in\n{yours[0]}"
    same_as_eager(got, cat_of_pieces(*calls[0]), "cat")


def test_dynamic_shapes_match_eager():
    calls = [(torch.randn(n, m), torch.randn(m)) for n, m in ((5, 7), (9, 3), (33, 65))]
    _, book = compiled(rows, calls, dynamic=True)
    got, yours = compiled(rows, calls, book, "dynamic shapes", dynamic=True)
    expect(len(yours), 1, "graphs compiled for three sizes")
    for results, args in zip(got, calls, strict=True):
        for k, (mine, eager) in enumerate(zip(results, rows(*args), strict=True)):
            same_as_eager(mine, eager, f"sizes {tuple(args[0].shape)}, output {k}")


def block(x, w, b):
    h = F.gelu(x @ w + b)
    return F.layer_norm(h, (h.shape[-1],)).sum(0)


def training_step(params, book=None):
    """The gradients of a loss through the compiled block, and the modules."""
    with planning(book, "a training step") as graphs:
        loss = torch.compile(block, backend="minductor")(*params).square().sum()
        grads = torch.autograd.grad(loss, params)
    return grads, [g.source for g in graphs]


def test_a_training_step_matches_eager():
    params = [torch.randn(8, 16), torch.randn(16, 24), torch.randn(24)]
    params = [t.requires_grad_() for t in params]
    _, book = training_step(params)
    got, yours = training_step(params, book)
    expect(len(yours), 2, "graphs compiled (a forward and a backward)")
    expected = torch.autograd.grad(block(*params).square().sum(), params)
    for name, mine, eager in zip("xwb", got, expected, strict=True):
        same_as_eager(mine, eager, f"the gradient of {name}")


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure prints the program, or the first line of the module that
# differs. Allocations, reuses, inputs and ATen's results:

# %% tags=["raises-exception"]
test_aligned_by_construction()

# %% [markdown]
# Views: at offsets in bytes that are multiples of 16 or not, in dtypes of 1 to 8
# bytes, of views, of inputs, at symbolic offsets:

# %% tags=["raises-exception"]
test_aligned_views()

# %% [markdown]
# Your aligned names are the book's on 400 random programs:

# %% tags=["raises-exception"]
test_aligned_names_on_random_programs()

# %% [markdown]
# Launches share a site when they run one kernel at the same sizes and blocks, and the
# sites of one kernel are numbered in the order they first appear:

# %% tags=["raises-exception"]
test_one_site_per_kernel_sizes_and_blocks()

# %% [markdown]
# A site checks a position where any of its launches passes a name that may be
# unaligned:

# %% tags=["raises-exception"]
test_a_site_checks_what_any_of_its_launches_must()

# %% [markdown]
# Your sites are the book's on 400 random programs, from the book's aligned names and
# from other sets:

# %% tags=["raises-exception"]
test_plan_sites_on_random_programs()

# %% [markdown]
# The two lines of a site, for a `CallSite` of a pointwise kernel and of a reduction,
# and for `SizedSite`s: blocks chosen per call or fixed, size symbols passed after the
# buffers, a reduction's two sizes, and a launch over no elements:

# %% tags=["raises-exception"]
test_site_lines_by_hand()

# %% [markdown]
# Your lines are the book's for every launch of 400 random programs:

# %% tags=["raises-exception"]
test_site_lines_on_random_programs()

# %% [markdown]
# All three functions on the lines of real graphs: a kernel at two sizes, a `cat`
# written in slices of its buffer, a `torch.sort` whose result a kernel writes over, a
# matmul, strided slices, and dynamic shapes:

# %% tags=["raises-exception"]
test_real_graphs()

# %% [markdown]
# Now with your functions in the wrapper. `sin` of 20 elements and of 30 is one kernel,
# with the same blocks, and two sites; sharing one, the second launch would compute 20
# of its 30 elements and leave the rest as the allocator gave them:

# %% tags=["raises-exception"]
test_one_kernel_at_two_sizes_matches_eager()

# %% [markdown]
# A `cat` of five pieces, each written by its own kernel into a slice of the cat's
# buffer (`max_fusion_size` of 1 keeps them apart). The three `sin` pieces start 0, 24
# and 48 bytes in: one site, which checks the slice as well as the input:

# %% tags=["raises-exception"]
test_a_cats_pieces_match_eager()

# %% [markdown]
# One graph for three sizes, its launch through a `SizedSite`:

# %% tags=["raises-exception"]
test_dynamic_shapes_match_eager()

# %% [markdown]
# A training step, a forward and a backward graph, against eager's gradients:

# %% tags=["raises-exception"]
test_a_training_step_matches_eager()

# %% [markdown]
# ## Going further
#
# 1. A view of `call`'s own memory at `4*s0` floats is aligned for every `s0`, yet
#    the book counts it unaligned. Accept an offset whose bytes are a multiple of 16
#    for every value of its symbols (each term of the sum a multiple of 16), and
#    compile a `cat` of five pieces of 4 columns and a symbolic number of rows
#    (`torch._dynamo.mark_dynamic(piece, 0)`, `max_fusion_size` of 1): what does its
#    site's `check` lose?
# 2. Inductor checks the graph's inputs once per call, where the sites check them at
#    every launch. Count, for the training step above, how many alignment tests one
#    call makes with `check` as it is, and how many with the inputs left out of every
#    `check` and tested once at the top of `call`.
# 3. A site gathers the check of all its lines. Give each launch line the check of its
#    own instead, with a site for each different check, and count on the `cat` of five
#    pieces how many sites the module defines and how many tests one call makes, both
#    ways.
