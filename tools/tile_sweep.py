"""Chapter 25's template over a grid of tile configurations, for one product, on a GPU.

Each configuration (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) that fits the shared
memory is compiled and timed as `max-autotune` times its candidates (in a CUDA graph),
and so is cuBLAS; the fastest configurations are printed with their TFLOP/s, and the
list of candidates the template tries today is marked. Run from the repository root:

    python tools/tile_sweep.py --m 4096 --n 4096 --k 4096 --dtype float32 [--json F]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging

import torch
import triton

from minductor import select_algorithm, templates
from minductor.ir import Buffer, FixedLayout


def grid(m: int, n: int, k: int, dtype: torch.dtype) -> list[templates.TileConfig]:
    depths = (16, 32) if dtype == torch.float32 else (32, 64, 128)
    found = []
    for bm in (64, 128, 256):
        for bn in (64, 128, 256):
            for bk in depths:
                for warps in (4, 8):
                    for stages in (2, 3, 4, 5):
                        tiles = stages * (bm * bk + bk * bn) * dtype.itemsize
                        if tiles <= select_algorithm.SHARED_MEMORY and bm * bn <= 256 * 128:
                            found.append(templates.TileConfig(bm, bn, bk, warps, stages))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for dim in ("m", "n", "k"):
        parser.add_argument(f"--{dim}", type=int, default=4096)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json", help="write every configuration's time here")
    args = parser.parse_args()
    logging.getLogger("minductor").setLevel(logging.WARNING)
    m, n, k, dtype = args.m, args.n, args.k, getattr(torch, args.dtype)
    device = torch.device("cuda", 0)
    a = Buffer("a", FixedLayout.contiguous(device, dtype, (m, k)))
    b = Buffer("b", FixedLayout.contiguous(device, dtype, (k, n)))
    x = templates.Operand("in_ptr0", (0, k, 1), 0)
    y = templates.Operand("in_ptr1", (0, n, 1), 0)
    configs = grid(m, n, k, dtype)
    time_one = select_algorithm._timer(a, b, x, y, f"{m}x{n}x{k}", configs, False)
    cublas = time_one({"cublas": 1})
    timed = []
    for cfg in configs:
        try:
            timed.append((time_one(dataclasses.asdict(cfg)), cfg))
        except Exception as error:  # noqa: BLE001  (a configuration that fails)
            print(f"{cfg}: {str(error).splitlines()[0]}")
    timed.sort(key=lambda t: t[0])
    ours = set(select_algorithm.candidate_tiles(m, n, k, dtype))
    flops = 2 * m * n * k
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}: {m}x{n}x{k} {dtype}, {len(timed)} configs")  # fmt: skip
    print(f"cuBLAS: {cublas * 1e3:.1f} us, {flops / cublas / 1e9:.0f} TFLOP/s")
    for ms, cfg in timed[: args.top]:
        mark = " (a candidate)" if cfg in ours else ""
        print(f"{cfg}: {ms * 1e3:.1f} us, {flops / ms / 1e9:.0f} TFLOP/s, "
              f"{cublas / ms:.2f}x cuBLAS{mark}")  # fmt: skip
    best_ours = min((t for t in timed if t[1] in ours), key=lambda t: t[0], default=None)
    if best_ours:
        print(f"best candidate: {best_ours[1]}, {cublas / best_ours[0]:.2f}x cuBLAS")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "date": datetime.date.today().isoformat(),
                "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "triton": triton.__version__, "size": [m, n, k], "dtype": args.dtype,
                "cuBLAS ms": cublas,
                "configs": [[dataclasses.asdict(c), ms] for ms, c in timed],
            }, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
