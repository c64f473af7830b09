"""What one launch, and the runtime calls around it, cost the host (chapter 21).

A tiny kernel launched through Triton's `kernel[grid](...)`, minductor's `launch` and a
`CallSite` (with nothing checked and with both pointers checked), beside the single
calls a generated wrapper makes (allocations, views, the current stream). Each is
called 2000 times in a row; the table is microseconds per call. What a whole step
hands to the GPU, per backend, is `tools/profile_model.py`'s "host ms" (the GPT block's
training step: `python tools/profile_model.py gpt-block training bf16 OUTDIR`). Run on
a GPU, from the repository root:
    python tools/host_profile.py
"""

import time

import torch
import triton
import triton.language as tl

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


def main() -> None:
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


if __name__ == "__main__":
    main()
