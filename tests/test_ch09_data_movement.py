"""Ops that move data without arithmetic: cat and stack (written into slices of one
buffer), flip, roll and repeat (re-indexed reads), triu/tril, and factory functions."""

import re

import pytest
import torch
from helpers import DEVICES, INTERPRET, run

from minductor.capture import record_compiled

pytestmark = pytest.mark.ch09


def compiled(fn, *args):
    torch._dynamo.reset()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend="minductor")(*args)
    return out, graphs


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cat_read_only_by_pointwise_users_is_fused_into_them(device, dtype):
    """Rotary embeddings: the rotated half is a body its user inlines, not a buffer."""
    x = torch.randn(2, 3, 7, 10, device=device).to(dtype)
    cos, sin = (torch.randn(7, 10, device=device).to(dtype) for _ in range(2))
    out, graphs = compiled(rotary, x, cos, sin)
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out, rotary(x, cos, sin), atol=tolerance, rtol=tolerance)
    (graph,) = graphs
    assert len(graph.kernel_names) == 1 and "cat" in graph.kernel_names[0]
    assert len(re.findall(r"= empty_strided\w*\(", graph.source)) == 1  # the result


@pytest.mark.parametrize("device", DEVICES)
def test_pointwise_cat_of_mixed_dtypes_and_sizes_matches_eager(device):
    def fn(a, b, c):  # int, bool and float pieces of 1, 4 and 2 columns, then a sin
        return torch.cat([a, b, c], 1).sin()

    a = torch.randint(-5, 5, (3, 1), device=device)
    b = torch.rand(3, 4, device=device) > 0.5
    c = torch.randn(3, 2, device=device, dtype=torch.float64)
    out, graphs = compiled(fn, a, b, c)
    torch.testing.assert_close(out, fn(a, b, c))
    assert len(graphs[0].kernel_names) == 1


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_piece_with_nothing_along_the_dim_is_not_loaded(where):
    """cat([a, b, empty]) read by a pointwise user: one body, which loads every piece
    at a clamped index; an empty piece has none to clamp to, so it is left out. (Its
    load read outside any memory: the interpreter crashed on a split's gradient.)"""
    from torch.fx.experimental.proxy_tensor import make_fx

    from minductor.lowering import GraphLowering
    from minductor.scheduler import Scheduler
    from minductor.wrapper import WrapperCodeGen

    a, b, empty = torch.randn(2, 5), torch.randn(3, 5), torch.randn(0, 5)
    pieces = {"first": (empty, a, b), "middle": (a, empty, b), "last": (a, b, empty)}[where]
    fn = lambda x, y, z: torch.cat([x, y, z]) * 2  # noqa: E731
    gm = make_fx(fn)(*pieces)
    graph = GraphLowering(gm, list(pieces)).lower()
    source = WrapperCodeGen(graph, Scheduler(graph), interpret=True).generate()
    empty_name = ["x_1", "y_1", "z_1"][list(map(id, pieces)).index(id(empty))]
    launches = re.findall(r"launch_triton_\w+\(([^)]*)\)", source)
    assert len(launches) == 1 and empty_name not in launches[0].split(", ")
    torch.testing.assert_close(compiled(fn, *pieces)[0], fn(*pieces))


def test_the_gradient_of_a_split_with_an_empty_part_matches_eager():
    x = torch.randn(5, 5, 5, requires_grad=True)

    def fn(x):
        first, second, third = torch.split_with_sizes(x, [1, 4, 0])
        return first.sum() + (second * third.sum()).sum()

    out, _ = compiled(fn, x)
    (ours,) = torch.autograd.grad(out, x)
    (theirs,) = torch.autograd.grad(fn(x), x)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("device", DEVICES)
def test_a_cat_with_many_pieces_is_written_into_one_buffer(device):
    xs = [torch.randn(2, k + 1, device=device) for k in range(5)]

    def many(*xs):  # five pieces: copies into slices, then the sin reads the buffer
        return torch.cat(xs, 1).sin()

    def reduced(x, y):  # two pieces: the sum reads them where they are
        return torch.cat([x, y], 1).sum(1)

    out, graphs = compiled(many, *xs)
    torch.testing.assert_close(out, many(*xs))
    assert "cat([" in graphs[0].source  # the comment of a cat written in place
    out, graphs = compiled(reduced, xs[0], xs[1])
    torch.testing.assert_close(out, reduced(xs[0], xs[1]))
    assert "cat([" not in graphs[0].source and len(graphs[0].kernel_names) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_cat_of_two_pointwise_results_writes_one_buffer(device):
    x, y = torch.randn(4, 6, device=device), torch.randn(4, 5, device=device)
    out, graphs = compiled(lambda x, y: torch.cat([x + 1, y * 2], 1), x, y)
    torch.testing.assert_close(out, torch.cat([x + 1, y * 2], 1))
    (graph,) = graphs
    assert graph.fallbacks == []
    # two computed pieces: one allocation (the result), a strided window per piece
    assert len(re.findall(r"= empty_strided\w*\(", graph.source)) == 1
    assert graph.source.count("reinterpret_tensor(") == 2
    assert len(graph.kernel_names) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_a_stored_piece_and_one_computed_piece_are_one_kernel(device):
    x, y = torch.randn(4, 6, device=device), torch.randn(4, 5, device=device)
    out, graphs = compiled(lambda x, y: torch.cat([x, y * 2], 1), x, y)
    torch.testing.assert_close(out, torch.cat([x, y * 2], 1))
    (graph,) = graphs
    assert graph.source.count("reinterpret_tensor(") == 0
    assert len(graph.kernel_names) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_a_growing_cache_is_one_kernel_per_cat(device):
    """cat([past, new], 2) read by attention and returned: stored by one kernel."""
    past = torch.randn(1, 2, 5, 8, device=device)
    new = torch.randn(1, 2, 1, 8, device=device)
    q = torch.randn(1, 2, 1, 8, device=device)

    def step(q, past, new):
        k = torch.cat([past, new * 2], dim=2)
        return q @ k.transpose(-1, -2), k

    out, graphs = compiled(step, q, past, new)
    for got, want in zip(out, step(q, past, new)):
        torch.testing.assert_close(got, want)
    assert len(graphs[0].kernel_names) == 1


CAT_CASES = {
    "dim0": lambda a, b: torch.cat([a, b[:3]], 0) * 2,
    "negative_dim": lambda a, b: torch.cat([a.t(), b.t()], -1) + 1,
    "three_pieces": lambda a, b: torch.cat([a, b.exp(), a - b], 1).sum(1),
    "mixed_dtypes": lambda a, b: torch.cat([a, (b > 0).int()], 1),
    "empty_piece": lambda a, b: torch.cat([a[:, :0], b, a[:, 2:2]], 1) + 1,
    "legacy_empty": lambda a, b: torch.cat([a, a.new_zeros(0)], 0) + 1,
    "bool": lambda a, b: torch.cat([a > 0, b < 0], 0).logical_not(),
    "stack": lambda a, b: torch.stack([a, b * 2, a], 1) + 1,
    "stack_last": lambda a, b: torch.stack([a, b], -1).sum(-1),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CAT_CASES))
def test_cat_and_stack_match_eager(device, name):
    a = torch.randn(4, 6, device=device)
    b = torch.randn(7, 5, device=device).t()[:4, :6]  # non-contiguous, same shape
    kernels, fallbacks = run(CAT_CASES[name], a, b)
    assert fallbacks == []


MOVES = {
    "flip": lambda x: x.flip(0) + 1,
    "flip_two_negative": lambda x: x.flip(-1, -2) * 2,
    "roll": lambda x: x.roll(2, 1) + 1,
    "roll_negative_big": lambda x: x.roll(-13, 0) + 1,
    "roll_flat": lambda x: x.roll(5) + 1,
    "roll_two": lambda x: x.roll((1, -2), (0, 1)) + 1,
    "repeat": lambda x: x.repeat(2, 3) + 1,
    "repeat_new_dims": lambda x: x.repeat(2, 1, 1) + 1,
    "triu": lambda x: x.triu() + 1,
    "triu_offset": lambda x: x.triu(2) + x.triu(-1),
    "tril": lambda x: x.tril(1) * 2,
    "tril_batched": lambda x: x.unsqueeze(0).expand(3, 5, 7).tril(-2) + 1,
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(MOVES))
def test_moves_match_eager_in_one_kernel(device, name):
    x = torch.randn(7, 5, device=device).t()  # (5, 7), non-contiguous
    kernels, fallbacks = run(MOVES[name], x)
    assert (len(kernels), fallbacks) == (1, [])


@pytest.mark.parametrize("device", DEVICES)
def test_moves_of_int64_bool_and_empty(device):
    ints = torch.arange(30, device=device).reshape(5, 6)
    run(lambda a: a.flip(1).roll(1, 0).triu(1) * 3, ints)
    run(lambda b: b.flip(0).logical_not(), ints % 2 == 0)
    run(lambda e: e.flip(0).roll(2, 1) + 1, torch.randn(0, 4, device=device))
    run(lambda x: x.roll(3, 0) + 1, torch.randn(1, 4, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_factories(device):
    x = torch.randn(4, 6, device=device)

    def fn(x):
        made = (
            torch.zeros(4, 6, device=x.device)
            + torch.ones(6, device=x.device, dtype=torch.float64)
            + torch.full((4, 1), 2.5, device=x.device)
            + x.new_zeros(6)
            + x.new_ones(1, 6)
            + x.new_full((4, 6), -1.0)
        )
        return made + torch.zeros_like(x) + torch.ones_like(x) * torch.full_like(x, 3)

    kernels, fallbacks = run(fn, x)
    assert (len(kernels), fallbacks) == (1, [])
    run(lambda x: torch.ones_like(x, dtype=torch.int32) + x.new_zeros(6).long(), x)


EMPTIES = {  # memory that is written before it is read
    "empty": lambda x: torch.empty(4, 6, device=x.device).copy_(x * 2) + 1,
    "empty_strided": lambda x: torch.empty_strided(
        (6, 4), (1, 6), device=x.device
    ).copy_(x.t())
    * 3,
    "new_empty": lambda x: x.new_empty(2, 6).copy_(x[1:3]).exp(),
    "new_empty_strided": lambda x: x.new_empty_strided((3, 2), (1, 3)).copy_(
        x[:3, :2]
    )
    - x[0, 0],
    "int32": lambda x: torch.empty(4, 6, dtype=torch.int32, device=x.device).copy_(
        x * 10
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(EMPTIES))
def test_empty_tensors_that_are_written_are_not_fallbacks(device, name):
    x = torch.randn(4, 6, device=device)
    kernels, fallbacks = run(EMPTIES[name], x)
    assert fallbacks == []


RANGES = {
    "end_only": lambda x: torch.arange(7, device=x.device),
    "start_end": lambda x: torch.arange(-3, 9, device=x.device),
    "negative_step": lambda x: torch.arange(10, -4, -3, device=x.device),
    "float_step": lambda x: torch.arange(0.5, 3.0, 0.25, device=x.device),
    "float_end": lambda x: torch.arange(6.5, device=x.device),
    "int32": lambda x: torch.arange(2, 40, 3, dtype=torch.int32, device=x.device),
    "float16": lambda x: torch.arange(-5, 5, dtype=torch.float16, device=x.device),
    "float16_float_step": lambda x: torch.arange(
        0, 2, 0.125, dtype=torch.float16, device=x.device
    ),
    # an integer dtype with whole float bounds (relative positions, as Funnel makes)
    "long_float_bounds": lambda x: torch.arange(
        -32, 32, 1.0, dtype=torch.long, device=x.device
    ),
    "int32_float_bounds_down": lambda x: torch.arange(
        10.0, -3.0, -2.0, dtype=torch.int32, device=x.device
    ),
    "empty": lambda x: torch.arange(3, 3, device=x.device),
    "big_values": lambda x: torch.arange(0, 10**11, 10**10, device=x.device),
    "iota": lambda x: torch.ops.prims.iota(
        5, start=3, step=-2, dtype=torch.int32, device=x.device, requires_grad=False
    ),
    "linspace": lambda x: torch.linspace(0, 1, 7, device=x.device),
    "linspace_one": lambda x: torch.linspace(2.5, 9, 1, device=x.device),
    "linspace_descending": lambda x: torch.linspace(5, -5, 7, device=x.device),
    "linspace_even_float64": lambda x: torch.linspace(
        -1, 3, 10, dtype=torch.float64, device=x.device
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(RANGES))
def test_ranges_match_eager_in_dtype_and_value(device, name):
    x = torch.randn(3, device=device)
    kernels, fallbacks = run(RANGES[name], x)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_arange_fuses_into_its_reader(device):
    x = torch.randn(5, 13, device=device)

    def fn(x):
        steps = torch.arange(13, device=x.device)
        ramp = torch.linspace(1, 0, 5, device=x.device)[:, None]
        return x * steps + ramp - torch.arange(0.5, 5.5, 1.0, device=x.device)[:, None]

    kernels, fallbacks = run(fn, x)
    assert (len(kernels), fallbacks) == (1, [])


def test_arange_reads_no_buffer():
    if not INTERPRET:
        pytest.skip("CPU kernels need the interpreter")
    out, (graph,) = compiled(lambda: torch.arange(2, 40, 3) * 2)
    torch.testing.assert_close(out, torch.arange(2, 40, 3) * 2)
    assert (len(graph.kernel_names), graph.fallbacks) == (1, [])
    assert "tl.load" not in graph.source and "in_ptr" not in graph.source


@pytest.mark.parametrize("device", DEVICES)
def test_ranges_of_what_we_decline_still_match_eager(device):
    # float bounds with an integer dtype, and an integer linspace: ATen's own rules
    x = torch.randn(3, device=device)
    for fn in (
        lambda x: torch.arange(0.5, 7.9, 1.5, dtype=torch.int32, device=x.device),
        lambda x: torch.linspace(0, 10, 4, dtype=torch.int64, device=x.device),
    ):
        _, fallbacks = run(fn, x)
        assert len(fallbacks) == 1


def test_flip_reads_its_input_backwards():
    if not INTERPRET:
        pytest.skip("CPU kernels need the interpreter")
    x = torch.randn(8)
    out, (graph,) = compiled(lambda x: x.flip(0) + 1, x)
    torch.testing.assert_close(out, x.flip(0) + 1)
    assert "tl.load(in_ptr0 + (7 - x0)" in graph.source


F = torch.nn.functional


def _assign_slice(x, y):
    x = x.clone()
    x[1:3, ::2] = y[:2, :3] * 2  # functionalized into copy + slice_scatter
    return x


def _assign_row(x, y):
    x = x.clone()
    x[-1] = y[0].int()  # a copy converts to the destination's dtype
    return x


SCATTERS = {
    "pad": lambda x, y: F.pad(x, (1, 2, 0, 1)) + 1,
    "pad_crop_and_value": lambda x, y: F.pad(x, (-1, 2, 3, -2), value=2.5) * 2,
    "pad_three_dims": lambda x, y: F.pad(x[None], (1, 1, 2, 0, 1, 1)) - 1,
    "slice_scatter_step": lambda x, y: torch.slice_scatter(x, y[:, :2], 1, 1, 5, 2),
    "slice_scatter_negative": lambda x, y: torch.slice_scatter(x, y[:2], 0, -3, -1),
    "slice_scatter_empty": lambda x, y: torch.slice_scatter(x, y[:0], 0, 2, 2) + 1,
    "select_scatter": lambda x, y: torch.select_scatter(x, y[0], 0, -1) + 1,
    "select_scatter_dim1": lambda x, y: torch.select_scatter(x, y[:, 1], 1, 2) * 2,
    "assign_slice": _assign_slice,
    "assign_row": _assign_row,
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_pad_and_slice_scatters_in_one_kernel(device, name):
    x = torch.randn(6, 4, device=device).t()  # (4, 6), non-contiguous
    y = torch.randn(4, 6, device=device)
    kernels, fallbacks = run(SCATTERS[name], x, y)
    assert (len(kernels), fallbacks) == (1, [])


@pytest.mark.parametrize("device", DEVICES)
def test_pad_of_ints_bools_and_empty(device):
    ints = torch.arange(12, device=device).reshape(3, 4)
    run(lambda a: F.pad(a, (2, 1), value=-7) * 2, ints)
    run(lambda b: F.pad(b, (1, 1)).logical_not(), ints > 5)
    run(lambda e: F.pad(e, (2, 2), value=1.5) + 1, torch.randn(3, 0, device=device))


def test_padding_never_reads_outside_its_input():
    if not INTERPRET:
        pytest.skip("CPU kernels need the interpreter")
    x = torch.randn(5)
    out, (graph,) = compiled(lambda x: F.pad(x, (3, 4)) + 1, x)
    torch.testing.assert_close(out, F.pad(x, (3, 4)) + 1)
    # the load's index is clamped into [0, 4]: a Min/Max printed for Triton
    load = next(line for line in graph.source.splitlines() if "tl.load" in line)
    assert ">=" in load and "4" in load, load


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", [0, 1, -2, 5])
def test_diagonal_scatter(device, offset):
    x = torch.randn(4, 5, 3, device=device)
    src = torch.randn_like(torch.diagonal(x, offset, 0, 1))
    kernels, fallbacks = run(lambda x, s: torch.diagonal_scatter(x, s, offset), x, src)
    assert fallbacks == []
    src2 = torch.randn_like(torch.diagonal(x, offset, 2, 0))
    run(lambda x, s: torch.diagonal_scatter(x, s, offset, 2, 0), x, src2)


@pytest.mark.parametrize("device", DEVICES)
def test_a_computed_piece_read_elsewhere_too_is_written_into_its_slot(device):
    x, y = torch.randn(4, 6, device=device), torch.randn(4, 5, device=device)

    def f(x, y):
        z = y * 2  # read by the cat and by the sine: a body in one kernel would not do
        return torch.cat([x, z], 1).sum(1), z.sin()

    out, graphs = compiled(f, x, y)
    for got, want in zip(out, f(x, y)):
        torch.testing.assert_close(got, want)
    assert "cat([" in graphs[0].source  # the pieces written into slots
