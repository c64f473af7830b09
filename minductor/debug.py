# generated from chapters/24_debugging.md — edit there

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch._logging import _internal as torch_logging

from minductor.capture import CompiledGraph, compile_hooks
from minductor.config import config
from minductor.ir import MutationBuffer
from minductor.dependencies import (
    BaseSchedulerNode,
    ExternKernelSchedulerNode,
    FusedSchedulerNode,
)
from minductor.scheduler import Scheduler
from minductor.wrapper import KernelCallLine

log = logging.getLogger("minductor")


def node_str(node: BaseSchedulerNode) -> str:
    """One scheduler node as a paragraph: name, kind, dependencies, body."""

    def deps(found) -> str:
        return ", ".join(sorted(map(repr, found))) or "-"

    if isinstance(node, FusedSchedulerNode):
        members = ", ".join(m.get_name() for m in node.snodes)
        head = f"{node.get_name()}: FusedSchedulerNode({members})"
        return "\n".join([head] + [node_str(m) for m in node.snodes])
    if isinstance(node, ExternKernelSchedulerNode):
        head = f"{node.get_name()}: ExternKernelSchedulerNode"
        return f"{head}\n  {node.node!r}\n  reads: {deps(node.reads)}"
    loops = f"loop {list(node.loop.sizes)}"
    if node.rloop.sizes:
        loops += f", reduction loop {list(node.rloop.sizes)}"
    lines = [
        f"{node.get_name()}: SchedulerNode({type(node.node).__name__})",
        f"  {loops}",
        f"  reads: {deps(node.reads)}",
        f"  writes: {deps(node.writes)}",
    ]
    return "\n".join(lines + ["  " + line for line in node.node.dump().splitlines()])


def ir_str(nodes: list[BaseSchedulerNode]) -> str:
    return "".join(node_str(n) + "\n\n\n" for n in nodes)


def pre_fusion_nodes(graph) -> list[BaseSchedulerNode]:
    """The scheduler's nodes as lowering left them: one per buffer, none fused."""
    return [Scheduler._create(buf) for buf in graph.buffers]


def graph_name() -> str:
    """AOTAutograd's name for the graph being compiled, e.g. model__0_forward_1."""
    from torch._functorch._aot_autograd.logging_utils import get_aot_graph_name

    return get_aot_graph_name()


def debug_root() -> Path | None:
    if config.debug_dir:
        return Path(config.debug_dir)
    if os.environ.get("TORCH_COMPILE_DEBUG", "0") == "1":
        return Path(torch._dynamo.utils.get_debug_dir())
    return None


def new_debug_folder(root: Path, name: str) -> Path:
    for n in itertools.count():
        folder = root / "torchinductor" / f"{name}.{n}"
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:  # an earlier graph of the same name, or a peer process
            continue
    raise AssertionError("unreachable")


def fallbacks_str(graph) -> str:
    lines = [f"fallback {op}: {why}" for op, why in graph.fallback_reasons]
    lines += [f"extern kernel {op}" for op in graph.extern_kernels]
    return "".join(line + "\n" for line in lines) or "none\n"


def debug_files(gm, graph, scheduler, compiled: CompiledGraph) -> dict[str, str]:
    return {
        "fx_graph_readable.py": gm.print_readable(print_output=False),
        "ir_pre_fusion.txt": ir_str(pre_fusion_nodes(graph)),
        "ir_post_fusion.txt": ir_str(scheduler.nodes),
        "fusion_log.txt": "".join(line + "\n" for line in scheduler.fusion_log),
        "fallbacks.txt": fallbacks_str(graph),
        "output_code.py": compiled.source,
    }


def write_debug_folder(gm, graph, scheduler, compiled: CompiledGraph) -> Path | None:
    root = debug_root()
    if root is None:
        return None
    folder = new_debug_folder(root, graph_name())
    for filename, text in debug_files(gm, graph, scheduler, compiled).items():
        (folder / filename).write_text(text)
    log.warning("minductor: %s debug trace: %s", graph_name(), folder)
    return folder


ARTIFACTS = {
    "output_code": "Prints the code that Inductor generates (either Triton or C++)",
    "ir_pre_fusion": "Prints the IR before inductor fusion passes.",
    "ir_post_fusion": "Prints the IR after inductor fusion passes.",
    "fusion": "Detailed Inductor fusion decisions. More detailed than 'schedule'",
}


def _artifact_logger(name: str) -> logging.Logger:
    if name not in torch_logging.log_registry.artifact_names:
        torch_logging.register_artifact(name, ARTIFACTS[name], off_by_default=True)
    return torch_logging.getArtifactLogger("minductor", name)


def register_logs() -> dict[str, logging.Logger]:
    torch_logging.register_log("minductor", "minductor")
    loggers = {name: _artifact_logger(name) for name in ARTIFACTS}
    if os.environ.get("TORCH_LOGS"):
        torch_logging._init_logs()  # handlers for the logs registered just now
    return loggers


artifact_logs = register_logs()


def log_artifacts(gm, graph, scheduler, compiled: CompiledGraph) -> None:
    name = graph_name()
    artifact_logs["ir_pre_fusion"].debug(
        "%s before fusion:\n%s", name, ir_str(pre_fusion_nodes(graph))
    )
    artifact_logs["ir_post_fusion"].debug(
        "%s after fusion:\n%s", name, ir_str(scheduler.nodes)
    )
    for line in scheduler.fusion_log:
        artifact_logs["fusion"].debug("%s: %s", name, line)
    artifact_logs["output_code"].debug("Output code: \n%s", compiled.source)
    artifact_logs["output_code"].debug("Output code written to: %s", compiled.path)


def trace_output_code(compiled: CompiledGraph) -> None:
    torch._logging.trace_structured(
        "inductor_output_code",
        lambda: {
            "filename": compiled.path,
            "file_path": os.path.abspath(compiled.path),
        },
        payload_fn=lambda: compiled.source,
    )


def trace_artifacts(gm, graph, scheduler, compiled: CompiledGraph) -> None:
    trace_output_code(compiled)
    for name, text in (
        ("minductor_fusion_log", "\n".join(scheduler.fusion_log)),
        ("minductor_fallbacks", fallbacks_str(graph)),
    ):
        torch._logging.trace_structured(
            "artifact",
            metadata_fn=lambda name=name: {"name": name, "encoding": "string"},
            payload_fn=lambda text=text: text,
        )


def _in_profiler_range(call: Callable, label: str) -> Callable:
    def call_in_range(args):
        if torch.autograd.profiler._is_profiler_enabled:
            with torch._C._profiler._RecordFunctionFast(label):
                return call(args)
        return call(args)

    return call_in_range


_reporters: list[list[GraphReport]] = []


def on_compiled(gm, graph, scheduler, wrapper, compiled: CompiledGraph) -> None:
    write_debug_folder(gm, graph, scheduler, compiled)
    if any(logger.isEnabledFor(logging.DEBUG) for logger in artifact_logs.values()):
        log_artifacts(gm, graph, scheduler, compiled)
    trace_artifacts(gm, graph, scheduler, compiled)
    stem = Path(compiled.path).stem
    compiled.call = _in_profiler_range(
        compiled.call, f"## Call CompiledFxGraph {stem} ##"
    )
    if _reporters:
        report = graph_report(graph, scheduler, wrapper, compiled)
        for found in _reporters:
            found.append(report)


compile_hooks.register(on_compiled, chapter=24)


@dataclass
class KernelReport:
    name: str
    buffers: tuple[str, ...]  # the buffers it computes, fused into one kernel
    origins: tuple[str, ...]  # the ATen ops they came from
    reads: dict[str, int]  # buffer -> bytes
    writes: dict[str, int]

    @property
    def num_bytes(self) -> int:
        return sum(self.reads.values()) + sum(self.writes.values())

    def __str__(self) -> str:
        def names(d):
            return ", ".join(d) or "-"

        return (
            f"{self.name}: computes {', '.join(self.buffers)} "
            f"(from {', '.join(self.origins) or '-'}); reads {names(self.reads)}; "
            f"writes {names(self.writes)}; {self.num_bytes} bytes"
        )


@dataclass
class GraphReport:
    path: str  # the generated module
    kernels: list[KernelReport]
    fallbacks: list[tuple[str, str]]  # (op, reason)
    extern_kernels: list[str]
    refusals: list[str]  # "cannot fuse a with b: reason", from the fusion log
    name: str = ""


def kernel_report(name, node: BaseSchedulerNode, kernel, scheduler) -> KernelReport:
    written = set()
    for member in node.snodes:
        is_mutation = isinstance(member.node, MutationBuffer)
        written.add(member.node.target.name if is_mutation else member.get_name())
    read = set(node.read_names)
    # what the kernel reads or writes in memory; an output written over an input
    # (chapter 17) is passed once, but both are moved
    args = kernel.call_args + tuple(old for old, _ in kernel.inplace)
    return KernelReport(
        name,
        tuple(m.get_name() for m in node.snodes),
        tuple(sorted(node.origins)),
        {a: scheduler._numbytes(a) for a in args if a in read},
        {a: scheduler._numbytes(a) for a in args if a in written},
    )


def graph_report(graph, scheduler, wrapper, compiled: CompiledGraph) -> GraphReport:
    calls = [line for line in wrapper.lines if isinstance(line, KernelCallLine)]
    fused = [n for n in scheduler.nodes if not n.is_extern()]
    assert len(calls) == len(fused), "one kernel call per kernel node"
    kernels = [
        kernel_report(line.kernel_name, node, line.kernel, scheduler)
        for line, node in zip(calls, fused)
    ]
    # the fusion loop runs in rounds and may refuse a pair in each: once is enough
    refusals = [x for x in scheduler.fusion_log if x.startswith("cannot fuse")]
    refusals = list(dict.fromkeys(refusals))
    return GraphReport(
        compiled.path,
        kernels,
        list(graph.fallback_reasons),
        list(graph.extern_kernels),
        refusals,
        graph_name(),
    )


@dataclass
class Explanation:
    graph_count: int
    break_reasons: list[str]
    graphs: list[GraphReport] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.graph_count} graph(s), {len(self.break_reasons)} break(s)"]
        lines += [f"  break: {why}" for why in self.break_reasons]
        for g in self.graphs:
            lines.append(f"{g.name or 'graph'}: {len(g.kernels)} kernel(s)")
            lines += [f"  fallback {op}: {why}" for op, why in g.fallbacks]
            lines += [f"  extern kernel {op}" for op in g.extern_kernels]
            lines += [f"  {k}" for k in g.kernels]
            lines += [f"  {why}" for why in g.refusals]
        return "\n".join(lines)


def _break_reason(reason: Any) -> str:
    frames = getattr(reason, "user_stack", None) or []
    where = ""
    if frames:
        last = frames[-1]
        where = f" ({Path(last.filename).name}:{last.lineno})"
    # Dynamo's reasons run to paragraphs: the first line, and its explanation
    lines = [x.strip() for x in str(getattr(reason, "reason", reason)).splitlines()]
    why = [lines[0]] + [x for x in lines if x.startswith("Explanation:")]
    return " ".join(why) + where


def explain(fn: Callable, *args: Any, **kwargs: Any) -> Explanation:
    """Print and return what Dynamo and minductor did with fn(*args, **kwargs)."""
    dynamo = torch._dynamo.explain(fn)(*args, **kwargs)
    torch._dynamo.reset()
    reports: list[GraphReport] = []
    _reporters.append(reports)
    try:
        torch.compile(fn, backend="minductor")(*args, **kwargs)
    finally:
        _reporters[:] = [r for r in _reporters if r is not reports]
    result = Explanation(
        dynamo.graph_count,
        [_break_reason(r) for r in dynamo.break_reasons],
        reports,
    )
    print(result)
    return result
