"""The repository's conventions: a chapter's tests are found from its number."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.book


def _chapters() -> dict[str, str]:
    """Chapter number ("01") -> its file name, from chapters/NN_topic.md."""
    found = {}
    for path in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md")):
        found[path.name[:2]] = path.name
    return found


def _module_marks(path: Path) -> set[str]:
    """The marker names in a test module's `pytestmark`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return set(re.findall(r"mark\.(\w+)", ast.unparse(node.value)))
    return set()


def test_every_chapter_has_tests_named_after_its_number():
    tests = {p.name[7:9] for p in (ROOT / "tests").glob("test_ch[0-9][0-9]_*.py")}
    assert set(_chapters()) <= tests, sorted(set(_chapters()) - tests)
    assert tests <= set(_chapters()), sorted(tests - set(_chapters()))


@pytest.mark.parametrize(
    "path", sorted((ROOT / "tests").glob("test_ch[0-9][0-9]_*.py")), ids=lambda p: p.name
)
def test_a_chapters_test_file_carries_its_marker(path):
    assert f"ch{path.name[7:9]}" in _module_marks(path)


def test_every_chapter_marker_is_declared():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = set(re.findall(r'"(ch\d\d): chapter (\d+),', text))
    assert declared == {(f"ch{n}", str(int(n))) for n in _chapters()}
