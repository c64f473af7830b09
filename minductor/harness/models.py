# generated from chapters/measuring_models.md — edit there

"""The real-model suite of chapters/measuring_models.md: python -m minductor.models."""

from __future__ import annotations

import argparse
import copy
import gc
import importlib
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._dynamo.utils import counters

from minductor.capture import record_compiled
from minductor.harness import common
from minductor.harness.common import BACKENDS, DTYPES, LABELS, cell, fmt, table

MODES = ("inference", "training")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile(mode=)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    library: str  # the package that must import for this model to run
    build: Callable[[dict[str, int]], torch.nn.Module]
    inputs: Callable[[dict[str, int]], dict[str, torch.Tensor]]
    real: dict[str, int]  # sizes: layers, hidden width, heads, batch B, length T...
    tiny: dict[str, int]


def transformer(model: str, config: str, names: dict[str, str], **settings):
    """A builder: our sizes under the config's own names, and fixed settings."""

    def build(sizes: dict[str, int]) -> torch.nn.Module:
        import transformers

        transformers.logging.set_verbosity_error()  # no advice about random weights
        ours = {names[k]: v for k, v in sizes.items() if k in names}
        return getattr(transformers, model)(
            getattr(transformers, config)(**ours, **settings)
        )

    return build


HF = dict(layers="num_hidden_layers", hidden="hidden_size", heads="num_attention_heads")
HF.update(kv_heads="num_key_value_heads", ffn="intermediate_size", vocab="vocab_size")
HF.update(image="image_size", patch="patch_size", classes="num_labels")  # ViT
GPT2 = dict(layers="n_layer", hidden="n_embd", heads="n_head", ffn="n_inner")
DISTILBERT = dict(layers="n_layers", hidden="dim", heads="n_heads", ffn="hidden_dim")
T5 = dict(layers="num_layers", hidden="d_model", heads="num_heads", ffn="d_ff")
T5.update(head_dim="d_kv")
for names in (GPT2, DISTILBERT, T5):
    names.update(vocab="vocab_size")


def torchvision_model(name: str, **settings):
    def build(sizes: dict[str, int]) -> torch.nn.Module:
        import torchvision

        make = getattr(torchvision.models, name)
        return make(weights=None, num_classes=sizes["classes"], **settings)

    return build


def text(s):  # a language model's labels are its inputs (the model shifts them)
    ids = torch.randint(1, s["vocab"], (s["B"], s["T"]))
    return {"input_ids": ids, "labels": ids}


def text_to_text(s):
    ids = torch.randint(1, s["vocab"], (s["B"], s["T"]))
    targets = torch.randint(1, s["vocab"], (s["B"], s["T_dec"]))
    return {"input_ids": ids, "decoder_input_ids": targets, "labels": targets}


def images(s):
    x = torch.randn(s["B"], 3, s["image"], s["image"])
    return {"pixel_values": x, "labels": torch.randint(0, s["classes"], (s["B"],))}


def vision(s):  # torchvision's models take `x` and have no loss of their own
    return {"x": torch.randn(s["B"], 3, s["image"], s["image"])}


BASE = dict(layers=6, hidden=768, heads=12, ffn=3072)  # BERT-base's widths, 6 layers
TINY = dict(layers=2, hidden=64, heads=4, ffn=128, vocab=128, B=2, T=16)
SIZES = dict(B=32, image=224, classes=1000), dict(B=2, image=64, classes=10)  # vision
# dropout off, so that every backend computes the same function; no key/value cache
GPT2_SETTINGS = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
BERT_SETTINGS = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
T5_SETTINGS = dict(dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
T5_SETTINGS.update(use_cache=False)


MODELS = [
    ModelSpec(
        "gpt2",
        "transformers",
        transformer("GPT2LMHeadModel", "GPT2Config", GPT2, **GPT2_SETTINGS),
        text,
        dict(BASE, vocab=50257, B=8, T=512),
        TINY,
    ),
    ModelSpec(
        "bert",
        "transformers",
        transformer("BertForMaskedLM", "BertConfig", HF, **BERT_SETTINGS),
        text,
        dict(BASE, vocab=30522, B=16, T=256),
        TINY,
    ),
    ModelSpec(  # TinyLlama-1.1B's layers, 6 of its 22
        "llama",
        "transformers",
        transformer("LlamaForCausalLM", "LlamaConfig", HF, use_cache=False),
        text,
        dict(layers=6, hidden=2048, heads=32, kv_heads=4, ffn=5632, vocab=32000)
        | dict(B=4, T=512),
        dict(TINY, kv_heads=2),
    ),
    ModelSpec(  # Qwen2-0.5B's layers (biased q/k/v, 14 heads over 2), 6 of its 24
        "qwen2",
        "transformers",
        transformer("Qwen2ForCausalLM", "Qwen2Config", HF, use_cache=False),
        text,
        dict(layers=6, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936)
        | dict(B=4, T=512),
        dict(TINY, kv_heads=2),
    ),
    ModelSpec(  # t5-small's widths, 4 encoder and 4 decoder layers
        "t5",
        "transformers",
        transformer("T5ForConditionalGeneration", "T5Config", T5, **T5_SETTINGS),
        text_to_text,
        dict(layers=4, hidden=512, heads=8, head_dim=64, ffn=2048, vocab=32128)
        | dict(B=8, T=512, T_dec=128),
        dict(TINY, head_dim=16, T_dec=8),
    ),
    ModelSpec(  # ViT-B/16
        "vit",
        "transformers",
        transformer("ViTForImageClassification", "ViTConfig", HF, **BERT_SETTINGS),
        images,
        dict(BASE, layers=12, image=224, patch=16, classes=1000, B=16),
        dict(layers=2, hidden=64, heads=4, ffn=128, image=32, patch=8, classes=10, B=2),
    ),
    ModelSpec(
        "distilbert",
        "transformers",
        transformer(
            "DistilBertForMaskedLM",
            "DistilBertConfig",
            DISTILBERT,
            dropout=0.0,
            attention_dropout=0.0,
        ),
        text,
        dict(BASE, vocab=30522, B=16, T=256),
        TINY,
    ),
]


MODELS += [
    ModelSpec(name, "torchvision", torchvision_model(name, **kw), vision, *SIZES)
    for name, kw in [
        ("resnet18", {}),
        ("resnet50", {}),
        ("mobilenet_v3_large", dict(dropout=0.0)),
        ("efficientnet_b0", dict(dropout=0.0, stochastic_depth_prob=0.0)),
        ("convnext_tiny", dict(stochastic_depth_prob=0.0)),
    ]
]


def outputs_of(result) -> dict[str, torch.Tensor]:
    if isinstance(result, torch.Tensor):  # torchvision: the logits
        return {"logits": result}
    return {k: result[k] for k in ("loss", "logits") if result.get(k) is not None}


def step(model, inputs: dict, training: bool) -> dict[str, torch.Tensor]:
    if not training:
        with torch.no_grad():
            return outputs_of(model(**inputs))
    for p in model.parameters():
        p.grad = None
    out = outputs_of(model(**inputs))
    loss = out["loss"] if "loss" in out else out["logits"].float().mean()
    loss.backward()
    return out


def snapshot(model, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Everything a backend computed that we compare: outputs, then gradients."""
    found = {k: v.detach().cpu() for k, v in out.items()}
    for name, p in model.named_parameters():
        if p.grad is not None:
            found[f"grad {name}"] = p.grad.cpu()
    return found


@dataclass
class Row:
    model: str
    mode: str  # inference, training
    dtype: str  # fp32, bf16
    backend: str
    status: str = "ok"  # ok, wrong: why, error: the exception's first line, skipped
    shape: str = ""  # B=8 T=512
    device: str = ""
    compile_mode: str = ""  # torch.compile's mode, for a compiled backend
    # accuracy, against eager and against fp64 (see check)
    out_abs: float | None = None  # max |backend - eager| over the outputs
    out_rel: float | None = None  # ...over max |eager|
    err64: float | None = None  # the logits' relative RMS distance from fp64
    err64_eager: float | None = None  # ...and eager's
    grad_rel: float | None = None  # max over parameters of max |diff| / max |eager|
    ratio: float | None = None  # error / allowed, the largest over tensors: > 1 wrong
    worst: str | None = None  # the tensor with that ratio
    noise: int | None = None  # tensors not compared: eager has no correct digit
    # speed and memory
    cold_s: float | None = None  # the first step, compile included, caches empty
    step_ms: float | None = None  # median step, warm
    speedup: float | None = None  # eager's step_ms / this backend's
    peak_mib: float | None = None  # torch.cuda.max_memory_allocated (CUDA only)
    # what the compiler made of the model
    graphs: int | None = None  # Dynamo graphs, recompiles included
    graph_breaks: int | None = None  # distinct reasons Dynamo gave for a break
    break_reasons: dict[str, int] = field(default_factory=dict)  # reason -> count
    compiled_graphs: int | None = None  # minductor: forward and backward graphs
    kernels: int | None = None  # minductor: Triton kernels generated
    fallbacks: dict[str, int] = field(default_factory=dict)  # minductor: op -> count
    detail: str = ""  # the traceback's last lines, for an error


MULTIPLIER = {"fp32": 2.0, "bf16": 3.0}  # Inductor's
FLOOR = {"fp32": 1e-5, "bf16": 2**-8}  # relative; bf16: half a unit in the last place
NOISE = 0.5  # eager's own error at which a tensor has no digit left to compare


def rel_rmse(x: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.pow(2).mean().sqrt().item()
    return (x - ref).pow(2).mean().sqrt().item() / max(scale, 1e-30)


def check(row: Row, got: dict, eager: dict, fp64: dict) -> str:
    """Fills in the row's errors; returns why the backend is wrong, or ""."""
    if got.keys() != eager.keys():
        odd = sorted(got.keys() ^ eager.keys())
        return f"{len(odd)} tensors, {odd[0]} first, in only one of backend and eager"
    row.out_abs = row.out_rel = row.ratio = 0.0
    row.noise = 0
    for name, e in eager.items():
        g, e, r = got[name].double(), e.double(), fp64[name]
        if g.shape != e.shape:
            return f"{name}: shape {tuple(g.shape)}, eager's {tuple(e.shape)}"
        if not g.isfinite().all() and r.isfinite().all():
            return f"{name}: not finite"
        err, err_eager = rel_rmse(g, r), rel_rmse(e, r)
        if name == "logits":
            row.err64, row.err64_eager = err, err_eager
        if err_eager > NOISE:
            row.noise += 1
            continue
        diff = (g - e).abs().max().item()
        rel = diff / max(e.abs().max().item(), 1e-30)
        if name.startswith("grad "):
            row.grad_rel = max(row.grad_rel or 0.0, rel)
        else:
            row.out_abs, row.out_rel = max(row.out_abs, diff), max(row.out_rel, rel)
        ratio = err / (MULTIPLIER[row.dtype] * err_eager + FLOOR[row.dtype])
        if ratio >= row.ratio:
            row.ratio, row.worst = ratio, name
    if row.ratio > 1:
        return f"{row.worst} is {row.ratio:.1f}x as far from fp64 as allowed"
    return ""


WARMUP = {"cuda": 3, "cpu": 1}  # steps before timing
STEPS = {"cuda": 30, "cpu": 2}  # timed steps, of which the median is reported
ROUNDS = {"cuda": 3, "cpu": 2}  # turns each backend takes at being timed


def on_device(inputs: dict, device: str, dtype: torch.dtype) -> dict:
    return {
        k: v.to(device, dtype) if v.is_floating_point() else v.to(device)
        for k, v in inputs.items()
    }


def run_backend(
    row: Row, reference, inputs, training: bool, device: str
) -> tuple[dict, Callable[[], Any]]:
    """Runs one backend on a fresh copy of the model; fills in its row, all but the
    step time, and returns what it computed and its step, to be timed later."""
    counters.clear()
    gc.collect()  # the previous backend's model, if a reference cycle still holds it
    held = 0  # what earlier backends keep on the GPU (their models, for the timing)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        held = torch.cuda.memory_allocated()
    dtype = DTYPES[row.dtype]
    model = copy.deepcopy(reference).to(device, dtype).train(training)
    inputs = on_device(inputs, device, dtype)
    fn = model
    if row.backend != "eager":
        fn = torch.compile(model, backend=row.backend, mode=row.compile_mode)
    graphed = row.compile_mode == "reduce-overhead"

    def one_step():
        if graphed:  # a new step: the last step's outputs may be overwritten now
            torch.compiler.cudagraph_mark_step_begin()
        return step(fn, inputs, training)

    with record_compiled() as compiled:
        out, cold_s = common.timed(one_step, device)
        got = snapshot(model, out)
        del out  # as a loop does: a step's outputs are gone when the next one runs
        if device == "cuda":  # the steps' peak, not the snapshot's copies
            torch.cuda.reset_peak_memory_stats()
        for _ in range(WARMUP[device]):
            one_step()
    if device == "cuda":
        row.peak_mib = (torch.cuda.max_memory_allocated() - held) / 2**20
    if row.backend != "eager":
        row.cold_s = cold_s
        row.graphs = counters["stats"]["unique_graphs"]
        if not row.graphs:  # another backend's compiled code answered the call
            raise RuntimeError(f"{row.backend} compiled no graph")
        reasons = Counter()
        for reason, n in counters["graph_break"].items():
            reasons[reason.splitlines()[0]] += n
        row.graph_breaks, row.break_reasons = len(reasons), dict(reasons)
    if compiled:
        row.compiled_graphs = len(compiled)
        row.kernels = sum(len(g.kernel_names) for g in compiled)
        row.fallbacks = dict(Counter(f for g in compiled for f in g.fallbacks))
    return got, one_step


def build(name: str, training: bool, tiny: bool = False):
    """A model of the suite at its real (or tiny) sizes, and its inputs (no labels at
    inference)."""
    spec = next(m for m in MODELS if m.name == name)
    sizes = spec.tiny if tiny else spec.real
    torch.manual_seed(0)
    model, inputs = spec.build(sizes), spec.inputs(sizes)
    if not training:
        inputs.pop("labels", None)
    return model, inputs


def fp64_reference(reference, inputs, training, dtype, device, wide=torch.float64):
    # the weights and inputs the backends see, rounded to dtype, then computed in fp64
    model = copy.deepcopy(reference).to(DTYPES[dtype]).to(device, wide)
    x = on_device(on_device(inputs, "cpu", DTYPES[dtype]), device, wide)
    try:
        out = step(model.train(training), x, training)
    except RuntimeError:  # an op with no fp64 kernel (grouped_mm): fp32 then
        if wide != torch.float64:
            raise
        return fp64_reference(reference, inputs, training, dtype, device, torch.float32)
    return {k: v.double() for k, v in snapshot(model, out).items()}


def measure_model(
    name: str,
    mode: str,
    dtype: str,
    backends: list[str],
    tiny: bool,
    compile_mode: str = "default",
    report: Callable[[Row], None] = lambda row: None,
) -> list[Row]:
    """The rows of one model, mode and dtype. Each is also reported as soon as it is
    compiled and checked, before the timing, which takes all backends at once."""
    spec = next(m for m in MODELS if m.name == name)
    sizes = spec.tiny if tiny else spec.real
    device = common.on_gpu()
    training = mode == "training"
    reference, inputs = build(name, training, tiny)
    fp64 = fp64_reference(reference, inputs, training, dtype, device)
    torch._dynamo.reset()  # once: each backend's code stays cached for the timing
    eager, rows, steps = None, [], {}
    for backend in ["eager", *(b for b in backends if b != "eager")]:
        row = Row(name, mode, dtype, backend, shape=shape(sizes), device=device)
        if backend != "eager":
            row.compile_mode = compile_mode
        if backend != "eager" and eager is None:
            row.status = "error: eager failed, nothing to compare with"
        else:
            try:
                got, steps[backend] = run_backend(
                    row, reference, inputs, training, device
                )
            except Exception as error:
                common.error_row(row, error)
            else:
                if eager is None:  # eager itself: what the others are compared with
                    eager = got
                problem = check(row, got, eager, fp64)
                row.status = f"wrong: {problem}" if problem else "ok"
        if backend in backends:
            rows.append(row)
            report(row)  # all but its time: a crash during the timing keeps it
    rounds = ROUNDS[device]
    times = common.time_in_turns(steps, device, rounds, STEPS[device] // rounds)
    for row in rows:
        t = times.get(row.backend)
        if isinstance(t, BaseException):
            common.error_row(row, t)
        elif t is not None:
            row.step_ms = t * 1e3
            if not isinstance(times["eager"], BaseException):
                row.speedup = times["eager"] / t
    return rows


def shape(sizes: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items() if k in ("B", "T", "image"))


def child_main(args) -> int:
    name, mode, dtype = args.child
    common.start_child(args.backends)
    rows = measure_model(
        name, mode, dtype, args.backends, args.tiny, args.compile_mode, common.report
    )
    for row in rows:  # again, timed: a backend's last report is the one that counts
        common.report(row)
    return 0


def run_child(name, mode, dtype, args) -> list[Row]:
    command = ["-m", "minductor.models", "--child", name, mode, dtype]
    command += ["--backends", *args.backends, "--compile-mode", args.compile_mode]
    out, err, why = common.spawn(command + ["--tiny"] * args.tiny, args.timeout)
    rows = list(common.reported(out, Row).values())  # each backend's last
    for r in rows:
        if r.status == "ok" and r.step_ms is None:  # it died while timing
            r.status = f"error: {why}, while timing"
    done = {r.backend for r in rows}
    tail = common.last_lines(err)
    last = tail[-1] if tail else ""
    for backend in args.backends:
        if backend not in done:
            status = f"error: {why}" + (f": {last}" if last else "")
            rows.append(Row(name, mode, dtype, backend, status, detail="\n".join(tail)))
    order = {b: i for i, b in enumerate(BACKENDS)}
    return sorted(rows, key=lambda r: order.get(r.backend, len(order)))


def run_suite(args) -> list[Row]:
    rows = []
    for spec in select(args.models):
        why = common.missing(spec.library)
        for mode in MODES if args.mode == "both" else [args.mode]:
            for dtype in DTYPES if args.dtype == "both" else [args.dtype]:
                start = time.perf_counter()
                if why:
                    sizes = spec.tiny if args.tiny else spec.real
                    found = [
                        Row(spec.name, mode, dtype, b, f"skipped: {why}", shape(sizes))
                        for b in args.backends
                    ]
                else:
                    found = run_child(spec.name, mode, dtype, args)
                took = time.perf_counter() - start
                statuses = ", ".join(map(progress, found))
                print(
                    f"{spec.name} {mode} {dtype} ({took:.0f} s): {statuses}",
                    file=sys.stderr,
                    flush=True,
                )
                rows += found
                if args.json:  # after every child: a suite cut short keeps its rows
                    common.write_json(args.json, rows, tiny=args.tiny)
    return rows


def progress(r: Row) -> str:
    """One backend's result in a line: status, step time, speed-up, compile time."""
    if r.step_ms is None:
        return f"{r.backend} {r.status}"
    speed = f", {r.speedup:.2f}x" if r.speedup and r.backend != "eager" else ""
    cold = f", cold {r.cold_s:.1f} s" if r.cold_s is not None else ""
    return f"{r.backend} {r.status} {r.step_ms:.2f} ms{speed}{cold}"


def fallbacks_cell(fallbacks: dict[str, int]) -> str:
    return ", ".join(f"{op} ×{n}" for op, n in sorted(fallbacks.items())) or "—"


def label(r: Row) -> str:
    """The backend's name in a table, with its mode when it is not the default."""
    name = LABELS.get(r.backend, r.backend)
    if r.compile_mode in ("", "default"):
        return name
    return f"{name} ({r.compile_mode})"


def markdown(rows: list[Row]) -> str:
    header = ["model", "mode", "dtype", "backend", "status", "max abs err", "rel err"]
    header += ["err / allowed", "grad rel err", "cold s", "step ms", "vs eager"]
    header += ["peak MiB", "graphs", "breaks", "fallbacks"]
    body = []
    for r in rows:
        body.append(
            [
                r.model + (f" ({r.shape})" if r.shape else ""),
                r.mode,
                r.dtype,
                label(r),
            ]
            + [cell(r.status), fmt(r.out_abs, ".1e"), fmt(r.out_rel, ".1e")]
            + [fmt(r.ratio, ".2f"), fmt(r.grad_rel, ".1e"), fmt(r.cold_s, ".1f")]
            + [fmt(r.step_ms, ".1f"), fmt(r.speedup, ".2f")]
            + [fmt(r.peak_mib, ".0f"), fmt(r.graphs, ".0f"), fmt(r.graph_breaks, ".0f")]
            + [fallbacks_cell(r.fallbacks)]
        )
    return "\n".join(table(header, body))


def svg(rows: list[Row], width: int = 760) -> str:
    shown = ("inductor", "minductor")
    groups: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.backend in shown and r.speedup is not None:
            name = f"{r.model} {r.mode} {r.dtype}"
            groups.setdefault(name, {})[r.backend] = r.speedup
    modes = {r.compile_mode for r in rows if r.backend in shown} - {"", "default"}
    title = "Speed-up over eager per model (eager's step time / the backend's)"
    if modes:
        title += f", mode={', '.join(sorted(modes))}"
    groups = list(groups.items())
    return common.bar_chart(title, groups, shown, width, bar=9, gap=8)


NAMES = dict(gpt2="GPT-2", bert="BERT", llama="Llama", qwen2="Qwen2", t5="T5")
NAMES.update(vit="ViT-B/16", distilbert="DistilBERT", resnet18="ResNet-18")
NAMES.update(resnet50="ResNet-50", mobilenet_v3_large="MobileNetV3-Large")
NAMES.update(efficientnet_b0="EfficientNet-B0", convnext_tiny="ConvNeXt-T")


def summary(rows: list[Row]) -> list[str]:
    """A line per child (model, mode, dtype and compile mode): the backends side by
    side. A child's rows come together, eager's first."""
    children: list[dict[str, Row]] = []
    for r in rows:
        last = children[-1] if children else {}
        key = (r.model, r.mode, r.dtype)
        same = all((g.model, g.mode, g.dtype) == key for g in last.values())
        if not children or r.backend == "eager" or not same or r.backend in last:
            children.append({})
        children[-1][r.backend] = r
    header = ["model", "mode", "eager ms", "Inductor ms", "minductor ms", "vs eager"]
    header += ["vs Inductor", "cold s, Inductor / minductor"]
    header += ["peak MiB, eager / Inductor / minductor"]
    body = []
    for child in children:
        e, i, m = (child.get(k) for k in BACKENDS)
        if m is None or m.status != "ok":
            continue
        shape = (e and e.shape) or m.shape
        name = NAMES.get(m.model, m.model) + (f" ({shape})" if shape else "")
        graphed = m.compile_mode not in ("", "default")
        how = m.mode + (f", {m.compile_mode}" if graphed else "")
        eager_ms = e.step_ms if e else m.step_ms * m.speedup  # a run that kept no eager row
        times = [fmt(ms, ".2f") for ms in (eager_ms, i and i.step_ms, m.step_ms)]
        vs = i.step_ms / m.step_ms if i and i.step_ms and m.step_ms else None
        cold = f"{fmt(i.cold_s if i else None, '.1f')} / {fmt(m.cold_s, '.1f')}"
        peaks = " / ".join(fmt(r.peak_mib if r else None, ".0f") for r in (e, i, m))
        speeds = [fmt(m.speedup, ".2f") + "x", fmt(vs, ".2f") + "x"]
        body.append([name, how, *times, *speeds, cold, peaks])
    return table(header, body)


def select(words: list[str] | None) -> list[ModelSpec]:
    if not words:
        return MODELS
    names = {m.name for m in MODELS}
    chosen = set()
    for word in words:
        w = word.lower()
        chosen |= {w} if w in names else {n for n in names if w in n}
    return [m for m in MODELS if m.name in chosen]


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minductor.models",
        description="eager vs Inductor vs minductor on real models "
        "(chapters/measuring_models.md); prints a markdown table",
        epilog="--decode [WORKLOAD ...]: the decoding workloads of "
        "chapters/measuring_decoding.md instead (see --decode --help)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        metavar="NAME",
        help="model names, or substrings of them (default: all)",
    )
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--dtype", choices=[*DTYPES, "both"], default="both")
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=BACKENDS,
        default=list(BACKENDS),
        help="the rows to report (default: all three); eager runs in any case",
    )
    parser.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default="default",
        help="torch.compile's mode for Inductor and minductor alike (default: default)",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="2 layers, width 64, short sequences: runs on CPU in Triton's interpreter",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        metavar="SECONDS",
        help="per model, mode and dtype (default: 600)",
    )
    parser.add_argument("--json", metavar="PATH", help="write all raw results here")
    parser.add_argument("--svg", metavar="PATH", help="write the speed-up chart here")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.models and not select(args.models):
        parser.error(f"no model name contains any of {args.models}")
    return args


def listing() -> str:
    lines = []
    for m in MODELS:
        real, tiny = (
            " ".join(f"{k}={v}" for k, v in s.items()) for s in (m.real, m.tiny)
        )
        lines += [f"{m.name:<19}{m.library:<13}{real}", f"{'--tiny:':>32} {tiny}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--decode" in argv:  # the decoding workloads, chapters/measuring_decoding.md
        return importlib.import_module("minductor.harness.decoding").main(argv)
    args = parse_args(argv)
    if (status := common.start(args, listing, child_main)) is not None:
        return status
    rows = run_suite(args)
    print(markdown(rows))
    if args.svg:
        common.write(args.svg, svg(rows))
    return 0
