# generated from chapters/measuring_kernels.md — edit there

"""`python -m minductor.bench`: the kernel workloads (chapters/measuring_kernels.md)."""

import sys

from minductor.harness.kernels import main

if __name__ == "__main__":
    sys.exit(main())
