#!/usr/bin/env python3
"""Time to the first training step, cold and warm, each in a new process.

For each model and compiler, a new Python process compiles one training step with
every cache empty (Triton's, Inductor's, minductor's: a fresh directory), then a second
new process does the same with the directories the first one filled. Each reports the
seconds from the compiled call to the end of the step (imports and model building not
counted), and the step's loss. Rounds repeat this in turns, the compilers' order
reversed each round. Inductor runs with its own caches as they ship (FX graph cache,
AOTAutograd cache); minductor with its graph cache (chapter 27). With --artifacts, a
third new process starts from empty directories again, given only the cache artifacts
the cold one saved (`save_cache_artifacts` / `load_cache_artifacts`, torch's or ours):
another machine's warm start.

    python tools/warm_start.py --models gpt2 resnet50 --rounds 2 --json out.json
    python tools/warm_start.py --models gpt2 --tiny --backends minductor   # on a CPU

A compiler may carry minductor's knobs after a colon, so that two settings run in
turns: `--backends minductor:static_launch=true minductor:static_launch=false`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(model_name: str, variant: str, dtype: str, tiny: bool) -> None:
    import torch

    import minductor  # noqa: F401  (registers the backend)
    from minductor.config import config
    from minductor.harness.models import build, on_device, step

    config.cache_dir = os.environ["MINDUCTOR_CACHE_DIR"]
    backend, _, knobs = variant.partition(":")
    options = os.environ.get("WARM_START_OPTIONS", "").split(",") + knobs.split(",")
    for option in filter(None, options):
        name, value = option.split("=")
        setattr(config, name, json.loads(value))  # a knob of minductor's, as JSON
    device = "cuda" if torch.cuda.is_available() else "cpu"
    carried = torch.compiler if backend == "inductor" else minductor
    loading = 0.0
    if os.environ.get("WARM_START_LOAD"):
        start = time.perf_counter()
        with open(os.environ["WARM_START_LOAD"], "rb") as f:
            blob = f.read()
        if blob:
            carried.load_cache_artifacts(blob)
        loading = time.perf_counter() - start
    model, inputs = build(model_name, training=True, tiny=tiny)
    kind = dict(fp32=torch.float32, bf16=torch.bfloat16)[dtype]
    model = model.to(device, kind).train()
    inputs = on_device(inputs, device, kind)
    compiled = torch.compile(model, backend=backend)
    if device == "cuda":
        torch.cuda.synchronize()
    profile = os.environ.get("WARM_START_PROFILE")
    if profile:  # where the first step's time goes, written beside the results
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    start = time.perf_counter()
    out = step(compiled, inputs, training=True)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if profile:
        profiler.disable()
        write_profile(profiler, profile)
    loss = out["loss"] if "loss" in out else out["logits"].float().mean()
    if os.environ.get("WARM_START_SAVE"):
        saved = carried.save_cache_artifacts()  # torch's may be None: nothing recorded
        with open(os.environ["WARM_START_SAVE"], "wb") as f:
            f.write(saved[0] if saved else b"")
    result = {"seconds": seconds, "loss": float(loss.detach()), "loading": loading}
    print("RESULT " + json.dumps(result), flush=True)


def write_profile(profiler, path: str) -> None:
    """The functions that took the most time, inside and in themselves."""
    import io
    import pstats

    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(40)
    with open(path, "w") as f:
        f.write(text.getvalue())


def run_child(model: str, backend: str, args, root: str, **extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, MINDUCTOR_GRAPH_CACHE="1", **extra,
               WARM_START_OPTIONS=args.options,
               TRITON_CACHE_DIR=os.path.join(root, "triton"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
               MINDUCTOR_CACHE_DIR=os.path.join(root, "minductor"))  # fmt: skip
    argv = [sys.executable, __file__, "--child", model, backend, args.dtype]
    argv += ["--tiny"] if args.tiny else []
    done = subprocess.run(argv, env=env, capture_output=True, text=True,
                          timeout=args.timeout)  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": done.stderr.strip().splitlines()[-1:] or ["no output"]}


def profiling(args, k: int, model: str, backend: str, start: str) -> dict:
    if not args.profile:
        return {}
    name = f"profile-{model}-{backend.replace(':', '-')}-{start}-{k + 1}.txt"
    return dict(WARM_START_PROFILE=os.path.join(args.profile, name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "resnet50"])
    parser.add_argument("--backends", nargs="+", default=["inductor", "minductor"])
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--artifacts", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json")
    parser.add_argument("--options", default="",
                        help="minductor's knobs, NAME=JSON,... (static_launch=false)")
    parser.add_argument("--profile", metavar="DIR", help="cProfile each step into DIR")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "BACKEND", "DTYPE"))
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.tiny)
        return 0
    rows = []
    for k in range(args.rounds):
        backends = args.backends if k % 2 == 0 else args.backends[::-1]
        for model in args.models:
            for backend in backends:
                root = tempfile.mkdtemp(prefix="warm_start_")
                blob = os.path.join(root, "artifacts.bin")
                saving = dict(WARM_START_SAVE=blob) if args.artifacts else {}
                cold = run_child(model, backend, args, root, **saving,
                                 **profiling(args, k, model, backend, "cold"))  # fmt: skip
                warm = run_child(model, backend, args, root,
                                 **profiling(args, k, model, backend, "warm"))  # fmt: skip
                row = dict(round=k + 1, model=model, backend=backend, cold=cold,
                           warm=warm)  # fmt: skip
                if args.artifacts:
                    other = tempfile.mkdtemp(prefix="warm_start_")
                    row["carried"] = run_child(model, backend, args, other,
                                               WARM_START_LOAD=blob)  # fmt: skip
                    row["carried"]["bytes"] = os.path.getsize(blob)
                    shutil.rmtree(other, ignore_errors=True)
                shutil.rmtree(root, ignore_errors=True)
                rows.append(row)
                print(json.dumps(row), flush=True)
                write_json(args, rows)  # after each row: a cut-off run keeps what it has
    print("\n| round | model | compiler | cold s | warm s | warm / cold | carried s "
          "| same loss |")  # fmt: skip
    print("|---:|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        c, w = r["cold"].get("seconds"), r["warm"].get("seconds")
        carried = r.get("carried", {})
        ratio = f"{w / c:.2f}" if c and w else "—"
        losses = {r["cold"].get("loss"), r["warm"].get("loss")}
        losses |= {carried["loss"]} if "loss" in carried else set()
        moved = f"{carried['seconds']:.1f}" if "seconds" in carried else "—"
        print(f"| {r['round']} | {r['model']} | {r['backend']} | {c or 0:.1f} | "
              f"{w or 0:.1f} | {ratio} | {moved} | {len(losses) == 1} |")  # fmt: skip
    return 0


def write_json(args, rows: list) -> None:
    if not args.json:
        return
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    machine = dict(torch=torch.__version__, device=gpu)
    with open(args.json, "w") as f:
        json.dump(dict(date=time.strftime("%Y-%m-%d"), dtype=args.dtype,
                       machine=machine, rows=rows), f, indent=1)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
