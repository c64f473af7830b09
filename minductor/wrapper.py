# generated from chapters/19_wrapper.md — edit there

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch

from minductor.codegen_triton import GeneratedKernel, generate_kernel
from minductor.config import config
from minductor.ir import (
    Buffer,
    ComputedBuffer,
    ConcatBuffer,
    ExternKernelOut,
    FallbackKernel,
    FixedLayout,
    MultiOutput,
    MutationBuffer,
    NonOwningLayout,
    ReinterpretBuffer,
    TensorBox,
)
from minductor.lowering import CannotCompile, GraphLowering, Opaque
from minductor.pipeline import PIPELINE
from minductor.runtime import WarmUp, autotune_kernel
from minductor.dependencies import ExternKernelSchedulerNode
from minductor.scheduler import Scheduler
from minductor.sizevars import NoHint, pexpr


def _tuple(exprs) -> str:
    # sizes print as Python: 4, or with dynamic shapes s0*s1 (bound in `call`)
    items = [pexpr(e) for e in exprs]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


@dataclass(frozen=True)
class AllocateLine:
    name: str
    layout: FixedLayout
    on_current_device: bool = True  # `call` runs on the buffer's device (see below)

    def codegen(self) -> str:
        lay = self.layout
        sizes = f"{_tuple(lay.size)}, {_tuple(lay.stride)}"
        if self.on_current_device and lay.device.type in ("cpu", "cuda"):
            # chapter 21: torch's C++ allocator entry, no argument parsing
            allocate = f"empty_strided_{lay.device.type}"
            return f"{self.name} = {allocate}({sizes}, {lay.dtype})"
        return (
            f"{self.name} = empty_strided({sizes}, "
            f"device='{lay.device}', dtype={lay.dtype})"
        )

    def uses(self) -> tuple[str, ...]:
        return ()

    def defines(self) -> tuple[str, ...]:
        return (self.name,)


@dataclass(frozen=True)
class KernelCallLine:
    kernel_name: str
    kernel: GeneratedKernel
    comment: str = ""  # what autotuning chose (chapter 21)
    site: str = ""  # the name of its CallSite, or SizedSite for symbolic sizes
    check: tuple[int, ...] = ()  # the site's buffers whose alignment is not known
    sources: str = ""  # the graph's nodes it computes, as a comment (see below)
    launcher: str = "torch"  # "triton": Triton's own launches it on a GPU (chapter 21)

    def codegen(self) -> str:
        lines = (self.sources, self.comment, self.launch_line())
        return "\n".join(line for line in lines if line)

    def launch_line(self) -> str:
        k = self.kernel
        if self.site and self.static_sizes():  # sizes and blocks bound in the site
            return f"{self.site}({', '.join(self.buffer_args())})"
        args = ", ".join((*self.buffer_args(), *k.size_args))
        numel, rnumel = pexpr(k.numel), pexpr(k.rnumel)
        if self.site:  # the sizes first, then what the kernel's signature takes
            sizes = f"{numel}, {rnumel}" if "RBLOCK" in dict(k.meta) else numel
            return f"{self.site}({sizes}, {args})"
        meta = ", ".join(f"{key}={value}" for key, value in k.meta)
        if k.per_call_blocks == "pointwise":  # symbolic sizes: blocks sized per call
            meta = f"**pointwise_blocks({numel})"
        elif k.per_call_blocks:
            inner = k.per_call_blocks == "inner"
            meta = f"**persistent_blocks({numel}, {rnumel}, inner={inner})"
        if "RBLOCK" in dict(k.meta):  # a reduction: its size goes too
            meta = f"rnumel={rnumel}, {meta}"
        return f"launch({self.kernel_name}, {numel}, {args}, {meta})"

    def buffer_args(self) -> list[str]:
        """The buffers passed, in order: one the kernel reads with the copy engine
        and whose alignment is not known (an input's) through `aligned` (chapter 21)."""
        k = self.kernel
        unknown = set(self.check) if self.site else set(range(len(k.call_args)))
        return [
            f"aligned({name})" if name in k.copy_engine and i in unknown else name
            for i, name in enumerate(k.call_args)
        ]


    def uses(self) -> tuple[str, ...]:
        return self.kernel.call_args

    def defines(self) -> tuple[str, ...]:
        return ()

    def static_sizes(self) -> tuple[int, ...] | None:
        """xnumel (and rnumel for a reduction) if they are numbers, xnumel not 0, and
        the blocks fixed: a launch a CallSite can make; None otherwise."""
        k = self.kernel
        if k.size_args or k.per_call_blocks:
            return None
        sizes = (k.numel, k.rnumel) if "RBLOCK" in dict(k.meta) else (k.numel,)
        if not all(isinstance(n, (int, sympy.Integer)) for n in sizes):
            return None
        return tuple(int(n) for n in sizes) if int(sizes[0]) != 0 else None

    def site_definition(self) -> str:
        k = self.kernel
        meta = ", ".join(f"{key}={value}" for key, value in k.meta)
        own = ", launcher='triton'" if self.launcher == "triton" else ""
        if self.static_sizes() is None:  # symbolic sizes: a SizedSite (chapter 21)
            return (
                f"{self.site} = SizedSite({self.kernel_name}, {len(k.call_args)}, "
                f"per_call={k.per_call_blocks!r}, check={self.check}, {meta}{own})"
            )
        scratch = ", scratch=True" if k.copy_engine else ""  # chapter 26's template
        return (
            f"{self.site} = CallSite({self.kernel_name}, {self.static_sizes()}, "
            f"{meta}, check={self.check}{scratch}{own})"
        )


def codegen_arg(a: Any) -> str:
    if isinstance(a, (Buffer, Opaque)):  # an object input, by its name (chapter 6)
        return a.name
    if isinstance(a, sympy.Expr):  # a size passed to ATen, e.g. view(buf0, [s0, 4])
        return pexpr(a)
    if isinstance(a, (list, tuple)):
        inner = ", ".join(codegen_arg(x) for x in a)
        return (
            f"[{inner}]"
            if isinstance(a, list)
            else f"({inner}{',' if len(a) == 1 else ''})"
        )
    if isinstance(a, (torch.dtype, torch.layout, torch.memory_format)):
        return str(a) if str(a).startswith("torch.") else f"torch.{a}"
    if isinstance(a, torch.device):
        return f"torch.device('{a}')"
    if isinstance(a, float) and not math.isfinite(a):
        return f'float("{a}")'
    return repr(a)


def codegen_call_args(node: FallbackKernel) -> list[str]:
    """A fallback's or an extern kernel's arguments as Python source."""
    args = [codegen_arg(a) for a in node.args]
    return args + [f"{k}={codegen_arg(v)}" for k, v in node.kwargs.items()]


def codegen_op(op: Any) -> str:
    name = str(op)
    if binding(op) is not None:
        return f"torch.{op._schema.name.split('::')[1]}"
    return name if name.startswith("aten.") else f"torch.ops.{name}"


@functools.lru_cache(maxsize=None)
def binding(op: Any) -> Any:
    """torch's own binding of an ATen op, where calling it cannot pick another
    overload: the op is its packet's only one, but for an `out=` variant."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return None
    if op._overloadname != "default" or set(op._overloadpacket.overloads()) - {
        "default", "out"
    }:
        return None
    name = op._schema.name.split("::")[1]
    bound = getattr(torch._C._VariableFunctions, name, None)
    return bound if bound is not None and getattr(torch, name, None) is bound else None


def restride_line(buf: Buffer, aten_only: bool) -> str:
    """The line that gives an ATen result the layout the rest of `call` reads."""
    size, stride = _tuple(buf.layout.size), _tuple(buf.layout.stride)
    flag = ", aten_only=True" if aten_only else ""
    return f"{buf.name} = restride({buf.name}, {size}, {stride}{flag})"


@dataclass(frozen=True)
class ExternCallLine:
    node: FallbackKernel
    aten_only: bool = False  # no generated code reads the result
    sources: str = ""

    def call(self) -> str:
        n = self.node
        return f"{n.name} = {codegen_op(n.op)}({', '.join(codegen_call_args(n))})"

    def codegen(self) -> str:
        n, call = self.node, self.call()
        if self.sources:
            call = f"{self.sources}\n{call}"
        if not isinstance(n.layout, FixedLayout):
            return call
        return f"{call}\n{restride_line(n, self.aten_only)}"

    def uses(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.node.input_buffers())

    def defines(self) -> tuple[str, ...]:
        return (self.node.name,)


@dataclass(frozen=True)
class ExternKernelOutLine:
    node: ExternKernelOut
    sources: str = ""

    def codegen(self) -> str:
        n = self.node
        call = f"{n.kernel}({', '.join(codegen_call_args(n))}, out={n.name})"
        return f"{self.sources}\n{call}" if self.sources else call

    def uses(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.node.input_buffers()) + (self.node.name,)

    def defines(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class MultiOutputLine:
    node: MultiOutput
    aten_only: bool = False

    def codegen(self) -> str:
        n = self.node
        line = restride_line(n, self.aten_only)
        return f"{n.name} = {n.parent.name}[{n.index}]\n{line}"

    def uses(self) -> tuple[str, ...]:
        return (self.node.parent.name,)

    def defines(self) -> tuple[str, ...]:
        return (self.node.name,)


@dataclass(frozen=True)
class ReinterpretLine:
    node: ReinterpretBuffer

    def codegen(self) -> str:
        n, base = self.node, self.node.base.name
        size, stride = _tuple(n.layout.size), _tuple(n.layout.stride)
        offset = pexpr(n.layout.offset)
        return f"{n.name} = reinterpret_tensor({base}, {size}, {stride}, {offset})"

    def uses(self) -> tuple[str, ...]:
        return (self.node.base.name,)

    def defines(self) -> tuple[str, ...]:
        return (self.node.name,)


@dataclass(frozen=True)
class ReuseLine:
    old: str
    new: str
    layout: FixedLayout | None = None  # None: the old tensor as it is

    def codegen(self) -> str:
        if self.layout is None:
            return f"{self.new} = {self.old}  # reuse"
        size, stride = _tuple(self.layout.size), _tuple(self.layout.stride)
        view = f"reinterpret_tensor({self.old}, {size}, {stride}, 0)"
        return f"{self.new} = {view}  # reuse"

    def uses(self) -> tuple[str, ...]:
        return (self.old,)

    def defines(self) -> tuple[str, ...]:
        return (self.new,)


@dataclass(frozen=True)
class ConcatLine:
    node: ConcatBuffer

    def codegen(self) -> str:
        pieces = ", ".join(p.name for p in self.node.pieces)
        return f"# {self.node.name} = cat([{pieces}]): written in place"

    def uses(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.node.pieces)

    def defines(self) -> tuple[str, ...]:
        return (self.node.name,)


@dataclass(frozen=True)
class FreeLine:
    names: tuple[str, ...]

    def codegen(self) -> str:
        return "del " + ", ".join(self.names)

    def uses(self) -> tuple[str, ...]:
        return ()

    def defines(self) -> tuple[str, ...]:
        return ()


Line = (
    AllocateLine
    | KernelCallLine
    | ExternCallLine
    | ExternKernelOutLine
    | MultiOutputLine
    | ReinterpretLine
    | ConcatLine
    | ReuseLine
    | FreeLine
)

# the hooks chapter 20 fills: offer(wrapper) -> {input: output written over it}, and
# planner(wrapper), which rewrites wrapper.lines (frees, reuse)
handovers = PIPELINE["handovers"]
memory_plan = PIPELINE["memory_plan"]


class WrapperCodeGen:
    def __init__(self, graph: GraphLowering, scheduler: Scheduler, interpret: bool):
        self.graph = graph
        self.scheduler = scheduler
        self.interpret = interpret
        # (source with placeholder, its buffers' dtypes) -> kernel name: a compiled
        # kernel is specialized for its pointers' types, so a copy of floats and a
        # copy of integers, the same text, are two kernels
        self.kernels: dict[tuple[str, tuple[torch.dtype, ...]], str] = {}
        self.lines: list[Line] = []


    def plan(self) -> None:
        removed = self.scheduler.removed_buffers
        over: dict[str, str] = {}  # input -> the output a kernel writes over it
        for offer in handovers:  # chapter 20: inputs that die where they are read
            over |= offer(self)
        for node in self.scheduler.nodes:
            if isinstance(node, ExternKernelSchedulerNode):
                if isinstance(node.node, MultiOutput):
                    self.lines.append(MultiOutputLine(node.node))
                elif isinstance(node.node, ReinterpretBuffer):
                    self.lines.append(ReinterpretLine(node.node))
                elif isinstance(node.node, ConcatBuffer):
                    self.lines.append(ConcatLine(node.node))
                elif isinstance(node.node, ExternKernelOut):  # into planned memory
                    self.lines += self.allocate(node.node.name, node.node.layout)
                    sources = self.sources_comment([node.node.name])
                    self.lines.append(ExternKernelOutLine(node.node, sources))
                else:
                    sources = self.sources_comment([node.node.name])
                    self.lines.append(ExternCallLine(node.node, sources=sources))
                continue
            kernel = generate_kernel(
                node, removed, self.interpret, self.graph.sizevars, over
            )
            key = (kernel.source, self.arg_dtypes(kernel))
            name = self.kernels.get(key)
            if name is None:
                name = f"triton_{kernel.descriptive_name}_{len(self.kernels)}"
                self.kernels[key] = name
            taken = {new: old for old, new in kernel.inplace}
            for member in node.snodes:
                buf = member.get_name()
                if isinstance(member.node, MutationBuffer):  # writes its target
                    self.lines.append(ReuseLine(member.node.target.name, buf))
                elif buf in taken:  # written over an input that dies here
                    layout = member.node.layout
                    view = None if self.layouts[taken[buf]] == layout else layout
                    self.lines.append(ReuseLine(taken[buf], buf, view))
                elif buf not in removed:
                    self.lines += self.allocate(buf, member.node.layout)
            comment = ""
            if config.max_autotune:  # chapter 21: measure a few blocks, keep the best
                kernel, comment = self.autotune(kernel)
            sources = self.sources_comment([m.get_name() for m in node.snodes])
            self.lines.append(KernelCallLine(name, kernel, comment, sources=sources))
        for planner in memory_plan:  # chapter 20: where names die, what is reused
            planner(self)
        self.mark_aten_only()
        if self.cuda_device() is None:  # tensors on several GPUs: name each one's
            self.lines = [
                dataclasses.replace(line, on_current_device=False)
                if isinstance(line, AllocateLine) and line.layout.device.type == "cuda"
                else line
                for line in self.lines
            ]
        self.plan_sites()


    def mark_aten_only(self) -> None:
        """Flag the ATen results that only ATen kernels (or the caller) read."""
        touched = set()  # read by a kernel, a view, a cat or a reuse of its memory
        for line in self.lines:
            if isinstance(line, (KernelCallLine, ReinterpretLine, ConcatLine, ReuseLine)):
                touched |= set(line.uses())
        self.lines = [
            dataclasses.replace(line, aten_only=True)
            if isinstance(line, (ExternCallLine, MultiOutputLine))
            and line.node.name not in touched
            else line
            for line in self.lines
        ]

    @functools.cached_property
    def layouts(self) -> dict[str, Any]:
        """Every buffer's and tensor input's layout, by name."""
        found = {b.name: b.layout for b in self.graph.buffers}
        for name, value in self.graph.graph_inputs.items():
            if isinstance(value, TensorBox):
                found[name] = value.data.layout
        return found

    def arg_dtypes(self, kernel: GeneratedKernel) -> tuple[torch.dtype | None, ...]:
        """The dtypes of the buffers a kernel reads and writes, in argument order."""
        layouts = (self.layouts.get(name) for name in kernel.call_args)
        return tuple(getattr(layout, "dtype", None) for layout in layouts)

    def autotune(self, kernel: GeneratedKernel) -> tuple[GeneratedKernel, str]:
        """The kernel with measured blocks, given the layouts of its buffers."""
        layouts = self.layouts
        if any(name not in layouts for name in kernel.call_args):
            return kernel, ""  # a buffer with no layout of its own: keep the rule's
        hint = self.graph.sizevars.size_hints
        examples = [
            (hint(lay.size), hint(lay.stride), lay.dtype, lay.device)
            for lay in (layouts[name] for name in kernel.call_args)
        ]
        by_name = {s.name: h for s, h in self.graph.sizevars.var_to_hint.items()}
        symbols = [by_name[name] for name in kernel.size_args]
        sizes = hint((kernel.numel, kernel.rnumel))
        meta, comment = autotune_kernel(kernel, examples, symbols, sizes)
        return dataclasses.replace(kernel, meta=tuple(meta.items())), comment

    def allocate(self, name: str, layout: FixedLayout) -> list[Line]:
        """Memory for a kernel's output: its own, or a slice of its owner's (cat)."""
        if not isinstance(layout, NonOwningLayout):
            return [AllocateLine(name, layout)]
        owner = next(b for b in self.graph.buffers if b.name == layout.owner)
        lines: list[Line] = []
        if not any(owner.name in line.defines() for line in self.lines):
            lines.append(AllocateLine(owner.name, owner.layout))
        return lines + [ReinterpretLine(ReinterpretBuffer(name, layout, owner))]


    def bind_sizes(self) -> list[str]:
        """`s0 = arg0_1`: each size symbol the plan uses, computed from the inputs."""
        inputs = [(n, self.graph.graph_inputs[n]) for n in self.graph.graph_input_names]
        where: dict[str, str] = {}
        for name, value in inputs:
            if isinstance(value, sympy.Symbol):  # a SymInt input: the size itself
                where.setdefault(value.name, name)
        for name, value in inputs:
            if not isinstance(value, TensorBox):
                continue
            lay = value.data.layout
            for what, exprs in (("size", lay.size), ("stride", lay.stride)):
                for d, e in enumerate(exprs):
                    if isinstance(e, sympy.Symbol):
                        where.setdefault(e.name, f"{name}.{what}({d})")
            if isinstance(lay.offset, sympy.Symbol):
                where.setdefault(lay.offset.name, f"{name}.storage_offset()")
        used = self.symbols_used()
        missing = sorted(used - set(where))
        if missing:
            raise CannotCompile(  # chapter 1 runs the graph with ATen
                f"size symbols {', '.join(missing)} cannot be computed from the inputs"
            )
        return [f"{s} = {where[s]}" for s in sorted(used)]

    def symbols_used(self) -> set[str]:
        def exprs_in(value: Any) -> list[sympy.Expr]:  # in a fallback's arguments
            if isinstance(value, sympy.Expr):
                return [value]
            if isinstance(value, (list, tuple)):
                return [e for v in value for e in exprs_in(v)]
            return []

        exprs = [b for b in self.graph.graph_outputs if isinstance(b, sympy.Expr)]
        names: set[str] = set()
        for buf in self.graph.buffers:
            if isinstance(buf.layout, FixedLayout):
                exprs += [*buf.layout.size, *buf.layout.stride, buf.layout.offset]
            if isinstance(buf, FallbackKernel):
                exprs += exprs_in([buf.args, list(buf.kwargs.values())])
        for line in self.lines:
            if isinstance(line, KernelCallLine):
                exprs += [line.kernel.numel, line.kernel.rnumel]
                names |= set(line.kernel.size_args)
        return names | {s.name for e in exprs for s in sympy.sympify(e).free_symbols}


    def generate(self) -> str:
        self.plan()
        out = [
            "import torch",
            "import triton",
            "import triton.language as tl",
            "from triton.language.extra import libdevice",
            "",
            "from minductor import triton_helpers as helpers",
            "from minductor.runtime import (",
            "    benchmark, empty_strided, empty_strided_cpu, empty_strided_cuda,",
            "    CallSite, extern_kernels, launch, persistent_blocks,",
            "    number_on, pointwise_blocks, rand_strided, SizedSite,",
            "    aligned, reinterpret_tensor, restride,",
            ")",
            "",
            "aten = torch.ops.aten",
            "",
        ]
        for (source, _), name in self.kernels.items():
            out += ["", source.replace("KERNEL_NAME", name), ""]
        sites = {}  # in launch order, each once
        for line in self.lines:
            if isinstance(line, KernelCallLine) and line.site:
                sites[line.site_definition()] = None
        if sites:
            out += ["", *sites, ""]
        out += ["", *self.generate_call(), "", *self.generate_benchmark()]
        out += [
            "",
            'if __name__ == "__main__":',
            "    print(benchmark_compiled_module())",
        ]
        return "\n".join(out) + "\n"


    def generate_call(self) -> list[str]:
        names = self.graph.graph_input_names
        body = []
        if names:
            body += [", ".join(names) + ("," if len(names) == 1 else "") + " = args"]
        body += ["args.clear()"]
        device = str(self.graph.device)
        to = f"to({device!r}, memory_format=torch.contiguous_format)"
        for name in sorted(self.graph.moved_inputs):  # CPU inputs eager moves itself
            if not self.graph.graph_inputs[name].get_size():  # a number (chapter 21)
                body += [f"{name} = number_on({name}, {device!r})"]
            else:
                body += [f"{name} = {name}.{to}"]
        work = self.bind_sizes()
        for line in self.lines:
            work += line.codegen().splitlines()
        outputs = [
            b.name if isinstance(b, (Buffer, Opaque)) else "None" if b is None
            else pexpr(b)
            for b in self.graph.graph_outputs
        ]
        work += [f"return ({', '.join(outputs)}{',' if len(outputs) == 1 else ''})"]
        index = self.cuda_device()
        if index is not None:
            guard = f"with torch.cuda._DeviceGuard({index}):"
            work = [guard] + ["    " + line for line in work]
        return ["def call(args):"] + ["    " + line for line in body + work]

    def cuda_device(self) -> int | None:
        """The one GPU the graph's tensors live on; None if none or several."""
        devices = {b.get_device() for b in self.graph.buffers}
        devices |= {
            v.get_device()
            for v in self.graph.graph_inputs.values()
            if isinstance(v, TensorBox)
        }
        gpus = {d.index or 0 for d in devices if d.type == "cuda"}
        return gpus.pop() if len(gpus) == 1 else None


    def generate_benchmark(self) -> list[str]:
        body = []
        for name in self.graph.graph_input_names:
            value = self.graph.graph_inputs[name]
            if isinstance(value, TensorBox):
                lay = value.data.layout
                size, stride = (
                    self.graph.sizevars.size_hints(exprs)
                    for exprs in (lay.size, lay.stride)
                )
                body.append(
                    f"{name} = rand_strided({_tuple(size)}, {_tuple(stride)}, "
                    f"device='{lay.device}', dtype={lay.dtype})"
                )
            elif isinstance(value, sympy.Expr):  # a size symbol: its hint
                body.append(f"{name} = {self.graph.sizevars.size_hint(value)}")
            else:
                body.append(f"{name} = None" if isinstance(value, Opaque) else
                            f"{name} = {value!r}")  # fmt: skip
        inputs = ", ".join(self.graph.graph_input_names)
        body.append(
            f"return benchmark(lambda: call([{inputs}]), times=times, repeat=repeat)"
        )
        return ["def benchmark_compiled_module(times=10, repeat=10):"] + [
            "    " + line for line in body
        ]


    @functools.cached_property
    def node_order(self) -> dict[torch.fx.Node, int]:
        return {n: k for k, n in enumerate(self.graph.module.graph.nodes)}

    def sources_comment(self, names: list[str], most: int = 8) -> str:
        """The comment above the line that writes buffers `names`: the source nodes and
        the original ATen ops of their origin nodes, in the graph's order."""
        origin_nodes = self.graph.origin_nodes
        found = frozenset().union(*(origin_nodes.get(n, frozenset()) for n in names))
        sources: dict[str, None] = {}  # ordered sets
        atens: dict[str, None] = {}
        for node in sorted(found, key=lambda n: self.node_order.get(n, -1)):
            from_node = node.meta.get("from_node")  # the Dynamo node it was traced from
            sources[from_node[0].name if from_node else node.name] = None
            aten = node.meta.get("original_aten") or node.target
            if isinstance(aten, torch._ops.OpOverload):
                atens[str(aten._overloadpacket)] = None  # aten.native_layer_norm
        if not sources:
            return ""

        def listed(items: dict[str, None]) -> str:
            shown = list(items)[:most]
            if len(items) > most:
                shown.append(f"... {len(items) - most} more")
            return "[" + ", ".join(shown) + "]"

        return (
            f"# Topologically Sorted Source Nodes: {listed(sources)}, "
            f"Original ATen: {listed(atens)}"
        )


    def aligned_names(self) -> set[str]:
        """The names `call` binds to 16-byte aligned memory, whatever its inputs."""
        aligned: set[str] = set()
        for line in self.lines:
            if isinstance(line, AllocateLine):
                aligned.add(line.name)
            elif isinstance(line, ReuseLine) and line.old in aligned:
                aligned.add(line.new)  # the same memory, offset 0
            elif isinstance(line, ReinterpretLine) and line.node.base.name in aligned:
                lay = line.node.layout
                offset = sympy.sympify(lay.offset * lay.dtype.itemsize)
                if offset.is_Integer and offset % 16 == 0:
                    aligned.add(line.node.name)
        return aligned

    def plan_sites(self) -> None:
        """A site name for each launch: a CallSite's if its sizes are numbers, else a
        SizedSite's."""
        aligned = self.aligned_names()
        launches = [
            (k, (line.kernel_name, line.static_sizes(), line.kernel.meta))
            for k, line in enumerate(self.lines)
            if isinstance(line, KernelCallLine)
        ]
        names: dict[tuple, str] = {}  # (kernel, sizes or None, blocks) -> its site
        checks: dict[str, set[int]] = {}  # site -> positions to check, all its lines'
        for k, key in launches:
            if key not in names:
                same_kernel = sum(other[0] == key[0] for other in names)
                suffix = f"_{same_kernel}" if same_kernel else ""
                names[key] = f"launch_{key[0]}{suffix}"
            args = self.lines[k].kernel.call_args
            checks.setdefault(names[key], set()).update(
                i for i, name in enumerate(args) if name not in aligned
            )
        # torch's launcher off (chapter 21): the module says so, for its GPU launches
        own = "torch" if self.interpret or config.static_launch else "triton"
        for k, key in launches:
            site = names[key]
            check = tuple(sorted(checks[site]))
            self.lines[k] = dataclasses.replace(
                self.lines[k], site=site, check=check, launcher=own
            )


    def warm_ups(self) -> list[WarmUp]:
        """The launches of `call` whose kernels can be compiled before it runs."""
        found: dict[WarmUp, None] = {}  # in launch order, each once
        for line in self.lines:
            if not isinstance(line, KernelCallLine) or not line.site:
                continue
            layouts = [self.layouts.get(name) for name in line.kernel.call_args]
            sizes, ints = self.traced_sizes(line)
            if None in layouts or sizes is None:
                continue
            buffers = tuple(
                (lay.dtype, sympy.Mod(lay.offset * lay.dtype.itemsize, 16) == 0)
                for lay in layouts
            )
            sized = line.static_sizes() is None
            k = line.kernel
            w = WarmUp(line.kernel_name, line.site, buffers, sizes, k.meta, ints, sized)
            found[w] = None
        return list(found)

    def traced_sizes(self, line: KernelCallLine) -> tuple[tuple | None, tuple]:
        """A launch's sizes as numbers, and its size symbols' values (a SizedSite's),
        as traced; None where a size has no number or xnumel is 0."""
        static = line.static_sizes()
        if static is not None:
            return static, ()
        k = line.kernel
        exprs = (k.numel, k.rnumel) if "RBLOCK" in dict(k.meta) else (k.numel,)
        by_name = {s.name: h for s, h in self.graph.sizevars.var_to_hint.items()}
        try:
            sizes = self.graph.sizevars.size_hints(exprs)
            ints = tuple(int(by_name[name]) for name in k.size_args)
        except (NoHint, KeyError, TypeError):
            return None, ()
        return (sizes if sizes[0] > 0 else None), ints
