"""Where the host's time goes in a compiled `call` for one model of the suite.

The generated module's runtime names (launch, the allocation and view helpers, the
extern kernels, every ATen op it calls) are replaced by timing wrappers, one model step
is run a few times, and the time inside each name is summed per step; what is left of
the step is the wrapper's own Python (assignments, `del`, the calls' argument lists).
Then each ATen op the step called is timed again through its plain `torch.*` binding,
with the same arguments, to see what calling through `torch.ops.aten` costs. With a
fourth argument, `inductor`, the same for Inductor's generated code (its extern kernels,
allocations, stride asserts and kernel launches). Run on a GPU:
    python tools/host_breakdown.py mobilenet_v3_large inference bf16
"""

import collections
import sys
import time

import torch

from minductor.capture import record_compiled
from minductor.harness.common import DTYPES
from minductor.harness.models import build, on_device, step
from minductor.runtime import load_module

totals: dict[str, float] = collections.defaultdict(float)
counts: dict[str, int] = collections.defaultdict(int)
aten_calls: list[tuple] = []
recording = False  # holding a call's arguments keeps its tensors alive: one step only


def timed(name, fn):
    def wrapper(*args, **kwargs):
        t = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter_ns() - t
            counts[name] += 1

    return wrapper


def record(op, args, kwargs) -> None:
    """Keep one step's ATen calls (timed again at the end) and its convolutions."""
    if recording:
        aten_calls.append((op, args, kwargs))
        if op._schema.name == "aten::convolution":
            conv_calls.append(signature(args, kwargs))


class Overloads:  # aten.convolution -> .default, timed under the op's name
    def __init__(self, packet):
        self.packet = packet

    def __getattr__(self, overload):
        op = getattr(self.packet, overload)
        name = f"aten.{self.packet._qualified_op_name.split('::')[1]}.{overload}"

        def call(*args, **kwargs):
            record(op, args, kwargs)
            return timed(name, op)(*args, **kwargs)

        return call


class Aten:
    def __getattr__(self, name):
        return Overloads(getattr(torch.ops.aten, name))


class Torch:  # `torch` as the generated module sees it: bound ATen calls timed
    def __getattr__(self, name):
        value = getattr(torch, name)
        op = getattr(torch.ops.aten, name, None)
        if not callable(value) or op is None or not hasattr(op, "default"):
            return value

        def call(*args, **kwargs):
            record(op.default, args, kwargs)
            return timed(f"torch.{name}", value)(*args, **kwargs)

        return call


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke test
sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)


def signature(args, kwargs) -> str:
    """A call's arguments, tensors by size, stride, dtype and alignment."""

    def one(a):
        if isinstance(a, torch.Tensor):
            return (f"T{tuple(a.shape)}s{a.stride()}{str(a.dtype)[6:]}"
                    f"@{a.data_ptr() % 512}")  # fmt: skip
        return repr(a)

    return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


conv_calls: list[str] = []


def recorded(fn):
    def wrapper(*args, **kwargs):
        if recording:
            conv_calls.append(signature(args, kwargs))
        return fn(*args, **kwargs)

    return wrapper


def patch_inductor() -> None:
    """Timing wrappers where Inductor's generated modules find their runtime names."""
    from torch._inductor import select_algorithm
    from torch._inductor.runtime import triton_heuristics

    ext = select_algorithm.extern_kernels
    for n in ("convolution", "mm", "addmm", "bmm", "baddbmm"):
        if hasattr(ext, n):
            setattr(ext, n, timed(f"extern_kernels.{n}", getattr(ext, n)))
    ext.convolution = recorded(ext.convolution)
    guards = torch._C._dynamo.guards
    for n in ("_empty_strided_cuda", "assert_size_stride", "_reinterpret_tensor"):
        setattr(guards, n, timed(n, getattr(guards, n)))
    tuner = triton_heuristics.CachingAutotuner
    tuner.run = note_state(timed("CachingAutotuner.run", tuner.run))


state: dict[str, object] = {}


def note_state(fn):
    """Wrap fn to record, at its first call, what might slow every call down."""

    def wrapper(*args, **kwargs):
        if not state:
            state.update(
                grad=torch.is_grad_enabled(),
                inference_mode=torch.is_inference_mode_enabled(),
                function_modes=torch._C._len_torch_function_stack(),
                dispatch_modes=torch._C._len_torch_dispatch_stack(),
                profile=sys.getprofile(),
                trace=sys.gettrace(),
                profiler=torch.autograd.profiler._is_profiler_enabled,
            )
        return fn(*args, **kwargs)

    return wrapper


def diagnose(fn, x, training: bool, steps: int = 5) -> None:
    """Allocator churn, the garbage collector, and single calls, in this process."""
    import gc

    if DEVICE != "cuda":
        return
    keys = ("num_device_alloc", "num_device_free", "num_alloc_retries",
            "num_sync_all_streams", "num_device_alloc_sync")  # fmt: skip
    before = torch.cuda.memory_stats()
    t = time.perf_counter()
    for _ in range(steps):
        step(fn, x, training)
    plain = (time.perf_counter() - t) / steps * 1e3
    sync()
    after = torch.cuda.memory_stats()
    churn = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    gc.disable()
    t = time.perf_counter()
    for _ in range(steps):
        step(fn, x, training)
    no_gc = (time.perf_counter() - t) / steps * 1e3
    gc.enable()
    sync()
    print(f"diagnosis: {steps} steps, {plain:.2f} ms/step ({no_gc:.2f} with the garbage "
          f"collector off); allocator over them: {churn}; objects tracked by the "
          f"collector: {len(gc.get_objects())}; state inside call: {state}")
    alloc = torch._C._dynamo.guards._empty_strided_cuda
    tries = {
        "empty_strided_cuda((1024, 1024), bf16), freed": lambda: alloc(
            (1024, 1024), (1024, 1), torch.bfloat16
        ),
        "torch.empty(0)": lambda: torch.empty(0, device="cuda"),
    }
    for label, f in tries.items():
        f()
        t = time.perf_counter()
        for _ in range(2000):
            f()
        print(f"single call, {label}: {(time.perf_counter() - t) / 2000 * 1e6:.2f} µs")


def main(name: str, mode: str, dtype: str, backend: str = "minductor") -> None:
    training = mode == "training"
    model, inputs = build(name, training)
    model = model.to(DEVICE, DTYPES[dtype]).train(training)
    x = on_device(inputs, DEVICE, DTYPES[dtype])
    if backend == "inductor":
        patch_inductor()  # before compiling: the modules bind the names on import
    fn = torch.compile(model, backend=backend)
    with record_compiled() as graphs:
        for _ in range(3):
            step(fn, x, training)
    sync()
    t = time.perf_counter()
    for _ in range(5):
        step(fn, x, training)
    host = (time.perf_counter() - t) / 5 * 1e3  # may wait for the GPU at the end
    sync()
    diagnose(fn, x, training)  # before the timing wrappers
    for g in graphs if backend == "minductor" else ():
        module = load_module(g.source)
        names = ["launch", "empty_strided_cuda", "empty_strided_cpu",
                 "reinterpret_tensor", "restride"]  # fmt: skip
        for n in names:
            if hasattr(module, n):
                setattr(module, n, timed(n, getattr(module, n)))
        module.launch = note_state(module.launch)
        ext = module.extern_kernels
        for n in list(vars(ext)):
            setattr(ext, n, timed(f"extern_kernels.{n}", getattr(ext, n)))
        module.aten = Aten()
        module.torch = Torch()
    steps = 5
    totals.clear(), counts.clear(), aten_calls.clear()
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step(fn, x, training)
    patched = (time.perf_counter() - t) / steps * 1e3
    sync()
    inside = sum(totals.values()) / steps / 1e6
    print(f"{name} {mode} {dtype} {backend}: a step takes {host:.2f} ms of host time, "
          f"{patched:.2f} ms with the timing wrappers, of which {inside:.2f} ms inside "
          f"the names below and {patched - inside:.2f} ms elsewhere (the wrapper's own "
          "Python, Dynamo's guards, AOTAutograd, the wrappers' overhead)")
    print("| name | calls/step | µs/call | ms/step |\n|---|---:|---:|---:|")
    for n, ns in sorted(totals.items(), key=lambda kv: -kv[1]):
        c = counts[n] / steps
        print(f"| {n} | {c:.0f} | {ns / counts[n] / 1e3:.2f} | {ns / steps / 1e6:.3f} |")
    # the same ATen calls through torch.* bindings, and through the OpOverload
    global recording
    recording = True
    step(fn, x, training)
    recording = False
    one_step = list(aten_calls)
    aten_calls.clear()
    print("convolutions of one step, the first 8:")
    for c in conv_calls[:8]:
        print("   ", c)
    conv_calls.clear()
    rows = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for op, args, kwargs in one_step:
        binding = getattr(torch, op._schema.name.split("::")[1], None)
        if binding is None or op._overloadname not in ("default", ""):
            continue
        for k, f in ((1, op), (2, binding)):
            f(*args, **kwargs)
            sync()
            t = time.perf_counter_ns()
            for _ in range(20):
                f(*args, **kwargs)
            rows[str(op)][k] += (time.perf_counter_ns() - t) / 20 / 1e3
            sync()
        rows[str(op)][0] += 1
    print("\n| op | calls/step | µs/call, torch.ops.aten | µs/call, torch.* |")
    print("|---|---:|---:|---:|")
    for op, (n, a, b) in rows.items():
        print(f"| {op} | {n} | {a / n:.2f} | {b / n:.2f} |")


if __name__ == "__main__":
    main(*sys.argv[1:5])
