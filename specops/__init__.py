"""specops: fused kernels for speculative decoding of visual AR models and VLMs."""

from specops import reference
from specops._build import build_info
from specops.ops import sample, validation
from specops.tree import Tree

__all__ = ["Tree", "build_info", "reference", "sample", "validation"]
