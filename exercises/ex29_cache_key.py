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

# generated from exercises/solutions/ex29_cache_key.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 29: a key that misses only when it must
#
# **Difficulty:** medium. Short code; deciding what goes in is the exercise.
#
# **You will:** write the part of chapter 27's graph key that describes a tensor: the
# facts of a graph's input, and of a tensor the graph holds, that decide the code we
# generate for it. Then swap your function into the cache and watch compiles hit and
# miss through `torch.compile`.
#
# **It builds on** chapter 27 (*Compile once*): `graph_key`, its helper `_tensor`, the
# counters of hits and misses; chapter 6's constants (a one-element tensor the graph
# holds is written into the code as a number); chapter 19's wrapper, which writes
# sizes and strides into the code.
#
# ## Two ways to be wrong
#
# A key that leaves out a fact the code depends on gives a *wrong hit*: a graph gets
# another graph's code, and a wrong answer. A key that puts in a fact the code does not
# depend on gives *needless misses*: put an input's values in the key, and every new
# batch of a training loop compiles again, which is correct and useless. The checks
# below test both.

# %% [markdown]
# ## Setup

# %%
import os
import tempfile
from unittest import mock

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor import cache
from minductor.config import config


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# ## Your part
#
# Write `tensor_facts(t, held)`: a list of plain values (strings, numbers, lists) that
# says everything about the tensor `t` that the generated code depends on, and nothing
# else. `held` is `False` for a graph's input and `True` for a tensor the graph holds.
# Remember what the code reads at run time (an input's values), and what it has
# written into its text. For a held tensor, hash its values when it has at most
# `cache.SMALL` elements (`hashlib` on the bytes of `t.cpu().contiguous()` viewed as
# `torch.uint8`); a larger one is passed to the kernels like an input.

# %%
import hashlib  # noqa: E402


def tensor_facts(t: torch.Tensor, held: bool) -> list:
    raise NotImplementedError("your code here")


# %% [markdown]
# ## The checks
#
# `compiles(fn, *args)` compiles `fn` afresh with your facts in the key, in a cache
# that outlives the call (one per notebook run), and returns the result and whether the
# graph came from the disk.

# %%
CACHE_DIR = tempfile.mkdtemp(prefix="ex29_")


def compiles(fn, *args):
    torch._dynamo.reset()
    before = cache.counters.copy()
    options = {"graph_cache": True, "cache_dir": CACHE_DIR}
    with mock.patch.object(cache, "_tensor", tensor_facts), config.patch(options):
        out = torch.compile(fn, backend="minductor")(*args)
    counts = cache.counters - before
    return out, counts["hit"] > 0


def twice(fn, first, second):
    """Compile fn on the first inputs, then on the second: was the second a hit?"""
    compiles(fn, *first)
    out, hit = compiles(fn, *second)
    torch.testing.assert_close(out, fn(*second))  # never a wrong answer
    return hit


def scale(x):
    return (x * 2).sum(-1)


def test_facts_of_a_tensor():
    x = torch.randn(4, 6)
    expect(tensor_facts(x, False), tensor_facts(torch.randn(4, 6), False),
           "two inputs that differ only in their values")  # fmt: skip
    for other, what in [
        (x.half(), "dtype"), (torch.randn(4, 7), "size"), (torch.randn(6, 4).t(), "strides"),
        (torch.randn(5, 6)[1:], "offset"),
    ]:  # fmt: skip
        assert tensor_facts(other, False) != tensor_facts(x, False), f"inputs: {what}"
    two, three = torch.tensor(2.0), torch.tensor(3.0)
    assert tensor_facts(two, True) != tensor_facts(three, True), "held: small values"
    expect(tensor_facts(two, True), tensor_facts(torch.tensor(2.0), True),
           "held: the same small value")  # fmt: skip


def test_a_new_batch_hits():
    hit = twice(scale, [torch.randn(4, 6)], [torch.randn(4, 6)])
    expect(hit, True, "the same graph on a new batch of values")


def test_inputs_that_need_other_code_miss():
    x = torch.randn(4, 6)
    for other, what in [(x.half(), "dtype"), (torch.randn(4, 7), "size"),
                        (torch.randn(6, 4).t(), "strides"), (torch.randn(5, 6)[1:], "offset")]:  # fmt: skip
        expect(twice(scale, [x], [other]), False, f"an input of another {what}")


def test_a_held_constant_that_differs_misses():
    x = torch.randn(5)
    hit = twice(lambda x: x * torch.tensor(2.5), [x], [x])
    expect(hit, True, "the same held constant")
    torch._dynamo.reset()
    compiles(lambda x: x * torch.tensor(2.5), x)
    out, hit = compiles(lambda x: x * torch.tensor(4.0), x)
    expect(hit, False, "another held constant")
    torch.testing.assert_close(out, x * 4.0)


# %% [markdown]
# ## Run the checks
#
# The facts alone:

# %% tags=["raises-exception"]
test_facts_of_a_tensor()

# %% [markdown]
# A new batch of the same shape reads the graph back:

# %% tags=["raises-exception"]
test_a_new_batch_hits()

# %% [markdown]
# Inputs whose code differs compile again:

# %% tags=["raises-exception"]
test_inputs_that_need_other_code_miss()

# %% [markdown]
# A held constant is in the code, so its value is in the key:

# %% tags=["raises-exception"]
test_a_held_constant_that_differs_misses()

# %% [markdown]
# ## Going further
#
# 1. A held tensor of a million elements is named by its layout alone. Write a graph
#    whose code *would* depend on such a tensor's values. Does chapter 6 ever generate
#    one?
# 2. `requires_grad` is not among the facts. Why does an ATen graph's code not depend
#    on it, and where does it matter instead (chapter 1)?
