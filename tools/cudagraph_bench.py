"""Host wall time per call with and without CUDA graphs (chapters 22, 23), on a GPU.

Four workloads, each where the host sets the pace:
  (a) tiny-op chain: 20 rounds of sin/cos/tanh/relu over a 64x64 fp32 tensor;
  (b) a GPT-2-like block (hand-written, random weights) at batch 1, sequence 128,
      inference;
  (c) the model suite's GPT-2 (124M, Hugging Face, random weights), bfloat16, batch 1,
      128 tokens, inference;
  (d) one training step of (b): forward, backward, an SGD step;
  (e) the block of (b) building its causal mask on the CPU and moving it to the GPU
      every call (chapter 8 builds it on the GPU instead);
  (f) the block of (b) given its mask as a CPU tensor and moving it to the GPU every
      call, an op no CUDA graph can hold: minductor splits the graph around it
      (chapter 23; it is also timed with the split off, when the whole graph runs
      plain).
Backends: eager, Inductor (default and mode="reduce-overhead"), minductor (default and
mode="reduce-overhead"). Each is checked against eager before it is timed. The host's
speed drifts, so all backends of a workload are compiled first and then timed in turns:
ROUNDS rounds of N calls each, the order reversed every round, the median round kept
(the harness's `time_in_turns`, a round's N calls between two synchronizations).
Prints a markdown table. Run on a GPU, from the repository root:
    python tools/cudagraph_bench.py [--calls N] [--only chain,block,...]
"""

from __future__ import annotations

import argparse
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import minductor  # noqa: F401  (registers the backend)
from minductor.harness import common

BACKENDS = [
    ("eager", None, None),
    ("inductor", "inductor", "default"),
    ("inductor", "inductor", "reduce-overhead"),
    ("minductor", "minductor", "default"),
    ("minductor", "minductor", "reduce-overhead"),
]
SPLIT_BACKENDS = [*BACKENDS, ("minductor", "minductor", "no-split")]
WORKLOADS = ("chain", "block", "gpt2", "train", "cpu-mask", "cpu-input")


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
        q, k, v = (
            t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v)
        )  # (B, H, T, D)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class CPUMaskBlock(Block):
    """The block, its mask made on the CPU (or given there) and moved each call."""

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (
            t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v)
        )
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        if mask is None:
            mask = torch.ones(T, T, dtype=torch.bool).tril()
        mask = mask.to(x.device)
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


ROUNDS = 6


def make_fn(backend, mode, fn):
    if backend is None:
        return fn
    if mode == "no-split":
        options = {"cudagraphs": True, "cudagraph_split": False}
        return torch.compile(fn, backend=backend, options=options)
    return torch.compile(fn, backend=backend, mode=mode)


def time_in_turns(steps: dict, calls: int) -> dict:
    """Median ms per call of each step, the steps timed in alternating rounds."""
    for step in steps.values():
        for _ in range(5):  # compile, warm up, record
            step()
    def block(step):  # a round's turn: `calls` calls, then the GPU synchronized
        return lambda: [step() for _ in range(calls)]

    rounds = {label: block(step) for label, step in steps.items()}
    times = common.time_in_turns(rounds, "cuda", ROUNDS, per_round=1)
    for label, t in times.items():
        if isinstance(t, BaseException):
            raise t
    return {label: t / calls * 1e3 for label, t in times.items()}


def max_error(got, want) -> float:
    return (got.float() - want.float()).abs().max().item()


def bench_inference(name, fn, x, calls, rows, backends=BACKENDS):
    want = fn(x)
    steps, errors = {}, {}
    for label, backend, mode in backends:
        compiled = make_fn(backend, mode, fn)
        with torch.no_grad():
            outs = [compiled(x).clone() for _ in range(3)]  # warm-up, record, replay
        errors[label, mode] = max(max_error(o, want) for o in outs)

        def step(compiled=compiled):
            with torch.no_grad():
                compiled(x)

        steps[label, mode] = step
    for (label, mode), ms in time_in_turns(steps, calls).items():
        rows.append((name, label, mode or "", ms, errors[label, mode]))


def bench_training(name, block, x, calls, rows):
    reference = copy.deepcopy(block)
    want = _train_once(reference, reference, x)
    steps, errors = {}, {}
    for label, backend, mode in BACKENDS:
        model = copy.deepcopy(block)
        compiled = make_fn(backend, mode, model)
        grads = [_train_once(model, compiled, x) for _ in range(3)]
        errors[label, mode] = max(max_error(g, want) for g in grads)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)

        def step(compiled=compiled, opt=opt):
            loss = compiled(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps[label, mode] = step
    for (label, mode), ms in time_in_turns(steps, calls).items():
        rows.append((name, label, mode or "", ms, errors[label, mode]))


def bench_gpt2(calls, rows):
    """The model suite's GPT-2 (124M), bf16, at batch 1 and 128 tokens."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers does not import: no GPT-2 row")
        return
    from minductor.harness.models import MODELS

    spec = next(m for m in MODELS if m.name == "gpt2")
    sizes = dict(spec.real, B=1, T=128)
    model = spec.build(sizes).to("cuda", torch.bfloat16).eval()
    ids = spec.inputs(sizes)["input_ids"].cuda()
    with torch.no_grad():
        bench_inference(
            "GPT-2 124M bf16, batch 1, 128 tokens, inference",
            lambda ids: model(input_ids=ids).logits,
            ids,
            calls,
            rows,
        )


def _train_once(model, compiled, x):
    """One forward and backward, no update: the first weight's gradient."""
    model.zero_grad(set_to_none=True)
    compiled(x).square().mean().backward()
    grad = model.c_attn.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    return grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--only", default=",".join(WORKLOADS), help="workloads to run")
    args = parser.parse_args()
    only = set(args.only.split(","))
    assert torch.cuda.is_available(), "this benchmark needs a CUDA GPU"
    torch.manual_seed(0)
    # every backend's compiled code stays alive for the turns: one cache entry each
    torch._dynamo.config.recompile_limit = 64
    rows: list[tuple] = []
    if "chain" in only:
        x = torch.randn(64, 64, device="cuda")
        bench_inference("tiny-op chain, 64x64", tiny_chain, x, args.calls, rows)
    block = Block().cuda()
    x = torch.randn(1, 128, 768, device="cuda")
    if "block" in only:
        torch._dynamo.reset()
        bench_inference("GPT-2 block, inference", block, x, args.calls, rows)
    if "gpt2" in only:
        torch._dynamo.reset()
        bench_gpt2(args.calls, rows)
    if "train" in only:
        torch._dynamo.reset()
        bench_training("GPT-2 block, training step", block, x, args.calls, rows)
    if "cpu-mask" in only:
        torch._dynamo.reset()
        masked = CPUMaskBlock().cuda()
        masked.load_state_dict(block.state_dict())
        name = "GPT-2 block, mask made on the CPU, inference"
        bench_inference(name, masked, x, args.calls, rows)
    if "cpu-input" in only:
        torch._dynamo.reset()
        given = CPUMaskBlock().cuda()
        given.load_state_dict(block.state_dict())
        mask = torch.ones(128, 128, dtype=torch.bool).tril()  # on the CPU
        name = "GPT-2 block, mask given on the CPU, inference"
        bench_inference(
            name, lambda x: given(x, mask), x, args.calls, rows, SPLIT_BACKENDS
        )
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"{ROUNDS} rounds of {args.calls} calls each, in turns; wall time per call "
        "(GPU synchronized at the end of a round), median round\n"
    )
    print("| workload | backend | mode | ms / call | vs eager | max error |")
    print("|---|---|---|---:|---:|---:|")
    eager = {name: ms for name, label, _, ms, _ in rows if label == "eager"}
    for name, label, mode, ms, error in rows:
        print(
            f"| {name} | {label} | {mode} | {ms:.3f} | {eager[name] / ms:.2f}x "
            f"| {error:.1e} |"
        )


if __name__ == "__main__":
    main()
