"""Chapter 21: loading generated modules, launching kernels, the runtime helpers."""

import dataclasses
import json
import logging
import os
import types
import uuid

import pytest
import torch
import triton
import triton.language as tl

from minductor import runtime
from minductor.config import config
from minductor.runtime import (
    CallSite,
    SizedSite,
    WarmUp,
    benchmark,
    empty_strided,
    int_class,
    interpret_mode,
    launch,
    load_module,
    module_path,
    number_on,
    rand_strided,
    restride,
)

pytestmark = pytest.mark.ch21

# real kernels run on CPU tensors in the interpreter, or on a GPU
DEVICE = "cpu" if interpret_mode() else "cuda"


def fresh_source(body="VALUE = 1"):
    """A module text no other test (or earlier run) has loaded in this process."""
    return f"# {uuid.uuid4().hex}\n{body}\n"


# --- load_module ----------------------------------------------------------------------


def test_load_module_writes_the_source_and_imports_it():
    source = fresh_source("VALUE = 41 + 1")
    module = load_module(source)
    assert module.VALUE == 42
    path = module_path(source)
    assert module.__file__ == str(path)
    assert path.read_text() == source
    assert path.parent == type(path)(config.cache_dir)


def test_same_source_gives_the_same_module_object():
    source = fresh_source("import random\nTOKEN = random.random()")
    first = load_module(source)
    second = load_module(source)
    assert first is second  # imported once: TOKEN is not re-drawn


def test_different_source_gives_a_different_file_and_module():
    a, b = fresh_source("VALUE = 'a'"), fresh_source("VALUE = 'b'")
    assert module_path(a) != module_path(b)
    ma, mb = load_module(a), load_module(b)
    assert ma is not mb and (ma.VALUE, mb.VALUE) == ("a", "b")
    assert ma.__file__ != mb.__file__


def test_module_path_is_a_content_hash():
    source = fresh_source()
    assert module_path(source) == module_path(str(source))
    assert module_path(source).suffix == ".py"
    assert module_path(source).stem.startswith("c")
    assert module_path(source + " ") != module_path(source)


def test_load_module_uses_the_configured_cache_dir(tmp_path):
    saved = config.cache_dir
    config.cache_dir = str(tmp_path / "cache")
    try:
        source = fresh_source("VALUE = 7")
        module = load_module(source)
    finally:
        config.cache_dir = saved
    assert os.path.dirname(module.__file__) == str(tmp_path / "cache")
    assert module.VALUE == 7
    assert not any(p.suffix.startswith(".tmp") for p in (tmp_path / "cache").iterdir())


def test_loaded_kernels_can_be_inspected_by_triton():
    source = fresh_source(
        "import triton\nimport triton.language as tl\n\n"
        "@triton.jit\n"
        "def add_one(in_ptr, out_ptr, xnumel, XBLOCK: tl.constexpr):\n"
        "    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)\n"
        "    xmask = xindex < xnumel\n"
        "    tl.store(out_ptr + xindex, tl.load(in_ptr + xindex, xmask) + 1.0, xmask)\n"
    )
    module = load_module(source)
    x = torch.arange(37.0, device=DEVICE)
    out = torch.empty_like(x)
    launch(module.add_one, x.numel(), x, out, XBLOCK=16, num_warps=1)
    torch.testing.assert_close(out, x + 1)


# --- launch ---------------------------------------------------------------------------


class FakeKernel:
    """Records the grid it is indexed with and the arguments of each launch."""

    def __init__(self):
        self.grids, self.calls = [], []

    def __getitem__(self, grid):
        self.grids.append(grid)

        def launcher(*args, **kwargs):
            self.calls.append((grid, args, kwargs))

        return launcher


def test_launch_of_zero_elements_launches_nothing():
    kernel = FakeKernel()
    assert launch(kernel, 0, "in", "out", XBLOCK=64, num_warps=1) is None
    assert kernel.grids == [] and kernel.calls == []


def test_launch_grid_covers_numel_and_passes_xnumel():
    kernel = FakeKernel()
    launch(kernel, 100, "in", "out", XBLOCK=32, num_warps=2)
    grid, args, kwargs = kernel.calls[0]
    assert grid == (4,)  # ceil(100 / 32)
    assert args == ("in", "out", 100)
    assert kwargs["XBLOCK"] == 32
    if interpret_mode():
        assert "num_warps" not in kwargs  # the interpreter takes no launch options
    else:
        assert kwargs["num_warps"] == 2


@pytest.mark.parametrize(
    "numel,xblock,blocks", [(1, 1, 1), (64, 64, 1), (65, 64, 2), (2145, 1024, 3)]
)
def test_launch_grid_sizes(numel, xblock, blocks):
    kernel = FakeKernel()
    launch(kernel, numel, XBLOCK=xblock, num_warps=1)
    assert kernel.calls[0][0] == (blocks,)


@pytest.mark.skipif(not interpret_mode(), reason="a fake kernel has no GPU binary")
def test_launch_keeps_one_launcher_per_kernel_and_grid():
    kernel = FakeKernel()
    for _ in range(3):
        launch(kernel, 10, XBLOCK=8, num_warps=1)
    launch(kernel, 100, XBLOCK=8, num_warps=1)
    launch(kernel, 100, 7, XBLOCK=8, num_warps=1)  # a size symbol, s0 = 7
    mine = {key for key in runtime._launchers if key[0] == id(kernel)}
    assert mine == {
        (id(kernel), (10,), (), 8, None, 1),
        (id(kernel), (100,), (), 8, None, 1),
        (id(kernel), (100,), (7,), 8, None, 1),
    }
    # in the interpreter there is no binary: every launch takes Triton's generic path
    assert kernel.grids == [(2,), (2,), (2,), (13,), (13,)]
    assert [c[1][-1] for c in kernel.calls] == [10, 10, 10, 100, 100]  # xnumel last
    assert kernel.calls[-1][1] == (7, 100)  # the size symbol, then xnumel


@pytest.mark.cuda
def test_direct_launch_never_serves_an_unaligned_pointer():
    base = torch.randn(1025, device="cuda")
    aligned, unaligned = base[:1000], base[1:1001]  # the second starts 4 bytes in
    out = torch.empty(1000, device="cuda")
    for x in (aligned, aligned, unaligned, aligned, unaligned):
        out.fill_(-7.0)
        launch(_double, 1000, x, out, XBLOCK=256, num_warps=4)
        torch.testing.assert_close(out, x * 2)
    launcher = runtime._launchers[(id(_double), (1000,), (), 256, None, 4)]
    assert launcher.binary is not None  # the aligned calls went the direct way


@pytest.mark.cuda
def test_direct_launch_never_serves_other_element_types():
    # one kernel text, floats then 8-byte integers then floats: a binary compiled
    # for the first call's pointers must not copy the integers as floats
    for x in (torch.randn(1000, device="cuda"), torch.arange(1000, device="cuda")):
        for _ in range(2):
            out = torch.full_like(x, -7)
            launch(_copy, 1000, x, out, XBLOCK=256, num_warps=4)
            assert torch.equal(out, x)


@triton.jit
def _copy(in_ptr, out_ptr, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr + xindex, tl.load(in_ptr + xindex, xmask), xmask)


@triton.jit
def _double(in_ptr, out_ptr, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr + xindex, tl.load(in_ptr + xindex, xmask) * 2, xmask)


@pytest.mark.parametrize("numel", [0, 1, 5, 64, 200])
def test_launch_runs_a_real_kernel(numel):
    x = torch.randn(numel, device=DEVICE)
    out = torch.full((numel,), -7.0, device=DEVICE)
    launch(_double, numel, x, out, XBLOCK=64, num_warps=1)
    torch.testing.assert_close(out, x * 2)


# --- call sites -----------------------------------------------------------------------


def test_a_call_site_binds_sizes_and_blocks_and_passes_buffers_then_sizes():
    kernel = FakeKernel()
    site = CallSite(kernel, (1000, 33), XBLOCK=256, RBLOCK=64, num_warps=4, check=(0,))
    for _ in range(2):
        site("in", "out")
    assert kernel.grids == [(4,), (4,)]  # ceil(1000 / 256), one launch each
    assert [c[1] for c in kernel.calls] == [("in", "out", 1000, 33)] * 2
    assert kernel.calls[0][2]["XBLOCK"] == 256 and kernel.calls[0][2]["RBLOCK"] == 64


def test_a_call_site_hands_its_launches_to_another_launch():
    seen = []

    def spy(kernel, numel, *args, **meta):
        seen.append((kernel, numel, args, meta))

    kernel = FakeKernel()
    CallSite(kernel, (1000, 33), XBLOCK=256, RBLOCK=64, num_warps=4).through(spy)("a")
    CallSite(kernel, (70,), XBLOCK=128, num_warps=2).through(spy)("b", "c")
    assert seen == [
        (kernel, 1000, ("a",), dict(XBLOCK=256, RBLOCK=64, num_warps=4, rnumel=33)),
        (kernel, 70, ("b", "c"), dict(XBLOCK=128, num_warps=2)),
    ]
    assert kernel.calls == []  # the spy launched nothing


@pytest.mark.parametrize("numel", [1, 5, 64, 200])
def test_a_call_site_runs_a_real_kernel(numel):
    site = CallSite(_double, (numel,), XBLOCK=64, num_warps=1)
    for _ in range(3):  # the first launch compiles; the others take the direct path
        x = torch.randn(numel, device=DEVICE)
        out = torch.full((numel,), -7.0, device=DEVICE)
        site(x, out)
        torch.testing.assert_close(out, x * 2)


@pytest.mark.cuda
def test_a_call_site_checks_the_alignment_it_is_told_to():
    base = torch.randn(1025, device="cuda")
    aligned, unaligned = base[:1000], base[1:1001]  # the second starts 4 bytes in
    out = torch.empty(1000, device="cuda")
    site = CallSite(_double, (1000,), XBLOCK=256, num_warps=4, check=(0,))
    for x in (aligned, aligned, unaligned, aligned, unaligned):
        out.fill_(-7.0)
        site(x, out)
        torch.testing.assert_close(out, x * 2)
    assert site.launcher.binary is not None  # the aligned calls went the direct way


# --- sites with symbolic sizes -----------------------------------------------------


def _triton_specialization():
    """Triton's own classification of an integer argument, where this Triton exposes
    it: (type, key) as its launcher's cache key uses them."""
    jit = pytest.importorskip("triton.runtime.jit")
    native = getattr(jit, "native_specialize_impl", None)
    if native is None:
        pytest.skip("this Triton does not expose native_specialize_impl")
    from triton.backends.compiler import BaseBackend

    return lambda v: native(BaseBackend, v, False, True, True)


EDGES = [
    *range(-40, 41),
    *range(2**31 - 20, 2**31 + 20),
    *range(-(2**31) - 20, -(2**31) + 20),
    2**32, 2**40 + 16, 2**40 + 1, 2**63 - 16, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 1,
]  # fmt: skip


def test_int_classes_are_no_coarser_than_tritons_specialization():
    # two integers of one class must get one binary from Triton: the same type and key
    triton_key = _triton_specialization()
    seen: dict[int, set] = {}
    for v in EDGES:
        seen.setdefault(int_class(v), set()).add(triton_key(v))
    for cls, keys in seen.items():
        assert len(keys) == 1, (cls, keys)
    assert len(seen) >= 7  # 1, multiples of 16 and others, in 32 and 64 bits, unsigned


def test_int_class_on_concrete_values():
    assert [int_class(v) for v in (1, 0, 16, -32, 17, 2, 2**31, 2**31 + 1, 2**63)] == [
        1, 2, 2, 2, 0, 0, 6, 4, 10,
    ]  # fmt: skip


def test_a_sized_site_passes_buffers_symbols_then_sizes_with_a_grid_per_call():
    kernel = FakeKernel()
    site = SizedSite(kernel, 2, XBLOCK=32, RBLOCK=8, num_warps=2)
    site(100, 7, "in", "out", 9)
    site(33, 7, "in", "out", 9)
    site(0, 7, "in", "out", 9)  # nothing to do: no launch
    assert kernel.grids == [(4,), (2,)]
    assert [c[1] for c in kernel.calls] == [("in", "out", 9, 100, 7), ("in", "out", 9, 33, 7)]
    assert kernel.calls[0][2]["XBLOCK"] == 32 and kernel.calls[0][2]["RBLOCK"] == 8


def test_a_sized_site_chooses_blocks_per_call_from_the_sizes():
    kernel = FakeKernel()
    SizedSite(kernel, 1, per_call="pointwise", XBLOCK=8, num_warps=1)(5000, "x")
    SizedSite(kernel, 1, per_call="inner", XBLOCK=8, RBLOCK=8, num_warps=1)(6, 300, "y")
    pointwise, persistent = kernel.calls
    want = runtime.pointwise_blocks(5000)
    assert pointwise[2]["XBLOCK"] == want["XBLOCK"] != 8
    assert pointwise[0] == (-(-5000 // want["XBLOCK"]),)
    want = runtime.persistent_blocks(6, 300, inner=True)
    assert persistent[2]["RBLOCK"] == want["RBLOCK"] >= 300  # the whole row at once


def test_a_sized_site_hands_its_launches_to_another_launch():
    seen = []
    site = SizedSite(FakeKernel(), 1, XBLOCK=64, RBLOCK=16, num_warps=4)
    site.through(lambda kernel, numel, *args, **meta: seen.append((numel, args, meta)))(
        50, 9, "a", 3
    )
    assert seen == [(50, ("a", 3), dict(XBLOCK=64, RBLOCK=16, num_warps=4, rnumel=9))]


@triton.jit
def _scaled_copy(in_ptr, out_ptr, k, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr + xindex, tl.load(in_ptr + xindex, xmask) * k, xmask)


def test_a_sized_site_is_right_across_the_classes_of_its_sizes():
    # 1 is compiled in as a constant and 16 as a multiple of 16: a binary kept for one
    # of them and used for 17 would write one element, or assume alignment it lacks
    site = SizedSite(_scaled_copy, 2, XBLOCK=64, num_warps=1)
    sizes = [1, 16, 17, 1, 48, 33, 2, 16, 200, 1] if DEVICE == "cpu" else [
        1, 16, 17, 1, 48, 33, 2, 16, 200, 1, *range(33, 161),
    ]  # fmt: skip
    for n in sizes:
        for k in (1, 3, 16):
            x = torch.randn(n, device=DEVICE)
            out = torch.full((n,), -7.0, device=DEVICE)
            site(n, x, out, k)
            torch.testing.assert_close(out, x * k)
    if DEVICE == "cuda":
        # classes of (k, n): k in 1 / other / 16, n in 1 / multiple of 16 / other
        assert len(site.binaries) <= 9
        # sizes met again (16, with k = 3) find their class's binary by the sizes
        assert site.seen[(3, 16)] is site.binaries[(64, 1, 0, 2)]


@pytest.mark.cuda
def test_a_compiled_graph_is_right_for_inputs_at_odd_addresses():
    # compiled for an aligned input, then called with one 4 bytes further in
    def f(x):
        return (x * 2).sin(), x.sum()

    base = torch.randn(2049, device="cuda")
    fn = torch.compile(f, backend="minductor")
    for x in (base[:2048], base[:2048], base[1:2049], base[1:2049], base[:2048]):
        for got, want in zip(fn(x), f(x), strict=True):
            torch.testing.assert_close(got, want)


def test_interpret_mode_follows_the_environment(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert interpret_mode()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not interpret_mode()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not interpret_mode()


# --- rand_strided, empty_strided, restride --------------------------------------------


@pytest.mark.parametrize(
    "size,stride",
    [
        ((3, 4), (4, 1)),
        ((3, 4), (1, 3)),
        ((2, 3, 4), (1, 2, 6)),
        ((5, 3), (0, 1)),
        ((4,), (3,)),
        ((), ()),
        ((0, 3), (3, 1)),
        ((2, 0), (1, 2)),
        ((1, 1), (9, 9)),
    ],
    ids=str,
)
@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float16, torch.int64, torch.bool, torch.uint8],
    ids=str,
)
def test_rand_strided_honours_size_stride_dtype(size, stride, dtype):
    t = rand_strided(size, stride, device="cpu", dtype=dtype)
    assert tuple(t.shape) == size and t.stride() == stride
    assert t.dtype == dtype and t.device.type == "cpu"
    if t.numel():
        t.sum()  # every element is readable
        assert t.storage_offset() == 0
        span = 1 + sum((s - 1) * st for s, st in zip(size, stride))
        assert t.untyped_storage().nbytes() >= span * t.element_size()


def test_rand_strided_values_are_random_and_in_range():
    floats = rand_strided((1000,), (1,))
    assert floats.dtype == torch.float32 and floats.std() > 0.5
    ints = rand_strided((1000,), (1,), dtype=torch.int32)
    assert 0 <= ints.min() and ints.max() < 10 and len(ints.unique()) > 1
    bools = rand_strided((1000,), (1,), dtype=torch.bool)
    assert 0 < bools.sum() < 1000


def test_empty_strided_is_torchs():
    t = empty_strided((3, 4), (1, 3), device="cpu", dtype=torch.float16)
    assert t.stride() == (1, 3) and t.dtype == torch.float16


def test_restride_keeps_a_result_that_has_the_layout():
    t = torch.empty(3, 4).t()
    assert restride(t, (4, 3), (1, 4)) is t
    one = torch.empty(1, 5)[:, :1]
    assert restride(one, (1, 1), (99, 99)) is one  # the stride of one element
    empty = torch.empty(0, 3)
    assert restride(empty, (0, 3), (7, 7)) is empty  # and of none
    column = torch.empty(5, 1)
    assert restride(column, (5, 1), (1, 5)) is column  # a size-1 dim's stride


def test_restride_explains_a_size_mismatch():
    with pytest.raises(AssertionError) as info:
        restride(torch.empty(3, 4), (4, 3), (3, 1))
    message = str(info.value)
    assert "size (3, 4) stride (4, 1)" in message
    assert "expects size (4, 3) stride (3, 1)" in message


def test_restride_copies_a_result_with_other_strides(caplog):
    t = torch.arange(12.0).reshape(3, 4).t()  # (4, 3) with strides (1, 4)
    with caplog.at_level(logging.DEBUG, logger="minductor"):
        fixed = restride(t, (4, 3), (3, 1))
    assert fixed.stride() == (3, 1) and torch.equal(fixed, t)
    assert fixed.data_ptr() != t.data_ptr()
    assert "returned strides (1, 4), copied into (3, 1)" in caplog.text


def test_restride_lets_an_empty_result_through_only_where_aten_alone_reads_it():
    empty = torch.empty(0, dtype=torch.int64)
    assert restride(empty, (5,), (1,), aten_only=True) is empty
    with pytest.raises(AssertionError, match=r"size \(0,\) stride \(1,\)"):
        restride(empty, (5,), (1,))  # a kernel would read five elements
    with pytest.raises(AssertionError, match=r"expects size \(5,\)"):
        restride(torch.empty(3), (5,), (1,), aten_only=True)  # not empty: a bug


def test_restride_names_a_missing_result():
    with pytest.raises(AssertionError, match=r"no tensor where \(2, 3\) is read"):
        restride(None, (2, 3), (3, 1))


# --- benchmark ------------------------------------------------------------------------


def test_benchmark_calls_once_to_warm_up_then_times_times_repeat():
    calls = []
    result = benchmark(lambda: calls.append(1), times=3, repeat=4)
    assert len(calls) == 1 + 3 * 4
    assert isinstance(result, float) and result >= 0


def test_benchmark_reports_the_median_in_milliseconds(monkeypatch):
    ticks = iter([0.0, 0.010, 1.0, 1.030, 2.0, 2.020])  # 10 ms, 30 ms, 20 ms
    monkeypatch.setattr(runtime.time, "perf_counter", lambda: next(ticks))
    assert benchmark(lambda: None, times=1, repeat=3) == pytest.approx(20.0)


# --- compiling before the first call --------------------------------------------------


def _wrapper_for(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    from minductor.lowering import GraphLowering
    from minductor.scheduler import Scheduler
    from minductor.wrapper import WrapperCodeGen

    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    wrapper = WrapperCodeGen(graph, Scheduler(graph), interpret=True)
    wrapper.generate()
    return wrapper


def _in_slots(first, second, x):
    """A cat of five pieces, each written into its slot of one buffer (a cat of fewer
    is one kernel); the second piece 7 floats in: not aligned."""
    rest = [x[1, :2].cos(), x[2, :2].tanh(), x[3, :2].neg()]
    return torch.cat([first, second, *rest])


def test_warm_ups_name_each_launch_with_its_dtypes_alignment_and_sizes():
    def f(x, n, i):
        y = x.sum(-1) + n[1:].float()
        return _in_slots(y.exp(), x[0, :5].sin(), x), (i * 2) == 4

    x, n, i = torch.randn(7, 33), torch.arange(8, dtype=torch.int32), torch.arange(6)
    wrapper = _wrapper_for(f, x, n, i)
    warm_ups = wrapper.warm_ups()
    kernels = {line.kernel_name for line in wrapper.lines if hasattr(line, "kernel")}
    assert {w.kernel for w in warm_ups} == kernels  # static sizes: every kernel
    assert len(warm_ups) == len(kernels) == 4  # the three 2-float pieces: one kernel
    by_sizes = {w.sizes: w for w in warm_ups}
    reduction = by_sizes[(7, 33)]  # xnumel, then rnumel
    assert "RBLOCK" in dict(reduction.blocks) and "num_warps" in dict(reduction.blocks)
    assert (torch.int32, True) in reduction.buffers
    assert by_sizes[(6,)].buffers == ((torch.int64, True), (torch.bool, True))
    sin = next(w for w in warm_ups if "sin" in w.kernel)
    assert sin.buffers[-1] == (torch.float32, False)  # 28 bytes into the cat
    # each warm-up names the site its launch uses
    sites = {line.site for line in wrapper.lines if hasattr(line, "kernel")}
    assert {w.site for w in warm_ups} == sites and len(sites) == 4


def test_a_site_checks_what_call_did_not_allocate_aligned():
    def f(x, n):
        y = x.sum(-1) + n[1:].float()  # inputs: checked
        z = torch.lgamma(y)  # a fallback's result: checked
        # the cat's first piece is at offset 0 of memory call allocates: not checked;
        # the second, 7 floats in, is
        return _in_slots(z.exp(), x[0, :5].sin(), x)

    x, n = torch.randn(7, 33), torch.arange(8, dtype=torch.int32)
    wrapper = _wrapper_for(f, x, n)
    checked = {}
    for line in wrapper.lines:
        if hasattr(line, "kernel"):
            args = line.kernel.call_args
            checked[line.kernel_name] = {args[i] for i in line.check}
    inputs = set(wrapper.graph.graph_input_names)
    (fallback,) = [b.name for b in wrapper.graph.buffers if "lgamma" in str(b)]
    (reduction, exp, sin, *_) = checked  # in launch order
    assert checked[reduction] == inputs  # x and n, not the buffer it writes
    assert checked[exp] == {fallback}
    sin_args = next(ln for ln in wrapper.lines if getattr(ln, "kernel_name", "") == sin)
    assert checked[sin] == {sin_args.kernel.call_args[0], sin_args.kernel.call_args[-1]}
    assert sin_args.kernel.call_args[0] in inputs


def test_launches_with_symbolic_sizes_warm_up_at_their_traced_sizes():
    from minductor.capture import record_compiled

    warm = []
    real = runtime.precompile

    def spy(module, warm_ups, device):
        warm.append(warm_ups)
        return real(module, warm_ups, device)

    torch._dynamo.reset()
    fn = torch.compile(lambda x: (x * 2).sin(), backend="minductor", dynamic=True)
    with record_compiled() as graphs, pytest.MonkeyPatch.context() as mp:
        mp.setattr("minductor.capture.precompile", spy)
        x = torch.randn(6, 5, device=DEVICE)
        out = fn(x)
    torch.testing.assert_close(out, (x * 2).sin())
    assert graphs and len(warm) == 1  # one graph, its one launch over s0*s1 elements
    (w,) = warm[0]
    assert w.sized and w.sizes == (30,) and sorted(w.ints) == [5, 6]
    assert w.buffers == ((torch.float32, True), (torch.float32, True))


def test_compile_threads_is_an_option():
    torch._dynamo.reset()
    x = torch.randn(9, device=DEVICE)
    fn = torch.compile(lambda x: x.cos() * 3, backend="minductor",
                       options={"compile_threads": 1})  # fmt: skip
    torch.testing.assert_close(fn(x), x.cos() * 3)
    with pytest.raises(Exception, match="compile_threads"):
        torch.compile(lambda x: x + 1, backend="minductor",
                      options={"compile_threads": "many"})(x)  # fmt: skip


def _compiles_by_thread(monkeypatch, threads: int, scale: float):
    """Which threads Triton's compiler ran on, for a graph of fresh kernels."""
    import threading

    import triton.compiler

    from minductor.capture import record_compiled

    # a kernel binds Triton's compile function when it first runs on a device
    main, seen, real = threading.main_thread(), [], triton.compiler.compile

    def spy(src, *args, **kwargs):
        seen.append(threading.current_thread() is main)
        return real(src, *args, **kwargs)

    monkeypatch.setattr(triton.compiler, "compile", spy)
    torch._dynamo.reset()
    x = torch.randn(33, 65, device="cuda")

    def f(x):  # the scale makes the kernels' text new to this process
        return (x * scale).sin(), (x + scale).sum(-1), (x - scale).amax(0)

    fn = torch.compile(f, backend="minductor", options={"compile_threads": threads})
    with record_compiled() as graphs:
        results = fn(x)
    for got, want in zip(results, f(x), strict=True):
        torch.testing.assert_close(got, want)
    (graph,) = graphs
    assert len(seen) == len(graph.kernel_names) == 2  # the sum fuses with the sin
    return seen


@pytest.mark.cuda
def test_kernels_compile_on_threads_before_the_first_launch(monkeypatch):
    seen = _compiles_by_thread(monkeypatch, 4, 1.0 + uuid.uuid4().int % 10**6 / 1e7)
    assert not any(seen)  # every kernel compiled, none on the main thread


@pytest.mark.cuda
def test_one_compile_thread_compiles_each_kernel_at_its_launch(monkeypatch):
    seen = _compiles_by_thread(monkeypatch, 1, 2.0 + uuid.uuid4().int % 10**6 / 1e7)
    assert all(seen)  # each at its launch


def test_a_warm_up_goes_through_the_launcher_the_launch_will_use():
    class Kernel:  # records what Triton's JITFunction.warmup would be given
        __name__ = "fake"

        def warmup(self, *args, grid, **kwargs):
            self.seen = (args, grid, kwargs)

    kernel = Kernel()
    launcher = runtime.launcher_for(kernel, (1000, 33), (), 256, 64, 4)
    launcher.warm_up("in_ptr", "out_ptr", 1000, 33)
    assert kernel.seen == (
        ("in_ptr", "out_ptr", 1000, 33),
        (4,),  # ceil(1000 / 256) programs
        {"XBLOCK": 256, "RBLOCK": 64, "num_warps": 4},
    )
    assert runtime.launcher_for(kernel, (1000, 33), (), 256, 64, 4) is launcher
    assert runtime.launcher_for(kernel, (1000, 33), (), 128, 64, 4) is not launcher


# --- numbers moved to the GPU ---------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", DEVICE])
def test_number_on_keeps_value_sign_and_dtype_and_one_tensor_per_value(device):
    values = [
        (0.0, torch.float32), (-0.0, torch.float32), (-0.0, torch.bfloat16),
        (1.0, torch.float32), (1.0, torch.float64), (1, torch.int64), (True, torch.bool),
        (1e-6, torch.float64), (0.1, torch.float32), (-(2**40), torch.int64),
        (float("inf"), torch.float16), (float("-inf"), torch.float32),
    ]  # fmt: skip
    got = []
    for value, dtype in values:
        x = torch.tensor(value, dtype=dtype)
        y = number_on(x, device)
        assert y.device.type == torch.device(device).type and y.dim() == 0
        assert y.dtype == dtype and y.cpu().item() == x.item()
        assert torch.signbit(y.cpu()) == torch.signbit(x)  # -0.0 is not 0.0
        assert number_on(x.clone(), device) is y  # the same value: the same tensor
        got.append(y)
    assert len({id(y) for y in got}) == len(values)  # no two values share one
    nan = number_on(torch.tensor(float("nan")), device)
    assert nan.isnan().item()
    # first met under inference_mode, kept for calls that may train
    with torch.inference_mode():
        y = number_on(torch.tensor(0.3125), device)
    assert not y.is_inference()


@pytest.mark.cuda
def test_a_graph_with_numbers_as_cpu_tensors_does_not_wait_for_the_gpu():
    # dynamic=True passes Python floats as 0-dim CPU tensors; moving one with .to()
    # waits for everything queued on the stream
    def f(x, eps, scale):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * scale

    fn = torch.compile(f, backend="minductor", dynamic=True)
    x = torch.randn(4, 64, device="cuda")
    for eps in (1e-6, 1e-5, 1e-6):
        torch.testing.assert_close(fn(x, eps, 0.5), f(x, eps, 0.5))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = fn(x, 1e-6, 0.5)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.testing.assert_close(out, f(x, 1e-6, 0.5))


# --- torch's launcher -----------------------------------------------------------------


class _Src:
    """What Triton's ASTSource holds that static_types reads."""

    def __init__(self, signature, constants=None, names=None):
        self.signature = signature
        self.constants = constants or {}
        self.fn = type("Fn", (), {"arg_names": names or list(signature)})()


class _Binary:
    def __init__(self, src, cubin=True, **meta):
        fields = dict(num_ctas=1, num_warps=4, shared=96, name="triton_poi_k")
        fields.update(meta)
        self.src = src
        self.metadata = type("Meta", (), fields)()
        self.metadata_group = {"k.json": "/c/k.json"}
        if cubin:
            self.metadata_group["k.cubin"] = "/c/k.cubin"


SIGNATURE = {"in_ptr0": "*fp32", "in_ptr1": "*bf16", "out_ptr0": "*i64",
             "ks0": "i32", "ks1": "i64", "scale": "fp32", "xnumel": "i32",
             "XBLOCK": "constexpr"}  # fmt: skip


def test_static_types_give_one_letter_per_argument_the_binary_takes():
    assert runtime.static_types(_Binary(_Src(SIGNATURE))) == "OOOilfi"
    # Triton's constants: keyed by position in tuples, or by name
    one = _Binary(_Src(SIGNATURE, constants={(6,): 1, (7,): 256}))
    assert runtime.static_types(one) == "OOOilf"  # xnumel == 1 compiled in
    named = _Binary(_Src(SIGNATURE, constants={"ks0": 1}))
    assert runtime.static_types(named) == "OOOlfi"
    unsigned = {"p": "*u8", "a": "u32", "b": "u64", "c": "i1", "d": "fp64", "e": "i16"}
    assert runtime.static_types(_Binary(_Src(unsigned))) == "OIKidh"
    described = dict(SIGNATURE, in_ptr1="tensordesc<bf16[64, 64]>")
    assert runtime.static_types(_Binary(_Src(described))) is None


class _FakeStatic:
    def __init__(self, fails=False):
        self.loads, self.launches, self.fails = [], [], fails

    def _load_kernel(self, path, name, shared, device):
        if self.fails:
            raise RuntimeError("out of resources")
        self.loads.append((path, name, shared, device))
        return ("module", f"function of {name}", 40, 0)

    def _launch_kernel(self, *args):
        self.launches.append(args)


def test_load_static_loads_the_cubin_or_says_why_not(monkeypatch):
    fake = _FakeStatic()
    monkeypatch.setattr(runtime, "_static", fake)
    plain = _Binary(_Src(SIGNATURE))
    got = runtime.load_static(plain, 7, 3)
    assert got == ("function of triton_poi_k", 4, 96, "OOOilfi", (), None)
    assert fake.loads == [("/c/k.cubin", "triton_poi_k", 96, 3)]
    # Hopper's binaries: scratch pointers of size 0 are passed as null pointers
    hopper = _Binary(_Src(SIGNATURE), global_scratch_size=0, profile_scratch_size=0)
    assert runtime.load_static(hopper, 7, 0)[3:] == ("OOOilfiOO", (None, None), None)
    # xnumel == 1 compiled in: the binary takes the call's arguments but that one
    one = _Binary(_Src(SIGNATURE, constants={(6,): 1}))
    assert runtime.load_static(one, 7, 0)[3:] == ("OOOilf", (), (0, 1, 2, 3, 4, 5))
    named = _Binary(_Src(SIGNATURE, constants={"ks0": 1}))
    assert runtime.load_static(named, 7, 0)[3:] == ("OOOlfi", (), (0, 1, 2, 4, 5, 6))
    refused = [
        _Binary(_Src(SIGNATURE), global_scratch_size=128),  # memory per program
        _Binary(_Src(SIGNATURE), profile_scratch_size=64),
        _Binary(_Src(SIGNATURE), num_ctas=2),
        _Binary(_Src(SIGNATURE), tensordesc_meta=[{"block": 64}]),
        _Binary(_Src(SIGNATURE), cubin=False),
        _Binary(_Src(dict(SIGNATURE, extra="i32"))),  # takes more than the call passes
        None,  # no binary at all
    ]
    for binary in refused:
        assert runtime.load_static(binary, 7, 0) is None
    assert len(fake.loads) == 4  # nothing loaded for any refused binary
    monkeypatch.setattr(runtime, "_static", _FakeStatic(fails=True))
    assert runtime.load_static(plain, 7, 0) is None  # Triton's launcher will say why

    class Older(_FakeStatic):  # torch before the device argument: three values back
        def _load_kernel(self, path, name, shared):
            self.loads.append((path, name, shared))
            return (f"function of {name}", 40, 0)

    older = Older()
    monkeypatch.setattr(runtime, "_static", older)
    assert runtime.load_static(plain, 7, 0)[0] == "function of triton_poi_k"
    assert older.loads == [("/c/k.cubin", "triton_poi_k", 96)]


def test_a_launch_record_is_loaded_only_on_the_gpu_it_was_compiled_for(monkeypatch):
    fake = _FakeStatic()
    monkeypatch.setattr(runtime, "_static", fake)
    monkeypatch.setattr(runtime, "_arch", lambda device: 90)
    target = type("GPUTarget", (), {"backend": "cuda", "arch": 90, "warp_size": 32})
    record = runtime.launch_record(_Binary(_Src(SIGNATURE), target=target()), 7)
    assert record == dict(cubin="/c/k.cubin", name="triton_poi_k", warps=4, shared=96,
                          types="OOOilfi", nulls=0, arch=90, taken=None)  # fmt: skip
    assert json.loads(json.dumps(record)) == record  # plain data, for the disk
    assert runtime.load_record(record, 0)[0] == "function of triton_poi_k"
    assert runtime.load_record(dict(record, arch=80), 0) is None  # an A100's binary
    assert runtime.load_record(dict(record, arch=None), 0) is not None  # not known
    assert len(fake.loads) == 2


def test_static_launch_is_only_for_aligned_gpu_pointers(monkeypatch):
    x = torch.randn(8)
    monkeypatch.setattr(runtime, "_static", None)
    assert not runtime.static_launch_here([])  # a torch without CUDA
    monkeypatch.setattr(runtime, "_static", _FakeStatic())
    assert runtime.static_launch_here([])
    assert not runtime.static_launch_here([x])  # on the CPU

    class OnGpu:
        is_cuda = True

        def __init__(self, address):
            self.address = address

        def data_ptr(self):
            return self.address

    assert runtime.static_launch_here([OnGpu(512), OnGpu(1024)])
    assert not runtime.static_launch_here([OnGpu(512), OnGpu(1028)])


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch's launcher faked, CPU tensors taken for aligned GPU ones: the launches
    it makes are recorded."""
    fake = _FakeStatic()
    monkeypatch.setattr(runtime, "_static", fake)
    monkeypatch.setattr(runtime, "_static_launch", fake._launch_kernel)
    monkeypatch.setattr(runtime, "_current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda d: 77,
                        raising=False)  # fmt: skip
    monkeypatch.setattr(runtime, "_raw_stream", lambda d: 77)
    aligned = lambda ps: all(p.data_ptr() % 16 == 0 for p in ps)  # noqa: E731
    monkeypatch.setattr(runtime, "static_launch_here", aligned)  # CPU tensors here
    return fake


class _Kernel:
    """A jitted kernel's stand-in: counts Triton's compiles and launches."""

    __name__ = "fake"

    def __init__(self, constants=None):
        self.warmups, self.launches, self.constants = 0, [], constants

    def warmup(self, *args, grid, **kwargs):
        self.warmups += 1
        src = _Src({"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32",
                    "XBLOCK": "constexpr"}, constants=self.constants)  # fmt: skip
        return _Binary(src, global_scratch_size=0)

    def __getitem__(self, grid):  # Triton's own launch
        return lambda *args, **kwargs: self.launches.append((grid, args))


def test_a_launcher_keeps_a_binary_of_torchs_launcher_and_launches_through_it(
    fake_gpu,
):
    fake, kernel = fake_gpu, _Kernel()
    launcher = runtime.Launcher(kernel, (4,), {"XBLOCK": 256}, 8, torchs=True)
    launcher.interpret = False
    base = torch.zeros(1100)
    x, out = base[:1000], torch.zeros(1000)
    launcher(x, out, 1000)
    launcher(x, out, 1000)
    assert kernel.warmups == 1 and kernel.launches == []
    assert fake.launches == 2 * [
        ("function of triton_poi_k", 4, 1, 1, 4, 96, "OOiO", (x, out, 1000, None), 77)
    ]  # grid, the binary's warps and shared memory, the letters, args, stream
    launcher(base[1:1001], out, 1000)  # unaligned: Triton's binary and launcher
    assert len(fake.launches) == 2 and kernel.launches[0][0] == (4,)
    # a call site on that launcher takes the same way, with its sizes bound
    site = CallSite(kernel, (1000,), XBLOCK=256, num_warps=8)
    site.launcher.interpret = False
    site(x, out)
    site(x, out)
    assert fake.launches[-1][5:8] == (96, "OOiO", (x, out, 1000, None))
    assert len(fake.launches) == 4 and kernel.warmups == 2
    # an xnumel of 1, compiled into the binary: the launch leaves it out
    one = CallSite(_Kernel(constants={(2,): 1}), (1,), XBLOCK=1, num_warps=1)
    one.launcher.interpret = False
    one(x, out)
    one(x, out)
    assert fake.launches[-1][5:8] == (96, "OOO", (x, out, None))
    # a module compiled with torch's launcher off: Triton launches every time
    theirs = CallSite(kernel, (1000,), XBLOCK=256, num_warps=8, launcher="triton")
    theirs.launcher.interpret = False
    theirs(x, out)
    theirs(x, out)
    assert len(fake.launches) == 6 and len(kernel.launches) == 3


def test_a_warm_start_loads_binaries_from_their_records_without_triton(fake_gpu):
    fake, kernel = fake_gpu, _Kernel()
    site = CallSite(kernel, (1000,), XBLOCK=256, num_warps=8)
    site.launcher.interpret = False
    module = types.SimpleNamespace(launch_k=site)
    record = dict(cubin="/kept/k.cubin", name="triton_poi_k", warps=4, shared=96,
                  types="OOiO", nulls=1, arch=None, taken=None)  # fmt: skip
    f32 = torch.float32
    w = WarmUp("k", "launch_k", ((f32, True), (f32, True)), (1000,),
               (("XBLOCK", 256), ("num_warps", 8)))  # fmt: skip
    stand_in = lambda dtype, aligned: torch.zeros(32, dtype=dtype)  # noqa: E731
    assert not runtime._installed(module, w, {}, stand_in)  # no record: Triton's
    assert runtime._installed(module, w, {"launch_k": record}, stand_in)
    assert fake.loads == [("/kept/k.cubin", "triton_poi_k", 96, 0)]
    x, out = torch.zeros(1000), torch.zeros(1000)
    site(x, out)
    assert fake.launches == [
        ("function of triton_poi_k", 4, 1, 1, 4, 96, "OOiO", (x, out, 1000, None), 77)
    ]
    assert kernel.warmups == 0 and kernel.launches == []  # Triton never asked
    assert runtime._installed(module, w, {"launch_k": record}, stand_in)  # loaded
    assert len(fake.loads) == 1
    # a launch compiled for an unaligned buffer, or a module with torch's launcher
    # off, or a record of another GPU: Triton compiles it
    odd = dataclasses.replace(w, buffers=((f32, False), (f32, True)))
    fresh = types.SimpleNamespace(launch_k=CallSite(kernel, (1000,), XBLOCK=256,
                                                    num_warps=8))  # fmt: skip
    assert not runtime._installed(fresh, odd, {"launch_k": record}, stand_in)
    off = CallSite(kernel, (1000,), XBLOCK=256, num_warps=8, launcher="triton")
    off.launcher.interpret = False
    theirs = types.SimpleNamespace(launch_k=off)
    assert not runtime._installed(theirs, w, {"launch_k": record}, stand_in)
    fresh.launch_k.launcher.interpret = False
    other = dict(record, arch=80)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(runtime, "_arch", lambda device: 90)
        assert not runtime._installed(fresh, w, {"launch_k": other}, stand_in)
    assert len(fake.loads) == 1 and fresh.launch_k.launcher.binary is None


@pytest.mark.cuda
def test_compiled_graphs_launch_through_torchs_launcher_and_agree(monkeypatch):
    """Pointwise, reduction, a size of 1 (compiled into the binary: Triton launches
    it), symbolic sizes: each equal to eager, torch's launcher used where it can."""
    launched = []
    real = runtime._static_launch

    def counting(*args):
        launched.append(args[7])  # the letters
        return real(*args)

    monkeypatch.setattr(runtime, "_static_launch", counting)
    scale = 1.0 + uuid.uuid4().int % 10**6 / 1e7  # kernels new to this process

    def f(x, y):
        return (x * scale).sin() + y, (x - scale).sum(-1), x[:1, :1].cos() * scale

    x, y = torch.randn(33, 65, device="cuda"), torch.randn(65, device="cuda")
    for on in (True, False):
        torch._dynamo.reset()
        launched.clear()
        fn = torch.compile(f, backend="minductor", options={"static_launch": on})
        for _ in range(2):
            for got, want in zip(fn(x, y), f(x, y), strict=True):
                torch.testing.assert_close(got, want)
        assert bool(launched) == on
    torch._dynamo.reset()
    launched.clear()
    fn = torch.compile(f, backend="minductor", dynamic=True,
                       options={"static_launch": True})  # fmt: skip
    for rows in (33, 17, 40):
        x = torch.randn(rows, 65, device="cuda")
        for got, want in zip(fn(x, y), f(x, y), strict=True):
            torch.testing.assert_close(got, want)
    assert launched


def test_a_sized_site_of_a_module_with_torchs_launcher_off_launches_through_triton(
    fake_gpu, monkeypatch
):
    monkeypatch.setattr(runtime, "interpret_mode", lambda: False)  # a GPU's launchers
    kernel = _Kernel()
    x, out = torch.zeros(1000), torch.zeros(1000)
    for own, launched in (("triton", 0), ("torch", 2)):
        site = SizedSite(kernel, 2, XBLOCK=256, num_warps=8, launcher=own)
        site.compile_and_launch(None, site.meta, (x, out), (1000,))
        site.compile_and_launch(None, site.meta, (x, out), (1000,))
        assert len(fake_gpu.launches) == launched


def test_a_sized_site_prepared_before_its_first_call_launches_what_it_compiled(
    fake_gpu, monkeypatch
):
    """Warmed up at the traced sizes, a SizedSite's first call of that class launches
    the binary compiled ahead; another class compiles at its launch; a launch record
    loads the binary with no compile at all."""
    monkeypatch.setattr(runtime, "interpret_mode", lambda: False)  # a GPU's launchers
    kernel = _Kernel()
    site = SizedSite(kernel, 2, XBLOCK=256, num_warps=8)
    stand_ins = [torch.zeros(32), torch.zeros(32)]
    assert site.prepare(stand_ins, (1024,))
    assert kernel.warmups == 1 and fake_gpu.launches == []  # compiled, not launched
    assert site.prepare(stand_ins, (1024,)) and kernel.warmups == 1  # kept
    x, out = torch.zeros(2000), torch.zeros(2000)
    site(2000, x, out)  # another multiple of 16: the same class, the same binary
    assert kernel.warmups == 1 and kernel.launches == []
    assert fake_gpu.launches == [
        ("function of triton_poi_k", 8, 1, 1, 4, 96, "OOiO", (x, out, 2000, None), 77)
    ]  # 8 programs of 256 for this call's 2000
    site(1000, x, out)  # not a multiple of 16: another binary, compiled at its launch
    assert kernel.warmups == 2 and len(fake_gpu.launches) == 2
    # the record torch's launcher loaded, named for the warm-up that made it
    w = WarmUp("k", "launch_k", ((torch.float32, True),) * 2, (1024,),
               (("XBLOCK", 256), ("num_warps", 8)), (), True)  # fmt: skip
    record = runtime.site_record(site, w)
    assert record["cubin"] == "/c/k.cubin" and record["types"] == "OOiO"
    assert runtime.record_name(w) == "launch_k(1024,)"
    # a warm start: the record loads the binary, Triton compiles nothing
    fresh = SizedSite(kernel, 2, XBLOCK=256, num_warps=8)
    module = types.SimpleNamespace(launch_k=fresh)
    stand_in = lambda dtype, aligned: torch.zeros(32, dtype=dtype)  # noqa: E731
    assert runtime._installed(module, w, {"launch_k(1024,)": record}, stand_in)
    assert kernel.warmups == 2 and fake_gpu.loads[-1][0] == "/c/k.cubin"
    fresh(4096, x[:1024].repeat(4), out.repeat(2)[:4096])
    assert kernel.warmups == 2 and kernel.launches == []
    assert fake_gpu.launches[-1][1] == 16 and fake_gpu.launches[-1][6] == "OOiO"
    # a record of another class than the call's is not this call's binary
    assert not runtime._installed(module, w, {"launch_k": record}, stand_in)
