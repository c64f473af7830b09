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
# # Exercise 21: score fusions and pair them greedily
#
# **Difficulty:** medium.
#
# **You will:** write the profitability half of chapter 15's fusion loop: the score
# of a pair of nodes (`FusionScore`: bytes saved, then proximity), the candidate
# pairs of a round sorted best first, and the greedy walk that fuses each pair whose
# two nodes are still free, asking a veto before each. Checks replay every round of
# the real `Scheduler` on small graphs (layer norm, softmax, a chain, siblings) and
# compare your log with its `fusion_log`, line for line, then try hand-made ties.
#
# **It builds on** chapter 15 (*The scheduler: fusion*):
# `SchedulerNode`, `FusedSchedulerNode`, `names` and `read_names`, `score_fusion`
# and `FusionScore`, `_fuse_once` and the fusion log; chapter 2 (*Decompositions*)
# and chapter 6 (*Lowering*) for the graphs it schedules.
#
# **Why it matters.** Fusion is greedy: a node fused into one group is gone for the
# others of its round, so the order in which legal pairs are tried decides which
# kernels exist. A score that prefers the wrong pair leaves a large intermediate in
# memory, written and read back. Inductor's `Scheduler.fuse_nodes_once` in
# `torch/_inductor/scheduler.py` does the same walk: it collects
# `get_possible_fusions`, sorts them by `score_fusion_key` (which calls
# `InductorChoices.score_fusion` in `torch/_inductor/choices.py`, a tuple led by
# the memory saved), and fuses each pair that `can_fuse` allows and
# `will_fusion_create_cycle` does not forbid.

# %% [markdown]
# ## Setup
#
# The scheduler's nodes are reduced to what profitability needs, a `Candidate`: the
# node's name (a fused node's joins its members', `buf0_buf1`), the buffers it
# touches (those it writes and those it reads) and its *position*, the place of its
# earliest member in the original order. `nbytes` maps each buffer to its size in
# bytes (0 when unknown). `Recorder` is the book's `Scheduler`, which at the start of
# each round notes the candidates and byte counts, and after it the lines the round
# added to the fusion log.

# %%
import os
from typing import NamedTuple

import torch
from torch.fx.experimental.proxy_tensor import make_fx

# CPU tensors: Triton's interpreter runs their kernels, on a machine with a GPU too
os.environ.setdefault("TRITON_INTERPRET", "1")
import minductor  # noqa: E402, F401  (before Triton is imported; registers the backend)
from minductor.capture import aten_passes
from minductor.config import config
from minductor.decompositions import decomposition_table
from minductor.lowering import GraphLowering
from minductor.scheduler import FusionScore, Scheduler


class Candidate(NamedTuple):
    name: str
    buffers: frozenset[str]  # written or read
    position: int


class Round(NamedTuple):
    nodes: list[Candidate]  # in the scheduler's order this round
    nbytes: dict[str, int]
    log: list[str]  # what the round logged
    scored: dict[tuple[str, str], FusionScore]  # the book's score of each pair
    leaves: int  # scalar leaves (paired apart; none in these graphs)


class Recorder(Scheduler):
    def _fuse_once(self):
        if not hasattr(self, "rounds"):
            self.rounds, self.scored = [], {}
        nodes = [
            Candidate(n.get_name(), n.names | n.read_names, self._position(n))
            for n in self.nodes
        ]
        nbytes = {b: self._numbytes(b) for c in nodes for b in c.buffers}
        start, self.scored = len(self.fusion_log), {}
        leaves = len(self._scalar_leaves())
        fused = super()._fuse_once()
        log = self.fusion_log[start:]
        self.rounds.append(Round(nodes, nbytes, log, self.scored, leaves))
        return fused

    def score_fusion(self, a, b):
        score = super().score_fusion(a, b)
        self.scored[a.get_name(), b.get_name()] = score
        return score


def schedule(fn, *args, realize_opcount_threshold=None):
    """Chapter 15's `schedule`, with the recording scheduler."""
    gm = make_fx(fn, decomposition_table=decomposition_table())(*args)
    for rewrite in aten_passes:
        rewrite(gm)
    saved = config.realize_opcount_threshold
    if realize_opcount_threshold is not None:
        config.realize_opcount_threshold = realize_opcount_threshold
    try:
        return Recorder(GraphLowering(gm, list(args)).lower())
    finally:
        config.realize_opcount_threshold = saved


# %% [markdown]
# The graphs the checks replay. `siblings` reduces one input three ways (two sums
# over rows and one over columns, which cannot share a kernel with them) and adds
# one to it; `chain` realizes every step (each is read twice); in `greedy`, four
# nodes read `x` (3200 bytes): a row sum (`buf0`), that sum plus `small` (`buf1`,
# which shares only 64 bytes with it) and two pointwise results (`buf2`, `buf3`). The
# pairs that share `x` tie on bytes, and proximity puts the neighbours `buf2 + buf3`
# first; `buf0` is then left to `buf1`, for 64 bytes.


# %%
def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


def softmax(x):
    return torch.softmax(x, -1)


def siblings(x, y):
    return x.sum(1), (x * y).sum(1), x.sum(0), x + 1


def chain(x):
    for _ in range(3):
        x = x.sin() * x
    return x


def greedy(x, small):
    t = (x * 2).sin()
    return x.sum(1) + small, t + small[:, None], t.cos()


GRAPHS = {
    "layer norm": lambda: schedule(
        layer_norm, torch.randn(33, 65), torch.randn(65), torch.randn(65)
    ),
    "softmax": lambda: schedule(softmax, torch.randn(20, 37)),
    "siblings": lambda: schedule(siblings, torch.randn(6, 40), torch.randn(6, 40)),
    "chain": lambda: schedule(chain, torch.randn(7, 9), realize_opcount_threshold=0),
    "greedy": lambda: schedule(greedy, torch.randn(16, 50), torch.randn(16)),
}
for name, make in GRAPHS.items():
    print(f"{name}:", make().fusion_log)

# %% [markdown]
# ## Part 1: the score
#
# Write `score(a, b, nbytes)`: a `FusionScore(bytes_saved, proximity)` for fusing
# candidates `a` and `b`. `bytes_saved` adds up the bytes of every buffer both
# touch, each once (an intermediate no longer written and read back; an input read
# once instead of twice); `proximity` is minus the distance between their
# positions. `FusionScore` is a `NamedTuple`, so scores compare term by term: bytes
# first, proximity among equals.


# %%
def score(a, b, nbytes):
    # BEGIN SOLUTION
    shared = a.buffers & b.buffers
    saved = sum(nbytes.get(name, 0) for name in shared)
    return FusionScore(saved, -abs(a.position - b.position))
    # END SOLUTION


# %% [markdown]
# ## Part 2: the candidate pairs, best first
#
# Write `ranked_pairs(nodes, nbytes)`: every pair `(a, b)` of `nodes` that share at
# least one buffer, `a` earlier in the list than `b`, as `(score, a, b)` triples
# sorted best first. Ties are broken, as in the book, by the list: between two pairs
# of equal score, the one whose first node comes earlier in `nodes` goes first, and
# between two of equal score and the same first node, the one whose second node
# comes earlier. (A stable sort does the second for you if the pairs start in list
# order.)


# %%
def ranked_pairs(nodes, nbytes):
    # BEGIN SOLUTION
    pairs = [
        (score(a, b, nbytes), k, a, b)
        for k, a in enumerate(nodes)
        for b in nodes[k + 1 :]
        if a.buffers & b.buffers
    ]
    pairs.sort(key=lambda p: (p[0], -p[1]), reverse=True)
    return [(s, a, b) for s, _, a, b in pairs]
    # END SOLUTION


# %% [markdown]
# ## Part 3: one greedy round
#
# Write `fusion_round(nodes, nbytes, veto)`: walk the ranked pairs, best first.
# Skip a pair if either node was already fused in this round. Otherwise ask
# `veto(a, b)`, which returns `None` (the pair may fuse) or the reason it may not
# (chapter 15's `can_fuse`, and its check on memory held longer). Return the lines
# the round logs, exactly as the scheduler writes them:
#
# ```
# fuse buf1 + buf2 (saves 2080 bytes)
# cannot fuse buf0 with buf3: different numel: 6 vs 40
# ```
#
# A refused pair leaves both nodes free for the pairs after it.


# %%
def fusion_round(nodes, nbytes, veto):
    # BEGIN SOLUTION
    used, log = set(), []
    for s, a, b in ranked_pairs(nodes, nbytes):
        if a.name in used or b.name in used:
            continue
        reason = veto(a, b)
        if reason is not None:
            log.append(f"cannot fuse {a.name} with {b.name}: {reason}")
            continue
        log.append(f"fuse {a.name} + {b.name} (saves {s.bytes_saved} bytes)")
        used |= {a.name, b.name}
    return log
    # END SOLUTION


# %% [markdown]
# ## Checks
#
# A replayed round gives your functions the candidates and byte counts the
# scheduler had. The veto answers what the scheduler decided for that pair (from its
# log); asked about a pair the scheduler never weighed, the check fails, since a
# correct walk asks about exactly the pairs it does.


# %%
def veto_from(round_):
    decided = {}
    for line in round_.log:
        if line.startswith("fuse "):
            a, b = line[len("fuse ") :].split(" (saves ")[0].split(" + ")
            decided[a, b] = None
        elif line.startswith("cannot fuse "):
            pair, reason = line[len("cannot fuse ") :].split(": ", 1)
            a, b = pair.split(" with ")
            decided[a, b] = reason

    def veto(a, b):
        assert (a.name, b.name) in decided, (
            f"veto({a.name}, {b.name}): got a question about a pair the scheduler "
            f"never weighed, expected one of {sorted(decided)}"
        )
        return decided[a.name, b.name]

    return veto


def replay(name):
    scheduler = GRAPHS[name]()
    assert scheduler.rounds, f"{name}: no fusion round ran"
    for r in scheduler.rounds:
        assert r.leaves == 0, f"{name}: got {r.leaves} scalar leaves, expected none"
    return scheduler


def check_scores(name):
    for k, r in enumerate(replay(name).rounds):
        by_name = {c.name: c for c in r.nodes}
        for (a, b), expected in r.scored.items():
            got = score(by_name[a], by_name[b], r.nbytes)
            assert got == expected, (
                f"{name}, round {k}: score({a}, {b}): got {got!r}, "
                f"expected {expected!r}"
            )


def check_ranking(name):
    for k, r in enumerate(replay(name).rounds):
        got = ranked_pairs(r.nodes, r.nbytes)
        pairs = {(a.name, b.name): s for s, a, b in got}
        assert pairs == r.scored, (
            f"{name}, round {k}: pairs and scores: got {pairs!r}, expected {r.scored!r}"
        )
        index = {c.name: i for i, c in enumerate(r.nodes)}
        keys = [(s, -index[a.name], -index[b.name]) for s, a, b in got]
        assert keys == sorted(keys, reverse=True), (
            f"{name}, round {k}: order: got {[(a.name, b.name) for _, a, b in got]}, "
            f"expected best first, ties by the list"
        )


def check_rounds(name):
    scheduler = replay(name)
    for k, r in enumerate(scheduler.rounds):
        got = fusion_round(r.nodes, r.nbytes, veto_from(r))
        assert got == r.log, f"{name}, round {k}: got {got!r}, expected {r.log!r}"
    return scheduler


def test_scores_match_the_scheduler():
    for name in GRAPHS:
        check_scores(name)


def test_ranking_matches_the_scheduler():
    for name in GRAPHS:
        check_ranking(name)


def test_layer_norm_and_softmax_rounds():
    for name in ("layer norm", "softmax"):
        scheduler = check_rounds(name)
        fused = [line for line in scheduler.fusion_log if line.startswith("fuse")]
        assert len(fused) == 2, f"{name}: got {fused!r}, expected two fusions"


def test_chain_and_siblings_rounds():
    check_rounds("chain")
    scheduler = check_rounds("siblings")
    refused = [line for line in scheduler.fusion_log if "cannot fuse" in line]
    assert refused, f"siblings: got {scheduler.fusion_log!r}, expected a refusal"


def test_greedy_order_matters():
    scheduler = check_rounds("greedy")
    got = scheduler.rounds[0].log
    expected = [
        "fuse buf2 + buf3 (saves 3200 bytes)",
        "fuse buf0 + buf1 (saves 64 bytes)",
    ]
    assert got == expected, f"greedy, round 0: got {got!r}, expected {expected!r}"


def c(name, buffers, position):
    return Candidate(name, frozenset(buffers.split()), position)


def never(a, b):
    return None


def test_hand_made_ties():
    nbytes = {"x": 400, "y": 4000, "z": 0, "w": 40}
    # three siblings of x at 0, 1, 2: the neighbours first, the earlier pair first
    nodes = [c("n0", "x o0", 0), c("n1", "x o1", 1), c("n2", "x o2", 2)]
    got = [(a.name, b.name) for _, a, b in ranked_pairs(nodes, nbytes)]
    expected = [("n0", "n1"), ("n1", "n2"), ("n0", "n2")]
    assert got == expected, f"siblings: got {got!r}, expected {expected!r}"
    got = fusion_round(nodes, nbytes, never)
    expected = ["fuse n0 + n1 (saves 400 bytes)"]
    assert got == expected, f"siblings, one round: got {got!r}, expected {expected!r}"
    # equal score, same first node: the second node's place in the list decides
    nodes = [c("a", "x", 2), c("b", "x", 1), c("c", "x", 3)]
    got = [(a.name, b.name) for _, a, b in ranked_pairs(nodes, nbytes)]
    expected = [("a", "b"), ("a", "c"), ("b", "c")]
    assert got == expected, f"equal distances: got {got!r}, expected {expected!r}"
    # bytes beat proximity; buffers shared twice count twice, not the same one twice
    nodes = [c("p", "x y", 0), c("q", "x w", 1), c("r", "x y w", 5)]
    got = [(s, a.name, b.name) for s, a, b in ranked_pairs(nodes, nbytes)]
    expected = [
        (FusionScore(4400, -5), "p", "r"),
        (FusionScore(440, -4), "q", "r"),
        (FusionScore(400, -1), "p", "q"),
    ]
    assert got == expected, f"bytes first: got {got!r}, expected {expected!r}"
    # a shared buffer of unknown size is still a candidate; none shared, none
    nodes = [c("u", "z", 0), c("v", "z", 1), c("t", "o", 2)]
    got = [(s, a.name, b.name) for s, a, b in ranked_pairs(nodes, nbytes)]
    expected = [(FusionScore(0, -1), "u", "v")]
    assert got == expected, f"unknown sizes: got {got!r}, expected {expected!r}"


def test_a_refusal_frees_both_nodes():
    nbytes = {"x": 400, "y": 40}
    nodes = [c("n0", "x y", 0), c("n1", "x", 1), c("n2", "y", 2)]

    def veto(a, b):
        return "no" if (a.name, b.name) == ("n0", "n1") else None

    got = fusion_round(nodes, nbytes, veto)
    expected = ["cannot fuse n0 with n1: no", "fuse n0 + n2 (saves 40 bytes)"]
    assert got == expected, f"got {got!r}, expected {expected!r}"


# %% [markdown]
# ## Run the checks
#
# One check a cell; a failure says which graph, which round and which pair. Your
# score of every pair the scheduler weighed, in every round of the five graphs:

# %%
test_scores_match_the_scheduler()

# %% [markdown]
# Your candidate pairs are the scheduler's, sorted best first with its tie rule:

# %%
test_ranking_matches_the_scheduler()

# %% [markdown]
# Layer norm and softmax, round by round: your log is the scheduler's, and each
# ends as one kernel after two fusions:

# %%
test_layer_norm_and_softmax_rounds()

# %% [markdown]
# A chain of realized steps, and siblings, one of which the veto refuses:

# %%
test_chain_and_siblings_rounds()

# %% [markdown]
# A graph where the order decides: of the pairs that tie on bytes the neighbours
# fuse first, which leaves `buf0` a pair worth 64 bytes:

# %%
test_greedy_order_matters()

# %% [markdown]
# Hand-made ties: neighbours before distant pairs, the list's order among equals,
# bytes before proximity, and buffers of unknown size:

# %%
test_hand_made_ties()

# %% [markdown]
# A pair the veto refuses leaves both of its nodes free for the pairs after it:

# %%
test_a_refusal_frees_both_nodes()

# %% [markdown]
# ## Going further
#
# 1. The score counts a shared input's bytes as saved, although with a cache the
#    second read of a small input may be nearly free. Give inputs a weight below 1
#    and intermediates a weight of 2 (written and read back), and find a graph of the
#    book's tests whose kernels change.
# 2. Inductor's `FusionScore` has more terms ahead of the bytes
#    (`InductorChoices.score_fusion` in `torch/_inductor/choices.py`): one that
#    tries prologue fusions into templates last, and `node_type_score`, which prefers
#    pairs that are both reductions or both not. Add the second ahead of
#    `bytes_saved` and build a graph whose round changes.
# 3. The walk is greedy per round. For a round's candidates, find the set of
#    disjoint pairs that saves the most bytes (a maximum-weight matching) and
#    compare its total with the greedy one on random candidate lists.
