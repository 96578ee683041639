"""The NaN policy (DESIGN.md, "Rules for every op") for the Triton kernels that read
probabilities: an entry counts as mass only when it is positive and finite; NaN, negative,
-0.0 and +inf count as 0 (csrc/include/specops/mass.h, specops.reference.sampling.mass)."""

import triton
import triton.language as tl


@triton.jit
def mass(p):
    """p where 0 < p < +inf, else 0."""
    return tl.where((p > 0.0) & (p < float("inf")), p, 0.0)


__all__ = ["mass"]
