# generated from chapters/22_cudagraphs.md — edit there

from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._guards import TracingContext
from torch.multiprocessing.reductions import StorageWeakRef

from minductor.capture import CompiledGraph, GraphInfo, GraphKind, graph_wrappers
from minductor.config import config

log = logging.getLogger("minductor")
aten = torch.ops.aten


@dataclass(frozen=True)
class GraphFacts:
    kind: GraphKind
    devices: frozenset[str]  # the device type of every tensor in the graph
    ops: frozenset[Any]  # the ATen overload packets it calls
    static_inputs: frozenset[int]  # parameters and buffers: never copied
    mutated_inputs: frozenset[int]  # inputs the graph writes into
    broadcast_inputs: frozenset[int]  # inputs with a stride 0: elements share memory
    input_bytes: tuple[int, ...]  # bytes of each input (0: not a tensor, or symbolic)
    compiled: bool  # minductor's code (False: the ATen graph runs, chapter 1)


def _nbytes(x: Any) -> int:
    if not isinstance(x, torch.Tensor):
        return 0
    n = x.numel() * x.element_size()
    return n if isinstance(n, int) else 0


def written_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The arguments node writes into (copy_ into an input, index_put_)."""
    schema = getattr(node.target, "_schema", None)
    return [
        arg
        for arg, declared in zip(node.args, schema.arguments if schema else ())
        if declared.alias_info and declared.alias_info.is_write
        and isinstance(arg, torch.fx.Node)
    ]


def graph_facts(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    kind: str,
    static_inputs: frozenset[int] = frozenset(),
    compiled: bool = True,
) -> GraphFacts:
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    position = {node: i for i, node in enumerate(placeholders)}
    devices, ops, mutated = set(), set(), set()
    for node in gm.graph.nodes:
        for value in pytree.tree_leaves(node.meta.get("val")):
            if isinstance(value, torch.Tensor):
                devices.add(value.device.type)
        if node.op != "call_function":
            continue
        ops.add(getattr(node.target, "overloadpacket", node.target))
        for arg in written_args(node):  # copy_(input, new), or add_(input, 1)
            if arg in position:
                mutated.add(position[arg])
    devices |= {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    broadcast = {
        i
        for i, x in enumerate(example_inputs)
        if isinstance(x, torch.Tensor)
        and any(
            isinstance(st, int) and st == 0 and not (isinstance(sz, int) and sz <= 1)
            for sz, st in zip(x.shape, x.stride())
        )
    }
    return GraphFacts(
        kind,
        frozenset(devices),
        frozenset(ops),
        frozenset(static_inputs),
        frozenset(mutated),
        frozenset(broadcast),
        tuple(_nbytes(x) for x in example_inputs),
        compiled,
    )


def static_input_idxs(info: GraphInfo) -> frozenset[int]:
    # a backward's candidates; CUDAGraphed._static keeps the stable ones
    if info.kind is GraphKind.BACKWARD:
        names = [n.name for n in info.gm.graph.find_nodes(op="placeholder")]
        return frozenset(i for i, name in enumerate(names) if "tangents" not in name)
    context = TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None) if context else None
    return frozenset(getattr(metadata, "static_input_indices", None) or ())


UNCAPTURABLE_OPS = {
    aten._local_scalar_dense: "copies a value to the CPU (.item()) and waits for it",
    aten.nonzero: "its output's size depends on the data",
    aten.masked_select: "its output's size depends on the data",
    aten._unique2: "its output's size depends on the data",
    aten.unique_consecutive: "its output's size depends on the data",
    aten.repeat_interleave: "its output's size depends on the data",
}


def check_devices(facts: GraphFacts) -> str | None:
    if len(facts.devices) > 1:
        return f"tensors on more than one device ({', '.join(sorted(facts.devices))})"
    for device in facts.devices:
        if device not in RECORDERS:
            return f"{device} tensors: a CUDA graph records GPU work"
    return None


def check_compiled(facts: GraphFacts) -> str | None:
    return None if facts.compiled else "the graph runs with ATen, not minductor's code"


def check_ops(facts: GraphFacts) -> str | None:
    for op in sorted(facts.ops & UNCAPTURABLE_OPS.keys(), key=str):
        return f"{op}: {UNCAPTURABLE_OPS[op]}"
    return None


def _copied(inputs: frozenset[int], facts: GraphFacts) -> list[int]:
    return sorted(inputs - facts.static_inputs)


def check_mutated_inputs(facts: GraphFacts) -> str | None:
    if found := _copied(facts.mutated_inputs, facts):
        return f"mutates input {found[0]}, which is copied: the copy would change"
    return None


def check_broadcast_inputs(facts: GraphFacts) -> str | None:
    if found := _copied(facts.broadcast_inputs, facts):
        return f"input {found[0]} is broadcast (a stride 0): it cannot be copied"
    return None


SKIP_CHECKS: list[Callable[[GraphFacts], str | None]] = [
    check_devices,
    check_compiled,
    check_ops,
    check_mutated_inputs,
    check_broadcast_inputs,
]


def skip_reason(facts: GraphFacts) -> str | None:
    """Why this graph cannot be recorded as a CUDA graph; None if it can."""
    for check in SKIP_CHECKS:
        if (reason := check(facts)) is not None:
            return reason
    return None


OVERWRITTEN = (
    "Error: accessing a tensor output of CUDA graphs that a later replay has "
    "overwritten. Clone it before the next step, or call "
    "torch.compiler.cudagraph_mark_step_begin() where a step begins."
)


def _mark_step_counter() -> int:
    from torch._inductor import cudagraph_trees

    return cudagraph_trees.MarkStepBox.mark_step_counter


def _alias(t: torch.Tensor) -> torch.Tensor:
    """A new tensor object on t's memory: invalidating it leaves t alone."""
    return t.detach()  # the cheapest new tensor object; set_ on an empty one costs more


def invalidate(t: torch.Tensor) -> None:
    set_error = getattr(torch._C, "_set_storage_access_error_msg", None)
    if set_error is not None:
        set_error(t, OVERWRITTEN)
    else:  # a PyTorch built without CUDA has no such call: empty the tensor instead
        t.set_()


class CUDAGraphPool:
    """One Dynamo graph's pool: its forward's and backward's recordings, and steps."""

    def __init__(self, device_type: str, number: int):
        self.number = number  # "function 0" in the log
        self.handle = RECORDERS[device_type].new_pool()
        self.recordings = 0  # capture order: a recording's index
        self.step = 0
        self.newest_replayed = -1  # the newest recording replayed in this step
        self.pending_backward = False
        self.mark = 0
        self.handed_out: list[tuple[weakref.ref, int]] = []  # (output, its step)
        self.stable: set[int] = set()  # storages at one address: static, or outputs

    def begin_call(self, kind: GraphKind) -> None:
        if kind is GraphKind.BACKWARD:
            return
        mark = _mark_step_counter()
        if mark != 0:  # the program marks its steps
            new_step, self.mark = mark != self.mark, mark
        else:
            new_step = not self.pending_backward
        if new_step:
            self.step += 1
            self.newest_replayed = -1

    def end_call(self, kind: GraphKind) -> None:
        if kind is not GraphKind.INFERENCE:
            self.pending_backward = kind is GraphKind.FORWARD

    def why_not_replay(self, index: int) -> str | None:
        if index > self.newest_replayed:
            return None
        return (
            "its outputs of this step would be overwritten (a backward is pending, or "
            "one step calls it twice: see torch.compiler.cudagraph_mark_step_begin)"
        )


    def replaying(self, index: int) -> None:
        """A replay begins: outputs of earlier steps become errors to touch."""
        kept, gone = [], 0
        for ref, step in self.handed_out:
            t = ref()
            if t is not None and step < self.step:
                invalidate(t)
                gone += 1
            elif t is not None:
                kept.append((ref, step))
        self.handed_out = kept
        if gone:
            log.info(
                "minductor: cudagraphs: step %d of function %d: %d outputs of earlier "
                "steps invalidated", self.step, self.number, gone
            )
        self.newest_replayed = index

    def hand_out(self, outputs: list[Any], owned: list[bool]) -> list[Any]:
        result = [_alias(o) if isinstance(o, torch.Tensor) else o for o in outputs]
        step = self.step  # outputs in the pool (not views of static inputs): tracked
        mine = [o for o, ours in zip(result, owned) if ours]
        self.handed_out += [(weakref.ref(o), step) for o in mine]
        return result


class CUDARecording:
    @staticmethod
    def new_pool() -> Any:
        return torch.cuda.graph_pool_handle()

    def __init__(
        self, call: Callable, placeholders: list[Any], pool: Any, mutates: bool
    ):
        self.graph = torch.cuda.CUDAGraph()
        tensors = [x for x in placeholders if isinstance(x, torch.Tensor)]
        device = tensors[0].device if tensors else torch.cuda.current_device()
        with torch.cuda.device(device):
            torch._C._cuda_clearCublasWorkspaces()  # the warm-up's: see below
            first = list(call(list(placeholders)))  # plain launches
            if not mutates:
                first = None  # a replay computes the outputs: one copy at a time
            torch.cuda.synchronize()
            torch._C._cuda_clearCublasWorkspaces()  # a workspace is pool memory too
            with torch.cuda.graph(self.graph, pool=pool):
                self.outputs = list(call(list(placeholders)))
            torch._C._cuda_clearCublasWorkspaces()
            if first is None:
                self.graph.replay()
                return
            done = set()
            for out, value in zip(self.outputs, first):
                if not torch.is_tensor(out):
                    continue
                storage = out.untyped_storage()
                if storage.data_ptr() not in done | {value.data_ptr()}:
                    done.add(storage.data_ptr())
                    storage.copy_(value.untyped_storage())

    def replay(self, inputs: list[Any], placeholders: list[Any]) -> None:
        self.graph.replay()  # it reads what the recorded addresses hold


class SimulatedRecording:
    """A CPU stand-in: the memory of a CUDA graph, the launches of plain code."""

    @staticmethod
    def new_pool() -> Any:
        return None

    def __init__(
        self, call: Callable, placeholders: list[Any], pool: Any, mutates: bool
    ):
        self.call = call  # holding no input: see the static inputs, below
        self.outputs = list(call(list(placeholders)))

    def replay(self, inputs: list[Any], placeholders: list[Any]) -> None:
        # a graph reads its copied inputs in the placeholders and its static inputs
        # at their addresses, which hold this call's tensors (aliased: see _record)
        args = [
            p if p is not None else _alias(x) if torch.is_tensor(x) else x
            for p, x in zip(placeholders, inputs)
        ]
        fresh = self.call(args)
        for out, new in zip(self.outputs, fresh):
            if isinstance(out, torch.Tensor):
                out.copy_(new)


RECORDERS: dict[str, type] = {"cuda": CUDARecording}


def _placeholder(x: torch.Tensor) -> torch.Tensor:
    copy = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
    return copy.copy_(x)


def _pointers_equal_py(tensors: list[Any], ptrs: list, at: list[int]) -> bool:
    return all(tensors[i].data_ptr() == ptrs[i] for i in at)


# are the tensors at positions `at` still at their addresses `ptrs[i]`? (C++, in a
# torch built with CUDA, for argument lists of tensors and integers only; the same
# loop in Python elsewhere)
_pointers_equal_cpp = getattr(
    torch._C, "_tensors_data_ptrs_at_indices_equal", _pointers_equal_py
)


@dataclass
class Recording:
    index: int  # its place in the pool's capture order
    recorder: Any
    placeholders: list[Any]  # the copied inputs' buffers (None where static)
    static_refs: list[StorageWeakRef]  # the static inputs' memory, held weakly
    held: frozenset[int]  # its addresses
    owned: list[bool]  # which outputs live in the pool
    from_input: list[int | None]  # an output in a placeholder: which input's
    static_at: list[int]  # the static inputs' positions
    pointers: list[int | None]  # their addresses at recording, by position
    copied_at: list[int]  # the copied inputs' positions
    pointers_equal: Callable[..., bool]  # C++ where the arguments allow it


class CUDAGraphed:
    def __init__(
        self,
        compiled: Callable,
        info: GraphInfo,
        pool: CUDAGraphPool,
        static: frozenset[int],
        mutates: bool = True,
        if_stable: frozenset[int] = frozenset(),  # static while in the pool's memory
        name: str = "",
    ):
        self._boxed_call = True  # in __dict__: wrappers copy it (functools.wraps)
        self.compiled, self.kind = compiled, info.kind
        self.pool, self.static, self.if_stable = pool, static, if_stable
        self.mutates = mutates  # it writes into an input: see CUDARecording
        self.name = name or f"{info.kind} of function {pool.number}"
        self.recorder = RECORDERS[next(iter(input_devices(info)), "cuda")]
        self.max_recordings = config.cudagraph_max_recordings
        self.warmed_up: set[tuple] = set()
        self.recordings: dict[tuple, Recording] = {}
        self.said: set[str] = set()
        self.scalar_at = [  # the integer inputs' positions: sizes, seeds
            i for i, x in enumerate(info.example_inputs) if not torch.is_tensor(x)
        ]
        self.by_sizes: dict[tuple, list[Recording]] = {}  # integer inputs -> recordings

    def __call__(self, args: list[Any]) -> Any:
        self.pool.begin_call(self.kind)
        try:
            return self._run(args)
        finally:
            self.pool.end_call(self.kind)


    def _static(self, args: list[Any]) -> frozenset[int]:
        if not self.if_stable:
            return self.static
        return self.static | {
            i
            for i in self.if_stable
            if isinstance(args[i], torch.Tensor)
            and args[i].untyped_storage().data_ptr() in self.pool.stable
        }

    def _key(self, args: list[Any], static: frozenset[int]) -> tuple:
        key = []
        for i, x in enumerate(args):
            if isinstance(x, torch.Tensor):
                where = x.data_ptr() if i in static else None
                key.append((x.dtype, tuple(x.shape), x.stride(), where))
            else:
                key.append(x)
        return tuple(key)

    def _plain(self, args: list[Any], why: str) -> Any:
        if why not in self.said:
            self.said.add(why)
            log.info("minductor: cudagraphs: plain launches for %s: %s", self.name, why)
        return self.compiled(args)

    @staticmethod
    def _matches(recording: Recording, args: list[Any]) -> bool:
        if not recording.pointers_equal(args, recording.pointers, recording.static_at):
            return False
        for i in recording.copied_at:
            x, p = args[i], recording.placeholders[i]
            if x.dtype != p.dtype or x.size() != p.size() or x.stride() != p.stride():
                return False
        return True


    def _run(self, args: list[Any]) -> Any:
        sizes = tuple(args[i] for i in self.scalar_at)
        for recording in self.by_sizes.get(sizes, ()):
            if self._matches(recording, args):
                return self._replay(recording, args)
        static = self._static(args)
        key = self._key(args, static)
        if key not in self.warmed_up:
            self.warmed_up.add(key)
            log.info("minductor: cudagraphs: warm-up of %s", self.name)
            return self.compiled(args)
        self._drop_dead()
        if len(self.recordings) >= self.max_recordings:
            why = (
                f"{self.max_recordings} recordings made, one per input shape "
                "or static input address"
            )
            return self._plain(args, why)
        recording, outputs = self._record(args, static)
        self.recordings[key] = recording
        self.by_sizes.setdefault(sizes, []).append(recording)
        return outputs

    def _drop_dead(self) -> None:
        """Forget the recordings one of whose static inputs was freed: no call can
        pass it again (its address may come back, in a new owner's tensor, but this
        call's did not)."""
        dead = [
            key for key, r in self.recordings.items()
            if any(ref.expired() for ref in r.static_refs)
        ]  # fmt: skip
        for key in dead:
            gone = self.recordings.pop(key)
            for found in self.by_sizes.values():
                found[:] = [r for r in found if r is not gone]
        if dead:
            log.info(
                "minductor: cudagraphs: %s: %d recordings dropped, their static "
                "inputs freed", self.name, len(dead),
            )


    def _replay(self, recording: Recording, args: list[Any]) -> Any:
        if why := self.pool.why_not_replay(recording.index):
            return self._plain(args, why)
        for i in recording.copied_at:
            placeholder, x = recording.placeholders[i], args[i]
            if placeholder.data_ptr() != x.data_ptr():
                placeholder.copy_(x)
        inputs = list(args)
        args.clear()
        self.pool.replaying(recording.index)
        log.debug("minductor: cudagraphs: replay of %s", self.name)
        recording.recorder.replay(inputs, recording.placeholders)
        return self._outputs(recording, inputs)

    def _outputs(self, recording: Recording, inputs: list[Any]) -> list[Any]:
        recorded = recording.recorder.outputs
        outputs = self.pool.hand_out(recorded, recording.owned)
        for n, i in enumerate(recording.from_input):
            if i is not None:  # a copied input or its view: the caller's tensor
                out, x = recorded[n], inputs[i]
                offset = x.storage_offset() + out.storage_offset()
                outputs[n] = x.as_strided(out.size(), out.stride(), offset)
        return outputs


    def _record(
        self, args: list[Any], static: frozenset[int]
    ) -> tuple[Recording, list[Any]]:
        index, self.pool.recordings = self.pool.recordings, self.pool.recordings + 1
        is_static = [
            isinstance(x, torch.Tensor) and i in static for i, x in enumerate(args)
        ]
        placeholders = [
            _placeholder(x) if isinstance(x, torch.Tensor) and not s else None
            for x, s in zip(args, is_static)
        ]
        # a static input may be an output we handed out: call with our own alias of it,
        # which invalidating the caller's tensor leaves alone
        call_args = [
            p if p is not None else _alias(x) if s else x
            for p, x, s in zip(placeholders, args, is_static)
        ]
        storages = [x.untyped_storage() for x, s in zip(args, is_static) if s]
        pointers = [x.data_ptr() if s else None for x, s in zip(args, is_static)]
        inputs = list(args)
        args.clear()
        log.info(
            "minductor: cudagraphs: recording %s (recording %d of this function)",
            self.name, index,
        )
        self.pool.replaying(index)
        recorder = self.recorder(
            self.compiled, call_args, self.pool.handle, self.mutates
        )
        held = {s.data_ptr() for s in storages}
        copied = {
            p.untyped_storage().data_ptr(): i
            for i, p in enumerate(placeholders)
            if p is not None
        }
        where = [
            o.untyped_storage().data_ptr() if isinstance(o, torch.Tensor) else None
            for o in recorder.outputs
        ]
        owned = [w is not None and w not in held and w not in copied for w in where]
        from_input = [copied.get(w) for w in where]
        self.pool.stable |= held | {w for w, ours in zip(where, owned) if ours}
        recording = Recording(
            index, recorder, placeholders, [StorageWeakRef(s) for s in storages],
            frozenset(held), owned, from_input,
            static_at=[i for i, s in enumerate(is_static) if s],
            pointers=pointers,
            copied_at=[i for i, p in enumerate(placeholders) if p is not None],
            pointers_equal=_pointers_equal_cpp
            if all(isinstance(x, (torch.Tensor, int)) for x in inputs)
            else _pointers_equal_py,
        )  # fmt: skip
        return recording, self._outputs(recording, inputs)


def input_devices(info: GraphInfo) -> set[str]:
    return {x.device.type for x in info.example_inputs if isinstance(x, torch.Tensor)}


_numbers = itertools.count()


def function_number(info: GraphInfo) -> int:
    """The number of this Dynamo graph in the log: "function 0"."""
    return info.shared.setdefault("cudagraph_number", next(_numbers))


def shared_pool(info: GraphInfo, number: int, device: str) -> CUDAGraphPool:
    """The pool of this Dynamo graph: made by its forward, shared by its backward."""
    if "cudagraph_pool" not in info.shared:
        info.shared["cudagraph_pool"] = CUDAGraphPool(device, number)
    return info.shared["cudagraph_pool"]


def static_and_stable(info: GraphInfo) -> tuple[frozenset[int], frozenset[int]]:
    """Inputs static always, and inputs static while in the pool's memory: a
    backward's candidates are the second kind."""
    static = static_input_idxs(info)
    if info.kind is GraphKind.BACKWARD:
        return frozenset(), static
    return static, frozenset()


def cudagraphify(compiled: Callable, info: GraphInfo) -> Callable:
    if not config.cudagraphs:
        return compiled
    facts = graph_facts(
        info.gm, info.example_inputs, info.kind, static_input_idxs(info),
        isinstance(compiled, CompiledGraph),
    )
    reason = skip_reason(facts)
    number = function_number(info)
    if reason is not None:
        log.info(
            "minductor: cudagraphs: skipping the %s of function %d: %s",
            info.kind, number, reason,
        )
        return compiled
    pool = shared_pool(info, number, next(iter(facts.devices), "cuda"))
    static, if_stable = static_and_stable(info)
    mutates = bool(facts.mutated_inputs)
    return CUDAGraphed(compiled, info, pool, static, mutates, if_stable)


graph_wrappers.register(cudagraphify, chapter=22)
