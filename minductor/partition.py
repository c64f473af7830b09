# generated from chapters/23_partition.md — edit there

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from functorch.compile import make_boxed_func
from torch._guards import TracingContext
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from minductor.capture import (
    CompiledGraph,
    GraphInfo,
    aten_passes,
    compile_fx,
    graph_splitters,
)
from minductor.config import config
from minductor.cudagraphs import (
    RECORDERS,
    UNCAPTURABLE_OPS,
    CUDAGraphed,
    CUDAGraphPool,
    function_number,
    graph_facts,
    input_devices,
    shared_pool,
    skip_reason,
    static_and_stable,
    written_args,
)

log = logging.getLogger("minductor")


SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def why_outside(node: torch.fx.Node) -> str | None:
    """Why a recording cannot hold this node of an ATen graph; None if it can."""
    if node.op != "call_function":
        return None
    packet = getattr(node.target, "overloadpacket", node.target)
    if packet in UNCAPTURABLE_OPS:
        return f"{packet}: {UNCAPTURABLE_OPS[packet]}"
    read = [p.meta.get("val") for p in node.all_input_nodes]
    for value in pytree.tree_leaves([read, node.meta.get("val")]):
        if isinstance(value, torch.Tensor) and value.device.type not in RECORDERS:
            return f"{node.target}: {value.device.type} tensors"
    if node.meta.get("unbacked_bindings"):
        return f"{node.target}: its output's size depends on the data"
    for value in read:
        if isinstance(value, SYMBOLIC) and free_unbacked_symbols(value):
            return f"{node.target}: reads a number computed from the data"
    return None


@dataclass
class Piece:
    nodes: list[torch.fx.Node]
    reason: str | None  # why it runs outside a recording; None: it is recorded
    inputs: list[torch.fx.Node] = field(default_factory=list)  # made before it
    outputs: list[torch.fx.Node] = field(default_factory=list)  # read after it


def _launches(node: torch.fx.Node) -> bool:
    """Does the node compute a tensor (not a view, not a size)?"""
    values = pytree.tree_leaves(node.meta.get("val"))
    is_view = getattr(node.target, "is_view", False) or node.target is operator.getitem
    return not is_view and any(isinstance(v, torch.Tensor) for v in values)


def _readers(value: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read value, directly or through views of it."""
    found = []
    for user in value.users:
        found.append(user)
        if getattr(user.target, "is_view", False):
            found += _readers(user)
    return found


def plan_pieces(gm: torch.fx.GraphModule) -> list[Piece]:
    """The graph's computing nodes in pieces, in the order they run."""
    level: dict[torch.fx.Node, int] = {}
    reason: dict[torch.fx.Node, str | None] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        made = [p for p in node.all_input_nodes if p in level]
        for written in written_args(node):  # after all that reads the old value
            made += [r for r in _readers(written) if r in level and r is not node]
        if node.target is operator.getitem and made:  # one result of its source
            reason[node], level[node] = reason[made[0]], level[made[0]]
            continue
        reason[node] = why_outside(node)
        outside = reason[node] is not None
        after = [level[p] + (outside and reason[p] is None) for p in made]
        level[node] = max(after, default=0)
    groups: dict[tuple[int, bool], list[torch.fx.Node]] = {}
    for node in level:  # the graph's order; at each level, the outside piece first
        groups.setdefault((level[node], reason[node] is None), []).append(node)
    pieces = []
    for (_, recorded), nodes in sorted(groups.items()):  # (keys are all different)
        why = None if recorded else next(reason[n] for n in nodes if reason[n])
        if why is None and not any(_launches(n) for n in nodes):
            why = "launches nothing: views and sizes only"
        pieces.append(Piece(nodes, why))
    where = {node: k for k, piece in enumerate(pieces) for node in piece.nodes}
    for k, piece in enumerate(pieces):
        inputs: dict[torch.fx.Node, None] = {}
        for node in piece.nodes:
            inputs.update((p, None) for p in node.all_input_nodes if where.get(p) != k)
            if any(where.get(user) != k for user in node.users):
                piece.outputs.append(node)
        piece.inputs = list(inputs)
    return pieces


def piece_module(gm: torch.fx.GraphModule, piece: Piece) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in piece.inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in piece.nodes:
        env[node] = graph.node_copy(node, env.__getitem__)
    graph.output(tuple(env[node] for node in piece.outputs))
    return torch.fx.GraphModule(gm, graph)


class SplitGraph:
    """A graph run as pieces: recorded ones replay, the others run with ATen."""

    def __init__(self, runs, inputs, constants, outputs, pool: CUDAGraphPool, kind):
        self._boxed_call = True
        self.inputs, self.constants, self.outputs = inputs, constants, outputs
        self.pool, self.kind = pool, kind
        last = {n: k for k, (_, piece) in enumerate(runs) for n in piece.inputs}
        kept = set(outputs)
        self.steps = [  # per piece: how it runs, what it reads and makes, then drops
            (run, piece.inputs, piece.outputs,
             [n for n in piece.inputs if last[n] == k and n not in kept])
            for k, (run, piece) in enumerate(runs)
        ]  # fmt: skip

    def __call__(self, args: list[Any]) -> list[Any]:
        values = dict(self.constants)
        values.update(zip(self.inputs, args))
        args.clear()
        self.pool.begin_call(self.kind)  # one step for all the pieces
        try:
            for run, reads, makes, dead in self.steps:
                values.update(zip(makes, run([values[n] for n in reads])))
                for node in dead:
                    del values[node]
        finally:
            self.pool.end_call(self.kind)
        return [values[o] if isinstance(o, torch.fx.Node) else o for o in self.outputs]


def _recorded(module, examples, info, pool, static, if_stable, name):
    """A piece's callable, recorded if it passes the checks, and its output strides."""
    with TracingContext.report_output_strides() as strides:
        compiled = compile_fx(module, examples)
    facts = graph_facts(
        module, examples, info.kind, static, isinstance(compiled, CompiledGraph)
    )
    if (why := skip_reason(facts)) is not None:
        log.info("minductor: cudagraphs: skipping the %s: %s", name, why)
        return compiled, strides
    piece_info = GraphInfo(module, examples, info.kind, info.shared)
    graphed = CUDAGraphed(
        compiled, piece_info, pool, static, bool(facts.mutated_inputs), if_stable, name
    )
    return graphed._run, strides


def split_for_cudagraphs(info: GraphInfo) -> Callable | None:
    if not (config.cudagraphs and config.cudagraph_split):
        return None
    gm = info.gm
    for rewrite in aten_passes:  # chapter 8's moves CPU factories to the GPU
        rewrite(gm)
    pieces = plan_pieces(gm)
    if all(p.reason for p in pieces) or not any(p.reason for p in pieces):
        return None  # recorded whole, or not at all: cudagraphify decides and says
    number = function_number(info)
    device = next(iter(input_devices(info) & RECORDERS.keys()), "cuda")
    pool = shared_pool(info, number, device)
    inputs = list(gm.graph.find_nodes(op="placeholder"))
    static, stable = ({inputs[i] for i in at} for at in static_and_stable(info))
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outputs = list(pytree.arg_tree_leaves(*output.args))
    constants = {n: getattr(gm, n.target) for n in gm.graph.find_nodes(op="get_attr")}
    known = {**dict(zip(inputs, info.example_inputs)), **constants}
    runs, reported, recorded = [], {}, 0
    for k, piece in enumerate(pieces):
        module = piece_module(gm, piece)
        if piece.reason is not None:
            runs.append((make_boxed_func(module.forward), piece))
            continue
        at = {n: i for i, n in enumerate(piece.inputs)}
        run, strides = _recorded(
            module, [known.get(n, n.meta.get("val")) for n in piece.inputs], info, pool,
            frozenset(at[n] for n in static if n in at),
            frozenset(at[n] for n in stable if n in at),
            f"{info.kind} of function {number}, piece {k}",
        )  # fmt: skip
        runs.append((run, piece))
        reported.update(zip(piece.outputs, strides or ()))
        recorded += isinstance(getattr(run, "__self__", None), CUDAGraphed)
    context = TracingContext.try_get()
    if getattr(context, "output_strides", None) is not None:  # a forward's
        context.output_strides.extend(reported.get(o) for o in outputs)
    log.info(
        "minductor: cudagraphs: the %s of function %d runs in %d pieces, %d recorded; "
        "outside: %s", info.kind, number, len(pieces), recorded,
        "; ".join(dict.fromkeys(p.reason for p in pieces if p.reason)),
    )  # fmt: skip
    return SplitGraph(runs, inputs, constants, outputs, pool, info.kind)


graph_splitters.register(split_for_cudagraphs, chapter=23)
