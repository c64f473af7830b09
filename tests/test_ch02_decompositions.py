"""Chapter 2: the decomposition table.

Each of our decompositions is called directly on real tensors (including edge
values) and compared with the ATen operator it replaces; tracing with the table
must remove the operator from the graph.
"""

from operator import getitem

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.decompositions import (
    BORROWED,
    decomposition_table,
    decompositions,
    register_decomposition,
)

pytestmark = pytest.mark.ch02

aten = torch.ops.aten
inf, nan = float("inf"), float("nan")

EDGES = torch.tensor(
    [
        -inf,
        -100.0,
        -20.0,
        -6.0,
        -3.0,
        -1.0,
        -0.5,
        -1e-8,
        -0.0,
        0.0,
        1e-8,
        0.5,
        1.0,
        2.9999998,
        3.0,
        6.0,
        20.0,
        100.0,
        inf,
        nan,
    ]
)


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3


def mixed():
    """Random values followed by the edge values."""
    return torch.cat([rand(30), EDGES])


def _stats(x, normalized_shape):
    """layer_norm's saved mean and rstd, as eager returns them."""
    return tuple(aten.native_layer_norm(x, normalized_shape, None, None, 1e-5)[1:])


NLL_T = torch.tensor([2, -100, 0, 5])  # one ignored row

def _weight_norm_grad_args(shape, dim):
    """(grad_w, v, g, norms, dim) as autograd passes them to weight norm's gradient."""
    keep = [n if d == dim % len(shape) else 1 for d, n in enumerate(shape)]
    v, g = rand(*shape), rand(*keep, seed=1)
    norms = aten._weight_norm_interface(v, g, dim)[1]
    return rand(*shape, seed=2), v, g, norms, dim


# overload -> list of (args, kwargs) to call it with
def _stats_of(channels):
    """weight, bias, running mean and (positive) running variance of a batch norm."""
    var = 1 + rand(channels, seed=3).abs()
    return rand(channels), rand(channels, seed=1), rand(channels, seed=2), var


HOLES = torch.tensor([nan, 1.0, nan, -2.0, -0.0, 0.0, inf, nan])  # NaNs to skip over

CASES = {
    aten.addcmul.default: [
        ((rand(4, 5), rand(4, 5, seed=1), rand(5, seed=2)), {}),
        ((rand(4, 5), rand(4, 5, seed=1), rand(4, 5, seed=2)), {"value": 0.5}),
        ((rand(3).int(), rand(3, seed=1).int(), rand(3, seed=2).int()), {"value": 3}),
    ],
    aten.addcdiv.default: [
        ((rand(4, 5), rand(4, 5, seed=1), rand(4, 5, seed=2) + 10), {}),
        (
            (rand(6), rand(6, seed=1), torch.tensor([0.0, -0.0, 1.0, inf, 2.0, 3.0])),
            {"value": -2.5},
        ),
    ],
    aten.lerp.Scalar: [
        ((rand(7), rand(7, seed=1), 0.3), {}),
        ((rand(7), rand(7, seed=1), 0.0), {}),
        ((rand(2, 3), rand(3, seed=1), -1.5), {}),
    ],
    aten.lerp.Tensor: [
        ((rand(7), rand(7, seed=1), torch.rand(7)), {}),
        ((rand(2, 3), rand(3, seed=1), torch.rand(2, 1)), {}),
    ],
    aten.hardtanh.default: [((mixed(),), {}), ((mixed(), -2.0, 0.5), {})],
    aten.hardsigmoid.default: [((mixed(),), {})],
    aten.hardswish.default: [((mixed()[1:],), {})],  # -inf: see the xfail below
    aten.leaky_relu.default: [
        ((mixed(),), {}),
        ((mixed(), 0.2), {}),
        ((mixed(), -1.5), {}),
    ],
    aten.rsub.Tensor: [
        ((rand(4), rand(4, seed=1)), {}),
        ((rand(4), rand(4, seed=1)), {"alpha": 2.5}),
        ((rand(4).int(), rand(4, seed=1).int()), {"alpha": 3}),
    ],
    aten.rsub.Scalar: [],  # see test_rsub_scalar_decomposes
    # random: only the cases that draw nothing compare with eager; the rest are
    # checked statistically in tests/test_ch08_random.py
    aten.native_dropout.default: [
        ((rand(4, 5), 0.0, True), {}),
        ((rand(4, 5), 0.3, False), {}),
        ((rand(4, 5), 1.0, True), {}),
    ],
    aten.native_dropout_backward.default: [
        ((rand(4, 5), rand(4, 5, seed=1) > 0, 1 / 0.7), {}),
        ((rand(4, 5).half(), rand(4, 5, seed=1) > 0, 1 / 0.7), {}),
        ((rand(4, 5).double(), rand(4, 5, seed=1) > 0, 1 / 0.3), {}),
    ],
    aten.bernoulli.default: [],
    aten.bernoulli.p: [],
    aten.bernoulli.Tensor: [],
    aten.rand_like.default: [],
    aten.rand_like.generator: [],
    aten.randn_like.default: [],
    aten.randn_like.generator: [],
    aten.full_like.default: [
        ((rand(2, 3), 7.5), {}),
        ((rand(2, 3).int(), 2.9), {}),
        ((rand(2, 3), 1), {"dtype": torch.float64}),
        ((rand(4), inf), {"dtype": torch.float16}),
        ((rand(2, 0), 1.0), {}),
    ],
    aten.zeros_like.default: [
        ((rand(2, 3),), {}),
        ((rand(5),), {"dtype": torch.int32}),
    ],
    aten.ones_like.default: [((rand(2, 3),), {}), ((rand(5),), {"dtype": torch.bool})],
    aten.softplus.default: [
        ((mixed(),), {}),
        ((mixed(), 2, 5), {}),  # beta * x > threshold: x itself
        ((mixed(), 0.5, 1), {}),
        ((torch.tensor([9.99, 10.0, 10.01, 1e4, -1e4]), 2, 20), {}),
    ],
    aten._softmax.default: [
        ((rand(7, 5), 1, False), {}),
        ((rand(7, 5), 0, False), {}),
        ((torch.tensor([[-inf, -inf], [1.0, -inf]]), 1, False), {}),
    ],
    aten._log_softmax.default: [
        ((rand(7, 5), 1, False), {}),
        ((rand(3, 4, 5), 0, False), {}),
    ],  # float16 is checked end to end, with float16 tolerances (test_ch18_reductions_values.py)
    aten._softmax_backward_data.default: [
        ((rand(7, 5), torch.softmax(rand(7, 5, seed=1), 1), 1, torch.float32), {}),
        ((rand(7, 5), torch.softmax(rand(7, 5, seed=1), 0), 0, torch.float32), {}),
    ],
    aten._log_softmax_backward_data.default: [
        ((rand(7, 5), torch.log_softmax(rand(7, 5, seed=1), 1), 1, torch.float32), {}),
        ((rand(3, 4, 5), torch.log_softmax(rand(3, 4, 5), 0), 0, torch.float32), {}),
    ],  # half precision and the input_dtype rule: end to end (test_ch10_norms.py)
    aten.native_layer_norm.default: [
        ((rand(7, 5), [5], rand(5, seed=1), rand(5, seed=2), 1e-5), {}),
        ((rand(3, 4, 5), [4, 5], None, None, 1e-5), {}),
        ((rand(6, 9).half(), [9], None, None, 1e-5), {}),  # CPU: float16 statistics
        ((rand(6, 9).half(), [9], rand(9), None, 1e-5), {}),  # mixed: float32 ones
    ],
    aten.native_layer_norm_backward.default: [
        (
            (rand(7, 5), rand(7, 5, seed=1), [5])
            + _stats(rand(7, 5, seed=1), [5])
            + (rand(5, seed=2), rand(5, seed=3), [True, True, True]),
            {},
        ),
        (
            (rand(3, 4, 5), rand(3, 4, 5, seed=1), [4, 5])
            + _stats(rand(3, 4, 5, seed=1), [4, 5])
            + (None, None, [True, False, False]),
            {},
        ),
        (
            (rand(5), rand(5, seed=1), [5])
            + _stats(rand(5, seed=1), [5])
            + (rand(5, seed=2), rand(5, seed=3), [False, True, True]),
            {},
        ),  # no leading dims: the parameters' gradients are not sums
    ],
    aten.logsumexp.default: [
        ((rand(7, 5), [1]), {}),
        ((rand(3, 4, 5), [0, 2], True), {}),
        ((torch.tensor([[-inf, -inf], [inf, 1.0], [nan, 1.0], [inf, -inf]]), [1]), {}),
        ((torch.tensor([[1e4, 1e4 + 1], [-1e4, -1e4 - 1]]), [1]), {}),
        ((rand(3, 4).int(), [1]), {}),
        ((rand(3, 0), [1]), {}),
    ],
    aten.mean.default: [
        ((rand(7, 5),), {}),
        ((rand(7, 5).half(),), {}),
        ((rand(3, 4).int(),), {"dtype": torch.float32}),
    ],
    # (grad, input, target, weight, reduction, ignore_index, total_weight)
    aten.nll_loss_backward.default: [
        ((rand(()), rand(4, 6), NLL_T, None, 1, -100, torch.tensor(3.0)), {}),
        ((rand(()), rand(4, 6), NLL_T, None, 2, -100, torch.tensor(4.0)), {}),
        ((rand(4), rand(4, 6), NLL_T, None, 0, -100, torch.tensor(4.0)), {}),
        ((rand(()), rand(4, 6), NLL_T.abs() % 6, None, 1, 2, torch.tensor(3.0)), {}),
        ((rand(()), rand(6), torch.tensor(2), None, 1, -100, torch.tensor(1.0)), {}),
        ((rand(()), rand(4, 6), NLL_T, rand(6), 1, -100, torch.tensor(2.5)), {}),
    ],
    aten.mean.dim: [
        ((rand(7, 5), [1]), {}),
        ((rand(7, 5), [0], True), {}),
        ((rand(2, 3, 4), [0, 2]), {}),
        ((rand(6, 9).half(), [1], True), {}),
        ((rand(2, 0), [1]), {}),  # empty: nan, as in eager
    ],
    aten.detach.default: [((rand(3, 4),), {}), ((rand(4, 3).t()[1:],), {})],
    aten.fmax.default: [
        ((HOLES, HOLES.flip(0)), {}),
        ((rand(3, 4), rand(4)), {}),  # broadcast
        ((rand(5).int(), rand(5)), {}),  # promoted to float
        ((torch.tensor([1, 5, -3]), torch.tensor([2, 2, 2])), {}),
    ],
    aten.fmin.default: [
        ((HOLES, HOLES.flip(0)), {}),
        ((rand(3, 4).half(), rand(3, 1).half()), {}),
    ],
    # halves to even, scaled; in float32 for float16, rounded once
    aten.round.decimals: [
        ((torch.tensor([0.125, 0.135, -2.5, 1234.5678, -0.0004, nan, inf]),), {"decimals": 2}),
        ((torch.tensor([1250.0, 1350.0, -149.9, 3e30]),), {"decimals": -2}),
        ((rand(6, 5).half() * 100,), {"decimals": 1}),
        ((rand(4) * 10,), {"decimals": 0}),
    ],
    aten._native_batch_norm_legit_no_training.default: [
        ((rand(2, 3, 4, 5), *_stats_of(3), 0.1, 1e-5), {}),
        ((rand(2, 3), None, None, *_stats_of(3)[2:], 0.1, 1e-3), {}),
        ((rand(2, 3, 4).bfloat16(), *_stats_of(3), 0.1, 1e-5), {}),
    ],
    aten.linalg_vector_norm.default: [
        ((rand(4, 5),), {}),
        ((rand(4, 5), 2, [1], True), {}),
        ((rand(2, 3, 4), 2.0, [0, 2]), {}),
        ((rand(6, 9).bfloat16(), 2, [-1]), {}),  # summed in float32
        ((rand(3, 4), 2, [1]), {"dtype": torch.float64}),
        ((torch.tensor([[3.0, 4.0], [0.0, 0.0], [inf, 1.0]]), 2, [1]), {}),
    ],
    # a direction v and a length g per output channel (dim 0), or per position of the
    # last dimension (dim 2: Wav2Vec2's positional convolution); bfloat16 keeps its
    # norms in float32
    aten._weight_norm_interface.default: [
        ((rand(4, 3, 5), rand(4, 1, 1, seed=1)), {}),
        ((rand(4, 3, 5), rand(1, 1, 5, seed=1), 2), {}),
        ((rand(6, 7).bfloat16(), rand(6, 1, seed=1).bfloat16()), {}),
    ],
    aten._weight_norm_interface_backward.default: [
        (_weight_norm_grad_args((4, 3, 5), 0), {}),
        (_weight_norm_grad_args((4, 3, 5), 2), {}),
        (_weight_norm_grad_args((5, 7), 1), {}),
    ],
}


def test_every_registration_has_cases():
    # this chapter's own; later chapters register more, and test them there
    registered = {
        op
        for op, fn in decompositions.items()
        if op._overloadname != "out" and fn.__module__ == "minductor.decompositions"
    }
    assert registered == set(CASES)
    assert all(op in decompositions for op in CASES)


@pytest.mark.parametrize("op", [op for op, cases in CASES.items() if cases], ids=str)
def test_decomposition_matches_eager(op):
    fn = decompositions[op]
    for args, kwargs in CASES[op]:
        expected = op(*args, **kwargs)
        got = fn(*args, **kwargs)
        if not isinstance(expected, tuple):  # layer_norm's ops return several
            expected, got = (expected,), (got,)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            if e is None:
                assert g is None
                continue
            assert g.dtype == e.dtype and g.shape == e.shape, (args, kwargs)
            torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_detach_becomes_a_view_with_the_same_strides():
    x = rand(4, 6).t()[1:]
    y = decompositions[aten.detach.default](x)
    assert y.stride() == x.stride() and y.data_ptr() == x.data_ptr()


def test_min_cut_saves_logits_not_the_float32_log_softmax():
    """With detach as alias, a loss over upcast bf16 logits saves the bf16 product and
    two floats per row for the backward; without, the float32 log-softmax."""
    import torch.nn.functional as F
    from functorch.compile import (
        aot_function,
        make_boxed_func,
        min_cut_rematerialization_partition,
    )

    from minductor.decompositions import decomposition_table

    def saved(table):
        found = []

        def backward_compiler(gm, _):
            found.extend(n.meta["val"] for n in gm.graph.find_nodes(op="placeholder"))
            return make_boxed_func(gm.forward)

        def loss(h, w, t):
            return F.cross_entropy((h @ w).float(), t)

        compiled = aot_function(
            loss,
            fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
            bw_compiler=backward_compiler,
            decompositions=table,
            partition_fn=min_cut_rematerialization_partition,
        )
        h = rand(16, 8).bfloat16()
        w = rand(8, 40).bfloat16().requires_grad_()
        compiled(h, w, torch.randint(40, (16,))).backward()
        return {(t.dtype, tuple(t.shape)) for t in found}

    table = decomposition_table()
    with_alias = saved(table)
    assert (torch.bfloat16, (16, 40)) in with_alias
    assert (torch.float32, (16, 40)) not in with_alias
    del table[aten.detach.default]
    assert (torch.float32, (16, 40)) in saved(table)  # the test can fail


def test_softplus_switches_to_x_above_the_threshold():
    x = torch.tensor([25.0, 50.0, 1e30, inf])
    torch.testing.assert_close(decompositions[aten.softplus.default](x), x)
    large = torch.tensor([89.0, 200.0])  # exp(x) overflows float32 here...
    assert torch.equal(decompositions[aten.softplus.default](large), large)  # ...unused
    got = decompositions[aten.softplus.default](large, 1, 1000)  # threshold too high
    assert torch.isinf(got).all()  # as in eager
    torch.testing.assert_close(got, aten.softplus.default(large, 1, 1000))


def test_softplus_is_accurate_for_very_negative_inputs():
    x = torch.tensor([-30.0, -50.0, -80.0])
    got = decompositions[aten.softplus.default](x)
    torch.testing.assert_close(got, torch.exp(x), rtol=1e-6, atol=0)  # log1p keeps it
    assert (got > 0).all()


def test_rsub_scalar_decomposes():
    x = rand(4)
    gm = make_fx(
        lambda x: (torch.rsub(x, 2.0, alpha=3),),
        decomposition_table=decomposition_table(),
    )(x)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert aten.rsub.Scalar not in targets
    torch.testing.assert_close(gm(x)[0], 2.0 - 3 * x)


def test_lerp_reaches_end_at_weight_one():
    start, end = torch.tensor([1e8, -3e7]), torch.tensor([1.0, 0.25])
    torch.testing.assert_close(decompositions[aten.lerp.Scalar](start, end, 1.0), end)


def test_hardswish_of_minus_infinity():
    # eager's CPU kernel is inconsistent at -inf: its vectorized loop computes
    # x * clamp(x + 3, 0, 6) / 6 = nan, its scalar tail gives -0.0 (a 2-element
    # tensor). We follow the vectorized formula, which is also what runs on CUDA.
    x = torch.tensor([-inf] + [-10.0] * 63)
    torch.testing.assert_close(
        decompositions[aten.hardswish.default](x),
        aten.hardswish.default(x),
        equal_nan=True,
    )
    assert torch.isnan(decompositions[aten.hardswish.default](x)[0])


def test_full_like_preserves_strides():
    x = rand(3, 4).t()
    for op, args in (
        (aten.full_like.default, (x, 1.0)),
        (aten.zeros_like.default, (x,)),
        (aten.ones_like.default, (x,)),
    ):
        assert decompositions[op](*args).stride() == op(*args).stride()


# --- the table ------------------------------------------------------------------------


def test_register_decomposition_covers_every_overload_of_a_packet():
    for name in aten.addcmul.overloads():
        assert (
            decompositions[getattr(aten.addcmul, name)]
            is decompositions[aten.addcmul.default]
        )
    assert aten.lerp.Scalar in decompositions and aten.lerp.Tensor in decompositions


def test_table_has_ours_and_the_borrowed_ones():
    table = decomposition_table()
    for op, fn in decompositions.items():
        checked = getattr(table[op], "__wrapped__", table[op])  # held_to_meta's
        assert checked is fn
    for borrowed in BORROWED:  # some have no .default (masked_fill.Scalar, .Tensor)
        if isinstance(borrowed, torch._ops.OpOverload):  # one overload of a packet
            assert borrowed in table, borrowed
        else:
            assert any(op.overloadpacket is borrowed for op in table), borrowed
    assert aten.sin.default not in table  # nothing beyond what we asked for


def test_ours_override_borrowed_ones():
    def my_elu(x, alpha=1, scale=1, input_scale=1):
        return x

    before = decomposition_table()[aten.elu.default].__wrapped__
    register_decomposition(aten.elu.default)(my_elu)
    try:
        assert decomposition_table()[aten.elu.default].__wrapped__ is my_elu
    finally:
        del decompositions[aten.elu.default]
    assert decomposition_table()[aten.elu.default].__wrapped__ is before


def test_the_kept_table_is_rebuilt_when_what_it_is_made_from_changes():
    # BORROWED, ours and MISLEADING_META each change the table at once
    from torch._decomp import get_decompositions

    import minductor.decompositions as d

    op = next(o for o in decomposition_table() if o.overloadpacket in BORROWED)
    packet = op.overloadpacket
    torchs = get_decompositions([packet])[op]
    assert decomposition_table()[op] is not torchs  # held to its meta
    d.MISLEADING_META[op] = "a test's entry"
    try:
        assert decomposition_table()[op] is torchs
    finally:
        del d.MISLEADING_META[op]
    assert decomposition_table()[op].__wrapped__ is torchs
    at = BORROWED.index(packet)
    BORROWED.remove(packet)
    try:
        assert op not in decomposition_table() or op in decompositions
    finally:
        BORROWED.insert(at, packet)
    assert op in decomposition_table()


def test_table_is_a_fresh_dict_each_time():
    first = decomposition_table()
    first[aten.sin.default] = None
    assert aten.sin.default not in decomposition_table()


# --- tracing with the table removes the op --------------------------------------------

F = torch.nn.functional
TRACED = {
    aten.addcmul.default: lambda x, a, b: torch.addcmul(x, a, b, value=0.5),
    aten.addcdiv.default: lambda x, a, b: torch.addcdiv(x, a, b, value=0.5),
    aten.lerp.Scalar: lambda x, a, b: torch.lerp(x, a, 0.3),
    aten.lerp.Tensor: lambda x, a, b: torch.lerp(x, a, b),
    aten.hardtanh.default: lambda x, a, b: F.hardtanh(x),
    aten.hardsigmoid.default: lambda x, a, b: F.hardsigmoid(x),
    aten.hardswish.default: lambda x, a, b: F.hardswish(x),
    aten.leaky_relu.default: lambda x, a, b: F.leaky_relu(x, 0.2),
    aten.rsub.Tensor: lambda x, a, b: torch.rsub(x, a, alpha=2),
    aten.full_like.default: lambda x, a, b: torch.full_like(x, 3.0),
    aten.zeros_like.default: lambda x, a, b: torch.zeros_like(x, dtype=torch.int32),
    aten.ones_like.default: lambda x, a, b: torch.ones_like(x),
    aten.softplus.default: lambda x, a, b: F.softplus(x, beta=2, threshold=5),
    aten._softmax_backward_data.default: lambda x, a, b: aten._softmax_backward_data(
        x, torch.softmax(a, 0), 0, torch.float32
    ),
    aten._log_softmax_backward_data.default: lambda x, a, b: (
        aten._log_softmax_backward_data(x, torch.log_softmax(a, 0), 0, torch.float32)
    ),
    aten.native_layer_norm.default: lambda x, a, b: F.layer_norm(x, [6], a, b),
    aten.native_layer_norm_backward.default: lambda x, a, b: (
        aten.native_layer_norm_backward(
            x, a, [6], *_stats(a, [6]), b, None, [True, True, False]
        )[:2]
    ),
    aten.logsumexp.default: lambda x, a, b: torch.logsumexp(x, 0),
    aten.linalg_vector_norm.default: lambda x, a, b: F.normalize(x, dim=0),
    aten.elu.default: lambda x, a, b: F.elu(x),  # borrowed
    aten.mish.default: lambda x, a, b: F.mish(x),  # borrowed
    aten._safe_softmax.default: lambda x, a, b: aten._safe_softmax(x, 0),  # borrowed
    aten.fill.Scalar: lambda x, a, b: aten.fill(x, 3.0),  # borrowed
    aten.fill.Tensor: lambda x, a, b: aten.fill(x, a[0]),  # borrowed
}


def _targets(fn, table, args):
    gm = make_fx(fn, decomposition_table=table)(*args)
    return gm, {n.target for n in gm.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("op", list(TRACED), ids=str)
def test_tracing_with_the_table_removes_the_op(op):
    fn = TRACED[op]
    args = [rand(6), rand(6, seed=1), torch.rand(6)]
    _, without = _targets(fn, {}, args)
    assert op in without  # the op is there to begin with...
    gm, with_table = _targets(fn, decomposition_table(), args)
    assert op not in with_table  # ...and gone after decomposing
    assert all(str(t).startswith("aten.") or t is getitem for t in with_table)
    torch.testing.assert_close(gm(*args), fn(*args), rtol=1e-6, atol=1e-6)
