# generated from chapters/14_dependencies.md — edit there

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import NamedTuple

import sympy
import torch

from minductor.config import config
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    FallbackKernel,
    MultiOutput,
    Scan,
)
from minductor.ops import NullHandler, set_handler
from minductor.sizevars import (
    UNBACKED_FALLBACK,
    SimplifiedLoop,
    SizeVarAllocator,
    index_vars,
    loop_order,
    product,
    simplify_loops,
)

log = logging.getLogger("minductor")


@dataclass(frozen=True)
class MemoryDep:
    name: str
    index: sympy.Expr

    def __repr__(self) -> str:
        return f"{self.name}[{self.index}]"


@dataclass(frozen=True)
class StarDep:
    name: str

    def __repr__(self) -> str:
        return f"{self.name}[*]"


@dataclass(frozen=True)
class WeakDep:
    """Run after node `name`, without reading its memory (chapter 15, "Mutations")."""

    name: str

    def __repr__(self) -> str:
        return f"after {self.name}"


Dep = MemoryDep | StarDep | WeakDep


class RecordingHandler(NullHandler):
    def __init__(self):
        self.loads: list[tuple[str, sympy.Expr]] = []
        self.stores: list[tuple[str, sympy.Expr]] = []

    def load(self, name, index):
        self.loads.append((name, index))

    def store(self, name, index, value, mode=None):
        self.stores.append((name, index))

    def store_reduction(self, name, index, value):
        self.stores.append((name, index))


def is_indirect(index: sympy.Expr) -> bool:
    """Does the index use a value read from memory (chapter 3's `indirect0`, …)?"""
    return any(s.name.startswith("indirect") for s in index.free_symbols)


class Group(NamedTuple):
    """The coarse key for fusion: where a kernel runs and how many elements it visits,
    numel outputs times rnumel reduced elements each (1 for a pointwise node)."""

    device: torch.device
    numel: sympy.Expr
    rnumel: sympy.Expr


class BaseSchedulerNode:
    reads: frozenset[Dep]
    writes: frozenset[Dep]

    def get_name(self) -> str:
        raise NotImplementedError

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """The buffers the node writes."""
        return frozenset(d.name for d in self.writes)

    @functools.cached_property
    def read_names(self) -> frozenset[str]:
        return frozenset(d.name for d in self.reads if not isinstance(d, WeakDep))

    @functools.cached_property
    def dep_names(self) -> frozenset[str]:
        """What must run first: what the node reads, and the nodes it must follow."""
        return frozenset(d.name for d in self.reads)

    def is_extern(self) -> bool:
        return False


@dataclass(frozen=True, eq=False)
class SchedulerNode(BaseSchedulerNode):
    node: ComputedBuffer
    index_vars: tuple[sympy.Symbol, ...]
    rindex_vars: tuple[sympy.Symbol, ...]  # empty unless the node is a reduction
    loop: SimplifiedLoop
    rloop: SimplifiedLoop
    reads: frozenset[Dep]
    writes: frozenset[Dep]
    loop_indices: tuple[sympy.Expr, ...] = ()  # the indices its loops were merged for
    order: tuple[int, ...] | None = None  # its dims, outermost first, as it walks them

    @staticmethod
    def create(
        node: ComputedBuffer, cut: int | None = None, joint: tuple[sympy.Expr, ...] = ()
    ) -> SchedulerNode:
        """`cut` splits a pointwise node's dims into outputs and a reduced-like tail;
        `joint` are other nodes' indices over the same dims, which its loops must suit
        too."""
        size = node.data.ranges  # a scatter loops over its index, not its output
        if node.is_reduction():
            xsizes, rsizes = size, node.data.reduction_ranges
        elif cut is None:
            xsizes, rsizes = size, ()
        else:
            xsizes, rsizes = size[:cut], size[cut:]
        variables = tuple(index_vars(len(xsizes)))
        rvariables = tuple(index_vars(len(rsizes), "r"))
        recorder = RecordingHandler()
        with set_handler(recorder):
            _run_body(node, variables, rvariables)
        ranges = tuple(zip(variables + rvariables, tuple(xsizes) + tuple(rsizes)))
        indices = [simplify_index(i, ranges) for _, i in recorder.loads + recorder.stores]
        stores = [simplify_index(i, ranges) for _, i in recorder.stores]
        order = None  # walk the dims as the one store lays them out (chapter 4)
        if cut is None and len(stores) == 1:
            order = loop_order(stores[0], variables)
        indices = [*indices, *joint]
        loop = simplify_loops(xsizes, variables, indices, order=order)
        rloop = simplify_loops(rsizes, rvariables, indices, prefix="r")
        bare = SchedulerNode(
            node, variables, rvariables, loop, rloop, frozenset(), frozenset(),
            tuple(dict.fromkeys(indices)), order,
        )  # fmt: skip

        def deps(found):
            return frozenset(MemoryDep(n, bare.rewrite_index(i)) for n, i in found)

        # a buffer read as a whole (a scatter's target, a matmul's operands): all of it
        reads = deps(recorder.loads) | {StarDep(n) for n in node.whole_reads()}
        return dataclasses.replace(bare, reads=reads, writes=deps(recorder.stores))


    def run_body(self) -> None:
        """Run the body under the current handler, with this node's variables."""
        _run_body(self.node, self.index_vars, self.rindex_vars)

    def split(self, numel: sympy.Expr, rnumel: sympy.Expr) -> SchedulerNode | None:
        """This pointwise node iterating as numel outputs x rnumel, if dims allow."""
        if self.is_reduction():
            return None
        size = self.node.layout.size
        for cut in range(len(size) + 1):
            if product(size[:cut]) == numel and product(size[cut:]) == rnumel:
                return SchedulerNode.create(self.node, cut)
        return None

    def rewrite_index(self, index: sympy.Expr) -> sympy.Expr:
        """An index over this node's variables, in the merged x and r variables."""
        ranges = tuple(
            zip(
                self.index_vars + self.rindex_vars,
                self.loop.original_sizes + self.rloop.original_sizes,
            )
        )
        index = simplify_index(index, ranges)
        merged = self.loop.rewrite(index, self.index_vars)
        return self.rloop.rewrite(merged, self.rindex_vars)

    def is_reduction(self) -> bool:
        return self.node.is_reduction()

    def get_name(self) -> str:
        return self.node.name

    @property
    def snodes(self) -> tuple[SchedulerNode, ...]:
        return (self,)

    @property
    def group(self) -> Group:
        return Group(
            self.node.get_device(), product(self.loop.sizes), product(self.rloop.sizes)
        )

    @property
    def origins(self) -> frozenset[str]:
        return self.node.origins

    def __repr__(self) -> str:
        sizes = f"sizes={list(self.loop.sizes)}"
        if self.is_reduction():
            sizes += f", rsizes={list(self.rloop.sizes)}"
        return f"SchedulerNode({self.get_name()}, {sizes})"


def after_loop_value(node: SchedulerNode) -> bool:
    """Is node's result computed after a looped kernel's loop (not during it)?"""
    return node.is_reduction() or not node.rloop.sizes


def is_inner_reduction(node: BaseSchedulerNode) -> bool:
    """Do the node's loads walk memory contiguously along the reduced dimension?"""
    for member in node.snodes:
        if not member.rloop.variables:
            continue
        r0 = member.rloop.variables[-1]  # innermost
        for dep in member.reads:
            if isinstance(dep, MemoryDep) and r0 in dep.index.free_symbols:
                if sympy.diff(dep.index, r0) != 1:
                    return False
    return True


def has_scan(node: BaseSchedulerNode) -> bool:
    return any(isinstance(m.node.data, Scan) for m in node.snodes)


def is_persistent(node: BaseSchedulerNode, sizevars=None) -> bool:
    """Does node's kernel hold whole rows in registers, with no loop over them?"""
    if has_scan(node):
        return True
    rnumel = node.group.rnumel
    if is_inner_reduction(node):
        limit = config.persistent_reduction_limit
    else:
        limit = config.outer_persistent_limit
    if _SIZEVARS.statically_known_leq(rnumel, limit):
        return True
    if sizevars is None or sizevars.size_hint(rnumel, UNBACKED_FALLBACK) > limit:
        return False
    try:
        return sizevars.guard_leq(rnumel, limit)  # Dynamo recompiles longer rows
    except NotImplementedError:  # no one to check the guard: loop instead
        return False


_SIZEVARS = SizeVarAllocator()


@functools.lru_cache(maxsize=None)
def simplify_index(index: sympy.Expr, ranges: tuple) -> sympy.Expr:
    """`index` simplified knowing that each (variable, size) in ranges runs over [0, size)."""
    return _SIZEVARS.simplify_with_ranges(index, dict(ranges))


def _run_body(node: ComputedBuffer, variables, rvariables) -> None:
    if node.is_reduction():
        node.store_output(variables, rvariables)
    else:  # a pointwise body split for a reduction kernel takes both as one index
        node.store_output(tuple(variables) + tuple(rvariables))


@dataclass(frozen=True, eq=False)
class ExternKernelSchedulerNode(BaseSchedulerNode):
    node: FallbackKernel | MultiOutput
    reads: frozenset[Dep]
    writes: frozenset[Dep]

    @staticmethod
    def create(node: Buffer) -> ExternKernelSchedulerNode:
        inputs = (
            [node.parent] if isinstance(node, MultiOutput) else node.input_buffers()
        )
        return ExternKernelSchedulerNode(
            node,
            frozenset(StarDep(b.name) for b in inputs),
            frozenset({StarDep(node.name)}),
        )

    def get_name(self) -> str:
        return self.node.name

    def is_extern(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"ExternKernelSchedulerNode({self.get_name()})"


@dataclass(frozen=True, eq=False)
class FusedSchedulerNode(BaseSchedulerNode):
    snodes: tuple[SchedulerNode, ...]

    @staticmethod
    def fuse(a: BaseSchedulerNode, b: BaseSchedulerNode, order: dict[str, int]):
        members = sorted(a.snodes + b.snodes, key=lambda n: order[n.get_name()])
        return FusedSchedulerNode(tuple(members))

    @functools.cached_property  # asked for at every fusion the node is weighed in
    def writes(self) -> frozenset[Dep]:
        return frozenset().union(*(n.writes for n in self.snodes))

    @functools.cached_property
    def reads(self) -> frozenset[Dep]:
        written = self.names
        every = frozenset().union(*(n.reads for n in self.snodes))
        return frozenset(d for d in every if d.name not in written)

    @functools.cached_property
    def name(self) -> str:
        return "_".join(n.get_name() for n in self.snodes)

    def get_name(self) -> str:
        return self.name

    @functools.cached_property
    def leader(self) -> SchedulerNode:
        """The member whose loops the kernel uses: a reduction, if there is one."""
        return max(self.snodes, key=lambda n: (n.is_reduction(), n.group.rnumel))

    @property
    def loop(self) -> SimplifiedLoop:
        return self.leader.loop

    @property
    def rloop(self) -> SimplifiedLoop:
        return self.leader.rloop

    @property
    def group(self) -> Group:
        return self.leader.group

    @property
    def origins(self) -> frozenset[str]:
        return frozenset().union(*(n.origins for n in self.snodes))

    def __repr__(self) -> str:
        return f"FusedSchedulerNode({', '.join(n.get_name() for n in self.snodes)})"
