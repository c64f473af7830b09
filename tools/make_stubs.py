#!/usr/bin/env python3
"""Make the learner's exercise stubs from the solutions.

The convention
--------------
``exercises/solutions/exNN_topic.py`` is the source of truth: a jupytext "percent"
notebook (an optional ``# ---`` YAML header, then cells that start with ``# %%``;
markdown cells with ``# %% [markdown]``).

* The learner's part sits between a ``# BEGIN SOLUTION`` line and an
  ``# END SOLUTION`` line, inside a function body (never at module level), within
  one cell.
* Checks are ``def test_*():`` functions that use the learner's code and assert.
* A *check cell* is a code cell that only calls test functions (``test_foo()``
  lines and comments, nothing else). A notebook has one check cell per check, each
  after a markdown line that says what it checks, so that a learner running the
  cells one by one sees which checks pass and which fail. No other top-level code
  may call into the learner's part: in the stub it raises.
* A check's ``assert`` says what it compared, with both values (``got ...,
  expected ...``); tensors go through ``torch.testing.assert_close``.

``make_stubs.py`` writes ``exercises/exNN_topic.py`` for each solution:

* each BEGIN/END region, markers included, becomes one line
  ``raise NotImplementedError("your code here")`` at the BEGIN line's indentation;
* a comment after the jupytext header says the file is generated;
* each check cell gets the cell tag ``raises-exception``
  (``# %% tags=["raises-exception"]``), so the stub notebook still executes
  under nbconvert / mkdocs-jupyter with ``allow_errors: false``.

Stubs without a solution are deleted. ``--check`` writes nothing and exits 1 with a
diff if a stub is stale, missing or stray. ``tests/test_exercises.py`` runs every
solution (all checks pass) and every stub (every check raises NotImplementedError).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
RAISE = 'raise NotImplementedError("your code here")'
TAG = "raises-exception"
CELL = re.compile(r"^# %%(?!%)(?P<rest>.*)$")
TAGS = re.compile(r"tags=(?P<list>\[[^\]]*\])")


class StubError(Exception):
    pass


@dataclass(frozen=True)
class Cell:
    marker: int  # 0-based line of the `# %%` line
    end: int  # one past the cell's last line
    kind: str  # "code", "markdown" or "raw"
    code: str  # the cell body


def header_end(lines: list[str]) -> int:
    """Number of lines in the jupytext YAML header (0 if there is none)."""
    if lines and lines[0] == "# ---":
        for k in range(1, len(lines)):
            if lines[k] == "# ---":
                return k + 1
    return 0


def split_cells(text: str) -> list[Cell]:
    lines = text.split("\n")
    starts = [k for k in range(len(lines)) if CELL.match(lines[k])]
    cells = []
    for start, end in zip(starts, starts[1:] + [len(lines)], strict=True):
        rest = CELL.match(lines[start])["rest"]
        kind = re.search(r"\[(markdown|md|raw)\]", rest)
        kind = {"md": "markdown"}.get(kind[1], kind[1]) if kind else "code"
        cells.append(Cell(start, end, kind, "\n".join(lines[start + 1 : end])))
    return cells


def calls_to_tests(tree: ast.AST) -> list[ast.Call]:
    """Calls of test_* names in ``tree``, outside function and class bodies."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id.startswith("test_"):
                found.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                todo.append(child)
    return found


def is_check_cell(cell: Cell) -> bool:
    """A code cell whose statements are all ``test_*(...)`` calls."""
    if cell.kind != "code":
        return False
    body = ast.parse(cell.code).body
    return bool(body) and all(
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and isinstance(s.value.func, ast.Name)
        and s.value.func.id.startswith("test_")
        for s in body
    )


def check_cells(text: str, where: str = "") -> list[Cell]:
    out = []
    for cell in split_cells(text):
        if cell.kind != "code":
            continue
        try:
            tree = ast.parse(cell.code)
        except SyntaxError as err:
            line = cell.marker + 1 + (err.lineno or 0)
            raise StubError(f"{where}:{line}: syntax error: {err.msg}") from None
        if is_check_cell(cell):
            out.append(cell)
        elif calls_to_tests(tree):
            raise StubError(
                f"{where}:{cell.marker + 1}: a cell that calls test_* functions must "
                f"do nothing else (it is tagged {TAG!r} in the stub)"
            )
    return out


def tag_marker(line: str) -> str:
    m = TAGS.search(line)
    if not m:
        return f'{line} tags=["{TAG}"]'
    tags = json.loads(m["list"])
    if TAG not in tags:
        tags.append(TAG)
    return line[: m.start()] + "tags=" + json.dumps(tags) + line[m.end() :]


def make_stub(text: str, source: str) -> str:
    """The stub for a solution's ``text``; ``source`` is its repo-relative path."""
    lines = text.split("\n")
    checks = {c.marker for c in check_cells(text, source)}
    out: list[str] = []
    region = None  # line number of the open BEGIN
    regions = 0
    for k, line in enumerate(lines):
        stripped = line.strip()
        if CELL.match(line) and region is not None:
            raise StubError(f"{source}:{region + 1}: {BEGIN} is not closed in its cell")
        if stripped == BEGIN:
            if region is not None:
                raise StubError(f"{source}:{k + 1}: nested {BEGIN}")
            indent = line[: len(line) - len(line.lstrip())]
            if not indent:
                raise StubError(f"{source}:{k + 1}: {BEGIN} must be inside a function")
            region, regions = k, regions + 1
            out.append(indent + RAISE)
        elif stripped == END:
            if region is None:
                raise StubError(f"{source}:{k + 1}: {END} without {BEGIN}")
            region = None
        elif region is None:
            out.append(tag_marker(line) if k in checks else line)
    if region is not None:
        raise StubError(f"{source}:{region + 1}: {BEGIN} is never closed")
    if not regions:
        raise StubError(f"{source}: no {BEGIN} region: the stub would be the solution")
    n = header_end(out)
    body = out[n:]
    while body and not body[0].strip():
        body.pop(0)
    note = [
        f"# generated from {source} by tools/make_stubs.py;",
        "# replace each NotImplementedError with your code.",
        "",
    ]
    return "\n".join(out[:n] + ([""] if n else []) + note + body)


def stub_path(root: Path, solution: Path) -> Path:
    return root / "exercises" / solution.name


def plan(root: Path) -> tuple[dict[Path, str], list[Path]]:
    """Stubs to write ({path: text}) and stray stubs."""
    solutions = sorted((root / "exercises" / "solutions").glob("ex*.py"))
    stubs = {}
    errors = []
    for sol in solutions:
        rel = sol.relative_to(root).as_posix()
        try:
            stubs[stub_path(root, sol)] = make_stub(
                sol.read_text(encoding="utf-8"), rel
            )
        except StubError as err:
            errors.append(str(err))
    if errors:
        raise StubError("\n".join(errors))
    stray = [p for p in sorted((root / "exercises").glob("ex*.py")) if p not in stubs]
    return stubs, stray


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if any stub is stale",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="repository root (default: the parent of tools/)",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        stubs, stray = plan(root)
    except StubError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stale = []
    changed = 0
    for path, text in stubs.items():
        rel = path.relative_to(root).as_posix()
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old == text:
            continue
        if args.check:
            stale.append(rel)
            diff = difflib.unified_diff(
                (old or "").splitlines(),
                text.splitlines(),
                f"{rel} (on disk)" if old is not None else "/dev/null",
                f"{rel} (from the solution)",
                lineterm="",
            )
            print("\n".join(diff))
        else:
            path.write_text(text, encoding="utf-8", newline="\n")
            print(f"wrote {rel}")
            changed += 1
    for path in stray:
        rel = path.relative_to(root).as_posix()
        if args.check:
            stale.append(rel)
            print(f"stray stub {rel}: no exercises/solutions/{path.name}")
        else:
            path.unlink()
            print(f"deleted {rel} (no solution)")
            changed += 1
    if stale:
        print(
            f"make_stubs --check failed ({', '.join(stale)}): "
            f"run `python tools/make_stubs.py`",
            file=sys.stderr,
        )
        return 1
    if args.check:
        print(f"make_stubs --check: ok ({len(stubs)} stubs)")
    elif not changed:
        print(f"make_stubs: {len(stubs)} stubs up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
