"""Chapter 8's build_on_the_device: tensors made on the CPU only to be copied to a
device are made on the device.

The decisions are checked on ATen graphs traced with fake tensors, the meta device
standing for the GPU; the values, against eager, on a GPU (tests marked cuda).
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import minductor  # noqa: F401  (registers the backend)
from minductor.capture import record_compiled
from minductor.factories import build_on_the_device

pytestmark = pytest.mark.ch08


def _traced(fn, *shapes):
    inputs = [torch.randn(*s, device="meta") for s in shapes]
    return make_fx(fn, tracing_mode="fake")(*inputs)


def _devices(gm):
    """Each call's device argument, or its value's device, by op name."""
    found = {}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        value = n.meta.get("val")
        device = n.kwargs.get("device", getattr(value, "device", None))
        found.setdefault(n.target.__name__, []).append(str(device))
    return found


def causal(x):
    mask = torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bool).tril().to(x.device)
    return x.masked_fill(~mask, 0.0)


def test_a_mask_is_made_on_the_device_and_its_copy_goes():
    gm = _traced(causal, (3, 5, 5))
    build_on_the_device(gm)
    devices = _devices(gm)
    assert devices["ones.default"] == ["meta"]
    assert devices["tril.default"] == ["meta"]
    assert "_to_copy.default" not in devices  # same dtype: the copy went


def test_a_copy_that_converts_stays_within_the_device():
    def f(x):
        return x + torch.arange(5).to(x.device, torch.float32)

    gm = _traced(f, (3, 5))
    build_on_the_device(gm)
    devices = _devices(gm)
    (arange,) = [d for op, d in devices.items() if op.startswith("arange")]
    assert arange == ["meta"]
    assert devices["_to_copy.default"] == ["meta"]  # int64 -> float32, on the device


@pytest.mark.parametrize(
    "name, fn",
    [
        # the CPU's generator is eager's: the GPU's would draw other numbers
        ("random", lambda x: x + torch.randn(5).to(x.device)),
        # also read on the CPU: returned there
        ("also returned", lambda x: (x + (m := torch.ones(5)).to(x.device), m)),
        # made from an input, which lives where the caller put it
        ("from an input", lambda x: x + torch.ones(5).add(x.sum().cpu()).to(x.device)),
    ],
)
def test_what_stays_on_the_cpu(name, fn):
    gm = _traced(fn, (3, 5))
    before = _devices(gm)
    build_on_the_device(gm)
    after = _devices(gm)
    assert after == before, name
    assert any(d == "meta" for d in after["_to_copy.default"])


def test_a_constant_is_copied_once_at_compile_time():
    """torch.tensor([294]).to(x.device): a constant the graph holds, then a copy."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    c = graph.get_attr("c")
    moved = graph.call_function(
        torch.ops.aten._to_copy.default, (c,), {"device": torch.device("meta")}
    )
    graph.output(graph.call_function(torch.ops.aten.sub.Tensor, (moved, x)))
    root = torch.nn.Module()
    root.c = torch.tensor([294])
    gm = torch.fx.GraphModule(root, graph)
    c.meta["val"] = root.c
    moved.meta["val"] = root.c.to("meta")
    with FakeTensorMode(allow_non_fake_inputs=True):  # as when Dynamo compiles
        build_on_the_device(gm)
    (const,) = [n for n in gm.graph.nodes if n.op == "get_attr"]
    moved_constant = getattr(gm, const.target)
    assert moved_constant.device.type == "meta"
    assert not isinstance(moved_constant, FakeTensor)  # a real copy, made once
    assert not [n for n in gm.graph.nodes if n.target is torch.ops.aten._to_copy.default]


# ---- values, on a GPU -------------------------------------------------------------


CASES = [
    ("causal mask", causal, (4, 7, 7)),
    ("arange as float", lambda x: x * torch.arange(7).to(x.device, x.dtype), (3, 7)),
    ("full, then a dtype", lambda x: x + torch.full((7,), 2.5).to(x.device).half(),
     (2, 7)),
    ("literal", lambda x: torch.tensor([294.0]).to(x.device) - x, (5,)),
    ("random stays", lambda x: x + torch.rand(7).to(x.device) * 0, (2, 7)),
]


@pytest.mark.cuda
@pytest.mark.parametrize("name, fn, shape", CASES, ids=[c[0] for c in CASES])
def test_cuda_matches_eager_and_leaves_no_cpu_op(name, fn, shape):
    torch._dynamo.reset()
    x = torch.randn(*shape, device="cuda")
    with record_compiled() as graphs:
        got = torch.compile(fn, backend="minductor")(x)
    torch.testing.assert_close(got, fn(x))
    (graph,) = graphs
    body = graph.source.split("def call")[1]
    assert ("cpu" in body) == (name == "random stays"), body
