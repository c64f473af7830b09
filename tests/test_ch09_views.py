"""Views as re-indexing: view ops lower to layouts and index maps, never to copies.

Every op is compared with eager on awkward inputs (transposed, sliced with steps, size-1
and size-0 dims, int64 and bool); structure is pinned too: a view of an input is no kernel
at all, a view feeding a pointwise op is read in place by that op's one kernel.
"""

import re

import pytest
import torch
from helpers import DEVICES, INTERPRET, run
from hypothesis import given, settings
from hypothesis import strategies as st

from minductor.capture import record_compiled
from minductor.sizevars import contiguous_strides, flat_index
from minductor.views import reshape_reindex, view_strides

pytestmark = pytest.mark.ch09

FAST = settings(max_examples=40, deadline=None)


def inputs(device):
    """A contiguous, a transposed and a step-sliced input of the same shape (4, 6)."""
    base = torch.randn(6, 4, device=device)
    wide = torch.randn(4, 13, device=device)
    return {
        "contiguous": torch.randn(4, 6, device=device),
        "transposed": base.t(),
        "stepped": wide[:, 1::2],
    }


VIEW_OPS = {
    "t": lambda x: x.t() * 2,
    "permute": lambda x: x.unsqueeze(0).permute(2, 0, 1) + 1,
    "transpose_neg": lambda x: x.transpose(-1, -2) - 1,
    "unsqueeze_end": lambda x: x.unsqueeze(-1) * 3,
    "squeeze_dim": lambda x: x[:, None, :, None].squeeze(1) + 1,
    "squeeze_all": lambda x: x[None, :, None].squeeze() + 1,
    "expand": lambda x: x[:, None, :].expand(4, 3, 6) * 2,
    "slice_step": lambda x: x[1:, ::3] + 1,
    "slice_negative": lambda x: x[-3:-1, -5:] + 1,
    "slice_past_end": lambda x: x[2:100, 7:] + 1,
    "select_negative": lambda x: x[-1, :4] + x[:, -2],
    "narrow": lambda x: x.narrow(1, 2, 3) * 2,
    "diagonal": lambda x: x.diagonal() + 1,
    "diagonal_offset": lambda x: x.diagonal(2) + x.diagonal(-1)[:2].sum(),
    "unfold": lambda x: x.unfold(1, 3, 2) + 1,
    "view_merge": lambda x: x.reshape(24) * 2,
    "view_split": lambda x: x.reshape(2, 2, 3, 2) + 1,
    "flatten": lambda x: (x + 1).flatten() * 2,
    "movedim": lambda x: x.unsqueeze(0).movedim(0, -1) + 1,
    "split": lambda x: tuple(p + 1 for p in x.split(4, dim=1)),
    "chunk": lambda x: tuple(p * 2 for p in x.chunk(3, dim=0)),
    "unbind": lambda x: tuple(p + k for k, p in enumerate(x.unbind(1))),
    "view_of_computed": lambda x: (x.exp() + 1).reshape(3, 8).t() * 2,
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "stepped"])
@pytest.mark.parametrize("name", sorted(VIEW_OPS))
def test_view_ops_match_eager_without_fallbacks(device, layout, name):
    x = inputs(device)[layout]
    kernels, fallbacks = run(VIEW_OPS[name], x)
    assert fallbacks == []
    assert kernels  # each case ends in arithmetic: at least one kernel


@pytest.mark.parametrize("device", DEVICES)
def test_views_of_int64_and_bool_and_empty(device):
    ints = torch.arange(24, device=device).reshape(4, 6)
    flags = ints % 3 == 0
    run(lambda a: a.t()[1:, ::2] * 2, ints)
    run(lambda a: a.t().reshape(24)[::5] + 1, ints)
    run(lambda b: b.t()[::2].logical_not(), flags)
    empty = torch.randn(0, 5, device=device)
    run(lambda e: e.t().unsqueeze(0) + 1, empty)
    run(lambda e: e.reshape(5, 0) * 2, empty)
    run(lambda x: x[:, 3:3] + 1, torch.randn(4, 6, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_transpose_plus_add_is_one_kernel_reading_in_place(device):
    x, y = torch.randn(6, 5, device=device), torch.randn(5, 6, device=device)
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(lambda x, y: x.t() + y, backend="minductor")(x, y)
    torch.testing.assert_close(out, x.t() + y)
    (graph,) = graphs
    assert graph.fallbacks == [] and len(graph.kernel_names) == 1
    # the transposed input is read with its strides: no copy, no intermediate buffer
    assert len(re.findall(r"= empty_strided\w*\(", graph.source)) == 1
    loads = [line for line in graph.source.splitlines() if "tl.load(in_ptr" in line]
    assert any("5*" in line for line in loads), loads


@pytest.mark.parametrize("device", DEVICES)
def test_reshape_of_a_transpose_fuses_its_copy(device):
    x = torch.randn(4, 6, device=device)
    kernels, fallbacks = run(lambda x: x.t().reshape(24) * 2, x)
    assert (len(kernels), fallbacks) == (1, [])


@pytest.mark.parametrize("device", DEVICES)
def test_view_of_input_is_an_alias_without_a_kernel(device):
    x = torch.randn(4, 6, device=device)
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(lambda x: x.t()[1:], backend="minductor")(x)
    assert [g.kernel_names for g in graphs] in ([], [[]])
    assert all(g.fallbacks == [] for g in graphs)
    torch.testing.assert_close(out, x.t()[1:])
    # eager's aliasing: the output shares the input's memory
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    out.mul_(0)
    assert (x[:, 1:] == 0).all() and (x[:, 0] != 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_view_of_a_computed_output_aliases_it(device):
    x = torch.randn(4, 6, device=device)
    torch._dynamo.reset()

    def fn(x):
        y = x + 1
        return y, y.t()[::2]

    with record_compiled() as graphs:
        a, b = torch.compile(fn, backend="minductor")(x)
    torch.testing.assert_close(a, x + 1)
    torch.testing.assert_close(b, (x + 1).t()[::2])
    assert sum(len(g.kernel_names) for g in graphs) == 1
    assert b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()


@pytest.mark.parametrize("device", DEVICES)
def test_as_strided_of_an_input(device):
    x = torch.randn(30, device=device)[3:]
    run(lambda x: x.as_strided((3, 4), (2, 5), 4) + 1, x)
    run(lambda x: x.as_strided((2, 2), (1, 2)) * 2, x)


AS_STRIDED_OF_COMPUTED = {  # x -> the value as_strided reads, eager's storage order
    # contiguous: the storage is the value
    "contiguous": lambda x: (x + 1).view(6, 4, 8),
    # transposed (Longformer's chunks): the storage is the value in another order
    "transposed": lambda x: (x + 1).transpose(0, 1),
    "permuted 3-d": lambda x: (x * 2).permute(2, 0, 1),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(AS_STRIDED_OF_COMPUTED))
def test_as_strided_of_a_computed_value_reads_eagers_storage(case, device):
    x = torch.randn(4, 6, 8, device=device)
    value = AS_STRIDED_OF_COMPUTED[case]
    # overlapping windows: 5 chunks of 2 rows of 8, each starting 16 elements on
    fn = lambda x: value(x).as_strided((5, 2, 8), (16, 48, 1)) * 3  # noqa: E731
    _, fallbacks = run(fn, x, atol=0, rtol=0)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_as_strided_of_a_value_in_a_larger_storage_runs_the_graph_with_aten(device):
    # eager's storage holds the row before the slice too: ours cannot be the same
    x = torch.randn(4, 6, device=device)
    fn = lambda x: (x + 1)[1:].as_strided((2, 3), (1, 2)) * 2  # noqa: E731
    torch._dynamo.reset()
    with record_compiled() as graphs:
        torch.testing.assert_close(torch.compile(fn, backend="minductor")(x), fn(x))
    assert graphs == []


@pytest.mark.parametrize("device", DEVICES)
def test_unaligned_input_gives_the_right_answer(device):
    base = torch.randn(4097, device=device)
    run(lambda t: t * 2 + 1, base[1:])  # data_ptr is 4 bytes past an aligned one
    run(lambda t: t.sum(), base[3:])


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_update_of_an_unaligned_input_reaches_the_base(device):
    def f(t):
        t.mul_(2)
        return t + 1

    base = torch.randn(4097, device=device)
    ours, theirs = base.clone(), base.clone()
    torch._dynamo.reset()
    out = torch.compile(f, backend="minductor")(ours[1:])  # 4 bytes past alignment
    expected = f(theirs[1:])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)  # ours[0] untouched too


# --- the two pieces of reshape, checked against torch without compiling -------------


@st.composite
def strided_tensors(draw):
    """A tensor viewed as transposes and slices of a contiguous one."""
    ndim = draw(st.integers(1, 4))
    size = [draw(st.integers(1, 4)) for _ in range(ndim)]
    numel = int(torch.tensor(size).prod())
    if draw(st.booleans()):  # rows padded to four times their length, then sliced
        t = torch.arange(numel * 4).reshape(*size[:-1], -1)[..., : size[-1]]
    else:
        t = torch.arange(numel).reshape(size)
    if draw(st.booleans()) and ndim > 1:
        perm = draw(st.permutations(range(ndim)))
        t = t.permute(*perm)
    return t


@st.composite
def reshapes(draw):
    t = draw(strided_tensors())
    numel = t.numel()
    factors = [1]
    n = numel
    for p in (2, 3, 5, 7):
        while n % p == 0:
            factors.append(p)
            n //= p
    factors.append(n)
    draw(st.randoms()).shuffle(factors)
    cut = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    shape, start = [], 0
    for c in cut + [len(factors)]:
        shape.append(int(torch.tensor(factors[start:c] or [1]).prod()))
        start = c
    return t, shape


@FAST
@given(case=reshapes())
def test_view_strides_agree_with_torch(case):
    t, shape = case
    ours = view_strides(list(t.shape), list(t.stride()), shape)
    try:
        theirs = t.view(shape)
    except RuntimeError:
        assert ours is None
        return
    assert ours is not None
    # same elements in the same order (strides of size-1 dims may differ)
    ours_t = t.as_strided(shape, [int(s) for s in ours], t.storage_offset())
    assert torch.equal(ours_t, theirs)


@FAST
@given(case=reshapes())
def test_reshape_reindex_reads_the_same_elements_as_torch(case):
    t, shape = case
    t = t.contiguous()
    reindex = reshape_reindex(list(t.shape), shape)
    expected = t.reshape(shape)
    flat = t.reshape(-1)
    strides = contiguous_strides(list(t.shape))
    for position in range(expected.numel()):
        index = []
        for s in reversed(shape):
            index.insert(0, position % s)
            position //= s
        old = reindex(index)
        assert flat[int(flat_index(old, strides))] == expected[tuple(index)]


def test_generated_code_for_a_stepped_slice():
    if not INTERPRET:
        pytest.skip("CPU kernels need the interpreter")
    x = torch.randn(4, 13)
    torch._dynamo.reset()
    with record_compiled() as graphs:
        torch.compile(lambda x: x[1:, 2::3] + 1, backend="minductor")(x)
    (graph,) = graphs
    # the slice is an offset (1 row of 13, plus 2) and a stride (3) in the load
    assert "3*x0 + 13*x1 + 15" in graph.source


AS_STRIDED_SCATTERS = {  # x's shape, the window (size, stride, offset), lowered?
    "the whole tensor": ((12,), ((2, 6), (6, 1), 0), True),
    "transposed window": ((4, 6), ((6, 4), (1, 6), 0), True),
    "window at an offset": ((30,), ((2, 3, 4), (12, 4, 1), 5), True),
    "size-1 dims": ((2, 6), ((2, 1, 6, 1), (6, 6, 1, 1), 0), True),
    "gaps: every other element": ((10,), ((5,), (2,), 0), False),
    "overlapping rows": ((8,), ((3, 4), (2, 1), 0), False),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(AS_STRIDED_SCATTERS))
def test_as_strided_scatter_is_eagers(case, device):
    shape, (size, stride, offset), lowered = AS_STRIDED_SCATTERS[case]
    x = torch.randn(shape, device=device)
    src = torch.randn(size, device=device)
    fn = lambda x, src: torch.as_strided_scatter(x * 2, src + 1, size, stride, offset)  # noqa: E731
    _, fallbacks = run(fn, x, src, atol=0, rtol=0)
    assert fallbacks == ([] if lowered else ["aten.as_strided_scatter.default"])
