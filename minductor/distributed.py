# generated from chapters/28_many_gpus.md — edit there

"""Functional collectives as IR nodes: a collective starts, the graph's other work runs,
and its wait makes the result readable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from minductor.config import config
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    ExternKernelOut,
    FallbackKernel,
    FixedLayout,
    MutationBuffer,
    TensorBox,
)
from minductor.lowering import (
    VIEW_TARGETS,
    CannotCompile,
    GraphLowering,
    Unsupported,
    lowerings,
    register_lowering,
)
from minductor.dependencies import BaseSchedulerNode
from minductor.pipeline import PIPELINE
from minductor.runtime import extern_kernels
from minductor.scheduler import Scheduler
from minductor.sizevars import contiguous_strides
from minductor.wrapper import ExternCallLine, codegen_call_args, codegen_op, memory_plan
from minductor.memory import RETURNS_AN_INPUT

c10d = torch.ops._c10d_functional


@dataclass(frozen=True, eq=False, repr=False)
class CollectiveKernel(FallbackKernel):
    """Starts a collective on the process group named `group`; its result is in
    flight, and its inputs are read, until its WaitKernel has run."""

    group: str = ""

    def kind(self) -> str:
        return self.op._schema.name.split("::")[1].rstrip("_")  # "all_reduce"

    def __repr__(self) -> str:
        ins = ", ".join(b.name for b in self.input_buffers())
        return (
            f"{self.name}: CollectiveKernel({self.op._opname}, inputs=[{ins}], "
            f"group={self.group!r}, {self.layout!r})"
        )


@dataclass(frozen=True, eq=False, repr=False)
class WaitKernel(FallbackKernel):
    """Blocks until `collective` is done: its result is the collective's, readable."""

    collective: CollectiveKernel | None = None

    def input_buffers(self) -> list:
        # the collective's inputs too: nothing may write or reuse them before this
        return [self.collective, *self.collective.input_buffers()]

    def __repr__(self) -> str:
        return f"{self.name}: WaitKernel({self.collective.name}, {self.layout!r})"


# the collectives lowered to CollectiveKernels: op -> the argument that holds the
# group's size, or None where the op does not say it
COLLECTIVES = {
    c10d.all_reduce.default: None,
    c10d.all_gather_into_tensor.default: 1,
    c10d.reduce_scatter_tensor.default: 2,
    c10d.all_to_all_single.default: None,
}


def process_group(name: str, size: int | None) -> dist.ProcessGroup:
    """The process group a graph's collective names; a clear error if this process
    has no group of that name, or one of another size."""
    if not dist.is_initialized():
        raise CannotCompile(f"a collective on group {name!r}, but no process group")
    try:
        group = torch._C._distributed_c10d._resolve_process_group(name)
    except RuntimeError:
        raise ValueError(
            f"the graph runs a collective on process group {name!r}, which this "
            f"process does not have (was the graph traced with another group?)"
        ) from None
    if size is not None and size != group.size():
        raise ValueError(
            f"the graph's collective expects group {name!r} to have {size} ranks, "
            f"but it has {group.size()}"
        )
    return group


@register_lowering(*COLLECTIVES, graph=True, extern=True)
def collective(graph: GraphLowering, x: TensorBox, *args: Any) -> TensorBox:
    op = graph.current_node.target
    if not isinstance(args[-1], str):  # DTensor passes the group itself, an object
        raise Unsupported(f"a collective on a group given as {type(args[-1]).__name__}")
    where = COLLECTIVES[op]
    process_group(args[-1], None if where is None else args[where - 1])
    buf = graph.realize_viewed(x)
    buf = graph.require_strides(buf, tuple(contiguous_strides(buf.get_size())))
    if op == c10d.all_reduce.default and config.all_reduce_in_place:
        return reduce_in_place(graph, buf, args)  # (below)
    layout = FixedLayout.from_tensor(graph.current_node.meta["val"])
    node = CollectiveKernel(
        graph.new_buffer_name(), layout, op, (buf, *args), {}, group=args[-1]
    )
    graph.register_buffer(node)
    graph.extern_kernels.append(str(op))
    return TensorBox(node)


@register_lowering(c10d.wait_tensor.default, graph=True, extern=True)
def wait(graph: GraphLowering, x: TensorBox) -> TensorBox:
    started = x.data
    if not isinstance(started, CollectiveKernel):  # one we left to ATen
        raise Unsupported(f"waits for {started!r}, not a collective of ours")
    node = WaitKernel(
        graph.new_buffer_name(),
        started.layout,
        c10d.wait_tensor.default,
        (started,),
        {},
        collective=started,
    )
    graph.register_buffer(node)
    return TensorBox(node)


def owned(graph: GraphLowering, buf: Buffer) -> Buffer:
    """buf, if it is memory this graph computed for the current node alone; else a
    copy of it, which is."""
    arg = graph.current_node.args[0]
    alone = isinstance(arg, torch.fx.Node) and list(arg.users) == [graph.current_node]
    computed = alone and arg.op == "call_function" and arg.target not in VIEW_TARGETS
    ours = isinstance(buf, (ComputedBuffer, ExternKernelOut))
    if computed and ours and not isinstance(buf, MutationBuffer):
        return buf
    copy = lowerings[torch.ops.aten.clone.default](TensorBox(buf))
    return graph.realize_viewed(copy)


def reduce_in_place(graph: GraphLowering, buf: Buffer, args) -> TensorBox:
    target = owned(graph, buf)
    node = CollectiveKernel(
        graph.new_buffer_name(), target.layout, c10d.all_reduce_.default,
        (target, *args), {}, group=args[-1],
    )  # fmt: skip
    graph.register_buffer(node)
    graph.extern_kernels.append(str(c10d.all_reduce_.default))
    return TensorBox(node)


RETURNS_AN_INPUT.add(c10d.wait_tensor.default)  # chapter 20: the same memory


def _members(node: BaseSchedulerNode) -> tuple:
    return (node,) if node.is_extern() else node.snodes


def _buffer(node: BaseSchedulerNode) -> Any:
    return getattr(node, "node", None)


def check_waits(nodes: list[BaseSchedulerNode]) -> None:
    """Refuse a schedule in which something but its wait reads a collective's result."""
    started = {n.get_name() for n in nodes if isinstance(_buffer(n), CollectiveKernel)}
    for node in nodes:
        for member in _members(node):
            buf = _buffer(member)
            own = {buf.collective.name} if isinstance(buf, WaitKernel) else set()
            early = (member.read_names & started) - own
            if early:
                raise CannotCompile(
                    f"{member.get_name()} reads {sorted(early)[0]}, the result of a "
                    f"collective, without waiting for it"
                )


def _moved(nodes: list, k: int, to: int) -> list:
    node = nodes.pop(k)
    nodes.insert(to, node)
    return nodes


def raise_collectives(nodes: list[BaseSchedulerNode]) -> list[BaseSchedulerNode]:
    nodes = list(nodes)
    for node in [n for n in nodes if isinstance(_buffer(n), CollectiveKernel)]:
        k = nodes.index(node)
        to = k
        while to > 0:
            before = nodes[to - 1]
            if isinstance(_buffer(before), CollectiveKernel):
                break  # collectives start in the graph's order on every rank
            if before.names & node.dep_names:
                break  # it makes what the collective reads
            to -= 1
        nodes = _moved(nodes, k, to)
    return nodes


def sink_waits(nodes: list[BaseSchedulerNode]) -> list[BaseSchedulerNode]:
    nodes = list(nodes)
    waits = [n for n in nodes if isinstance(_buffer(n), WaitKernel)]
    for wait in reversed(waits):
        k = nodes.index(wait)
        needs = set(wait.names)  # the wait's result, and what is made from it
        free, bound = [], []  # the nodes after the wait: can they run before it?
        for node in nodes[k + 1 :]:
            if node.dep_names & needs or isinstance(_buffer(node), WaitKernel):
                needs |= node.names  # waits keep their order, and so their readers
                bound.append(node)
            else:
                free.append(node)
        nodes = nodes[:k] + free + [wait] + bound
    return nodes


def reorder_for_overlap(scheduler: Scheduler) -> list[BaseSchedulerNode]:
    check_waits(scheduler.nodes)
    if not config.reorder_for_overlap:
        return scheduler.nodes
    return sink_waits(raise_collectives(scheduler.nodes))


PIPELINE["schedule_passes"].register(reorder_for_overlap, chapter=28)


@dataclass(frozen=True)
class CollectiveLine(ExternCallLine):
    def codegen(self) -> str:  # no restride: the result is not readable yet
        return f"{self.sources}\n{self.call()}" if self.sources else self.call()


@dataclass(frozen=True)
class WaitLine(ExternCallLine):
    def call(self) -> str:  # the rest of chapter 19's line, restride included, stays
        n, c = self.node, self.node.collective
        size = "x".join(str(s) for s in c.layout.size) or "0-d"
        dtype = str(c.layout.dtype).removeprefix("torch.")
        what = f"{c.kind()} ({size} {dtype}) on group {c.group!r}"
        return f"{n.name} = extern_kernels.wait_tensor({c.name}, {what!r})"


def wait_tensor(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """The collective's result, once it is done; a wait that fails names it."""
    try:
        return torch.ops._c10d_functional.wait_tensor(tensor)
    except RuntimeError as error:
        raise RuntimeError(
            f"minductor: {what} did not complete on rank {dist.get_rank()}: {error}"
        ) from error


extern_kernels.wait_tensor = wait_tensor  # what the generated `call` reaches


def collective_lines(wrapper) -> None:
    """Each collective's line and its wait's in their own forms."""
    kinds = {CollectiveKernel: CollectiveLine, WaitKernel: WaitLine}
    wrapper.lines = [
        kinds[type(line.node)](line.node, line.aten_only, line.sources)
        if isinstance(line, ExternCallLine) and type(line.node) in kinds
        else line
        for line in wrapper.lines
    ]


memory_plan.register(collective_lines, chapter=28)


def collective_signature(gm: torch.fx.GraphModule) -> list[tuple[str, ...]]:
    """The graph's collectives in order: (op, group, input's shape, dtype)."""
    found = []
    for node in gm.graph.nodes:
        if node.target in COLLECTIVES:
            value = node.args[0].meta.get("val")
            shape = "x".join(str(s) for s in value.shape) if value is not None else "?"
            dtype = str(value.dtype) if value is not None else "?"
            op = node.target._schema.name.split("::")[1]
            found.append((op, str(node.args[-1]), shape, dtype))
    return found


def first_difference(lists: list[list[tuple[str, ...]]]) -> str | None:
    """Where the ranks' lists of collectives first differ, in words; None if nowhere."""

    def said(entry) -> str:
        if entry is None:
            return "no collective"
        op, group, shape, dtype = entry
        return f"{op} on a {shape} {dtype.replace('torch.', '')} tensor"

    ours = lists[0]
    for rank, theirs in enumerate(lists[1:], 1):
        for k in range(max(len(ours), len(theirs))):
            a = ours[k] if k < len(ours) else None
            b = theirs[k] if k < len(theirs) else None
            if a != b:
                return f"collective {k}: rank 0 runs {said(a)}, rank {rank} {said(b)}"
    return None


def agree_across_ranks(signature: list[tuple[str, ...]]) -> None:
    for name in sorted({entry[1] for entry in signature}):
        group = process_group(name, None)
        lists: list[Any] = [None] * group.size()
        dist.all_gather_object(lists, signature, group=group)
        why = first_difference(lists)
        if why is not None:
            raise RuntimeError(
                f"minductor: the ranks of process group {name!r} run different "
                f"collectives in one compiled graph; {why} (ranks of the group)"
            )


def check_ranks_agree(run: Any, info: Any) -> Any:
    signature = collective_signature(info.gm)
    if not signature or not config.check_collectives:
        return run
    checked = []

    def first_call_checks(args: list[Any]) -> Any:
        if not checked:
            agree_across_ranks(signature)
            checked.append(True)
        return run(args)

    first_call_checks._boxed_call = True  # it takes the list of inputs, as run does
    return first_call_checks


PIPELINE["graph_wrappers"].register(check_ranks_agree, chapter=28)
