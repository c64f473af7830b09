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

# %% [markdown]
# # Exercise 4: a backend that reports what it was given
#
# **Difficulty:** easy.
#
# **You will:** write a `torch.compile` backend of your own that wraps minductor's
# compiler and records, for every graph Dynamo hands it, the Python-level calls in
# it, and for every graph AOTAutograd derives from it (forward, backward), the ATen
# ops in it. With it you will count graph breaks, watch decompositions happen, and
# see the backward graph arrive long after the forward was compiled.
#
# **It builds on** chapter 1 (*Capture*): a backend is a function
# `(gm, example_inputs) -> callable`; `minductor_backend` wraps `compile_fx` in
# `aot_autograd` with our decomposition table and the min-cut partitioner;
# `record_compiled` collects what `compile_fx` produced.
#
# **Why it matters.** A graph break splits one function into several graphs, and
# nothing fuses across the split: each graph is compiled alone, with its own kernels,
# and every value crossing the break goes through memory. In the first check below,
# `torch.sin(x) * 2` and `+ 1` would share one kernel; with a break between them
# they are two kernels, and the intermediate makes a round trip (`8n` bytes more for
# `n` float32 elements). A backend that reports is how you find such breaks, and how
# you see what the compiler proper is really given: not `torch.nn.functional.gelu`,
# but the ATen ops that are left after AOTAutograd and the decompositions.

# %% [markdown]
# ## Setup

# %%
import os
from dataclasses import dataclass, field

import torch

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)

# these import Triton: after minductor, which has chosen the interpreter on a CPU
import torch.nn.functional as F
from functorch.compile import min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd
from torch.fx.experimental.proxy_tensor import make_fx

from minductor.capture import compile_fx, record_compiled
from minductor.decompositions import decomposition_table


def torch_calls(gm):
    """The calls in a Dynamo graph: functions by name, methods as '.name'."""
    calls = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            calls.append(getattr(node.target, "__name__", str(node.target)))
        elif node.op == "call_method":
            calls.append("." + node.target)
    return calls


@dataclass
class Report:
    dynamo_graphs: list[list[str]] = field(default_factory=list)  # torch_calls each
    aten_graphs: list[tuple[str, list[str]]] = field(default_factory=list)


def expect(got, expected, what):
    """A check: fail with both values when `got != expected`."""
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


# %% [markdown]
# A Dynamo graph holds the calls of your Python code, as written:

# %%
def show(gm, example_inputs):
    print(torch_calls(gm))
    return gm.forward


torch._dynamo.reset()
torch.compile(lambda x: F.hardswish(x).sum(), backend=show)(torch.randn(4))

# %% [markdown]
# ## Part 1: the ATen ops of a graph
#
# The graphs AOTAutograd passes to its compilers are FX graphs too, but every
# `call_function` node's target is an ATen `OpOverload`, such as
# `torch.ops.aten.mul.Tensor`, whose `str` is `"aten.mul.Tensor"`. Write
# `aten_ops(gm)`: those names, in the order of the graph's nodes (placeholders and the
# output node are not ops).


# %%
def aten_ops(gm):
    # BEGIN SOLUTION
    return [
        str(node.target)
        for node in gm.graph.nodes
        if node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
    ]
    # END SOLUTION


# %% [markdown]
# ## Part 2: the backend
#
# Write `reporting_backend(report)`, which returns a backend. Each time Dynamo calls
# it, it must
#
# 1. append `torch_calls(gm)` to `report.dynamo_graphs`;
# 2. do what `minductor_backend` does (chapter 1, *The backend*): hand the graph to
#    `aot_autograd` with our `decomposition_table()`, the min-cut partitioner and
#    `keep_inference_input_mutations=True`, with two compilers that each call
#    `compile_fx`;
# 3. but first, in each of those compilers, append `(kind, aten_ops(gm))` to
#    `report.aten_graphs`, with `kind` `"forward"` or `"backward"`. (Without
#    gradients, AOTAutograd compiles only one graph, with the forward compiler.)


# %%
def reporting_backend(report):
    def backend(gm, example_inputs):
        # BEGIN SOLUTION
        report.dynamo_graphs.append(torch_calls(gm))

        def compiler(kind):
            def compile(aten_gm, aten_inputs):
                report.aten_graphs.append((kind, aten_ops(aten_gm)))
                return compile_fx(aten_gm, aten_inputs)

            return compile

        return aot_autograd(
            fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"),
            decompositions=decomposition_table(),
            partition_fn=min_cut_rematerialization_partition,
            keep_inference_input_mutations=True,
        )(gm, example_inputs)
        # END SOLUTION

    return backend


# %% [markdown]
# ## Checks


# %%
def run_reported(fn, *args):
    """Compile fn afresh with the reporting backend; return (out, report, graphs)."""
    torch._dynamo.reset()
    report = Report()
    with record_compiled() as graphs:
        out = torch.compile(fn, backend=reporting_backend(report))(*args)
    return out, report, graphs


def test_aten_ops_of_a_traced_graph():
    gm = make_fx(lambda x, y: torch.sin(x) * y + 1)(torch.randn(3), torch.randn(3))
    expected = ["aten.sin.default", "aten.mul.Tensor", "aten.add.Tensor"]
    expect(aten_ops(gm), expected, "aten_ops of sin(x) * y + 1")


def test_a_graph_break_makes_two_graphs():
    def fn(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return y + 1

    x = torch.randn(7, 3)
    out, report, graphs = run_reported(fn, x)
    torch.testing.assert_close(out, fn(x))
    expect(report.dynamo_graphs, [["sin", "mul"], ["add"]], "dynamo_graphs")
    expected = [
        ("forward", ["aten.sin.default", "aten.mul.Tensor"]),
        ("forward", ["aten.add.Tensor"]),
    ]
    expect(report.aten_graphs, expected, "aten_graphs")
    # minductor compiled both: one kernel each, where one graph would have had one
    expect([len(g.kernel_names) for g in graphs], [1, 1], "kernels per graph")


def test_decompositions_happen_between_dynamo_and_aten():
    def fn(x):
        return F.hardswish(x).sum()

    x = torch.randn(5, 9)
    out, report, graphs = run_reported(fn, x)
    torch.testing.assert_close(out, fn(x))
    expect(report.dynamo_graphs, [["hardswish", ".sum"]], "dynamo_graphs")
    expect(len(report.aten_graphs), 1, f"aten graphs ({report.aten_graphs})")
    ((kind, ops),) = report.aten_graphs
    expect(kind, "forward", "kind of the aten graph")
    assert "aten.hardswish.default" not in ops, (
        f"aten ops: got {ops}, expected hardswish decomposed (no aten.hardswish)"
    )
    assert "aten.clamp.default" in ops and ops[-1] == "aten.sum.default", (
        f"aten ops: got {ops}, expected an aten.clamp.default and aten.sum.default last"
    )
    expect(graphs[0].fallbacks, [], "fallbacks")


def test_training_reports_the_backward_when_it_runs():
    def fn(x, w):
        return F.gelu(x @ w).sum()

    x = torch.randn(6, 5, requires_grad=True)
    w = torch.randn(5, 3, requires_grad=True)
    out, report, graphs = run_reported(fn, x, w)
    kinds = [kind for kind, _ in report.aten_graphs]
    expect(kinds, ["forward"], "graphs reported before backward()")  # not yet
    expect(len(graphs), 1, "graphs compiled before backward()")
    with record_compiled() as later:
        out.backward()
    kinds = [kind for kind, _ in report.aten_graphs]
    expect(kinds, ["forward", "backward"], "graphs reported after backward()")
    # minductor compiled the backward, at its first run
    expect(len(later), 1, "graphs compiled by backward()")
    backward = report.aten_graphs[1][1]
    # grad of x, grad of w
    expect(backward.count("aten.mm.default"), 2, f"mm in the backward ({backward})")

    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    fn(x2, w2).backward()
    torch.testing.assert_close(out, fn(x2, w2))
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says what it compared. `aten_ops` of a graph traced
# with `make_fx`:

# %%
test_aten_ops_of_a_traced_graph()

# %% [markdown]
# A graph break makes two Dynamo graphs, two forward graphs and two kernels:

# %%
test_a_graph_break_makes_two_graphs()

# %% [markdown]
# `hardswish` reaches Dynamo's graph whole and the ATen graph decomposed:

# %%
test_decompositions_happen_between_dynamo_and_aten()

# %% [markdown]
# With gradients, the backward graph is reported and compiled when `backward()`
# first runs, and the gradients are eager's:

# %%
test_training_reports_the_backward_when_it_runs()

# %% [markdown]
# ## What to try next
#
# 1. Count graph breaks in a small model of your own: `print`, `.item()`, a
#    data-dependent `if` and a call into NumPy each break the graph. Which ones does
#    `torch._dynamo.explain(fn)(*args)` agree with?
# 2. Add the saved tensors to the report: in the forward graph, the outputs beyond
#    the function's own are what the backward needs. Report their shapes and bytes,
#    and compare `min_cut_rematerialization_partition` with
#    `functorch.compile.default_partition`.
# 3. Let the backend refuse: return `gm.forward` (eager) for a graph with fewer than
#    two ops. Does a graph that small ever repay compiling it?
