# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# generated from exercises/solutions/ex31_split_k.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 31: splitting K, the rule and the views
#
# **Difficulty:** medium.
#
# **You will:** write the two halves of splitting a matmul along `K`. First the rule,
# `splits_to_try(m, n, k)`: the numbers of slices worth timing for a product of
# `(m, k) @ (k, n)`, in the order they are tried. Then the views, `slice_strides(size_a,
# stride_a, size_b, stride_b, s)`: the sizes and strides under which `A` and `B` read as
# a batch of `s` slices of `K`, with no copy. Checks compare your rule with hand-made
# cases on both sides of each of its edges and with the chapter's, your views with the
# slices cut out by PyTorch (for contiguous and transposed operands), and then compile
# weight gradients whose split uses your two functions, in Triton (its interpreter on
# a CPU), against eager PyTorch.
#
# **It builds on** chapter 26 (*Choosing by measuring*): `k_splits`, `SplitK`,
# `split_layouts` and `split_k_product`, and the knobs `decompose_k_threshold` and
# `num_decompose_k_splits`; chapter 25 for the template and `matmul_choices`; chapter 1
# for `record_compiled`.
#
# **Why it matters.** A weight gradient, `Xᵀ · dY`, has `K` = the batch's tokens:
# tens of thousands, against `M` and `N` of a few hundred. Its tiles are few, and each
# walks all of `K`: most SMs idle while a few work. Cut into slices, `K` becomes a batch
# of shorter products that fill the GPU, summed afterwards. Inductor calls it
# *decompose-K* (`decompose_k` in `torch/_inductor/kernel/mm.py`, with its rule in
# `torch/_inductor/utils.py`, `use_decompose_k_choice` and `get_k_splits`). Which slices
# to try is a rule with several edges, and the slices are views whose strides must be
# exactly right: a wrong stride is a wrong answer, not a crash.

# %% [markdown]
# ## Setup

# %%
from unittest import mock

import torch

import minductor  # noqa: F401  (before Triton is imported; the interpreter on a CPU)
from minductor import select_algorithm, templates
from minductor.capture import record_compiled
from minductor.config import config
from minductor.ir import FixedLayout, as_exprs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FORCED = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}

# %% [markdown]
# ## Part 1: the rule
#
# Write `splits_to_try(m, n, k, threshold, most)`. A product is worth splitting only
# when `K` is at least `threshold` times both `M` and `N`; otherwise return `[]`. A
# number of slices `s` is allowed when
#
# * `2 <= s <= 256`, and `s` is at most `k // m` and at most `k // n`;
# * `s` divides `k` (every slice has the same length, so no slice needs a mask of its
#   own);
# * each slice is at least 128 long (a shorter one leaves a tile's `K` loop almost
#   empty).
#
# Order the allowed counts: first those whose slice length is a power of two, then
# those whose slice length is a multiple of 32, then the rest; within each group, fewer
# slices first. Return the first `most`.

# %%
def splits_to_try(m: int, n: int, k: int, threshold: int = 32, most: int = 5):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Part 2: the views
#
# `A` is `(M, K)` with strides `stride_a`, `B` is `(K, N)` with strides `stride_b`
# (any strides: a transposed weight is read through its own). Write
# `slice_strides(size_a, stride_a, size_b, stride_b, s)`, returning `((size, stride) of
# A, (size, stride) of B)` such that `A` read under the first is the batch `(s, M, P)`
# whose slice `j` is `A[:, j·P : (j+1)·P]` (`P = K / s`), and `B` read under the
# second is `(s, P, N)` whose slice `j` is `B[j·P : (j+1)·P, :]`. No element is copied:
# each slice starts where the one before ended, along `K`.

# %%
def slice_strides(size_a, stride_a, size_b, stride_b, s: int):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks


# %%
def expect(got, expected, what):
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def test_the_rule_on_both_sides_of_its_edges():
    # K against threshold * max(M, N): 4096 = 32 * 128 splits, 4095 does not
    expect(splits_to_try(128, 128, 4096), [2, 4, 8, 16, 32], "(128, 128, 4096)")
    expect(splits_to_try(128, 128, 4095), [], "(128, 128, 4095): K < 32 * 128")
    expect(splits_to_try(128, 127, 4096), [2, 4, 8, 16, 32], "(128, 127, 4096)")
    # slices of at least 128: K = 256 allows 2, K = 255 nothing (and 255 is odd)
    expect(splits_to_try(1, 1, 256), [2], "(1, 1, 256)")
    expect(splits_to_try(1, 1, 255), [], "(1, 1, 255)")
    # K = 32 * M exactly splits (slices of 128, a power of two, come first), one less not
    expect(splits_to_try(100, 7, 3200), [25, 2, 4, 5, 10], "(100, 7, 3200)")
    expect(splits_to_try(100, 7, 3199), [], "(100, 7, 3199): K < 32 * 100")
    # powers of two first, then multiples of 32, then the rest, fewer slices first
    expect(splits_to_try(5, 5, 30030), [2, 3, 5, 6, 7], "(5, 5, 30030)")
    expect(splits_to_try(3, 5, 1000), [2, 4, 5], "(3, 5, 1000)")
    expect(splits_to_try(8, 8, 7 * 128), [7, 2, 4], "(8, 8, 896): slices of 128 first")
    expect(splits_to_try(16, 16, 4096, most=2), [2, 4], "most=2")
    expect(splits_to_try(16, 16, 4096, threshold=300), [], "threshold=300: 4096 < 4800")


def test_the_rule_is_the_chapters():
    for m, n, k in [(16, 16, 4096), (41, 24, 4096), (64, 64, 2048), (64, 64, 2047),
                    (2, 300, 9600), (1, 1, 12288), (33, 17, 5005)]:  # fmt: skip
        expect(splits_to_try(m, n, k), select_algorithm.k_splits(m, n, k), (m, n, k))


def slices_by_torch(x: torch.Tensor, s: int, along: int) -> torch.Tensor:
    """x cut into s slices along `along` by PyTorch, stacked: the batch expected."""
    return torch.stack(torch.chunk(x, s, dim=along))


def test_the_views_read_the_slices():
    m, n, k, s = 5, 3, 12, 4
    base_a, base_b = torch.arange(m * k).float(), torch.arange(k * n).float() + 1000
    cases = {  # name: (A, B) as tensors with their own strides
        "both contiguous": (base_a.view(m, k), base_b.view(k, n)),
        "A transposed": (base_a.view(k, m).t(), base_b.view(k, n)),
        "B transposed": (base_a.view(m, k), base_b.view(n, k).t()),
        "both transposed": (base_a.view(k, m).t(), base_b.view(n, k).t()),
    }
    for name, (a, b) in cases.items():
        (sa, ta), (sb, tb) = slice_strides(a.shape, a.stride(), b.shape, b.stride(), s)
        got_a = a.as_strided(sa, ta, a.storage_offset())
        got_b = b.as_strided(sb, tb, b.storage_offset())
        torch.testing.assert_close(got_a, slices_by_torch(a, s, 1), msg=f"A, {name}")
        torch.testing.assert_close(got_b, slices_by_torch(b, s, 0), msg=f"B, {name}")
        product = torch.bmm(got_a, got_b).sum(0)
        torch.testing.assert_close(product, a @ b, msg=f"sum of products, {name}")


def your_split_layouts(av: FixedLayout, bv: FixedLayout, s: int):
    """The chapter's split_layouts, made of your slice_strides."""
    sizes = [[int(x) for x in v.size] for v in (av, bv)]
    strides = [[int(x) for x in v.stride] for v in (av, bv)]
    (sa, ta), (sb, tb) = slice_strides(sizes[0], strides[0], sizes[1], strides[1], s)
    a3 = FixedLayout(av.device, av.dtype, as_exprs(sa), as_exprs(ta), av.offset)
    b3 = FixedLayout(bv.device, bv.dtype, as_exprs(sb), as_exprs(tb), bv.offset)
    return a3, b3


def compiled_with_yours(fn, *args):
    """fn compiled with the template forced, its K split by your rule and views."""
    def yours(m, n, k):
        return splits_to_try(
            m, n, k, config.decompose_k_threshold, config.num_decompose_k_splits
        )

    torch._dynamo.reset()
    with (
        mock.patch.object(select_algorithm, "k_splits", yours),
        mock.patch.object(select_algorithm, "split_layouts", your_split_layouts),
        record_compiled() as graphs,
    ):
        out = torch.compile(fn, backend="minductor", options=FORCED)(*args)
    return out, [k for g in graphs for k in g.kernel_names]


def test_weight_gradients_split_by_your_rule_match_eager():
    torch.manual_seed(0)
    cases = {  # name: (fn, args)
        "x.t() @ dy": (lambda x, dy: x.t() @ dy,
                       (torch.randn(1024, 17), torch.randn(1024, 9))),
        "a @ b, then relu": (lambda a, b: torch.relu(a @ b),
                             (torch.randn(13, 2048), torch.randn(2048, 20))),
        "a @ w.t()": (lambda a, w: a @ w.t(),
                      (torch.randn(7, 1536), torch.randn(11, 1536))),
    }  # fmt: skip
    for name, (fn, args) in cases.items():
        args = [a.to(DEVICE) for a in args]
        got, kernels = compiled_with_yours(fn, *args)
        torch.testing.assert_close(got, fn(*args), atol=1e-3, rtol=1e-3, msg=name)
        expect(len(kernels), 2, f"{name}: kernels (the sliced products, then their sum)")
        expect(kernels[0].startswith("triton_tem_"), True, f"{name}: {kernels[0]}")


def test_a_product_short_in_k_is_one_template():
    a, b = torch.randn(40, 1000, device=DEVICE), torch.randn(1000, 40, device=DEVICE)
    got, kernels = compiled_with_yours(lambda a, b: a @ b, a, b)
    torch.testing.assert_close(got, a @ b, atol=1e-3, rtol=1e-3)
    expect(len(kernels), 1, "kernels of a product whose K < 32 * 40")


# %% [markdown]
# Your rule, on both sides of each edge: `K` at 32 times the larger of `M` and `N` and
# one less, slices of 128 and of 127, the order of the three groups, and the knobs:

# %% tags=["raises-exception"]
test_the_rule_on_both_sides_of_its_edges()

# %% [markdown]
# Your rule against the chapter's `k_splits`, on products it has not seen:

# %% tags=["raises-exception"]
test_the_rule_is_the_chapters()

# %% [markdown]
# Your views, read with `as_strided`, against the slices PyTorch cuts, for contiguous
# and transposed operands; and the sum of the slices' products against the product:

# %% tags=["raises-exception"]
test_the_views_read_the_slices()

# %% [markdown]
# Weight gradients and products compiled with your rule and your views in place of the
# chapter's: two kernels (the template over the slices, in `float32`, then the sum),
# equal to eager:

# %% tags=["raises-exception"]
test_weight_gradients_split_by_your_rule_match_eager()

# %% [markdown]
# And a product too short in `K` to split stays one template:

# %% tags=["raises-exception"]
test_a_product_short_in_k_is_one_template()

# %% [markdown]
# ## Going further
#
# 1. The rule never tries a count of slices that does not divide `K`. What would a
#    split into slices of unequal length need, in the template's masks and in the sum?
# 2. The partial products cost `s · M · N` numbers in `float32`, written once and read
#    once. For `M = N = 768` and `K = 32768`, at what `s` do they cost as many bytes as
#    the operands in `bfloat16`?
# 3. A batched product (`bmm`) is never split here. How would the views of Part 2
#    change for an `A` of `(B, M, K)`, and what would the sum reduce over?
