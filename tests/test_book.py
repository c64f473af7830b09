"""Rules the book keeps as a book: blocks a reader can hold, the primer's words only
after the primer, and each configuration knob added by the chapter that reads it."""

import re
from pathlib import Path

import pytest

from minductor.config import Config

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
pytestmark = pytest.mark.book

FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")


def _nav() -> list[str]:
    """The book's pages in reading order, as mkdocs.yml lists them."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return re.findall(r"^\s+- (?:[\w ]+: )?([\w]+\.md)$", text, re.M)


def _code_blocks(text: str):
    """(info string, lines) of every fenced block in a page."""
    lines, i = text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        j = i + 1
        while j < len(lines):
            close = FENCE.match(lines[j])
            if close and close.group(2)[0] == fence[0] and len(close.group(2)) >= len(fence):
                if not close.group(3).strip():
                    break
            j += 1
        yield info, lines[i + 1 : j]
        i = j + 1


def test_the_nav_reads_the_chapters_in_order():
    pages = _nav()
    assert pages.index("00_tiny.md") < pages.index("primer_gpus.md") < pages.index("05_ir.md")


@pytest.mark.parametrize("page", [p for p in _nav() if (CHAPTERS / p).exists()])
def test_no_code_block_is_over_80_lines(page):
    text = (CHAPTERS / page).read_text(encoding="utf-8")
    long = [(info.strip(), len(body)) for info, body in _code_blocks(text) if len(body) > 80]
    assert not long, f"{page}: blocks over 80 lines: {long}"


def _glossary() -> dict[str, set[str]]:
    """The primer's "Words you will meet": each word, and the chapters it names."""
    text = (CHAPTERS / "primer_gpus.md").read_text(encoding="utf-8")
    table = text[text.index("## Words you will meet") :].split("\n## ")[0]
    words = {}
    for term, used in re.findall(r"^\| (.+?) \| .+? \| (.+?) \|$", table, re.M):
        if term == "word":  # the header
            continue
        chapters = set(re.findall(r"\b\d+\b", used))
        names = re.findall(r"`(\w+)`", term) or [term.split(":")[0].split("(")[0].strip()]
        for name in names:
            words[name] = chapters
    return words


def test_the_glossary_is_read():
    words = _glossary()
    assert {"program instance", "XBLOCK", "persistent reduction", "occupancy"} <= set(words)
    assert "0" in words["XBLOCK"] and "0" not in words["occupancy"]


def test_the_primers_words_wait_for_the_primer():
    """Chapter 0 teaches a few of the primer's words itself (its glossary rows name
    chapter 0); the chapters between it and the primer use none of the others."""
    pages = _nav()
    between = pages[pages.index("00_tiny.md") + 1 : pages.index("primer_gpus.md")]
    assert between == ["01_capture.md", "02_decompositions.md", "03_ops.md", "04_sizevars.md"]
    unexplained = [w for w, chapters in _glossary().items() if "0" not in chapters]
    found = []
    for page in between:
        text = (CHAPTERS / page).read_text(encoding="utf-8")
        for word in unexplained:
            for m in re.finditer(rf"\b{re.escape(word)}", text, re.I):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{page}:{line}: {word}")
    assert not found, found


def _knobs_by_chapter() -> dict[str, str]:
    """Config field -> the chapter whose `<<Config knobs>>` block adds it."""
    added = {}
    for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.md")):
        text = path.read_text(encoding="utf-8")
        for info, body in _code_blocks(text):
            if 'title="<<Config knobs>>"' not in info:
                continue
            for line in body:
                if line and not line.startswith("#"):
                    name = line.split(":")[0]
                    assert name not in added, f"{name} added twice"
                    added[name] = path.name
    return added


def test_every_knob_but_chapter_1s_is_added_by_a_later_chapter():
    fields = set(Config.__dataclass_fields__)
    added = _knobs_by_chapter()
    assert set(added) == fields - {"debug", "cache_dir"}


@pytest.mark.parametrize("name", sorted(_knobs_by_chapter()))
def test_a_knob_is_added_by_the_chapter_that_reads_it(name):
    page = _knobs_by_chapter()[name]
    text = (CHAPTERS / page).read_text(encoding="utf-8")
    assert f"config.{name}" in text, f"{page} adds {name} but never reads config.{name}"
