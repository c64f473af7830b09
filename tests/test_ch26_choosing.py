"""Choosing by measuring (chapter 26): the candidate tiles, their timing against cuBLAS
on a GPU, and products split along K, against eager and against the rule written out."""

import logging

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, FORCED, TOL, compile_and_compare, randn

from minductor import select_algorithm, templates
from minductor.config import config

pytestmark = [pytest.mark.e2e, pytest.mark.ch26]


@pytest.mark.parametrize(
    "m, n, k, dtype",
    [
        (4096, 4096, 4096, torch.bfloat16),
        (4096, 4096, 4096, torch.float32),
        (16, 4096, 4096, torch.float16),
        (33, 24, 40, torch.float32),
        (1, 1, 1, torch.bfloat16),
    ],
)
def test_candidate_tiles_fit_the_product_and_the_shared_memory(m, n, k, dtype):
    found = select_algorithm.candidate_tiles(m, n, k, dtype)
    assert found[0] == templates.tile_config(m, n, k, dtype)  # the rule's first
    assert len(found) == len(set(found))
    for cfg in found[1:]:
        blocks = (cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K)
        for block, size in zip(blocks, (m, n, k)):
            assert 16 <= block <= max(16, 1 << (size - 1).bit_length())
        pipelined = cfg.num_stages * (cfg.BLOCK_M + cfg.BLOCK_N) * cfg.BLOCK_K
        assert pipelined * dtype.itemsize <= select_algorithm.SHARED_MEMORY
        assert dtype != torch.float32 or cfg.BLOCK_K <= 32
    if (m, n, k) == (4096, 4096, 4096):
        assert len(found) >= 6  # a real choice for a large product
    if m == 1:
        assert found == [templates.tile_config(1, 1, 1, dtype)]


@pytest.mark.cuda
@pytest.mark.parametrize("backends", ["TRITON", "ATEN,TRITON"])
def test_on_the_gpu_the_choices_are_timed_logged_and_kept_on_disk(
    backends, caplog, tmp_path
):
    a, b = torch.randn(512, 512, device="cuda"), torch.randn(512, 512, device="cuda")
    options = {
        "max_autotune": True,
        "max_autotune_gemm_backends": backends,
        "cache_dir": str(tmp_path),
    }
    with caplog.at_level(logging.INFO, logger="minductor"):
        compile_and_compare(lambda a, b: a @ b, a, b, options=options, tol=1e-2)
    timed = [r for r in caplog.messages if "1x512x512x512" in r and " us" in r]
    assert sum("template" in r for r in timed) >= 4
    assert any("cuBLAS" in r and "won" not in r for r in timed) == ("ATEN" in backends)
    assert any("won" in r and "(of " in r for r in timed)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="minductor"):
        compile_and_compare(lambda a, b: a @ b, a, b, options=options, tol=1e-2)
    assert any("won" in r and "(cached)" in r for r in caplog.messages)
    assert not any("template 128x" in r for r in caplog.messages)  # nothing re-timed


@pytest.mark.cuda
def test_on_the_gpu_cublas_is_timed_with_its_epilogues_pass(caplog, tmp_path):
    a, b = torch.randn(16, 768, device="cuda"), torch.randn(768, 3072, device="cuda")
    options = {"max_autotune": True, "cache_dir": str(tmp_path)}
    with caplog.at_level(logging.INFO, logger="minductor"):
        compile_and_compare(lambda a, b: F.gelu(a @ b), a, b, options=options, tol=1e-2)
        compile_and_compare(lambda a, b: (a @ b) * 2, a, b, options=options, tol=1e-2)
        compile_and_compare(lambda a, b: (a @ b).sum(0), a, b, options=options, tol=1e-2)
    passes = [r for r in caplog.messages if "epilogue's pass" in r]
    timed = [r for r in caplog.messages if "cuBLAS" in r and " us" in r and "won" not in r
             and "with its epilogue" not in r]  # fmt: skip
    assert len(passes) == 1  # the second compile's key is the first's: read from disk
    assert any("(cached)" in r for r in caplog.messages)
    assert len(timed) == 2  # and the sum's product, which has no epilogue, alone


@pytest.mark.cuda
def test_on_the_gpu_a_product_of_another_dtype_is_timed_apart(caplog, tmp_path):
    options = {"max_autotune": True, "cache_dir": str(tmp_path)}
    for dtype in (torch.bfloat16, torch.float16):
        a, b = (torch.randn(256, 256, device="cuda", dtype=dtype) for _ in range(2))
        with caplog.at_level(logging.INFO, logger="minductor"):
            compile_and_compare(lambda a, b: a @ b, a, b, options=options, tol=5e-2)
    won = [r for r in caplog.messages if "1x256x256x256" in r and " won, " in r]
    assert len(won) == 2 and not any("(cached)" in r for r in won)


# --- long K, few tiles: K split into slices whose products are summed ---------------


def _splits_by_definition(m, n, k, threshold=32, most=5):
    """k_splits written out plainly: every count of slices allowed, in the order."""
    if k < threshold * max(m, n):
        return []
    allowed = [s for s in range(2, 257) if k % s == 0 and k // s >= 128
               and s <= k // m and s <= k // n]  # fmt: skip
    pow2 = [s for s in allowed if (k // s) & (k // s - 1) == 0]
    by32 = [s for s in allowed if s not in pow2 and (k // s) % 32 == 0]
    rest = [s for s in allowed if s not in pow2 and s not in by32]
    return (pow2 + by32 + rest)[:most]


@pytest.mark.parametrize("m, n, k", [
    (16, 16, 4096), (41, 24, 4096), (128, 128, 4096), (128, 128, 4095), (128, 127, 4096),
    (1, 1, 256), (1, 1, 255), (3, 5, 1000), (8, 8, 7 * 128), (100, 7, 3200),
    (64, 64, 2048), (64, 64, 2047), (2, 300, 9600), (5, 5, 30030),
])  # fmt: skip
def test_k_splits_follow_the_rule_on_both_sides_of_its_edges(m, n, k):
    """Edges: K = 32·max(M, N) exactly and one less; slices of 128 and 127; K/M."""
    assert select_algorithm.k_splits(m, n, k) == _splits_by_definition(m, n, k)


def test_k_splits_obey_their_knobs():
    from minductor.config import config

    with config.patch({"num_decompose_k_splits": 0}):
        assert select_algorithm.k_splits(16, 16, 4096) == []
    with config.patch({"decompose_k_threshold": 300}):
        assert select_algorithm.k_splits(16, 16, 4096) == []  # 4096 < 300 * 16
        assert select_algorithm.k_splits(13, 13, 4096) == _splits_by_definition(13, 13, 4096, 300)


@pytest.fixture
def rules_only():
    """The choice without timing, as in the interpreter: on a GPU too, so that the
    split runs in real Triton."""

    def choose(a, b, allow_cublas, epilogue=False, computed=(False, False)):
        _, m, n, k = templates._size(a.layout, b.layout)
        plain = len(a.get_size()) == 2 and not any(computed)
        splits = select_algorithm.k_splits(m, n, k) if plain else []
        if splits:
            return select_algorithm.split_k(m, n, k, a.get_dtype(), splits[0])
        return select_algorithm.candidate_tiles(m, n, k, a.get_dtype())[0]

    with templates.matmul_choices.using(choose, chapter=26, name="choose_tiles"):
        yield


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case, dtype", [
    ("x.t() @ dy", torch.bfloat16), ("x.t() @ dy", torch.float16),
    ("a @ b", torch.float32), ("a @ b.t() + bias, relu", torch.float32),
    ("a @ b.t() + bias, relu", torch.bfloat16),
], ids=str)  # fmt: skip
def test_a_split_k_product_is_the_sum_of_its_slices_products(
    case, dtype, device, rules_only
):
    """A product long in K is a batched template over the slices, stored in float32,
    then one reduction kernel that sums, rounds once and runs the epilogue."""
    m, n, k = 17, 9, 1024  # splits 2..8 (slices of 512..128); the rule takes 2
    if case == "x.t() @ dy":
        args = randn(k, m, device=device, dtype=dtype), randn(k, n, device=device, dtype=dtype)
        fn = lambda x, dy: x.t() @ dy  # noqa: E731
    elif case == "a @ b":
        args = randn(m, k, device=device, dtype=dtype), randn(k, n, device=device, dtype=dtype)
        fn = lambda a, b: a @ b  # noqa: E731
    else:
        args = (randn(m, k, device=device, dtype=dtype), randn(n, k, device=device, dtype=dtype),
                randn(n, device=device, dtype=dtype))  # fmt: skip
        fn = lambda a, b, bias: torch.relu(F.linear(a, b, bias))  # noqa: E731
    kernels, sources = compile_and_compare(fn, *args, tol=TOL[dtype] * 4)
    assert len(kernels) == 2, kernels
    assert kernels[0].startswith("triton_tem_fused_mm") and "sum" not in kernels[0]
    assert kernels[1].startswith(("triton_per_", "triton_red_"))
    assert f"empty_strided_cpu((2, {m}, {n}), ({m * n}, {n}, 1), torch.float32)" in \
        sources[0].replace("empty_strided_cuda", "empty_strided_cpu")  # fmt: skip
    assert "for k in tl.range(0, 512, " in sources[0]  # each program: half of K


@pytest.mark.parametrize("device", DEVICES)
def test_a_split_k_product_rounds_once_as_eager_does(device, rules_only):
    """bfloat16 inputs, K = 4096: the error against float64 is eager's, not the
    error of rounding each slice's product."""
    x, dy = randn(4096, 33, device=device).bfloat16(), randn(4096, 20, device=device).bfloat16()
    torch._dynamo.reset()
    got = torch.compile(lambda x, dy: x.t() @ dy, backend="minductor", options=FORCED)(x, dy)
    exact = x.double().t() @ dy.double()
    ours = (got.double() - exact).abs().max().item()
    eager = ((x.t() @ dy).double() - exact).abs().max().item()
    assert ours <= 1.01 * eager


@pytest.mark.parametrize("device", DEVICES)
def test_a_product_short_in_k_or_batched_is_not_split(device, rules_only):
    short = randn(40, 1000, device=device), randn(1000, 40, device=device)  # K < 32·40
    kernels, _ = compile_and_compare(lambda a, b: a @ b, *short)
    assert len(kernels) == 1
    batched = randn(2, 4, 1024, device=device), randn(2, 1024, 4, device=device)
    kernels, _ = compile_and_compare(lambda a, b: a @ b, *batched)
    assert len(kernels) == 1


@pytest.mark.parametrize("choice, expected", [
    ({"cublas": 1}, None),
    ({"split_k": 4}, select_algorithm.SplitK(4, templates.tile_config(16, 16, 1024, torch.float16))),
    ({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,
      "GROUP_M": 8}, templates.TileConfig(16, 32, 64, 4, 3, 8)),
])  # fmt: skip
def test_an_autotuning_choice_reads_back_as_what_it_names(choice, expected):
    assert select_algorithm._plan(choice, 16, 16, 4096, torch.float16) == expected


@pytest.mark.cuda
def test_on_the_gpu_splits_of_k_are_timed_against_the_tiles(caplog, tmp_path):
    a, b = torch.randn(256, 16384, device="cuda"), torch.randn(16384, 256, device="cuda")
    options = {**FORCED, "cache_dir": str(tmp_path)}
    a, b = a.bfloat16(), b.bfloat16()
    with caplog.at_level(logging.INFO, logger="minductor"):
        compile_and_compare(lambda a, b: a @ b, a, b, options=options, tol=0.5)
    timed = [r for r in caplog.messages if "template K in " in r and " us" in r]
    assert len(timed) == len(select_algorithm.k_splits(256, 256, 16384)) >= 2


# --- the second look: the template timed again with its epilogue fused -----------


@pytest.fixture
def second_looks(monkeypatch, tmp_path):
    """Every product with an epilogue gets a second look between two tiles, cuBLAS
    allowed; `times` sets what each variant takes (no GPU: the times are given), and
    `timed` counts the timings. Its own cache directory: the answers are kept there."""
    tiles = (templates.TileConfig(16, 16, 16, 4), templates.TileConfig(32, 16, 16, 4))
    times = {"cuBLAS": 5.0, tiles[0]: 3.0, tiles[1]: 4.0}

    def choose(a, b, allow_cublas, epilogue=False, computed=(False, False)):
        if epilogue and not any(computed):
            return select_algorithm.SecondLook(tiles, True)
        return tiles[0]

    def kernel_time(scheduler, node, internal):
        timed.append(node)
        found = [m.node for m in node.snodes if isinstance(m.node, templates.MatmulTemplate)]
        return times[found[0].tiles] if found else 0.5  # the epilogue alone: 0.5

    timed = []
    monkeypatch.setattr(select_algorithm, "kernel_time", kernel_time)
    monkeypatch.setattr(select_algorithm, "cublas_time", lambda t: times["cuBLAS"])
    options = {"cache_dir": str(tmp_path), "graph_cache": False}
    with templates.matmul_choices.using(choose, chapter=26, name="choose_tiles"), \
            config.patch(options):  # fmt: skip
        yield tiles, times, timed


LOOKED_AT = {
    "linear, bias, gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), [(33, 40), (24, 40), (24,)]),
    "bmm, scale, relu": (lambda a, b: torch.relu(a @ b * 0.5), [(3, 17, 9), (3, 9, 20)]),
    "x.t() @ w + residual": (lambda x, w, r: x.t() @ w + r, [(9, 17), (9, 12), (17, 12)]),
}  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(LOOKED_AT))
def test_a_second_look_that_finds_cublas_faster_gives_the_epilogue_its_own_kernel(
    case, device, second_looks
):
    _, times, _ = second_looks
    times["cuBLAS"] = 1.0  # 1.0 + 0.5 for the epilogue alone, against 3.0
    fn, shapes = LOOKED_AT[case]
    args = [randn(*s, device=device) for s in shapes]
    kernels, sources = compile_and_compare(fn, *args)
    assert not any(k.startswith("triton_tem") for k in kernels), kernels
    assert kernels and all(k.startswith("triton_poi") for k in kernels)
    called = "extern_kernels.bmm(" if case.startswith("bmm") else "extern_kernels.mm("
    assert called in sources[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(LOOKED_AT))
def test_a_second_look_keeps_the_fastest_tiles_with_the_epilogue(case, device, second_looks):
    tiles, times, _ = second_looks
    times[tiles[0]], times[tiles[1]] = 4.0, 3.0  # the runner-up is faster when fused
    fn, shapes = LOOKED_AT[case]
    args = [randn(*s, device=device) for s in shapes]
    kernels, sources = compile_and_compare(fn, *args)
    assert len(kernels) == 1 and kernels[0].startswith("triton_tem"), kernels
    assert "acc = tl.zeros([32, 16], tl.float32)" in sources[0]  # the second tiles
    assert "extern_kernels.mm(" not in sources[0] and "extern_kernels.bmm(" not in sources[0]


@pytest.mark.parametrize("device", DEVICES)
def test_a_product_without_an_epilogue_gets_no_second_look(device, second_looks):
    _, times, _ = second_looks
    times["cuBLAS"] = 0.1  # would win, if it were asked
    a, b = randn(17, 9, device=device), randn(9, 20, device=device)
    kernels, sources = compile_and_compare(lambda a, b: a @ b, a, b)
    assert kernels == ["triton_tem_fused_mm_0"] and "extern_kernels.mm(" not in sources[0]


@pytest.mark.parametrize("device", DEVICES)
def test_a_second_look_is_kept_on_disk_and_read_back_without_timing(device, second_looks):
    tiles, times, timed = second_looks
    times[tiles[0]], times[tiles[1]] = 4.0, 3.0
    fn, shapes = LOOKED_AT["linear, bias, gelu"]
    args = [randn(*s, device=device) for s in shapes]
    _, first = compile_and_compare(fn, *args)
    assert len(timed) == 3  # two tiles, and the epilogue alone beside cuBLAS
    times[tiles[0]] = 1.0  # would win now, if it were timed again
    _, again = compile_and_compare(fn, *args)
    assert len(timed) == 3 and again == first  # read back: the same kernel


def test_a_second_look_keeps_the_ranked_tiles_and_only_after_a_template_won():
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,
           "GROUP_M": 8}  # fmt: skip
    other = dict(cfg, BLOCK_M=32)
    ranked = [cfg, {"cublas": 1}, other, {"split_k": 2}]
    look = select_algorithm.second_look(
        {"config": cfg, "ranked": ranked}, 64, 64, 4096, torch.float16, True
    )
    assert look.tiles == (templates.TileConfig(**cfg), templates.TileConfig(**other))
    assert look.cublas
    won_by_cublas = {"config": {"cublas": 1}, "ranked": [{"cublas": 1}, cfg]}
    assert select_algorithm.second_look(won_by_cublas, 64, 64, 4096, torch.float16, True) is None
    older = select_algorithm.second_look({"config": cfg}, 64, 64, 4096, torch.float16, False)
    assert older.tiles == (templates.TileConfig(**cfg),) and not older.cublas


@pytest.mark.cuda
def test_on_the_gpu_a_template_with_an_epilogue_is_timed_again_whole(caplog, tmp_path):
    x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(384, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(384, device="cuda", dtype=torch.bfloat16)
    options = {"max_autotune": True, "cache_dir": str(tmp_path)}
    with caplog.at_level(logging.INFO, logger="minductor"):
        kernels, sources = compile_and_compare(lambda x, w, b: F.gelu(F.linear(x, w, b)),
                                               x, w, b, options=options, tol=TOL[x.dtype])
    again = [r for r in caplog.messages if "512x384 with its epilogue" in r]
    if not any("won, " in r and "cuBLAS won" not in r for r in caplog.messages):
        assert not again  # cuBLAS won the first timing: nothing to look at again
        return
    assert sum(" us" in r and "template" in r for r in again) >= 1
    assert any("cuBLAS and the epilogue's kernel" in r for r in again)
    won = again[-1]
    assert won.endswith(" won")
    cublas = "extern_kernels.mm(" in sources[0]
    assert cublas == won.endswith("cuBLAS won")
    assert cublas or kernels[0].startswith("triton_tem")
