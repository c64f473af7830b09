#!/usr/bin/env python3
"""Tangle the book (chapters/*.md) into the package (minductor/*.py), and back.

Conventions
-----------
* Chapters are read in filename order, ``index.md`` first.
* A fenced block (3+ backticks or tildes, closed by a fence of the same character at
  least as long) whose info string carries ``title="some/path.py"`` is tangled into
  that file, blocks appended in order of appearance across chapters::

      ```python title="minductor/ir.py"

  The language, if given, must be ``python`` or ``py``. Blocks without a title, with
  a title that is not a ``.py`` path, or with ``exec="on"`` (markdown-exec
  illustrations) are never tangled.
* A block titled ``<<name>>`` defines a named chunk (blocks with the same name are
  concatenated). A tangled line whose stripped text is exactly ``# <<name>>`` is
  replaced by the chunk, re-indented to that line's indentation. Undefined chunks,
  unused chunks and cycles are errors.
* Layout of a generated file: the header line
  ``# generated from chapters/05_ir.md — edit there`` (every contributing chapter,
  comma-separated), one blank line, then the block bodies (trailing blank lines
  stripped) separated by two blank lines, and a final newline.
* Every ``.py`` file under ``minductor/`` must be generated; others are stray.

Modes
-----
``tangle.py``           write the generated files, delete stray ones.
``tangle.py --check``   write nothing; exit 1 with a unified diff on any drift.
``tangle.py --stitch``  carry edits made in generated files back into the chapters,
                        then re-tangle (see below).

Stitching diffs each generated file against what the chapters tangle to; every
generated line knows its markdown line. A changed or deleted run of lines goes to
the lines it came from; a change spanning several blocks is split line for line
when the line counts agree, or at the separator lines when that split is unique.
Inserted lines join the block of the line before them (else of the line after).
Lines of an expanded chunk go to the chunk's block, less the reference's
indentation. Edits of the header or of separator lines, ambiguous spans, stray
files, or a result that would not re-tangle to the edited files (blank-line layout
aside) are refused, and then nothing at all is written.

Exit status: 0 clean/done, 1 drift or refused stitch, 2 malformed chapters.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import pairwise
from pathlib import Path, PurePosixPath

PACKAGE = "minductor"
CHAPTERS = "chapters"
PY_LANGS = {"", "python", "py", "python3"}
EXEC_OFF = {"off", "false", "no", "0"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
ATTR = re.compile(r"""([A-Za-z_][\w-]*)=(?:"([^"]*)"|'([^']*)'|([^\s}]+))""")
CHUNK_TITLE = re.compile(r"^<<(?P<name>[^<>]+)>>$")
CHUNK_REF = re.compile(r"^# <<(?P<name>[^<>]+)>>$")

HEADER = "header"  # line-map markers for lines that exist only in the .py
SEPARATOR = "separator"


class TangleError(Exception):
    def __init__(self, messages: list[str]):
        super().__init__("\n".join(messages))
        self.messages = messages


@dataclass(frozen=True)
class Src:
    """Where a generated line comes from: md line ``line`` (0-based) of ``md``.

    The generated text is ``chunk_indent + md_text[len(indent):]`` (``indent`` is the
    fence's own indentation; ``chunk_indent`` is added by chunk expansion).
    """

    md: str
    line: int
    indent: str = ""
    chunk_indent: str = ""

    def follows(self, other: Src) -> bool:
        return (
            self.md == other.md
            and self.line == other.line + 1
            and (self.indent, self.chunk_indent) == (other.indent, other.chunk_indent)
        )

    def to_md(self, text: str) -> str | None:
        """The markdown line for generated ``text``; None if it lacks the indent."""
        if not text.strip():
            return ""
        if not text.startswith(self.chunk_indent):
            return None
        return self.indent + text[len(self.chunk_indent) :]


@dataclass(frozen=True)
class Block:
    md: str
    fence_line: int  # 0-based line of the opening fence
    target: str  # "minductor/x.py" or "<<name>>"
    items: tuple[tuple[str, Src], ...]  # (text, source) per body line


@dataclass(frozen=True)
class Tangled:
    lines: tuple[str, ...]
    srcs: tuple[Src | str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# --- reading chapters ---------------------------------------------------------------


def chapter_paths(root: Path) -> list[Path]:
    paths = (root / CHAPTERS).glob("*.md")
    return sorted(paths, key=lambda p: (p.name != "index.md", p.name))


def load_chapters(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
        for p in chapter_paths(root)
    }


def parse_info(info: str) -> tuple[str, dict[str, str]]:
    attrs = {
        m[1]: next(g for g in m.groups()[1:] if g is not None)
        for m in ATTR.finditer(info)
    }
    words = info.strip().lstrip("{").split()
    lang = words[0].lstrip(".") if words and "=" not in words[0] else ""
    return lang.lower(), attrs


def check_target(title: str) -> str | None:
    """The normalised relative path of a file title, or None if it is not one."""
    path = PurePosixPath(title)
    if path.suffix != ".py" or path.is_absolute() or ".." in path.parts:
        return None
    return path.as_posix()


def read_blocks(md: str, text: str, errors: list[str]) -> list[Block]:
    lines = text.split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, indent, start = m["fence"], m["indent"], i
        i += 1
        while i < len(lines):
            s = lines[i].strip()
            if s and set(s) == {fence[0]} and len(s) >= len(fence):
                break
            i += 1
        else:
            errors.append(f"{md}:{start + 1}: code fence is never closed")
            break
        body = range(start + 1, i)
        i += 1
        lang, attrs = parse_info(m["info"])
        title = attrs.get("title")
        if title is None or attrs.get("exec", "off").lower() not in EXEC_OFF:
            continue
        chunk = CHUNK_TITLE.match(title.strip())
        target = f"<<{chunk['name'].strip()}>>" if chunk else check_target(title)
        if target is None:
            if title.endswith(".py"):
                errors.append(f"{md}:{start + 1}: bad file title {title!r}")
            continue
        if lang not in PY_LANGS:
            errors.append(f"{md}:{start + 1}: tangled block has language {lang!r}")
            continue
        items = []
        for n in body:
            line = lines[n]
            if not line.strip():
                line = ""
            elif line.startswith(indent):
                line = line[len(indent) :]
            else:
                errors.append(f"{md}:{n + 1}: line is less indented than its fence")
            items.append((line, Src(md, n, indent)))
        blocks.append(Block(md, start, target, tuple(items)))
    return blocks


# --- tangling -----------------------------------------------------------------------


def strip_trailing_blanks(items: list) -> list:
    while items and not items[-1][0].strip():
        items = items[:-1]
    return items


def tangle_texts(chapters: dict[str, str]) -> dict[str, Tangled]:
    """Tangle chapter texts ({"chapters/x.md": text}, in reading order)."""
    errors: list[str] = []
    blocks = [b for md, text in chapters.items() for b in read_blocks(md, text, errors)]
    chunks: dict[str, list[Block]] = {}
    files: dict[str, list[Block]] = {}
    for b in blocks:
        if b.target.startswith("<<"):
            chunks.setdefault(b.target[2:-2], []).append(b)
        else:
            files.setdefault(b.target, []).append(b)
    used: set[str] = set()

    def expand(items, stack: tuple[str, ...]) -> list[tuple[str, Src]]:
        out = []
        for text, src in items:
            ref = CHUNK_REF.match(text.strip())
            if not ref:
                out.append((text, src))
                continue
            name = ref["name"].strip()
            where = f"{src.md}:{src.line + 1}"
            if name not in chunks:
                errors.append(f"{where}: undefined chunk <<{name}>>")
                continue
            if name in stack:
                cycle = " -> ".join(f"<<{n}>>" for n in (*stack, name))
                errors.append(f"{where}: chunk cycle {cycle}")
                continue
            used.add(name)
            body = [it for b in chunks[name] for it in strip_trailing_blanks(b.items)]
            pad = text[: len(text) - len(text.lstrip())]
            for t, s in expand(body, (*stack, name)):
                s = replace(s, chunk_indent=pad + s.chunk_indent)
                out.append((pad + t if t else "", s))
        return out

    order = {md: k for k, md in enumerate(chapters)}
    result = {}
    for target, fblocks in files.items():
        bodies = [strip_trailing_blanks(expand(b.items, ())) for b in fblocks]
        bodies = [body for body in bodies if body]
        mds = sorted({s.md for body in bodies for _, s in body}, key=order.get)
        mds = mds or sorted({b.md for b in fblocks}, key=order.get)
        lines = [f"# generated from {', '.join(mds)} — edit there"]
        srcs: list[Src | str] = [HEADER]
        for k, body in enumerate(bodies):
            lines += [""] if k == 0 else ["", ""]
            srcs += [HEADER] if k == 0 else [SEPARATOR, SEPARATOR]
            lines += [t for t, _ in body]
            srcs += [s for _, s in body]
        result[target] = Tangled(tuple(lines), tuple(srcs))
    for name, cblocks in chunks.items():
        if name not in used:
            b = cblocks[0]
            errors.append(f"{b.md}:{b.fence_line + 1}: chunk <<{name}>> is never used")
    if errors:
        raise TangleError(list(dict.fromkeys(errors)))
    return result


def stray_files(root: Path, tangled: dict[str, Tangled]) -> list[str]:
    found = (p.relative_to(root).as_posix() for p in (root / PACKAGE).rglob("*.py"))
    return sorted(p for p in found if p not in tangled)


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def nonblank(lines) -> list[str]:
    return [line for line in lines if line.strip()]


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="\n")


def udiff(old: list[str], new: list[str], a: str, b: str) -> str:
    return "\n".join(difflib.unified_diff(old, new, a, b, lineterm=""))


# --- modes --------------------------------------------------------------------------


def run_tangle(root: Path) -> int:
    tangled = tangle_texts(load_chapters(root))
    changed = 0
    for target, t in tangled.items():
        path = root / target
        if not path.exists() or path.read_text(encoding="utf-8") != t.text:
            write_text(path, t.text)
            print(f"wrote {target}")
            changed += 1
    for stray in stray_files(root, tangled):
        (root / stray).unlink()
        print(f"deleted {stray} (no chapter generates it)")
        changed += 1
    if not changed:
        print(f"tangle: {len(tangled)} files up to date")
    return 0


def run_check(root: Path) -> int:
    tangled = tangle_texts(load_chapters(root))
    drift = []
    for target, t in tangled.items():
        path = root / target
        if not path.exists():
            drift.append(f"missing: {target}")
            print(udiff([], list(t.lines), "/dev/null", f"{target} (from chapters)"))
            continue
        text = path.read_text(encoding="utf-8")
        if text != t.text:
            drift.append(f"drift: {target}")
            diff = udiff(
                text.splitlines(),
                list(t.lines),
                f"{target} (on disk)",
                f"{target} (from chapters)",
            )
            print(diff or f"{target}: differs only in line endings or final newline")
    for stray in stray_files(root, tangled):
        drift.append(f"stray: {stray}")
        print(udiff(read_lines(root / stray), [], f"{stray} (on disk)", "/dev/null"))
    if not drift:
        print(f"tangle --check: ok ({len(tangled)} files)")
        return 0
    print("\ntangle --check failed:\n  " + "\n  ".join(drift), file=sys.stderr)
    print(
        "run `python tools/tangle.py` to regenerate from the chapters, or "
        "`python tools/tangle.py --stitch` to carry .py edits into them",
        file=sys.stderr,
    )
    return 1


@dataclass(frozen=True)
class Edit:
    md: str
    start: int  # replace md lines [start, end) with new; start == end inserts
    end: int
    new: tuple[str, ...]
    where: str = field(compare=False)  # for messages: "minductor/x.py:12"


def runs(srcs: list[Src | str]) -> list[list[int]]:
    """Split positions into runs: markers together, block lines by md continuity."""
    out: list[list[int]] = []
    for k, s in enumerate(srcs):
        if out:
            prev = srcs[out[-1][-1]]
            same_marker = isinstance(s, str) and isinstance(prev, str)
            if same_marker or (
                isinstance(s, Src) and isinstance(prev, Src) and s.follows(prev)
            ):
                out[-1].append(k)
                continue
        out.append([k])
    return out


def partition(segments: list[tuple[bool, list[str]]], act: list[str]):
    """The unique split of ``act`` into pieces, one per segment, where marker
    segments (True) match their text exactly; None if there are 0 or 2+ splits."""

    @cache
    def count(si: int, pos: int) -> int:
        if si == len(segments):
            return int(pos == len(act))
        is_mark, text = segments[si]
        if is_mark:
            n = len(text)
            return count(si + 1, pos + n) if act[pos : pos + n] == text else 0
        return min(2, sum(count(si + 1, e) for e in range(pos, len(act) + 1)))

    if count(0, 0) != 1:
        return None
    pieces, pos = [], 0
    for si, (is_mark, text) in enumerate(segments):
        if is_mark:
            end = pos + len(text)
        else:
            end = next(e for e in range(pos, len(act) + 1) if count(si + 1, e))
        pieces.append(act[pos:end])
        pos = end
    return pieces


def stitch_file(
    target: str, t: Tangled, act: list[str], problems: list[str]
) -> list[Edit]:
    exp, srcs = list(t.lines), list(t.srcs)
    edits = []

    def refuse(j: int, why: str) -> None:
        problems.append(f"{target}:{j + 1}: {why}")

    def edit(src_run: list[Src], new: list[str], j: int) -> None:
        first, last = src_run[0], src_run[-1]
        md_new = [first.to_md(x) for x in new]
        if None in md_new:
            refuse(
                j,
                f"changed line lacks the indentation {first.chunk_indent!r} of "
                f"the chunk reference it expands",
            )
            return
        edits.append(
            Edit(
                first.md, first.line, last.line + 1, tuple(md_new), f"{target}:{j + 1}"
            )
        )

    sm = difflib.SequenceMatcher(None, exp, act, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        if tag == "insert":
            # into the block of the line before, else of the line after
            before = srcs[i1 - 1] if i1 > 0 else None
            after = srcs[i1] if i1 < len(srcs) else None
            anchors = (
                [replace(before, line=before.line + 1)]
                if isinstance(before, Src)
                else []
            )
            anchors += [after] if isinstance(after, Src) else []
            if not anchors:
                refuse(
                    j1,
                    "lines inserted among generated lines (header or "
                    "separator): they belong to no block",
                )
                continue
            for anchor in anchors:
                md_new = [anchor.to_md(x) for x in act[j1:j2]]
                if None not in md_new:
                    edits.append(
                        Edit(
                            anchor.md,
                            anchor.line,
                            anchor.line,
                            tuple(md_new),
                            f"{target}:{j1 + 1}",
                        )
                    )
                    break
            else:
                refuse(
                    j1,
                    f"inserted line lacks the indentation "
                    f"{anchors[0].chunk_indent!r} of the chunk it goes into",
                )
            continue
        span = srcs[i1:i2]
        marker = next((s for s in span if isinstance(s, str)), None)
        if tag == "delete":
            if marker:
                refuse(j1, f"deletes the generated {marker} line")
                continue
            for run in runs(span):
                edit([span[k] for k in run], [], j1)
            continue
        # replace
        groups = runs(span)
        if len(groups) == 1 and not marker:
            edit(span, act[j1:j2], j1)
            continue
        if i2 - i1 == j2 - j1:  # same length: map line for line
            for k in range(i2 - i1):
                s, old, new = span[k], exp[i1 + k], act[j1 + k]
                if isinstance(s, str):
                    if old != new:
                        refuse(j1 + k, f"edits the generated {s} line")
                elif old != new:
                    edit([s], [new], j1 + k)
            continue
        segments = [
            (isinstance(span[g[0]], str), [exp[i1 + k] for k in g]) for g in groups
        ]
        pieces = partition(segments, act[j1:j2])
        if pieces is None:
            what = "a generated line" if marker else "several blocks"
            refuse(
                j1,
                f"change spans {what} and cannot be split unambiguously "
                f"(lines {j1 + 1}-{j2}); make it in the chapter instead",
            )
            continue
        for g, (is_mark, _), piece in zip(groups, segments, pieces, strict=True):
            if not is_mark:
                edit([span[k] for k in g], piece, j1)
    return edits


def apply_edits(
    texts: dict[str, str], edits: list[Edit], problems: list[str]
) -> dict[str, str]:
    by_md: dict[str, list[Edit]] = {}
    for e in dict.fromkeys(edits):  # identical edits (a chunk used twice) count once
        by_md.setdefault(e.md, []).append(e)
    out = dict(texts)
    for md, es in by_md.items():
        es.sort(key=lambda e: (e.start, e.end))
        for a, b in pairwise(es):
            if b.start < a.end or (a.start == a.end == b.start == b.end):
                problems.append(
                    f"{a.where} and {b.where}: conflicting edits of {md}:{b.start + 1}"
                )
        lines = out[md].split("\n")
        for e in sorted(es, key=lambda e: (e.start, e.end), reverse=True):
            lines[e.start : e.end] = e.new
        out[md] = "\n".join(lines)
    return out


def run_stitch(root: Path) -> int:
    texts = load_chapters(root)
    tangled = tangle_texts(texts)
    problems: list[str] = []
    edits: list[Edit] = []
    actual: dict[str, list[str]] = {}
    for target, t in tangled.items():
        path = root / target
        if not path.exists():
            problems.append(
                f"{target}: missing; nothing to stitch (tangle recreates it)"
            )
            continue
        actual[target] = read_lines(path)
        if actual[target] != list(t.lines):
            edits += stitch_file(target, t, actual[target], problems)
    for stray in stray_files(root, tangled):
        problems.append(
            f"{stray}: no chapter generates this file; put its code in a "
            f"chapter (tangling would delete it)"
        )
    new_texts = apply_edits(texts, edits, problems) if not problems else texts
    if not problems and edits:
        try:
            again = tangle_texts(new_texts)
        except TangleError as err:
            problems += [f"after stitching: {m}" for m in err.messages]
        else:
            for target, t in again.items():
                edited = actual.get(target, [])
                if nonblank(t.lines) != nonblank(edited):
                    diff = udiff(
                        edited,
                        list(t.lines),
                        f"{target} (edited)",
                        f"{target} (after stitch)",
                    )
                    problems.append(
                        f"{target}: stitching would not reproduce the edited file "
                        f"(a chunk used twice must be edited alike):\n{diff}"
                    )
    if problems:
        print("stitch refused; nothing was written:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    if not edits:
        print("stitch: nothing to carry back")
        return 0
    for e in edits:
        span = f"{e.start + 1}-{e.end}" if e.end > e.start + 1 else f"{e.start + 1}"
        if e.start == e.end:
            verb = "insert before"
        else:
            verb = "replace" if e.new else "delete"
        print(f"stitch: {e.where} -> {verb} {e.md}:{span}")
    for md, text in new_texts.items():
        if text != texts[md]:
            write_text(root / md, text)
            print(f"wrote {md}")
    return run_tangle(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff if anything drifted",
    )
    mode.add_argument(
        "--stitch",
        action="store_true",
        help="carry edits made in generated .py files into the chapters",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="repository root (default: the parent of tools/)",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not (root / CHAPTERS).is_dir():
        print(f"error: {root / CHAPTERS} is not a directory", file=sys.stderr)
        return 2
    try:
        if args.check:
            return run_check(root)
        if args.stitch:
            return run_stitch(root)
        return run_tangle(root)
    except TangleError as err:
        for m in err.messages:
            print(f"error: {m}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
