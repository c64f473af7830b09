# generated from chapters/24_cache.md — edit there

"""Compiled graphs kept on disk, named by everything that decides their code."""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
import json
import sys
from pathlib import Path
from typing import Any

import torch
import triton

from minductor import debug
from minductor.capture import CompiledGraph, graph_caches
from minductor.config import config, log
from minductor.lowering import lowerings
from minductor.pipeline import PIPELINE
from minductor.runtime import (
    WarmUp,
    interpret_mode,
    load_module,
    precompile,
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
    found = [str(t.dtype), str(t.device), list(t.shape), list(t.stride())]
    found.append(t.storage_offset())
    if values and t.numel() <= SMALL:
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            found.append(hashlib.sha256(data.numpy().tobytes()).hexdigest()[:20])
    return found


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _outside(fn: Any) -> str | None:
    """The module of fn, if it is not minductor's."""
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return None if module.split(".")[0] == "minductor" else module


def why_not_kept(shape_env) -> str | None:
    if not config.graph_cache:
        return "the graph cache is off (config.graph_cache)"
    if shape_env is not None:
        return "sizes are symbols, whose guards a graph read back would not add"
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


def graph_key(gm, example_inputs, user_visible) -> str:
    inputs = [_tensor(x, False) if isinstance(x, torch.Tensor) else repr(x)
              for x in example_inputs]  # fmt: skip
    attributes = [_attribute(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    held = [_tensor(t, True) for t in attributes if isinstance(t, torch.Tensor)]
    knobs = {k: v for k, v in vars(config).items() if k not in ("cache_dir", "debug")}
    table = sorted(f"{op} {_name(fn)}" for op, fn in lowerings.items())
    hooks = [f"{s.name} {p.name} {_name(p.fn)}" for s in PIPELINE if s.hook
             for p in s.passes()]  # fmt: skip
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    named = {
        "graph": gm.code,
        "inputs": inputs,
        "held": held,
        "user_visible": None if user_visible is None else list(user_visible),
        "config": {k: repr(v) for k, v in sorted(knobs.items())},
        "compiler": [table, hooks],
        "versions": [torch.__version__, triton.__version__, sys.version],
        "minductor": package_hash(),
        "machine": [gpu, interpret_mode(), torch.backends.cuda.matmul.allow_tf32],
    }
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:32]


def _warm_up(w: WarmUp) -> list:
    return [w.kernel, w.site, [[str(d)[6:], bool(a)] for d, a in w.buffers],
            [int(s) for s in w.sizes], [[k, int(v)] for k, v in w.blocks]]  # fmt: skip


def _from_json(found: list) -> WarmUp:
    kernel, site, buffers, sizes, blocks = found
    buffers = tuple((getattr(torch, d), a) for d, a in buffers)
    return WarmUp(kernel, site, buffers, tuple(sizes), tuple(map(tuple, blocks)))


def _attribute(gm, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), gm)


def _device(gm) -> str:
    """The graph's device: a GPU if any input is on one."""
    found = {str(n.meta["val"].device) for n in gm.graph.nodes if n.op == "placeholder"
             and isinstance(n.meta.get("val"), torch.Tensor)}  # fmt: skip
    return next((d for d in sorted(found) if d.startswith("cuda")), "cpu")


def _path(key: str) -> Path:
    return Path(config.cache_dir) / "graphs" / f"{key}.json"


_refused: set[str] = set()  # directories that refused a write: warned once each
counters: Counter = Counter()  # hits, misses, damaged entries, graphs not kept


class GraphCache:
    def key(self, gm, example_inputs, shape_env, user_visible) -> str | None:
        why = why_not_kept(shape_env)
        if why is not None:
            counters["not kept"] += 1
            log.debug("minductor: graph cache: not kept: %s", why)
            return None
        return graph_key(gm, example_inputs, user_visible)

    def load(self, key: str, gm) -> CompiledGraph | None:
        path = _path(key)
        try:
            entry = json.loads(path.read_text())
            assert entry["key"] == key, "another key inside"
            held = [_attribute(gm, name) for name in entry["held"]]
            module = load_module(entry["source"])
            warm_ups = [_from_json(w) for w in entry["warm_ups"]]
        except (FileNotFoundError, NotADirectoryError):
            counters["miss"] += 1
            log.info("minductor: graph cache miss %s", key[:12])
            return None
        except Exception as error:  # damaged: compiled again, and written over
            counters["damaged"] += 1
            log.warning("minductor: graph cache entry %s is damaged (%s: %s); "
                        "compiling", path, type(error).__name__, error)  # fmt: skip
            return None
        precompile(module, warm_ups, torch.device(entry["device"]))
        counters["hit"] += 1
        log.info("minductor: graph cache hit %s (%d kernels)", key[:12],
                 len(entry["kernel_names"]))  # fmt: skip
        call = debug._in_profiler_range(  # as chapter 22 labels a fresh compile's
            module.call, f"## Call CompiledFxGraph {Path(module.__file__).stem} ##"
        )
        return CompiledGraph(
            entry["source"], module.__file__, entry["kernel_names"],
            entry["fallbacks"], entry["fusion_log"], call, held,
        )  # fmt: skip


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
            "warm_ups": [_warm_up(w) for w in warm_ups],
            "device": _device(gm),
        }  # fmt: skip
        path = _path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(path, json.dumps(entry))
        except OSError as error:
            if str(path.parent) not in _refused:
                _refused.add(str(path.parent))
                log.warning("minductor: graph cache off: cannot write %s: %s",
                            path.parent, error)  # fmt: skip


graph_caches.register(GraphCache(), chapter=24, name="graph_cache")
