"""Host wall time per call with and without CUDA graphs (chapter 19), on a GPU.

Three workloads, each where the host sets the pace:
  (a) tiny-op chain: 20 rounds of sin/cos/tanh/relu over a 64x64 fp32 tensor;
  (b) a GPT-2-like block (hand-written, random weights) at batch 1, sequence 128,
      inference;
  (c) one training step of (b): forward, backward, an SGD step.
Backends: eager, Inductor (default and mode="reduce-overhead"), minductor (default and
mode="reduce-overhead"). Each is checked against eager before it is timed. Prints a
markdown table. Run on a GPU:
    PYTHONPATH=$PWD python tools/cudagraph_bench.py [--calls N]
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import minductor  # noqa: F401  (registers the backend)

BACKENDS = [
    ("eager", None, None),
    ("inductor", "inductor", "default"),
    ("inductor", "inductor", "reduce-overhead"),
    ("minductor", "minductor", "default"),
    ("minductor", "minductor", "reduce-overhead"),
]


def tiny_chain(x):
    for _ in range(20):
        x = torch.relu(torch.tanh(torch.cos(torch.sin(x))))
    return x


class Block(nn.Module):
    """A GPT-2 block: pre-norm causal self-attention and a GELU MLP."""

    def __init__(self, width: int = 768, heads: int = 12):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in (q, k, v))  # (B, H, T, D)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def make_fn(backend, mode, fn):
    if backend is None:
        return fn
    return torch.compile(fn, backend=backend, mode=mode)


def per_call_ms(step, calls: int) -> float:
    for _ in range(5):  # compile, warm up, record
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def max_error(got, want) -> float:
    return (got.float() - want.float()).abs().max().item()


def bench_inference(name, fn, x, calls, rows):
    want = fn(x)
    for label, backend, mode in BACKENDS:
        torch._dynamo.reset()
        compiled = make_fn(backend, mode, fn)
        with torch.no_grad():
            outs = [compiled(x).clone() for _ in range(3)]  # warm-up, record, replay
            error = max(max_error(o, want) for o in outs)
            ms = per_call_ms(lambda: compiled(x), calls)
        rows.append((name, label, mode or "", ms, error))


def bench_training(name, block, x, calls, rows):
    reference = copy.deepcopy(block)
    want = _train_once(reference, reference, x)
    for label, backend, mode in BACKENDS:
        torch._dynamo.reset()
        model = copy.deepcopy(block)
        compiled = make_fn(backend, mode, model)
        grads = [_train_once(model, compiled, x) for _ in range(3)]
        error = max(max_error(g, want) for g in grads)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)

        def step():
            loss = compiled(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        rows.append((name, label, mode or "", per_call_ms(step, calls), error))


def _train_once(model, compiled, x):
    """One forward and backward, no update: the first weight's gradient."""
    model.zero_grad(set_to_none=True)
    compiled(x).square().mean().backward()
    grad = model.c_attn.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    return grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "this benchmark needs a CUDA GPU"
    torch.manual_seed(0)
    rows: list[tuple] = []
    bench_inference(
        "tiny-op chain, 64x64", tiny_chain, torch.randn(64, 64, device="cuda"),
        args.calls, rows,
    )
    block = Block().cuda()
    x = torch.randn(1, 128, 768, device="cuda")
    bench_inference("GPT-2 block, inference", block, x, args.calls, rows)
    bench_training("GPT-2 block, training step", block, x, args.calls, rows)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{args.calls} calls each; host wall time per call (GPU synchronized at "
          "the end)\n")
    print("| workload | backend | mode | ms / call | vs eager | max error |")
    print("|---|---|---|---:|---:|---:|")
    eager = {name: ms for name, label, _, ms, _ in rows if label == "eager"}
    for name, label, mode, ms, error in rows:
        print(f"| {name} | {label} | {mode} | {ms:.3f} | {eager[name] / ms:.2f}x "
              f"| {error:.1e} |")


if __name__ == "__main__":
    main()
