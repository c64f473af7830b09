# generated from chapters/index.md — edit there

"""`make demo`: compile two pointwise functions, show their code, compare with eager."""

import torch

from minductor.capture import record_compiled  # importing minductor registers it


def add_mul(a, b, c):
    return a * b + c


def gelu_residual(x, bias):
    return torch.nn.functional.gelu(x + bias) * 0.5 + x


def run(fn, *args) -> tuple[str, bool]:
    """Compile and run `fn`; report its kernels, its `call`, the check against eager."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="minductor")
    with record_compiled() as graphs:
        result = compiled(*args)
    expected = fn(*args)
    error = (result - expected).abs().max().item()
    names, source = graphs[0].kernel_names, graphs[0].source
    lines = [f"=== {fn.__name__}: {len(names)} kernel(s) {names}"]
    for name in names:
        start = source.index("@triton.jit\ndef " + name)
        lines.append(source[start : source.index("\n\n", start)])
    sites = [ln for ln in source.splitlines() if " = CallSite(" in ln]
    call = source[source.index("def call") : source.index("def benchmark")]
    lines += [*sites, call.rstrip()]  # each launch line's launcher, then `call`
    ok = torch.allclose(result, expected, atol=1e-5, rtol=1e-5)
    verdict = "OK" if ok else "MISMATCH"
    lines.append(f"check against eager: max abs error {error:.2e} -> {verdict}")
    return "\n".join(lines), ok


def main() -> str:
    """The demo's report, as text (the caller prints it); raises on a mismatch."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mode = (
        "real Triton on the GPU" if device == "cuda" else "Triton's interpreter on CPU"
    )
    a, b, c = (torch.randn(33, 65, device=device) for _ in range(3))
    x, bias = torch.randn(33, 65, device=device), torch.randn(65, device=device)
    reports, oks = zip(run(add_mul, a, b, c), run(gelu_residual, x, bias))
    report = "\n".join([f"minductor demo on {device} ({mode})", *reports])
    if not all(oks):
        raise RuntimeError(f"compiled result differs from eager:\n{report}")
    return report


if __name__ == "__main__":
    print(main())
