"""The OpInfo sweep (tools/opinfo_sweep.py): PyTorch's operator database, minductor.

Three parts:

* a representative subset of (OpInfo variant, dtype) cases (pointwise math,
  comparisons, reductions, views, indexing, scatter, cat, where, clamp, pow, softmax,
  norms, matmul, losses; float32 with gradients, int64, bool, some bfloat16). `make
  test` compares the first sample of each op's first dtype, and of every dtype of a
  few ops (EVERY_DTYPE_FAST); the slow tier (marker `slow`, `make test-slow`) compares
  SAMPLES samples of every case, and the first one of the rest;
* EXPECTED_FAILURES: every case of the whole sweep that fails today, with its reason.
  Those in the subset are strict xfails, and the whole sweep fails on any case that
  starts failing *or starts passing*: the table can only shrink, and must be edited
  when it does;
* the whole sweep (about 2,000 cases, a few minutes on two cores), skipped unless
  MINDUCTOR_OPINFO_FULL=1; marker `opinfo_slow`.

The sweep's settings are fixed here so that all three agree: 2 samples per case,
gradients for float32, minductor on CPU (Triton's interpreter) or CUDA.
"""

import ast
import collections
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
from helpers import INTERPRET

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def _load_sweep():
    spec = importlib.util.spec_from_file_location(
        "opinfo_sweep", TOOLS / "opinfo_sweep.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["opinfo_sweep"] = module
    spec.loader.exec_module(module)
    return module


sweep = _load_sweep()

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SAMPLES = 2
BACKWARD_DTYPES = {"float32"}
SWEEP_DTYPES = ("float32", "int64", "bool", "bfloat16")

needs_kernels = pytest.mark.skipif(
    DEVICE == "cpu" and not INTERPRET, reason="CPU kernels need the interpreter"
)

# ------------------------------------------------------------------------------------
# The representative subset: op variant -> dtypes.

F, I, B, H = "float32", "int64", "bool", "bfloat16"  # noqa: E741
SUBSET: dict[str, tuple[str, ...]] = {
    # pointwise math
    "abs": (F, I),
    "neg": (F, I),
    "exp": (F, H),
    "log": (F,),
    "sqrt": (F,),
    "rsqrt": (F,),
    "sin": (F,),
    "tanh": (F, H),
    "sigmoid": (F, H),
    "erf": (F,),
    "nn.functional.gelu": (F, H),
    "nn.functional.silu": (F,),
    "nn.functional.relu": (F, I),
    "nn.functional.hardtanh": (F, I),
    "add": (F, I, B, H),
    "mul": (F, I, B),
    "sub": (F, I),
    "div.no_rounding_mode": (F, I),
    "div.floor_rounding": (F, I),
    "remainder": (F, I),
    "floor": (F,),
    "round": (F, H),
    "round.decimals_3": (F,),
    "trunc": (F, I),
    "signbit": (F, I),
    "copysign": (F, I),
    "fmod": (F, I),
    "log10": (F, H),
    "fmax": (F, I),
    "logaddexp": (F,),
    "addmv": (F,),
    "sign": (F, I, B),
    "pow": (F, I),
    "clamp": (F, I),
    "where": (F, I, B),
    "lerp": (F,),
    "addcmul": (F,),
    "maximum": (F, I, B),
    "bitwise_and": (I, B),
    "logical_not": (F, B),
    # comparisons
    "eq": (F, I, B),
    "lt": (F, I),
    "isnan": (F,),
    # reductions
    "sum": (F, I, B, H),
    "mean": (F, H),
    "amax": (F, I, B),
    "argmax": (F, I),
    "prod": (F, I),
    "var": (F,),
    "any": (F, B),
    "logsumexp": (F,),
    "cumsum": (F, I, H),
    "cumprod": (F, I),
    "logcumsumexp": (F,),
    "max.reduction_with_dim": (F, I),
    # views and data movement
    "view": (F, B),
    "reshape": (F, I),
    "permute": (F,),
    "transpose": (F, B),
    "expand": (F,),
    "squeeze": (F,),
    "unsqueeze": (I,),
    "narrow": (F,),
    "select": (F,),
    "diagonal": (F,),
    "flip": (F, B),
    "roll": (F,),
    "repeat": (F, I),
    "constant_pad_nd": (F,),
    "tril": (F, B),
    "cat": (F, I, B, H),
    "stack": (F,),
    # indexing and scatter
    "gather": (F, I),
    "index_select": (F, B),
    "__getitem__": (F,),
    "take_along_dim": (F,),
    "index_put": (F, I),
    "index_add": (F,),
    "masked_fill": (F, B),
    "scatter": (F, I),
    "scatter_add": (F,),
    "scatter_reduce.sum": (F,),
    "nn.functional.embedding": (F,),
    "nn.functional.embedding_bag": (F, H),  # bfloat16: an auxiliary result skipped
    "nn.functional.one_hot": (I,),
    # softmax and norms
    "softmax": (F, H),
    "log_softmax": (F,),
    "nn.functional.layer_norm": (F, H),
    "nn.functional.rms_norm": (F,),
    "nn.functional.group_norm": (F,),
    "nn.functional.batch_norm": (F,),
    "nn.functional.normalize": (F,),
    # matmul and friends
    "mm": (F,),
    "bmm": (F,),
    "matmul": (F,),
    "addmm": (F,),
    "nn.functional.linear": (F,),
    # losses
    "nn.functional.cross_entropy": (F,),
    "nn.functional.nll_loss": (F,),
    "nn.functional.mse_loss": (F,),
    "nn.functional.binary_cross_entropy": (F, H),
    "nn.functional.binary_cross_entropy_with_logits": (F,),
    "nn.functional.huber_loss": (F,),
    "nn.functional.softplus": (F,),
    "nan_to_num": (F, H),
    "nn.functional.l1_loss": (F,),
    "nn.functional.smooth_l1_loss": (F,),
    # borrowed decompositions (chapter 2): activations, elementwise tests, shuffles,
    # mirrored borders
    "nn.functional.glu": (F, H),
    "nn.functional.prelu": (F,),
    "nn.functional.logsigmoid": (F, H),
    "nn.functional.elu": (F,),
    "logit": (F,),
    "heaviside": (F, I),
    "isinf": (F, I),
    "sgn": (F, I),
    "logical_xor": (B, I),
    "nn.functional.pixel_shuffle": (F, B),
    "nn.functional.pad.reflect": (F,),
    "nn.functional.pad.replicate": (F, H),
    "nn.functional.unfold": (F,),
    "block_diag": (F, I),
    "linalg.cross": (F,),
    "count_nonzero": (F, B),
    "isin": (F, I),
    # factories and conversions
    "arange": (F, I),
    "full_like": (F, B),
    "to": (F, I),
}

# ------------------------------------------------------------------------------------
# Every case of the whole sweep (SWEEP_DTYPES, SAMPLES, gradients for float32) that
# fails today, and why. Remove an entry when the case passes; the tests insist.

EXPECTED_FAILURES: dict[tuple[str, str], str] = {}


def _case_id(op: str, dtype: str) -> str:
    return f"{op}-{dtype}"


# `make test` runs each op's first dtype (float32 with gradients, where it has one) and
# every dtype of these; the other dtypes of the subset are in the slow tier
EVERY_DTYPE_FAST = {"add", "sum", "cat", "where", "eq", "amax", "cumsum", "to"}


def _subset_params():
    params = []
    for op, dtypes in SUBSET.items():
        for dtype in dtypes:
            marks = [needs_kernels]
            if dtype != dtypes[0] and op not in EVERY_DTYPE_FAST:
                marks.append(pytest.mark.slow)
            reason = EXPECTED_FAILURES.get((op, dtype))
            if reason:
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            params.append(pytest.param(op, dtype, marks=marks, id=_case_id(op, dtype)))
    return params


def _explain(rec: dict) -> str:
    lines = [
        f"{rec['op']} ({rec['dtype']}): {rec['status']} in {rec['phase']}: "
        f"{rec['error']}",
        f"sample {rec.get('sample_index')}: {rec.get('sample')}",
    ]
    if rec.get("where"):
        lines.append(f"from {rec['where']}")
    if rec.get("trace"):
        lines.append(rec["trace"])
    lines.append(
        f"rerun: python tools/opinfo_sweep.py --ops '{rec['op']}' --exact "
        f"--dtypes {rec['dtype']} --jobs 0 -v"
    )
    return "\n".join(lines)


# `make test` compares each case's first sample; the slow tier compares SAMPLES of them,
# as the whole sweep does (the first one again: the slow tier may repeat what the fast
# one checked, never skip what the sweep checks)
TIERS = [
    pytest.param(1, id="first"),
    pytest.param(SAMPLES, id="all", marks=pytest.mark.slow),
]


@pytest.mark.e2e
@pytest.mark.parametrize("samples", TIERS)
@pytest.mark.parametrize("op,dtype", _subset_params())
def test_opinfo(op, dtype, samples):
    rec = sweep.run_case(
        op, dtype, "minductor", device=DEVICE, samples=samples,
        backward=dtype in BACKWARD_DTYPES,
    )  # fmt: skip
    if rec["status"] == "skip":
        pytest.skip(rec["error"])
    assert rec["status"] == "pass", _explain(rec)
    assert rec["samples"] >= 1


def test_subset_names_each_op_once():
    """A dict literal keeps the last of two equal keys, so a repeated entry would drop
    the dtypes of the first without a word."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)]
    literal = next(n.value for n in assigns if getattr(n.target, "id", "") == "SUBSET")
    names = [key.value for key in literal.keys]
    repeated = sorted({n for n in names if names.count(n) > 1})
    assert not repeated, f"SUBSET names these ops twice: {repeated}"


def test_subset_names_are_opinfos():
    """Every subset entry names an OpInfo variant that supports the dtype, and covers
    at least the documented ground (so a renamed OpInfo cannot silently drop out)."""
    ops = sweep.ops_by_name()
    for op, dtypes in SUBSET.items():
        assert op in ops, f"{op} is not an OpInfo variant in this torch"
        supported = ops[op].supported_dtypes("cpu")
        for d in dtypes:
            assert sweep.DTYPES[d] in supported, f"{op} does not support {d}"
    n = sum(len(d) for d in SUBSET.values())
    assert len(SUBSET) >= 40 and n >= 80, (len(SUBSET), n)


def test_expected_failures_table():
    """EXPECTED_FAILURES names real cases of the sweep, each with a reason; prints
    the table's size by dtype (pytest -s)."""
    ops = sweep.ops_by_name()
    for (op, dtype), reason in EXPECTED_FAILURES.items():
        assert op in ops, f"EXPECTED_FAILURES: {op} is not an OpInfo variant"
        assert dtype in SWEEP_DTYPES, f"EXPECTED_FAILURES: {dtype} is not swept"
        assert sweep.DTYPES[dtype] in ops[op].supported_dtypes("cpu"), (op, dtype)
        assert reason.strip(), f"EXPECTED_FAILURES: {op} ({dtype}) needs a reason"
    by_dtype = collections.Counter(d for _, d in EXPECTED_FAILURES)
    in_subset = sum(1 for op, d in EXPECTED_FAILURES if d in SUBSET.get(op, ()))
    print(
        f"\nEXPECTED_FAILURES: {len(EXPECTED_FAILURES)} cases "
        f"({', '.join(f'{d} {n}' for d, n in sorted(by_dtype.items()))}); "
        f"{in_subset} in the fast subset"
    )


# ------------------------------------------------------------------------------------
# The harness itself: a check that cannot fail is a defect.


def _perturb(o):
    if not isinstance(o, torch.Tensor) or o.dtype == torch.bool:
        return o
    return o + (1e-2 if o.is_floating_point() else 1)


def _perturbing_backend(gm, example_inputs):
    def run(*args):
        return type(outs := gm(*args))(_perturb(o) for o in outs)

    return run


def _raising_backend(gm, example_inputs):
    raise IndexError("tuple index out of range (a planted bug)")


@pytest.fixture(scope="module")
def planted_backends():
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    names = {"opinfo_test_wrong": _perturbing_backend,
             "opinfo_test_crash": _raising_backend}  # fmt: skip
    for name, fn in names.items():
        if name not in _COMPILER_FNS:
            register_backend(fn, name=name)
    yield
    for name in names:
        _COMPILER_FNS.pop(name, None)


def test_harness_sees_wrong_results(planted_backends):
    rec = sweep.run_case(
        "exp", "float32", "opinfo_test_wrong", samples=1, backward=False
    )
    assert rec["status"] == "wrong", rec
    assert rec["max_err"] == pytest.approx(1e-2, rel=0.1)
    rec = sweep.run_case("sum", "int64", "opinfo_test_wrong", samples=1, backward=False)
    assert rec["status"] == "wrong" and rec["max_err"] == 1, rec


def test_harness_sees_crashes(planted_backends):
    rec = sweep.run_case(
        "abs", "float32", "opinfo_test_crash", samples=1, backward=False
    )
    assert rec["status"] == "crash", rec
    assert rec["error"].startswith("IndexError: tuple index out of range"), rec


def test_harness_passes_eager_and_skips_random_ops():
    rec = sweep.run_case("softmax", "float32", "aot_eager", samples=1)
    assert rec["status"] == "pass" and rec["backward_samples"] == 1, rec
    assert sweep.run_case("bernoulli", "float32", "aot_eager")["status"] == "skip"
    assert sweep.run_case("empty_like", "float32", "aot_eager")["status"] == "skip"
    assert sweep.run_case("nn.functional.normalize", "float32", "aot_eager",
                          samples=1)["status"] == "pass"  # fmt: skip


def test_float64_reference_judges_low_precision():
    """Outside tolerance against eager, but no further from float64 than eager is:
    a pass. Further than twice eager's error: wrong."""
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = torch.tensor([1.0, 2.0, 3.05])
    close = torch.tensor([1.0, 2.0, 2.95])
    far = torch.tensor([1.0, 2.0, 3.2])
    case = ("x", "float32")
    sweep.compare(close, eager, "out", case, lambda: ref)
    with pytest.raises(sweep.Mismatch):
        sweep.compare(far, eager, "out", case, lambda: ref)
    with pytest.raises(sweep.Mismatch):
        sweep.compare(close, eager, "out", case)  # no reference: tolerances only
    with pytest.raises(sweep.Mismatch):  # integers are exact
        sweep.compare(torch.tensor([1, 2]), torch.tensor([1, 3]), "out", case)
    with pytest.raises(sweep.Mismatch):  # nan where eager has a number
        sweep.compare(torch.tensor([float("nan")]), torch.tensor([1.0]), "out", case)
    sweep.compare(torch.tensor([float("nan")]), torch.tensor([float("nan")]), "o", case)


# ------------------------------------------------------------------------------------
# The whole sweep, on demand.


@pytest.mark.opinfo_slow
@needs_kernels
@pytest.mark.skipif(
    os.environ.get("MINDUCTOR_OPINFO_FULL") != "1",
    reason="the whole OpInfo sweep runs with MINDUCTOR_OPINFO_FULL=1",
)
def test_opinfo_full_sweep(tmp_path):
    cases = sweep.enumerate_cases(SWEEP_DTYPES, device=DEVICE)
    jobs = sweep.make_jobs(cases, ["minductor"], BACKWARD_DTYPES)
    records = sweep.run_sweep(
        jobs, workers=os.cpu_count() or 1, device=DEVICE, samples=SAMPLES,
        log_dir=tmp_path,
    )  # fmt: skip
    sweep.print_report(records)
    failing = {
        (r["op"], r["dtype"]): r for r in records if r["status"] in ("wrong", "crash")
    }
    new = sorted(set(failing) - set(EXPECTED_FAILURES))
    fixed = sorted(k for k in EXPECTED_FAILURES if k not in failing and k in set(cases))
    msg = []
    if new:
        msg.append(f"{len(new)} cases fail that are not in EXPECTED_FAILURES:")
        msg += [f"  {k}: {failing[k]['status']}: {failing[k]['error']}" for k in new]
    if fixed:
        msg.append(f"{len(fixed)} EXPECTED_FAILURES now pass (remove them):")
        msg += [f"  {k}" for k in fixed]
    assert not msg, "\n".join(msg)
