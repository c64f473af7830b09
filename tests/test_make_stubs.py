"""tools/make_stubs.py on a fixture exercise."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.exercises

REPO = Path(__file__).resolve().parent.parent
MAKE_STUBS = REPO / "tools" / "make_stubs.py"

SOLUTION = """\
# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Exercise 1: add one

# %%
def add_one(x):
    # BEGIN SOLUTION
    y = x + 1
    return y
    # END SOLUTION


class Box:
    def get(self):
        # BEGIN SOLUTION
        return 42
        # END SOLUTION


# %%
def test_add_one():
    assert add_one(1) == 2


def test_box():
    assert Box().get() == 42


# %% tags=["slow"]
# run the checks
test_add_one()
test_box()
"""

STUB = """\
# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# generated from exercises/solutions/ex01_add.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 1: add one

# %%
def add_one(x):
    raise NotImplementedError("your code here")


class Box:
    def get(self):
        raise NotImplementedError("your code here")


# %%
def test_add_one():
    assert add_one(1) == 2


def test_box():
    assert Box().get() == 42


# %% tags=["slow", "raises-exception"]
# run the checks
test_add_one()
test_box()
"""


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(MAKE_STUBS), "--root", str(root), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "exercises" / "solutions").mkdir(parents=True)
    (tmp_path / "exercises" / "solutions" / "ex01_add.py").write_text(SOLUTION)
    return tmp_path


def test_stub_is_exact(repo):
    result = run(repo)
    assert result.returncode == 0, result.stderr
    assert (repo / "exercises" / "ex01_add.py").read_text() == STUB
    assert run(repo, "--check").returncode == 0


def test_stub_without_jupytext_header(repo):
    body = SOLUTION.split("# ---\n\n", 1)[1]
    (repo / "exercises" / "solutions" / "ex01_add.py").write_text(body)
    assert run(repo).returncode == 0
    stub = (repo / "exercises" / "ex01_add.py").read_text()
    assert stub.startswith("# generated from exercises/solutions/ex01_add.py")
    assert stub.endswith(
        STUB.split("# replace each NotImplementedError with your code.\n", 1)[1]
    )


def test_stub_parses_as_tagged_notebook(repo):
    jupytext = pytest.importorskip("jupytext")
    run(repo)
    nb = jupytext.read(repo / "exercises" / "ex01_add.py")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[-1].metadata["tags"] == ["slow", "raises-exception"]
    assert all("tags" not in c.metadata for c in code[:-1])


def test_one_check_cell_per_check_each_tagged(repo):
    """The exercises call each check from a cell of its own, after a markdown line."""
    one_per_cell = SOLUTION.replace(
        '# %% tags=["slow"]\n# run the checks\ntest_add_one()\ntest_box()\n',
        "# %%\ntest_add_one()\n\n# %% [markdown]\n# The box:\n\n# %%\ntest_box()\n",
    )
    assert one_per_cell != SOLUTION
    (repo / "exercises" / "solutions" / "ex01_add.py").write_text(one_per_cell)
    assert run(repo).returncode == 0
    stub = (repo / "exercises" / "ex01_add.py").read_text()
    tagged = '# %% tags=["raises-exception"]\n'
    assert stub.endswith(
        f"{tagged}test_add_one()\n\n# %% [markdown]\n# The box:\n\n{tagged}test_box()\n"
    ), stub


def test_check_catches_stale_missing_and_stray(repo):
    assert run(repo, "--check").returncode == 1  # missing
    run(repo)
    stub = repo / "exercises" / "ex01_add.py"
    stub.write_text(STUB.replace("your code here", "your code"))
    result = run(repo, "--check")
    assert result.returncode == 1
    assert '+    raise NotImplementedError("your code here")' in result.stdout
    run(repo)
    (repo / "exercises" / "ex02_old.py").write_text("# old\n")
    result = run(repo, "--check")
    assert result.returncode == 1
    assert "ex02_old.py" in result.stdout
    run(repo)
    assert not (repo / "exercises" / "ex02_old.py").exists()
    assert run(repo, "--check").returncode == 0


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("        # END SOLUTION\n", "", "not closed"),
        (
            "# %%\ndef test_add_one",
            "# %%\n# BEGIN SOLUTION\nZ = 1\n# END SOLUTION\ndef test_add_one",
            "inside a function",
        ),
        ("test_box()\n", "test_box()\nprint('done')\n", "must do nothing else"),
    ],
    ids=["unclosed", "module-level", "mixed-check-cell"],
)
def test_bad_solutions_are_errors(repo, old, new, message):
    path = repo / "exercises" / "solutions" / "ex01_add.py"
    assert SOLUTION.count(old) == 1
    path.write_text(SOLUTION.replace(old, new))
    result = run(repo)
    assert result.returncode == 2
    assert message in result.stderr
    assert "ex01_add.py:" in result.stderr
    assert not (repo / "exercises" / "ex01_add.py").exists()
