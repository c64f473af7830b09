# generated from chapters/06_lowering.md — edit there

from __future__ import annotations

import dataclasses
import logging
import operator
from typing import Any, Callable, Iterator, Sequence

import sympy
import torch
import torch.utils._pytree as pytree
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses.fake_tensor import unset_fake_temporarily

from minductor.config import config
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    FallbackKernel,
    FixedLayout,
    GenericView,
    InputBuffer,
    MultiOutput,
    MultiOutputLayout,
    Pointwise,
    Reduction,
    ReinterpretView,
    TensorBox,
    as_expr,
    as_exprs,
    computed_view,
    origin_nodes_of,
    strided_view,
)
from minductor.ops import ops
from minductor.pipeline import PIPELINE
from minductor.sizevars import SizeVarAllocator

log = logging.getLogger("minductor")
aten = torch.ops.aten
prims = torch.ops.prims

lowerings: dict[Any, Callable[..., Any]] = {}
# run on every reduction just before GraphLowering stores it, as pass(graph, box)
# (chapter 10 adds one)
reduction_passes = PIPELINE["reduction_passes"]
# other ways to store a value the realize policy stores, as pass(graph, node, box);
# each returns whether it stored it (chapters 8 and 12 add one)
store_passes = PIPELINE["store_passes"]


class Unsupported(Exception):
    """Raised by a lowering that declines an op; the op then falls back to ATen."""


# the dtypes our kernels compute with; a lowering declines any other (complex, say)
SUPPORTED_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
}


class CannotCompile(NotImplementedError):
    """Raised for a graph that cannot be compiled at all; it then runs with ATen."""


class UnprovenSize(NotImplementedError):
    """A symbolic size equal to eager's at the hints, not proven equal for all sizes."""


@dataclasses.dataclass(frozen=True)
class Opaque:
    """A graph input that is an object, not a tensor or a number (a process group):
    passed through by its placeholder's name."""

    name: str


def _is_object(value: Any) -> bool:
    fake = torch._library.fake_class_registry.FakeScriptObject
    return isinstance(value, (torch.ScriptObject, fake))


def register_lowering(
    *targets: OpOverload | OpOverloadPacket | Callable,
    graph: bool = False,
    extern: bool = False,  # the op runs a library kernel that reads its inputs stored
):
    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.wants_graph = graph
        fn.extern = extern
        for target in targets:
            if isinstance(target, OpOverloadPacket):
                for name in target.overloads():
                    lowerings[getattr(target, name)] = fn
            else:
                lowerings[target] = fn
        return fn

    return decorator


def _default_dtype(value: Any) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.get_default_dtype()


def constant_box(value, size, dtype, device) -> TensorBox:
    """A tensor of `size` filled with value: the factories and views of chapters 8-10
    build their constants with it."""
    dtype = dtype or _default_dtype(value)
    device = torch.device(device or "cpu")
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {dtype}")
    ranges = as_exprs(size)
    inner_fn = lambda index: ops.constant(value, dtype)  # noqa: E731
    return TensorBox(Pointwise(device, dtype, inner_fn, ranges))


class MixedDeviceError(RuntimeError):
    pass


def _on(value: Any) -> set[torch.device]:
    """The devices of the tensors in a node's value (a tensor, or a tuple of them)."""
    leaves = value if isinstance(value, (tuple, list)) else [value]
    return {t.device for t in leaves if isinstance(t, torch.Tensor)}


# views whose result stays where their input is: idx[:2] of a CPU index is on the CPU
_DEVICE_VIEWS = {
    aten.slice.Tensor, aten.select.int, aten.view.default, aten._unsafe_view.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.expand.default, aten.alias.default,
}  # fmt: skip


def _number_op(node: torch.fx.Node) -> bool:
    """Whether node computes a number from numbers: a 0-dim result on the CPU, of
    0-dim tensors only (a Python float that Dynamo passed in as a tensor, converted)."""
    value = node.meta.get("val")
    if not (isinstance(value, torch.Tensor) and value.dim() == 0):
        return False
    args = [a.meta.get("val") for a in node.all_input_nodes]
    return all(isinstance(a, torch.Tensor) and a.dim() == 0 for a in args)


def _read_on(node: torch.fx.Node, gpus: set[torch.device]) -> bool:
    """Whether every reader of node computes on the GPU, through views of it and
    through arithmetic on numbers whose results it reads."""
    readers = list(node.users)
    return bool(readers) and all(
        r.op == "call_function"
        and (
            _on(r.meta.get("val")) == gpus
            or (r.target in _DEVICE_VIEWS and _read_on(r, gpus))
            or (_number_op(r) and _read_on(r, gpus))
        )
        for r in readers
    )


def _moved_to_device(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> set[str]:
    """CPU inputs that eager would copy to the graph's one GPU: each reader of one
    computes there (a 0-dim tensor read as a number, index tensors)."""
    devices = {t.device for t in inputs if isinstance(t, torch.Tensor)}
    gpus = {d for d in devices if d.type != "cpu"}
    if len(gpus) != 1 or len(devices) == 1:
        return set()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {
        node.name
        for node, value in zip(placeholders, inputs)
        if isinstance(value, torch.Tensor)
        and value.device.type == "cpu"
        and _read_on(node, gpus)
    }


def _check_devices(names: Sequence[str], inputs: Sequence[Any]) -> torch.device | None:
    """The device the graph's kernels run on: its inputs' one GPU, else the CPU."""
    where = {n: t.device for n, t in zip(names, inputs) if isinstance(t, torch.Tensor)}
    gpus = {d for d in where.values() if d.type != "cpu"}
    if len(gpus) > 1:
        listing = ", ".join(f"{n} on {d}" for n, d in where.items())
        raise MixedDeviceError(
            f"minductor compiles a graph for one GPU, but its inputs are on "
            f"several: "
            f"{listing}. Move them to one device before calling the compiled function."
        )
    return next(iter(gpus), None) or next(iter(where.values()), None)


def _no_overlap(size, stride) -> bool:
    """Whether no two elements of a tensor of this size and stride share memory (gaps
    allowed): ordered by stride, each stride passes the last element inside it."""
    reach = 0  # the furthest offset the dimensions so far can reach
    for st, n in sorted((st, n) for n, st in zip(size, stride) if n != 1):
        if st <= reach:
            return False
        reach += st * (n - 1)
    return True


def _graph_value(fx_arg: Any, value: Any) -> torch.Tensor | None:
    """The fake tensor the graph records for an op's argument, if it is the argument
    we hold at this place (same sizes); else None."""
    meta = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor):
        return None
    return meta if tuple(as_exprs(meta.size())) == tuple(value.get_size()) else None


def _same_order(layout: FixedLayout, stride: Sequence[int]) -> bool:
    """Whether a window's memory order is eager's (size-1 dims do not count), with no
    element twice in memory and every stride a number."""
    ours = layout.stride
    if not all(isinstance(s, sympy.Integer) for s in (*layout.size, *ours)):
        return False
    dims = [d for d, n in enumerate(layout.size) if n != 1]
    by_ours = sorted(dims, key=lambda d: int(ours[d]))
    by_eager = sorted(dims, key=lambda d: stride[d])
    return by_ours == by_eager and _no_overlap(layout.size, ours)


def is_dense(size, stride) -> bool:
    """Whether a tensor of this size and stride fills its memory, each element once:
    ordered by stride, each dimension's stride is the product of the sizes inside it.
    Chapter 9 asks it of views."""
    expected = 1
    for st, n in sorted((st, n) for n, st in zip(size, stride) if n != 1):
        if st != expected:
            return False
        expected *= n
    return True


# Hooks for chapter 13, which runs the convolutions of a graph channels-last: a
# graph's layout decision, decide(graph) -> bool, and the memory order a value gets
# when it is realized, rule(graph, value) -> FixedLayout or None.
layout_decisions = PIPELINE["layout_decisions"]
layout_rules = PIPELINE["layout_rules"]


class GraphLowering(torch.fx.Interpreter):
    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        shape_env=None,
        user_visible: range | None = None,  # outputs the caller sees; None: all
    ):
        super().__init__(gm)
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        self.moved_inputs = _moved_to_device(gm, example_inputs)  # `call` copies them
        kept = [(n, x) for n, x in zip(names, example_inputs) if n not in self.moved_inputs]
        self.device = _check_devices([n for n, _ in kept], [x for _, x in kept])
        self.example_inputs = list(example_inputs)
        self.sizevars = (  # Dynamo's symbols, hints and ranges, if sizes are symbolic
            SizeVarAllocator.from_shape_env(shape_env)
            if shape_env is not None
            else SizeVarAllocator()
        )
        self.buffers: list[Buffer] = []
        self.graph_inputs: dict[str, Any] = {}
        self.graph_input_names: list[str] = []
        # a buffer, None, or (dynamic shapes) a size expression such as s0*s1
        self.graph_outputs: list[Buffer | sympy.Expr | None] = []
        self.fallbacks: list[str] = []
        self.fallback_reasons: list[tuple[str, str]] = []  # (op, why): ch. 24
        self.extern_kernels: list[str] = []  # planned vendor calls: mm, attention
        self.constants: dict[str, torch.Tensor] = {}  # tensors the graph holds
        self.copies: dict[tuple, Buffer] = {}  # a buffer laid out anew, by what it holds
        # a buffer stored with zeros past its last dimension, and the sizes it holds
        # (chapter 12's matmul operands)
        self.zero_padded: dict[str, tuple] = {}
        self.current_node: torch.fx.Node | None = None
        # each buffer's origin nodes, by name: what chapter 19 writes above its launch
        self.origin_nodes: dict[str, frozenset[torch.fx.Node]] = {}
        self._names = 0  # how many buffer names were handed out
        self.user_visible = user_visible
        self.layout_opt = any(decide(self) for decide in layout_decisions)


    def layout_for(self, body: Any) -> FixedLayout:
        """The memory order of a body about to be realized: contiguous, unless a rule
        of `layout_rules` picks another."""
        for rule in layout_rules:
            layout = rule(self, body)
            if layout is not None:
                return layout
        return FixedLayout.contiguous(body.device, body.dtype, body.get_size())

    def new_buffer_name(self) -> str:
        name = f"buf{self._names}"
        self._names += 1
        return name

    def register_buffer(self, buf: Buffer) -> None:
        if isinstance(buf, ComputedBuffer) and self._cpu_in_gpu_graph({buf.get_device()}):
            # a kernel compiled for the GPU, handed a CPU pointer, fails at launch
            raise AssertionError(
                f"{buf.name} would be a kernel on the CPU in a graph on {self.device}"
            )
        self.buffers.append(buf)
        # a body lowered by run_node carries its nodes; one built and stored inside a
        # lowering gets the lowering's (see run_node below)
        nodes = origin_nodes_of(getattr(buf, "data", None))
        if not nodes and self.current_node is not None:
            nodes = self.lowering_nodes()
        self.origin_nodes[buf.name] = nodes

    def lower(self) -> GraphLowering:
        self.run(*self.example_inputs)
        return self


    def placeholder(self, target, args, kwargs):
        value = super().placeholder(target, args, kwargs)
        name = self.current_node.name
        self.graph_input_names.append(name)
        if isinstance(value, torch.Tensor):
            if value.dtype not in SUPPORTED_DTYPES:
                log.debug(
                    "input %s has dtype %s; ops on it fall back", name, value.dtype
                )
            layout = FixedLayout.from_tensor(value)
            if name in self.moved_inputs:  # a contiguous copy on the graph's GPU
                layout = FixedLayout.contiguous(self.device, value.dtype, layout.size)
            box = TensorBox(InputBuffer(name, layout))
            self.graph_inputs[name] = box
            return box
        if isinstance(value, torch.SymInt):
            value = as_expr(value)  # a size symbol, bound by the wrapper at run time
        elif _is_object(value):
            value = Opaque(name)  # passed through, by name
        self.graph_inputs[name] = value
        return value

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if not isinstance(value, torch.Tensor):
            return value
        # a 0-dim CPU constant is a scalar to eager, so it lives on the graph's device;
        # any other CPU tensor in a GPU graph stays one, for ATen to copy or compute on
        scalar = value.dim() == 0 or not self._cpu_in_gpu_graph({value.device})
        if value.numel() == 1 and value.dtype in SUPPORTED_DTYPES and scalar:
            # a number traced as a tensor (the 0 of x[mask] = 0): a constant body
            device = self.device if value.dim() == 0 and self.device else value.device
            with unset_fake_temporarily():  # we compile inside Dynamo's fake mode
                number = value.item()
            return constant_box(number, value.shape, value.dtype, device)
        # a real tensor: one more input, which the compiled graph passes itself
        name = self.current_node.name
        self.constants[name] = value
        self.graph_input_names.append(name)
        box = TensorBox(InputBuffer(name, FixedLayout.from_tensor(value)))
        self.graph_inputs[name] = box
        return box


    def call_function(self, target, args, kwargs):
        if target is operator.getitem:
            return args[0][args[1]]
        meta = self.current_node.meta.get("val")
        if isinstance(meta, torch.SymInt):  # arithmetic on sizes: the answer is known
            return as_expr(meta)
        lowering = lowerings.get(target)
        if lowering is None:
            return self.fallback(target, args, kwargs, reason="no lowering")
        if self._cpu_work(meta, args):
            reason = f"computes on the CPU; the graph's kernels run on {self.device}"
            return self.fallback(target, args, kwargs, reason=reason)
        args, kwargs = self._to_graph_device((args, kwargs))
        try:
            graph = (self,) if getattr(lowering, "wants_graph", False) else ()
            result = lowering(*graph, *args, **kwargs)
        except Unsupported as why:
            return self.fallback(target, args, kwargs, reason=str(why))
        except TypeError as why:  # int(s0), or s0 < 4 asked of sympy
            if self.sizevars.shape_env is None:
                raise  # with static sizes this is a bug, not a limitation
            reason = f"needs static sizes: {why}"
            return self.fallback(target, args, kwargs, reason=reason)
        why_not = self._no_kernel_for(result)
        if why_not is not None:  # a CPU constant in a CUDA graph, a complex view
            return self.fallback(target, args, kwargs, reason=why_not)
        return result

    def _cpu_in_gpu_graph(self, devices: set[torch.device]) -> bool:
        """Whether one of devices is the CPU, where the graph's kernels run on a GPU."""
        gpu = self.device is not None and self.device.type != "cpu"
        return gpu and any(d.type == "cpu" for d in devices)

    def _cpu_work(self, meta: Any, args: Any) -> bool:
        """Whether a node computes on the CPU in a GPU graph: its result is there, and
        is not a number (0-dim) made of values already on the GPU, as the 0-dim CPU
        constants are (`get_attr`): those stay numbers in the kernels that read them."""
        if not self._cpu_in_gpu_graph(_on(meta)):
            return False
        if not (isinstance(meta, torch.Tensor) and meta.dim() == 0):
            return True
        boxes = [a for a in pytree.tree_leaves(args) if isinstance(a, TensorBox)]
        return self._cpu_in_gpu_graph({b.get_device() for b in boxes})


    def _to_graph_device(self, value: Any) -> Any:
        """value with each CPU tensor in it copied to the graph's GPU, by ATen: what an
        op computing there reads (eager copies a CPU index or number itself)."""
        if not isinstance(value, TensorBox):
            return pytree.tree_map_only(TensorBox, self._to_graph_device, value)
        if not self._cpu_in_gpu_graph({value.get_device()}):
            return value
        buf = self.realize_viewed(value)
        key = ("device", buf.name)
        if key not in self.copies:
            layout = FixedLayout.contiguous(self.device, buf.get_dtype(), buf.get_size())
            copy = FallbackKernel(
                self.new_buffer_name(),
                layout,
                aten._to_copy.default,
                (buf,),
                dict(device=self.device, memory_format=torch.contiguous_format),
            )
            self.register_buffer(copy)
            self.copies[key] = copy
        return TensorBox(self.copies[key])

    def _no_kernel_for(self, result: Any) -> str | None:
        """Why the graph's kernels could not compute a body in result, if so."""
        for box in result if isinstance(result, tuple) else (result,):
            body = box.data if isinstance(box, TensorBox) else None
            if not isinstance(body, (Pointwise, Reduction, GenericView)):
                continue  # no kernel: a buffer, or a strided view of one
            if body.get_dtype() not in SUPPORTED_DTYPES:
                return f"a body of {body.get_dtype()}"
            device = body.get_device()
            if self.device is not None and device.type != self.device.type:
                return f"computes on {device}; the graph's kernels on {self.device}"
        return None

    def output(self, target, args, kwargs):
        (results,) = args
        if not isinstance(results, (tuple, list)):  # make_fx graphs return one value
            results = (results,)
        nodes = self.current_node.args[0]
        nodes = nodes if isinstance(nodes, (tuple, list)) else (nodes,)
        for k, (value, node) in enumerate(zip(results, nodes)):
            seen = self.user_visible is None or k in self.user_visible
            if isinstance(value, TensorBox) and self.layout_opt and not seen:
                self.graph_outputs.append(value.realize(self))  # saved: as we chose
            elif isinstance(value, TensorBox):
                self.graph_outputs.append(self._as_eager(value, node))
            elif value is None or isinstance(value, (sympy.Expr, Opaque)):
                self.graph_outputs.append(value)
            else:
                raise CannotCompile(f"graph output {value!r} is not a tensor")
        return results


    def _as_eager(self, box: TensorBox, node: Any) -> Buffer:
        """An output in memory, in eager's strides where they are static and no two
        elements share memory."""
        meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not isinstance(meta, torch.Tensor):
            return box.realize(self)
        static = all(type(s) is int for s in meta.stride())
        if not static:  # a value computed now: straight into eager's symbolic strides
            stride = as_exprs(meta.stride())
            if isinstance(box.data, Pointwise) and self._no_overlap_at_hints(
                as_exprs(meta.shape), stride
            ):
                return self.realize_as(box, stride)
            return box.realize(self)
        if not _no_overlap(meta.shape, meta.stride()):
            return box.realize(self)
        window = None if isinstance(box.data, Buffer) else strided_view(box.data)
        if window is not None and _same_order(window.layout, meta.stride()):
            return box.realize(self)  # a window in eager's order: padding allowed
        return self.realize_as(box, as_exprs(meta.stride()))

    def _no_overlap_at_hints(self, size, stride) -> bool:
        """_no_overlap for symbolic sizes, at the symbols' hints; a stride that is 0
        as an expression overlaps at every size."""
        if any(st == 0 and n != 1 for n, st in zip(size, stride)):
            return False
        try:
            hinted = self.sizevars.size_hints((*size, *stride))
        except NotImplementedError:  # a size that depends on the data
            return False
        return _no_overlap(hinted[: len(size)], hinted[len(size) :])


    def realize_as(self, box: TensorBox, stride: tuple[sympy.Expr, ...]) -> Buffer:
        """box in memory with these strides: a value not yet in memory is computed
        straight into them (one kernel); one in memory is copied if its strides
        differ."""
        data = box.data
        if isinstance(data, GenericView) and strided_view(data) is None:
            data = computed_view(data)
        if isinstance(data, Pointwise):
            exact = FixedLayout(data.device, data.dtype, tuple(data.ranges), stride)
            box.data = ComputedBuffer(self.new_buffer_name(), exact, data)
            self.register_buffer(box.data)
            return box.data
        buf = box.realize(self)
        if not isinstance(buf.layout, FixedLayout):
            return buf
        return self.require_strides(buf, stride)

    def _realize_argument(self, box: TensorBox, fx_arg: Any) -> Buffer:
        """A fallback's argument in memory. A value not yet in memory is computed
        straight into the strides the graph gives that argument, so that the exact
        strides asked for below need no copy (a rotary embedding computed into the
        head-major layout attention reads)."""
        if isinstance(box.data, Pointwise) and _graph_value(fx_arg, box) is not None:
            return self._as_eager(box, fx_arg)
        return self.realize_viewed(box)

    def realize_viewed(self, box: TensorBox) -> Buffer:
        """box in memory; a view of a computed value as a window on that value, stored
        in its own memory, where the view has strides (as in eager)."""
        viewed = box
        while isinstance(viewed.data, GenericView):
            viewed = viewed.data.box
        viewed.realize(self)
        return box.realize(self)


    def fallback(self, target, args, kwargs, reason: str, extern=False) -> Any:
        op_name = str(target)
        if not isinstance(target, OpOverload):  # a Python function, a higher-order op
            raise CannotCompile(
                f"minductor cannot compile {op_name}: it has no lowering, and only "
                f"ATen operators can fall back ({reason})"
            )
        if extern:  # planned, not a failure to lower
            self.extern_kernels.append(op_name)
        else:
            log.debug("fallback: %s (%s)", op_name, reason)
            self.fallbacks.append(op_name)
            self.fallback_reasons.append((op_name, reason))

        node = self.current_node

        def realize(a: Any, fx_arg: Any = None) -> Any:
            if isinstance(a, TensorBox):
                return self._realize_argument(a, fx_arg)
            if isinstance(a, (list, tuple)):
                return type(a)(realize(x) for x in a)
            return a

        fx_args = node.args if node is not None else ()
        fx_kwargs = node.kwargs if node is not None else {}
        args = tuple(
            realize(a, fx_args[k] if k < len(fx_args) else None)
            for k, a in enumerate(args)
        )
        kwargs = {k: realize(v, fx_kwargs.get(k)) for k, v in kwargs.items()}
        args, kwargs = self.exact_strides(target, args, kwargs)
        meta = self.current_node.meta.get("val")
        if meta is None:  # run for its effect, an assert say: it returns nothing
            device = self.device or torch.device("cpu")
            call = FallbackKernel(
                self.new_buffer_name(), MultiOutputLayout(device), target, args, kwargs
            )
            self.register_buffer(call)
            return None
        if isinstance(meta, torch.Tensor):
            buf = FallbackKernel(
                self.new_buffer_name(),
                FixedLayout.from_tensor(meta),
                target,
                args,
                kwargs,
            )
            self.register_buffer(buf)
            return TensorBox(buf)
        if isinstance(meta, (list, tuple)) and all(
            isinstance(m, (torch.Tensor, int, torch.SymInt)) or m is None for m in meta
        ):
            device = next(m.device for m in meta if isinstance(m, torch.Tensor))
            parent = FallbackKernel(
                self.new_buffer_name(), MultiOutputLayout(device), target, args, kwargs
            )
            self.register_buffer(parent)
            outputs = []
            for k, m in enumerate(meta):
                if not isinstance(m, torch.Tensor):  # None, or a size the op reports
                    outputs.append(None if m is None else as_expr(m))
                    continue
                out = MultiOutput(
                    self.new_buffer_name(), FixedLayout.from_tensor(m), parent, k
                )
                self.register_buffer(out)
                outputs.append(TensorBox(out))
            return tuple(outputs)
        raise NotImplementedError(f"cannot fall back on {op_name}: it returns {meta!r}")


    def exact_strides(self, target, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Each tensor argument with the strides it has in the graph, unless written."""
        node, schema = self.current_node, target._schema
        names = [a.name for a in schema.arguments]
        written = {
            a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write
        }

        def fix(value, name, fx_arg):
            fixed = isinstance(value, Buffer) and isinstance(value.layout, FixedLayout)
            if name in written or not fixed:
                return value
            meta = _graph_value(fx_arg, value)
            if meta is None:  # not the graph's argument at this place
                return value
            return self.require_strides(value, as_exprs(meta.stride()))

        args = tuple(
            fix(a, names[k] if k < len(names) else None, fx)
            for k, (a, fx) in enumerate(zip(args, node.args))
        )
        kwargs = {k: fix(v, k, node.kwargs.get(k)) for k, v in kwargs.items()}
        return args, kwargs

    def require_strides(self, buf: Buffer, stride: tuple[sympy.Expr, ...]) -> Buffer:
        """buf, or a copy of it with these strides (sizes of 1 do not count)."""
        layout = buf.layout
        if self._cpu_in_gpu_graph({layout.device}):  # made by ATen, eager's strides
            return buf
        pairs = zip(layout.size, layout.stride, stride)
        if all(n == 1 or s == want for n, s, want in pairs):
            return buf
        size = layout.size
        key = ("strides", buf.name, *stride)
        if key in self.copies:  # two convolutions reading one NCHW value: one copy
            return self.copies[key]
        # the copy is named after the value it copies, as a kernel name says
        origins = getattr(getattr(buf, "data", None), "origins", None) or {"clone"}
        body = Pointwise(
            layout.device, layout.dtype, buf.make_loader(), size, frozenset(origins)
        )
        exact = FixedLayout(layout.device, layout.dtype, size, stride)
        copy = ComputedBuffer(self.new_buffer_name(), exact, body)
        self.register_buffer(copy)
        self.copies[key] = copy
        return copy


    def run_node(self, n: torch.fx.Node) -> Any:
        self.current_node = n
        result = super().run_node(n)
        if n.op != "call_function" or n.target is operator.getitem:
            return result
        metas = n.meta.get("val")
        several = isinstance(result, tuple)
        for k, box in enumerate(result if several else (result,)):
            if not isinstance(box, TensorBox):
                continue
            self._check_against_meta(n, box, metas[k] if several else metas)
            self._add_origin(box)
            if isinstance(box.data, Reduction):
                for rewrite in reduction_passes:  # chapter 10: split long rows
                    rewrite(self, box)
                box.realize(self)  # nothing can read a reduction element-wise
            elif isinstance(box.data, Pointwise):
                self._maybe_realize(n, box)
            elif isinstance(box.data, GenericView):  # decide for the viewed value
                viewed = box.data.box
                while isinstance(viewed.data, GenericView):
                    viewed = viewed.data.box
                if isinstance(viewed.data, Pointwise):
                    self._maybe_realize(n, viewed)
        return result


    def _add_origin(self, box: TensorBox) -> None:
        data = box.data
        if isinstance(data, (Pointwise, Reduction)):
            target = self.current_node.target
            name = getattr(target, "__name__", str(target)).split(".")[0]
            data = dataclasses.replace(data, origins=data.origins | {name})
        if isinstance(data, (Pointwise, Reduction, ReinterpretView)):
            nodes = self.lowering_nodes()
        elif isinstance(data, GenericView):  # what it views is looked up when read
            nodes = frozenset({self.current_node})
        else:
            return  # a buffer: register_buffer gave it its nodes
        box.data = dataclasses.replace(data, origin_nodes=data.origin_nodes | nodes)

    def lowering_nodes(self) -> frozenset[torch.fx.Node]:
        """The node being lowered and the nodes its inputs bring into its value."""
        n = self.current_node
        found = {n} if n.op == "call_function" else set()
        for arg in n.all_input_nodes:
            for value in pytree.tree_leaves(self.env.get(arg)):
                found |= origin_nodes_of(value)
        return frozenset(found)

    def realize_intermediate(self, box: TensorBox) -> Buffer:
        """Store a value that a lowering goes on to read (a graph=True lowering)."""
        self._add_origin(box)
        if isinstance(box.data, Reduction):
            for rewrite in reduction_passes:  # as run_node does for a node's result
                rewrite(self, box)
        return box.realize(self)


    def _check_against_meta(self, n: torch.fx.Node, box: TensorBox, meta) -> None:
        if not isinstance(meta, torch.Tensor):
            return
        size, expected = box.get_size(), as_exprs(meta.shape)
        settle = self.sizevars.settle_min_max  # Max(0, s0) is s0 for a size s0 >= 0
        same = len(size) == len(expected) and all(
            sympy.expand(settle(a) - b) == 0 for a, b in zip(size, expected)
        )
        if same and box.get_dtype() == meta.dtype:
            return
        hints = self.sizevars.size_hints
        if box.get_dtype() == meta.dtype and len(size) == len(expected):
            if hints(size) == hints(expected):  # equal for these sizes, maybe not all
                raise UnprovenSize(
                    f"cannot prove that {n.target}'s size {list(size)} is eager's "
                    f"{list(expected)}"
                )
        raise AssertionError(
            f"lowering of {n.target} produced {box.get_dtype()} {list(size)}, "
            f"but eager produces {meta.dtype} {list(meta.shape)}"
        )

    def _maybe_realize(self, n: torch.fx.Node, box: TensorBox) -> None:
        counts = box.data.count_ops()
        heavy = (
            counts.count > config.realize_opcount_threshold
            or counts.reads > config.realize_reads_threshold
        )
        stored = counts.reads > 0 and stored_anyway(n)
        several = len(n.users) > 1
        too_big = counts.count > config.inline_opcount_limit
        if (several and (heavy or stored)) or too_big:
            if not any(store(self, n, box) for store in store_passes):
                box.realize(self)


def stored_anyway(n: torch.fx.Node) -> bool:
    """Whether a reader of n's value needs it in memory (an extern kernel or a
    fallback), directly or through views of it. Chapter 8 asks it before copying."""
    return any(
        r.op == "call_function"
        and r.target is not operator.getitem
        and getattr(lowerings.get(r.target), "extern", True)  # no lowering: a fallback
        for r in readers(n)
    )


def readers(n: torch.fx.Node) -> Iterator[torch.fx.Node]:
    """The nodes that read n's value, looking through the views of it."""
    for user in n.users:
        if user.op == "call_function" and user.target in VIEW_TARGETS:
            yield from readers(user)
        else:
            yield user


VIEW_TARGETS = _DEVICE_VIEWS | {
    aten.permute.default, aten.transpose.int, aten.t.default, aten.reshape.default,
    aten.squeeze.default, aten.squeeze.dims,
}  # fmt: skip
