# generated from chapters/measuring_kernels.md — edit there

"""The kernel workloads of chapters/measuring_kernels.md: python -m minductor.bench."""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
import triton

from minductor.harness import common
from minductor.harness.common import BACKENDS, LABELS, as_tuple, fmt, table

F32, F16, BF16, I64 = 4, 2, 2, 8  # bytes per element
N = 4096 * 4096  # 16M elements


@dataclass(frozen=True)
class Workload:
    name: str
    fn: Callable
    make_inputs: Callable[[str], tuple]  # device -> the function's arguments
    bytes: int  # the least the function must read and write


def randn(*shapes, dtype=torch.float32):
    def make(device):
        return tuple(torch.randn(s, device=device, dtype=dtype) for s in shapes)

    return make


def add_mul(a, b, c):
    return a * b + c


def gelu_residual(x, bias):
    return F.gelu(x + bias) * 0.5 + x


def chain10(x):
    y = x
    for k in range(5):
        y = torch.sigmoid(y * 1.5 + k) - 0.25
    return y


def two_outputs(x, y):
    t = (x * y).sigmoid()
    return t + 1, t.sin()


def rms_norm_residual(x, residual, weight):
    h = x + residual
    rms = torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    return h * rms.to(h.dtype) * weight, h


def rms_norm_inputs(device):
    x, residual = randn((8192, 2048), (8192, 2048), dtype=torch.bfloat16)(device)
    weight = 1 + 0.1 * torch.randn(2048, device=device)  # trained scales sit near 1
    return x, residual, weight.to(torch.bfloat16)


def cross_entropy_inputs(device):
    logits = torch.randn(8192, 1024, device=device)
    targets = torch.randint(0, 1024, (8192,), device=device)
    return logits, targets


POINTWISE = [
    Workload("a*b+c", add_mul, randn(*[(4096, 4096)] * 3), 4 * N * F32),
    Workload("a*b+c (fp16)", add_mul, randn(N, N, N, dtype=torch.float16), 4 * N * F16),
    Workload(
        "gelu(x+bias)*0.5+x",
        gelu_residual,
        randn((8192, 4096), 4096),
        (2 * 8192 * 4096 + 4096) * F32,
    ),
    Workload("10-op chain", chain10, randn(N), 2 * N * F32),
    Workload("two outputs", two_outputs, randn(N, N), 4 * N * F32),
    Workload("a*b+c, 1 element", add_mul, randn(1, 1, 1), 4 * F32),
]


REDUCTIONS = [
    Workload(
        "x.sum(1), 8192x2048",
        lambda x: x.sum(1),
        randn((8192, 2048)),
        (8192 * 2048 + 8192) * F32,
    ),
    Workload(
        "x.amax(1), 8192x1024",
        lambda x: x.amax(1),
        randn((8192, 1024)),
        (8192 * 1024 + 8192) * F32,
    ),
    Workload(
        "(x*y).sum(1), 8192x1024",
        lambda x, y: (x * y).sum(1),
        randn((8192, 1024), 1024),
        (8192 * 1024 + 1024 + 8192) * F32,
    ),
    Workload(
        "x.sum(0), 4096x8192",
        lambda x: x.sum(0),
        randn((4096, 8192)),
        (4096 * 8192 + 8192) * F32,
    ),
    Workload(
        "x.sum(1), 1024x32768 (looped)",
        lambda x: x.sum(1),
        randn((1024, 32768)),
        (1024 * 32768 + 1024) * F32,
    ),
    Workload(
        "var_mean, 8192x1024",
        lambda x: torch.var_mean(x, -1),
        randn((8192, 1024)),
        (8192 * 1024 + 2 * 8192) * F32,
    ),
]


NORMALIZATIONS = [
    Workload(
        "softmax, 8192x1024",
        lambda x: torch.softmax(x, -1),
        randn((8192, 1024)),
        2 * 8192 * 1024 * F32,
    ),
    Workload(
        "softmax, 8192x2048",
        lambda x: torch.softmax(x, -1),
        randn((8192, 2048)),
        2 * 8192 * 2048 * F32,
    ),
    Workload(
        "log_softmax, 8192x1024",
        lambda x: torch.log_softmax(x, -1),
        randn((8192, 1024)),
        2 * 8192 * 1024 * F32,
    ),
    Workload(
        "layer_norm, 8192x1024",
        lambda x, w, b: F.layer_norm(x, (1024,), w, b),
        randn((8192, 1024), 1024, 1024),
        (2 * 8192 * 1024 + 2 * 1024) * F32,
    ),
    Workload(
        "RMSNorm+residual (bf16), 8192x2048",
        rms_norm_residual,
        rms_norm_inputs,
        (4 * 8192 * 2048 + 2048) * BF16,
    ),
    Workload(
        "cross_entropy, 8192x1024",
        lambda logits, targets: F.cross_entropy(logits, targets),
        cross_entropy_inputs,
        8192 * 1024 * F32 + 8192 * I64 + F32,
    ),
]


def embedding_inputs(device):
    # 8192 tokens, each row of the table read once (a permutation), so the bytes moved
    # are exactly the inputs plus the output
    weight = torch.randn(8192, 1024, device=device)
    tokens = torch.randperm(8192, device=device).reshape(8, 1024)
    positions = torch.randn(1024, 1024, device=device)
    return tokens, weight, positions


def gather_inputs(device):
    x = torch.randn(8192, 1024, device=device)
    return x, torch.rand(8192, 1024, device=device).argsort(1)  # a shuffle of each row


DATA_MOVEMENT = [
    Workload(
        "x.t()+y, 4096x4096",
        lambda x, y: x.t() + y,
        randn((4096, 4096), (4096, 4096)),
        3 * N * F32,
    ),
    Workload(
        "heads merge permute+reshape, 32x16x1024x64",
        lambda x: x.permute(0, 2, 1, 3).reshape(32, 1024, 1024),
        randn((32, 16, 1024, 64)),
        2 * 32 * 1024 * 1024 * F32,
    ),
    Workload(
        "cat([x+1, y*2], 1), 4096x2048 each",
        lambda x, y: torch.cat([x + 1, y * 2], 1),
        randn((4096, 2048), (4096, 2048)),
        4 * 4096 * 2048 * F32,
    ),
    Workload(
        "embedding+positions, 8x1024 tokens of 1024",
        lambda tokens, weight, pos: F.embedding(tokens, weight) + pos,
        embedding_inputs,
        (2 * 8192 * 1024 + 1024 * 1024) * F32 + 8192 * I64,
    ),
    Workload(
        "gather(x, 1, shuffle), 8192x1024",
        lambda x, idx: torch.gather(x, 1, idx),
        gather_inputs,
        2 * 8192 * 1024 * F32 + 8192 * 1024 * I64,
    ),
]

WORKLOADS = POINTWISE + REDUCTIONS + NORMALIZATIONS + DATA_MOVEMENT


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6


def gpu_ms(fn, inputs, samples: int = 100) -> float:
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    for _ in range(10):  # warm up
        fn(*inputs)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for start, end in zip(starts, ends):
        flush.zero_()  # evict the inputs from L2
        torch.cuda._sleep(SPIN_CYCLES)  # keeps the GPU busy while the host issues fn
        start.record()
        fn(*inputs)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


SPIN_CYCLES = 2_000_000  # about 1 ms at an H100/H200's clock


def host_ms(fn, inputs, calls: int = 200) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*inputs)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / calls


def first_call_s(fn, inputs) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn(*inputs)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def copy_peak_gbps() -> float:
    src = torch.empty(1 << 28, device="cuda")  # 1 GiB of fp32
    dst = torch.empty_like(src)
    return gbps(2 * src.nbytes, gpu_ms(dst.copy_, (src,)))


def check(workload: Workload, compiled, inputs) -> None:
    got = as_tuple(compiled(*inputs))
    eager = as_tuple(workload.fn(*inputs))
    upcast = [t.float() if t.is_floating_point() else t for t in inputs]
    want = as_tuple(workload.fn(*upcast))
    dtypes = [t.dtype for t in got]
    if dtypes != [t.dtype for t in eager]:
        raise AssertionError(f"{workload.name}: dtypes {dtypes} differ from eager's")
    common.check_close(workload.name, got, want)


@dataclass(frozen=True)
class Result:
    name: str
    bytes: int
    gpu_ms: dict[str, float]  # backend -> median GPU time (see "Three clocks")
    host_ms: dict[str, float] = field(default_factory=dict)
    cold_s: dict[str, float] = field(default_factory=dict)

    def gbps(self, backend: str) -> float:
        return gbps(self.bytes, self.gpu_ms[backend])


def compile_cold(fn, backend: str, inputs, dynamic: bool | None = None):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    return compiled, first_call_s(compiled, inputs)


def measure(
    workload: Workload, cold: bool = True, dynamic: bool | None = None
) -> Result:
    inputs = workload.make_inputs("cuda")
    fns, cold_s = {"eager": workload.fn}, {}
    for backend in ("minductor", "inductor"):
        fns[backend], seconds = compile_cold(workload.fn, backend, inputs, dynamic)
        if cold:
            cold_s[backend] = seconds
    for fn in fns.values():
        fn(*inputs)  # minductor recompiles, warm, after the reset for Inductor
    check(workload, fns["minductor"], inputs)
    return Result(
        workload.name,
        workload.bytes,
        gpu_ms={b: gpu_ms(fn, inputs) for b, fn in fns.items()},
        host_ms={b: host_ms(fn, inputs) for b, fn in fns.items()},
        cold_s=cold_s,
    )


def use_fresh_caches(argv: list[str]) -> None:
    if common.CACHES not in os.environ:  # start again, once, with empty caches
        sys.stdout.flush()
        command = [sys.executable, "-m", "minductor.bench", *argv]
        os.execve(sys.executable, command, common.fresh_cache_env())
    common.use_fresh_caches()


def warm_up() -> None:
    common.warm_up(BACKENDS, "cuda")


@dataclass(frozen=True)
class Run:
    device: str
    torch_version: str
    triton_version: str
    date: str
    copy_peak_gbps: float | None
    results: list[Result]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> Run:
        data = json.loads(text)
        data["results"] = [Result(**r) for r in data["results"]]
        return Run(**data)


def run_suite(
    workloads: list[Workload], cold: bool = True, dynamic: bool | None = None
) -> Run:
    peak = copy_peak_gbps()
    if cold:
        warm_up()
    results = []
    for workload in workloads:
        print(f"measuring {workload.name}", file=sys.stderr, flush=True)
        results.append(measure(workload, cold, dynamic))
    return Run(
        torch.cuda.get_device_name(),
        torch.__version__,
        triton.__version__,
        datetime.date.today().isoformat(),
        peak,
        results,
    )


def fmt_bytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} B"


def fmt_gbps(result: Result, backend: str, peak: float | None) -> str:
    rate = result.gbps(backend)
    share = f" ({rate / peak:.0%})" if peak else ""
    return f"{rate:.0f}{share}"


def gpu_table(run: Run) -> list[str]:
    header = ["workload", "moved"]
    header += [f"{LABELS[b]} µs" for b in BACKENDS]
    header += ["vs eager", "vs Inductor", "minductor GB/s", "Inductor GB/s"]
    rows = []
    for r in run.results:
        ms = r.gpu_ms
        rows.append(
            [r.name, fmt_bytes(r.bytes)]
            + [fmt(ms[b], ".1f", 1e3) for b in BACKENDS]
            + [f"{ms['eager'] / ms['minductor']:.2f}x"]
            + [f"{ms['inductor'] / ms['minductor']:.2f}x"]
            + [fmt_gbps(r, b, run.copy_peak_gbps) for b in ("minductor", "inductor")]
        )
    return table(header, rows)


def host_table(run: Run) -> list[str]:
    header = ["workload"] + [f"host µs, {LABELS[b]}" for b in BACKENDS]
    header += ["cold s, minductor", "cold s, Inductor"]
    rows = []
    for r in run.results:
        host = [r.host_ms.get(b) for b in BACKENDS]
        cold = [r.cold_s.get(b) for b in ("minductor", "inductor")]
        rows.append(
            [r.name]
            + [fmt(ms, ".1f", 1e3) for ms in host]
            + [fmt(s, ".2f") for s in cold]
        )
    return table(header, rows)


def markdown(run: Run) -> str:
    peak = fmt(run.copy_peak_gbps, ".0f")
    lines = [
        f"Measured {run.date} on {run.device}, torch {run.torch_version}, "
        f"triton {run.triton_version}.",
        f"Copy peak: {peak} GB/s (`dst.copy_(src)`, 1 GiB of fp32, median GPU time).",
        "",
        *gpu_table(run),
        "",
        *host_table(run),
    ]
    return "\n".join(lines)


def speeds(result: Result) -> dict[str, float]:
    return {b: result.gpu_ms["inductor"] / result.gpu_ms[b] for b in BACKENDS}


def svg(run: Run, width: int = 760) -> str:
    title = "GPU speed relative to Inductor (Inductor's time / each backend's)"
    rows = [(r.name, speeds(r)) for r in run.results]
    return common.bar_chart(title, rows, BACKENDS, width)


class Block(torch.nn.Module):
    def __init__(self, C: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.out = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        H = self.heads
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, T: int, C: int, heads: int):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, C)
        self.positions = torch.nn.Embedding(T, C)
        self.block, self.ln = Block(C, heads), torch.nn.LayerNorm(C)
        self.head = torch.nn.Linear(C, vocab, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(T, device=idx.device))
        logits = self.head(self.ln(self.block(x)))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


@dataclass(frozen=True)
class TrainingResult:
    shape: str  # "B=8 T=1024 C=1024 bf16"
    step_ms: dict[str, float]
    peak_mb: dict[str, float]
    loss: dict[str, float]


def training_step(model, optimizer, idx, targets):
    loss = model(idx, targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def measure_training(
    B=8, T=1024, C=1024, heads=16, vocab=8192, dtype=torch.bfloat16, steps=20
) -> TrainingResult:
    torch.manual_seed(0)
    reference = GPT(vocab, T, C, heads).to("cuda", dtype)
    idx = torch.randint(vocab, (B, T), device="cuda")
    targets = torch.randint(vocab, (B, T), device="cuda")
    step_ms, peak_mb, losses = {}, {}, {}
    for backend in BACKENDS:
        torch._dynamo.reset()
        model = copy.deepcopy(reference)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        compiled = model
        if backend != "eager":
            compiled = torch.compile(model, backend=backend)
        losses[backend] = training_step(compiled, optimizer, idx, targets).item()
        for _ in range(3):  # warm: compiled, optimizer state allocated
            training_step(compiled, optimizer, idx, targets)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        training_step(compiled, optimizer, idx, targets)
        torch.cuda.synchronize()
        peak_mb[backend] = (torch.cuda.max_memory_allocated() - before) / 2**20
        times = []
        for _ in range(steps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            training_step(compiled, optimizer, idx, targets)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        step_ms[backend] = statistics.median(times)
        del model, optimizer, compiled
        torch.cuda.empty_cache()
    for backend in ("minductor", "inductor"):
        if abs(losses[backend] - losses["eager"]) > 0.02 * abs(losses["eager"]):
            raise AssertionError(f"first loss of {backend}: {losses}")
    shape = f"B={B} T={T} C={C} {str(dtype).removeprefix('torch.')}"
    return TrainingResult(shape, step_ms, peak_mb, losses)


def training_markdown(result: TrainingResult) -> str:
    rows = [
        f"Training step, {result.shape} (forward + backward + AdamW):",
        "",
        "| backend | step time | vs Inductor | peak memory | vs eager |",
        "|---|---:|---:|---:|---:|",
    ]
    for b in BACKENDS:
        ms, mb = result.step_ms[b], result.peak_mb[b]
        rows.append(
            f"| {LABELS[b]} | {ms:.2f} ms | {result.step_ms['inductor'] / ms:.2f}x "
            f"| {mb:.0f} MiB | {mb / result.peak_mb['eager']:.2f}x |"
        )
    return "\n".join(rows)


NO_CUDA = (
    "minductor.bench measures on a CUDA GPU and found none "
    "(torch.cuda.is_available() is False). Without a GPU, only "
    "`--plot RUN.json --svg OUT.svg` works."
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m minductor.bench",
        description="eager vs minductor vs Inductor on the workloads of "
        "chapters/measuring_kernels.md; prints markdown tables",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SUBSTRING",
        help="run the workloads whose name contains one of these",
    )
    parser.add_argument("--json", metavar="PATH", help="write all raw numbers here")
    parser.add_argument("--svg", metavar="PATH", help="write the bar chart here")
    parser.add_argument(
        "--dynamic",
        action="store_true",
        help="compile with dynamic=True: sizes as symbols (both compilers)",
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="time one training step of a GPT block instead of the workloads",
    )
    parser.add_argument(
        "--no-cold",
        action="store_true",
        help="skip the cold compile times (and the fresh caches)",
    )
    parser.add_argument(
        "--plot",
        metavar="JSON",
        help="plot an earlier run's --json output to --svg; no GPU",
    )
    args = parser.parse_args(argv)
    if args.plot and not args.svg:
        parser.error("--plot needs --svg")
    return args


def select(only: list[str] | None) -> list[Workload]:
    if not only:
        return WORKLOADS
    return [w for w in WORKLOADS if any(s.lower() in w.name.lower() for s in only)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.plot:
        with open(args.plot, encoding="utf-8") as f:
            common.write(args.svg, svg(Run.from_json(f.read())))
        return 0
    if not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 1
    if args.train:
        result = measure_training()
        print(training_markdown(result))
        if args.json:
            common.write(args.json, json.dumps(asdict(result), indent=1))
        return 0
    workloads = select(args.only)
    if not workloads:
        print(f"no workload name contains any of {args.only}", file=sys.stderr)
        return 2
    if not args.no_cold:
        use_fresh_caches(argv)
    run = run_suite(workloads, cold=not args.no_cold, dynamic=args.dynamic or None)
    print(markdown(run))
    if args.json:
        common.write(args.json, run.to_json())
    if args.svg:
        common.write(args.svg, svg(run))
    if not args.no_cold:
        shutil.rmtree(os.environ[common.CACHES], ignore_errors=True)
    return 0
