"""The decoding workloads (chapters/measuring_decoding.md, harness/decoding.py),
on CPU at tiny sizes.

Greedy fp32 decoding through minductor must give eager's tokens in each recipe; the
hand-written Llama must be Hugging Face's (the same tokens from the same weights, and
the logits of steps through its cache equal to those of one prefill over the whole
sequence); a backend that demotes the best logit, and a cache written one position
off, must be caught. The workloads run in this process (`measure_decoding`); the
command line runs once, its child killed by the timeout.
"""

import dataclasses
import json
import logging

import pytest
import torch

from minductor.cudagraphs import RECORDERS, SimulatedRecording
from minductor.harness import common, decoding, models
from minductor.harness.decoding import (
    LLAMA,
    TINY,
    DecodeRow,
    KVCache,
    Transformer,
    decode_one,
    generate,
    measure_decoding,
    parse_args,
)

pytestmark = pytest.mark.e2e
pytest.importorskip("transformers")

NEW = 4  # new tokens per sequence: few, the interpreter is slow
COLUMNS = {f.name for f in dataclasses.fields(DecodeRow)}


def demoted(gm, example_inputs, **settings):  # settings: torch.compile's mode
    """A backend that lowers each row's largest value of every floating output:
    greedy decoding then takes the second most likely token."""

    def run(*args):
        outs = gm(*args)
        return type(outs)(
            o - 1e4 * (o == o.amax(-1, keepdim=True)) if o.is_floating_point() else o
            for o in outs
        )

    return run


if "demoted" not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(demoted)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: more threads only contend (the suite's child runs on one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_pair(batch=2, seed=0):
    torch.manual_seed(seed)
    hf = LLAMA(TINY).eval()
    prompt = torch.randint(1, TINY["vocab"], (batch, TINY["prompt"]))
    return hf, Transformer.from_hf(hf), prompt


@pytest.mark.parametrize(
    "workload, batch, graphs",
    [
        pytest.param("hf-static", 2, 1, marks=pytest.mark.slow),
        pytest.param("hf-dynamic", 2, 2, marks=pytest.mark.slow),
        ("gpt-fast", 1, 2),
    ],
)
def test_minductor_decodes_eager_tokens(workload, batch, graphs):
    eager, compiled = measure_decoding(
        workload, batch, ["eager", "minductor"], True, "fp32", NEW
    )
    assert (eager.backend, compiled.backend) == ("eager", "minductor")
    assert eager.status == compiled.status == "ok", compiled.detail
    assert eager.same == compiled.same == NEW
    assert compiled.graphs == graphs and compiled.kernels > 0  # prefill and step
    assert compiled.compile_s > 0 and compiled.first_ms > 0 and compiled.speedup > 0
    assert compiled.tok_s_min <= compiled.tok_s <= compiled.tok_s_max
    assert eager.speedup == 1 and eager.compile_s is None and eager.graphs is None
    assert compiled.peak_mib is None  # no GPU


def test_gpt_fast_step_is_recorded_once_and_replayed(monkeypatch, caplog):
    """With chapter 22's stand-in recorder for CPU tensors, the one-token step is
    recorded once (the cache buffers keep their addresses from one generate to the
    next) and replayed from then on, and the tokens are still eager's."""
    monkeypatch.setitem(RECORDERS, "cpu", SimulatedRecording)
    caplog.set_level(logging.DEBUG, logger="minductor")  # replays are DEBUG lines
    _, model, prompt = tiny_pair()
    eager = generate(model, prompt, NEW)
    torch._dynamo.reset()
    step = torch.compile(
        decode_one, backend="minductor", mode="reduce-overhead", fullgraph=True
    )
    for _ in range(3):
        assert torch.equal(generate(model, prompt, NEW, decode_one=step), eager)
    said = [r.getMessage() for r in caplog.records if "cudagraphs" in r.getMessage()]
    assert sum("recording" in m for m in said) == 1
    # three generates of three steps each: one warm-up, one recording, replays
    assert sum("replay" in m for m in said) == 3 * (NEW - 1) - 2


def test_our_llama_is_hugging_faces():
    hf, model, prompt = tiny_pair()
    theirs = hf.generate(prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(generate(model, prompt, 6), theirs)
    assert torch.equal(generate(model, prompt[:1], 6), theirs[:1])  # new caches
    model.setup_caches(2, 14)
    with torch.no_grad():
        ours = model(theirs, torch.arange(14))
        torch.testing.assert_close(ours, hf(theirs).logits, atol=1e-5, rtol=1e-5)


def steps_vs_no_cache(hf, model, prompt, new=5) -> float:
    """Largest |difference| between the logits of each of our steps, through the
    cache, and Hugging Face's over the whole sequence, without a cache."""
    seen = []

    def step(model, token, input_pos, *rest, **kw):
        seen.append(model(token, input_pos)[:, -1])
        return seen[-1].argmax(-1, keepdim=True)

    out = generate(model, prompt, new, decode_one=step)
    with torch.no_grad():
        whole = hf(out[:, :-1], use_cache=False).logits[:, prompt.shape[1] :]
    return (torch.stack(seen, 1) - whole).abs().max().item()


def test_the_cache_is_written_at_the_input_positions(monkeypatch):
    hf, model, prompt = tiny_pair()
    assert steps_vs_no_cache(hf, model, prompt) < 1e-5
    # the same check, with every key and value written one position late
    update = KVCache.update
    monkeypatch.setattr(KVCache, "update", lambda c, p, k, v: update(c, p + 1, k, v))
    model.setup_caches(2, TINY["prompt"] + 6)  # room for the last, late write
    assert steps_vs_no_cache(hf, model, prompt) > 1e-2


def test_sampling_repeats_with_its_seed_and_top_1_is_greedy():
    _, model, prompt = tiny_pair()

    def sampled(seed, **kw):
        g = torch.Generator().manual_seed(seed)
        return generate(model, prompt, 6, temperature=0.8, generator=g, **kw)

    assert torch.equal(sampled(1), sampled(1))
    assert torch.equal(sampled(2, top_k=1), generate(model, prompt, 6))


@pytest.mark.slow
def test_a_backend_that_changes_a_token_is_wrong():
    """hf-static's prefill runs eagerly, so the first new token is eager's; the
    compiled step's demoted logits change the second."""
    (row,) = measure_decoding("hf-static", 1, ["demoted"], True, "fp32", NEW)
    assert row.backend == "demoted" and row.same == 1
    assert row.status == "wrong: new token 1 is not eager's"
    # in bf16 a different token is reported, not judged
    (row,) = measure_decoding("hf-static", 1, ["demoted"], True, "bf16", NEW)
    assert row.status == "ok" and row.same == 1


def test_flags_and_listing(capsys):
    args = parse_args(["--decode"])
    assert args.decode == list(decoding.WORKLOADS) and args.batch == [1, 8]
    assert (args.dtype, args.new_tokens) == ("bf16", 128)
    assert args.backends == list(common.BACKENDS)
    tiny = parse_args(["--decode", "gpt-fast", "--tiny", "--batch", "3"])
    assert (tiny.decode, tiny.batch) == (["gpt-fast"], [3])
    assert (tiny.dtype, tiny.new_tokens) == ("fp32", TINY["new"])
    for bad in (["--decode", "beam"], ["--decode", "--new-tokens", "1"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    assert models.main(["--decode", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(listed.count(w) == 1 for w in decoding.WORKLOADS)
    assert "--decode" in models.make_parser().format_help()


def test_markdown():
    rows = [
        DecodeRow("gpt-fast", 8, "eager", same=6, new=6, tok_s=100.0, speedup=1.0),
        DecodeRow("gpt-fast", 8, "minductor", same=6, new=6, tok_s=400.0),
        DecodeRow("gpt-fast", 8, "inductor", "error: a|b"),
    ]
    rows[1].tok_s_min, rows[1].tok_s_max, rows[1].speedup = 390.0, 410.0, 4.0
    lines = decoding.markdown(rows).splitlines()
    assert len(lines) == 2 + 3 and all(line.count(" | ") == 13 for line in lines)
    assert "| minductor | ok | 6/6 | 400 | 390–410 | 3200 | 4.00 |" in lines[3]
    assert "error: a\\|b" in lines[4]


def test_command_line_runs_a_child_and_reports_its_timeout(tmp_path, capsys):
    out = tmp_path / "run.json"
    args = ["--decode", "gpt-fast", "--tiny", "--batch", "1", "--timeout", "1"]
    args += ["--backends", "eager", "minductor", "--json", str(out)]
    assert models.main(args) == 0  # this process is the parent; the child is killed
    rows = json.loads(out.read_text())["rows"]
    assert all(set(r) == COLUMNS for r in rows) and len(rows) == 2
    assert {r["status"] for r in rows} == {"error: timed out after 1 s"}
    table = capsys.readouterr().out.strip().splitlines()
    assert table[0].startswith("| workload | B | backend | status | same tokens |")
    assert len(table) == 2 + 2


@pytest.mark.cuda
@pytest.mark.parametrize("workload", decoding.WORKLOADS)
def test_real_sizes_on_a_gpu(workload):
    """The GPU sizes at batch 1, a few tokens, fp32 so that tokens compare exactly."""
    rows = measure_decoding(
        workload, 1, ["eager", "inductor", "minductor"], False, "fp32", 8
    )
    for row in rows:
        assert row.status == "ok" and row.same == 8, (row.backend, row.detail)
        assert row.tok_s > 0 and row.peak_mib > 0
