"""The OpInfo sweep: PyTorch's operator database run through a torch.compile backend.

PyTorch describes about 700 operators in `op_db` (torch.testing._internal.
common_methods_invocations): which dtypes each supports, how to build sample inputs,
whether it is differentiable. Inductor's `test/inductor/test_torchinductor_opinfo.py`
runs every (operator, dtype) through torch.compile and compares with eager; this is the
same idea for minductor, with Inductor run through the same harness for comparison.

A case is one OpInfo variant ("max.reduction_with_dim") in one dtype on one backend. For
up to N of its sample inputs that eager accepts, the harness compares the compiled call
with eager: every output (tensors, tuples and lists of them, Python scalars, None) and
every input the op mutates; for floating dtypes on differentiable OpInfos also the
gradients of sum(w * output) with respect to the inputs that require grad (w fixed and
random: with w = 1 some backward formulas, softmax's for one, vanish and test nothing).
Floating results are compared with per-dtype tolerances; a result outside them still
passes when its error against a float64 eager reference is at most 2x eager's own error
(plus the same tolerance), as Inductor's accuracy checks do. Integers and bools: exact.

Each case ends as
  pass   every checked sample matched (recorded: kernels generated, ATen fallbacks)
  wrong  a compiled result differs from eager (recorded: the largest error)
  crash  the compiled call raised where eager did not (recorded: the error's first
         line, the deepest minductor frame of its traceback), or timed out, or killed
         its worker process
  skip   with a reason: random ops, ops with uninitialized outputs, eager raising on
         every sample

Usage (CPU: minductor's kernels run in Triton's interpreter, so it is slow):

  python tools/opinfo_sweep.py --ops softmax sum --dtypes float32 int64
  python tools/opinfo_sweep.py --backends minductor inductor --dtypes float32 \\
      --no-backward --jobs 2 --json /tmp/sweep.json
  python tools/opinfo_sweep.py --ops nn.functional.gelu --exact -v   # one op, details
  python tools/opinfo_sweep.py --report /tmp/sweep.json              # re-print a run
  python tools/opinfo_sweep.py --dynamic --dtypes float32 --jobs 2     # symbolic sizes

Cases run in worker processes (--jobs N, default 1; --jobs 0 runs in this process), so
a segfault or a hang (--timeout, per case) costs one case, not the sweep.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types
import unittest
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # minductor from this checkout, installed or not
    sys.path.insert(0, str(REPO))

# Triton's interpreter must be chosen before triton is first imported, and importing
# op_db imports triton (through torch.testing._internal); as minductor/__init__ does.
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
DEFAULT_DTYPES = ["float32", "int64", "bool", "bfloat16"]

# (atol, rtol) by the dtype of the output compared. float32: a little looser than
# torch.testing's defaults (1e-5, 1.3e-6), since a reduction summed in another order
# differs by a few ulps. Low precision: about one ulp relative. The float64 reference
# (see module doc) decides what falls outside these.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
}
# compiled may be this many times as far from the float64 reference as eager is
REFERENCE_MULTIPLIER = 2.0
# per-op tolerance overrides: {(op variant, dtype name): (atol, rtol)}, with a reason
TOLERANCE_OVERRIDES: dict[tuple[str, str], tuple[float, float]] = {
    # a sample sets its first slice (t[0]) to 10000, where a float32 ulp is 1e-3; the
    # gradient adds and subtracts values of that size, so any other order of the scan's
    # sums moves it by about 1e-3 (on an H100: 3e-3 at a gradient of 2.66). Inductor's
    # OpInfo test allows the same for this op's gradients (atol 8e-4, rtol 1e-3).
    ("logcumsumexp", "float32"): (8e-4, 1e-3),
}

# Random ops: compiled code draws other random numbers than eager.
RANDOM_WORDS = (
    "rand", "dropout", "bernoulli", "normal", "uniform", "multinomial", "cauchy",
    "exponential", "geometric", "log_normal", "rrelu", "fractional_max_pool",
    "poisson", "svd_lowrank", "pca_lowrank",
)  # fmt: skip
NOT_RANDOM = {
    "nn.functional.normalize",
    "masked.normalize",
    "signal.windows.exponential",
}
# Outputs that are uninitialized memory: nothing to compare.
UNINITIALIZED = {
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
    "new_empty_strided", "resize_", "resize_as_",
}  # fmt: skip
# Other skips, each with its reason: {op variant: reason}.
SKIPS: dict[str, str] = {}
# Outputs left out of the comparison, by position, each with its reason. The CUDA
# attention kernels return the state of the random generator they were given (a Philox
# seed and offset): the compiled call runs after eager's, from another state, and
# without dropout the kernels leave these outputs uninitialized.
UNCOMPARED_OUTPUTS: dict[str, tuple[frozenset[int], str]] = {
    "torch.ops.aten._flash_attention_forward": (
        frozenset({2, 3}), "Philox seed and offset of the random generator"
    ),
    "torch.ops.aten._efficient_attention_forward": (
        frozenset({2, 3}), "Philox seed and offset of the random generator"
    ),
}


def _uncompared(name: str, out):
    """out with the outputs UNCOMPARED_OUTPUTS names for this op replaced by None."""
    drop = UNCOMPARED_OUTPUTS.get(name, (frozenset(), ""))[0]
    if not drop or not isinstance(out, (tuple, list)):
        return out
    return tuple(None if i in drop else o for i, o in enumerate(out))


GPU_COMPILE_ENV = "MINDUCTOR_SWEEP_GPU_COMPILE"
DYNAMIC_ENV = "MINDUCTOR_SWEEP_DYNAMIC"  # compile with dynamic=True (--dynamic)


def full_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def skip_reason(op) -> str | None:
    name = full_name(op)
    if name in SKIPS:
        return SKIPS[name]
    # getattr: OpInfo gained this flag after torch 2.11, the GPU machine's version
    if name in UNINITIALIZED or getattr(op, "has_nondeterministic_output", False):
        return "outputs uninitialized or nondeterministic memory"
    if name not in NOT_RANDOM and any(w in name for w in RANDOM_WORDS):
        return "random op"
    if getattr(op, "nondeterministic_seeded", False):
        return "random op (nondeterministic_seeded)"
    if getattr(op, "skip_correctness_check_compile_vs_eager", False):
        return "OpInfo says: skip compile-vs-eager correctness"
    return None


# ------------------------------------------------------------------------------------
# op_db


def _ensure_expecttest() -> None:
    """torch.testing._internal.common_utils imports `expecttest` (a test dependency of
    PyTorch's) only for its TestCase base class; a stand-in serves when it is
    missing."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        shim = types.ModuleType("expecttest")
        shim.TestCase = unittest.TestCase
        shim.ACCEPT = False
        sys.modules["expecttest"] = shim


def _call_unseeded(op, *args, **kwargs):
    return op(*args, **kwargs)


def _random_sample(name: str, sample) -> bool:
    """A sample of a deterministic op that asks for randomness (attention dropout)."""
    if sample.kwargs.get("dropout_p"):
        return True
    # multi_head_attention_forward takes dropout_p positionally, training=p > 0
    mha = name == "nn.functional.multi_head_attention_forward"
    return bool(mha and sample.kwargs.get("training"))


def _no_test_fn() -> None:
    return None


@functools.cache
def load_op_db() -> list:
    _ensure_expecttest()
    # importing common_utils freezes torch.backends flags for PyTorch's own test suite
    # (torch.backends.disable_global_flags); undo that for everyone else in the process
    frozen = torch.backends.flags_frozen()
    from torch.testing._internal import common_methods_invocations as cmi

    # Some OpInfos call their op through wrapper_set_seed, which seeds torch's RNG
    # (a graph break: Dynamo would hand the backend nothing). Inductor's OpInfo test
    # replaces it too; random samples are skipped (_random_sample) and random ops
    # are not run, so the seed is not needed.
    cmi.wrapper_set_seed = _call_unseeded
    # Each sample_inputs() call looks for the unittest case that asked for it, to
    # attach the sample it is on: inspect.stack() with source lines, a tenth of a
    # second under pytest's deep stack, and a third of the sweep's time. We run
    # outside unittest, where the search always comes back empty.
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    common_utils.extract_test_fn = core.extract_test_fn = _no_test_fn
    op_db = cmi.op_db

    if not frozen and torch.backends.flags_frozen():
        torch.backends.disable_global_flags.__globals__[
            "__allow_nonbracketed_mutation_flag"
        ] = True
    return op_db


@functools.cache
def ops_by_name() -> dict[str, Any]:
    return {full_name(op): op for op in load_op_db()}


def enumerate_cases(
    dtypes: Iterable[str],
    patterns: Iterable[str] = (),
    exact: bool = False,
    device: str = "cpu",
) -> list[tuple[str, str]]:
    """(op variant, dtype name) for every OpInfo matching a pattern, in the dtypes it
    supports on the device."""
    patterns = list(patterns)
    cases = []
    for op in load_op_db():
        name = full_name(op)
        if patterns and not any(
            (p == name) if exact else (p in name) for p in patterns
        ):
            continue
        supported = op.supported_dtypes(device)
        cases += [(name, d) for d in dtypes if DTYPES[d] in supported]
    return cases


# ------------------------------------------------------------------------------------
# inputs


def _clone_tensor(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same sizes and strides (a view of a fresh buffer, as Inductor's
    clone_preserve_strides), requiring grad as a leaf if the original did."""
    with torch.no_grad():
        if t.layout != torch.strided or t.numel() == 0:
            out = t.detach().clone()
        else:
            needed = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
            buf = torch.as_strided(t.detach(), (needed,), (1,)).clone()
            out = torch.as_strided(buf, t.shape, t.stride())
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def clone_inputs(sample, to_dtype: torch.dtype | None = None):
    """(input, args, kwargs) copied; the same tensor twice stays one tensor. With
    to_dtype, floating tensors are converted (the float64 reference)."""
    seen: dict[int, torch.Tensor] = {}

    def one(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in seen:
            if to_dtype is not None and x.is_floating_point():
                y = x.detach().to(to_dtype)
                seen[id(x)] = y.requires_grad_(x.requires_grad)
            else:
                seen[id(x)] = _clone_tensor(x)
        return seen[id(x)]

    return tree_map(one, (sample.input, sample.args, sample.kwargs))


def grad_leaves(inputs) -> list[torch.Tensor]:
    return [
        t
        for t in tree_flatten(inputs)[0]
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]


def differentiable_outputs(out) -> list[torch.Tensor]:
    return [
        t
        for t in tree_flatten(out)[0]
        if isinstance(t, torch.Tensor)
        and t.requires_grad
        and (t.is_floating_point() or t.is_complex())
    ]


def output_weights(outs: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """The fixed random w of sum(w * output), in each output's dtype."""
    g = torch.Generator().manual_seed(seed)
    ws = []
    for o in outs:
        w = torch.rand(o.shape, generator=g, dtype=torch.float32) * 2 - 1
        ws.append(w.to(device=o.device, dtype=o.dtype))
    return ws


def gradients(out, inputs, weights) -> list[torch.Tensor | None] | None:
    outs = differentiable_outputs(out)
    leaves = grad_leaves(inputs)
    if not outs or not leaves:
        return None
    loss = sum((o * w.to(o.dtype)).sum() for o, w in zip(outs, weights))
    return list(torch.autograd.grad(loss, leaves, allow_unused=True))


# ------------------------------------------------------------------------------------
# comparison


class Mismatch(Exception):
    def __init__(self, message: str, max_err: float | None = None):
        super().__init__(message)
        self.max_err = max_err


def _tolerance(dtype: torch.dtype, case: tuple[str, str]) -> tuple[float, float]:
    return TOLERANCE_OVERRIDES.get(case, TOLERANCES.get(dtype, (0.0, 0.0)))


def _max_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    a, e = actual.detach().double(), expected.detach().double()
    both = torch.isfinite(a) & torch.isfinite(e)
    if not both.any():
        return 0.0
    return float((a[both] - e[both]).abs().max())


def _special_values_match(a: torch.Tensor, e: torch.Tensor) -> bool:
    """nan where eager has nan, the same infinity where eager has one."""
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    inf = torch.isinf(e) | torch.isinf(a)
    return bool((a[inf] == e[inf]).all())


def compare_tensor(actual, expected, get_ref, what: str, case) -> None:
    """get_ref() gives the float64 reference of this value, or None; called only when
    the value is outside the tolerances."""
    if not isinstance(actual, torch.Tensor):
        raise Mismatch(f"{what}: eager gave a tensor, compiled {type(actual).__name__}")
    if actual.dtype != expected.dtype:
        raise Mismatch(f"{what}: dtype {actual.dtype}, eager {expected.dtype}")
    if actual.shape != expected.shape:
        raise Mismatch(
            f"{what}: shape {tuple(actual.shape)}, eager {tuple(expected.shape)}"
        )
    if actual.layout != torch.strided or expected.layout != torch.strided:
        actual, expected = actual.to_dense(), expected.to_dense()
    a = actual.detach().cpu().resolve_conj().resolve_neg()
    e = expected.detach().cpu().resolve_conj().resolve_neg()
    if a.is_complex():
        a, e = torch.view_as_real(a), torch.view_as_real(e)
    if not a.is_floating_point():
        if not torch.equal(a, e):
            diff = (a.long() - e.long()).abs().max() if a.numel() else 0
            n = int((a != e).sum())
            raise Mismatch(
                f"{what}: {n} of {a.numel()} elements differ (exact dtype {a.dtype})",
                float(diff),
            )
        return
    atol, rtol = _tolerance(a.dtype, case)
    if (
        a.numel() == 0
        or torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True).all()
    ):
        return
    err = _max_err(a, e)
    ref = get_ref()
    if isinstance(ref, torch.Tensor) and ref.shape == a.shape:
        # judged against float64: compiled no further from it than 2x eager (+ tol)
        r = ref.detach().cpu().resolve_conj().resolve_neg()
        r = torch.view_as_real(r) if r.is_complex() else r
        r = r.double()
        ad, ed = a.double(), e.double()
        if _special_values_match(a, e):
            fin = torch.isfinite(ad) & torch.isfinite(ed) & torch.isfinite(r)
            eager_err = float((ed[fin] - r[fin]).abs().max()) if fin.any() else 0.0
            bound = REFERENCE_MULTIPLIER * eager_err + atol + rtol * r[fin].abs()
            if bool(((ad[fin] - r[fin]).abs() <= bound).all()):
                return
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    first = tuple(int(i) for i in bad.nonzero()[0]) if a.dim() else ()
    if not _special_values_match(a, e):  # a nan or an infinity where eager has none
        err = float("inf")
    raise Mismatch(
        f"{what}: {int(bad.sum())} of {a.numel()} elements differ, max abs error "
        f"{err:.3g} (atol {atol:g}, rtol {rtol:g}); first at {list(first)}: "
        f"{a[first].item():.6g}, eager {e[first].item():.6g}",
        err,
    )


def compare(actual, expected, what: str, case, reference=None) -> None:
    """Compare two output trees leaf by leaf. reference() gives the float64 tree (or
    None); it runs at most once, and only if a floating value is outside tolerance."""
    a_leaves, _ = tree_flatten(actual)
    e_leaves, _ = tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        raise Mismatch(
            f"{what}: {len(a_leaves)} values, eager returned {len(e_leaves)}"
        )
    ref_leaves: list | None = None
    resolved = False

    def ref_leaf(i: int):
        nonlocal ref_leaves, resolved
        if not resolved:
            resolved = True
            tree = reference() if reference is not None else None
            if tree is not None:
                leaves, _ = tree_flatten(tree)
                ref_leaves = leaves if len(leaves) == len(e_leaves) else None
        return ref_leaves[i] if ref_leaves is not None else None

    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        w = what if len(e_leaves) == 1 else f"{what}[{i}]"
        if isinstance(e, torch.Tensor):
            compare_tensor(a, e, functools.partial(ref_leaf, i), w, case)
        elif e is None:
            if a is not None and not (isinstance(a, torch.Tensor) and not a.any()):
                raise Mismatch(f"{w}: eager gave None, compiled {type(a).__name__}")
        elif isinstance(e, float) and isinstance(a, (float, int)):
            atol, rtol = _tolerance(torch.float64, case)
            if not (
                (math.isnan(e) and math.isnan(a))
                or math.isclose(a, e, rel_tol=rtol, abs_tol=atol)
            ):
                raise Mismatch(f"{w}: {a!r}, eager {e!r}", abs(a - e))
        elif isinstance(a, torch.Tensor) and a.numel() == 1 and a.item() == e:
            continue
        elif a != e or type(a) is not type(e):
            raise Mismatch(f"{w}: {a!r}, eager {e!r}")


def _grads_as_zeros(grads, leaves):
    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]


# ------------------------------------------------------------------------------------
# one case


def _root_exception(e: BaseException) -> BaseException:
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        inner = getattr(e, "inner_exception", None) or e.__cause__
        if inner is None:
            break
        e = inner
    return e


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(e).__name__}: {line}"[:300]


def _frames(e: BaseException) -> tuple[str | None, str | None, str]:
    """(deepest minductor frame, deepest frame, the last frames formatted)."""
    tb = traceback.extract_tb(e.__traceback__)
    pkg = str(REPO / "minductor")
    where = origin = None
    for f in tb:
        short = f"{Path(f.filename).name}:{f.lineno} in {f.name}"
        origin = short
        if f.filename.startswith(pkg):
            where = f"minductor/{Path(f.filename).name}:{f.lineno} in {f.name}"
        elif re.search(r"minductor_[^/]*/c[0-9a-f]+\.py$", f.filename):
            where = f"generated {Path(f.filename).name}:{f.lineno} in {f.name}"
    text = "".join(traceback.format_list(tb[-14:])) + _first_line(e)
    return where, origin, text


class _Tracker:
    """Counts compiled graphs, generated kernels and fallbacks for one backend."""

    def __init__(self, backend: str):
        self.backend = backend
        self.graphs = 0
        self.kernels = 0
        self.fallbacks: set[str] = set()
        self.gpu_kernels: list = []  # with --gpu-compile: each graph's, for a GPU
        self._gpu = os.environ.get(GPU_COMPILE_ENV) == "1" and backend == "minductor"

    def __enter__(self):
        if self._gpu:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from gpu_compile import record_gpu_kernels

            self._gpu_cm = record_gpu_kernels()
            self._gpu_found = self._gpu_cm.__enter__()
        if self.backend == "minductor":
            from minductor.capture import record_compiled

            self._cm = record_compiled()
            self._found = self._cm.__enter__()
        elif self.backend == "inductor":
            from torch._dynamo.utils import counters
            from torch._inductor import metrics

            self._k0 = metrics.generated_kernel_count
            self._g0 = counters["stats"]["unique_graphs"]
        return self

    def __exit__(self, *exc):
        if self._gpu:
            self._gpu_cm.__exit__(*exc)
            self.gpu_kernels += self._gpu_found
        if self.backend == "minductor":
            self._cm.__exit__(*exc)
            self.graphs += len(self._found)
            self.kernels += sum(len(g.kernel_names) for g in self._found)
            self.fallbacks.update(str(f) for g in self._found for f in g.fallbacks)
        elif self.backend == "inductor":
            from torch._dynamo.utils import counters
            from torch._inductor import metrics

            self.kernels += metrics.generated_kernel_count - self._k0
            self.graphs += counters["stats"]["unique_graphs"] - self._g0
        return False


def _samples(op, device: str, dtype: torch.dtype, requires_grad: bool):
    return op.sample_inputs(device, dtype, requires_grad=requires_grad)


def run_case(
    name: str,
    dtype_name: str,
    backend: str = "minductor",
    *,
    device: str = "cpu",
    samples: int = 2,
    backward: bool = True,
    seed: int = 0,
    max_tries: int | None = None,
    verbose: bool = False,
) -> dict:
    """Run one (op variant, dtype) case; return its record (see module doc)."""
    op = ops_by_name()[name]
    dtype = DTYPES[dtype_name]
    rec: dict[str, Any] = {
        "op": name, "dtype": dtype_name, "backend": backend, "status": None,
        "phase": None, "error": None, "where": None, "origin": None, "max_err": None,
        "graphs": 0, "kernels": 0, "fallbacks": [], "samples": 0,
        "backward_samples": 0, "eager_raised": 0, "random_samples": 0,
        "sample": None, "sample_index": None,
        "trace": None, "seconds": 0.0,
    }  # fmt: skip
    t0 = time.time()
    reason = skip_reason(op)
    if reason:
        rec.update(status="skip", error=reason)
        return rec
    case = (name, dtype_name)
    want_grad = bool(
        backward
        and dtype.is_floating_point
        and op.supports_autograd
        and dtype in op.supported_backward_dtypes(device)
    )
    fn = op.get_op()

    def call(inp):
        x, args, kwargs = inp
        return fn(x, *args, **kwargs)

    # the first max_tries samples, made before anything else draws random numbers
    max_tries = max_tries or max(8, 2 * samples)
    torch.manual_seed(seed)
    candidates = []
    try:
        for sample in _samples(op, device, dtype, want_grad):
            candidates.append(sample)
            if len(candidates) == max_tries:
                break
    except Exception as e:  # noqa: BLE001
        if not candidates:
            rec.update(status="skip", error=f"sample_inputs raised: {_first_line(e)}")
            return rec
    tracker = _Tracker(backend)
    tried = 0
    status = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, sample in enumerate(candidates):
            if rec["samples"] == samples:
                break
            tried += 1
            if _random_sample(name, sample):
                rec["random_samples"] += 1
                continue
            torch.manual_seed(seed)
            # eager, on its own copy
            e_in = clone_inputs(sample)
            try:
                e_out = call(e_in)
            except Exception:  # noqa: BLE001
                rec["eager_raised"] += 1
                continue
            e_grads = None
            weights = None
            if want_grad:
                try:
                    g_out = sample.output_process_fn_grad(e_out)
                    weights = output_weights(
                        differentiable_outputs(g_out), seed + index
                    )
                    e_grads = gradients(g_out, e_in, weights)
                except Exception:  # noqa: BLE001
                    e_grads = None  # eager cannot differentiate this sample
            rec["samples"] += 1
            rec["sample"] = _summary(sample)
            rec["sample_index"] = index
            # compiled, on another copy
            c_in = clone_inputs(sample)
            phase = "forward"
            torch._dynamo.reset()
            torch.manual_seed(seed)
            dynamic = os.environ.get(DYNAMIC_ENV) == "1"
            compiled = torch.compile(call, backend=backend, dynamic=dynamic)
            try:
                with tracker:
                    c_out = compiled(c_in)
                    c_grads = None
                    if e_grads is not None:
                        phase = "backward"
                        g_out = sample.output_process_fn_grad(c_out)
                        c_grads = gradients(g_out, c_in, weights)
            except Exception as e:  # noqa: BLE001
                root = _root_exception(e)
                where, origin, text = _frames(root)
                rec.update(
                    status="crash", phase=phase, error=_first_line(root),
                    where=where, origin=origin, trace=text,
                )  # fmt: skip
                if verbose:
                    traceback.print_exception(e)
                status = "crash"
                break
            # compare: outputs, mutated inputs, gradients
            try:
                ref = _Reference(call, sample, dtype)
                compare(
                    _uncompared(name, c_out), _uncompared(name, e_out), "output", case,
                    lambda: _uncompared(name, ref.out()),
                )
                compare(c_in, e_in, "input after the call", case, ref.inputs)
                if e_grads is not None:
                    rec["backward_samples"] += 1
                    leaves = grad_leaves(e_in)
                    if c_grads is None:
                        raise Mismatch("backward: compiled outputs do not require grad")
                    compare(
                        _grads_as_zeros(c_grads, grad_leaves(c_in)),
                        _grads_as_zeros(e_grads, leaves),
                        "grad",
                        case,
                        functools.partial(ref.grads, weights),
                    )
            except Exception as m:  # noqa: BLE001
                if not isinstance(m, Mismatch):  # the comparison itself failed
                    m = Mismatch(f"could not compare: {_first_line(m)}")
                rec.update(
                    status="wrong", phase=phase if "grad" in str(m) else "forward",
                    error=str(m), max_err=m.max_err,
                )  # fmt: skip
                status = "wrong"
                break
    rec["graphs"], rec["kernels"] = tracker.graphs, tracker.kernels
    if tracker.gpu_kernels:
        rec["gpu_kernels"] = [dataclasses.asdict(k) for k in tracker.gpu_kernels]
    rec["fallbacks"] = sorted(tracker.fallbacks)
    rec["seconds"] = round(time.time() - t0, 2)
    if status is None:
        if rec["samples"] == 0:
            rec["status"] = "skip"
            why = "no sample inputs"
            if tried:
                why = (
                    f"of {tried} samples tried, eager raised on {rec['eager_raised']}"
                    f" and {rec['random_samples']} ask for randomness"
                )
            rec["error"] = rec["error"] or why
        else:
            rec["status"] = "pass"
            rec["error"] = None
    return rec


class _Reference:
    """Eager in float64 on the same sample, run only when a comparison asks for it."""

    def __init__(self, call, sample, dtype: torch.dtype):
        self.call, self.sample = call, sample
        self.enabled = dtype.is_floating_point and dtype != torch.float64
        self._done = False
        self._out = self._inputs = None

    def _run(self) -> None:
        if self._done or not self.enabled:
            return
        self._done = True
        try:
            self._inputs = clone_inputs(self.sample, torch.float64)
            self._out = self.call(self._inputs)
        except Exception:  # noqa: BLE001
            self._out = self._inputs = None

    def out(self):
        self._run()
        return self._out

    def inputs(self):
        self._run()
        return self._inputs

    def grads(self, weights):
        self._run()
        if self._out is None:
            return None
        try:
            out = self.sample.output_process_fn_grad(self._out)
            grads = gradients(out, self._inputs, [w.double() for w in weights])
            return _grads_as_zeros(grads, grad_leaves(self._inputs))
        except Exception:  # noqa: BLE001
            return None


def _summary(sample) -> str:
    try:
        return sample.summary()[:600]
    except Exception:  # noqa: BLE001
        return repr(sample)[:600]


# ------------------------------------------------------------------------------------
# many cases, in worker processes


def _worker_main(args) -> None:
    """Read cases as JSON lines on stdin; write records as JSON lines to --result-fd."""
    out = os.fdopen(args.result_fd, "w", buffering=1)
    if args.threads:
        torch.set_num_threads(args.threads)
    if "minductor" in args.backends:
        import minductor  # noqa: F401
    load_op_db()
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        try:
            rec = run_case(
                job["op"], job["dtype"], job["backend"], device=args.device,
                samples=args.samples, backward=job["backward"], seed=args.seed,
            )  # fmt: skip
        except Exception as e:  # noqa: BLE001  (the harness itself failed)
            rec = _failed_record(job, f"HarnessError: {_first_line(e)}")
            rec["trace"] = traceback.format_exc()[-2000:]
        out.write(json.dumps(rec, default=str) + "\n")


class _Worker:
    def __init__(self, argv: list[str], log_path: Path):
        r, w = os.pipe()
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker",
             "--result-fd", str(w), *argv],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT,
            pass_fds=(w,), cwd=str(REPO),
        )  # fmt: skip
        os.close(w)
        self.results = os.fdopen(r, "r")
        self.log_path = log_path
        self.job: dict | None = None
        self.started = 0.0
        self.ready = False
        self._buf = ""

    def fileno(self) -> int:
        return self.results.fileno()

    def send(self, job: dict) -> None:
        self.job = job
        self.started = time.time()
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()

    def read_lines(self) -> list[str] | None:
        """Complete lines available now; None at end of file (the worker died)."""
        data = os.read(self.fileno(), 1 << 20).decode()
        if not data:
            return None
        self._buf += data
        *lines, self._buf = self._buf.split("\n")
        return lines

    def log_tail(self, n: int = 6) -> str:
        try:
            lines = Path(self.log_path).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in lines[-n:])[:400]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.results, self.proc.stdin, self.log):
            try:
                f.close()
            except OSError:
                pass


def _failed_record(job: dict, why: str) -> dict:
    return {
        "op": job["op"], "dtype": job["dtype"], "backend": job["backend"],
        "status": "crash", "phase": None, "error": why, "where": None,
        "origin": None, "max_err": None, "graphs": 0, "kernels": 0,
        "fallbacks": [], "samples": 0, "trace": None, "seconds": 0.0,
    }  # fmt: skip


def run_sweep(
    jobs: list[dict],
    *,
    workers: int = 1,
    timeout: float = 300.0,
    device: str = "cpu",
    samples: int = 2,
    seed: int = 0,
    on_result=None,
    log_dir: Path | None = None,
) -> list[dict]:
    """Run jobs ({"op", "dtype", "backend", "backward"}); records in job order."""
    if workers <= 0:
        records = []
        for i, job in enumerate(jobs):
            rec = run_case(
                job["op"], job["dtype"], job["backend"], device=device,
                samples=samples, backward=job["backward"], seed=seed,
            )  # fmt: skip
            records.append(rec)
            if on_result:
                on_result(i, rec)
        return records
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="opinfo_sweep_"))
    log_dir.mkdir(parents=True, exist_ok=True)
    backends = sorted({j["backend"] for j in jobs})
    threads = "1" if workers > 1 else "0"
    argv = ["--device", device, "--samples", str(samples), "--seed", str(seed),
            "--threads", threads, "--backends", *backends]  # fmt: skip
    pending = collections.deque(enumerate(jobs))
    records: dict[int, dict] = {}
    pool: list[_Worker] = []
    started = 0

    def spawn():
        nonlocal started
        started += 1
        pool.append(_Worker(argv, log_dir / f"worker{started}.log"))

    def fail(w: _Worker, why: str):
        i, job = w.job["_index"], w.job
        rec = _failed_record(job, why)
        rec.update(trace=w.log_tail(12), seconds=round(time.time() - w.started, 1))
        records[i] = rec
        if on_result:
            on_result(i, rec)

    for _ in range(min(workers, len(jobs))):
        spawn()
    try:
        while pending or any(w.job for w in pool):
            for w in pool:
                if w.ready and w.job is None and pending:
                    i, job = pending.popleft()
                    w.send({**job, "_index": i})
            ready, _, _ = select.select(pool, [], [], 1.0)
            for w in ready:
                lines = w.read_lines()
                if lines is None:  # died: a segfault, an abort, out of memory
                    code = w.proc.wait()
                    if w.job is not None:
                        fail(w, f"WorkerDied: exit code {code} ({w.log_tail(2)})")
                    elif not w.ready:
                        raise RuntimeError(f"worker failed to start: {w.log_tail()}")
                    w.kill()
                    pool.remove(w)
                    if pending or any(x.job for x in pool) or not pool:
                        spawn()
                    continue
                for line in lines:
                    msg = json.loads(line)
                    if msg.get("ready"):
                        w.ready = True
                        continue
                    i = w.job["_index"]
                    records[i] = msg
                    w.job = None
                    if on_result:
                        on_result(i, msg)
            now = time.time()
            for w in list(pool):
                if w.job is not None and now - w.started > timeout:
                    fail(w, f"Timeout: no result after {timeout:.0f} s")
                    w.kill()
                    pool.remove(w)
                    spawn()
            # keep as many workers as there is work for
            while len(pool) < min(
                workers, len(pending) + sum(bool(w.job) for w in pool)
            ):
                spawn()
    finally:
        for w in pool:
            w.kill()
    return [records[i] for i in range(len(jobs))]


def make_jobs(
    cases: list[tuple[str, str]],
    backends: list[str],
    backward_dtypes: set[str],
) -> list[dict]:
    return [
        {"op": op, "dtype": d, "backend": b, "backward": d in backward_dtypes}
        for b in backends
        for op, d in cases
    ]


# ------------------------------------------------------------------------------------
# reports

STATUSES = ("pass", "wrong", "crash", "skip")


def counts_table(records: list[dict]) -> str:
    """Cases per backend and dtype. A passing case either generated a kernel, or ran
    only ATen fallbacks ("fallback"), or Dynamo handed the backend no graph at all
    ("no graph": a graph break or a data-dependent op ran the sample eagerly)."""
    rows = collections.defaultdict(collections.Counter)
    for r in records:
        key = (r["backend"], r["dtype"])
        rows[key][r["status"]] += 1
        if r["status"] == "pass":
            kind = "kernel" if r.get("kernels") else "fallback"
            if not r.get("graphs"):
                kind = "nograph"
            rows[key][kind] += 1
    cols = ("pass", "kernel", "fallback", "nograph", "wrong", "crash", "skip")
    head = f"{'backend':<10} {'dtype':<9} {'cases':>5} " + " ".join(
        f"{c:>8}" for c in cols
    )
    head += f" {'pass%':>6}"
    lines = [head, "-" * len(head)]
    order = sorted(rows, key=lambda k: (k[0], list(DTYPES).index(k[1])))
    for b, d in order:
        c = rows[(b, d)]
        ran = c["pass"] + c["wrong"] + c["crash"]
        rate = f"{100 * c['pass'] / ran:.1f}" if ran else "-"
        lines.append(
            f"{b:<10} {d:<9} {sum(c[s] for s in STATUSES):>5} "
            + " ".join(f"{c[k]:>8}" for k in cols)
            + f" {rate:>6}"
        )
    lines.append(
        "pass = kernel + fallback + nograph; kernel: generated at least one kernel; "
        "fallback: ATen fallbacks only;\nnograph: Dynamo compiled no graph; "
        "pass% = pass / (pass + wrong + crash)"
    )
    return "\n".join(lines)


def side_by_side(records: list[dict]) -> str:
    backends = sorted({r["backend"] for r in records})
    if len(backends) < 2:
        return ""
    by = {(r["backend"], r["op"], r["dtype"]): r["status"] for r in records}
    lines = []
    dtypes = sorted({r["dtype"] for r in records}, key=list(DTYPES).index)
    for d in dtypes:
        both = [
            (op, dd)
            for (b, op, dd) in by
            if b == backends[0] and dd == d and all((x, op, d) in by for x in backends)
        ]
        cells = []
        for b in backends:
            ran = [k for k in both if by[(b, *k)] != "skip"]
            ok = sum(by[(b, *k)] == "pass" for k in ran)
            cells.append(f"{b} {ok}/{len(ran)}")
        lines.append(f"{d:<9} " + "   ".join(cells))
    a, b = backends[0], backends[1]
    for x, y in ((a, b), (b, a)):
        only = sorted(
            f"{op} ({d})"
            for (bb, op, d), s in by.items()
            if bb == x and s in ("wrong", "crash") and by.get((y, op, d)) == "pass"
        )
        lines.append(f"{x} fails where {y} passes: {len(only)}")
        if only:
            lines.append("  " + ", ".join(only))
    return "\n".join(lines)


def failures_report(records: list[dict]) -> str:
    lines = []
    for backend in sorted({r["backend"] for r in records}):
        wrong = [
            r for r in records if r["backend"] == backend and r["status"] == "wrong"
        ]
        crash = [
            r for r in records if r["backend"] == backend and r["status"] == "crash"
        ]
        lines.append(f"\n== {backend}: {len(wrong)} wrong ==")
        for r in wrong:
            err = "" if r["max_err"] is None else f" max_err={r['max_err']:.3g}"
            lines.append(
                f"  {r['op']} ({r['dtype']}) [{r['phase']}]{err}: {r['error']}"
            )
        lines.append(f"\n== {backend}: {len(crash)} crash, by error ==")
        groups = collections.defaultdict(list)
        for r in crash:
            groups[_error_key(r["error"])].append(r)
        for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"-- {key}  ({len(rs)})")
            for r in rs:
                where = r.get("where") or r.get("origin") or ""
                extra = (
                    ""
                    if r["error"].startswith(key) and len(r["error"]) <= len(key) + 2
                    else f"  {r['error'][:160]}"
                )
                lines.append(
                    f"   {r['op']} ({r['dtype']}) [{r['phase']}] {where}{extra}"
                )
    return "\n".join(lines)


def _error_key(error: str) -> str:
    """Group errors that differ only in numbers, names in quotes or shapes."""
    e = error.split(":", 1)
    head = e[0]
    msg = e[1].strip() if len(e) > 1 else ""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg)
    msg = re.sub(r"\d+", "N", msg)
    return f"{head}: {msg[:90]}"


def print_report(records: list[dict], show_failures: bool = True) -> None:
    print(counts_table(records))
    sbs = side_by_side(records)
    if sbs:
        print("\nside by side (cases both backends ran):")
        print(sbs)
    if show_failures:
        print(failures_report(records))


# ------------------------------------------------------------------------------------
# command line


def _git_commit() -> str | None:
    """HEAD, with "+dirty" when minductor/ differs from it (the sweep's subject)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
            text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "minductor"], cwd=REPO,
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backends", nargs="+", default=["minductor"])
    p.add_argument("--dtypes", nargs="+", default=DEFAULT_DTYPES, choices=list(DTYPES))
    p.add_argument(
        "--ops", nargs="*", default=[], help="substrings of op variant names"
    )
    p.add_argument("--exact", action="store_true", help="--ops are exact names")
    p.add_argument("--samples", type=int, default=2, help="samples per case (2)")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument(
        "--backward-dtypes", nargs="*", default=None,
        help="floating dtypes whose cases also check gradients (default: all asked)",
    )  # fmt: skip
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--jobs", type=int, default=1, help="worker processes; 0: in-process"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write every case's record here (updated as it runs)")
    p.add_argument("--report", help="print the report of a saved --json run and exit")
    p.add_argument("--shard", help="i/n: run every n-th case starting at i (0-based)")
    p.add_argument("-v", "--verbose", action="store_true", help="tracebacks, samples")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-case progress")
    p.add_argument(
        "--gpu-compile", action="store_true",
        help="also compile every minductor kernel for an H100 (no GPU needed)",
    )  # fmt: skip
    p.add_argument(
        "--dynamic", action="store_true",
        help="compile with dynamic=True: sizes as symbols",
    )  # fmt: skip
    # internal: a worker process
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        _worker_main(args)
        return 0
    # on SIGTERM, unwind (the workers are killed in run_sweep's finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.report:
        records = json.loads(Path(args.report).read_text())["records"]
        print_report(records)
        return 0
    if args.gpu_compile:  # the workers inherit it
        os.environ[GPU_COMPILE_ENV] = "1"
    if args.dynamic:  # so do they this
        os.environ[DYNAMIC_ENV] = "1"
    if "minductor" in args.backends:
        import minductor  # noqa: F401
    cases = enumerate_cases(args.dtypes, args.ops, args.exact, args.device)
    if args.shard:
        i, n = (int(x) for x in args.shard.split("/"))
        cases = cases[i::n]
    if not cases:
        print("no cases match", file=sys.stderr)
        return 2
    floating = {d for d in args.dtypes if DTYPES[d].is_floating_point}
    bw = set() if args.no_backward else set(args.backward_dtypes or floating)
    jobs = make_jobs(cases, args.backends, bw)
    n_ops = len({c[0] for c in cases})
    print(
        f"{len(cases)} cases ({n_ops} op variants) x {len(args.backends)} backends, "
        f"{args.samples} samples each, backward for {sorted(bw) or 'none'}",
        file=sys.stderr,
    )
    t0 = time.time()
    done: dict[int, dict] = {}
    meta = {
        "argv": sys.argv[1:] if argv is None else argv, "torch": torch.__version__,
        "device": args.device, "samples": args.samples, "backward": sorted(bw),
        "commit": _git_commit(),
    }  # fmt: skip

    def save():
        if args.json:
            recs = [done[i] for i in sorted(done)]
            data = {**meta, "seconds": round(time.time() - t0), "records": recs}
            tmp = Path(args.json + ".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(args.json)

    gpu_kernels = []

    def on_result(i, rec):
        for k in rec.pop("gpu_kernels", []):
            gpu_kernels.append((rec["op"], rec["dtype"], k))
        done[i] = rec
        if not args.quiet:
            what = rec["error"]
            if rec["status"] == "pass":
                what = f"{rec['kernels']} kernels"
                if rec["fallbacks"]:
                    what += f", fallbacks {','.join(rec['fallbacks'])}"
            print(
                f"[{len(done)}/{len(jobs)} {time.time() - t0:.0f}s] {rec['backend']} "
                f"{rec['op']} {rec['dtype']}: {rec['status']} ({rec['seconds']}s) "
                f"{(what or '')[:150]}",
                file=sys.stderr,
                flush=True,
            )
        if args.verbose and rec["status"] in ("wrong", "crash"):
            print(
                f"    sample {rec.get('sample_index')}: {rec.get('sample')}",
                file=sys.stderr,
            )
            if rec.get("trace"):
                print("    " + rec["trace"].replace("\n", "\n    "), file=sys.stderr)
        if len(done) % 10 == 0:
            save()

    records = run_sweep(
        jobs, workers=args.jobs, timeout=args.timeout, device=args.device,
        samples=args.samples, seed=args.seed, on_result=on_result,
    )  # fmt: skip
    save()
    print_report(records)
    print(f"\n{len(jobs)} cases in {time.time() - t0:.0f} s")
    if args.gpu_compile:
        return gpu_compile_report(gpu_kernels)
    return 0


def gpu_compile_report(found: list[tuple[str, str, dict]]) -> int:
    """Compile the cases' kernels for a GPU; print the failures with their cases."""
    from gpu_compile import GpuKernel, compile_kernels

    kernels, cases = [], {}
    for op, dtype, k in found:
        kernel = GpuKernel.from_dict(k)
        kernel.graph = f"{op} {dtype}"
        kernels.append(kernel)
        cases.setdefault(kernel.key, []).append(kernel.graph)
    t0 = time.time()
    failures = compile_kernels(kernels)
    print(
        f"\nGPU compile (sm_90): {len(cases)} distinct kernels in "
        f"{time.time() - t0:.0f} s, {len(failures)} failed"
    )
    for f in failures:
        print(f"--- {f['name']} ({f['graph']}): {f['error']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
