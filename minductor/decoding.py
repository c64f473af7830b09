# generated from chapters/measuring_decoding.md — edit there

"""The decoding suite's Llama and loop, for the compiler's tests; the suite itself is
minductor.harness.decoding (chapters/measuring_decoding.md)."""

from minductor.harness.decoding import (  # noqa: F401
    LLAMA,
    REAL,
    TINY,
    KVCache,
    Transformer,
    decode_one,
    generate,
    prefill,
)
