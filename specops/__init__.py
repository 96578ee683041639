"""specops: fused kernels for speculative decoding of visual AR models and VLMs.

The public ops are re-exported from ``specops.ops`` (one module per family); their plain-PyTorch
semantics live in ``specops.reference``."""

from specops import ops as _ops
from specops import reference
from specops._build import _version, build_info
from specops._threads import get_num_threads, set_num_threads
from specops.ops import *  # noqa: F403
from specops.ops._backends import available_backends, backend_table, resolve_backend, validating
from specops.ops._decl import declaration
from specops.tree import Tree

__version__ = _version()
__all__ = [
    "Tree",
    "available_backends",
    "backend_table",
    "build_info",
    "declaration",
    "resolve_backend",
    "validating",
    "get_num_threads",
    "reference",
    "set_num_threads",
    *_ops.__all__,
]
