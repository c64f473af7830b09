#!/usr/bin/env python3
"""Compile minductor's kernels for a GPU, on a machine that has none.

Triton's interpreter runs the kernels minductor generates on CPU tensors, so every
CPU test checks their arithmetic. It does not check that they compile for a GPU: the
interpreter executes Python, and a kernel it runs may still be rejected by Triton's
GPU compiler (a libdevice function that does not exist for a type, a bitcast between
widths, a scan over a layout the backend cannot lower). Those kernels fail only on a
GPU, at their first launch. Triton compiles to PTX and to a cubin for a named target
without a GPU or a driver present, so this module compiles, on any machine, the kernels
minductor would launch on a GPU:

* `record_gpu_kernels()` is a context manager: every graph minductor compiles inside it
  (on CPU tensors, its kernels run by the interpreter as usual) is generated a second
  time as for a GPU (libdevice, GPU block sizes), and each kernel is recorded with the
  types of its arguments, its block sizes and its warps.
* `compile_kernels(kernels)` compiles them in a child process with TRITON_INTERPRET=0
  (the variable holds for a whole process) for an H100 (`sm_90`), each distinct kernel
  once, and returns the failures.

What it cannot see: lowering decisions that differ by device (a GPU graph may choose
other kernels than the CPU graph of the same function), and anything after compiling
(speed, wrong results on the hardware). The GPU tests on the device machine cover those.

    python tools/gpu_compile.py            # compile the kernels of a few examples
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

TARGET = ("cuda", 90, 32)  # an H100: compute capability 9.0, 32 threads a warp

POINTER_TYPES = {
    "torch.float32": "fp32",
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
    "torch.float64": "fp64",
    "torch.int64": "i64",
    "torch.int32": "i32",
    "torch.int16": "i16",
    "torch.int8": "i8",
    "torch.uint8": "u8",
    "torch.bool": "i1",
}


@dataclass
class GpuKernel:
    name: str
    source: str  # the kernel's definition, as generated for a GPU
    pointers: list[str]  # Triton's type of each buffer argument, in order
    ints: list[str]  # "i32" or "i64" for each integer argument after them
    constexprs: dict[str, int]  # XBLOCK, RBLOCK
    num_warps: int
    graph: str = ""  # where it came from, for the report
    key: str = field(init=False)

    def __post_init__(self):
        self.key = repr((self.source, self.pointers, self.ints, self.constexprs))

    @classmethod
    def from_dict(cls, d: dict) -> GpuKernel:
        """One written with dataclasses.asdict (its key is computed again)."""
        return cls(**{k: v for k, v in d.items() if k != "key"})


def _int_type(value) -> str:
    if isinstance(value, int) and -(2**31) <= value < 2**31:
        return "i32"
    return "i64"  # large, or a size known only at run time


def gpu_kernels_of(graph, scheduler, label: str = "") -> list[GpuKernel]:
    """The kernels of one lowered graph, generated as for a GPU."""
    from minductor.wrapper import KernelCallLine, WrapperCodeGen

    wrapper = WrapperCodeGen(graph, scheduler, interpret=False)
    wrapper.plan()
    found = []
    for line in wrapper.lines:
        if not isinstance(line, KernelCallLine):
            continue
        k = line.kernel
        meta = dict(k.meta)
        num_warps = meta.pop("num_warps", 4)
        ints = [_int_type(None) for _ in k.size_args] + [_int_type(k.numel)]
        if "RBLOCK" in meta:
            ints.append(_int_type(k.rnumel))
        dtypes = [str(d) for d in wrapper.arg_dtypes(k)]
        found.append(
            GpuKernel(
                name=line.kernel_name,
                source=k.source.replace("KERNEL_NAME", line.kernel_name),
                pointers=[POINTER_TYPES.get(d, d) for d in dtypes],
                ints=ints,
                constexprs={key: int(v) for key, v in meta.items()},
                num_warps=int(num_warps),
                graph=label,
            )
        )
    return found


@contextlib.contextmanager
def record_gpu_kernels() -> Iterator[list[GpuKernel]]:
    from minductor.capture import compile_hooks

    found: list[GpuKernel] = []

    def hook(gm, graph, scheduler, wrapper, compiled):
        found.extend(gpu_kernels_of(graph, scheduler, os.path.basename(compiled.path)))

    compile_hooks.register(hook)
    try:
        yield found
    finally:
        compile_hooks.remove(hook)


HEADER = """\
import triton
import triton.language as tl
from triton.language.extra import libdevice

from minductor import triton_helpers as helpers
"""


def _child(manifest: str) -> int:
    """In a process without the interpreter: compile every kernel of the manifest."""
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernels = [GpuKernel.from_dict(d) for d in json.load(open(manifest))]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, kernel in enumerate(kernels):
            path = os.path.join(tmp, f"gpu_kernel_{n}.py")
            with open(path, "w") as f:
                f.write(HEADER + "\n\n" + kernel.source + "\n")
            spec = importlib.util.spec_from_file_location(f"gpu_kernel_{n}", path)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
                fn = getattr(module, kernel.name)
                names = list(fn.arg_names)
                signature = {}
                pointers, ints = list(kernel.pointers), list(kernel.ints)
                for name in names:
                    if name in kernel.constexprs:
                        signature[name] = "constexpr"
                    elif pointers:
                        signature[name] = "*" + pointers.pop(0)
                    else:
                        signature[name] = ints.pop(0) if ints else "i32"
                source = ASTSource(fn, signature, constexprs=dict(kernel.constexprs))
                triton.compile(
                    source,
                    target=GPUTarget(*TARGET),
                    options={"num_warps": kernel.num_warps},
                )
            except Exception as error:  # report every failure, not the first
                first = f"{type(error).__name__}: {error}".strip().splitlines()
                failures.append({"name": kernel.name, "graph": kernel.graph,
                                 "error": "\n".join(first[:12]),
                                 "source": kernel.source})  # fmt: skip
    json.dump(failures, sys.stdout)
    return 0


def compile_kernels(kernels: list[GpuKernel], timeout: float = 1800) -> list[dict]:
    """Compile each distinct kernel for the GPU target; the failures, with errors."""
    distinct = list({k.key: k for k in kernels}.values())
    # "0", not absent: importing minductor without a GPU would turn the interpreter on
    env = dict(os.environ, TRITON_INTERPRET="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, env.get("PYTHONPATH", "")) if p
    )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([asdict(k) for k in distinct], f)
        manifest = f.name
    try:
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", manifest],
            env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    finally:
        os.unlink(manifest)
    if done.returncode != 0:
        raise RuntimeError(f"the compiling process failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def _examples():
    """A few functions that exercise most of the code generator."""
    import torch

    x = torch.randn(33, 65)
    h = x.to(torch.bfloat16)
    i = torch.randint(0, 33, (7,))
    return [
        (lambda x: (x.sin() * x.cos()).softmax(-1), (x,)),
        (lambda x: torch.var_mean(x, 1), (x,)),
        (lambda h: torch.nn.functional.layer_norm(h, (65,)).relu(), (h,)),
        (lambda x, i: x[i].cumsum(1) + x.sum(), (x, i)),
        (lambda x: (x.round(), x.signbit(), x.trunc(), torch.log10(x.abs())), (x,)),
    ]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return _child(argv[1])
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    import minductor  # noqa: F401

    with record_gpu_kernels() as kernels:
        for fn, args in _examples():
            torch._dynamo.reset()
            torch.compile(fn, backend="minductor")(*args)
    failures = compile_kernels(kernels)
    print(f"{len({k.key for k in kernels})} kernels compiled for sm_90, "
          f"{len(failures)} failed")  # fmt: skip
    for f in failures:
        print(f"--- {f['name']} ({f['graph']}): {f['error']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
