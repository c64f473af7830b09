# generated from chapters/15_scheduler.md — edit there

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

from minductor.config import config
from minductor.dependencies import (  # chapter 14
    BaseSchedulerNode,
    ExternKernelSchedulerNode,
    FusedSchedulerNode,
    Group,
    MemoryDep,
    SchedulerNode,
    WeakDep,
    after_loop_value,
    is_indirect,
    is_persistent,
    log,
)
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    FallbackKernel,
    InputBuffer,
    MultiOutput,
    MutationBuffer,
    ReinterpretBuffer,
)
from minductor.lowering import GraphLowering
from minductor.pipeline import PIPELINE
from minductor.sizevars import UNBACKED_FALLBACK, product


FusionRule = Callable[[BaseSchedulerNode, BaseSchedulerNode], "str | None"]
fusion_rules = PIPELINE["fusion_rules"]
# passes that take the fused nodes and return them in another order, as
# reorder(scheduler) -> list of nodes, every producer still before its readers
schedule_passes = PIPELINE["schedule_passes"]


def register_fusion_rule(rule: FusionRule | None = None, *, chapter=None):
    """Add a rule to the pipeline's fusion_rules (also as a decorator)."""
    return fusion_rules.register(rule, chapter=chapter)


class FusionScore(NamedTuple):
    """How much a fusion is worth ("Profitability", below): the greater, the better."""

    bytes_saved: int
    proximity: int  # minus the distance of the two nodes in the original order


def _numel(node: BaseSchedulerNode) -> str:
    numel, rnumel = node.group.numel, node.group.rnumel
    return str(numel) if rnumel == 1 else f"{numel}x{rnumel}"


def _loops(node: BaseSchedulerNode) -> str:
    loops = list(node.loop.sizes)
    return f"{loops}x{list(node.rloop.sizes)}" if node.rloop.sizes else str(loops)


class Scheduler:
    def __init__(self, graph: GraphLowering):
        self.graph = graph
        outputs = graph.graph_outputs
        self.output_names = {b.name for b in outputs if isinstance(b, Buffer)}
        self.nodes: list[BaseSchedulerNode] = [self._create(b) for b in graph.buffers]
        self.order = {n.get_name(): k for k, n in enumerate(self.nodes)}
        self.fusion_log: list[str] = []
        self.removed_buffers: set[str] = set()
        self.nodes = order_mutations(self.nodes)
        # a copy of a view looks its value up when its body runs, and may find it
        # realized later, as a buffer: producers first, then number the nodes again
        self.nodes = self._topological_sort(self.nodes)
        self.order = {n.get_name(): k for k, n in enumerate(self.nodes)}
        self.dead_code_elimination()
        self.fuse_nodes()
        for reorder in schedule_passes:  # chapter 28: overlap communication
            self.nodes = reorder(self)
        self.removed_buffers |= self._buffers_internal_to_kernels()

    @staticmethod
    def _create(buf: Buffer) -> BaseSchedulerNode:
        if isinstance(buf, ComputedBuffer):
            return SchedulerNode.create(buf)
        return ExternKernelSchedulerNode.create(buf)


    def can_fuse(self, a: BaseSchedulerNode, b: BaseSchedulerNode) -> tuple[bool, str]:
        for node in (a, b):
            if node.is_extern():
                return False, f"{node.get_name()} is an extern kernel"
            for m in node.snodes:
                if isinstance(m.node, MutationBuffer) and not mutates_input(m):
                    target = m.node.target.name
                    return False, f"{m.get_name()} scatters into {target} in place"
        if a.group.device != b.group.device:
            return False, f"different devices: {a.group.device} vs {b.group.device}"
        aligned = self.align(a, b)
        if aligned is None:
            return False, f"different numel: {_numel(a)} vs {_numel(b)}"
        a, b = aligned
        members = a.snodes + b.snodes  # every member, not only the leaders
        if len({m.loop.sizes for m in members}) > 1 or (
            len({m.rloop.sizes for m in members if m.rloop.sizes}) > 1
        ):
            return False, f"different loops: {_loops(a)} vs {_loops(b)}"
        size = len(a.snodes) + len(b.snodes)
        if size > config.max_fusion_size:
            return False, f"{size} nodes exceed max_fusion_size"
        if not is_persistent(FusedSchedulerNode(members), self.graph.sizevars):
            late = {m.get_name() for m in members if after_loop_value(m)}
            for member in members:
                too_early = sorted(member.read_names & late)
                if member.rloop.sizes and too_early:
                    return False, (
                        f"{member.get_name()} reads {too_early[0]} inside the loop, "
                        f"but a looped kernel has it only after its loop"
                    )
        for first, second in ((a, b), (b, a)):
            written = {d.name: d for d in first.writes}
            for dep in second.reads:
                if isinstance(dep, WeakDep):  # orders only: nothing is read
                    continue
                if dep.name in written and isinstance(dep, MemoryDep):
                    if is_indirect(dep.index):
                        return False, (
                            f"{second.get_name()} reads {dep} at an indirect index: "
                            f"{first.get_name()} may write it in another program"
                        )
                if dep.name in written and dep != written[dep.name]:
                    return False, (
                        f"{second.get_name()} reads {dep} but {first.get_name()} "
                        f"writes {written[dep.name]}"
                    )
        for rule in fusion_rules:
            reason = rule(a, b)
            if reason is not None:
                return False, reason
        through = self._path_between(a, b)
        if through:
            return False, f"fusing would create a cycle through {through}"
        return True, "ok"


    def align(self, a: BaseSchedulerNode, b: BaseSchedulerNode):
        """(a, b) with equal groups, splitting a pointwise side if needed, or None."""
        if same_elements(a.group, b.group):
            if a.loop.sizes != b.loop.sizes and a.group.rnumel == 1:
                return self.common_loops(a, b) or (a, b)
            return a, b
        for pointwise, reduction in ((a, b), (b, a)):
            numel, rnumel = reduction.group.numel, reduction.group.rnumel
            if _is_epilogue(pointwise, reduction.group):
                return self.common_loops(a, b) or (a, b)
            if (
                pointwise.group.rnumel != 1
                or rnumel == 1
                or not is_persistent(reduction, self.graph.sizevars)
            ):
                continue
            if pointwise.group.numel != numel * rnumel:
                continue
            members = [m.split(numel, rnumel) for m in pointwise.snodes]
            if not all(members):
                continue
            split = (
                members[0] if len(members) == 1 else FusedSchedulerNode(tuple(members))
            )
            return (split, reduction) if pointwise is a else (reduction, split)
        return None


    @staticmethod
    def common_loops(a: BaseSchedulerNode, b: BaseSchedulerNode):
        """a and b re-derived on one nest of output loops that suits both, or None."""
        members = a.snodes + b.snodes
        first = members[0]
        if not all(
            isinstance(m, SchedulerNode)
            and (m.node.is_reduction() or not m.rloop.sizes)  # not a cut pointwise
            and m.loop.original_sizes == first.loop.original_sizes
            and m.order == first.order
            for m in members
        ):
            return None
        joint = tuple(dict.fromkeys(i for m in members for i in m.loop_indices))
        remade = {m: SchedulerNode.create(m.node, joint=joint) for m in members}

        def rebuilt(node: BaseSchedulerNode) -> BaseSchedulerNode:
            if isinstance(node, SchedulerNode):
                return remade[node]
            return FusedSchedulerNode(tuple(remade[m] for m in node.snodes))

        return rebuilt(a), rebuilt(b)


    def _ancestors(self) -> dict[str, int]:
        self._producer = {name: n for n in self.nodes for name in n.names}
        self.bit = {n.get_name(): 1 << k for k, n in enumerate(self.nodes)}
        ancestors: dict[str, int] = {}
        for node in self.nodes:  # topological order
            found = 0
            for name in node.dep_names:
                if name in self._producer and self._producer[name] is not node:
                    parent = self._producer[name].get_name()
                    found |= self.bit[parent] | ancestors[parent]
            ancestors[node.get_name()] = found
        return ancestors

    def _merge_ancestors(self, a, b, fused: FusedSchedulerNode) -> None:
        ancestors, bit = self._ancestors_cache, self.bit
        both = bit.pop(a.get_name()) | bit.pop(b.get_name())
        above = (ancestors.pop(a.get_name()) | ancestors.pop(b.get_name())) & ~both
        bit[fused.get_name()], ancestors[fused.get_name()] = both, above
        for name, found in ancestors.items():
            if found & both:  # it depended on a or b: now on both, and what they did
                ancestors[name] = found | both | above
        self._producer.update(dict.fromkeys(fused.names, fused))

    def _path_between(self, a: BaseSchedulerNode, b: BaseSchedulerNode) -> str | None:
        ancestors = self._ancestors_cache
        for x, y in ((a, b), (b, a)):  # x itself has no bit of its own in its mask
            names = y.dep_names - y.names
            parents = {self._producer[n] for n in names if n in self._producer}
            mine = self.bit[x.get_name()]
            through = [p for p in parents if ancestors[p.get_name()] & mine]
            if through:
                return min(through, key=self._position).get_name()
        return None


    def _numbytes(self, name: str) -> int:
        buf = self.buffer(name)
        if buf is None or not hasattr(buf.layout, "size"):
            return 0
        size = product(buf.layout.size)
        numel = self.graph.sizevars.size_hint(size, UNBACKED_FALLBACK)
        return numel * buf.layout.dtype.itemsize

    def buffer(self, name: str) -> Buffer | None:
        """The buffer or graph input of that name (chapters 17 and 20 ask too)."""
        buffers = self.graph.buffers  # a list that only grows: index it when it has
        if len(getattr(self, "_by_name", ())) != len(buffers):
            self._by_name = {b.name: b for b in buffers}
        if name in self._by_name:
            return self._by_name[name]
        box = self.graph.graph_inputs.get(name)
        return box.data if box is not None and hasattr(box, "data") else None

    def score_fusion(self, a: BaseSchedulerNode, b: BaseSchedulerNode) -> FusionScore:
        shared = (a.names | a.read_names) & (b.names | b.read_names)
        saved = sum(self._numbytes(name) for name in shared)
        return FusionScore(saved, -abs(self._position(a) - self._position(b)))

    def _position(self, node: BaseSchedulerNode) -> int:
        return min(self.order[m.get_name()] for m in _members(node))


    def fuse_nodes(self) -> None:
        for _ in range(10):
            if not self._fuse_once():
                break

    def _fuse_once(self) -> bool:
        self._ancestors_cache = self._ancestors()
        index = {n.get_name(): k for k, n in enumerate(self.nodes)}
        touching: dict[str, list[BaseSchedulerNode]] = {}  # buffer -> nodes, in order
        for node in self.nodes:
            for name in node.names | node.read_names:
                touching.setdefault(name, []).append(node)
        sharing = {  # pairs, earlier node first, that share a buffer
            (index[a.get_name()], index[b.get_name()]): (a, b)
            for nodes in touching.values()
            for k, a in enumerate(nodes)
            for b in nodes[k + 1 :]
        }
        leaves = self._scalar_leaves()
        for a, b in zip(leaves[::2], leaves[1::2]):  # they share nothing: pair them
            sharing.setdefault((index[a.get_name()], index[b.get_name()]), (a, b))
        pairs = [
            (self.score_fusion(a, b), i, a, b)
            for (i, _), (a, b) in sorted(sharing.items(), key=lambda item: item[0])
        ]
        pairs.sort(key=lambda p: (p[0], -p[1]), reverse=True)
        last_read = {m: k for k, n in enumerate(self.nodes) for m in n.read_names}
        used: set[str] = set()
        fused_any = False
        for score, _, a, b in pairs:
            if a.get_name() in used or b.get_name() in used:
                continue
            kept = self._kept_alive(a, b, index, last_read)
            saved = score.bytes_saved
            if kept > max(config.fusion_memory_factor * saved, 2**20):
                self._log(
                    f"cannot fuse {a.get_name()} with {b.get_name()}: it would hold "
                    f"{kept} bytes longer to save {saved}"
                )
                continue
            ok, reason = self.can_fuse(a, b)
            if not ok:
                self._log(f"cannot fuse {a.get_name()} with {b.get_name()}: {reason}")
                continue
            fused = FusedSchedulerNode.fuse(*self.align(a, b), self.order)
            self._log(f"fuse {a.get_name()} + {b.get_name()} (saves {saved} bytes)")
            self.nodes = [n for n in self.nodes if n is not a and n is not b] + [fused]
            self._merge_ancestors(a, b, fused)
            used |= {a.get_name(), b.get_name()}
            fused_any = True
        self.nodes = self._topological_sort(self.nodes)
        return fused_any


    def _kept_alive(self, a, b, index: dict[str, int], last_read: dict[str, int]):
        """Bytes that fusing a and b frees later: the inputs the earlier of the two is
        the last to read (the later one does not read them)."""
        first, second = sorted((a, b), key=lambda n: index[n.get_name()])
        at = index[first.get_name()]
        if index[second.get_name()] - at <= 1:
            return 0  # neighbours: nothing runs in between
        return sum(
            self._numbytes(name)
            for name in first.read_names - second.read_names
            if last_read.get(name) == at
        )

    def _scalar_leaves(self) -> list[BaseSchedulerNode]:
        """Pointwise nodes of one element whose results nothing in the graph reads."""
        users = self._users()
        return [
            n
            for n in self.nodes
            if not n.is_extern()
            and n.group.numel == n.group.rnumel == 1
            and not any(m.is_reduction() for m in n.snodes)
            and not any(users.get(m, set()) - n.names for m in n.names)
        ]

    def _topological_sort(
        self, nodes: list[BaseSchedulerNode]
    ) -> list[BaseSchedulerNode]:
        producer = {name: n for n in nodes for name in n.names}
        done: set[int] = set()
        result: list[BaseSchedulerNode] = []

        def visit(node):
            if id(node) in done:
                return
            done.add(id(node))
            for name in sorted(node.dep_names, key=lambda n: self.order.get(n, -1)):
                if name in producer and producer[name] is not node:
                    visit(producer[name])
            result.append(node)

        for node in sorted(nodes, key=self._position):
            visit(node)
        return result

    def _log(self, line: str) -> None:
        self.fusion_log.append(line)
        log.debug("fusion: %s", line)


    def _users(self) -> dict[str, set[str]]:
        users: dict[str, set[str]] = {}
        for node in self.nodes:
            for name in node.read_names:
                users.setdefault(name, set()).add(node.get_name())
        return users

    def dead_code_elimination(self) -> None:
        while True:
            users = self._users()
            dead = [
                n
                for n in self.nodes
                if (
                    isinstance(n, SchedulerNode)
                    or isinstance(n, ExternKernelSchedulerNode)
                    and isinstance(n.node, MultiOutput)  # picks a result, no more
                )
                and n.get_name() not in self.output_names
                and not users.get(n.get_name())
                and not mutates_input(n)  # the caller sees its effect
            ]
            if not dead:
                return
            for n in dead:
                self._log(f"removed {n.get_name()}: no users")
            self.nodes = [n for n in self.nodes if n not in dead]

    def _buffers_internal_to_kernels(self) -> set[str]:
        internal: set[str] = set()
        readers: dict[str, set[int]] = {}
        for k, node in enumerate(self.nodes):
            for name in frozenset().union(*(s.read_names for s in _members(node))):
                readers.setdefault(name, set()).add(k)
        for k, node in enumerate(self.nodes):
            if node.is_extern():
                continue
            for member in node.snodes:
                name = member.get_name()
                if mutates_input(member) or name in self.output_names:
                    continue
                if readers.get(name, {k}) == {k}:
                    internal.add(name)
        return internal


def _is_epilogue(node: BaseSchedulerNode, reduction: Group) -> bool:
    """Pointwise over exactly a reduction's outputs: it runs once per output."""
    pointwise = not any(m.is_reduction() for m in node.snodes)
    over_outputs = node.group.numel == reduction.numel and node.group.rnumel == 1
    return pointwise and reduction.rnumel != 1 and over_outputs


def same_elements(a: Group, b: Group) -> bool:
    """Do two groups visit as many elements, in as many rows (devices aside)?"""
    return a.numel == b.numel and a.rnumel == b.rnumel


def _members(node: BaseSchedulerNode) -> tuple[BaseSchedulerNode, ...]:
    return node.snodes if not node.is_extern() else (node,)


def mutates_input(node: BaseSchedulerNode) -> bool:
    """Is node a copy into a graph input (a mutation AOTAutograd kept)?"""
    buf = getattr(node, "node", None)
    return isinstance(buf, MutationBuffer) and isinstance(buf.target, InputBuffer)


def overwritten(node: BaseSchedulerNode) -> list[str]:
    """The names of memory the node writes in place."""
    buf = getattr(node, "node", None)
    if isinstance(buf, MutationBuffer):
        return [buf.target.name]
    if isinstance(buf, FallbackKernel) and hasattr(buf.op, "_schema"):
        names = []
        for k, arg in enumerate(buf.op._schema.arguments):
            value = buf.args[k] if k < len(buf.args) else buf.kwargs.get(arg.name)
            if arg.alias_info is not None and arg.alias_info.is_write:
                names += [value.name] if isinstance(value, Buffer) else []
        return names
    return []


def order_mutations(nodes: list[BaseSchedulerNode]) -> list[BaseSchedulerNode]:
    """Each node that writes in place, with a WeakDep on every other reader of that
    memory, by its name or through a view of it."""
    base = {
        n.get_name(): n.node.base.name
        for n in nodes
        if isinstance(getattr(n, "node", None), ReinterpretBuffer)
    }

    def memory(name: str) -> str:
        while name in base:
            name = base[name]
        return name

    readers: dict[str, set[str]] = {}  # memory -> the nodes that read it
    reads_of: dict[str, set[str]] = {}  # node -> what it reads
    for node in nodes:
        reads_of[node.get_name()] = set(node.read_names)
        for read in node.read_names:
            readers.setdefault(memory(read), set()).add(node.get_name())
    ordered = []
    for node in nodes:
        name = node.get_name()
        targets = {memory(t) for t in overwritten(node)}
        # a reader of the writer's own result comes after it (chapter 28's wait, which
        # reads a collective and the memory it reduces in place)
        follow = {r for t in targets for r in readers.get(t, ())
                  if r != name and name not in reads_of[r]}  # fmt: skip
        if follow:
            weak = frozenset(WeakDep(r) for r in follow)
            node = dataclasses.replace(node, reads=node.reads | weak)
        ordered.append(node)
    return ordered


@register_fusion_rule(chapter=15)
def reads_where_overwritten(a: BaseSchedulerNode, b: BaseSchedulerNode) -> str | None:
    for first, second in ((a, b), (b, a)):
        for m in filter(mutates_input, first.snodes):
            target, (write,) = m.node.target.name, m.writes
            before = {d.name for d in m.reads if isinstance(d, WeakDep)}
            for member in second.snodes:
                direct = [d for d in member.reads if d.name == target]
                if member.get_name() in before and not direct:
                    return f"{member.get_name()} reads {target} through a view"
                for dep in direct:
                    same = (
                        isinstance(dep, MemoryDep)
                        and dep.index == write.index
                        and not is_indirect(write.index)
                    )
                    if not same:
                        return (
                            f"{member.get_name()} reads {dep}, which "
                            f"{m.get_name()} overwrites at {write.index}"
                        )
    return None
