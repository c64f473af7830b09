"""Every exercise: the solution's checks pass, the stub's checks fail, stubs are fresh.

Each notebook runs in a child process of its own, so what an exercise registers (a
lowering, a fusion rule) never leaks into other tests. The child executes the
notebook without its check cells (see tools/make_stubs.py), then calls every
``test_*`` function itself and reports the outcomes as JSON.

Starting Python and importing torch and minductor takes about 4 s, most of a small
notebook's run. So the children are forked from a *zygote*: one process per test
worker (this file run with ``--serve``) that imports them once, then forks a fresh
child for each notebook it is sent. A fork is a copy of a process that has imported
and nothing else, which is what a new process would be, minus the 4 s. Where fork is
not available, or on a machine with a CUDA GPU (a forked child cannot use CUDA once its
parent has, and the zygote's first compile does), each notebook gets a new process
(this file run as a script).
"""

import ast
import importlib.util
import json
import os
import subprocess
import sys
import traceback
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAKE_STUBS = REPO / "tools" / "make_stubs.py"
SOLUTIONS = sorted((REPO / "exercises" / "solutions").glob("ex*.py"))
RESULT = "@@exercise-result@@ "
STUB_MESSAGE = "your code here"


def load_make_stubs() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("make_stubs", MAKE_STUBS)
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_stubs"] = module
    spec.loader.exec_module(module)
    return module


def from_stub(exc: BaseException | None) -> bool:
    """Is ``exc``, or an exception it wraps (Dynamo wraps backend errors), the
    stub's NotImplementedError?"""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) and STUB_MESSAGE in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def run_notebook(path: Path) -> dict:
    """Exec ``path`` minus its check cells, then call each test_* (in the child)."""
    ms = load_make_stubs()
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    called = []
    for cell in ms.check_cells(text, str(path)):
        called += [s.value.func.id for s in ast.parse(cell.code).body]
        lines[cell.marker + 1 : cell.end] = [""] * (cell.end - cell.marker - 1)
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    sys.modules[path.stem] = module
    report = {"import_error": None, "checks": [], "called": called}
    try:
        exec(compile("\n".join(lines), str(path), "exec"), module.__dict__)
    except BaseException:  # reported to the parent
        report["import_error"] = traceback.format_exc()
        return report
    tests = [
        name
        for name, fn in vars(module).items()
        if name.startswith("test_")
        and getattr(getattr(fn, "__code__", None), "co_filename", None) == str(path)
    ]
    if path.parent.name != "solutions":
        _no_shrinking()  # a stub's checks fail at once; hypothesis need not shrink them
    for name in tests:
        try:
            getattr(module, name)()
        except BaseException as exc:
            outcome = "stub" if from_stub(exc) else type(exc).__name__
            report["checks"].append([name, outcome, traceback.format_exc()])
        else:
            report["checks"].append([name, "passed", ""])
    return report


def _no_shrinking() -> None:
    """Hypothesis, on finding a failing example, would spend seconds shrinking it."""
    try:
        from hypothesis import Phase, settings
    except ImportError:
        return
    settings.register_profile("stub", phases=[Phase.explicit, Phase.generate])
    settings.load_profile("stub")


def _child_env() -> dict:
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "exercises"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def serve() -> None:
    """The zygote: import once, then fork a child per path read from stdin. The
    child's output goes to the file named after the path; the zygote answers with
    the child's exit status."""
    from conftest import skip_guard_timing  # this file's folder is on sys.path

    import minductor  # noqa: F401  (torch, Triton, every chapter: the 4 s)

    skip_guard_timing()

    _warm_up()
    for request in sys.stdin:
        path, out = request.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:  # the child: a fresh copy of an importing process
            status = 1
            try:
                with open(out, "w", encoding="utf-8") as sink:
                    os.dup2(sink.fileno(), 1)
                    os.dup2(sink.fileno(), 2)
                    sys.stdout = sys.stderr = sink
                    print(RESULT + json.dumps(run_notebook(Path(path))), flush=True)
                status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


def _warm_up() -> None:
    """A process's first compile, and its first backward, import and set up what
    every later one reuses (about 1.3 s): pay it once in the zygote. Dynamo's caches
    and the graph cache's counters are emptied after, so a child starts as a fresh
    process would, only sooner."""
    import torch

    from minductor import cache

    x = torch.randn(4, 5, requires_grad=True)
    torch.compile(lambda x: (x.sin() * 2).sum(0), backend="minductor")(x.detach())
    torch.compile(lambda x: (x.cos() * 2).sum(), backend="minductor")(x).backward()
    torch._dynamo.reset()
    cache.counters.clear()


_zygote: subprocess.Popen | None = None


def _forked(path: Path, out: Path) -> int:
    """Run path in a child forked by this worker's zygote; the child's exit code."""
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen(
            [sys.executable, __file__, "--serve"],
            cwd=REPO, env=_child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
    _zygote.stdin.write(f"{path}\t{out}\n")
    _zygote.stdin.flush()
    return int(_zygote.stdout.readline() or 1)


def _has_cuda() -> bool:
    import torch  # asking does not start CUDA in this process

    return torch.cuda.is_available()


def run_child(path: Path, tmp_path: Path) -> dict:
    out = tmp_path / f"{path.stem}.out"
    if hasattr(os, "fork") and not _has_cuda():
        code = _forked(path, out)
        text = out.read_text(encoding="utf-8") if out.exists() else ""
    else:
        cmd = [sys.executable, __file__, str(path)]
        proc = subprocess.run(
            cmd, cwd=REPO, env=_child_env(), capture_output=True, text=True,
            timeout=1200,
        )  # fmt: skip
        code, text = proc.returncode, proc.stdout + proc.stderr
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    pytest.fail(f"{path.name}: the child failed (exit {code})\n{text[-5000:]}")


def ids(paths):
    return [p.stem for p in paths]


pytestmark = pytest.mark.exercises
if not SOLUTIONS and __name__ != "__main__":
    pytest.skip("no exercises/solutions/ex*.py yet", allow_module_level=True)


@pytest.mark.parametrize("solution", SOLUTIONS, ids=ids(SOLUTIONS))
def test_solution_checks_pass(solution, tmp_path):
    report = run_child(solution, tmp_path)
    assert report["import_error"] is None, report["import_error"]
    assert report["checks"], f"{solution.name} defines no test_* checks"
    failed = [
        f"{name}: {detail}"
        for name, outcome, detail in report["checks"]
        if outcome != "passed"
    ]
    assert not failed, "\n".join(failed)
    uncalled = [n for n, _, _ in report["checks"] if n not in report["called"]]
    assert not uncalled, f"no check cell calls {uncalled}: the notebook never runs them"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=ids(SOLUTIONS))
def test_stub_checks_fail(solution, tmp_path):
    stub = REPO / "exercises" / solution.name
    assert stub.exists(), f"{stub} is missing: run `python tools/make_stubs.py`"
    report = run_child(stub, tmp_path)
    assert report["import_error"] is None, (
        f"the stub fails before any check runs; code outside functions must not use "
        f"the learner's part:\n{report['import_error']}"
    )
    problems = []
    for name, outcome, detail in report["checks"]:
        if outcome == "passed":
            problems.append(
                f"{name} passes on the stub: a check that cannot fail checks nothing"
            )
        elif outcome != "stub":
            problems.append(
                f"{name} raised {outcome}, not the stub's NotImplementedError:\n"
                + detail
            )
    assert not problems, "\n".join(problems)


def test_stubs_are_fresh():
    cmd = [sys.executable, str(MAKE_STUBS), "--check"]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve()
    else:
        print(RESULT + json.dumps(run_notebook(Path(sys.argv[1]).resolve())))
