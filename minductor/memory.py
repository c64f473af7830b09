# generated from chapters/20_memory.md — edit there

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from minductor.codegen_triton import inplace_candidates, storage_elements
from minductor.config import config
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    ExternKernelOut,
    FallbackKernel,
    FixedLayout,
    MultiOutput,
    MutationBuffer,
    TensorBox,
)
from minductor.lowering import Opaque
from minductor.sizevars import NoHint
from minductor.wrapper import (
    AllocateLine,
    ConcatLine,
    ExternCallLine,
    FreeLine,
    Line,
    MultiOutputLine,
    ReinterpretLine,
    ReuseLine,
    handovers,
    memory_plan,
)


def plan_frees(lines: list[Line], graph) -> list[Line]:
    """The lines with a FreeLine after each name's last use."""
    outputs = graph.graph_outputs
    keep = {b.name for b in outputs if isinstance(b, (Buffer, Opaque))}
    seen: set[str] = set(keep)
    planned: list[Line] = []
    for line in reversed(lines):
        # a name dies at its last use, or where it is made if nothing uses it
        candidates = dict.fromkeys(line.uses() + line.defines())
        dying = tuple(n for n in candidates if n not in seen)
        seen |= set(candidates)
        if dying:
            planned.append(FreeLine(dying))
        planned.append(line)
    unused = tuple(
        n
        for n in graph.graph_input_names
        if n not in seen and isinstance(graph.graph_inputs[n], TensorBox)
    )
    return ([FreeLine(unused)] if unused else []) + planned[::-1]


# lines that only name memory; a line of any other kind runs work
MEMORY_LINES = (
    AllocateLine,
    FreeLine,
    ReuseLine,
    ReinterpretLine,
    MultiOutputLine,
    ConcatLine,
)


# ops that hand back an input although their schemas do not say so (chapter 28 adds
# the wait for a collective, which returns the collective's result)
RETURNS_AN_INPUT: set[Any] = set()


def may_alias(op: Any) -> bool:
    """May this op return a view of an input? Its schema says, but for the unsafe
    views, whose schemas do not; unknown ops may."""
    if not isinstance(op, torch._ops.OpOverload):
        return True
    if "unsafe" in op.name() or op in RETURNS_AN_INPUT:  # unsafe_split, _unsafe_view
        return True
    return any(ret.alias_info is not None for ret in op._schema.returns)


def alias_roots(lines: list[Line]) -> dict[str, str]:
    """Names that may share memory, grouped: name -> one name of its group."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.get(name, name) != name:
            name = parent[name]
        return name

    def join(name: str, *others: str) -> None:
        for other in others:
            parent[root(other)] = root(name)

    for line in lines:
        if isinstance(line, ReinterpretLine):
            join(line.node.name, line.node.base.name)
        elif isinstance(line, ReuseLine):  # a scatter's result is its copy
            join(line.new, line.old)
        elif isinstance(line, ConcatLine):
            join(line.node.name, *(p.name for p in line.node.pieces))
        elif isinstance(line, MultiOutputLine):
            join(line.node.name, line.node.parent.name)
        elif isinstance(line, ExternCallLine) and may_alias(line.node.op):
            join(line.node.name, *line.uses())
    return {name: root(name) for name in parent}


class GroupLiveness:
    """Alias groups alive line by line: a group lives from the line that defines its
    first name to the FreeLine of its last."""

    def __init__(self, group: Callable[[str], str]):
        self.group = group
        self.live: dict[str, set[str]] = {}  # group -> its names made, not yet freed

    def step(self, line: Line) -> list[str]:
        """Walk one line; the names it frees that were the last of their group."""
        dead = []
        if isinstance(line, FreeLine):
            for name in line.names:
                self.live.get(self.group(name), set()).discard(name)
            dead = [n for n in line.names if not self.live.get(self.group(n))]
        for name in line.defines():
            self.live.setdefault(self.group(name), set()).add(name)
        return dead


def nbytes(layout: FixedLayout, sizevars) -> int:
    """The bytes of a layout's storage; with symbolic sizes, at the sizes the graph
    was compiled for (its symbols' hints); -1 where a symbol has no hint."""
    elements = reuse_key(layout)[2]
    if not elements.is_Integer:
        try:
            elements = sizevars.size_hint(elements)
        except NoHint:  # a size that depends on the data (chapter 4)
            return -1
    return int(elements) * layout.dtype.itemsize


def fresh_memory(line: Line) -> tuple[str, FixedLayout] | None:
    """The name and layout of the memory a line allocates, if it allocates any."""
    if isinstance(line, AllocateLine):
        return line.name, line.layout
    if isinstance(line, (ExternCallLine, MultiOutputLine)):
        fresh = not isinstance(line, ExternCallLine) or not may_alias(line.node.op)
        if fresh and isinstance(line.node.layout, FixedLayout):
            return line.node.name, line.node.layout
    return None


def live_bytes(lines, group: Callable[[str], str], sizevars) -> list[int] | None:
    """The bytes of memory alive after each line, before reuse; None if a size
    has no hint."""
    sizes: dict[str, int] = {}  # group -> the bytes made under its names
    liveness = GroupLiveness(group)
    live, profile = 0, []
    for line in lines:
        if (made := fresh_memory(line)) is not None:
            n = nbytes(made[1], sizevars)
            if n < 0:
                return None
            g = group(made[0])
            sizes[g] = sizes.get(g, 0) + n
            live += n
        for name in liveness.step(line):
            live -= sizes.pop(group(name), 0)
        profile.append(live)
    return profile


def reuse_key(layout: FixedLayout) -> tuple[Any, ...]:
    """(device, dtype, elements in storage): what `empty_strided` allocates."""
    return (layout.device, layout.dtype, storage_elements(layout))


def plan_reuse(lines: list[Line], graph) -> list[Line]:
    """The lines with dead memory handed to later allocations of its key."""
    roots = alias_roots(lines)

    def group(name: str) -> str:
        return roots.get(name, name)

    outputs = graph.graph_outputs
    returned = {group(b.name) for b in outputs if isinstance(b, Buffer)}
    liveness = GroupLiveness(group)
    holders: dict[str, FixedLayout] = {}  # name -> its tensor's layout
    # key -> (name, layout, its FreeLine in `planned`, that line's place in `lines`)
    pool: dict[tuple[Any, ...], list[tuple[str, FixedLayout, int, int]]] = {}
    planned: list[Line] = []  # so far; pool entries point at FreeLines
    profile = live_bytes(lines, group, graph.sizevars)  # None: no holds over work
    peak = max(profile, default=0) if profile is not None else 0
    work = 0  # work lines so far
    work_at: list[int] = []  # work lines before each line of `lines`
    for k, line in enumerate(lines):
        work_at.append(work)
        after: list[Line] = []
        if isinstance(line, AllocateLine):
            holders[line.name] = line.layout
            dead = pool.get(reuse_key(line.layout), [])
            for d in range(len(dead) - 1, -1, -1):  # the newest dead memory first
                old, layout, at, freed = dead[d]
                held = nbytes(layout, graph.sizevars)
                if work_at[freed] != work:  # held over work: only below the peak
                    if profile is None or max(profile[freed:k]) + held > peak:
                        continue
                    for i in range(freed, k):
                        profile[i] += held
                del dead[d]
                names = planned[at].names  # the FreeLine where `old` died
                planned[at] = FreeLine(tuple(n for n in names if n != old))
                view = None if layout == line.layout else line.layout
                line = ReuseLine(old, line.name, view)
                after = [FreeLine((old,))]
                break
        elif isinstance(line, ReuseLine) and line.old in holders:
            layout = holders.pop(line.old)  # the new name's tensor: its own view
            holders[line.new] = line.layout or layout
        elif not isinstance(line, MEMORY_LINES):
            work += 1  # it runs work
            if profile is None:
                pool.clear()  # dead memory is freed, not held over it
        dead_here = liveness.step(line)  # the last names of their groups it frees
        for name in line.names if isinstance(line, FreeLine) else ():
            layout = holders.pop(name, None)
            if layout is not None and name in dead_here and group(name) not in returned:
                key = reuse_key(layout)
                pool.setdefault(key, []).append((name, layout, len(planned), k))
        planned += [line, *after]
    return [line for line in planned if line != FreeLine(())]


def written_over(wrapper) -> dict[str, str]:
    """Chapter 17's candidates whose memory is ours to give: input -> output."""
    if not config.inplace_buffers:
        return {}
    found = {}
    for old, new in inplace_candidates(wrapper.scheduler).items():
        buf = wrapper.scheduler.buffer(old)
        if isinstance(buf, MultiOutput):
            ours = not may_alias(buf.parent.op)
        elif isinstance(buf, FallbackKernel) and not isinstance(buf, ExternKernelOut):
            ours = not may_alias(buf.op)
        else:  # a kernel's output, or an extern kernel's written into our memory
            ours = isinstance(buf, (ComputedBuffer, ExternKernelOut))
            ours = ours and not isinstance(buf, MutationBuffer)
        if ours:
            found[old] = new
    return found


def plan_memory(wrapper) -> None:
    """Where each name dies, then which dead memory later buffers take."""
    wrapper.lines = plan_reuse(plan_frees(wrapper.lines, wrapper.graph), wrapper.graph)


handovers.register(written_over, chapter=20)
memory_plan.register(plan_memory, chapter=20)
