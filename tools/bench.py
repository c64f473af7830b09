"""Benchmarks on a CUDA GPU: eager vs minductor vs TorchInductor.

Run on the device machine: `PYTHONPATH=$PWD python tools/bench.py`.
Prints a markdown table (median of triton.testing.do_bench) that goes into
chapters/performance.md with the date and the device.
"""

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import minductor  # noqa: F401  (registers the backend)

N = 1 << 24  # 16M elements


def add_mul(a, b, c):
    return a * b + c


def gelu_residual(x, bias):
    return F.gelu(x + bias) * 0.5 + x


def chain10(x):
    y = x
    for k in range(5):
        y = torch.sigmoid(y * 1.5 + k) - 0.25
    return y


def two_outputs(x, y):
    t = (x * y).sigmoid()
    return t + 1, t.sin()


def cases():
    r = lambda *s, dtype=torch.float32: torch.randn(*s, device="cuda", dtype=dtype)  # noqa: E731
    rows, cols = 4096, N // 4096
    yield "a*b+c", add_mul, [r(N), r(N), r(N)], 4
    yield "a*b+c (fp16)", add_mul, [r(N, dtype=torch.float16) for _ in range(3)], 4
    yield "gelu(x+bias)*0.5+x", gelu_residual, [r(rows, cols), r(cols)], 2
    yield "10-op chain", chain10, [r(N)], 2
    yield "two outputs", two_outputs, [r(N), r(N)], 4
    yield "a*b+c, 1 element", add_mul, [r(1), r(1), r(1)], 4
    yield "x.sum(1), 8192x2048", lambda x: x.sum(1), [r(8192, 2048)], 1
    yield "x.amax(1), 8192x1024", lambda x: x.amax(1), [r(8192, 1024)], 1
    yield "(x*y).sum(1), 8192x1024", lambda x, y: (x * y).sum(1), [r(8192, 1024), r(1024)], 1
    yield "x.sum(0), 4096x8192", lambda x: x.sum(0), [r(4096, 8192)], 1
    yield "x.sum(1), 1024x32768 (looped)", lambda x: x.sum(1), [r(1024, 32768)], 1
    yield "softmax, 8192x1024", lambda x: torch.softmax(x, -1), [r(8192, 1024)], 2
    yield "softmax, 8192x2048", lambda x: torch.softmax(x, -1), [r(8192, 2048)], 2
    yield "log_softmax, 8192x1024", lambda x: torch.log_softmax(x, -1), [r(8192, 1024)], 2


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {__import__('triton').__version__}")
    print("| function | elements | eager ms | minductor ms | inductor ms "
          "| minductor GB/s | vs eager | vs inductor |")
    print("|---|---|---|---|---|---|---|---|")
    for name, fn, args, tensors_moved in cases():
        torch._dynamo.reset()
        ours = torch.compile(fn, backend="minductor")
        theirs = torch.compile(fn)
        for f in (ours, theirs):
            f(*args)
        # minductor computes half inputs in fp32 and rounds once, so compare with fp32
        expected = fn(*[a.float() for a in args])
        got = ours(*args)
        for g, e in zip(got if isinstance(got, tuple) else (got,),
                        expected if isinstance(expected, tuple) else (expected,)):
            torch.testing.assert_close(g.float(), e, atol=1e-2, rtol=1e-2, msg=name)
        t_eager = do_bench(lambda: fn(*args))
        t_ours = do_bench(lambda: ours(*args))
        t_theirs = do_bench(lambda: theirs(*args))
        numel = args[0].numel()
        nbytes = tensors_moved * numel * args[0].element_size()
        print(f"| {name} | {numel} | {t_eager:.4f} | {t_ours:.4f} | {t_theirs:.4f} "
              f"| {nbytes / t_ours / 1e6:.0f} | {t_eager / t_ours:.2f}x "
              f"| {t_theirs / t_ours:.2f}x |")


if __name__ == "__main__":
    main()
