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

# generated from exercises/solutions/ex03_roofline.py by tools/make_stubs.py;
# replace each NotImplementedError with your code.

# %% [markdown]
# # Exercise 3: a roofline estimate from a loop body
#
# **Difficulty:** easy to medium.
#
# **You will:** write an `ops` handler that, run once over a kernel's loop body,
# counts what one element of its output costs: the bytes it reads and writes, and the
# arithmetic it does. From those, and a GPU's two peak rates, you will estimate how long
# the kernel must take at least, and whether memory or arithmetic bounds it: the
# *roofline* model.
#
# **It builds on** chapter 3 (*The `ops` protocol*): a body is a Python function that
# calls `ops.*`, and what it means depends on the handler installed with
# `set_handler`. Chapter 3 has three handlers (evaluate, print, count); this is a
# fourth. It also uses chapter 14's `SchedulerNode.run_body`, which runs a buffer's
# body, loads and store included, under the current handler.
#
# **Why it matters.** Most of the kernels minductor generates move data and do little
# arithmetic, so their best possible time is their bytes divided by the memory
# bandwidth. The performance page measures `a*b+c` over three 4096×4096 `float32`
# tensors at 68.0 µs on an H200: 268 MB moved, 3.9 TB/s, against a peak of 4.8 TB/s.
# An estimate like yours says, before running anything, that 56 µs is the floor and
# that no amount of arithmetic tuning will help; a kernel far above its floor is the one
# to look at.

# %% [markdown]
# ## Setup

# %%
import math
import os

import torch
from torch.fx.experimental.proxy_tensor import make_fx

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported)
from minductor.lowering import GraphLowering
from minductor.ops import set_handler
from minductor.dependencies import SchedulerNode

# transcendental functions run on the GPU's special-function units, at a fraction of
# the rate of a multiply-add: we count each as this many arithmetic operations
SPECIAL = {"exp", "exp2", "log", "log2", "log1p", "expm1", "sin", "cos", "tan",
           "tanh", "erf", "sqrt", "rsqrt", "pow", "sigmoid", "atan", "asin", "acos"}
SPECIAL_COST = 4
# free in a kernel: they make constants, convert, select or compare bits
FREE = {"constant", "index_expr", "to_dtype", "where", "indirect_indexing"}


def buffers_of(fn, *args):
    """Lower fn; return its computed buffers and every buffer's dtype by name."""
    graph = GraphLowering(make_fx(fn)(*args), list(args)).lower()
    dtypes = {name: box.get_dtype() for name, box in graph.graph_inputs.items()}
    dtypes |= {buf.name: buf.get_dtype() for buf in graph.buffers}
    return graph.buffers, dtypes


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# The body of `a * b + c`, printed by chapter 3's `PrintHandler`, is what your handler
# will see, one call at a time:

# %%
a, b, c = (torch.randn(64, 32) for _ in range(3))
(buf,), _ = buffers_of(lambda a, b, c: a * b + c, a, b, c)
print(buf.data.inner_fn_str())

# %% [markdown]
# ## Part 1: the handler
#
# Write `CostHandler`. It is given every buffer's dtype by name. For one element of
# the output it adds up:
#
# * `bytes_read`: the bytes of each `load`, but each (buffer, index) pair once: a
#   kernel that reads `x` twice at the same position loads it once (chapter 17's CSE);
# * `bytes_written`: the bytes of each `store`;
# * `flops`: one for each arithmetic op (`add`, `mul`, `maximum`, ...),
#   `SPECIAL_COST` for each op in `SPECIAL`, and nothing for the ops in `FREE`.
#
# Every method may return anything (the values are never computed); `None` will do,
# except `indirect_indexing`, whose result is used as an index: return a fresh
# `sympy.Symbol`. `__getattr__` is the easy way to handle the many arithmetic ops at
# once, as chapter 3's `CountingHandler` does.


# %%
class CostHandler:
    def __init__(self, dtypes: dict[str, torch.dtype]):
        self.dtypes = dtypes
        self.bytes_read = 0
        self.bytes_written = 0
        self.flops = 0
        self.seen: set[tuple[str, str]] = set()

    def load(self, name, index):
        raise NotImplementedError("your code here")

    def store(self, name, index, value, mode=None):
        raise NotImplementedError("your code here")

    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        import sympy

        return sympy.Symbol(f"indirect{len(self.seen)}", integer=True)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def op(*args, **kwargs):
            raise NotImplementedError("your code here")

        return op


# %% [markdown]
# ## Part 2: the estimate
#
# Write `roofline(buf, dtypes, bandwidth, peak_flops)` for one computed buffer: run
# its body once under a `CostHandler` (`SchedulerNode.create(buf).run_body()`),
# scale the per-element counts by the number of elements (the product of
# `buf.get_size()`, integers here), and return a dict with `bytes`, `flops`,
# `memory_s` (bytes / bandwidth), `compute_s` (flops / peak), `seconds` (the larger
# of the two) and `bound` (`"memory"` or `"compute"`, whichever gives `seconds`).


# %%
H200 = dict(bandwidth=4.8e12, peak_flops=67e12)  # bytes/s; float32 FLOP/s, no tensor cores


def roofline(buf, dtypes, bandwidth, peak_flops):
    raise NotImplementedError("your code here")


# %% [markdown]
# ## Checks


# %%
def cost(fn, *args):
    (buf, *_), dtypes = buffers_of(fn, *args)
    handler = CostHandler(dtypes)
    with set_handler(handler):
        SchedulerNode.create(buf).run_body()
    return handler


def test_bytes_and_flops_of_a_multiply_add():
    x = [torch.randn(5, 7) for _ in range(3)]
    h = cost(lambda a, b, c: a * b + c, *x)
    got = (h.bytes_read, h.bytes_written, h.flops)
    expect(got, (12, 4, 2), "float32 a*b+c (bytes_read, bytes_written, flops)")
    half = [t.half() for t in x]  # loaded as 2 bytes, computed in float32, stored as 2
    h = cost(lambda a, b, c: a * b + c, *half)
    got = (h.bytes_read, h.bytes_written, h.flops)
    expect(got, (6, 2, 2), "float16 a*b+c (bytes_read, bytes_written, flops)")


def test_a_value_read_twice_is_loaded_once_and_broadcasts_count_per_element():
    x, row = torch.randn(6, 4), torch.randn(4)
    h = cost(lambda x: x * x + x, x)
    expect((h.bytes_read, h.flops), (4, 2), "x*x+x (bytes_read, flops)")
    h = cost(lambda x, row: x + row, x, row)  # one load of the row per element
    expect(h.bytes_read, 8, "x + row, bytes_read")


def test_transcendental_ops_cost_more_and_conversions_nothing():
    x = torch.randn(3, 3)
    h = cost(lambda x: torch.sin(x).exp() * 2, x)
    expect(h.flops, 2 * SPECIAL_COST + 1, "flops of sin(x).exp() * 2")
    h = cost(lambda x: x.to(torch.float64).to(torch.float32) + 1, x)
    expect(h.flops, 1, "flops of x.to(float64).to(float32) + 1")


def test_roofline_of_the_benchmarks_multiply_add():
    x = [torch.randn(4096, 4096) for _ in range(3)]
    (buf,), dtypes = buffers_of(lambda a, b, c: a * b + c, *x)
    r = roofline(buf, dtypes, **H200)
    expect(r["bytes"], 16 * 4096 * 4096, "bytes")
    expect(r["flops"], 2 * 4096 * 4096, "flops")
    expect(r["bound"], "memory", "bound")
    floor = 268_435_456 / 4.8e12  # 55.9 µs; measured: 68.0
    assert abs(r["seconds"] - floor) < 1e-9, (
        f"seconds: got {r['seconds']!r}, expected {floor!r}"
    )


def test_a_long_chain_of_sines_is_compute_bound():
    def chain(x):
        for _ in range(40):
            x = torch.sin(x)
        return x

    (buf,), dtypes = buffers_of(chain, torch.randn(1024))
    r = roofline(buf, dtypes, **H200)
    expect(r["flops"], 40 * SPECIAL_COST * 1024, "flops")
    expect(r["bound"], "compute", "bound")
    assert r["seconds"] == r["compute_s"] > r["memory_s"], (
        f"got seconds={r['seconds']!r}, compute_s={r['compute_s']!r}, "
        f"memory_s={r['memory_s']!r}; expected seconds == compute_s > memory_s"
    )


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. The bytes and flops of one
# element of `a * b + c`, in float32 and float16:

# %% tags=["raises-exception"]
test_bytes_and_flops_of_a_multiply_add()

# %% [markdown]
# A value read twice is loaded once; a broadcast row is loaded once per element:

# %% tags=["raises-exception"]
test_a_value_read_twice_is_loaded_once_and_broadcasts_count_per_element()

# %% [markdown]
# A transcendental op costs `SPECIAL_COST`, a conversion nothing:

# %% tags=["raises-exception"]
test_transcendental_ops_cost_more_and_conversions_nothing()

# %% [markdown]
# The roofline of the benchmark's multiply-add: memory bound, 55.9 µs at least:

# %% tags=["raises-exception"]
test_roofline_of_the_benchmarks_multiply_add()

# %% [markdown]
# Forty sines in a row are compute bound:

# %% tags=["raises-exception"]
test_a_long_chain_of_sines_is_compute_bound()

# %% [markdown]
# ## Going further
#
# 1. Reductions: `ops.reduction` combines a value into an accumulator, and a
#    reduction's body loads `rnumel` elements per output. Extend `roofline` to a
#    `Reduction` buffer (its numel times its reduction size) and estimate
#    `x.sum(1)` over 8192×2048; the performance page measured 24.9 µs on an H200.
# 2. Fused kernels: run the bodies of all the nodes of a `FusedSchedulerNode` under
#    one handler, and stop counting a store whose buffer only the fused kernel reads
#    (the scheduler's `removed_buffers`). How many bytes does fusing softmax save?
# 3. Print, for each kernel of a compiled model, its estimate next to its measured time
#    from `torch.profiler` (chapter 21's benchmark shows how to time one), and sort
#    by the ratio: the top of that list is where a compiler engineer looks first.
