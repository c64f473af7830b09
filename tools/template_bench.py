"""Matmul templates against cuBLAS, on a GPU: the product alone and with epilogues.

Each workload is compiled four times with minductor (`max_autotune_gemm_backends`
"TRITON": the template and its epilogue in one kernel, its persistent form among the
candidates on a Hopper GPU, and once more without that form ("plain template"); "ATEN":
cuBLAS and a separate kernel; "ATEN,TRITON", the default: whichever its timing chose
for each product) and run once in eager. After every variant is compiled, they are timed in turns (Triton's
`do_bench`, median of its repetitions), the order reversed each round; the table gives
the median over rounds, and the spread (min-max) in brackets. Run from the repository
root:

    python tools/template_bench.py [--rounds 5] [--json OUT.json] [--log OUT.txt]
    python tools/template_bench.py --suite split-k [...]
    python tools/template_bench.py --suite prologues [...]

--log keeps minductor's autotuning log of the "ATEN,TRITON" compiles (the times of
every candidate, and the winner of each product). `--suite split-k` times products
long in K (weight gradients): the template with and without splits of K, cuBLAS, the
chosen path, and Inductor's max-autotune, which may split K too. `--suite prologues`
times products whose operand is computed in the template (an activation, a scale, a
widening conversion) against cuBLAS after a kernel that stores the operand, and
Inductor's max-autotune, which fuses prologues too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import statistics

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

import minductor  # noqa: F401

BACKENDS = {
    "eager": None,
    "cuBLAS": {"max_autotune": True, "max_autotune_gemm_backends": "ATEN"},
    "plain template": {
        "max_autotune": True,
        "max_autotune_gemm_backends": "TRITON",
        "persistent_tma_matmul": "never",
    },
    "template": {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"},
    "chosen": {"max_autotune": True, "max_autotune_gemm_backends": "ATEN,TRITON"},
}


def workloads():
    bf16 = torch.bfloat16

    def r(*shape, dtype=bf16):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    yield "mm 4096^3 bf16", (lambda a, b: a @ b), (r(4096, 4096), r(4096, 4096))
    yield (
        "mm 4096^3 fp16",
        (lambda a, b: a @ b),
        (r(4096, 4096, dtype=torch.float16), r(4096, 4096, dtype=torch.float16)),
    )
    yield (
        "mm 4096^3 fp32",
        (lambda a, b: a @ b),
        (r(4096, 4096, dtype=torch.float32), r(4096, 4096, dtype=torch.float32)),
    )
    yield (
        "Linear+bias+GELU 8192x4096x4096",
        (lambda x, w, b: F.gelu(F.linear(x, w, b))),
        (r(8192, 4096), r(4096, 4096), r(4096)),
    )
    yield (
        "x @ W + residual 8192x4096x4096",
        (lambda x, w, res: x @ w + res),
        (r(8192, 4096), r(4096, 4096), r(8192, 4096)),
    )
    yield (
        "MLP 8192x1024->4096->1024",
        (lambda x, w1, b1, w2, b2: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)),
        (r(8192, 1024), r(4096, 1024), r(4096), r(1024, 4096), r(1024)),
    )
    yield (
        "decode M=16 Linear+bias 4096x4096",
        (lambda x, w, b: F.linear(x, w, b)),
        (r(16, 4096), r(4096, 4096), r(4096)),
    )
    yield (
        "decode M=16 Linear+bias+GELU 4096x4096",
        (lambda x, w, b: F.gelu(F.linear(x, w, b))),
        (r(16, 4096), r(4096, 4096), r(4096)),
    )
    yield (
        "decode M=1 Linear+bias+SiLU 4096x11008",
        (lambda x, w, b: F.silu(F.linear(x, w, b))),
        (r(1, 4096), r(11008, 4096), r(11008)),
    )


SPLIT_K_BACKENDS = {
    "eager": None,
    "cuBLAS": BACKENDS["cuBLAS"],
    "tiles only": {**BACKENDS["template"], "num_decompose_k_splits": 0},
    "template": BACKENDS["template"],
    "chosen": BACKENDS["chosen"],
    "inductor": "inductor",
}


def split_k_workloads():
    def r(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    for m, n, tokens in [(768, 768, 32768), (256, 256, 16384), (64, 64, 65536)]:
        yield f"dW = x.t() @ dy {m}x{n}, K={tokens}", (lambda x, dy: x.t() @ dy), (
            r(tokens, m), r(tokens, n))  # fmt: skip
    yield "relu(a @ b) 128x128, K=65536", (lambda a, b: torch.relu(a @ b)), (
        r(128, 65536), r(65536, 128))  # fmt: skip


PROLOGUE_BACKENDS = {**BACKENDS, "inductor": "inductor"}


def prologue_workloads():
    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    yield "relu(x) @ W 8192x4096x4096", (lambda x, w: torch.relu(x) @ w), (
        r(8192, 4096), r(4096, 4096))  # fmt: skip
    yield "(q * 0.125) @ k.T 32x1024x1024x64", (
        lambda q, k: (q * 0.125) @ k.transpose(1, 2)), (
        r(32, 1024, 64), r(32, 1024, 64))  # fmt: skip
    yield "decode M=16 silu(x) @ W 4096x11008", (lambda x, w: F.silu(x) @ w), (
        r(16, 4096), r(4096, 11008))  # fmt: skip
    yield "decode M=16 x.float() @ W fp32 4096x4096", (lambda x, w: x.float() @ w), (
        r(16, 4096), r(4096, 4096, dtype=torch.float32))  # fmt: skip


def _compiled(fn, options):
    if options is None:
        return fn
    if options == "inductor":
        return torch.compile(fn, mode="max-autotune-no-cudagraphs")
    return torch.compile(fn, backend="minductor", options=options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--log", help="write the autotuning log of the chosen path here")
    suites = ["epilogues", "split-k", "prologues"]
    parser.add_argument("--suite", choices=suites, default="epilogues")
    parser.add_argument("--only", help="the workloads whose names contain this")
    args = parser.parse_args()
    split = args.suite == "split-k"
    backends = {"split-k": SPLIT_K_BACKENDS, "prologues": PROLOGUE_BACKENDS}.get(
        args.suite, BACKENDS
    )
    suite = {"split-k": split_k_workloads, "prologues": prologue_workloads}.get(
        args.suite, workloads
    )
    assert torch.cuda.is_available(), "this probe needs a CUDA GPU"
    lines = []
    keep = logging.Handler(logging.INFO)
    keep.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("minductor")
    logger.setLevel(logging.INFO)
    rows = []
    for name, fn, inputs in suite():
        if args.only and args.only not in name:
            continue
        torch._dynamo.reset()
        runs, errors = {}, {}
        expected = fn(*inputs).float()
        for backend, options in backends.items():
            run = _compiled(fn, options)
            if backend in ("chosen", "template"):
                logger.addHandler(keep)
            out = run(*inputs)  # compiles
            logger.removeHandler(keep)
            errors[backend] = (out.float() - expected).abs().max().item()
            runs[backend] = lambda run=run: run(*inputs)
        times = {b: [] for b in runs}
        order = list(runs)
        for k in range(args.rounds):
            for backend in order if k % 2 == 0 else order[::-1]:
                times[backend].append(do_bench(runs[backend], return_mode="median"))
        med = {b: statistics.median(t) for b, t in times.items()}
        row = {
            "workload": name,
            **{f"{b} ms": med[b] for b in runs},
            **{f"{b} spread": [min(t), max(t)] for b, t in times.items()},
            "template vs cuBLAS": med["cuBLAS"] / med["template"],
            "chosen vs the faster": min(med["cuBLAS"], med["template"]) / med["chosen"],
            "max error vs eager": errors,
        }
        if split:
            row["template vs tiles only"] = med["tiles only"] / med["template"]
        if "plain template" in med:
            row["plain template vs cuBLAS"] = med["cuBLAS"] / med["plain template"]
        if "inductor" in med:
            row["chosen vs inductor"] = med["inductor"] / med["chosen"]
        rows.append(row)
        spread = {b: f"[{min(t):.3f}-{max(t):.3f}]" for b, t in times.items()}
        print(
            f"| {name} | "
            + " | ".join(f"{med[b]:.3f} {spread[b]}" for b in runs)
            + f" | {med['cuBLAS'] / med['template']:.2f}x"
            + f" | {row['chosen vs the faster']:.2f}x |"
            + (f" {row['template vs tiles only']:.2f}x |" if split else "")
            + (f" {row['chosen vs inductor']:.2f}x |" if "inductor" in med else ""),
            flush=True,
        )
    if args.log:
        head = f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        head += f"triton {triton.__version__}, {datetime.date.today().isoformat()}"
        matmul = [line for line in lines if line.startswith("minductor: matmul")]
        with open(args.log, "w") as f:
            f.write("\n".join([head, *matmul]) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "date": datetime.date.today().isoformat(),
                    "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "triton": triton.__version__,
                    "rounds": args.rounds,
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
