"""Many models, each tried once: does minductor compile it and match eager?

The model suite (`python -m minductor.models`, chapters/measuring_models.md) times
models closely against eager and Inductor. This tool goes wide instead: some ninety
models of timm, torchvision and Hugging Face `transformers`, at small widths, built from
their libraries' configs with random weights and no dropout. Each model, mode and dtype
runs in a child process of its own (the harness's `spawn`), several at a time, through
the suite's own `measure_model` with eager and minductor only and a token timing (the
children share the GPU, so their times mean little). It reports each row's status (ok,
wrong, error), its errors against eager and fp64, graph breaks and fallbacks. Run on a
GPU, from the repository root:

    python tools/zoo.py [--only NAME...] [--mode both] [--jobs 6] [--json zoo.json]
        [--list]

On a CPU, `--tiny` shrinks everything for Triton's interpreter (slow).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, replace

import torch

from minductor.harness import common
from minductor.harness import models as suite
from minductor.harness.models import ModelSpec, Row

HERE = os.path.abspath(__file__)

# -- builders --------------------------------------------------------------------------


def no_dropout(config) -> None:
    """Every dropout-like probability in a transformers config set to zero, so that
    every backend computes the same function."""
    words = ("dropout", "pdrop", "layerdrop", "drop_path", "drop_rate")
    for key, value in list(vars(config).items()):
        if not any(w in key for w in words):
            continue
        if isinstance(value, float):
            setattr(config, key, 0.0)
        elif isinstance(value, (list, tuple)) and all(
            isinstance(v, float) for v in value
        ):  # one per stage (CvT's drop_path_rate): random layers skipped otherwise
            setattr(config, key, type(value)(0.0 for _ in value))


def zero_dropout_modules(model: torch.nn.Module) -> torch.nn.Module:
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
    return model


TEXT = dict(hidden=256, layers=2, heads=4, ffn=512, vocab=1024, B=4, T=128)
TEXT_TINY = dict(hidden=64, layers=2, heads=4, ffn=128, vocab=128, B=2, T=16)
NAMES = dict(
    hidden="hidden_size",
    layers="num_hidden_layers",
    heads="num_attention_heads",
    ffn="intermediate_size",
    vocab="vocab_size",
    kv_heads="num_key_value_heads",
    image="image_size",
    classes="num_labels",
)


def hf(head: str, model_type: str, sized=tuple(NAMES), **settings):
    """A transformers model: `AutoModelFor<head>` of a config of `model_type`, with our
    sizes named in `sized` under the standard names (configs map them onto their own)
    and `settings`, which may name a size in braces: {"d_ff": "{ffn}"}."""

    def build(sizes: dict[str, int]) -> torch.nn.Module:
        import transformers

        transformers.logging.set_verbosity_error()
        ours = {NAMES[k]: v for k, v in sizes.items() if k in sized}
        extra = {
            k: sizes[v[1:-1]] if isinstance(v, str) and v.startswith("{") else v
            for k, v in settings.items()
        }
        config = transformers.AutoConfig.for_model(model_type, **(ours | extra))
        no_dropout(config)
        if hasattr(transformers, head):  # a class by name
            return zero_dropout_modules(getattr(transformers, head)(config))
        auto = getattr(transformers, f"AutoModelFor{head}")
        return zero_dropout_modules(auto.from_config(config))

    return build


def timm_model(name: str, **settings):
    def build(sizes: dict[str, int]) -> torch.nn.Module:
        import timm

        make = functools.partial(
            timm.create_model, name, pretrained=False, num_classes=sizes["classes"]
        )
        try:
            model = make(drop_rate=0.0, drop_path_rate=0.0, **settings)
        except TypeError:  # a model with no stochastic depth to turn off
            model = make(drop_rate=0.0, **settings)
        return zero_dropout_modules(model)

    return build


def torchvision_model(name: str, **settings):
    build = suite.torchvision_model(name, **settings)
    return lambda sizes: zero_dropout_modules(build(sizes))


# -- inputs ----------------------------------------------------------------------------


def text(s):
    ids = torch.randint(3, s["vocab"], (s["B"], s["T"]))
    return {"input_ids": ids, "labels": ids}


def text_to_text(s):
    ids = torch.randint(3, s["vocab"], (s["B"], s["T"]))
    targets = torch.randint(3, s["vocab"], (s["B"], s["T"] // 4))
    return {"input_ids": ids, "decoder_input_ids": targets, "labels": targets}


def classify_text(s):  # padding in the second half of every other row
    ids = torch.randint(3, s["vocab"], (s["B"], s["T"]))
    mask = torch.ones_like(ids)
    mask[::2, s["T"] // 2 :] = 0
    labels = torch.randint(0, 3, (s["B"],))
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def images(s):
    x = torch.randn(s["B"], 3, s["image"], s["image"])
    return {"pixel_values": x, "labels": torch.randint(0, s["classes"], (s["B"],))}


def audio_features(s):  # Whisper: log-mel frames, twice the encoder's positions
    x = torch.randn(s["B"], 80, 2 * s["frames"])
    targets = torch.randint(3, s["vocab"], (s["B"], 16))
    return {"input_features": x, "decoder_input_ids": targets, "labels": targets}


def waveform(s):
    x = torch.randn(s["B"], s["samples"])
    return {"input_values": x, "labels": torch.randint(0, 3, (s["B"],))}


# -- the models ------------------------------------------------------------------------

VISION = dict(B=8, image=224, classes=100), dict(B=2, image=64, classes=10)
HF_VISION = dict(hidden=192, layers=2, heads=3, ffn=384, B=8, image=224, classes=100)
HF_VISION_TINY = dict(hidden=64, layers=2, heads=2, ffn=128, B=2, image=32, classes=10)
GQA = dict(num_key_value_heads=2)
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=0)


def text_model(head: str, inputs, **fixed):
    """A maker of specs for text models: AutoModelFor<head>, fed by inputs."""

    def make(name, model_type, **settings):
        build = hf(head, model_type, **IDS, **fixed, **settings)
        return ModelSpec(name, "transformers", build, inputs, TEXT, TEXT_TINY)

    return make


lm = text_model("CausalLM", text)
masked = text_model("MaskedLM", text)
classifier = text_model("SequenceClassification", classify_text, num_labels=3)
seq2seq = text_model("Seq2SeqLM", text_to_text)


def hf_vision(name, model_type, staged=False, head="ImageClassification", **settings):
    """`staged`: a model of stages, whose config gives widths and depths per stage
    (we set only the image's size and the classes)."""
    sized = ("image", "classes") if staged else tuple(NAMES)
    return ModelSpec(
        name,
        "transformers",
        hf(head, model_type, sized, **settings),
        images,
        HF_VISION,
        HF_VISION_TINY,
    )


ENC_DEC = dict(
    encoder_layers="{layers}",
    decoder_layers="{layers}",
    encoder_ffn_dim="{ffn}",
    decoder_ffn_dim="{ffn}",
    encoder_attention_heads="{heads}",
    decoder_attention_heads="{heads}",
    d_model="{hidden}",
)
ZOO = [
    # decoders
    lm(
        "hf_gpt_neo",
        "gpt_neo",
        num_layers="{layers}",
        attention_types=[[["global", "local"], 1]],
        window_size=32,
    ),
    lm("hf_gptj", "gptj", n_embd="{hidden}", rotary_dim=16),
    lm("hf_gpt_neox", "gpt_neox", rotary_pct=0.25),
    lm("hf_opt", "opt", ffn_dim="{ffn}", word_embed_proj_dim="{hidden}"),
    lm("hf_bloom", "bloom"),
    lm("hf_falcon", "falcon", new_decoder_architecture=True, num_kv_heads=2),
    lm("hf_mistral", "mistral", sliding_window=64, **GQA),
    lm("hf_qwen2", "qwen2", **GQA),
    lm("hf_qwen3", "qwen3", head_dim=64, **GQA),
    lm("hf_phi", "phi", partial_rotary_factor=0.5),
    lm("hf_phi3", "phi3", **GQA),
    lm("hf_gemma", "gemma", head_dim=64, **GQA),
    lm("hf_gemma2", "gemma2", head_dim=64, sliding_window=64, **GQA),
    lm("hf_stablelm", "stablelm", **GQA),
    lm("hf_olmo", "olmo", clip_qkv=8.0),
    lm("hf_mixtral", "mixtral", num_local_experts=4, num_experts_per_tok=2, **GQA),
    lm("hf_codegen", "codegen", n_ctx=256, rotary_dim=16),
    # encoders
    masked("hf_roberta", "roberta"),
    masked("hf_albert", "albert", embedding_size=128),
    masked("hf_electra", "electra", embedding_size=128),
    masked("hf_deberta_v2", "deberta-v2"),
    masked(
        "hf_mobilebert", "mobilebert", embedding_size=32, num_feedforward_networks=2
    ),
    masked("hf_convbert", "convbert", embedding_size=128),
    classifier("hf_bert_classifier", "bert"),
    classifier("hf_xlm_roberta_classifier", "xlm-roberta"),
    classifier("hf_longformer", "longformer", attention_window=[32, 32]),
    # encoder-decoders
    seq2seq("hf_bart", "bart", **ENC_DEC),
    seq2seq("hf_pegasus", "pegasus", **ENC_DEC),
    seq2seq("hf_marian", "marian", **ENC_DEC),
    seq2seq("hf_mt5", "mt5", d_ff="{ffn}", num_layers="{layers}", d_kv=64),
    ModelSpec(
        "hf_whisper",
        "transformers",
        hf(
            "SpeechSeq2Seq",
            "whisper",
            max_source_positions="{frames}",
            num_mel_bins=80,
            **ENC_DEC,
            **IDS,
        ),
        audio_features,
        TEXT | dict(frames=64),
        TEXT_TINY | dict(frames=16),
    ),
    ModelSpec(
        "hf_wav2vec2",
        "transformers",
        hf("AudioClassification", "wav2vec2", num_labels=3),
        waveform,
        dict(HF_VISION, samples=16000),
        dict(HF_VISION_TINY, samples=4000),
    ),
    # vision transformers and conv nets of transformers
    hf_vision("hf_deit", "deit", patch_size=16, head="DeiTForImageClassification"),
    hf_vision("hf_beit", "beit", patch_size=16, use_relative_position_bias=True),
    hf_vision(
        "hf_swin",
        "swin",
        True,
        window_size=4,
        embed_dim=48,
        depths=[2, 2],
        num_heads=[3, 6],
    ),
    hf_vision(
        "hf_swinv2", "swinv2", True, embed_dim=48, depths=[2, 2], num_heads=[3, 6]
    ),
    hf_vision("hf_dinov2", "dinov2", patch_size=14),
    hf_vision(
        "hf_convnextv2",
        "convnextv2",
        True,
        hidden_sizes=[48, 96, 192, 384],
        depths=[1, 1, 2, 1],
    ),
    hf_vision(
        "hf_segformer",
        "segformer",
        True,
        hidden_sizes=[32, 64, 160, 256],
        depths=[1, 1, 1, 1],
        num_attention_heads=[1, 2, 5, 8],
    ),
    hf_vision("hf_levit", "levit", True, head="LevitForImageClassification"),
    hf_vision("hf_mobilevit", "mobilevit", True),
    hf_vision(
        "hf_efficientnet",
        "efficientnet",
        True,
        width_coefficient=1.0,
        depth_coefficient=1.0,
        hidden_dim=1280,
    ),
    hf_vision("hf_regnet", "regnet", True),
]
ZOO += [
    ModelSpec(f"timm_{name}", "timm", timm_model(name, **kw), suite.vision, *VISION)
    for name, kw in [
        ("efficientnet_b0", {}),
        ("regnety_008", {}),
        ("densenet121", {}),
        ("swin_tiny_patch4_window7_224", {}),
        ("deit_small_patch16_224", {}),
        ("convnextv2_atto", {}),
        ("mobilevit_xs", {}),
        ("levit_128s", {}),
        ("mixer_s16_224", {}),
        ("beit_base_patch16_224", dict(depth=4)),
        ("xcit_nano_12_p16_224", {}),
        ("poolformer_s12", {}),
        ("ghostnet_100", {}),
        ("dla34", {}),
        ("hrnet_w18_small", {}),
        ("nfnet_l0", {}),
        ("rexnet_100", {}),
        ("repvgg_a2", {}),
        ("res2net50_14w_8s", {}),
        ("skresnet18", {}),
        ("cspdarknet53", {}),
        ("dpn68", {}),
        ("pit_ti_224", {}),
        ("twins_svt_small", {}),
        ("eva02_tiny_patch14_224", {}),
        ("coatnet_0_rw_224", {}),
        ("maxvit_nano_rw_256", dict(img_size=224)),
        ("edgenext_xx_small", {}),
        ("efficientformer_l1", {}),
        ("fastvit_t8", {}),
        ("mobileone_s0", {}),
        ("lcnet_050", {}),
        ("ese_vovnet19b_dw", {}),
        ("cait_xxs24_224", dict(depth=4)),
        ("tf_efficientnetv2_b0", {}),  # TensorFlow's "same" padding, a pad per conv
        ("inception_v3", {}),
    ]
]
ZOO += [
    ModelSpec(
        f"tv_{name}",
        "torchvision",
        torchvision_model(name, **kw),
        suite.vision,
        *VISION,
    )
    for name, kw in [
        ("vgg11_bn", {}),
        ("squeezenet1_1", {}),
        ("shufflenet_v2_x1_0", {}),
        ("mnasnet0_5", {}),
        ("googlenet", dict(aux_logits=False, init_weights=True)),
        ("regnet_y_400mf", {}),
        ("efficientnet_b0", {}),
        ("swin_t", {}),
        ("resnext50_32x4d", {}),
        ("wide_resnet50_2", {}),
        ("densenet121", {}),
        ("alexnet", {}),
    ]
]


# -- running ---------------------------------------------------------------------------

CHILD_TIMEOUT = 300.0


def child(name: str, mode: str, dtype: str, tiny: bool) -> int:
    """In the child: register the zoo with the suite, then run one row through it,
    with a token timing (one round of two steps after one warm-up step)."""
    suite.MODELS[:] = ZOO
    for table, n in ((suite.WARMUP, 1), (suite.STEPS, 2), (suite.ROUNDS, 1)):
        table.update(cuda=n, cpu=n)
    args = suite.make_parser().parse_args(
        ["--child", name, mode, dtype, "--backends", "eager", "minductor"]
        + ["--tiny"] * tiny
    )
    return suite.child_main(args)


def run_one(spec: ModelSpec, mode: str, dtype: str, args) -> list[Row]:
    why = common.missing(spec.library)
    if why:
        return [Row(spec.name, mode, dtype, "minductor", f"skipped: {why}")]
    command = [HERE, "--child", spec.name, mode, dtype] + ["--tiny"] * args.tiny
    start = time.perf_counter()
    out, err, why = common.spawn(command, args.timeout)  # fresh caches, a timeout
    rows = common.reported(out, Row)
    row = rows.get("minductor")
    tail = common.last_lines(err, 25)
    if row is None:
        eager = rows.get("eager")
        status = f"error: {why}: {tail[-1] if tail else ''}"
        if eager is not None and eager.status != "ok":
            status = f"skipped: eager fails: {eager.status}"
        row = Row(spec.name, mode, dtype, "minductor", status, detail="\n".join(tail))
    elif row.status == "ok" and row.step_ms is None:
        row = replace(row, status=f"error: {why}, while timing")
    took = time.perf_counter() - start
    print(f"{spec.name} {mode} {dtype} ({took:.0f} s): {row.status}", flush=True)
    return [row]


def summary(rows: list[Row]) -> str:
    lines = [
        "| model | mode | dtype | status | rel err | err / allowed | grad rel err "
        "| graphs | breaks | fallbacks |",
        "|" + " --- |" * 10,
    ]
    for r in rows:
        breaks = "; ".join(f"{k} ×{n}" for k, n in r.break_reasons.items())
        lines.append(
            f"| {r.model} | {r.mode} | {r.dtype} | {common.cell(r.status, 120)} "
            f"| {common.fmt(r.out_rel, '.1e')} | {common.fmt(r.ratio, '.2f')} "
            f"| {common.fmt(r.grad_rel, '.1e')} | {common.fmt(r.graphs, '.0f')} "
            f"| {common.cell(breaks or '—', 80)} "
            f"| {suite.fallbacks_cell(r.fallbacks)} |"
        )
    counts: dict[str, int] = {}
    for r in rows:
        word = r.status.split(":")[0]
        counts[word] = counts.get(word, 0) + 1
    lines.append("")
    lines.append(", ".join(f"{n} {w}" for w, n in sorted(counts.items())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/zoo.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="substrings of names")
    parser.add_argument("--skip", nargs="+", metavar="NAME", default=[])
    parser.add_argument("--mode", choices=[*suite.MODES, "both"], default="both")
    parser.add_argument("--dtype", choices=[*suite.DTYPES, "both"], default="bf16")
    parser.add_argument("--jobs", type=int, default=6, help="children at a time")
    parser.add_argument("--timeout", type=float, default=CHILD_TIMEOUT)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child, args.tiny)
    specs = [
        m
        for m in ZOO
        if (not args.only or any(w in m.name for w in args.only))
        and not any(w in m.name for w in args.skip)
    ]
    if args.list:
        print("\n".join(f"{m.name:<34}{m.library}" for m in specs))
        return 0
    modes = suite.MODES if args.mode == "both" else [args.mode]
    dtypes = list(suite.DTYPES) if args.dtype == "both" else [args.dtype]
    work = [(m, mode, d) for m in specs for mode in modes for d in dtypes]
    rows: list[Row] = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for done in as_completed([pool.submit(run_one, *w, args) for w in work]):
            rows += done.result()
            if args.json:
                with open(args.json, "w") as f:
                    json.dump([asdict(r) for r in rows], f, indent=1)
    order = {(m.name, mode, d): i for i, (m, mode, d) in enumerate(work)}
    rows.sort(key=lambda r: order[r.model, r.mode, r.dtype])
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
