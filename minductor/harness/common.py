# generated from chapters/measuring.md — edit there

"""Shared parts of the measuring harness (chapters/measuring.md)."""

from __future__ import annotations

import contextlib
import datetime
import gc
import importlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any
from xml.sax.saxutils import escape

import torch

BACKENDS = ("eager", "inductor", "minductor")
LABELS = {"eager": "eager", "inductor": "Inductor", "minductor": "minductor"}
COLORS = {"eager": "#9e9e9e", "inductor": "#ff7f0e", "minductor": "#1f77b4"}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def on_gpu() -> str:
    """The device a suite measures on: the GPU if there is one."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """Runs fn; returns its result and the seconds until its work is done."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """A block whose collections never walk the objects that exist when it starts."""
    gc.collect()
    gc.freeze()  # what exists now (other backends' leftovers too) is never scanned
    try:
        yield
    finally:
        gc.unfreeze()


def time_in_turns(
    steps: dict[str, Callable[[], Any]], device: str, rounds: int, per_round: int
) -> dict[str, float | BaseException]:
    """Median seconds per step of each backend, or the error its step raised: `rounds`
    rounds, each backend's `per_round` steps in one block, the order reversed from one
    round to the next."""
    times: dict[str, list[float]] = {b: [] for b in steps}
    failed: dict[str, BaseException] = {}
    with frozen_heap():
        for r in range(rounds):
            for backend in list(steps) if r % 2 == 0 else list(steps)[::-1]:
                if backend in failed:
                    continue
                try:
                    for _ in range(per_round):
                        times[backend].append(timed(steps[backend], device)[1])
                except Exception as error:
                    failed[backend] = error
    return {b: failed.get(b) or statistics.median(t) for b, t in times.items()}


CACHES = "MINDUCTOR_HARNESS_CACHES"  # the fresh cache directory of this process


def fresh_cache_env() -> dict[str, str]:
    """An environment whose caches start empty: Triton's, Inductor's and (through
    use_fresh_caches) minductor's, in a new directory."""
    root = tempfile.mkdtemp(prefix="minductor_harness_")
    return dict(
        os.environ,
        TRITON_CACHE_DIR=os.path.join(root, "triton"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
        **{CACHES: root},
    )


def use_fresh_caches() -> None:
    """In a process started with fresh_cache_env: minductor's cache there too, and no
    graph cache for either compiler (a cold compile is a compile)."""
    import torch._inductor.config as inductor_config

    from minductor.config import config

    config.cache_dir = os.path.join(os.environ[CACHES], "minductor")
    inductor_config.fx_graph_cache = False
    config.graph_cache = False


def warm_up(backends, device: str) -> None:
    """The first compile in a process imports and starts much that is no workload's
    cost: paid here, on a tiny function, once per compiled backend."""
    x = torch.randn(64, device=device)
    for backend in backends:
        if backend != "eager":
            torch._dynamo.reset()
            torch.compile(lambda t: (t * 2).sum(), backend=backend)(x)


TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def as_tuple(outputs) -> tuple:
    return outputs if isinstance(outputs, tuple) else (outputs,)


def check_close(name: str, got: tuple, want: tuple, who: str = "minductor") -> None:
    """Raises unless every output is the reference's, within its dtype's tolerance
    relative to the reference's largest value."""
    if len(got) != len(want):
        raise AssertionError(f"{name}: {len(got)} outputs, eager has {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        tol = TOLERANCE.get(g.dtype, 0.0)
        atol = tol * float(w.abs().max()) if w.numel() else 0.0
        torch.testing.assert_close(
            g.to(w.dtype),
            w,
            rtol=tol,
            atol=atol,
            msg=lambda m, i=i: f"{name}, output {i}: {who} is not eager's\n{m}",
        )


ROW = "@@minductor.harness row "  # the prefix of a result line on a child's stdout
HERE = os.path.abspath(__file__)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the checkout


def report(row) -> None:
    """In a child: one row, a dataclass, for the parent to read."""
    print(ROW + json.dumps(asdict(row)), flush=True)


def reported(out: str, cls) -> dict[str, Any]:
    """The rows a child printed, by backend, each backend's last report."""
    lines = [s[len(ROW) :] for s in out.splitlines() if s.startswith(ROW)]
    return {r.backend: r for r in (cls(**json.loads(s)) for s in lines)}


def spawn(argv: list[str], timeout: float) -> tuple[str, str, str]:
    """`python *argv` in a child with fresh caches and a timeout: its stdout, its
    stderr, and how it ended."""
    env = fresh_cache_env()
    path = [PACKAGE_ROOT, os.getenv("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: a timeout kills it all
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        why = f"the child exited with status {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        why = f"timed out after {timeout:g} s"
    finally:
        shutil.rmtree(env[CACHES], ignore_errors=True)
    return out, err, why


def last_lines(err: str, n: int = 20) -> list[str]:
    return [s for s in err.splitlines() if s.strip()][-n:]


def start_child(backends) -> None:
    use_fresh_caches()
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # eager's CPU time, independent of the machine's load
    warm_up(backends, on_gpu())


def first_line(error: BaseException) -> str:
    while getattr(error, "inner_exception", None) is not None:  # Dynamo's wrapper
        error = error.inner_exception
    lines = [s for s in str(error).splitlines() if s.strip()] or [""]
    return f"{type(error).__name__}: {lines[0]}"[:300]


def error_row(row, error: BaseException) -> None:
    row.status = f"error: {first_line(error)}"
    row.detail = "".join(traceback.format_exception(error)[-20:])


def missing(library: str) -> str | None:
    try:
        importlib.import_module(library)
    except Exception as error:  # absent, or a wheel built for another torch
        return f"{library} does not import ({first_line(error)})"
    return None


def start(args, listing: Callable[[], str], child_main: Callable) -> int | None:
    """What every suite's `main` does first: `--list` prints the list, `--child` runs
    one child's share (both return its exit status); else None, after a note when
    there is no GPU to measure on."""
    if args.list:
        print(listing())
        return 0
    if args.child:
        return child_main(args)
    if not torch.cuda.is_available() and not args.tiny:
        print(
            "no GPU: kernels run in Triton's interpreter; try --tiny", file=sys.stderr
        )
    return None


def fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "—" if value is None else format(value * scale, spec)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [header, ["---"] * len(header), *rows]
    return ["| " + " | ".join(cells) + " |" for cells in lines]


def cell(text: str, width: int = 90) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def machine() -> dict[str, str]:
    import triton

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return dict(
        device=device,
        torch=torch.__version__,
        triton=triton.__version__,
        date=datetime.date.today().isoformat(),
    )


def write_json(path: str, rows: list, **extra) -> None:
    record = machine() | extra | dict(rows=[asdict(r) for r in rows])
    write(path, json.dumps(record, indent=1))


def measured(record: dict) -> str:
    """Where and when a JSON record was measured, in a sentence."""
    torch_version = record.get("torch") or record.get("torch_version")
    triton_version = record.get("triton") or record.get("triton_version")
    where = f"Measured {record['date']} on {record['device']}, torch {torch_version}"
    return where + (f", triton {triton_version}." if triton_version else ".")


def bar_chart(title, rows, backends, width=760, bar=8, gap=10) -> str:
    """Horizontal bars, a group per row: rows are (label, {backend: value})."""
    group, left, top = bar * len(backends) + gap, 250, 64  # px: row, labels, title
    fastest = max([1.0, *(v for _, value in rows for v in value.values())])
    step = 0.5 * math.ceil(fastest / 4)  # about eight grid lines
    limit = step * math.ceil(fastest / step)
    scale = (width - left - 50) / limit
    height = top + group * len(rows) + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<text x="8" y="16" font-weight="bold">{escape(title)}; longer is faster'
        "</text>",
    ]
    for i, b in enumerate(backends):
        x = left + i * 110
        out.append(f'<rect x="{x}" y="28" width="12" height="12" fill="{COLORS[b]}"/>')
        out.append(f'<text x="{x + 16}" y="38">{LABELS[b]}</text>')
    for k in range(round(limit / step) + 1):
        x = left + k * step * scale
        dash = ' stroke-dasharray="4 3"' if k * step == 1 else ""
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{height - 6}" '
            f'stroke="#ccc"{dash}/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{top - 12}" text-anchor="middle">'
            f"{k * step:g}×</text>"
        )
    for i, (name, value) in enumerate(rows):
        y = top + i * group
        out.append(
            f'<text x="{left - 8}" y="{y + len(backends) * bar / 2 + 4}" '
            f'text-anchor="end">{escape(name)}</text>'
        )
        for j, b in enumerate(b for b in backends if b in value):
            yb, w = y + j * bar, value[b] * scale
            out.append(
                f'<rect class="bar {b}" x="{left}" y="{yb}" width="{w:.1f}" '
                f'height="{bar - 1}" fill="{COLORS[b]}"/>'
            )
            out.append(
                f'<text x="{left + w + 3:.1f}" y="{yb + bar - 1}" font-size="9">'
                f"{value[b]:.2f}</text>"
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"
