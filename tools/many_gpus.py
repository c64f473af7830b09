"""Chapter 28 on two GPUs of one host (or a group of one on one GPU), with NCCL: compiled collectives, a
sequence-parallel block, DDP, the overlap pass, and a tensor-parallel Llama block,
against eager (and Inductor).

    python tools/many_gpus.py [--json OUT.json]

Each rank is a process (torch.multiprocessing); rank 0 writes the JSON. Times are
medians over rounds run in turns (the order reversed each round), milliseconds per
step, CUDA-synchronised.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

c10d = torch.ops._c10d_functional


def _close(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max() / (b.abs().max() + 1e-6)) if a.numel() else 0.0


def _timed(fns: dict, rounds: int = 7, reps: int = 20) -> dict:
    times = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            dist.barrier()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(reps):
                fns[k]()
            torch.cuda.synchronize()
            times[k].append((time.perf_counter() - start) / reps * 1e3)
    return {k: {"ms": statistics.median(v), "spread": [min(v), max(v)]}
            for k, v in times.items()}  # fmt: skip


def collectives(rank: int, out: dict) -> None:
    import minductor  # noqa: F401
    from minductor.capture import record_compiled

    world = dist.group.WORLD.group_name
    x = torch.arange(35.0, device="cuda").reshape(5, 7) * (rank + 1) - 3
    n = dist.get_world_size()
    split = [4 // n] * n
    ops = {
        "all_reduce": lambda t: c10d.all_reduce(t, "sum", world),
        "all_gather_into_tensor": lambda t: c10d.all_gather_into_tensor(t, n, world),
        "reduce_scatter_tensor": lambda t: c10d.reduce_scatter_tensor(
            torch.cat([t + k for k in range(n)]), "sum", n, world),
        "all_to_all_single": lambda t: c10d.all_to_all_single(t[:4], split, split, world),
    }  # fmt: skip
    for name, start in ops.items():

        def fn(t, start=start):
            return torch.cos(c10d.wait_tensor(start(t * 2)))

        torch._dynamo.reset()
        with record_compiled() as graphs:
            got = torch.compile(fn, backend="minductor")(x)
        out[f"collective {name}"] = {"error": _close(got, fn(x)),
                                     "fallbacks": graphs[0].fallbacks}  # fmt: skip


def mismatch(rank: int, out: dict) -> None:
    """A rank whose tensor has another shape: one clear error on every rank."""
    world = dist.group.WORLD.group_name
    n = dist.get_world_size()

    def fn(t):
        return c10d.wait_tensor(c10d.all_gather_into_tensor(t, n, world)) + 1

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend="minductor")(torch.randn(5 + rank, 7, device="cuda"))
        out["mismatch"] = {"raised": None}
    except Exception as why:  # noqa: BLE001
        out["mismatch"] = {"raised": str(why).splitlines()[0][:300]}


def _block(x, p, group):
    full = funcol.all_gather_tensor_autograd(x, 0, group)
    q, k, v = full @ p["q"], full @ p["k"], full @ p["v"]
    att = torch.softmax(q @ k.t() / math.sqrt(q.shape[-1]), dim=-1) @ v
    h = full + att
    h = h + torch.nn.functional.gelu(h @ p["up"]) @ p["down"]
    return funcol.reduce_scatter_tensor_autograd(h, "sum", 0, group)


def block(rank: int, out: dict) -> None:
    torch.manual_seed(0)
    d = 256
    parts = {k: torch.randn(*s, device="cuda") / 16 for k, s in
             [("q", (d, d)), ("k", (d, d)), ("v", (d, d)), ("up", (d, 4 * d)),
              ("down", (4 * d, d))]}  # fmt: skip
    runs = {}
    for how in ("eager", "minductor", "inductor"):
        p = {k: v.clone().requires_grad_() for k, v in parts.items()}
        torch.manual_seed(1 + rank)
        x = torch.randn(511, d, device="cuda", requires_grad=True)
        fn = _block
        if how != "eager":
            torch._dynamo.reset()
            fn = torch.compile(_block, backend=how)
        loss = (fn(x, p, dist.group.WORLD) ** 2).sum()
        loss.backward()
        runs[how] = (loss, x.grad, {k: v.grad for k, v in p.items()})
    ref = runs["eager"]
    for how in ("minductor", "inductor"):
        got = runs[how]
        errs = [_close(got[0], ref[0]), _close(got[1], ref[1])]
        errs += [_close(got[2][k], ref[2][k]) for k in ref[2]]
        out[f"block {how}"] = {"error": max(errs)}


class Mlp(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self, d=1024, n=8):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Mlp(d) for _ in range(n))
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        for b in self.blocks:
            x = b(self.norm(x))
        return x


def ddp(rank: int, out: dict) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps, losses = {}, {}
    for how in ("eager", "minductor", "inductor"):
        torch.manual_seed(0)
        model = DDP(Net().cuda().bfloat16(), device_ids=[rank])
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        torch.manual_seed(1 + rank)
        x = torch.randn(16, 256, 1024, device="cuda", dtype=torch.bfloat16)
        run = model if how == "eager" else torch.compile(model, backend=how)

        def step(run=run, opt=opt, x=x):
            loss = run(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        losses[how] = [step().item() for _ in range(3)]  # compiles, then trains
        steps[how] = step
    out["ddp losses"] = losses
    out["ddp step ms"] = _timed(steps)


def overlap(rank: int, out: dict) -> None:
    import minductor  # noqa: F401

    world = dist.group.WORLD.group_name
    g = torch.randn(256 * 1024 * 1024 // 2, device="cuda", dtype=torch.bfloat16)  # 256 MB
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def matmuls(a):
        h = a
        for _ in range(6):
            h = torch.tanh(h @ a)
        return h

    def fn(g, a):
        started = c10d.all_reduce(g, "sum", world)
        h = a
        for _ in range(6):
            h = torch.tanh(h @ a)  # needs nothing from the other rank
        return c10d.wait_tensor(started) * 2, h

    def eager_waiting_at_once(g, a):
        done = c10d.wait_tensor(c10d.all_reduce(g, "sum", world))
        h = a
        for _ in range(6):
            h = torch.tanh(h @ a)
        return done * 2, h

    runs = {
        "eager, wait at once": lambda: (eager_waiting_at_once(g, a), torch.cuda.synchronize()),
        "eager, wait last": lambda: (fn(g, a), torch.cuda.synchronize()),
        "matmuls alone": lambda: (matmuls(a), torch.cuda.synchronize()),
        "all-reduce alone": lambda: (
            c10d.wait_tensor(c10d.all_reduce(g, "sum", world)), torch.cuda.synchronize()),
    }
    from minductor.capture import record_compiled

    torch._dynamo.reset()
    calls = []
    for on in (False, True):
        options = {"reorder_for_overlap": on}
        # the graph waits at once, as written: only the pass can move work before it
        f = torch.compile(eager_waiting_at_once, backend="minductor", options=options)
        with record_compiled() as graphs:
            f(g, a)
        source = graphs[0].source if graphs else ""
        body = source[source.find("def call("):].split("\n\n")[0].splitlines()
        calls.append([line.strip()[:90] for line in body if "(" in line])
        # each call waited for: calls back to back would let the next all-reduce
        # overlap this one's matmuls whatever the order within the graph
        runs[f"overlap {'on' if on else 'off'}"] = lambda f=f: (
            f(g, a), torch.cuda.synchronize())
    out["overlap step ms"] = _timed(runs)
    out["overlap calls"] = {"off": calls[0], "on": calls[1]}


def tp_llama(rank: int, out: dict) -> None:
    """The gloo test's tensor-parallel Llama block at a real size, in bf16: loss and
    gradients against eager, one Dynamo graph (a forward and a backward), every
    collective ours, and the step time (forward and backward) of eager, minductor with
    the overlap pass on and off, and Inductor."""
    import sys
    from pathlib import Path

    from torch.distributed.device_mesh import init_device_mesh

    import minductor  # noqa: F401
    from minductor.capture import record_compiled

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_ch28_distributed import (
        LlamaBlock,
        _call_of,
        _full,
        _overlapped,
        parallelize_llama,
    )

    d, heads, hidden, seq = 4096, 32, 11008, 2048  # Llama 2 7B's layer, 2048 tokens
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    torch.manual_seed(1)  # the same input on every rank: attention's is replicated
    x = torch.randn(1, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compilers = {
        "eager": None,
        "minductor": ("minductor", {"reorder_for_overlap": True}),
        "minductor, overlap off": ("minductor", {"reorder_for_overlap": False}),
        "inductor": ("inductor", None),
    }
    results, steps = {}, {}
    found = out["tp_llama"] = {}  # one entry: its errors are bf16's, not float32's
    for how, compiler in compilers.items():
        torch.manual_seed(0)
        with torch.device("cuda"):
            block = LlamaBlock(d, heads, hidden, seq).to(torch.bfloat16)
        model = parallelize_llama(block, mesh)
        run = model
        if compiler is not None:
            backend, options = compiler  # no reset: the variants timed below stay
            run = torch.compile(model, backend=backend, options=options)
        torch._dynamo.utils.counters.clear()

        def step(run=run, model=model):
            loss = run(x).float().pow(2).mean()
            loss.backward()
            grads = [p.grad for p in model.parameters()]
            for p in model.parameters():
                p.grad = None
            grad_x, x.grad = x.grad, None
            return loss, grad_x, grads

        with record_compiled() as graphs:
            loss, grad_x, grads = step()
        results[how] = (loss, grad_x, [_full(g) for g in grads])
        steps[how] = step
        if compiler is None:
            continue
        made = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        entry = {"dynamo graphs": made}
        if backend == "minductor":
            calls = [_call_of(g) for g in graphs]
            entry |= {
                "compiled graphs": len(graphs),
                "fallbacks": [str(f) for g in graphs for f in g.fallbacks],
                "all_reduces": [
                    len(re.findall(r"all_reduce_?\.default\(", c)) for c in calls],
                "run while a collective is in flight": [_overlapped(c) for c in calls],
            }  # fmt: skip
        ref = results["eager"]
        entry["error"] = {
            "loss": _close(loss, ref[0]),
            "grad x": _close(grad_x, ref[1]),
            "grads": max(_close(a, b) for a, b in zip(results[how][2], ref[2])),
        }
        found[how] = entry
    results.clear()
    found["step ms"] = _timed(steps)


def failing_rank(rank: int, out: dict) -> None:
    """Both ranks run a compiled step; then rank 1 stops, as a failed rank would. Rank
    0's next step waits until its group's timeout (5 s): the error it gets (or NCCL's
    watchdog ending the process) is written down. Run it alone: the group is dead."""
    import minductor  # noqa: F401

    short = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=5))
    name = short.group_name

    def step(t):
        return c10d.wait_tensor(c10d.all_reduce(t * 2, "sum", name)) + 1

    torch._dynamo.reset()
    compiled = torch.compile(step, backend="minductor")
    x = torch.ones(5, device="cuda")
    out["failing_rank first step"] = compiled(x).tolist()
    if rank == 1:
        return
    start = time.time()
    try:
        compiled(x)
        torch.cuda.synchronize()
        out["failing_rank"] = {"raised": None}
    except Exception as why:  # noqa: BLE001
        out["failing_rank"] = {"raised": str(why)[:600]}
    out["failing_rank"]["seconds"] = round(time.time() - start, 1)
    print(json.dumps(out["failing_rank"]), flush=True)


PARTS = ("collectives", "block", "ddp", "overlap", "tp_llama", "mismatch")


def worker(rank: int, world_size: int, store_path: str, result: str,
           parts: tuple = PARTS) -> None:  # fmt: skip
    torch.cuda.set_device(rank)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=world_size,
                            device_id=torch.device("cuda", rank),
                            timeout=datetime.timedelta(seconds=300))  # fmt: skip
    out: dict = {}
    for part in [globals()[name] for name in parts]:
        start = time.time()
        try:
            part(rank, out)
        except Exception as why:  # noqa: BLE001  (reported, the next part runs)
            out[part.__name__] = {"failed": repr(why)[:800]}
        out[f"{part.__name__} seconds"] = round(time.time() - start, 1)
    if rank == 0:
        with open(result, "w") as f:
            json.dump(out, f, indent=1)
    if "failing_rank" in parts:
        os._exit(0)  # a group whose collective failed cannot be torn down cleanly
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="many-gpus.json")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="which parts, comma-separated; failing_rank runs alone")  # fmt: skip
    args = parser.parse_args()
    parts = tuple(args.parts.split(","))
    gpus = min(2, torch.cuda.device_count())
    assert gpus >= 1, "this probe needs a GPU (two for the real thing)"
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        torch.multiprocessing.spawn(worker, args=(gpus, store, args.json, parts), nprocs=gpus)
    with open(args.json) as f:
        out = json.load(f)
    out |= {"date": datetime.date.today().isoformat(),
            "device": torch.cuda.get_device_name(), "gpus": gpus,
            "torch": torch.__version__}  # fmt: skip
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
