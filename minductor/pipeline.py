# generated from chapters/01_capture.md — edit there

"""The compiler's stages and hooks in order; later chapters register passes here."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pass:
    name: str
    fn: Any  # usually a function; a kernel kind's entry is a table of two
    chapter: float  # math.inf: from outside the book, after the book's passes


class Stage:
    """A row of the pipeline: a stage the compiler always runs, or a hook that runs
    the passes registered into it, by chapter, then by name."""

    def __init__(self, name: str, chapters: str, what: str, hook: bool = False):
        self.name, self.chapters, self.what, self.hook = name, chapters, what, hook
        self._passes: dict[str, Pass] = {}
        self._order: list[Pass] | None = None  # sorted when first walked

    def register(self, fn: Any = None, *, chapter: float | None = None, name=None):
        """Add fn to this hook (also as a decorator); the same name replaces."""

        def add(fn: Any) -> Any:
            assert self.hook, f"{self.name} is a stage, not a hook"
            key = name or fn.__name__
            at = math.inf if chapter is None else chapter
            self._passes[key] = Pass(key, fn, at)
            self._order = None
            return fn

        return add if fn is None else add(fn)

    def remove(self, fn: Any) -> None:
        """Take out fn, given as the object registered or by its name."""
        key = fn if isinstance(fn, str) else next(
            p.name for p in self._passes.values() if p.fn is fn
        )  # fmt: skip
        del self._passes[key]
        self._order = None


    @contextlib.contextmanager
    def using(self, fn: Any, *, chapter=None, name=None) -> Iterator[Any]:
        """Register fn for the block, then put back what its name held before."""
        key = name or fn.__name__
        before = self._passes.get(key)
        self.register(fn, chapter=chapter, name=key)
        try:
            yield fn
        finally:
            self._passes.pop(key, None)
            if before is not None:
                self._passes[key] = before
            self._order = None

    def passes(self) -> list[Pass]:
        if self._order is None:
            self._order = sorted(self._passes.values(), key=lambda p: (p.chapter, p.name))
        return self._order

    def __iter__(self) -> Iterator[Any]:
        return iter([p.fn for p in self.passes()])

    def __len__(self) -> int:
        return len(self._passes)

    def __contains__(self, fn: Any) -> bool:
        return any(p.fn is fn for p in self._passes.values())

    def __getitem__(self, name: str) -> Any:  # a pass by name: a kernel kind
        return self._passes[name].fn

    def names(self) -> list[str]:
        return [p.name for p in self.passes()]

    def items(self) -> list[tuple[str, Any]]:
        return [(p.name, p.fn) for p in self.passes()]


class Pipeline:
    def __init__(self, stages: list[Stage]):
        self.stages = {s.name: s for s in stages}

    def __getitem__(self, name: str) -> Stage:
        return self.stages[name]

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages.values())

    def table(self) -> str:
        """The pipeline as a Markdown table: what runs, in order, and where."""
        rows = ["| | stage or hook | chapter | what it does | passes (chapter) |"]
        rows.append("| ---: | --- | --- | --- | --- |")
        for k, s in enumerate(self, 1):
            name = f"`{s.name}`" if s.hook else f"**{s.name}**"
            passes = ", ".join(
                f"`{p.name}` ({_chapter(p.chapter)})" for p in s.passes()
            )  # fmt: skip
            rows.append(f"| {k} | {name} | {s.chapters} | {s.what} | {passes} |")
        return "\n".join(rows)


def _chapter(at: float) -> str:
    return "yours" if at == math.inf else f"{at:g}"


Hook = functools.partial(Stage, hook=True)

PIPELINE = Pipeline(
    [
        Stage("Dynamo", "—", "traces your function into an FX graph of torch calls"),
        Hook("graph_passes", "1", "rewrite Dynamo's graph before it is traced"),
        Hook("aot_caches", "1", "a Dynamo graph compiled before, wired up again"),
        Stage("AOTAutograd", "1, 2", "ATen, decomposed; forward apart from backward"),
        Hook("graph_splitters", "1", "take a graph to compile in pieces"),
        Hook("graph_caches", "1", "a graph compiled before, read back from disk"),
        Hook("aten_passes", "1", "rewrite an ATen graph before it is lowered"),
        Stage("GraphLowering", "6–13, 25, 26", "each ATen op becomes IR"),
        Hook("layout_decisions", "6", "whether the graph's images go channels-last"),
        Hook("reduction_passes", "6", "rewrite a reduction before it is stored"),
        Hook("store_passes", "6", "store a value some other way than as it is"),
        Hook("layout_rules", "6", "the strides a stored value gets"),
        Hook("matmul_choices", "25", "which kernel computes a matmul, with which tiles"),
        Stage("Scheduler", "14, 15", "dependencies, then fusion into kernels"),
        Hook("fusion_rules", "15", "refuse a fusion, with a reason"),
        Hook("schedule_passes", "15", "revise or reorder the kernels once fused"),
        Stage("Triton", "16–18, 25", "the source of each kernel"),
        Hook("kernel_kinds", "17", "block sizes and the lines around a body"),
        Stage("wrapper", "19", "`call(args)`: lines that allocate, launch, call ATen"),
        Hook("handovers", "19", "inputs a kernel may write its output over"),
        Hook("memory_plan", "19", "where each buffer dies, and whose memory it takes"),
        Stage("runtime", "21", "load the module, compile its kernels"),
        Hook("graph_wrappers", "1", "wrap the compiled callable"),
        Hook("compile_hooks", "1", "see every compiled graph"),
    ]
)
