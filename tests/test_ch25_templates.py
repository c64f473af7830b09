"""Matmul templates: a tiled Triton kernel for mm, bmm and addmm, with the pointwise
work that reads the product fused into it as its epilogue (chapter 25)."""

import logging
import math
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, FORCED, INTERPRET, TOL, compile_and_compare, randn

from minductor import extern, templates
from minductor.capture import record_compiled

pytestmark = [pytest.mark.e2e, pytest.mark.ch25]

# M, N, K of 1, 17, 33 and 65 (the tiles are at least 16: every edge is masked)
SIZES = [(1, 17, 33), (17, 1, 65), (33, 65, 1), (65, 33, 17), (1, 1, 1), (16, 32, 48)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m, n, k", SIZES, ids=lambda s: str(s))
def test_mm_of_odd_sizes_is_one_template_and_matches_eager(m, n, k, device):
    a, b = randn(m, k, device=device), randn(k, n, device=device)
    kernels, sources = compile_and_compare(lambda a, b: a @ b, a, b)
    assert len(kernels) == 1 and kernels[0].startswith("triton_tem_fused_")
    assert "acc += tl.dot(a, b" in sources[0] and "extern_kernels.mm" not in sources[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_accumulates_in_float32(dtype, device):
    """Each product of K = 300 terms is rounded once, at the end: the error stays the
    size of one rounding of the result, as eager's."""
    a, b = (
        randn(19, 300, device=device, dtype=dtype),
        randn(300, 23, device=device, dtype=dtype),
    )
    _, sources = compile_and_compare(lambda a, b: a @ b, a, b, tol=TOL[dtype])
    assert re.search(r"acc = tl.zeros\(\[\d+, \d+\], tl.float32\)", sources[0])
    exact = a.double() @ b.double()
    got = torch.compile(lambda a, b: a @ b, backend="minductor", options=FORCED)(a, b)
    one_rounding = exact.abs().max().item() * (
        2**-7 if dtype == torch.bfloat16 else 2**-10
    )
    assert (got.double() - exact).abs().max().item() <= 2 * one_rounding


OPERANDS = {
    "transposed a": (lambda a, b: a.t() @ b, [(9, 17), (9, 5)]),
    "transposed b": (lambda a, b: a @ b.t(), [(17, 9), (5, 9)]),
    "both transposed": (lambda a, b: a.t() @ b.t(), [(9, 17), (5, 9)]),
    "sliced": (lambda a, b: a[1::2, 2:] @ b[:, ::3], [(35, 20), (18, 31)]),
    "bmm": (torch.bmm, [(3, 17, 9), (3, 9, 33)]),
    "bmm, batch of 1": (torch.bmm, [(1, 5, 9), (1, 9, 7)]),
    "bmm, transposed": (lambda a, b: a @ b.transpose(1, 2), [(2, 5, 3), (2, 4, 3)]),
    "3-d @ 2-d": (lambda a, b: a @ b, [(2, 5, 7), (7, 3)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(OPERANDS))
def test_operands_are_read_through_their_strides(case, device):
    fn, shapes = OPERANDS[case]
    args = [randn(*s, device=device) for s in shapes]
    kernels, sources = compile_and_compare(fn, *args)
    assert sum(k.startswith("triton_tem") for k in kernels) == 1
    assert "extern_kernels.mm" not in sources[0]  # no copy of an operand, no cuBLAS
    assert not any(k.startswith("triton_poi_fused_clone") for k in kernels)


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_that_start_inside_their_storage_are_read_from_their_start(device):
    """An input's storage offset is in its pointer already: counted once, not twice,
    also under a view taken inside the graph (which adds its own offset)."""
    big = randn(70, 40, device=device)
    a, b = big[3:36, 5:22], big[1:18, 1:25]  # offsets 125 and 41, as inputs
    kernels, _ = compile_and_compare(lambda a, b: a @ b, a, b)
    assert kernels[0].startswith("triton_tem")
    compile_and_compare(lambda a, b: a[:, 1:] @ b[1:, :].relu(), a, b)
    a, b = big[2:35, 3:20], big[5:38, 1:9]  # (33, 17) and (33, 8)
    compile_and_compare(lambda a, b: a.t()[2:] @ b[:, 2:], a, b)


EPILOGUES = {
    "linear, bias, gelu": (
        lambda x, w, b: F.gelu(F.linear(x, w, b)),
        [(33, 40), (24, 40), (24,)],
    ),
    "addmm scaled": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0),
        [(5, 3), (5, 7), (7, 3)],
    ),
    "residual add": (lambda x, w, r: x @ w + r, [(17, 9), (9, 9), (17, 9)]),
    "a column broadcast": (lambda x, w, s: (x @ w) * s, [(17, 9), (9, 6), (17, 1)]),
    "to half": (lambda x, w: (x @ w).relu().half(), [(17, 9), (9, 6)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(EPILOGUES))
def test_pointwise_readers_fuse_as_the_epilogue(case, device):
    fn, shapes = EPILOGUES[case]
    args = [randn(*s, device=device) for s in shapes]
    kernels, _ = compile_and_compare(fn, *args)
    assert len(kernels) == 1 and kernels[0].startswith("triton_tem_fused_")


@pytest.mark.parametrize("device", DEVICES)
def test_the_product_is_not_stored_when_only_the_epilogue_reads_it(device):
    x, w = randn(17, 9, device=device), randn(9, 6, device=device)
    _, sources = compile_and_compare(lambda x, w: (x @ w).sigmoid(), x, w)
    assert sources[0].count("tl.store(") == 1  # the sigmoid's, not the product's


@pytest.mark.parametrize("device", DEVICES)
def test_a_reduction_and_a_producer_stay_out_with_their_reasons(device):
    x, w = randn(17, 9, device=device), randn(9, 9, device=device)  # x + 1 is C's size

    def logs(fn):
        torch._dynamo.reset()
        with record_compiled() as graphs:
            out = torch.compile(fn, backend="minductor", options=FORCED)(x, w)
        for got, expected in zip(out, fn(x, w), strict=True):
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        assert sum(k.startswith("triton_tem") for k in graphs[0].kernel_names) == 1
        return "\n".join(graphs[0].fusion_log)

    def later(x, w):
        return (x @ w).sum(1), x + 1  # x + 1 shares x, and C's loops

    log = logs(later)
    assert "is a reduction: a template's epilogue is pointwise" in log
    assert "fuse buf0 + buf2" in log  # x + 1, after the template: computed on its tiles
    # x * 2, read by the product alone, would be computed in the template (below)
    log = logs(lambda x, w: ((y := x * 2) @ w, y))
    assert "reads buf0[*] but buf0 writes" in log  # the template reads x * 2 whole


def test_the_rule_keeps_every_node_out_of_a_templates_kernel_before_it():
    """The fusion rule on its own: a template second (whatever the first node is), a
    template with a reduction; and the pairs it lets through."""
    from types import SimpleNamespace

    from minductor.ir import FixedLayout, InputBuffer, Pointwise

    layout = FixedLayout.contiguous(torch.device("cpu"), torch.float32, (4, 4))
    a = InputBuffer("a", layout)
    body = Pointwise(torch.device("cpu"), torch.float32, lambda i: None, (4, 4))
    cfg = templates.TileConfig(16, 16, 16, 4)
    tem = templates.MatmulTemplate("buf0", layout, body, a, a, layout, layout, cfg)
    plain = SimpleNamespace(node=a, is_reduction=lambda: False)
    reduction = SimpleNamespace(node=a, is_reduction=lambda: True)
    member = SimpleNamespace(node=tem, is_reduction=lambda: False)

    def group(*members):
        return SimpleNamespace(snodes=members, get_name=lambda: "+".join(
            m.node.name for m in members))  # fmt: skip

    rule = templates.template_epilogues
    assert "nothing fuses before it" in rule(group(plain), group(member))
    assert "nothing fuses before it" in rule(group(member), group(plain, member))
    assert "a template's epilogue is pointwise" in rule(group(member), group(reduction))
    assert rule(group(member), group(plain)) is None
    assert rule(group(plain), group(reduction)) is None  # no template: not its business


@pytest.mark.parametrize("device", DEVICES)
def test_training_through_the_template_matches_eager(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(13, 17), torch.nn.GELU(), torch.nn.Linear(17, 5)
    )
    model = model.to(device)
    ours = torch.compile(model, backend="minductor", options=FORCED)
    x = randn(7, 13, device=device)
    torch._dynamo.reset()
    with record_compiled() as graphs:
        ours(x).pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(x).pow(2).sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, atol=1e-4, rtol=1e-4, msg=name)
    kernels = [k for g in graphs for k in g.kernel_names]
    assert sum(k.startswith("triton_tem") for k in kernels) >= 5  # 2 forward, 3+ back
    assert not any("extern_kernels.mm" in g.source for g in graphs)


@pytest.mark.parametrize("device", DEVICES)
def test_what_the_template_cannot_compute_goes_to_aten_with_a_reason(device, caplog):
    a, b = randn(5, 7, device=device), randn(7, 3, device=device)
    with caplog.at_level(logging.INFO, logger="minductor"):
        _, sources = compile_and_compare(
            lambda a, b: a.double() @ b.double(), a, b, tol=1e-6
        )
    assert "extern_kernels.mm" in sources[0]
    assert "not the template: dtypes torch.float64 and torch.float64" in caplog.text
    dynamic = torch.compile(lambda a, b: a @ b, backend="minductor", options=FORCED,
                            dynamic=True)  # fmt: skip
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger="minductor"):
        with record_compiled() as graphs:
            torch.testing.assert_close(dynamic(a, b), a @ b)
    assert "not the template: sizes known only at run time" in caplog.text
    assert all("triton_tem" not in k for g in graphs for k in g.kernel_names)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [
    {},  # max_autotune off: the backends are not consulted
    {"max_autotune": True, "max_autotune_gemm_backends": "ATEN"},
])  # fmt: skip
def test_without_triton_among_the_backends_matmuls_are_cublas(options, device):
    a, b = randn(5, 7, device=device), randn(7, 3, device=device)
    kernels, sources = compile_and_compare(lambda a, b: a @ b, a, b, options=options)
    assert "extern_kernels.mm" in sources[0] and kernels == []


@pytest.mark.skipif(
    not INTERPRET, reason="on the CPU: nothing to time in the interpreter"
)
def test_aten_and_triton_in_the_interpreter_keep_cublas():
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    options = {"max_autotune": True, "max_autotune_gemm_backends": "ATEN,TRITON"}
    _, sources = compile_and_compare(lambda a, b: a @ b, a, b, options=options)
    assert "extern_kernels.mm" in sources[0]


def test_the_default_backends_are_inductors():
    from minductor.config import Config

    assert Config().max_autotune_gemm_backends == "ATEN,TRITON"
    assert Config().max_autotune is False  # the template only under max-autotune


def test_a_misspelt_backend_is_an_error():
    torch._dynamo.reset()
    options = {"max_autotune": True, "max_autotune_gemm_backends": "ATEN,CUTLASS"}
    fn = torch.compile(lambda a, b: a @ b, backend="minductor", options=options)
    with pytest.raises(Exception, match="takes ATEN and TRITON, got 'ATEN,CUTLASS'"):
        fn(torch.randn(2, 2), torch.randn(2, 2))


@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("tiles_m, tiles_n", [(1, 1), (1, 5), (7, 3), (8, 8), (17, 2)])
def test_grouped_order_visits_every_tile_once(tiles_m, tiles_n, group):
    """The program -> tile map of the template's text, evaluated in Python: a
    permutation of the tiles, across the last, shorter group of rows."""
    seen = []
    for tile in range(tiles_m * tiles_n):
        first_m = (tile // (group * tiles_n)) * group
        rows = min(tiles_m - first_m, group)
        seen.append((first_m + tile % rows, (tile % (group * tiles_n)) // rows))
    assert sorted(seen) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    lines = templates.matmul_lines(
        1, tiles_m * 16, tiles_n * 16, 16,
        templates.Operand("x", (0, 16, 1), 0), templates.Operand("y", (0, 1, 16), 0),
        templates.TileConfig(16, 16, 16, 4, GROUP_M=group), "ieee", False,
    )  # fmt: skip
    text = "\n".join(lines)
    assert f"first_m = (tile // {group * tiles_n}) * {group}" in text
    assert f"rows = tl.minimum({tiles_m} - first_m, {group})" in text


@pytest.mark.parametrize(
    "m, n, k, dtype, expected",
    [
        (1, 1, 1, torch.float32, (16, 16, 16, 4)),
        (33, 24, 40, torch.float32, (64, 32, 32, 4)),
        (4096, 4096, 4096, torch.bfloat16, (128, 128, 64, 8)),
        (16, 4096, 4096, torch.float16, (16, 128, 64, 4)),
    ],
)
def test_the_rules_tiles(m, n, k, dtype, expected):
    cfg = templates.tile_config(m, n, k, dtype)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.num_warps) == expected
    assert all(b >= 16 and math.log2(b).is_integer() for b in expected[:3])


@pytest.mark.cuda
@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str
)
def test_large_products_on_the_gpu_match_eager(dtype):
    a = torch.randn(1000, 1536, device="cuda", dtype=dtype)
    b = torch.randn(1536, 770, device="cuda", dtype=dtype)
    bias = torch.randn(770, device="cuda", dtype=dtype)
    fn = lambda a, b, c: F.relu(torch.addmm(c, a, b))  # noqa: E731
    tol = {torch.float32: 1e-2, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    kernels, _ = compile_and_compare(fn, a, b, bias, tol=tol)
    assert len(kernels) == 1 and kernels[0].startswith("triton_tem")


def test_a_template_pipelines_its_k_loop():
    lines = templates.matmul_lines(
        1, 64, 64, 256,
        templates.Operand("x", (0, 256, 1), 0), templates.Operand("y", (0, 64, 1), 0),
        templates.TileConfig(64, 64, 64, 4, num_stages=4), "ieee", False,
    )  # fmt: skip
    assert "for k in tl.range(0, 256, 64, num_stages=4):" in lines


def _mm_node(fn, *shapes):
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn)(*(torch.randn(s) for s in shapes))
    products = [n for n in gm.graph.nodes if n.target in (aten.mm.default, aten.addmm.default)]
    return products[0]  # the first product, whose readers the case is about


aten = torch.ops.aten
READERS = {  # what reads the product -> whether cuBLAS's path pays an epilogue's pass
    "relu": (lambda a, b: torch.relu(a @ b), True),
    "view then add": (lambda a, b: (a @ b).view(-1) + 1, True),
    "two pointwise readers": (lambda a, b: (lambda p: (p.sin(), p.view(-1).cos()))(a @ b), True),
    "linear then gelu": (lambda a, b: F.gelu(F.linear(a, b.t(), b[0])), True),
    "returned": (lambda a, b: a @ b, False),
    "returned and relu": (lambda a, b: (lambda p: (p, torch.relu(p)))(a @ b), False),
    "a reduction": (lambda a, b: (a @ b).sum(1), False),
    "another matmul": (lambda a, b: (a @ b) @ b, False),
}


@pytest.mark.parametrize("case", sorted(READERS))
def test_an_epilogue_is_readers_that_are_all_pointwise(case):
    fn, expected = READERS[case]
    node = _mm_node(lambda a, b: fn(a, b), (5, 4), (4, 4))
    assert extern.read_by_pointwise_ops(node) is expected


# --- prologues: an operand computed in the template, where that pays ----------------

BF16 = torch.bfloat16
# name -> (fn of (a, b), a's size, b's size, dtypes of a and b, the operand computed)
PROLOGUES = {
    # x + 1 is 1 where x is 0: past K's end the computed tile must still be zero
    "x + 1, K past a tile": (lambda a, b: (a + 1) @ b, (17, 33), (33, 65), None, "a"),
    "exp, K of 1": (lambda a, b: a.exp() @ b, (17, 1), (1, 5), None, "a"),
    "relu, M of 1": (lambda a, b: torch.relu(a) @ b, (1, 33), (33, 17), None, "a"),
    "a weight's view": (lambda a, w: a @ (w * 0.5).t(), (33, 17), (65, 17), None, "b"),
    "both": (lambda a, b: a.sin() @ b.cos(), (17, 33), (33, 65), None, "ab"),
    "a per-column scale": (lambda a, b: (a * a[0]) @ b, (17, 33), (33, 9), None, "a"),
    "batched, batch of 1": (lambda a, b: torch.bmm(a.sigmoid(), b), (1, 17, 33),
                            (1, 33, 5), None, "a"),  # fmt: skip
    "batched": (lambda a, b: torch.bmm(a, b * 2), (3, 17, 33), (3, 33, 5), None, "b"),
    "to a wider type": (lambda a, b: a.float() @ b, (17, 33), (33, 9), (BF16, None), "a"),
    "scaled, float16": (lambda a, b: (a * 0.5) @ b, (17, 65), (65, 33),
                        (torch.float16,) * 2, "a"),  # fmt: skip
    "scaled, bfloat16": (lambda a, b: (a * 0.5) @ b, (17, 65), (65, 33), (BF16,) * 2, "a"),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(PROLOGUES))
def test_a_pointwise_operand_is_computed_in_the_template(case, device):
    fn, a_size, b_size, dtypes, computed = PROLOGUES[case]
    dtypes = dtypes or (torch.float32, torch.float32)
    a = randn(*a_size, device=device, dtype=dtypes[0] or torch.float32)
    b = randn(*b_size, device=device, dtype=dtypes[1] or torch.float32)
    tol = TOL[dtypes[0]] if dtypes[0] == dtypes[1] else 1e-4
    kernels, sources = compile_and_compare(fn, a, b, tol=tol)
    assert len(kernels) == 1 and kernels[0].startswith("triton_tem_fused_")
    for side in "ab":
        assert (f"{side} = tl.where({side}_mask, " in sources[0]) is (side in computed)
        assert (f"{side}_ptrs" in sources[0]) is (side not in computed)


# name -> (fn, a's size, b's size, a's dtype): operands that stay a kernel of their own
STORED = {
    # a conversion to a narrower type reads twice what the operand holds
    "to a narrower type": (lambda a, b: a.to(BF16) @ b.to(BF16), (17, 33), (33, 9)),
    # a sum of two halves of a reads twice what it holds (a + a.flip(0) would not:
    # what counts is the bytes of the buffers read)
    "a residual add": (lambda a, b: (a[:, :33] + a[:, 33:]) @ b, (17, 66), (33, 9)),
    "read twice": (lambda a, b: ((r := a.relu()) @ b, r * 2), (17, 33), (33, 9)),
    "a gather": (lambda a, b: a[torch.arange(16, -1, -1, device=a.device)] @ b,
                 (17, 33), (33, 9)),  # fmt: skip
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(STORED))
def test_an_operand_that_would_not_pay_is_stored(case, device):
    fn, a_size, b_size = STORED[case]
    a, b = randn(*a_size, device=device), randn(*b_size, device=device)
    tol = 5e-2 if "narrower" in case else 1e-4
    kernels, sources = compile_and_compare(fn, a, b, tol=tol)
    assert len(kernels) >= 2 and "tl.where(a_mask" not in sources[0]


@pytest.mark.parametrize("device", DEVICES)
def test_prologue_fusion_off_stores_the_operand(device):
    a, b = randn(17, 33, device=device), randn(33, 9, device=device)
    options = {**FORCED, "prologue_fusion": False}
    kernels, sources = compile_and_compare(lambda a, b: (a + 1) @ b, a, b, options=options)
    assert len(kernels) == 2 and "tl.where(a_mask" not in sources[0]


@pytest.mark.parametrize("m, n, k, dtype", [
    (16, 4096, 4096, torch.bfloat16),  # decode-sized: far below the ridge
    (1024, 1024, 64, torch.bfloat16),  # attention scores: K of one head
    (1024, 1024, 1024, torch.bfloat16),  # 341 operations per byte: just above
    (896, 896, 896, torch.bfloat16),  # 299: just below
    (512, 512, 512, torch.float32),  # 85: below, for its 4-byte elements
    (8192, 4096, 4096, torch.bfloat16),  # far above
])  # fmt: skip
def test_a_prologue_is_only_for_memory_bound_products(m, n, k, dtype):
    """memory_bound against the roofline written out, on both sides of the ridge."""
    from minductor.ir import FixedLayout, InputBuffer, TensorBox

    def box(*size):
        return TensorBox(InputBuffer("x", FixedLayout.contiguous("cpu", dtype, size)))

    intensity = 2 * m * n * k / (dtype.itemsize * (m * k + k * n + m * n))
    assert templates.memory_bound(box(m, k), box(k, n)) is (intensity < templates.RIDGE)
    assert templates.memory_bound(box(3, m, k), box(3, k, n)) is (intensity < templates.RIDGE)
