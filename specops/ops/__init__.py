"""The public ops: validation, backend choice, torch.library registration."""

from specops.ops._common import validation
from specops.ops.sample import sample

__all__ = ["validation", "sample"]
