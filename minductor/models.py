# generated from chapters/measuring_models.md — edit there

"""`python -m minductor.models`: the real-model suite (chapters/measuring_models.md);
with --decode, the decoding workloads (chapters/measuring_decoding.md)."""

import sys

from minductor.harness.models import main

if __name__ == "__main__":
    sys.exit(main())
