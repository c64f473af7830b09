# generated from chapters/measuring_decoding.md — edit there

"""The decoding workloads of chapters/measuring_decoding.md:
`python -m minductor.models --decode`."""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters

from minductor.capture import record_compiled
from minductor.harness import common, models
from minductor.harness.common import LABELS, cell, fmt, table

WORKLOADS = ("hf-static", "hf-dynamic", "gpt-fast")
REAL = dict(layers=8, hidden=1024, heads=16, kv_heads=4, ffn=2816, vocab=32000)
REAL.update(prompt=32, new=128)
TINY = dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=128)
TINY.update(prompt=8, new=6)
BATCHES = {False: [1, 8], True: [1, 2]}  # by --tiny
NO_END = dict(eos_token_id=None)  # every generate makes as many tokens as asked
LLAMA = models.transformer("LlamaForCausalLM", "LlamaConfig", models.HF, **NO_END)


def hf_static(model, backend: str, new: int):
    from transformers import CompileConfig

    settings = dict(max_new_tokens=new, do_sample=False, cache_implementation="static")
    if backend == "eager":  # on a GPU, generate would compile the step for eager too
        settings.update(disable_compile=True)
    else:
        how = CompileConfig(backend=backend, mode="reduce-overhead", fullgraph=True)
        how._compile_all_devices = model.device.type != "cuda"  # HF's flag
        settings.update(compile_config=how)
    return lambda prompt, clock: model.generate(prompt, streamer=clock, **settings)


def hf_dynamic(model, backend: str, new: int):
    if backend != "eager":
        model.forward = torch.compile(model.forward, backend=backend, dynamic=True)
    settings = dict(max_new_tokens=new, do_sample=False)
    return lambda prompt, clock: model.generate(prompt, streamer=clock, **settings)


def gpt_fast(model, backend: str, new: int):
    ours, first, step = Transformer.from_hf(model), prefill, decode_one
    if backend != "eager":
        first = torch.compile(prefill, backend=backend, dynamic=True, fullgraph=True)
        step = torch.compile(
            decode_one, backend=backend, mode="reduce-overhead", fullgraph=True
        )
    return lambda prompt, clock: generate(ours, prompt, new, first, step, clock)


RECIPES = {"hf-static": hf_static, "hf-dynamic": hf_dynamic, "gpt-fast": gpt_fast}


THETA = 10000.0  # LlamaConfig's rope_theta


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):  # LlamaConfig's rms_norm_eps
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rotate(x, cos, sin):  # x: (B, H, T, D); cos, sin: (T, D)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class KVCache(nn.Module):
    def __init__(self, batch, max_len, kv_heads, head_dim, dtype, device):
        super().__init__()
        shape = (batch, kv_heads, max_len, head_dim)
        for name in ("k", "v"):
            self.register_buffer(name, torch.zeros(shape, dtype=dtype, device=device))

    def update(self, input_pos, k, v):  # k, v: (B, Hkv, T, D), at positions input_pos
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v


class Attention(nn.Module):
    def __init__(self, s: dict):
        super().__init__()
        self.heads, self.kv_heads = s["heads"], s["kv_heads"]
        d = s["hidden"] // s["heads"]  # the head dimension
        self.q_proj = nn.Linear(s["hidden"], self.heads * d, bias=False)
        self.k_proj = nn.Linear(s["hidden"], self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(s["hidden"], self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, s["hidden"], bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x, cos, sin, mask, input_pos):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, -1).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, self.kv_heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, -1).transpose(1, 2)
        k, v = self.kv_cache.update(input_pos, rotate(k, cos, sin), v)
        q = rotate(q, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, s: dict):
        super().__init__()
        self.gate_proj = nn.Linear(s["hidden"], s["ffn"], bias=False)
        self.up_proj = nn.Linear(s["hidden"], s["ffn"], bias=False)
        self.down_proj = nn.Linear(s["ffn"], s["hidden"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, s: dict):
        super().__init__()
        self.input_layernorm = RMSNorm(s["hidden"])
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s["hidden"])
        self.mlp = MLP(s)

    def forward(self, x, cos, sin, mask, input_pos):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, input_pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, s: dict):
        super().__init__()
        self.embed_tokens = nn.Embedding(s["vocab"], s["hidden"])
        self.layers = nn.ModuleList(Block(s) for _ in range(s["layers"]))
        self.norm = RMSNorm(s["hidden"])
        self.lm_head = nn.Linear(s["hidden"], s["vocab"], bias=False)
        self.sizes, self.cached = s, (0, 0)  # the caches' batch and length

    def setup_caches(self, batch: int, max_len: int) -> None:
        if batch == self.cached[0] and max_len <= self.cached[1]:
            return  # the buffers we have: same addresses, same graphs
        s, w = self.sizes, self.lm_head.weight
        d = s["hidden"] // s["heads"]
        for layer in self.layers:
            cache = KVCache(batch, max_len, s["kv_heads"], d, w.dtype, w.device)
            layer.self_attn.kv_cache = cache
        inv_freq = THETA ** -(torch.arange(0, d, 2, device=w.device).float() / d)
        angles = torch.outer(torch.arange(max_len, device=w.device).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)  # (max_len, D)
        self.register_buffer("cos", angles.cos().to(w.dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(w.dtype), persistent=False)
        causal = torch.ones(max_len, max_len, dtype=torch.bool, device=w.device).tril()
        self.register_buffer("causal", causal, persistent=False)
        self.cached = (batch, max_len)

    def forward(self, idx, input_pos):  # idx: (B, T) token ids at positions input_pos
        mask = self.causal[None, None, input_pos]  # (1, 1, T, max_len)
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, input_pos)
        return self.lm_head(self.norm(x))  # (B, T, vocab)

    @classmethod
    def from_hf(cls, hf) -> Transformer:
        names = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")
        with torch.device("meta"):
            model = cls({k: getattr(hf.config, models.HF[k]) for k in names})
        weights = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
        model.load_state_dict(weights, assign=True)  # HF's tensors, not copies
        return model.eval()


def sample(logits, noise=None, temperature=1.0, top_k=None):  # logits: (B, vocab)
    if noise is None:  # greedy
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        pivot = torch.topk(logits, top_k).values[:, -1:]  # the k-th largest
        logits = torch.where(logits < pivot, -float("inf"), logits)
    return (F.softmax(logits, dim=-1) / noise).argmax(-1, keepdim=True)  # (B, 1)


def prefill(model, prompt, input_pos, noise=None, temperature=1.0, top_k=None):
    return sample(model(prompt, input_pos)[:, -1], noise, temperature, top_k)


def decode_one(model, token, input_pos, noise=None, temperature=1.0, top_k=None):
    return sample(model(token, input_pos)[:, -1], noise, temperature, top_k)


@torch.no_grad()
def generate(
    model, prompt, new, prefill=prefill, decode_one=decode_one, streamer=None,
    temperature=0.0, top_k=None, generator=None,
):  # fmt: skip
    (B, T), device = prompt.shape, prompt.device
    model.setup_caches(B, T + new)
    put = streamer.put if streamer else lambda tokens: None
    sampling = dict(temperature=temperature, top_k=top_k)

    def noise():  # exponential draws for a sampled token, None for greedy
        if temperature == 0.0:
            return None
        q = torch.empty(B, model.sizes["vocab"], device=device)
        return q.exponential_(generator=generator)

    put(prompt)
    token = prefill(model, prompt, torch.arange(T, device=device), noise(), **sampling)
    tokens, input_pos = [token], torch.tensor([T], device=device)
    for _ in range(new - 1):
        put(token)
        torch.compiler.cudagraph_mark_step_begin()
        token = decode_one(model, token, input_pos, noise(), **sampling).clone()
        input_pos += 1
        tokens.append(token)
    put(token)
    return torch.cat([prompt, *tokens], dim=1)  # (B, T + new), as HF's generate


sync = common.sync


class Clock:
    """A streamer (`put`, `end`) that notes when a generate starts, when its first new
    token is out, and when it is over."""

    def __init__(self, device: str):
        self.device, self.puts, self.first = device, 0, None
        sync(device)
        self.start = self.stop = time.perf_counter()

    def put(self, tokens) -> None:
        self.puts += 1
        if self.puts == 2:  # the prompt, then the first new token
            sync(self.device)
            self.first = time.perf_counter()

    def end(self) -> None:
        sync(self.device)
        self.stop = time.perf_counter()


@dataclass
class DecodeRow:
    workload: str
    batch: int
    backend: str
    status: str = "ok"  # ok, wrong: why, error: the exception's first line, skipped
    dtype: str = ""
    device: str = ""
    shape: str = ""  # prompt=32 new=128
    same: int | None = None  # new tokens equal to eager's before one that is not
    new: int | None = None  # new tokens per sequence
    tok_s: float | None = None  # decode tokens/s per sequence, the median round
    tok_s_min: float | None = None
    tok_s_max: float | None = None
    speedup: float | None = None  # tok_s / eager's
    first_ms: float | None = None  # time to the first token, median
    compile_s: float | None = None  # the cold generate less a warm one
    peak_mib: float | None = None
    graphs: int | None = None
    kernels: int | None = None  # minductor
    detail: str = ""


def agreeing(got: torch.Tensor, eager: torch.Tensor, new: int) -> int:
    """The new tokens equal in every sequence before the first that differs."""
    differs = (got[:, -new:] != eager[:, -new:]).any(0)
    return int(differs.int().argmax()) if differs.any() else new


ROUNDS = {"cuda": 5, "cpu": 2}  # timed generates per backend, one per round


def run_backend(row: DecodeRow, reference, prompt, device: str):
    """A fresh copy of the model on one backend: its cold and warm generates, checked
    later; returns their tokens, a timed generate and the list its clocks go to."""
    counters.clear()
    gc.collect()
    held = 0
    if device == "cuda":
        torch.cuda.empty_cache()
        held = torch.cuda.memory_allocated()
    model = copy.deepcopy(reference).to(device, common.DTYPES[row.dtype])
    run, clocks = RECIPES[row.workload](model, row.backend, row.new), []

    def one_generate():
        clock = Clock(device)
        out = run(prompt, clock)
        clock.end()
        clocks.append(clock)
        return out

    with record_compiled() as compiled:
        cold = one_generate()
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        warm = one_generate()
    if device == "cuda":
        row.peak_mib = (torch.cuda.max_memory_allocated() - held) / 2**20
    if row.backend != "eager":
        took = [c.stop - c.start for c in clocks]
        row.compile_s = took[0] - took[1]
        row.graphs = counters["stats"]["unique_graphs"]
        if not row.graphs:  # another backend's compiled code answered the call
            raise RuntimeError(f"{row.backend} compiled no graph")
    if compiled:
        row.kernels = sum(len(g.kernel_names) for g in compiled)
    clocks.clear()
    return (cold.cpu(), warm.cpu()), one_generate, clocks


def measure_decoding(
    workload, batch, backends, tiny, dtype, new=None, report=lambda row: None
) -> list[DecodeRow]:
    sizes = TINY if tiny else REAL
    new = new or sizes["new"]
    device = common.on_gpu()
    torch.manual_seed(0)
    reference = LLAMA(sizes).eval()
    prompt = torch.randint(1, sizes["vocab"], (batch, sizes["prompt"])).to(device)
    torch._dynamo.reset()  # once: each backend's code stays cached for the timing
    eager, rows, steps, clocks = None, [], {}, {}
    for backend in ["eager", *(b for b in backends if b != "eager")]:
        row = DecodeRow(workload, batch, backend, dtype=dtype, device=device, new=new)
        row.shape = f"prompt={sizes['prompt']} new={new}"
        if eager is None and backend != "eager":
            row.status = "error: eager failed, nothing to compare with"
        else:
            try:
                got, steps[backend], clocks[backend] = run_backend(
                    row, reference, prompt, device
                )
            except Exception as error:
                common.error_row(row, error)
            else:
                eager = got[0] if eager is None else eager
                row.same = min(agreeing(g, eager, new) for g in got)
                if row.same < new and dtype == "fp32":
                    row.status = f"wrong: new token {row.same} is not eager's"
        if backend in backends:
            rows.append(row)
            report(row)  # all but its timing: a crash while timing keeps it
    times = common.time_in_turns(steps, device, ROUNDS[device], per_round=1)
    for row in rows:
        if isinstance(times.get(row.backend), BaseException):
            common.error_row(row, times[row.backend])
        elif row.backend in times:
            fill_times(row, clocks[row.backend], clocks.get("eager"))
    return rows


def fill_times(row: DecodeRow, clocks: list[Clock], eager: list[Clock] | None):
    def rate(c: Clock) -> float:  # decode tokens/s per sequence
        return (row.new - 1) / (c.stop - c.first)

    rates = [rate(c) for c in clocks]
    row.tok_s = statistics.median(rates)
    row.tok_s_min, row.tok_s_max = min(rates), max(rates)
    row.first_ms = statistics.median(c.first - c.start for c in clocks) * 1e3
    if eager:
        row.speedup = row.tok_s / statistics.median(map(rate, eager))


def child_main(args) -> int:
    workload, batch, dtype = args.child
    common.start_child(args.backends)
    rows = measure_decoding(
        workload, int(batch), args.backends, args.tiny, dtype, args.new_tokens,
        common.report,
    )  # fmt: skip
    for row in rows:  # again, timed: a backend's last report is the one that counts
        common.report(row)
    return 0


def run_child(workload: str, batch: int, args) -> list[DecodeRow]:
    command = ["-m", "minductor.models", "--decode", "--child", workload, str(batch)]
    command += [args.dtype, "--backends", *args.backends]
    command += ["--new-tokens", str(args.new_tokens)] + ["--tiny"] * args.tiny
    out, err, why = common.spawn(command, args.timeout)
    rows = common.reported(out, DecodeRow)
    tail = common.last_lines(err)
    for backend in args.backends:  # each backend's last report, or why there is none
        row = rows.get(backend)
        if row is None:
            status = f"error: {why}" + (f": {tail[-1]}" if tail else "")
            rows[backend] = DecodeRow(workload, batch, backend, status)
            rows[backend].detail = "\n".join(tail)
        elif row.status == "ok" and row.tok_s is None:
            row.status = f"error: {why}, while timing"
    return [rows[b] for b in args.backends]


def run_suite(args) -> list[DecodeRow]:
    rows, why = [], common.missing("transformers")
    for workload in args.decode:
        for batch in args.batch:
            start = time.perf_counter()
            if why:
                skipped = f"skipped: {why}"
                found = [DecodeRow(workload, batch, b, skipped) for b in args.backends]
            else:
                found = run_child(workload, batch, args)
            took = time.perf_counter() - start
            done = ", ".join(map(progress, found))
            print(f"{workload} B={batch} ({took:.0f} s): {done}", file=sys.stderr)
            rows += found
            if args.json:
                common.write_json(args.json, rows, tiny=args.tiny)
    return rows


def progress(r: DecodeRow) -> str:
    rate = f" {r.tok_s:.0f} tok/s" if r.tok_s is not None else ""
    return f"{r.backend} {r.status}{rate}"


def markdown(rows: list[DecodeRow]) -> str:
    header = ["workload", "B", "backend", "status", "same tokens", "tok/s", "min–max"]
    header += ["total tok/s", "vs eager", "first token ms", "compile s", "peak MiB"]
    header += ["graphs", "kernels"]
    body = []
    for r in rows:
        spread = f"{fmt(r.tok_s_min, '.0f')}–{fmt(r.tok_s_max, '.0f')}"
        total = r.tok_s * r.batch if r.tok_s is not None else None
        name = LABELS.get(r.backend, r.backend)
        body.append(
            [r.workload, str(r.batch), name, cell(r.status)]
            + [f"{r.same}/{r.new}" if r.same is not None else "—"]
            + [fmt(r.tok_s, ".0f"), spread if r.tok_s else "—", fmt(total, ".0f")]
            + [fmt(r.speedup, ".2f"), fmt(r.first_ms, ".1f"), fmt(r.compile_s, ".1f")]
            + [fmt(r.peak_mib, ".0f"), fmt(r.graphs, ".0f"), fmt(r.kernels, ".0f")]
        )
    return "\n".join(table(header, body))


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minductor.models",
        description="eager vs Inductor vs minductor generating text "
        "(chapters/measuring_decoding.md); prints a markdown table",
    )
    add, names = parser.add_argument, list(common.BACKENDS)
    add("--decode", nargs="*", metavar="WORKLOAD", help=f"{', '.join(WORKLOADS)}")
    add("--batch", nargs="+", type=int, help="batch sizes (default: 1 8; --tiny: 1 2)")
    add("--new-tokens", type=int, help="per sequence (default: 128; --tiny: 6)")
    add("--dtype", choices=common.DTYPES, help="(default: bf16; --tiny: fp32)")
    add("--backends", nargs="+", choices=names, default=names, help="eager runs anyway")
    add("--tiny", action="store_true", help="small sizes, for Triton's interpreter")
    add("--timeout", type=float, default=600, help="seconds per workload and batch")
    add("--json", metavar="PATH", help="write all raw results here")
    add("--list", action="store_true", help="list the workloads and exit")
    add("--child", nargs=3, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    unknown = set(args.decode or ()) - set(WORKLOADS)
    if unknown:
        parser.error(f"no workload {sorted(unknown)}; there are {', '.join(WORKLOADS)}")
    sizes = TINY if args.tiny else REAL
    args.decode = args.decode or list(WORKLOADS)
    args.batch = args.batch or BATCHES[args.tiny]
    args.new_tokens = args.new_tokens or sizes["new"]
    args.dtype = args.dtype or ("fp32" if args.tiny else "bf16")
    if args.new_tokens < 2:
        parser.error("--new-tokens: at least 2 (the first token, then a decode)")
    return args


def listing() -> str:
    recipes = {
        "hf-static": "HF generate, static cache; HF compiles its step, reduce-overhead",
        "hf-dynamic": "HF generate, growing cache; forward compiled, dynamic=True",
        "gpt-fast": "our Llama and loop; prefill compiled, step reduce-overhead",
    }
    lines = [f"{name:<12}{what}" for name, what in recipes.items()]
    for tiny, s in ((False, REAL), (True, TINY)):
        sizes = " ".join(f"{k}={v}" for k, v in s.items())
        batches = " ".join(map(str, BATCHES[tiny]))
        lines.append(f"{'--tiny:' if tiny else 'sizes:':<12}{sizes}, B={batches}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if (status := common.start(args, listing, child_main)) is not None:
        return status
    print(markdown(run_suite(args)))
    return 0


def summary(rows: list[DecodeRow]) -> list[str]:
    """A line per workload and batch: the backends side by side."""
    by: dict[tuple, dict[str, DecodeRow]] = {}
    for r in rows:
        by.setdefault((r.workload, r.batch), {})[r.backend] = r
    header = ["workload", "B", "tok/s, eager / Inductor / minductor", "vs Inductor"]
    header += ["first token ms, Inductor / minductor"]
    header += ["compile s, Inductor / minductor", "same tokens, minductor"]
    body = []
    for (workload, batch), b in by.items():
        e, i, m = (b.get(k) for k in common.BACKENDS)
        if m is None or m.status != "ok" or m.tok_s is None:
            continue
        rates = " / ".join(fmt(r.tok_s if r else None, ".0f") for r in (e, i, m))
        vs = m.tok_s / i.tok_s if i and i.tok_s else None
        first = f"{fmt(i.first_ms if i else None, '.1f')} / {fmt(m.first_ms, '.1f')}"
        cold = f"{fmt(i.compile_s if i else None, '.1f')} / {fmt(m.compile_s, '.1f')}"
        same = f"{m.same}/{m.new}" if m.same is not None else "—"
        speed = fmt(vs, ".2f") + "x"
        body.append([workload, str(batch), rates, speed, first, cold, same])
    return table(header, body)
