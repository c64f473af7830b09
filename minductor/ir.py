# generated from chapters/05_ir.md, chapters/10_reductions.md, chapters/11_indexing.md — edit there

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import sympy
import torch

from minductor.ops import CountingHandler, body_to_str, ops, set_handler
from minductor.sizevars import (
    SizeVarAllocator,
    affine_coefficients,
    contiguous_strides,
    flat_index,
    index_vars,
    join_dimensions,
    product,
)

Index = Sequence[sympy.Expr]
InnerFn = Callable[[Index], Any]


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _ints(exprs: Sequence[sympy.Expr]) -> str:
    return "[" + ", ".join(str(e) for e in exprs) + "]"


def as_expr(s: int | torch.SymInt | sympy.Expr) -> sympy.Expr:
    """One size as a sympy expression: a Python int, or a SymInt's own expression."""
    if isinstance(s, torch.SymInt):  # dynamic shapes: Dynamo's symbol, e.g. s77
        # in our sympy functions (chapter 4): (s77 + 1)//2 is our FloorDiv(s77 + 1, 2)
        return SizeVarAllocator.from_dynamo(sympy.sympify(s.node.expr))
    return sympy.Integer(s) if isinstance(s, int) else s


def as_exprs(sizes: Sequence[int | sympy.Expr]) -> tuple[sympy.Expr, ...]:
    """Sizes or strides as sympy expressions (graphs hand us ints or SymInts)."""
    return tuple(as_expr(s) for s in sizes)


@dataclass(frozen=True)
class FixedLayout:
    device: torch.device
    dtype: torch.dtype
    size: tuple[sympy.Expr, ...]
    stride: tuple[sympy.Expr, ...]
    offset: sympy.Expr = sympy.Integer(0)

    @staticmethod
    def contiguous(device, dtype, size: Sequence[sympy.Expr]) -> FixedLayout:
        size = as_exprs(size)
        return FixedLayout(device, dtype, size, tuple(contiguous_strides(size)))

    @staticmethod
    def from_tensor(t: torch.Tensor) -> FixedLayout:
        return FixedLayout(
            t.device,
            t.dtype,
            as_exprs(t.size()),
            as_exprs(t.stride()),
            as_expr(t.storage_offset()),
        )

    def make_indexer(self) -> Callable[[Index], sympy.Expr]:
        # relative to the tensor's first element: a kernel receives data_ptr(), which
        # already includes the storage offset
        def indexer(index: Index) -> sympy.Expr:
            return flat_index(index, self.stride)

        return indexer

    def numel(self) -> sympy.Expr:
        return product(self.size)

    def __repr__(self) -> str:
        return (
            f"FixedLayout({self.device.type}, {_short(self.dtype)}, "
            f"size={_ints(self.size)}, stride={_ints(self.stride)})"
        )


@dataclass(frozen=True)
class MultiOutputLayout:
    """The layout of a fallback that returns several tensors: it owns no memory."""

    device: torch.device


class IRNode:
    def get_size(self) -> tuple[sympy.Expr, ...]:
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def get_device(self) -> torch.device:
        raise NotImplementedError

    def make_loader(self) -> InnerFn:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Loops(IRNode):
    """A loop body over `ranges`: what Pointwise and Reduction have in common."""

    device: torch.device
    dtype: torch.dtype
    inner_fn: Callable[..., Any]
    ranges: tuple[sympy.Expr, ...]
    # the graph's nodes computed in this body (chapter 6 fills them in)
    origin_nodes: frozenset[torch.fx.Node] = field(default=frozenset(), kw_only=True)

    def get_size(self):
        return self.ranges

    def get_dtype(self):
        return self.dtype

    def get_device(self):
        return self.device


@dataclass(frozen=True, eq=False)
class Pointwise(Loops):
    origins: frozenset[str] = frozenset()

    def make_loader(self) -> InnerFn:
        return self.inner_fn

    def inner_fn_str(self) -> str:
        return body_to_str(self.inner_fn, index_vars(len(self.ranges)))

    def count_ops(self) -> CountingHandler:
        counter = CountingHandler()
        with set_handler(counter):
            self.inner_fn(index_vars(len(self.ranges)))
        return counter

    def __repr__(self) -> str:
        return (
            f"Pointwise({self.device.type}, {_short(self.dtype)}, "
            f"ranges={_ints(self.ranges)}, origins={sorted(self.origins)})"
        )


REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin")


@dataclass(frozen=True, eq=False)
class Reduction(Loops):
    # inner_fn takes (index, reduction index)
    reduction_ranges: tuple[sympy.Expr, ...]
    reduction_type: str
    src_dtype: torch.dtype
    origins: frozenset[str] = frozenset()
    output_index: int = 0  # which result of a several-result reduction
    reduction_hint: str = "inner"  # or "outer": it reduces rows (chapter 10)

    def make_loader(self) -> InnerFn:
        raise AssertionError("a Reduction is realized before anything reads it")

    def result_dtype(self) -> torch.dtype:
        """The dtype `ops.reduction` returns: an index for argmax/argmin."""
        is_arg = self.reduction_type in ("argmax", "argmin")
        return torch.int64 if is_arg else self.src_dtype

    def __repr__(self) -> str:
        return (
            f"Reduction({self.device.type}, {_short(self.dtype)}, "
            f"{self.reduction_type}{self._which()}, ranges={_ints(self.ranges)}, "
            f"reduction_ranges={_ints(self.reduction_ranges)}, "
            f"origins={sorted(self.origins)})"
        )

    def _which(self) -> str:
        several = self.reduction_type in SEVERAL_RESULTS
        return f"[{self.output_index}]" if several else ""

    def store_reduction(self, name: str, indexer, index: Index, rindex: Index) -> None:
        """Combine the body over the reduction loop and store one value per output."""
        body = self.inner_fn(index, rindex)
        value = ops.reduction(self.dtype, self.src_dtype, self.reduction_type, body)
        if isinstance(value, tuple):  # a several-result reduction: keep ours
            value = value[self.output_index]
        if self.dtype != self.result_dtype():
            value = ops.to_dtype(value, self.dtype)
        ops.store_reduction(name, indexer(index), value)


class LaidOut(IRNode):
    """A node whose values sit in memory as its `layout` says."""

    layout: FixedLayout | MultiOutputLayout

    def get_size(self):
        return self.layout.size

    def get_dtype(self):
        return self.layout.dtype

    def get_device(self):
        return self.layout.device


@dataclass(frozen=True, eq=False)
class Buffer(LaidOut):
    name: str
    layout: FixedLayout | MultiOutputLayout

    def make_loader(self) -> InnerFn:
        indexer = self.layout.make_indexer()
        name = self.name

        def loader(index: Index) -> Any:
            return ops.load(name, indexer(index))

        return loader

    def __repr__(self) -> str:
        return f"{self.name}: {type(self).__name__}({self.layout!r})"


@dataclass(frozen=True, eq=False, repr=False)
class InputBuffer(Buffer):
    pass


@dataclass(frozen=True, eq=False, repr=False)
class ComputedBuffer(Buffer):
    data: Pointwise | Reduction

    @property
    def origins(self) -> frozenset[str]:
        return self.data.origins

    def is_reduction(self) -> bool:
        return isinstance(self.data, Reduction)

    def store_output(self, index: Index, rindex: Index = ()) -> None:
        indexer = self.layout.make_indexer()
        if not self.is_reduction():
            ops.store(self.name, indexer(index), self.data.inner_fn(index))
            return
        self.data.store_reduction(self.name, indexer, index, rindex)

    def whole_reads(self) -> tuple[str, ...]:
        """Buffers read as a whole, not element by element through the body."""
        return ()

    def dump(self) -> str:
        n = len(self.data.ranges)
        rn = len(self.data.reduction_ranges) if self.is_reduction() else 0
        variables = index_vars(n) + index_vars(rn, "r")
        body = body_to_str(lambda v: self.store_output(v[:n], v[n:]), variables)
        lines = [repr(self), f"  origins: {', '.join(sorted(self.origins))}"]
        return "\n".join(lines + ["  " + line for line in body.splitlines()])


@dataclass(frozen=True, eq=False, repr=False)
class FallbackKernel(Buffer):
    op: Any  # an OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def input_buffers(self) -> list[Buffer]:
        found: list[Buffer] = []

        def visit(a: Any) -> None:
            if isinstance(a, Buffer):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                for item in a:
                    visit(item)

        visit(self.args)
        visit(list(self.kwargs.values()))
        return found

    def __repr__(self) -> str:
        ins = ", ".join(b.name for b in self.input_buffers())
        return (
            f"{self.name}: FallbackKernel({self.op}, inputs=[{ins}], {self.layout!r})"
        )


@dataclass(frozen=True, eq=False, repr=False)
class MultiOutput(Buffer):
    parent: FallbackKernel
    index: int

    def __repr__(self) -> str:
        source = f"{self.parent.name}[{self.index}]"
        return f"{self.name}: MultiOutput({source}, {self.layout!r})"


@dataclass(frozen=True, eq=False, repr=False)
class ExternKernelOut(FallbackKernel):
    kernel: str = ""  # what the wrapper calls, with out=: "extern_kernels.mm"

    def __repr__(self) -> str:
        ins = ", ".join(b.name for b in self.input_buffers())
        call = f"{self.kernel}({ins})"
        return f"{self.name}: ExternKernelOut({call}, {self.layout!r})"


@dataclass(frozen=True, eq=False)
class ReinterpretView(LaidOut):
    """A buffer's memory read through another layout: a transpose, a slice, an expand."""

    data: Buffer
    layout: FixedLayout  # its offset counts from data's first element
    origin_nodes: frozenset[torch.fx.Node] = field(default=frozenset(), kw_only=True)

    def make_loader(self) -> InnerFn:
        name, layout = self.data.name, self.layout

        def loader(index: Index) -> Any:
            return ops.load(name, flat_index(index, layout.stride, layout.offset))

        return loader

    def reindexed(self, size: Index, reindex: Callable) -> ReinterpretView | None:
        """This view read through `reindex` (new index -> ours), if still strided."""
        variables = index_vars(len(size))
        lay = self.layout
        position = flat_index(reindex(variables), lay.stride, lay.offset)
        position = join_dimensions(sympy.expand(position))  # 5*(i//5) + i%5 is i
        affine = affine_coefficients(position, variables)
        if affine is None:
            return None
        offset, stride = affine
        if any(s < 0 for s in stride):  # a flip: no tensor has negative strides
            return None
        layout = FixedLayout(lay.device, lay.dtype, tuple(size), tuple(stride), offset)
        return ReinterpretView(self.data, layout)

    def __repr__(self) -> str:
        lay = self.layout
        return (
            f"ReinterpretView({self.data.name}, size={_ints(lay.size)}, "
            f"stride={_ints(lay.stride)}, offset={lay.offset})"
        )


@dataclass(frozen=True, eq=False)
class GenericView(IRNode):
    """A value with no memory of its own, read at re-indexed positions."""

    box: TensorBox
    size: tuple[sympy.Expr, ...]
    reindex: Callable[[Index], Index]  # view index -> index into box
    origin_nodes: frozenset[torch.fx.Node] = field(default=frozenset(), kw_only=True)

    def get_size(self):
        return self.size

    def get_dtype(self):
        return self.box.get_dtype()

    def get_device(self):
        return self.box.get_device()

    def make_loader(self) -> InnerFn:
        box, reindex = self.box, self.reindex

        def loader(index: Index) -> Any:
            return box.make_loader()(reindex(index))

        return loader

    def __repr__(self) -> str:
        where = list(self.reindex(index_vars(len(self.size))))
        return f"GenericView(size={_ints(self.size)}, reads {where} of {self.box!r})"


def strided_view(data: IRNode) -> ReinterpretView | None:
    """`data` as a strided window onto a buffer, if its values are in memory that way."""
    if isinstance(data, ReinterpretView):
        return data
    if isinstance(data, Buffer) and isinstance(data.layout, FixedLayout):
        own = replace(data.layout, offset=sympy.Integer(0))
        return ReinterpretView(data, own)
    if isinstance(data, GenericView):
        inner = strided_view(data.box.data)
        return inner.reindexed(data.size, data.reindex) if inner else None
    return None


@dataclass(frozen=True, eq=False, repr=False)
class ReinterpretBuffer(Buffer):
    """A buffer that is a strided view of another, made by the wrapper without a copy."""

    base: Buffer

    def input_buffers(self) -> list[Buffer]:
        return [self.base]

    def __repr__(self) -> str:
        lay = self.layout
        return (
            f"{self.name}: ReinterpretBuffer({self.base.name}, size={_ints(lay.size)}, "
            f"stride={_ints(lay.stride)}, offset={lay.offset})"
        )


@dataclass(frozen=True, repr=False)
class NonOwningLayout(FixedLayout):
    """A layout inside another buffer's memory: `owner` allocates, this one writes."""

    owner: str = ""

    def __repr__(self) -> str:
        return (
            f"NonOwningLayout(in {self.owner}, size={_ints(self.size)}, "
            f"stride={_ints(self.stride)}, offset={self.offset})"
        )


@dataclass(frozen=True, eq=False, repr=False)
class ConcatBuffer(Buffer):
    """The result of `cat`: memory that its pieces were written into, slice by slice."""

    pieces: tuple[Buffer, ...]

    def input_buffers(self) -> list[Buffer]:
        return list(self.pieces)

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self.pieces)
        return f"{self.name}: ConcatBuffer([{names}], {self.layout!r})"


class TensorBox:
    def __init__(self, data: IRNode):
        self.data = data

    def get_size(self):
        return self.data.get_size()

    def get_dtype(self):
        return self.data.get_dtype()

    def get_device(self):
        return self.data.get_device()

    def make_loader(self) -> InnerFn:
        return self.data.make_loader()

    def is_realized(self) -> bool:
        return isinstance(self.data, Buffer)

    def realize(self, graph: Any) -> Buffer:
        """Give the value memory: wrap its body in a ComputedBuffer named by `graph`."""
        if isinstance(self.data, Buffer):
            return self.data
        strided = strided_view(self.data)
        if strided is not None:  # a view of memory: no copy
            name = graph.new_buffer_name()
            buf: Buffer = ReinterpretBuffer(name, strided.layout, strided.data)
        else:
            if isinstance(self.data, GenericView):  # computed in the view's order
                self.data = computed_view(self.data)
            assert isinstance(self.data, (Pointwise, Reduction)), self.data
            layout_for = getattr(graph, "layout_for", None)  # chapter 6's graph has it
            layout = (
                layout_for(self.data)
                if layout_for is not None
                else FixedLayout.contiguous(
                    self.data.device, self.data.dtype, self.data.get_size()
                )
            )
            buf = ComputedBuffer(graph.new_buffer_name(), layout, self.data)
        graph.register_buffer(buf)
        self.data = buf
        return buf

    def __repr__(self) -> str:
        return f"TensorBox({self.data!r})"


def computed_view(view: GenericView) -> Pointwise:
    """A view that is no window on memory, as a body that computes it in the view's
    order; it is named (its origins) after the value it views."""
    inner = view.box.data
    while isinstance(inner, GenericView):
        inner = inner.box.data
    origins = getattr(inner, "origins", frozenset())
    device, dtype, loader = view.get_device(), view.get_dtype(), view.make_loader()
    nodes = origin_nodes_of(view)
    return Pointwise(device, dtype, loader, view.size, origins, origin_nodes=nodes)


def origin_nodes_of(value: Any) -> frozenset[torch.fx.Node]:
    """The graph's nodes computed where `value` is read: a body's, or a view's and
    those of what it views; none for a buffer, whose own kernel computed them."""
    data = value.data if isinstance(value, TensorBox) else value
    if isinstance(data, GenericView):
        return data.origin_nodes | origin_nodes_of(data.box)
    if isinstance(data, (Loops, ReinterpretView)):
        return data.origin_nodes
    return frozenset()


REDUCTION_TYPES = (*REDUCTION_TYPES, "welford_reduce", "online_softmax_reduce")
SEVERAL_RESULTS = ("welford_reduce", "online_softmax_reduce")  # one node per result


@dataclass(frozen=True, eq=False)
class Scan(Reduction):
    dim: int = 0  # where the scanned dimension sits in the output

    def get_size(self):
        return self.full_index(self.ranges, self.reduction_ranges)

    def full_index(self, index: Index, rindex: Index) -> tuple[sympy.Expr, ...]:
        return (*index[: self.dim], *rindex, *index[self.dim :])

    def store_reduction(self, name: str, indexer, index: Index, rindex: Index) -> None:
        body = self.inner_fn(index, rindex)
        value = ops.scan(self.src_dtype, self.reduction_type, body)
        if self.dtype != self.src_dtype:
            value = ops.to_dtype(value, self.dtype)
        ops.store(name, indexer(self.full_index(index, rindex)), value)

    def __repr__(self) -> str:
        return (
            f"Scan({self.device.type}, {_short(self.dtype)}, {self.reduction_type}, "
            f"size={_ints(self.get_size())}, dim={self.dim}, "
            f"origins={sorted(self.origins)})"
        )


@dataclass(frozen=True, eq=False)
class Scatter(Pointwise):
    """A body that writes element i at output_indexer(i) instead of at i."""

    output_indexer: Callable[[Index], sympy.Expr] | None = None
    scatter_mode: str | None = None  # None: store; "atomic_add": add to what is there

    def __repr__(self) -> str:
        return (
            f"Scatter({self.device.type}, {_short(self.dtype)}, {self.scatter_mode}, "
            f"ranges={_ints(self.ranges)}, origins={sorted(self.origins)})"
        )


@dataclass(frozen=True, eq=False, repr=False)
class MutationBuffer(ComputedBuffer):
    """Runs a Scatter into target's memory; readers of the result read this name."""

    target: Buffer

    def whole_reads(self) -> tuple[str, ...]:  # it updates its target: after the copy
        return (self.target.name,)

    def store_output(self, index: Index, rindex: Index = ()) -> None:
        s = self.data
        where = s.output_indexer(index)
        ops.store(self.name, where, s.inner_fn(index), s.scatter_mode)

    def dump(self) -> str:
        body = body_to_str(self.store_output, index_vars(len(self.data.ranges)))
        lines = [repr(self), f"  origins: {', '.join(sorted(self.origins))}"]
        return "\n".join(lines + ["  " + line for line in body.splitlines()])

    def __repr__(self) -> str:
        return f"{self.name}: MutationBuffer(into {self.target.name}, {self.data!r})"
