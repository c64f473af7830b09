"""Profile one training step of chapters/performance.md's GPT block, per backend.

Prints the CUDA kernels that take the most time, and writes minductor's generated
modules to the directory given (for reading). Run on a GPU:
    PYTHONPATH=$PWD python tools/profile_train.py OUTDIR
"""

import copy
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from minductor.bench import GPT, training_step
from minductor.capture import record_compiled


def main(out: str) -> None:
    torch.manual_seed(0)
    B, T, C, heads, vocab = 8, 1024, 1024, 16, 8192
    reference = GPT(vocab, T, C, heads).to("cuda", torch.bfloat16)
    idx = torch.randint(vocab, (B, T), device="cuda")
    targets = torch.randint(vocab, (B, T), device="cuda")
    for backend in ("eager", "minductor", "inductor"):
        torch._dynamo.reset()
        model = copy.deepcopy(reference)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        fn = model if backend == "eager" else torch.compile(model, backend=backend)
        with record_compiled() as graphs:
            for _ in range(3):
                training_step(fn, opt, idx, targets)
        for k, g in enumerate(graphs):
            Path(out, f"{backend}_graph{k}.py").write_text(g.source)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                training_step(fn, opt, idx, targets)
            torch.cuda.synchronize()
        print(f"== {backend}")
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        print(table)
        Path(out, f"{backend}_profile.txt").write_text(table)


if __name__ == "__main__":
    main(sys.argv[1])
