"""Chapter 20: the memory plan. Liveness (a `del` after each name's last use), alias
groups, the pool that hands dead memory to the next buffer of its key under the peak,
and what `may_alias` and `reuse_key` say. Generated modules are compared with eager;
the planner alone runs on hand-made lines."""

import re
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import sympy
import torch
from test_ch19_wrapper import (
    NAME,
    _two_outputs_and_a_fallback,
    call_body,
    check_against_eager,
    check_memory_lines,
    defines,
    randn,
)

from minductor.capture import record_compiled
from minductor.ir import Buffer, FallbackKernel, FixedLayout, ReinterpretBuffer
from minductor.memory import may_alias, plan_reuse, reuse_key
from minductor.sizevars import SizeVarAllocator
from minductor.wrapper import (
    AllocateLine,
    ExternCallLine,
    FreeLine,
    ReinterpretLine,
    ReuseLine,
)

pytestmark = pytest.mark.ch20

cpu = torch.device("cpu")


@pytest.mark.usefixtures("cumsum_falls_back")
def test_memory_lines_free_after_last_use_and_never_outputs():
    x, y = randn(5, 7), randn(5, 7)
    wrapper, source = check_against_eager(_two_outputs_and_a_fallback, x, y)
    body, freed = check_memory_lines(source, wrapper.graph)
    assert freed == {"x_1", "y_1", "buf0", "buf1"}
    assert body[-1] == "return (buf2, buf3)"
    # the inputs die right after the first kernel, their last reader
    first_launch = next(k for k, line in enumerate(body) if line.startswith("launch"))
    assert body[first_launch + 1] == "del x_1, y_1"


def test_unused_input_is_freed_first_and_returned_input_is_kept():
    x, y, unused = randn(4, 5), randn(3), randn(2)
    wrapper, source = check_against_eager(
        lambda x, y, unused: (x.sin() + 1, y), x, y, unused
    )
    body, freed = check_memory_lines(source, wrapper.graph)
    assert body[2] == "del unused_1"
    assert "y_1" not in freed
    assert body[-1] == "return (buf0, y_1)"


def test_every_intermediate_is_freed():
    x = randn(4, 5)
    wrapper, source = check_against_eager(lambda x: (torch.sort(x, 1)[0] + 1,), x)
    body, freed = check_memory_lines(source, wrapper.graph)
    defined = set().union(*(defines(line) for line in body)) - {"x_1"}
    outputs = {b.name for b in wrapper.graph.graph_outputs}
    assert defined - outputs <= freed, f"never freed: {defined - outputs - freed}"


def _softmax(x, dim):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def _softmaxes(x):
    # reductions over rows and over columns never share a kernel: four launches, and
    # the statistics one leaves behind die as the next allocates outputs of their size
    y = _softmax(x, 1) * _softmax(x, 0)
    return _softmax(y, 1).sum(0), _softmax(y, 0).sum(1)


REUSE = re.compile(
    rf"^({NAME}) = (?:reinterpret_tensor\()?({NAME})(, .*, 0\))?  # reuse$"
)


def reuses(body):
    """(new, old, line number) for each `# reuse` line of a call body."""
    found = [(REUSE.match(line), k) for k, line in enumerate(body)]
    return [(m[1], m[2], k) for m, k in found if m]


def test_dead_buffer_is_reused_by_the_next_kernels_outputs():
    wrapper, source = check_against_eager(_softmaxes, randn(5, 7))
    body, _ = check_memory_lines(source, wrapper.graph)
    assert [(new, old) for new, old, _ in reuses(body)] == [
        ("buf7", "buf3"),
        ("buf8", "buf2"),
        ("buf10", "buf6"),
    ]
    assert "buf8 = buf2  # reuse" in body  # the same layout: the tensor as it is
    # (1, 7) seen as (7,)
    assert "buf7 = reinterpret_tensor(buf3, (7,), (1,), 0)  # reuse" in body
    assert not [line for line in body if re.match(r"buf(7|8|10) = empty_strided", line)]
    assert sum(isinstance(line, ReuseLine) for line in wrapper.lines) == 3


@pytest.mark.parametrize("shape", [(5, 7), (1, 9), (9, 1), (33, 65)], ids=str)
def test_reused_name_is_deleted_only_after_its_hand_over(shape):
    wrapper, source = check_against_eager(_softmaxes, randn(*shape))
    body, _ = check_memory_lines(source, wrapper.graph)
    assert reuses(body)
    for new, old, k in reuses(body):
        assert body[k + 1] == f"del {old}"  # right after, not where it died
        assert [line for line in body if line.startswith(f"{old} = ")]
        dels = [line[4:].split(", ") for line in body if line.startswith("del ")]
        assert sum(old in names for names in dels) == 1
        assert f"{new} = empty_strided" not in source


@pytest.mark.usefixtures("cumsum_falls_back")
def test_an_outputs_memory_is_never_reused():
    # y.t() is returned as a view of y's buffer. y's own name dies once cumsum has read
    # it, just before cos allocates a buffer of y's size: that buffer must be new.
    def f(x):
        y = x.sin()
        return y.t(), torch.cumsum(y, 1).cos()

    wrapper, source = check_against_eager(f, randn(5, 7))
    body, freed = check_memory_lines(source, wrapper.graph)
    assert "buf0" in freed and "buf2 = reinterpret_tensor(buf0, " in source
    # cos writes over cumsum's result, which dies in it (chapter 17); nothing else
    assert [(new, old) for new, old, _ in reuses(body)] == [("buf3", "buf1")]


# The planner on hand-made lines. WorkLine is a line of a kind it does not know, like
# an ATen call writing into a buffer allocated for it (`mm(buf0, buf1, out=buf2)`).
@dataclass(frozen=True)
class WorkLine:
    names: tuple[str, ...]

    def codegen(self):
        return f"work({', '.join(self.names)})"

    def uses(self):
        return self.names

    def defines(self):
        return ()


F32 = torch.float32
L57 = FixedLayout.contiguous(cpu, F32, (5, 7))
L75 = FixedLayout.contiguous(cpu, F32, (7, 5))
T57 = FixedLayout(cpu, F32, L75.size, (1, 7))  # (5, 7)'s memory seen transposed
BUF0 = Buffer("buf0", L57)
VIEW = ReinterpretBuffer("buf1", T57, BUF0)


def planned(lines, outputs=(), hints=None):
    sizevars = SizeVarAllocator(var_to_hint=hints or {})
    graph = SimpleNamespace(graph_outputs=list(outputs), sizevars=sizevars)
    return [line.codegen() for line in plan_reuse(list(lines), graph)]


def alloc(name, layout=L57):
    return AllocateLine(name, layout)


def test_planner_reuses_after_the_last_use_and_moves_the_del():
    lines = [
        alloc("buf0"),
        WorkLine(("x", "buf0")),
        FreeLine(("x",)),
        WorkLine(("buf0",)),
        FreeLine(("buf0",)),
        alloc("buf1"),
        alloc("buf2", L75),
        WorkLine(("buf1", "buf2")),
    ]
    assert planned(lines)[4:] == [
        "buf1 = buf0  # reuse",
        "del buf0",
        alloc("buf2", L75).codegen(),  # its own key, but buf0 is taken
        "work(buf1, buf2)",
    ]
    lines[5] = alloc("buf1", L75)  # as many elements, another layout
    reused = "buf1 = reinterpret_tensor(buf0, (7, 5), (5, 1), 0)  # reuse"
    assert planned(lines)[4] == reused


@pytest.mark.parametrize(
    "layout",
    [
        FixedLayout.contiguous(cpu, F32, (5, 6)),
        FixedLayout.contiguous(cpu, torch.int32, (5, 7)),
        FixedLayout.contiguous(torch.device("meta"), F32, (5, 7)),
    ],
    ids=["size", "dtype", "device"],
)
def test_planner_needs_the_same_key(layout):
    lines = [
        alloc("buf0"),
        WorkLine(("buf0",)),
        FreeLine(("buf0",)),
        alloc("buf1", layout),
    ]
    assert planned(lines) == [line.codegen() for line in lines]


def test_planner_holds_memory_across_work_only_below_the_peak():
    lines = [
        alloc("buf0"),
        WorkLine(("buf0",)),
        FreeLine(("buf0",)),
        WorkLine(("x",)),  # nothing else is alive here: holding buf0 costs no peak
        alloc("buf1"),
    ]
    assert "buf1 = buf0  # reuse" in planned(lines)
    # the peak is buf2's time, with buf0's memory gone: held over it, buf0 would raise it
    big = FixedLayout.contiguous(cpu, torch.float32, (50, 70))
    lines = [
        alloc("buf0"),
        WorkLine(("buf0",)),
        FreeLine(("buf0",)),
        alloc("buf2", big),
        WorkLine(("buf2",)),
        FreeLine(("buf2",)),
        alloc("buf1"),
    ]
    assert planned(lines) == [line.codegen() for line in lines]
    # with symbolic sizes the peak is judged at the symbols' hints: buf0 (s0 x 7) is
    # held over buf2 (s1 x 7) only if an earlier buffer (s2 x 7) set a peak above both
    s0, s1, s2 = sympy.symbols("s0 s1 s2", positive=True, integer=True)
    sym = FixedLayout.contiguous(cpu, torch.float32, (s0, 7))
    lines = [
        alloc("bufh", FixedLayout.contiguous(cpu, torch.float32, (s2, 7))),
        WorkLine(("bufh",)),
        FreeLine(("bufh",)),
        alloc("buf0", sym),
        WorkLine(("buf0",)),
        FreeLine(("buf0",)),
        alloc("buf2", FixedLayout.contiguous(cpu, torch.float32, (s1, 7))),
        WorkLine(("buf2",)),
        FreeLine(("buf2",)),
        alloc("buf1", sym),
    ]
    unchanged = [line.codegen() for line in lines]
    held = planned(lines, hints={s0: 5, s1: 2, s2: 100})  # peak 700: 35 + 14 fits
    assert "buf1 = buf0  # reuse" in held
    assert planned(lines, hints={s0: 5, s1: 2, s2: 6}) == unchanged  # 49 > 42
    assert planned(lines, hints={s0: 5, s1: 2, s2: 7}) != unchanged  # 49 <= 49
    # a size with no hint (one that depends on the data): nothing is held over work
    assert planned(lines, hints={s1: 2, s2: 100}) == unchanged


def test_planner_never_reuses_memory_a_live_view_reads():
    lines = [
        alloc("buf0"),
        WorkLine(("buf0",)),
        ReinterpretLine(VIEW),
        FreeLine(("buf0",)),  # the name dies, the memory does not: buf1 views it
        alloc("buf2"),
        WorkLine(("buf1", "buf2")),
        FreeLine(("buf1",)),
        alloc("buf3"),
    ]
    assert planned(lines) == [line.codegen() for line in lines]
    # when the holder dies last, with its view or after it, the memory is free
    lines[3:7] = [WorkLine(("buf1", "buf0")), FreeLine(("buf1", "buf0")), alloc("buf2")]
    assert "buf2 = buf0  # reuse" in planned(lines)


def test_planner_never_reuses_an_outputs_memory():
    lines = [alloc("buf0"), WorkLine(("buf0",)), FreeLine(("buf0",)), alloc("buf2")]
    assert "buf2 = buf0  # reuse" in planned(lines)
    assert planned(lines, outputs=[BUF0]) == [line.codegen() for line in lines]


@pytest.mark.parametrize(
    "op,args,layout,aliases",
    [
        (torch.ops.aten.t.default, (BUF0,), T57, True),
        (torch.ops.aten.cumsum.default, (BUF0, 1), L57, False),
        # a view whose schema says it is not one
        (torch.ops.aten._unsafe_view.default, (BUF0, [5, 7]), L57, True),
    ],
    ids=["t", "cumsum", "unsafe_view"],
)
def test_planner_follows_aten_ops_that_return_views(op, args, layout, aliases):
    extern = ExternCallLine(FallbackKernel("buf1", layout, op, args, {}))
    lines = [
        alloc("buf0"),
        WorkLine(("buf0",)),
        extern,
        FreeLine(("buf0",)),
        alloc("buf2"),
        WorkLine(("buf1", "buf2")),
    ]
    assert may_alias(op) == aliases
    assert ("buf2 = buf0  # reuse" in planned(lines)) == (not aliases)


def test_may_alias_reads_the_schema():
    assert may_alias(torch.ops.aten.split.Tensor)  # Tensor(a)[]
    assert may_alias(torch.ops.aten.add_.Tensor)  # Tensor(a!)
    assert not may_alias(torch.ops.aten.sort.default)
    assert may_alias(lambda x: x)  # no schema: it may


@pytest.mark.parametrize(
    "op",
    [
        torch.ops.aten.unsafe_split.Tensor,
        torch.ops.aten.unsafe_split_with_sizes.default,
        torch.ops.aten.unsafe_chunk.default,
        torch.ops.aten._unsafe_view.default,
    ],
    ids=str,
)
def test_unsafe_views_may_alias_although_their_schemas_say_not(op):
    assert all(ret.alias_info is None for ret in op._schema.returns)
    assert may_alias(op)


def test_planner_follows_a_scatter_into_its_copy():
    lines = [
        alloc("buf0"),
        WorkLine(("buf0",)),
        ReuseLine("buf0", "buf1"),  # the scatter's result takes over its copy
        FreeLine(("buf0",)),
        WorkLine(("buf1",)),
        FreeLine(("buf1",)),
        alloc("buf2"),
    ]
    assert planned(lines)[-2:] == ["buf2 = buf1  # reuse", "del buf1"]


def test_reuse_key_compares_symbolic_sizes_as_expressions():
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    key = reuse_key

    def contiguous(*size, dtype=F32):
        return FixedLayout.contiguous(cpu, dtype, size)

    assert key(contiguous(s0, 1)) == key(contiguous(s0)) == (cpu, F32, s0)
    assert key(contiguous(s0 + 1, 4)) == key(contiguous(4 * s0 + 4))
    assert key(contiguous(s0, s1)) == key(contiguous(s1, s0))
    assert key(contiguous(s0)) != key(contiguous(s1))  # equal at some call, not all
    assert key(contiguous(s0)) != key(contiguous(s0, dtype=torch.float64))
    assert key(T57) == key(L57) == (cpu, F32, 35)
    assert key(FixedLayout(cpu, F32, (5, 1), (1, 5))) == (cpu, F32, 5)
    assert key(contiguous(2, 0))[2] == key(contiguous(0, 5))[2] == 0  # no memory
    assert key(contiguous())[2] == 1  # a scalar


def test_reuse_with_symbolic_sizes():
    torch._dynamo.reset()
    compiled = torch.compile(_softmaxes, backend="minductor", dynamic=True)
    with record_compiled() as graphs:
        for shape in ((5, 7), (9, 3), (6, 33)):
            x = randn(*shape)
            for got, expected in zip(compiled(x), _softmaxes(x), strict=True):
                torch.testing.assert_close(got, expected)
    assert len(graphs) == 1
    body = call_body(graphs[0].source)
    found = reuses(body)
    assert found
    symbolic = r"\bs\d+\b"
    viewed = [body[k] for _, _, k in found if "reinterpret_tensor(" in body[k]]
    assert viewed and all(re.search(symbolic, line) for line in viewed)
    for _, old, _ in found:  # the memory came from an allocation of symbolic size
        made = next(line for line in body if line.startswith(f"{old} = "))
        while reused := REUSE.match(made):  # a reuse of a reuse: back to its allocation
            made = next(line for line in body if line.startswith(f"{reused[2]} = "))
        assert "empty_strided_" in made and re.search(symbolic, made)
