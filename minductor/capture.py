# generated from chapters/01_capture.md — edit there

from __future__ import annotations

import contextlib
import functools
import logging
import os
import traceback
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.utils._pytree as pytree
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.exc import TorchDynamoException
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from minductor.config import config, settings
from minductor.decompositions import decomposition_table
from minductor.lowering import CannotCompile, GraphLowering, UnprovenSize
from minductor.pipeline import PIPELINE
from minductor.runtime import interpret_mode, load_module, precompile
from minductor.sizevars import NoHint
from minductor.scheduler import Scheduler
from minductor.wrapper import WrapperCodeGen

log = logging.getLogger("minductor")


@dataclass
class CompiledGraph:
    source: str
    path: str
    kernel_names: list[str]
    fallbacks: list[str]
    fusion_log: list[str]
    call: Callable[[list[Any]], Any] = field(repr=False)
    constants: list[torch.Tensor] = field(default_factory=list, repr=False)
    cache_key: str | None = None  # its name in the graph cache (chapter 27)
    _boxed_call: bool = True

    def __call__(self, args: list[Any]) -> Any:
        if self.constants:  # tensors the graph holds, after the caller's inputs
            args.extend(self.constants)
        return self.call(args)


_observers: list[list[CompiledGraph]] = []
# called as hook(gm, graph, scheduler, wrapper, compiled) for every compiled graph:
# chapter 24 writes debug folders and logs from here
compile_hooks = PIPELINE["compile_hooks"]
# each cache.key(gm, example_inputs, shape_env, user_visible) names a graph (None: this
# one is not kept), cache.load(key, gm) reads it back, cache.save(key, gm, compiled,
# warm_ups) keeps it: chapter 27 keeps compiled graphs on disk
graph_caches = PIPELINE["graph_caches"]


@contextlib.contextmanager
def record_compiled() -> Iterator[list[CompiledGraph]]:
    """Collect every CompiledGraph made inside the block (for tests and the book)."""
    found: list[CompiledGraph] = []
    _observers.append(found)
    try:
        yield found
    finally:
        # by identity: two recorders holding equal lists must not remove each other
        _observers[:] = [o for o in _observers if o is not found]


def _eager(gm: torch.fx.GraphModule, why: str) -> Callable:
    log.info("minductor: running graph with ATen (%s)", why)
    return make_boxed_func(gm.forward)


def _shape_env(example_inputs: Sequence[Any]):
    """Dynamo's ShapeEnv, if any input has a symbolic size; else None."""
    for x in example_inputs:
        sizes = (*x.shape, *x.stride()) if isinstance(x, torch.Tensor) else (x,)
        for s in sizes:
            if isinstance(s, torch.SymInt):
                return s.node.shape_env
    return None


def compile_fx(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    user_outputs: int | None = None,  # a training forward: how many the caller sees
) -> Callable:
    if any(free_unbacked_symbols(x) for x in example_inputs):
        return _eager(gm, "an input's size depends on the data")
    shape_env = _shape_env(example_inputs)
    try:
        return _compile(gm, example_inputs, shape_env, _user_visible(user_outputs))
    except CannotCompile as why:  # an op that is not ATen's, such as with_effects
        return _eager(gm, f"cannot compile: {why}")
    except NoHint as why:  # a size read from the data, needed as a number (chapter 4)
        return _eager(gm, f"a size read from the data: {why}")
    except (TypeError, UnprovenSize) as why:  # int(s0), a size not proven eager's
        if shape_env is None:
            raise  # with static sizes this is a bug, not a limitation
        return _eager(gm, f"dynamic shapes: {why}")


def _compile(gm, example_inputs, shape_env, user_visible=None) -> Callable:
    keys = [(c, c.key(gm, example_inputs, shape_env, user_visible)) for c in graph_caches]
    for cache, key in keys:
        kept = cache.load(key, gm) if key else None
        if kept is not None:
            kept.cache_key = key
            for found in _observers:
                found.append(kept)
            return kept
    for rewrite in aten_passes:
        rewrite(gm)
    graph = GraphLowering(gm, example_inputs, shape_env, user_visible).lower()
    _report_strides(graph)
    device = graph.device or next(
        (b.get_device() for b in graph.buffers), torch.device("cpu")
    )
    if device.type == "cpu" and not interpret_mode():
        return _eager(gm, "CPU tensors while Triton targets the GPU")
    if device.type not in ("cpu", "cuda"):
        return _eager(gm, f"device {device.type} is not supported")
    scheduler = Scheduler(graph)
    wrapper = WrapperCodeGen(graph, scheduler, interpret=device.type == "cpu")
    source = wrapper.generate()
    module = load_module(source)
    precompile(module, wrapper.warm_ups(), device)
    compiled = CompiledGraph(
        source,
        module.__file__,
        list(wrapper.kernels.values()),
        list(graph.fallbacks),
        list(scheduler.fusion_log),
        module.call,
        list(graph.constants.values()),
        next((key for _, key in keys if key), None),
    )
    if config.debug >= 2:
        log.debug("minductor: generated %s\n%s", module.__file__, source)
    for found in _observers:
        found.append(compiled)
    for hook in compile_hooks:
        hook(gm, graph, scheduler, wrapper, compiled)
    for cache, key in keys:
        if key:
            cache.save(key, gm, compiled, wrapper.warm_ups())
    return compiled


def compile_backward(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> Callable:
    # a backward graph is an ATen graph like any other: the saved tensors and the
    # incoming gradients are its inputs, the gradients its outputs
    return compile_fx(gm, example_inputs)


class GraphKind(str, Enum):
    """Which of AOTAutograd's three compilers a graph was handed to."""

    INFERENCE = "inference"  # no backward will be needed
    FORWARD = "forward"  # a training forward: returns what the backward saves too
    BACKWARD = "backward"

    def __str__(self) -> str:  # in an f-string too: the word
        return self.value


@dataclass
class GraphInfo:
    gm: torch.fx.GraphModule
    example_inputs: Sequence[Any]
    kind: GraphKind
    shared: dict[str, Any]  # one per Dynamo graph: its forward and backward share it


# each rewrites Dynamo's graph in place before AOTAutograd traces it: pass(gm,
# example_inputs, needs_backward) (ch. 12 adds one)
graph_passes = PIPELINE["graph_passes"]
# each takes a compiled callable and its GraphInfo, returns the callable to run (ch. 22)
graph_wrappers = PIPELINE["graph_wrappers"]
# each aot_cache.key(gm, example_inputs, needs_grad) names a Dynamo graph (None: not
# kept), .load(key, gm) gives back what AOTAutograd returned for it, and
# .compiled(key, info, compiled) hears of each graph compiled for it: chapter 27
aot_caches = PIPELINE["aot_caches"]
# each may compile a graph in pieces instead; None leaves it whole (ch. 23)
graph_splitters = PIPELINE["graph_splitters"]
# each rewrites an ATen graph in place right before it is lowered (ch. 8, 10, 11)
aten_passes = PIPELINE["aten_passes"]


def _with_settings(
    compiler: Callable, changes: dict[str, Any], kind: GraphKind, shared: dict[str, Any]
) -> Callable:
    def compile_with_settings(gm, example_inputs):
        with config.patch(changes):
            info = GraphInfo(gm, example_inputs, kind, shared)
            for split in graph_splitters:
                if (pieces := split(info)) is not None:
                    _tell_aot_caches(info, None)
                    return pieces
            compiled = run = compiler(gm, example_inputs)
            for wrap in graph_wrappers:
                run = wrap(run, info)
            _tell_aot_caches(info, compiled if run is compiled else None)
            return run

    return compile_with_settings


def _tell_aot_caches(info: GraphInfo, compiled: CompiledGraph | None) -> None:
    """Each aot_cache keeping this Dynamo graph hears of its compiled graph (None: in
    pieces or wrapped, which it cannot keep)."""
    for cache, key in info.shared.get("aot_caches", ()):
        cache.compiled(key, info, compiled if isinstance(compiled, CompiledGraph) else None)


def minductor_backend(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable:
    changes, shared = settings(mode, options), {}
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    forward = functools.partial(
        compile_fx, user_outputs=len(pytree.arg_tree_leaves(*output.args))
    )
    backend = aot_autograd(
        fw_compiler=_with_settings(forward, changes, GraphKind.FORWARD, shared),
        bw_compiler=_with_settings(
            compile_backward, changes, GraphKind.BACKWARD, shared
        ),
        inference_compiler=_with_settings(
            compile_fx, changes, GraphKind.INFERENCE, shared
        ),
        decompositions=decomposition_table(),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,  # copy_ into inputs stays in the graph
    )
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )
    with config.patch(changes):
        for rewrite in graph_passes:
            rewrite(gm, example_inputs, needs_grad)
        keys = [(c, c.key(gm, example_inputs, needs_grad)) for c in aot_caches]
        for cache, key in keys:
            if key and (kept := cache.load(key, gm)) is not None:
                return kept  # no AOTAutograd trace, no compile
        shared["aot_caches"] = [(c, key) for c, key in keys if key]
    try:
        return backend(gm, example_inputs)
    except Exception as error:
        # Dynamo's own signals (restart the analysis, skip the frame) are not failures
        if isinstance(error, TorchDynamoException) or not _raised_in_torch(error):
            raise
        first = (str(error).splitlines() or [""])[0]
        log.warning(
            "minductor: PyTorch could not trace this graph for compiling (%s: %s); "
            "it runs eagerly, op by op", type(error).__name__, first,
        )  # fmt: skip
        return gm.forward


def run_and_get_code(fn: Callable, *args: Any, **kwargs: Any) -> tuple[Any, list[str]]:
    """Run fn (typically a torch.compile'd function); return the generated modules."""
    with record_compiled() as found:
        result = fn(*args, **kwargs)
    return result, [c.source for c in found]


def _user_visible(user_outputs: int | None) -> range | None:
    """The outputs of a training forward that its caller sees: AOTAutograd returns the
    inputs it mutated first, then the model's outputs, then what the backward saves."""
    if user_outputs is None:
        return None  # every output: an inference graph, or a backward
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    start = meta.num_mutated_inp_runtime_indices if meta is not None else 0
    return range(start, start + user_outputs)


def _report_strides(graph: GraphLowering) -> None:
    """Tell AOTAutograd the outputs' strides: it compiles the backward for them."""
    context = torch._guards.TracingContext.try_get()
    reported = getattr(context, "output_strides", None)
    if reported is None:  # not compiling a forward
        return
    for out in graph.graph_outputs:
        stride = getattr(getattr(out, "layout", None), "stride", None)
        static = stride is not None and all(s.is_Integer for s in stride)
        reported.append(tuple(int(s) for s in stride) if static else None)


def _raised_in_torch(error: BaseException) -> bool:
    """Whether error came from PyTorch's own tracing: raised in PyTorch's code, and no
    frame below the backend's is one of ours (the compilers, the lowerings)."""
    ours = os.path.dirname(os.path.abspath(__file__))
    theirs = os.path.dirname(os.path.abspath(torch.__file__))
    frames = traceback.extract_tb(error.__traceback__)[1:]
    files = [os.path.abspath(f.filename) for f in frames]
    return (
        bool(files)
        and files[-1].startswith(theirs)
        and not any(f.startswith(ours) for f in files)
    )
