"""Chapter 1's pipeline table: what runs, in which order, whatever the import order."""

import itertools
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import minductor  # noqa: F401  (registers every chapter's passes)
from minductor.capture import aten_passes, compile_fx
from minductor.decompositions import decomposition_table
from minductor.pipeline import PIPELINE, Stage

pytestmark = pytest.mark.ch01

# what the book registers, hook by hook, in the order the compiler runs it
BOOK = {
    "graph_passes": [("fold_attention_masks", 12)],
    "aot_caches": [("aot_cache", 27)],
    "graph_splitters": [("split_for_cudagraphs", 23)],
    "graph_caches": [("graph_cache", 27)],
    "aten_passes": [
        ("build_on_the_device", 8),
        ("fuse_softmax_stats", 10),
        ("reinplace_inplaceable_ops", 11),
    ],
    "layout_decisions": [("decide_layout_opt", 13)],
    "reduction_passes": [("split_reduction", 10)],
    "store_passes": [("store_narrow", 8), ("store_padded", 12)],
    "layout_rules": [("channels_last_rule", 13)],
    "matmul_choices": [("rule_tiles", 25), ("choose_tiles", 26)],
    "fusion_rules": [("reads_where_overwritten", 15), ("template_epilogues", 25)],
    "schedule_passes": [("look_again", 26), ("reorder_for_overlap", 28)],
    "kernel_kinds": [("poi", 17), ("per", 18), ("red", 18), ("tem", 25)],
    "handovers": [("written_over", 20)],
    "memory_plan": [("plan_memory", 20), ("collective_lines", 28)],
    "graph_wrappers": [("cudagraphify", 22), ("check_ranks_agree", 28)],
    "compile_hooks": [("on_compiled", 24)],
}


def test_the_book_registers_each_pass_into_its_hook_in_chapter_order():
    hooks = {s.name: [(p.name, p.chapter) for p in s.passes()] for s in PIPELINE if s.hook}
    assert hooks == BOOK
    stages = [s.name for s in PIPELINE]
    assert stages.index("graph_passes") < stages.index("AOTAutograd")
    assert stages.index("aot_caches") < stages.index("AOTAutograd")
    assert stages.index("aten_passes") < stages.index("GraphLowering")
    assert stages.index("fusion_rules") > stages.index("Scheduler")
    assert stages[-2:] == ["graph_wrappers", "compile_hooks"]


def test_the_table_prints_every_stage_and_pass_with_its_chapter():
    table = PIPELINE.table().splitlines()
    assert len(table) == 2 + len(list(PIPELINE))
    row = next(r for r in table if "`store_passes`" in r)
    assert "`store_narrow` (8), `store_padded` (12)" in row
    assert table[2].startswith("| 1 | **Dynamo** |")


def _stage():
    return Stage("test", "—", "a hook for this test", hook=True)


def _named(name):
    def fn():
        return name

    fn.__name__ = name
    return fn


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_order_does_not_depend_on_the_order_of_registration(order):
    passes = [("b", 10), ("a", 10), ("c", 8), ("yours", None)]
    stage = _stage()
    for k in order:
        name, chapter = passes[k]
        stage.register(_named(name), chapter=chapter)
    assert stage.names() == ["c", "a", "b", "yours"]  # chapter, then name; yours last
    assert [p.chapter for p in stage.passes()] == [8, 10, 10, math.inf]


def test_using_replaces_by_name_and_puts_back():
    stage = _stage()
    first = stage.register(_named("p"), chapter=3)
    other = _named("p")
    with stage.using(other, chapter=3):
        assert list(stage) == [other] and first not in stage
    assert list(stage) == [first]
    with stage.using(_named("q")):
        assert stage.names() == ["p", "q"]
    assert stage.names() == ["p"]
    stage.remove(first)
    assert len(stage) == 0


def test_a_stage_that_is_not_a_hook_takes_no_pass():
    with pytest.raises(AssertionError, match="is a stage, not a hook"):
        PIPELINE["Scheduler"].register(_named("nope"), chapter=15)


def test_compile_fx_walks_aten_passes_in_the_table_order():
    """Spies take the book's passes' places and one joins between chapters 8 and 10:
    the compiler runs them in the table's order, not in the order they were put in."""
    ran = []

    def spy(name, inner=None):
        def run(gm):
            ran.append(name)
            if inner is not None:
                inner(gm)

        run.__name__ = name
        return run

    book = dict(aten_passes.items())
    gm = torch.fx.experimental.proxy_tensor.make_fx(
        lambda x: torch.softmax(x, -1), decomposition_table=decomposition_table()
    )(torch.randn(3, 5))
    with (
        aten_passes.using(spy("zzz"), chapter=9),
        aten_passes.using(spy("reinplace_inplaceable_ops", book["reinplace_inplaceable_ops"]), chapter=11),
        aten_passes.using(spy("fuse_softmax_stats", book["fuse_softmax_stats"]), chapter=10),
        aten_passes.using(spy("build_on_the_device", book["build_on_the_device"]), chapter=8),
    ):  # fmt: skip
        compile_fx(gm, [torch.randn(3, 5)])
    assert ran == [
        "build_on_the_device",
        "zzz",
        "fuse_softmax_stats",
        "reinplace_inplaceable_ops",
    ]
    assert aten_passes.items() == list(book.items())  # each put back


def test_the_table_is_the_same_whatever_order_the_modules_are_imported_in():
    """Import the chapters' modules in reverse order, around the package's front door,
    in a fresh interpreter: the pipeline it builds is the one `import minductor` does."""
    script = textwrap.dedent(
        """
        import importlib, os, sys, types
        root = os.path.join(os.getcwd(), "minductor")
        package = types.ModuleType("minductor")
        package.__path__ = [root]
        sys.modules["minductor"] = package  # the modules alone, not __init__'s order
        for name in ["distributed", "cache", "select_algorithm", "templates", "debug", "partition", "cudagraphs", "memory",
                     "codegen_reductions",
                     "convnets", "extern", "indexing", "reductions", "views", "factories",
                     "pointwise", "capture"]:
            importlib.import_module("minductor." + name)
        from minductor.pipeline import PIPELINE
        print(PIPELINE.table())
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == PIPELINE.table()
