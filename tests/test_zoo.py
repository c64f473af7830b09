"""tools/zoo.py: many models, each run once through the model suite's checks.

The builders are checked here on the CPU, tiny, with eager only (a config whose
names drift with a new transformers release fails here first); one row goes through
the whole tool, child process and all, with minductor in Triton's interpreter.
"""

import json
import os
import sys

import pytest
import torch
from helpers import INTERPRET

transformers = pytest.importorskip("transformers")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import zoo  # noqa: E402

from minductor.harness.models import step  # noqa: E402

pytestmark = pytest.mark.e2e

TRANSFORMERS = [m for m in zoo.ZOO if m.library == "transformers"]


def test_zoo_names_are_unique_and_cover_three_libraries():
    names = [m.name for m in zoo.ZOO]
    assert len(names) == len(set(names))
    assert {m.library for m in zoo.ZOO} == {"transformers", "timm", "torchvision"}


@pytest.mark.slow
@pytest.mark.parametrize("spec", TRANSFORMERS, ids=lambda m: m.name)
def test_each_transformers_model_builds_tiny_and_trains_a_step_in_eager(spec):
    torch.manual_seed(0)
    model = spec.build(spec.tiny).train()
    out = step(model, spec.inputs(spec.tiny), training=True)
    assert out["loss"].isfinite()
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters()
    )
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert all(m.p == 0.0 for m in dropouts)


def test_no_dropout_zeroes_every_kind_of_dropout_probability():
    config = transformers.BertConfig(
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2, layerdrop=0.3
    )
    config.classifier_dropout = 0.4
    config.initializer_range = 0.02  # not a dropout: untouched
    zoo.no_dropout(config)
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.0
    assert config.layerdrop == config.classifier_dropout == 0.0
    assert config.initializer_range == 0.02
    # rates given per stage (CvT's stochastic depth): each zeroed, the sequence kept
    staged = transformers.CvtConfig()
    assert max(staged.drop_path_rate) > 0
    zoo.no_dropout(staged)
    assert list(staged.drop_path_rate) == [0.0] * 3 and len(staged.depth) == 3


@pytest.mark.slow
@pytest.mark.skipif(not INTERPRET, reason="CPU kernels need the interpreter")
def test_one_row_through_the_whole_tool(tmp_path, capsys):
    out = tmp_path / "zoo.json"
    argv = ["--only", "hf_bloom", "--tiny", "--mode", "inference", "--jobs", "1"]
    assert zoo.main(argv + ["--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert (row["model"], row["mode"], row["backend"]) == (
        "hf_bloom",
        "inference",
        "minductor",
    )
    assert row["status"] == "ok" and row["graphs"] == 1 and row["ratio"] <= 1
    printed = capsys.readouterr().out
    assert "| hf_bloom | inference | bf16 | ok |" in printed and "1 ok" in printed
