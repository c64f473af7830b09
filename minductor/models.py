# generated from chapters/models.md — edit there

"""The real-model suite of chapters/models.md: `python -m minductor.models`."""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from dataclasses import asdict, dataclass, field

import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters

from minductor.bench import LABELS, bar_chart, fmt, table
from minductor.capture import record_compiled
from minductor.config import config

BACKENDS = ("eager", "inductor", "minductor")
MODES = ("inference", "training")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile(mode=)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


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


def timed(fn, device: str):
    """Runs fn; returns its result and the seconds until its work is done."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def on_device(inputs: dict, device: str, dtype: torch.dtype) -> dict:
    return {
        k: v.to(device, dtype) if v.is_floating_point() else v.to(device)
        for k, v in inputs.items()
    }


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """A block whose collections never walk the objects that exist when it starts."""
    gc.collect()
    gc.freeze()  # what exists now (other backends' leftovers too) is never scanned
    try:
        yield
    finally:
        gc.unfreeze()


def first_line(error: BaseException) -> str:
    while getattr(error, "inner_exception", None) is not None:  # Dynamo's wrapper
        error = error.inner_exception
    lines = [s for s in str(error).splitlines() if s.strip()] or [""]
    return f"{type(error).__name__}: {lines[0]}"[:300]


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
        out, cold_s = timed(one_step, device)
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


def time_in_turns(
    steps: dict[str, Callable[[], Any]], device: str, rounds=None, per_round=None
) -> dict:
    """Median seconds per step of each backend, or the error its step raised.
    The backends take turns: ROUNDS rounds (or `rounds`), each backend's steps in one
    block, the order reversed from one round to the next."""
    rounds = rounds or ROUNDS[device]
    per_round = per_round or STEPS[device] // rounds
    times: dict[str, list[float]] = {b: [] for b in steps}
    failed: dict[str, BaseException] = {}
    with frozen_heap():
        for r in range(rounds):
            for backend in list(steps) if r % 2 == 0 else list(steps)[::-1]:
                if backend in failed:
                    continue
                try:
                    for _ in range(per_round):
                        times[backend].append(timed(steps[backend], device)[1])
                except Exception as error:
                    failed[backend] = error
    return {b: failed.get(b) or statistics.median(t) for b, t in times.items()}


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
    device = "cuda" if torch.cuda.is_available() else "cpu"
    training = mode == "training"
    torch.manual_seed(0)
    reference, inputs = spec.build(sizes), spec.inputs(sizes)
    if not training:
        inputs.pop("labels", None)
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
                error_row(row, error)
            else:
                if eager is None:  # eager itself: what the others are compared with
                    eager = got
                problem = check(row, got, eager, fp64)
                row.status = f"wrong: {problem}" if problem else "ok"
        if backend in backends:
            rows.append(row)
            report(row)  # all but its time: a crash during the timing keeps it
    times = time_in_turns(steps, device)
    for row in rows:
        t = times.get(row.backend)
        if isinstance(t, BaseException):
            error_row(row, t)
        elif t is not None:
            row.step_ms = t * 1e3
            if not isinstance(times["eager"], BaseException):
                row.speedup = times["eager"] / t
    return rows


def error_row(row: Row, error: BaseException) -> None:
    row.status = f"error: {first_line(error)}"
    row.detail = "".join(traceback.format_exception(error)[-20:])


def shape(sizes: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items() if k in ("B", "T", "image"))


ROW = "@@minductor.models row "  # the prefix of a result line on the child's stdout
CACHES = "MINDUCTOR_MODELS_CACHES"  # the child's fresh cache directory


def child_main(args) -> int:
    name, mode, dtype = args.child
    warm_up(args.backends)

    def report(row: Row) -> None:
        print(ROW + json.dumps(asdict(row)), flush=True)

    rows = measure_model(
        name, mode, dtype, args.backends, args.tiny, args.compile_mode, report
    )
    for row in rows:  # again, timed: a backend's last report is the one that counts
        report(row)
    return 0


def warm_up(backends):
    config.cache_dir = os.path.join(os.environ[CACHES], "minductor")
    inductor_config.fx_graph_cache = False
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # eager's CPU time, independent of the machine's load
    # the first compile in a process imports and starts much: not the model's cost
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(64, device=device)
    for backend in backends:
        if backend != "eager":
            torch._dynamo.reset()
            torch.compile(lambda t: (t * 2).sum(), backend=backend)(x)


PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(name, mode, dtype, args) -> list[Row]:
    command = ["--child", name, mode, dtype, "--backends", *args.backends]
    command += ["--tiny"] * args.tiny + ["--compile-mode", args.compile_mode]
    out, err, why = spawn(command, args.timeout)
    reports = [
        Row(**json.loads(s[len(ROW) :])) for s in out.splitlines() if s.startswith(ROW)
    ]
    rows = list({r.backend: r for r in reports}.values())  # each backend's last
    for r in rows:
        if r.status == "ok" and r.step_ms is None:  # it died while timing
            r.status = f"error: {why}, while timing"
    done = {r.backend for r in rows}
    tail = [s for s in err.splitlines() if s.strip()][-20:]
    last = tail[-1] if tail else ""
    for backend in args.backends:
        if backend not in done:
            status = f"error: {why}" + (f": {last}" if last else "")
            rows.append(Row(name, mode, dtype, backend, status, detail="\n".join(tail)))
    order = {b: i for i, b in enumerate(BACKENDS)}
    return sorted(rows, key=lambda r: order.get(r.backend, len(order)))


def spawn(arguments: list[str], timeout: float) -> tuple[str, str, str]:
    """`python -m minductor.models` with these arguments, in a child with caches of
    its own and a timeout: its stdout, its stderr and how it ended."""
    root = tempfile.mkdtemp(prefix="minductor_models_")
    env = dict(
        os.environ,
        TRITON_CACHE_DIR=os.path.join(root, "triton"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
        PYTHONPATH=os.pathsep.join(
            filter(None, [PACKAGE_ROOT, os.getenv("PYTHONPATH")])
        ),
        **{CACHES: root},
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "minductor.models", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: a timeout kills it all
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        why = f"the child exited with status {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        why = f"timed out after {timeout:g} s"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out, err, why


def missing(library: str) -> str | None:
    try:
        importlib.import_module(library)
    except Exception as error:  # absent, or a wheel built for another torch
        return f"{library} does not import ({first_line(error)})"
    return None


def run_suite(args) -> list[Row]:
    rows = []
    for spec in select(args.models):
        why = missing(spec.library)
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
                    write_json(args.json, rows, args.tiny)
    return rows


def progress(r: Row) -> str:
    """One backend's result in a line: status, step time, speed-up, compile time."""
    if r.step_ms is None:
        return f"{r.backend} {r.status}"
    speed = f", {r.speedup:.2f}x" if r.speedup and r.backend != "eager" else ""
    cold = f", cold {r.cold_s:.1f} s" if r.cold_s is not None else ""
    return f"{r.backend} {r.status} {r.step_ms:.2f} ms{speed}{cold}"


def cell(text: str, width: int = 90) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


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
    return bar_chart(title, list(groups.items()), shown, width, bar=9, gap=8)


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
        "(chapters/models.md); prints a markdown table",
        epilog="--decode [WORKLOAD ...]: the decoding workloads of "
        "chapters/decoding.md instead (see --decode --help)",
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


def write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_json(path: str, rows: list[Row], tiny: bool) -> None:
    record = dict(
        device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        torch=torch.__version__,
        date=datetime.date.today().isoformat(),
        tiny=tiny,
        rows=[asdict(r) for r in rows],
    )
    write(path, json.dumps(record, indent=1))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--decode" in argv:  # the decoding workloads, chapters/decoding.md
        return importlib.import_module("minductor.decoding").main(argv)
    args = parse_args(argv)
    if args.list:
        print(listing())
        return 0
    if args.child:
        return child_main(args)
    if not torch.cuda.is_available() and not args.tiny:
        print(
            "no GPU: kernels run in Triton's interpreter; try --tiny", file=sys.stderr
        )
    rows = run_suite(args)
    print(markdown(rows))
    if args.svg:
        write(args.svg, svg(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
