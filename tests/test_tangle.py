"""tools/tangle.py: tangling, --check and --stitch on small fixture books."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tangle

REPO = Path(__file__).resolve().parent.parent
TANGLE = REPO / "tools" / "tangle.py"

INDEX = '''\
# Preface

```python title="minductor/__init__.py"
"""A tiny package."""
```
'''

FIRST = """\
# First

```python title="minductor/core.py"
import math
```

An illustration, never tangled:

```python
print("not tangled")
```

```python exec="on" title="minductor/core.py"
print("run by markdown-exec, not tangled")
```

```py title="minductor/core.py" linenums="1"
def area(r):
    # <<area-body>>
    return a
```
"""

SECOND = """\
# Second

```python title="<<area-body>>"
a = math.pi * r * r
# never negative, but be safe
if a < 0:
    a = 0.0
```

````python title="minductor/core.py"
def double(x):
    return 2 * x


````

```python title="minductor/other.py"
X = 1
```
"""

CORE = """\
# generated from chapters/01_first.md, chapters/02_second.md — edit there

import math


def area(r):
    a = math.pi * r * r
    # never negative, but be safe
    if a < 0:
        a = 0.0
    return a


def double(x):
    return 2 * x
"""

OTHER = """\
# generated from chapters/02_second.md — edit there

X = 1
"""


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(TANGLE), "--root", str(root), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def load_tangle():
    spec = importlib.util.spec_from_file_location("tangle", TANGLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tangle"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def write_book(root: Path, **chapters: str) -> None:
    (root / "chapters").mkdir(parents=True, exist_ok=True)
    (root / "minductor").mkdir(exist_ok=True)
    for name, text in chapters.items():
        (root / "chapters" / f"{name}.md").write_text(text, encoding="utf-8")


@pytest.fixture
def book(tmp_path: Path) -> Path:
    write_book(tmp_path, index=INDEX, **{"01_first": FIRST, "02_second": SECOND})
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text(encoding="utf-8")


def edit(root: Path, rel: str, old: str, new: str) -> None:
    text = read(root, rel)
    assert text.count(old) == 1, old
    (root / rel).write_text(text.replace(old, new), encoding="utf-8")


def snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.*")}


def test_tangle_output_is_exact(book):
    assert read(book, "minductor/core.py") == CORE
    assert read(book, "minductor/other.py") == OTHER
    init = read(book, "minductor/__init__.py")
    assert (
        init
        == '# generated from chapters/index.md — edit there\n\n"""A tiny package."""\n'
    )
    assert "not tangled" not in CORE


def test_tangle_deletes_stray_package_files(book):
    (book / "minductor" / "old.py").write_text("x = 1\n")
    assert run(book).returncode == 0
    assert not (book / "minductor" / "old.py").exists()


def test_check_clean(book):
    result = run(book, "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_catches_one_character_drift(book):
    edit(book, "minductor/core.py", "2 * x", "3 * x")
    result = run(book, "--check")
    assert result.returncode == 1
    assert "-    return 3 * x" in result.stdout
    assert "+    return 2 * x" in result.stdout
    assert read(book, "minductor/core.py") != CORE  # --check writes nothing


def test_check_catches_missing_file(book):
    (book / "minductor" / "other.py").unlink()
    result = run(book, "--check")
    assert result.returncode == 1
    assert "+X = 1" in result.stdout
    assert "missing: minductor/other.py" in result.stderr


def test_check_catches_stray_file(book):
    (book / "minductor" / "handmade.py").write_text("Y = 2\n")
    result = run(book, "--check")
    assert result.returncode == 1
    assert "-Y = 2" in result.stdout
    assert "stray: minductor/handmade.py" in result.stderr
    assert (book / "minductor" / "handmade.py").exists()


def test_stitch_carries_change_insert_and_delete(book):
    core = "minductor/core.py"
    edit(book, core, "    return 2 * x\n", "    return x + x\n")  # block in 02
    edit(book, core, "import math\n", "import math\nimport sys\n")  # block in 01
    edit(book, core, "    # never negative, but be safe\n", "")  # chunk in 02
    edit(book, core, "        a = 0.0\n", "        a = 0.0  # clamp\n")  # chunk
    result = run(book, "--stitch")
    assert result.returncode == 0, result.stderr
    first = FIRST.replace("import math\n", "import math\nimport sys\n")
    second = (
        SECOND.replace("    return 2 * x\n", "    return x + x\n")
        .replace("# never negative, but be safe\n", "")
        .replace("    a = 0.0\n", "    a = 0.0  # clamp\n")
    )
    assert read(book, "chapters/01_first.md") == first
    assert read(book, "chapters/02_second.md") == second
    assert run(book, "--check").returncode == 0


def test_stitch_insert_at_block_end_and_start(book):
    core = "minductor/core.py"
    edit(book, core, "    return a\n", "    return a\n    # end of area\n")
    edit(book, core, "def double", "# doubling\ndef double")
    assert run(book, "--stitch").returncode == 0
    assert "    return a\n    # end of area\n```" in read(book, "chapters/01_first.md")
    assert '````python title="minductor/core.py"\n# doubling\ndef double' in read(
        book, "chapters/02_second.md"
    )
    assert run(book, "--check").returncode == 0


def test_stitch_same_length_change_across_blocks_maps_line_for_line(book):
    old = "def area(r):\n    a = math.pi * r * r\n"  # block in 01, chunk in 02
    edit(book, "minductor/core.py", old, "def area(rad):\n    a = math.pi * rad**2\n")
    assert run(book, "--stitch").returncode == 0
    assert "def area(rad):\n    # <<area-body>>" in read(book, "chapters/01_first.md")
    assert "\na = math.pi * rad**2\n" in read(book, "chapters/02_second.md")
    assert run(book, "--check").returncode == 0


def test_stitch_refuses_ambiguous_change_across_blocks(book):
    old = "def area(r):\n    a = math.pi * r * r\n"
    edit(
        book,
        "minductor/core.py",
        old,
        "def area(r):  # m²\n    r2 = r * r\n    a = 1\n",
    )
    before = snapshot(book)
    result = run(book, "--stitch")
    assert result.returncode == 1
    assert "unambiguously" in result.stderr
    assert snapshot(book) == before


def test_partition_splits_only_when_unique():
    tangle = load_tangle()
    segments = [(False, ["a"]), (True, ["", ""]), (False, ["b"])]
    assert tangle.partition(segments, ["a1", "a2", "", "", "b1"]) == [
        ["a1", "a2"],
        ["", ""],
        ["b1"],
    ]
    assert tangle.partition(segments, ["a", "", "", "", "b"]) is None  # two splits
    assert tangle.partition(segments, ["a", "b"]) is None  # separator gone


@pytest.mark.parametrize(
    "old, new",
    [
        ("— edit there", "— edited here"),  # the header line
        ("import math\n\n\ndef area", "import math\n\nX = 0\ndef area"),  # separator
        ("        a = 0.0", "a = 0.0"),  # lacks the chunk reference's indentation
    ],
    ids=["header", "separator", "chunk-indent"],
)
def test_stitch_refusal_writes_nothing(book, old, new):
    edit(book, "minductor/other.py", "X = 1", "X = 2")  # a valid edit elsewhere
    edit(book, "minductor/core.py", old, new)
    before = snapshot(book)
    result = run(book, "--stitch")
    assert result.returncode == 1
    assert "stitch refused" in result.stderr
    assert "minductor/core.py:" in result.stderr
    assert snapshot(book) == before


def test_block_inside_admonition_round_trips(tmp_path):
    text = (
        '!!! note\n    ```python title="minductor/m.py"\n    def f():\n\n'
        "        return 1\n    ```\n"
    )
    write_book(tmp_path, **{"01_x": text})
    assert run(tmp_path).returncode == 0
    gen = "# generated from chapters/01_x.md — edit there\n\ndef f():\n\n    return 1\n"
    assert read(tmp_path, "minductor/m.py") == gen
    edit(tmp_path, "minductor/m.py", "    return 1\n", "    x = 1\n    return x\n")
    assert run(tmp_path, "--stitch").returncode == 0
    assert read(tmp_path, "chapters/01_x.md") == text.replace(
        "        return 1\n", "        x = 1\n        return x\n"
    )


def test_stitch_with_nothing_to_do(book):
    result = run(book, "--stitch")
    assert result.returncode == 0
    assert "nothing" in result.stdout


@pytest.mark.parametrize(
    "text, message",
    [
        ('```python title="minductor/m.py"\n# <<nope>>\n```\n', "undefined chunk"),
        (
            '```python title="minductor/m.py"\nx = 1\n```\n'
            '```python title="<<lonely>>"\ny = 2\n```\n',
            "never used",
        ),
        (
            '```python title="minductor/m.py"\n# <<a>>\n```\n'
            '```python title="<<a>>"\n# <<b>>\n```\n'
            '```python title="<<b>>"\n# <<a>>\n```\n',
            "cycle",
        ),
        ('```python title="minductor/m.py"\nx = 1\n', "never closed"),
    ],
    ids=["undefined", "unused", "cycle", "unclosed"],
)
def test_malformed_books_are_errors(tmp_path, text, message):
    write_book(tmp_path, **{"01_x": text})
    for args in [(), ("--check",)]:
        result = run(tmp_path, *args)
        assert result.returncode == 2
        assert message in result.stderr
        assert "chapters/01_x.md:" in result.stderr
    assert not (tmp_path / "minductor" / "m.py").exists()


def test_help():
    result = subprocess.run(
        [sys.executable, str(TANGLE), "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "--stitch" in result.stdout and "--check" in result.stdout


def test_real_repo_is_clean():
    if not (REPO / "chapters").is_dir():
        pytest.skip("chapters/ does not exist yet")
    result = run(REPO, "--check")
    assert result.returncode == 0, result.stdout + result.stderr
