# generated from chapters/index.md — edit there

"""`make demo`: compile two pointwise functions, show their code, compare with eager."""

import torch

from minductor.capture import record_compiled  # importing minductor registers it


def add_mul(a, b, c):
    return a * b + c


def gelu_residual(x, bias):
    return torch.nn.functional.gelu(x + bias) * 0.5 + x


def run(fn, *args) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="minductor")
    with record_compiled() as graphs:
        result = compiled(*args)
    expected = fn(*args)
    error = (result - expected).abs().max().item()
    print(
        f"=== {fn.__name__}: {len(graphs[0].kernel_names)} kernel(s) "
        f"{graphs[0].kernel_names}"
    )
    source = graphs[0].source
    for name in graphs[0].kernel_names:
        start = source.index("@triton.jit\ndef " + name)
        print(source[start : source.index("\n\n", start)])
    print(source[source.index("def call") : source.index("def benchmark")].rstrip())
    ok = torch.allclose(result, expected, atol=1e-5, rtol=1e-5)
    print(
        f"check against eager: max abs error {error:.2e} -> "
        f"{'OK' if ok else 'MISMATCH'}"
    )
    if not ok:
        raise SystemExit(1)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mode = (
        "real Triton on the GPU" if device == "cuda" else "Triton's interpreter on CPU"
    )
    print(f"minductor demo on {device} ({mode})")
    a, b, c = (torch.randn(33, 65, device=device) for _ in range(3))
    run(add_mul, a, b, c)
    x, bias = torch.randn(33, 65, device=device), torch.randn(65, device=device)
    run(gelu_residual, x, bias)


if __name__ == "__main__":
    main()
