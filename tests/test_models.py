"""Training real models for a few steps: minductor against eager, step by step.

Each case builds a model twice with the same initial parameters, compiles one copy with
`torch.compile(model, backend="minductor")` (the optimizer stays eager), trains both for
five steps on the same batches, and compares every step's loss and the final parameters.
Five optimizer steps carry any error of the compiled forward or backward into the
parameters, and from there into the next steps' losses.

Structure is checked loosely: one forward and one backward graph (a graph handed whole
to ATen is not recorded, so it would show as a missing graph), each running kernels of
ours, and nothing falling back beyond the ops listed in ALLOWED_FALLBACKS.
"""

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import DEVICES

from minductor.capture import record_compiled

pytestmark = pytest.mark.e2e

STEPS = 5

# Nothing in these models falls back: matmuls run as extern kernels (extern_kernels.mm,
# .addmm, .bmm) and SDPA as the planned extern call to ATen's attention kernel, neither
# counted in `fallbacks`. A layer norm, softmax, GELU, embedding or cross-entropy that
# stops being lowered fails here.
ALLOWED_FALLBACKS: set[str] = set()

# (forward, backward) kernels of ours on CPU tensors (distinct kernel sources): a change
# in fusion shows up here. The GPU may choose another attention kernel, whose backward
# returns other tensors, so the pin is for the interpreter's graphs.
KERNELS = {
    "mlp": (3, 4),
    "gpt_matmul_attention": (12, 19),
    "gpt_sdpa": (7, 15),
    "recurrent": (7, 11),
    "multihead_attention": (7, 11),  # q, k, v reach attention as views: no copy
}

# fp32 throughout. Our kernels sum in a different order than ATen's (a reduction a block
# at a time), so each step's gradients differ from eager's by rounding, about 1e-6
# relative, and five optimizer steps carry that along: the largest differences measured
# are 5e-7 in a loss and 4e-7 in a parameter. 1e-5 leaves a margin of twenty and still
# sees an error as small as swapping GELU for its tanh approximation, which moves the
# GPT's parameters by up to 7e-5 after five AdamW steps.
ATOL = RTOL = 1e-5


# --- the models -------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, features=13, hidden=24, classes=5):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x, targets):
        logits = self.fc2(F.gelu(self.fc1(x)))
        return F.cross_entropy(logits, targets)


class CausalSelfAttention(nn.Module):
    def __init__(self, channels, heads, sdpa):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        # no bias: the keys' bias has a gradient that is zero up to rounding (softmax
        # ignores a shift shared by a row), and AdamW turns rounding noise into steps
        # of +-lr, so eager and compiled would part for no fault of the compiler
        self.qkv = nn.Linear(channels, 3 * channels, bias=False)
        self.proj = nn.Linear(channels, channels)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, T)
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            y = att @ v  # (B, H, T, D)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class GPT(nn.Module):
    """One pre-norm transformer block between embeddings and a language-model head."""

    def __init__(self, vocab=37, context=7, channels=16, heads=2, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, channels)
        self.wpe = nn.Embedding(context, channels)
        self.ln1 = nn.LayerNorm(channels)
        self.attn = CausalSelfAttention(channels, heads, sdpa)
        self.ln2 = nn.LayerNorm(channels)
        self.mlp = nn.Sequential(
            nn.Linear(channels, 4 * channels),
            nn.GELU(),
            nn.Linear(4 * channels, channels),
        )
        self.ln_f = nn.LayerNorm(channels)
        self.lm_head = nn.Linear(channels, vocab, bias=False)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class Recurrent(nn.Module):
    """A GRU cell and an LSTM cell, unrolled over a short sequence. Their gates are cut
    apart with unsafe_split, a view whose schema does not say so."""

    def __init__(self, features=5, hidden=6, classes=3):
        super().__init__()
        self.gru = nn.GRUCell(features, hidden)
        self.lstm = nn.LSTMCell(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x, targets):
        h = x.new_zeros(x.shape[0], self.gru.hidden_size)
        state = (h, h)
        for t in range(x.shape[1]):
            h = self.gru(x[:, t], h)
            state = self.lstm(h, state)
        return F.cross_entropy(self.out(state[0]), targets)


class Attention(nn.Module):
    """nn.MultiheadAttention between a padded embedding and a head: the attention's
    query is computed in another memory order than the one our kernels write, so the
    attention call must be handed the strides the graph recorded."""

    def __init__(self, vocab=20, channels=16, heads=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, channels, padding_idx=0)
        self.attn = nn.MultiheadAttention(channels, heads, batch_first=True)
        self.ln = nn.LayerNorm(channels, bias=False)
        self.head = nn.Linear(channels, vocab)

    def forward(self, idx, targets):
        x = self.embed(idx)
        y, _ = self.attn(x, x, x, need_weights=False)
        logits = self.head(F.gelu(self.ln(x + y), approximate="tanh"))
        flat = logits.flatten(0, 1)
        return F.cross_entropy(flat, targets.flatten(), label_smoothing=0.1)


# --- training, twice ----------------------------------------------------------------


def mlp_batches(device, batch=9, features=13, classes=5):
    def draw():
        x = torch.randn(batch, features, device=device)
        return x, torch.randint(0, classes, (batch,), device=device)

    return [draw() for _ in range(STEPS)]


def token_batches(device, batch=3, context=7, vocab=37):
    def tokens():
        return torch.randint(0, vocab, (batch, context), device=device)

    return [(tokens(), tokens()) for _ in range(STEPS)]


def train(model, batches, make_optimizer):
    optimizer = make_optimizer(model.parameters())
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        loss = model(*batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def structure(graphs):
    """Per compiled graph: how many kernels of ours it runs, and what fell back."""
    return [(len(g.kernel_names), sorted(set(g.fallbacks))) for g in graphs]


def sequence_batches(device, batch=4, length=3, features=5, classes=3):
    def draw():
        x = torch.randn(batch, length, features, device=device)
        return x, torch.randint(0, classes, (batch,), device=device)

    return [draw() for _ in range(STEPS)]


def train_and_compare(model, batches, make_optimizer, allowed=ALLOWED_FALLBACKS):
    torch._dynamo.reset()
    reference = copy.deepcopy(model)
    initial = {name: p.detach().clone() for name, p in model.named_parameters()}
    compiled = torch.compile(model, backend="minductor")  # shares model's parameters
    with record_compiled() as graphs:
        losses = train(compiled, batches, make_optimizer)
    expected = train(reference, batches, make_optimizer)

    torch.testing.assert_close(losses, expected, atol=ATOL, rtol=RTOL)
    # a mapping: a failure names the parameter
    parameters, expected_parameters = (
        dict(m.named_parameters()) for m in (model, reference)
    )
    torch.testing.assert_close(parameters, expected_parameters, atol=ATOL, rtol=RTOL)
    unchanged = [n for n, p in parameters.items() if torch.equal(p, initial[n])]
    assert not unchanged, f"no gradient reached {unchanged}"

    # one forward and one backward graph, compiled once and reused for every step
    shape = structure(graphs)
    assert len(shape) == 2, shape
    for kernels, fallbacks in shape:
        assert kernels > 0, f"a graph ran no kernel of ours: {shape}"
        assert set(fallbacks) <= allowed, shape
    return shape


# --- the cases ----------------------------------------------------------------------


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("optimizer", [sgd, adamw], ids=["sgd", "adamw"])
def test_mlp_trains_like_eager(optimizer, device):
    torch.manual_seed(0)
    shape = train_and_compare(MLP().to(device), mlp_batches(device), optimizer)
    if device == "cpu":
        assert tuple(k for k, _ in shape) == KERNELS["mlp"], shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "sdpa, optimizer",  # two of the four pairs in `make test`, the others slow
    [
        pytest.param(False, sgd, id="matmul_attention-sgd"),
        pytest.param(True, adamw, id="sdpa-adamw"),
        pytest.param(False, adamw, id="matmul_attention-adamw", marks=pytest.mark.slow),
        pytest.param(True, sgd, id="sdpa-sgd", marks=pytest.mark.slow),
    ],
)
def test_gpt_block_trains_like_eager(sdpa, optimizer, device):
    torch.manual_seed(0)
    model = GPT(sdpa=sdpa).to(device)
    shape = train_and_compare(model, token_batches(device), optimizer)
    if device == "cpu":
        name = "gpt_sdpa" if sdpa else "gpt_matmul_attention"
        assert tuple(k for k, _ in shape) == KERNELS[name], shape


@pytest.mark.parametrize("device", DEVICES)
def test_multihead_attention_trains_like_eager(device):
    torch.manual_seed(0)
    model = Attention().to(device)
    batches = token_batches(device, batch=2, context=7, vocab=20)
    # SGD: the keys' bias has a gradient of zero up to rounding (see GPT), which AdamW
    # would turn into steps of +-lr
    shape = train_and_compare(model, batches, sgd)
    if device == "cpu":
        assert tuple(k for k, _ in shape) == KERNELS["multihead_attention"], shape


@pytest.mark.parametrize("device", DEVICES)
def test_recurrent_cells_train_like_eager(device):
    torch.manual_seed(0)
    model = Recurrent().to(device)
    # on a GPU the cells' pointwise parts are ATen's fused CUDA kernels, which have no
    # decomposition: they fall back (logged), their matmuls are still ours
    fused = [
        "aten._thnn_fused_gru_cell.default",
        "aten._thnn_fused_lstm_cell.default",
        "aten._thnn_fused_gru_cell_backward.default",
        "aten._thnn_fused_lstm_cell_backward_impl.default",
    ]
    allowed = set() if device == "cpu" else set(fused)
    shape = train_and_compare(model, sequence_batches(device), sgd, allowed)
    if device == "cpu":
        assert tuple(k for k, _ in shape) == KERNELS["recurrent"], shape
