"""Plain-PyTorch semantics of every public op: the ground truth, and the fallback backend.

Readable, vectorised over the batch, correct on any device.  Each family has its own module."""

from specops.reference.philox import philox_uniform, row_uniforms
from specops.reference.sampling import inverse_cdf, sample

__all__ = ["philox_uniform", "row_uniforms", "inverse_cdf", "sample"]
