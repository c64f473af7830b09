"""Chapter 2: every decomposition is held to the meta function of the op it replaces.

`held_to_meta` runs the op itself on the decomposition's fake arguments and compares
dtypes and sizes; on a disagreement the op is kept whole (logged). Tests here:

* the case that showed the class: `native_dropout_backward` of an integer or bool
  gradient is float32 in eager, compiled and compared for every dtype;
* a planted wrong decomposition (dtype, size, count of results) is caught, the op kept
  whole and the compiled result right; a right one passes silently; real tensors and
  mutating ops are not checked;
* the sweep: PyTorch's OpInfo samples traced on fake tensors through the whole table,
  forward in four dtypes and backward in three; no decomposition may disagree. A subset
  (the OpInfos named like one of our own decompositions) runs in `make test`, the
  whole sweep with MINDUCTOR_OPINFO_FULL=1 (about four minutes on two cores).
"""

import itertools
import logging
import os

import pytest
import torch
from helpers import DEVICES, INTERPRET, run
from test_opinfo import sweep
from torch.fx.experimental.proxy_tensor import make_fx

from minductor import decompositions as D

pytestmark = pytest.mark.ch02
aten = torch.ops.aten
DISAGREES = "the op is kept whole"


@pytest.fixture
def table_with(request):
    """The table with some decompositions planted (restored afterwards)."""
    saved = dict(D.decompositions)

    def plant(op, fn):
        D.decompositions[op] = fn
        return D.decomposition_table()

    yield plant
    D.decompositions.clear()
    D.decompositions.update(saved)


# --- the case that showed the class ---------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.bool, torch.float16, torch.bfloat16, torch.float32]
)
@pytest.mark.parametrize("device", DEVICES)
def test_dropout_backward_has_eagers_dtype(device, dtype, caplog):
    if device == "cuda" and not dtype.is_floating_point:
        pytest.skip("eager's CUDA kernel (masked_scale) takes floating gradients only")
    def f(g, mask):
        return aten.native_dropout_backward(g, mask, 1.25)

    g = (torch.arange(7, device=device) % 3).to(dtype)
    mask = torch.arange(7, device=device) % 2 == 0
    with caplog.at_level(logging.WARNING, logger="minductor.decompositions"):
        kernels, fallbacks = run(f, g, mask)  # compares dtype and values with eager
    assert DISAGREES not in caplog.text  # the decomposition itself is right
    assert kernels and fallbacks == []


# --- a planted wrong decomposition ----------------------------------------------------


def _fake_trace(fn, table, *args):
    return make_fx(fn, tracing_mode="fake", decomposition_table=table)(*args)


def _targets(gm):
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize(
    "wrong, why",
    [
        (lambda x: torch.sin(x.double()), "torch.float64, the op returns torch.float32"),
        (lambda x: torch.sin(x)[:2], "size [2, 3], the op returns [4, 3]"),
        (lambda x: (torch.sin(x), x), "2 tensors, the op returns 1"),
    ],
    ids=["dtype", "size", "count"],
)
def test_a_wrong_decomposition_is_caught_and_the_op_kept(table_with, caplog, wrong, why):
    table = table_with(aten.sinh.default, wrong)
    with caplog.at_level(logging.WARNING, logger="minductor.decompositions"):
        gm = _fake_trace(lambda x: torch.sinh(x) + 1, table, torch.randn(4, 3))
    assert f"aten.sinh.default decomposed to {why}: {DISAGREES}" in caplog.text
    assert aten.sinh.default in _targets(gm)


def test_a_right_decomposition_passes_silently(table_with, caplog):
    table = table_with(aten.sinh.default, lambda x: (x.exp() - (-x).exp()) / 2)
    with caplog.at_level(logging.WARNING, logger="minductor.decompositions"):
        gm = _fake_trace(lambda x: torch.sinh(x), table, torch.randn(4, 3))
    assert caplog.text == "" and aten.sinh.default not in _targets(gm)


def test_only_fake_tracing_of_functional_ops_is_checked(table_with, caplog):
    wrong = lambda x: torch.sin(x.double())  # noqa: E731
    table = table_with(aten.sinh.default, wrong)
    with caplog.at_level(logging.WARNING, logger="minductor.decompositions"):
        make_fx(torch.sinh, decomposition_table=table)(torch.randn(3))  # real tensors
    assert caplog.text == ""  # running the op would compute for real
    checked = D.held_to_meta(aten.sin_.default, lambda x: x.double())
    assert checked(torch.randn(2)).dtype == torch.float64  # a mutating op: left alone


@pytest.mark.skipif(not INTERPRET, reason="CPU kernels need the interpreter")
def test_a_kept_op_gives_eagers_answer(table_with, monkeypatch):
    table = table_with(aten.sinh.default, lambda x: torch.sin(x.double()))
    monkeypatch.setattr("minductor.capture.decomposition_table", lambda: table)
    x = torch.randn(5)
    run(lambda x: torch.sinh(x) * 2, x)  # compares with eager


# --- the sweep over PyTorch's OpInfo samples ------------------------------------------

FORWARD_DTYPES = (torch.float32, torch.float16, torch.int64, torch.bool)
BACKWARD_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _ours(op) -> bool:
    """An OpInfo named like one of our own decompositions (softmax, hardswish, ...)."""
    names = {o._schema.name.split("::")[1].lstrip("_") for o in D.decompositions}
    return op.name.split(".")[-1].lstrip("_") in names or op.aten_name in names


def _traces(op, dtype, backward):
    """(function, inputs) to trace for two samples of op in dtype."""
    samples = op.sample_inputs("cpu", dtype, requires_grad=backward)
    for s in itertools.islice(samples, 2):
        def call(*xs, s=s):
            out = op.op(*xs, **s.kwargs)
            if not backward:
                return out
            outs = [o for o in torch.utils._pytree.tree_leaves(out)
                    if isinstance(o, torch.Tensor) and o.requires_grad]
            wants = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
            if not outs or not wants:
                return out
            total = sum((o.float() * 0.5).sum() for o in outs)
            return torch.autograd.grad(total, wants, allow_unused=True)

        yield call, (s.input, *s.args)


def _sweep(ops, forward=FORWARD_DTYPES, backward=BACKWARD_DTYPES) -> list[str]:
    """Every (op, dtype, message) where a decomposition disagreed with its op."""
    table = D.decomposition_table()
    found = []

    class Collect(logging.Handler):
        def emit(self, record):
            found.append(f"{current}: {record.getMessage()}")

    handler = Collect()
    logger = logging.getLogger("minductor.decompositions")
    logger.addHandler(handler)
    try:
        for op in ops:
            for grad, dtypes in ((False, forward), (True, backward)):
                if grad and not op.supports_autograd:
                    continue
                for dtype in dtypes:
                    if dtype not in op.supported_dtypes("cpu"):
                        continue
                    current = f"{op.name} {dtype}{' backward' if grad else ''}"
                    try:
                        for fn, args in _traces(op, dtype, grad):
                            _fake_trace(fn, table, *args)
                    except Exception:  # noqa: S112  (eager or fake mode refused it)
                        continue
    finally:
        logger.removeHandler(handler)
    return found


def test_opinfo_samples_of_our_decompositions_agree_with_their_ops():
    """Every forward dtype, and the backward in bfloat16 (where a decomposition's
    rounding most often departs from its op's); the other backwards are slow."""
    ops = [op for op in sweep.load_op_db() if _ours(op)]
    assert len(ops) >= 20  # the subset is not empty by accident
    assert _sweep(ops, backward=(torch.bfloat16,)) == []


@pytest.mark.slow
def test_opinfo_backwards_of_our_decompositions_in_float32_and_float16():
    ops = [op for op in sweep.load_op_db() if _ours(op)]
    assert _sweep(ops, forward=(), backward=(torch.float32, torch.float16)) == []


@pytest.mark.opinfo_slow
@pytest.mark.skipif(
    os.environ.get("MINDUCTOR_OPINFO_FULL") != "1",
    reason="the whole OpInfo sweep runs with MINDUCTOR_OPINFO_FULL=1",
)
def test_opinfo_samples_of_every_op_agree_with_their_ops():
    assert _sweep(sweep.load_op_db()) == []


# --- ops whose meta function misleads -------------------------------------------------


def _batch_norm_witness():
    """eager's and the meta function's dtypes for a bfloat16 training batch norm."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    bf16 = torch.bfloat16
    args = [torch.randn(2, 3, 4, 4, dtype=bf16), torch.ones(3, dtype=bf16)]
    args += [torch.zeros(3, dtype=bf16), torch.zeros(3, dtype=bf16)]
    args += [torch.ones(3, dtype=bf16)]
    op = aten._native_batch_norm_legit_functional.default
    eager = [t.dtype for t in op(*args, True, 0.1, 1e-5)]
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) for a in args]
        meta = [t.dtype for t in op(*fake, True, 0.1, 1e-5)]
    return eager, meta


WITNESSES = {aten._native_batch_norm_legit_functional.default: _batch_norm_witness}


def test_every_misleading_meta_still_misleads():
    # the list shrinks when PyTorch fixes a meta function: this test then fails
    assert set(D.MISLEADING_META) == set(WITNESSES)
    for op, witness in WITNESSES.items():
        eager, meta = witness()
        assert eager != meta, f"{op}'s meta now agrees with eager: unlist it"
    table = D.decomposition_table()
    for op in D.MISLEADING_META:
        assert not hasattr(table[op], "__wrapped__")  # not held to the meta
