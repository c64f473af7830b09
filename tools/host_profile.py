"""Where the host's time goes in one training step of the GPT block, per backend.

Enqueue time: the GPU is kept busy with `torch.cuda._sleep` so the host never waits,
and the wall time of `training_step` is the Python + launch cost alone. Then a cProfile
of minductor's steps, and the cost of single runtime calls. Run on a GPU:
    PYTHONPATH=$PWD python tools/host_profile.py
"""

import copy
import cProfile
import pstats
import time

import torch
import triton
import triton.language as tl

from minductor.bench import GPT, training_step
from minductor.runtime import CallSite, launch


@triton.jit
def _add_one(in_ptr, out_ptr, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr + xindex, tl.load(in_ptr + xindex, xmask) + 1, xmask)


def per_call_us(fn, n=2000) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def enqueue_ms(fn, opt, idx, targets, steps=10) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000_000)  # about half a second of GPU work
    t = time.perf_counter()
    for _ in range(steps):
        training_step(fn, opt, idx, targets)
    host = (time.perf_counter() - t) / steps * 1e3
    torch.cuda.synchronize()
    return host


def main() -> None:
    torch.manual_seed(0)
    B, T, C, heads, vocab = 8, 1024, 1024, 16, 8192
    reference = GPT(vocab, T, C, heads).to("cuda", torch.bfloat16)
    idx = torch.randint(vocab, (B, T), device="cuda")
    targets = torch.randint(vocab, (B, T), device="cuda")
    rows = []
    for backend in ("eager", "minductor", "inductor"):
        torch._dynamo.reset()
        model = copy.deepcopy(reference)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        fn = model if backend == "eager" else torch.compile(model, backend=backend)
        for _ in range(3):
            training_step(fn, opt, idx, targets)
        rows.append((backend, enqueue_ms(fn, opt, idx, targets)))
        if backend == "minductor":
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(10):
                training_step(fn, opt, idx, targets)
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    x = torch.empty(1 << 20, device="cuda")
    y = torch.empty(1 << 20, device="cuda")
    site = CallSite(_add_one, (1000,), XBLOCK=1024, num_warps=4)
    checked = CallSite(_add_one, (1000,), XBLOCK=1024, num_warps=4, check=(0, 1))
    g = torch._C._dynamo.guards
    calls = {
        "torch.empty_strided": lambda: torch.empty_strided(
            (1024, 1024), (1024, 1), device="cuda", dtype=torch.float32
        ),
        "guards._empty_strided_cuda": lambda: g._empty_strided_cuda(
            (1024, 1024), (1024, 1), torch.float32
        ),
        "Tensor.as_strided": lambda: x.as_strided((512, 512), (512, 1), 0),
        "guards._reinterpret_tensor": lambda: g._reinterpret_tensor(
            x, (512, 512), (512, 1), 0
        ),
        "current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
        "_cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "x.data_ptr() % 16": lambda: x.data_ptr() % 16,
        "x.storage_offset()": lambda: x.storage_offset(),
        "torch.cuda.current_device()": torch.cuda.current_device,
        "kernel[grid](...)": lambda: _add_one[(1,)](x, y, 1000, XBLOCK=1024),
        "minductor launch(...)": lambda: launch(
            _add_one, 1000, x, y, XBLOCK=1024, num_warps=4
        ),
        "minductor CallSite, nothing checked": lambda: site(x, y),
        "minductor CallSite, both checked": lambda: checked(x, y),
    }
    print("| call | µs |\n|---|---:|")
    for name, fn in calls.items():
        print(f"| {name} | {per_call_us(fn):.2f} |")
    print("\n| backend | host enqueue ms/step |\n|---|---:|")
    for backend, ms in rows:
        print(f"| {backend} | {ms:.2f} |")


if __name__ == "__main__":
    main()
