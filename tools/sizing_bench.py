"""GPU time per call of small and large kernels: eager, Inductor, minductor's block
rule, minductor with mode="max-autotune-no-cudagraphs". Prints a markdown table, and
the blocks minductor launched with (rule, then autotuned). Run on a GPU:
    python tools/sizing_bench.py [--dtypes float32,bfloat16] [--only NAME]
"""

import argparse
import re
import tempfile

import torch

from minductor.capture import record_compiled
from minductor.config import config
from minductor.harness.kernels import gpu_ms


def chain(x):  # 20 rounds of four ops: minductor fuses them into one kernel
    for _ in range(20):
        x = torch.relu(torch.tanh(torch.cos(torch.sin(x))))
    return x


def fma(a, b, c):
    return a * b + c


def row_sum(x):
    return x.sum(-1)


def softmax(x):
    return torch.softmax(x, -1)


def log_softmax(x):  # cross-entropy's first half, over a vocabulary
    return torch.log_softmax(x.float(), -1)


def cases(dtype):
    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    yield "chain 64x64", chain, lambda: (randn(64, 64),)
    for n in (1, 4096, 2**20, 2**24):
        yield f"a*b+c {n}", fma, lambda n=n: (randn(n), randn(n), randn(n))
    yield "sum rows 8x1048576", row_sum, lambda: (randn(8, 2**20),)
    yield "sum rows 8x4096", row_sum, lambda: (randn(8, 4096),)
    yield "sum rows 8192x2048", row_sum, lambda: (randn(8192, 2048),)
    yield "softmax 8192x1024", softmax, lambda: (randn(8192, 1024),)
    yield "softmax 64x50257", softmax, lambda: (randn(64, 50257),)
    yield "softmax 64x50304", softmax, lambda: (randn(64, 50304),)  # rows that split
    yield "log_softmax 2048x50257", log_softmax, lambda: (randn(2048, 50257),)


def blocks(source: str) -> str:
    """The block sizes of each launch in a generated module, e.g. X128w4."""
    found = []
    for line in source.splitlines():
        if "launch(triton_" in line or " = CallSite(triton_" in line:
            meta = dict(re.findall(r"(XBLOCK|RBLOCK|num_warps)=(\d+)", line))
            r = f"R{meta['RBLOCK']}" if "RBLOCK" in meta else ""
            found.append(f"X{meta.get('XBLOCK', '?')}{r}w{meta.get('num_warps', '?')}")
    return " ".join(found)


def measure(fn, inputs, backend, mode=None):
    torch._dynamo.reset()
    if backend == "eager":
        compiled = fn
    else:
        compiled = torch.compile(fn, backend=backend, mode=mode)
    with record_compiled() as graphs:
        out = compiled(*inputs)
    torch.testing.assert_close(out, fn(*inputs), atol=2e-2, rtol=2e-2)
    source = "\n".join(g.source for g in graphs)
    return gpu_ms(compiled, inputs), blocks(source)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--only", default="", help="run cases whose name has this")
    args = parser.parse_args()
    rows = [
        "| case | dtype | eager ms | Inductor ms | minductor ms | max-autotune ms "
        "| rule's blocks | autotuned blocks |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    # a fresh autotuning cache: every kernel is measured in this run
    with config.patch({"cache_dir": tempfile.mkdtemp(prefix="sizing_bench_")}):
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for name, fn, make in cases(dtype):
                if args.only not in name:
                    continue
                torch.manual_seed(0)
                inputs = make()
                eager, _ = measure(fn, inputs, "eager")
                inductor, _ = measure(fn, inputs, "inductor")
                ours, rule = measure(fn, inputs, "minductor")
                tuned, chosen = measure(
                    fn, inputs, "minductor", "max-autotune-no-cudagraphs"
                )
                row = (
                    f"| {name} | {dtype_name} | {eager:.4f} | {inductor:.4f} | "
                    f"{ours:.4f} | {tuned:.4f} | {rule} | {chosen} |"
                )
                print(row, flush=True)
                rows.append(row)
    print()
    print(f"{torch.cuda.get_device_name()}, GPU time per call (median of 100)")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
