# generated from chapters/27_cache.md — edit there

"""Compiled graphs kept on disk, named by everything that decides their code."""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import os
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import sympy
import torch
import torch._functorch.config
import triton
from torch._functorch._aot_autograd.schemas import MutationType, OutputType
from torch.autograd.function import once_differentiable

from minductor import debug
from minductor.capture import (
    CompiledGraph,
    GraphKind,
    _observers,
    _shape_env,
    aot_caches,
    graph_caches,
)
from minductor.config import config, log
from minductor.lowering import lowerings
from minductor.pipeline import PIPELINE
from minductor.runtime import (
    WarmUp,
    interpret_mode,
    load_module,
    precompile,
    record_name,
    site_record,
    span,
    write_whole,
)

PACKAGE = Path(__file__).parent
SMALL = 4096  # elements: a tensor the graph holds, this small, is named by its values


@functools.lru_cache(maxsize=None)
def package_hash() -> str:
    """A hash of every source file of minductor: an edit anywhere is another key."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:20]


def _tensor(t: torch.Tensor, values: bool) -> list:
    sizes = [*t.shape, "/", *t.stride(), "/", t.storage_offset()]
    found = [str(t.dtype), str(t.device), [_size(s) for s in sizes]]
    if values and t.numel() <= SMALL:
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            found.append(hashlib.sha256(data.numpy().tobytes()).hexdigest()[:20])
    return found


def _size(s) -> int | str:
    return str(s) if isinstance(s, torch.SymInt) else s  # a symbol by its name: s77


def _other(x) -> str:
    """An input that is not a tensor: a number by value, a size by its symbol, an
    object (a process group, passed through) by its type."""
    if isinstance(x, (int, float, bool, str, torch.SymInt)) or x is None:
        return str(x)
    return type(x).__name__


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _outside(fn: Any) -> str | None:
    """The module of fn, if it is not minductor's."""
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return None if module.split(".")[0] == "minductor" else module


def why_not_kept(shape_env) -> str | None:
    if not config.graph_cache:
        return "the graph cache is off (config.graph_cache)"
    if shape_env is not None and not hasattr(shape_env, "produce_guards_expression"):
        return "sizes are symbols, and this torch cannot write their guards down"
    if config.debug:
        return "debug output comes from the stages a graph read back skips"
    if debug.debug_root() is not None or debug._reporters:
        return "a debug folder or explain's report reads the stages"
    if any(found.isEnabledFor(10) for found in debug.artifact_logs.values()):
        return "TORCH_LOGS asks for what the stages print"
    for stage in PIPELINE:
        for p in stage.passes() if stage.hook else []:
            if p.chapter == float("inf") or _outside(p.fn):
                return f"{stage.name} holds {p.name}, from outside the book"
    for op, fn in lowerings.items():
        if _outside(fn):
            return f"the lowering of {op} comes from {_outside(fn)}"
    return None


def compiler_facts() -> dict[str, Any]:
    """What names the compiler itself: its knobs, tables, source and surroundings."""
    knobs = {k: v for k, v in vars(config).items() if k not in ("cache_dir", "debug")}
    table = sorted(f"{op} {_name(fn)}" for op, fn in lowerings.items())
    hooks = [f"{s.name} {p.name} {_name(p.fn)}" for s in PIPELINE if s.hook
             for p in s.passes()]  # fmt: skip
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {
        "config": {k: repr(v) for k, v in sorted(knobs.items())},
        "compiler": [table, hooks],
        "versions": [torch.__version__, triton.__version__, sys.version],
        "minductor": package_hash(),
        "machine": [gpu, interpret_mode(), torch.backends.cuda.matmul.allow_tf32],
    }


def _held(gm) -> list:
    attributes = [_attribute(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    return [_tensor(t, True) for t in attributes if isinstance(t, torch.Tensor)]


def _hash(named: dict) -> str:
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:32]


def graph_key(gm, example_inputs, user_visible) -> str:
    inputs = [_tensor(x, False) if isinstance(x, torch.Tensor) else _other(x)
              for x in example_inputs]  # fmt: skip
    return _hash({
        "graph": gm.code,
        "inputs": inputs,
        "held": _held(gm),
        "user_visible": None if user_visible is None else list(user_visible),
        **compiler_facts(),
    })  # fmt: skip


def _warm_up(w: WarmUp) -> list:
    return [w.kernel, w.site, [[str(d)[6:], bool(a)] for d, a in w.buffers],
            [int(s) for s in w.sizes], [[k, int(v)] for k, v in w.blocks],
            [int(i) for i in w.ints], w.sized]  # fmt: skip


def _from_json(found: list) -> WarmUp:
    kernel, site, buffers, sizes, blocks, ints, sized = found
    buffers = tuple((getattr(torch, d), a) for d, a in buffers)
    return WarmUp(kernel, site, buffers, tuple(sizes), tuple(map(tuple, blocks)),
                  tuple(ints), sized)  # fmt: skip


def _attribute(gm, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), gm)


def _device(gm) -> str:
    """The graph's device: a GPU if any input is on one."""
    found = {str(n.meta["val"].device) for n in gm.graph.nodes if n.op == "placeholder"
             and isinstance(n.meta.get("val"), torch.Tensor)}  # fmt: skip
    return next((d for d in sorted(found) if d.startswith("cuda")), "cpu")


def _path(key: str) -> Path:
    return Path(config.cache_dir) / "graphs" / f"{key}.json"


def launch_records(compiled: CompiledGraph, warm_ups: list[WarmUp]) -> dict:
    """The launch records (chapter 21) of a graph's sites whose binaries torch's
    launcher loaded, each with its .cubin's bytes: the entry needs no other file."""
    module = load_module(compiled.source)  # loaded already: found, not read again
    found = {}
    for w in warm_ups:
        name, record = record_name(w), site_record(getattr(module, w.site), w)
        if record is None or name in found:
            continue
        try:
            cubin = base64.b64encode(Path(record["cubin"]).read_bytes()).decode()
        except OSError:  # Triton's cache emptied under us: this one compiles again
            continue
        found[name] = dict(record, cubin=cubin)
    return found


def _records(kept: dict[str, dict]) -> dict[str, dict]:
    """An entry's launch records, each .cubin in a file named by its hash (written
    whole, where not there already) for torch's launcher to load."""
    found = {}
    for site, record in kept.items():
        cubin = base64.b64decode(record["cubin"], validate=True)
        name = hashlib.sha256(cubin).hexdigest()[:32]
        path = Path(config.cache_dir) / "cubins" / f"{name}.cubin"
        try:
            if not path.is_file() or path.read_bytes() != cubin:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_whole(path, cubin)
        except OSError:  # a disk that refuses: Triton compiles or finds this one
            continue
        found[site] = dict(record, cubin=str(path))
    return found


_refused: set[str] = set()  # directories that refused a write: warned once each
counters: Counter = Counter()  # hits, misses, damaged entries, graphs not kept


class GraphCache:
    def __init__(self):
        # a graph with symbolic sizes, by key: its inputs and Dynamo's ShapeEnv, whose
        # guards the entry keeps (below)
        self.sizes: dict[str, tuple[list, Any]] = {}

    def key(self, gm, example_inputs, shape_env, user_visible) -> str | None:
        why = why_not_kept(shape_env)
        inputs = [x for x in example_inputs if isinstance(x, (torch.Tensor, torch.SymInt))]
        if why is None and shape_env is not None and not all(map(_has_hints, inputs)):
            why = "a size read from the data, with no value to check guards on"
        if why is not None:
            counters["not kept"] += 1
            log.debug("minductor: graph cache: not kept: %s", why)
            return None
        key = graph_key(gm, example_inputs, user_visible)
        if shape_env is not None:
            self.sizes[key] = (inputs, shape_env)
        return key

    def load(self, key: str, gm) -> CompiledGraph | None:
        try:
            compiled = self.read(key, gm)
        except (FileNotFoundError, NotADirectoryError):
            counters["miss"] += 1
            log.info("minductor: graph cache miss %s", key[:12])
            return None
        except GuardsFail as why:  # compiled for other sizes: compiled again
            counters["miss"] += 1
            log.info("minductor: graph cache miss %s: %s", key[:12], why)
            return None
        except Exception as error:  # damaged: compiled again, and written over
            counters["damaged"] += 1
            log.warning("minductor: graph cache entry %s is damaged (%s: %s); "
                        "compiling", _path(key), type(error).__name__, error)  # fmt: skip
            return None
        return self.hit(key, compiled)

    def read(self, key: str, gm, checked: bool = False) -> CompiledGraph:
        """The entry's graph, its kernels compiled ahead; raises if it is not whole.
        `checked`: the caller has checked guards that include the entry's."""
        entry = json.loads(_path(key).read_text())
        assert entry["key"] == key, "another key inside"
        if not checked:
            self.check(key, entry.get("guards"))
        held = [_attribute(gm, name) for name in entry["held"]]
        module = load_module(entry["source"])
        warm_ups = [_from_json(w) for w in entry["warm_ups"]]
        records = _records(entry.get("launches", {}))
        precompile(module, warm_ups, torch.device(entry["device"]), records)
        call = debug._in_profiler_range(  # as chapter 24 labels a fresh compile's
            module.call, f"## Call CompiledFxGraph {Path(module.__file__).stem} ##"
        )
        return CompiledGraph(
            entry["source"], module.__file__, entry["kernel_names"],
            entry["fallbacks"], entry["fusion_log"], call, held, key,
        )  # fmt: skip

    def hit(self, key: str, compiled: CompiledGraph) -> CompiledGraph:
        self.sizes.pop(key, None)
        counters["hit"] += 1
        used["graphs"].add(key)
        log.info("minductor: graph cache hit %s (%d kernels)", key[:12],
                 len(compiled.kernel_names))  # fmt: skip
        debug.trace_output_code(compiled)  # TORCH_TRACE shows a hit's code too
        torch._logging.trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": "minductor_graph_cache_hit", "encoding": "json"},
            payload_fn=lambda: {"key": key, "kernels": compiled.kernel_names},
        )
        return compiled


    def save(self, key: str, gm, compiled: CompiledGraph, warm_ups) -> None:
        targets = {n.name: n.target for n in gm.graph.nodes if n.op == "get_attr"}
        by_id = {id(_attribute(gm, t)): t for t in targets.values()}
        held = [by_id.get(id(t)) for t in compiled.constants]
        if None in held:
            log.debug("minductor: graph cache: not kept: a tensor the graph does not hold")
            return
        entry = {
            "key": key, "source": compiled.source, "held": held,
            "kernel_names": compiled.kernel_names, "fallbacks": compiled.fallbacks,
            "fusion_log": compiled.fusion_log,
            "warm_ups": [_warm_up(w) for w in warm_ups], "device": _device(gm),
            "launches": launch_records(compiled, warm_ups),
        }  # fmt: skip
        try:
            entry["guards"] = self.guards(key)
        except GuardsFail as why:
            counters["not kept"] += 1
            log.debug("minductor: graph cache: not kept: %s", why)
            return
        if keep(_path(key), entry, "graph"):
            used["graphs"].add(key)


    def guards(self, key: str) -> str | None:
        """What the compile assumed about a graph's symbolic sizes, as an expression
        over its inputs (None for static sizes). Raises GuardsFail where the ShapeEnv
        cannot write them over the inputs alone (a backward's size saved from the
        forward, say, has no input to come from): such a graph is not kept."""
        found = self.sizes.pop(key, None)
        if found is None:
            return None
        inputs, shape_env = found
        try:
            return shape_env.produce_guards_expression(inputs)
        except Exception as why:  # noqa: BLE001  (never the compile's failure)
            raise GuardsFail(f"its guards cannot be written down: {why!r}") from why

    def check(self, key: str, guards: str | None) -> None:
        """Raise GuardsFail unless an entry's guards hold for this compile's sizes; if
        they hold, make them Dynamo's, as the compile that wrote the entry did."""
        if guards is None:
            return
        if key not in self.sizes:
            raise GuardsFail("compiled for symbolic sizes, asked for static ones")
        guards_hold(guards, *self.sizes[key])


class GuardsFail(Exception):
    pass


def guards_hold(guards: str, inputs: list, shape_env) -> None:
    """Raise GuardsFail unless the guards hold on these inputs' sizes as numbers; if
    they do, evaluate them again on the symbols, which makes each one Dynamo's."""
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        numbers = [_hinted(x) for x in inputs]
    if not shape_env.evaluate_guards_expression(guards, numbers):
        raise GuardsFail("its guards do not hold for these sizes")
    # (`and` hands back its last operand unevaluated: bool() evaluates that one too)
    if not bool(shape_env.evaluate_guards_expression(guards, inputs)):
        raise GuardsFail("its guards do not hold for these sizes")


def _has_hints(x) -> bool:
    sizes = [x] if isinstance(x, torch.SymInt) else [*x.shape, *x.stride()]
    return all(s.node.hint is not None for s in sizes if isinstance(s, torch.SymInt))


def _hinted(x):
    """x with numbers for sizes: a SymInt's value in this trace, and for a tensor, a
    meta tensor (no memory) of its layout."""
    def value(s):
        return s.node.hint if isinstance(s, torch.SymInt) else s

    if isinstance(x, torch.SymInt):
        return value(x)
    size, stride = [value(s) for s in x.shape], [value(s) for s in x.stride()]
    offset = value(x.storage_offset())
    memory = torch.empty(offset + span(size, stride), dtype=x.dtype, device="meta")
    return memory.as_strided(size, stride, offset)


def keep(path: Path, entry: dict, which: str) -> bool:
    """Write an entry whole; a directory that refuses is warned about once."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps(entry))
        return True
    except OSError as error:
        if str(path.parent) not in _refused:
            _refused.add(str(path.parent))
            log.warning("minductor: %s cache off: cannot write %s: %s",
                        which, path.parent, error)  # fmt: skip
        return False


GRAPHS = GraphCache()
graph_caches.register(GRAPHS, chapter=27, name="graph_cache")


def why_not_wired(gm, example_inputs, needs_grad: bool) -> str | None:
    """Why the wiring of a Dynamo graph cannot be kept (None: it can)."""
    if not config.graph_cache:
        return "the graph cache is off (config.graph_cache)"
    tensors = [x for x in example_inputs if not isinstance(x, torch.SymInt)]
    if not all(type(x) in (torch.Tensor, torch.nn.Parameter)
               and x.layout == torch.strided for x in tensors):  # fmt: skip
        return "an input is not a plain dense tensor or a size (a list, a subclass)"
    inputs = symbolic_inputs(gm, example_inputs)
    shape_env = _shape_env(inputs)
    if shape_env is not None and not all(map(_has_hints, inputs)):
        return "a size read from the data, with no value to check guards on"
    storages = [x.untyped_storage()._cdata for x in tensors]
    if len(set(storages)) < len(storages):
        return "two inputs share memory"
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        return "the graph holds parameters of its own"
    if torch._C._is_any_autocast_enabled():
        return "autocast is on"
    return why_not_kept(shape_env)


def symbolic_inputs(gm, example_inputs) -> list:
    """The inputs as Dynamo traced them: a tensor whose sizes are symbols is a fake
    tensor of the placeholder, the real one has numbers."""
    values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    if len(values) != len(example_inputs):
        return list(example_inputs)
    return [v if isinstance(v, (torch.Tensor, torch.SymInt)) else x
            for v, x in zip(values, example_inputs)]  # fmt: skip


def aot_key(gm, example_inputs, needs_grad: bool) -> str:
    traced = torch._functorch.config.get_config_copy()
    inputs = symbolic_inputs(gm, example_inputs)
    return _hash({
        "dynamo graph": gm.code,
        "inputs": [[*_tensor(s, False), x.requires_grad, type(x).__name__]
                   if isinstance(x, torch.Tensor) else _other(s)
                   for x, s in zip(example_inputs, inputs)],  # sizes from s: symbols
        "held": _held(gm),
        "grad": [needs_grad, torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
                 torch.are_deterministic_algorithms_enabled()],
        "aot": sorted((k, repr(v)) for k, v in traced.items()),
        **compiler_facts(),
    })  # fmt: skip


def wiring(meta, forward_gm) -> dict | str:
    """The numbers a plain graph's runtime wrapper needs, or why it is not plain."""
    if meta is None:
        return "no metadata from AOTAutograd"
    extras = ("num_opaque_objects_saved_for_bw", "num_backward_tokens",
              "num_graphsafe_rng_states", "num_intermediate_bases")
    if meta.tokens or any(getattr(meta, name, 0) for name in extras):
        return "effect tokens, saved objects or views of one another among the outputs"
    if getattr(meta, "indices_of_inputs_that_requires_grad_with_mutations_in_bw", []):
        return "the backward changes an input in place"
    plain = (OutputType.non_alias, OutputType.unsafe_view_alias)
    for out in meta.output_info:
        if out.output_type not in plain or not issubclass(out.raw_type, torch.Tensor):
            return f"an output is {out.output_type.name}, not a tensor of its own"
    for inp in meta.input_info:
        if inp.mutates_metadata or inp.mutates_storage_metadata:
            return "an input's sizes or strides change"
        if inp.mutation_type == MutationType.MUTATED_OUT_GRAPH:
            return "an input is written back after the graph"
    outputs = len(meta.output_info)
    placeholders = [n for n in forward_gm.graph.nodes if n.op == "placeholder"]
    results = next(n for n in forward_gm.graph.nodes if n.op == "output").args[0]
    if len(placeholders) != len(meta.input_info):
        return "the forward takes more than the caller's inputs"
    return {
        "inputs": len(meta.input_info),
        "outputs": outputs,
        "differentiable": [bool(o.requires_grad) for o in meta.output_info],
        "unsafe_views": [k for k, o in enumerate(meta.output_info)
                         if o.output_type == OutputType.unsafe_view_alias],
        "saved": len(results) - outputs,
        "unchecked": getattr(meta, "num_tensors_saved_with_no_vc_check", 0) or 0,
        "sizes": getattr(meta, "num_symints_saved_for_bw", 0) or 0,  # saved last
    }


def tangent_layout(t: torch.Tensor) -> list | str | None:
    """A gradient's layout as the backward was compiled for it: sizes and strides as
    numbers, or where they are symbols, the memory format they make (None: neither)."""
    if not any(isinstance(s, torch.SymInt) for s in (*t.shape, *t.stride())):
        return [list(t.shape), list(t.stride())]
    sizes, strides = [_expr(s) for s in t.shape], [_expr(s) for s in t.stride()]
    orders = {"contiguous_format": list(range(t.dim()))}  # outermost dimension first
    if t.dim() == 4:
        orders["channels_last"] = [0, 2, 3, 1]
    for name, order in orders.items():
        expected, step = {}, sympy.Integer(1)
        for d in reversed(order):
            expected[d], step = step, step * sizes[d]
        if all(sympy.expand(strides[d] - expected[d]) == 0
               for d in range(t.dim()) if sizes[d] != 1):  # fmt: skip
            return name
    return None


def _expr(s) -> sympy.Expr:
    """A size as an expression, without asking anything of it (no guard)."""
    return s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(s)


def _as_compiled(grad: torch.Tensor, layout: list | str) -> torch.Tensor:
    if isinstance(layout, str):  # sizes that are symbols: a memory format
        form = getattr(torch, layout)
        return grad.contiguous(memory_format=form)  # grad itself, if laid out so
    size, stride = layout
    if list(grad.shape) == size and list(grad.stride()) == stride:
        return grad
    laid_out = torch.empty_strided(size, stride, dtype=grad.dtype, device=grad.device)
    return laid_out.copy_(grad)


def wired(forward: CompiledGraph, backward: CompiledGraph | None, w: dict):
    if backward is None:
        return lambda *args: list(forward(list(args)))
    n, sizes = w["outputs"], w.get("sizes", 0)

    unchecked, differentiable = w["unchecked"], w["differentiable"]
    # the autograd engine may call the backward from a frame Dynamo is compiling (a
    # loss.backward() inside the compiled function): Dynamo must not trace into it
    backward = torch._dynamo.disable(backward)

    class CompiledStep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            outs = forward(list(args))
            end = len(outs) - sizes  # the sizes the backward needs come last
            saved = [x.detach() if x._is_view() else x for x in outs[n:end]]
            ctx.sizes = outs[end:]
            split = len(saved) - unchecked
            ctx.save_for_backward(*saved[:split])
            ctx.unchecked = saved[split:]
            user = list(outs[:n])
            for k in w["unsafe_views"]:  # views of one another, hidden from autograd
                user[k] = torch.ops.aten._unsafe_view(user[k], user[k].shape)
            ctx.mark_non_differentiable(
                *(o for o, d in zip(user, differentiable) if not d)
            )
            return tuple(user)

        @staticmethod
        @once_differentiable
        def backward(ctx, *grads):
            given = [g for g, d in zip(grads, differentiable) if d]
            tangents = [_as_compiled(g, t) for g, t in zip(given, w["tangents"])]
            saved = [*ctx.sizes, *ctx.saved_tensors, *ctx.unchecked]  # sizes first
            return tuple(backward([*saved, *tangents]))

    return lambda *args: list(CompiledStep.apply(*args))


def _aot_path(key: str) -> Path:
    return Path(config.cache_dir) / "aot" / f"{key}.json"


class AotCache:
    def __init__(self):
        self.sizes: dict[str, tuple] = {}  # as GraphCache.sizes, for Dynamo's graph

    def key(self, gm, example_inputs, needs_grad) -> str | None:
        why = why_not_wired(gm, example_inputs, needs_grad)
        if why is not None:
            counters["aot not kept"] += 1
            log.debug("minductor: aot cache: not kept: %s", why)
            return None
        key = aot_key(gm, example_inputs, needs_grad)
        inputs = symbolic_inputs(gm, example_inputs)
        shape_env = _shape_env(inputs)
        if shape_env is not None:
            self.sizes[key] = (inputs, shape_env)
        return key

    def load(self, key: str, gm):
        path = _aot_path(key)
        try:
            entry = json.loads(path.read_text())
            assert entry["key"] == key, "another key inside"
            keys = [entry["forward"], entry["backward"]]
            w = entry["wiring"]
            guards = entry.get("guards")
            assert (guards is None) == (key not in self.sizes), "guards for no symbols"
        except (FileNotFoundError, NotADirectoryError):
            counters["aot miss"] += 1
            log.info("minductor: aot cache miss %s", key[:12])
            return None
        except Exception as error:
            counters["aot damaged"] += 1
            log.warning("minductor: aot cache entry %s is damaged (%s: %s); tracing",
                        path, type(error).__name__, error)  # fmt: skip
            return None
        try:  # guards over Dynamo's inputs: Dynamo's, AOTAutograd's, both graphs'
            if guards is not None:
                guards_hold(guards, *self.sizes[key])
            # a graph that is gone or damaged: the graph cache will say which
            graphs = [GRAPHS.read(k, None, checked=True) if k else None for k in keys]
        except Exception as error:
            counters["aot miss"] += 1
            why = error if isinstance(error, GuardsFail) else "a graph of it is not whole"
            log.info("minductor: aot cache miss %s (%s)", key[:12], why)
            return None
        self.sizes.pop(key, None)
        for k, graph in zip(keys, graphs):
            if graph is not None:
                GRAPHS.hit(k, graph)
                for found in _observers:
                    found.append(graph)
        counters["aot hit"] += 1
        used["aot"].add(key)
        log.info("minductor: aot cache hit %s (%s)", key[:12],
                 "forward and backward" if keys[1] else "inference")  # fmt: skip
        return wired(graphs[0], graphs[1], w)


    def compiled(self, key: str, info, compiled: CompiledGraph | None) -> None:
        pending = info.shared.setdefault("aot_entry", {})
        if "why" in pending:
            return
        if compiled is None or compiled.cache_key is None or compiled.constants:
            pending["why"] = f"its {info.kind} graph is not kept whole"
        elif info.kind != GraphKind.BACKWARD:
            context = torch._guards.TracingContext.try_get()
            w = wiring(getattr(context, "fw_metadata", None), info.gm)
            if isinstance(w, str):
                pending["why"] = w
            else:
                pending.update(forward=compiled.cache_key, wiring=w, backward=None,
                               sizes=self.sizes.pop(key, None))  # fmt: skip
                if info.kind == GraphKind.INFERENCE:
                    self._save(key, pending)
        elif "wiring" in pending:
            w, inputs = pending["wiring"], list(info.example_inputs)
            tangents = inputs[w["saved"] :]
            names = [n.name for n in info.gm.graph.nodes if n.op == "placeholder"]
            order = [name.startswith("tangents") for name in names]
            results = next(n for n in info.gm.graph.nodes if n.op == "output").args[0]
            layouts = [tangent_layout(t) for t in tangents]
            if order != [k >= w["saved"] for k in range(len(names))] or len(
                tangents
            ) != sum(w["differentiable"]) or len(results) != w["inputs"]:
                pending["why"] = "the backward takes or gives other tensors than these"
            elif None in layouts:
                pending["why"] = "a gradient's layout is symbolic and not a memory format"
            else:
                w["tangents"] = layouts
                pending["backward"] = compiled.cache_key
                self._save(key, pending)
        if "why" in pending:
            counters["aot not kept"] += 1
            log.debug("minductor: aot cache: not kept: %s", pending["why"])

    def _save(self, key: str, pending: dict) -> None:
        parts = ("forward", "backward", "wiring")
        entry = {"key": key, **{k: pending[k] for k in parts}}
        if pending.get("sizes") is not None:  # every guard so far, over Dynamo's inputs
            inputs, shape_env = pending["sizes"]
            try:
                entry["guards"] = shape_env.produce_guards_expression(inputs)
            except Exception as why:  # noqa: BLE001  (never the compile's failure)
                counters["aot not kept"] += 1
                log.debug("minductor: aot cache: not kept: its guards cannot be "
                          "written down: %r", why)  # fmt: skip
                return
        if keep(_aot_path(key), entry, "aot"):
            used["aot"].add(key)


aot_caches.register(AotCache(), chapter=27, name="aot_cache")


used: dict[str, set[str]] = {"graphs": set(), "aot": set()}  # keys read or written


def _triton_dir() -> Path:
    knobs = getattr(getattr(triton, "knobs", None), "cache", None)  # Triton's own
    found = getattr(knobs, "dir", None) or os.environ.get("TRITON_CACHE_DIR")
    return Path(found or Path.home() / ".triton" / "cache")


def _triton_dirs() -> set[Path]:
    """Triton's cache directories of the binaries of every loaded generated module,
    and of every launcher Triton built."""
    from triton.runtime.cache import get_cache_manager
    from triton.runtime.jit import JITFunction

    from minductor.runtime import _modules

    found = {p.parent for p in _triton_dir().glob("*/__triton_launcher*")}
    for module in list(_modules.values()):
        for fn in vars(module).values():
            for caches in getattr(fn, "device_caches", {}).values() if isinstance(
                fn, JITFunction
            ) else ():
                for binary in caches[0].values():
                    found.add(Path(get_cache_manager(binary.hash).cache_dir))
    return found


def _manifest() -> dict:
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"torch": torch.__version__, "triton": triton.__version__,
            "minductor": package_hash(), "gpu": gpu}  # fmt: skip


def save_cache_artifacts() -> tuple[bytes, dict]:
    """The entries this process used, with their kernels' binaries, as one blob."""
    root, files = Path(config.cache_dir), {}
    for kind, keys in used.items():
        for key in sorted(keys):
            files[f"minductor/{kind}/{key}.json"] = root / kind / f"{key}.json"
    for path in sorted((root / "autotune").glob("*.json")):
        files[f"minductor/autotune/{path.name}"] = path
    for folder in sorted(_triton_dirs()):
        for path in sorted(folder.iterdir()):
            files[f"triton/{folder.name}/{path.name}"] = path
    buffer, counts = io.BytesIO(), Counter()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as blob:
        blob.writestr("manifest.json", json.dumps(_manifest()))
        for name, path in files.items():
            if path.is_file():
                blob.write(path, name)
                where, kind = name.split("/")[:2]
                counts[kind if where == "minductor" else "triton"] += 1
    return buffer.getvalue(), dict(counts)


def load_cache_artifacts(data: bytes) -> dict:
    """Write a blob's entries where this process's caches look; what was written."""
    places = {"minductor": Path(config.cache_dir), "triton": _triton_dir()}
    try:  # every entry read (and checked by zip's CRC) before any is written
        with zipfile.ZipFile(io.BytesIO(data)) as blob:
            made = json.loads(blob.read("manifest.json"))
            entries = {name: blob.read(name) for name in blob.namelist()}
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as error:
        log.warning("minductor: cache artifacts are damaged (%s: %s); not loaded",
                    type(error).__name__, error)  # fmt: skip
        return {}
    if made != _manifest():
        log.warning("minductor: cache artifacts made for %s, this is %s; not loaded",
                    made, _manifest())  # fmt: skip
        return {}
    counts = Counter()
    for name, content in entries.items():
        where, *rest = name.split("/")
        if where not in places or len(rest) != 2 or {*rest} & {"", ".", ".."}:
            continue  # the manifest, or a name that would leave the cache
        path = places[where] / rest[0] / rest[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, content)
        counts[rest[0] if where == "minductor" else "triton"] += 1
    return dict(counts)
