# generated from chapters/00_tiny.md — edit there

"""A whole `torch.compile` backend for chains of pointwise ops (chapter 0)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch._dynamo.backends.common import aot_autograd
from torch.fx import GraphModule, Node

log = logging.getLogger("minductor")
aten = torch.ops.aten


def tiny_backend(gm: GraphModule, example_inputs: list) -> Callable:
    """The backend "minductor_tiny": Dynamo's graph in, a function to run out."""
    if torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    ):
        return eager(gm, "an input requires grad, and this compiler does inference")
    return aot_autograd(fw_compiler=compile_graph)(gm, example_inputs)


@dataclass
class Compiled:
    graph: GraphModule  # the ATen graph (Dynamo's, if refused before AOTAutograd)
    source: str | None  # the generated module; None when the graph runs eagerly
    reason: str | None  # why it runs eagerly


_recorders: list[list[Compiled]] = []


@contextlib.contextmanager
def recording() -> Iterator[list[Compiled]]:
    """Collect every graph the tiny backend compiles, or refuses, inside the block."""
    found: list[Compiled] = []
    _recorders.append(found)
    try:
        yield found
    finally:
        _recorders[:] = [r for r in _recorders if r is not found]  # by identity


def note(compiled: Compiled) -> None:
    for found in _recorders:
        found.append(compiled)


def eager(gm: GraphModule, reason: str) -> Callable:
    """Give up on this graph: say why, and let ATen run it op by op."""
    log.info("minductor_tiny: running the graph eagerly: %s", reason)
    note(Compiled(gm, None, reason))
    return gm.forward


class _Ops:
    """`ops.add(a, b)` calls `add` on whichever handler is installed."""

    def __init__(self):
        self.handler = None

    def __getattr__(self, name: str):
        return getattr(self.handler, name)


ops = _Ops()


@contextlib.contextmanager
def set_handler(handler) -> Iterator:
    before, ops.handler = ops.handler, handler
    try:
        yield handler
    finally:
        ops.handler = before


def sigmoid(x):
    one = ops.constant(1.0)
    return ops.truediv(one, ops.add(one, ops.exp(ops.neg(x))))


def tanh(x):  # 2 sigmoid(2x) - 1
    two = ops.constant(2.0)
    return ops.sub(ops.mul(two, sigmoid(ops.mul(two, x))), ops.constant(1.0))


def gelu(x):  # x/2 (1 + erf(x / sqrt(2)))
    erf = ops.erf(ops.mul(x, ops.constant(0.7071067811865476)))
    return ops.mul(ops.mul(ops.constant(0.5), x), ops.add(ops.constant(1.0), erf))


# each ATen op as a function of values, spoken in `ops`
LOWERINGS: dict[torch._ops.OpOverload, Callable] = {
    aten.add.Tensor: lambda a, b: ops.add(a, b),
    aten.sub.Tensor: lambda a, b: ops.sub(a, b),
    aten.rsub.Scalar: lambda a, b: ops.sub(b, a),  # 1 - x
    aten.mul.Tensor: lambda a, b: ops.mul(a, b),
    aten.div.Tensor: lambda a, b: ops.truediv(a, b),
    aten.neg.default: lambda a: ops.neg(a),
    aten.exp.default: lambda a: ops.exp(a),
    aten.sin.default: lambda a: ops.sin(a),
    aten.cos.default: lambda a: ops.cos(a),
    aten.maximum.default: lambda a, b: ops.maximum(a, b),
    aten.relu.default: lambda a: ops.maximum(a, ops.constant(0.0)),
    aten.sigmoid.default: sigmoid,
    aten.tanh.default: tanh,
    aten.gelu.default: gelu,
    aten.gt.Tensor: lambda a, b: ops.gt(a, b),
    aten.gt.Scalar: lambda a, b: ops.gt(a, b),
    aten.lt.Tensor: lambda a, b: ops.lt(a, b),
    aten.lt.Scalar: lambda a, b: ops.lt(a, b),
    aten.where.self: lambda cond, a, b: ops.where(cond, a, b),
    aten.scalar_tensor.default: lambda value: value,
}
COMPARISONS = {aten.gt.Tensor, aten.gt.Scalar, aten.lt.Tensor, aten.lt.Scalar}


TRITON = {
    "add": "{} + {}",
    "sub": "{} - {}",
    "mul": "{} * {}",
    "truediv": "{} / {}",
    "neg": "-{}",
    "exp": "tl.exp({})",
    "sin": "tl.sin({})",
    "cos": "tl.cos({})",
    "erf": "tl.erf({})",
    "gt": "{} > {}",
    "lt": "{} < {}",
    "where": "tl.where({}, {}, {})",
    "maximum": "tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})",  # a NaN wins
}


class TritonPrinter:
    """An `ops` handler that writes Triton: each op returns a temporary's name."""

    def __init__(self):
        self.lines: list[str] = []
        self.cse: dict[str, str] = {}  # expression -> the temporary that holds it

    def tmp(self, expr: str) -> str:
        if expr not in self.cse:
            self.cse[expr] = f"tmp{len(self.cse)}"
            self.lines.append(f"{self.cse[expr]} = {expr}")
        return self.cse[expr]

    def load(self, name: str, index: str) -> str:
        mask = "" if index == "0" else ", xmask"  # one element: every lane may read it
        return self.tmp(f"tl.load({name} + ({index}){mask})")

    def store(self, name: str, index: str, value: str) -> None:
        self.lines.append(f"tl.store({name} + ({index}), {value}, xmask)")

    def constant(self, value: float) -> str:
        return repr(float(value)) if math.isfinite(value) else f'float("{value}")'

    def to_dtype(self, x: str, dtype: torch.dtype) -> str:
        return self.tmp(f"{x}.to(tl.{str(dtype).removeprefix('torch.')})")

    def __getattr__(self, name: str):  # the math: one format string each
        return lambda *args: self.tmp(TRITON[name].format(*args))


def index_of(index: str, shape, strides, out_shape) -> str:
    """Where a tensor of `shape` and `strides`, broadcast to `out_shape`, keeps the
    element that the output's row-major position `index` reads."""
    pad = [0] * (len(out_shape) - len(shape))  # missing leading dims: broadcast
    strides = pad + [s if n != 1 else 0 for n, s in zip(shape, strides)]
    numel, step, row_major, terms = math.prod(out_shape), 1, [], []
    for size in reversed(out_shape):
        row_major.insert(0, step if size != 1 else 0)
        step *= size
    if strides == row_major:
        return index
    step = 1
    for size, stride in reversed(list(zip(out_shape, strides))):
        if stride != 0:
            term = index + (f" // {step}" if step > 1 else "")
            term += f" % {size}" if step * size < numel else ""  # not the outermost
            terms.insert(0, term + (f" * {stride}" if stride != 1 else ""))
        step *= size
    return " + ".join(terms) or "0"


def make_loader(name: str, node: Node, out_shape) -> Callable:
    """The body of an input: the element that output position `index` reads."""
    val = node.meta["val"]

    def inner_fn(index):
        value = ops.load(name, index_of(index, val.shape, val.stride(), out_shape))
        if val.dtype != torch.float32:
            value = ops.to_dtype(value, torch.float32)  # all math is float32
        return value

    return inner_fn


def once(inner_fn: Callable) -> Callable:
    """Run a body once per handler and index, however many consumers inline it."""
    results = {}

    def run(index):
        key = (ops.handler, index)  # the key keeps its handler alive: ids stay unique
        if key not in results:
            results[key] = inner_fn(index)
        return results[key]

    return run


def constant(value: float, node: Node):
    """A Python number of `node`, rounded as torch rounds it against the tensors."""
    dtypes = [a.meta["val"].dtype for a in node.args if isinstance(a, Node)]
    dtype = functools.reduce(torch.promote_types, dtypes or [node.meta["val"].dtype])
    if dtype in (torch.float16, torch.bfloat16):
        value = torch.tensor(value, dtype=dtype).item()
    return ops.constant(value)


def pointwise(node: Node, bodies: dict[Node, Callable]) -> Callable:
    """The body of one op: its table entry applied to its producers' bodies."""
    lower = LOWERINGS[node.target]

    def inner_fn(index):
        args = [
            bodies[a](index) if isinstance(a, Node) else constant(a, node)
            for a in node.args
        ]
        return lower(*args)

    return once(inner_fn)


def placeholders(gm: GraphModule) -> list[Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def returned(gm: GraphModule) -> list:
    *_, output = gm.graph.nodes  # AOTAutograd's graphs return a tuple
    value = output.args[0]
    return list(value) if isinstance(value, (tuple, list)) else [value]


def outputs(gm: GraphModule) -> list[Node]:
    return list(dict.fromkeys(returned(gm)))  # each node once


def fused_body(gm: GraphModule) -> Callable:
    """One body for the whole graph: compute every output at `index`, store it."""
    out_shape = outputs(gm)[0].meta["val"].shape
    inputs = {node: k for k, node in enumerate(placeholders(gm))}
    bodies: dict[Node, Callable] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            bodies[node] = make_loader(f"in_ptr{inputs[node]}", node, out_shape)
        elif node.op == "call_function":
            bodies[node] = pointwise(node, bodies)

    def body(index):
        for k, out in enumerate(outputs(gm)):
            val, value = out.meta["val"], bodies[out](index)
            if val.dtype not in (torch.float32, torch.bool):
                value = ops.to_dtype(value, val.dtype)
            where = index_of(index, val.shape, val.stride(), out_shape)
            ops.store(f"out_ptr{k}", where, value)

    return body


XBLOCK = 1024  # output positions per program: lanes of one block


def kernel_name(gm: GraphModule) -> str:
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    fused = sorted({n.target.__name__.split(".")[0] for n in nodes})
    return "triton_poi_fused_" + "_".join(fused[:6]) + "_0"


def kernel_source(gm: GraphModule, name: str) -> str:
    printer = TritonPrinter()
    with set_handler(printer):
        fused_body(gm)("xindex")
    pointers = [f"in_ptr{k}" for k in range(len(placeholders(gm)))]
    pointers += [f"out_ptr{k}" for k in range(len(outputs(gm)))]
    return "\n".join(
        [
            "@triton.jit",
            f"def {name}({', '.join(pointers)}, xnumel, XBLOCK: tl.constexpr):",
            "    xoffset = tl.program_id(0) * XBLOCK",
            "    xindex = xoffset + tl.arange(0, XBLOCK)",
            "    xmask = xindex < xnumel",
            *(f"    {line}" for line in printer.lines),
        ]
    )


def call_source(gm: GraphModule, kernel: str) -> str:
    args = [n.name for n in placeholders(gm)]
    bufs = [f"buf{k}" for k in range(len(outputs(gm)))]
    lines = [f"def call({', '.join(args)}):"]
    for buf, out in zip(bufs, outputs(gm)):
        val = out.meta["val"]
        lines.append(
            f"    {buf} = torch.empty_strided({tuple(val.shape)}, {val.stride()}, "
            f"dtype={val.dtype}, device={args[0]}.device)"
        )
    numel = outputs(gm)[0].meta["val"].numel()
    if numel > 0:
        grid = -(-numel // XBLOCK)
        launch = f"{kernel}[({grid},)]({', '.join(args + bufs)}, {numel}, "
        lines.append(f"    {launch}XBLOCK={XBLOCK})")
    values = [bufs[outputs(gm).index(node)] for node in returned(gm)]
    lines.append(f"    return ({', '.join(values)},)")
    return "\n".join(lines)


def generate(gm: GraphModule) -> str:
    """The module's source: imports, the kernel, `call`."""
    name = kernel_name(gm)
    parts = ["import torch\nimport triton\nimport triton.language as tl"]
    parts += [kernel_source(gm, name), call_source(gm, name)]
    return "\n\n\n".join(parts) + "\n"


def load_module(source: str):
    """Write the source to a file (Triton reads kernels from files) and import it."""
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), "minductor_tiny")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"tiny_{key}.py")
    with open(f"{path}.{os.getpid()}", "w") as f:
        f.write(source)
    os.replace(f"{path}.{os.getpid()}", path)  # whole, even if others write it too
    spec = importlib.util.spec_from_file_location(f"minductor_tiny_{key}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def why_not_node(node: Node) -> str | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):  # a SymInt: a size that varies
        return f"{node.name} is a {type(val).__name__}, not a tensor"
    if not all(isinstance(n, int) for n in (*val.shape, *val.stride())):
        return f"{node.name} has symbolic sizes"
    last = sum((n - 1) * s for n, s in zip(val.shape, val.stride()))
    if max(val.numel(), last + 1) >= 2**31:
        return f"{node.name} is too large for int32 indices"
    comparison = node.target in COMPARISONS
    if val.dtype not in FLOATS and not (comparison and val.dtype == torch.bool):
        return f"{node.name} has dtype {val.dtype}"
    if node.op == "placeholder":
        return None
    if node.target not in LOWERINGS:
        return f"{node.target} is not in the table of pointwise ops"
    if node.kwargs and node.target is not aten.scalar_tensor.default:
        return f"{node.target} with keyword arguments {dict(node.kwargs)}"
    for k, arg in enumerate(node.args):
        if not isinstance(arg, Node):
            if not isinstance(arg, (int, float)):
                return f"{node.name} has an argument {arg!r}"
            continue
        dtype = arg.meta["val"].dtype
        if dtype == torch.bool and (node.target, k) != (aten.where.self, 0):
            return f"{node.name} computes with a bool"
        if comparison and dtype != torch.float32 and arg.op != "placeholder":
            return f"{node.name} compares a {dtype} value computed in float32"
    return None


def why_not(gm: GraphModule) -> str | None:
    """Why this ATen graph is beyond the tiny compiler; None if it is not."""
    *nodes, _ = gm.graph.nodes
    if not placeholders(gm):
        return "no tensor inputs"
    for node in nodes:
        if (reason := why_not_node(node)) is not None:
            return reason
    outs = returned(gm)
    if not all(isinstance(o, Node) and o.op == "call_function" for o in outs):
        return "an output is not computed by the graph"
    if len({o.meta["val"].shape for o in outs}) > 1:
        return "outputs of different shapes"
    devices = {node.meta["val"].device for node in nodes}
    if len(devices) > 1:
        return f"tensors on {len(devices)} devices"
    device = devices.pop().type
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1)"
    return None if device in ("cpu", "cuda") else f"tensors on {device}"


def compile_graph(gm: GraphModule, example_inputs: list) -> Callable:
    """AOTAutograd's forward compiler: an ATen graph in, `call` (or eager) out."""
    if (reason := why_not(gm)) is not None:
        return eager(gm, reason)
    source = generate(gm)
    note(Compiled(gm, source, None))
    return load_module(source).call


def _register() -> None:
    from torch._dynamo.backends import registry

    # when Dynamo loads us through the entry point, it registers the backend itself
    name = "minductor_tiny"
    if name in registry._COMPILER_FNS or registry._BACKENDS.get(name):
        return
    registry.register_backend(tiny_backend, name=name)


_register()
