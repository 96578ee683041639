"""The public ops: validation, backend choice, torch.library registration.
One module per op family; each lists its public names in ``__all__``, re-exported here."""

import importlib

from specops.ops._backends import validation

_FAMILIES = ("sample", "probs", "verify", "jacobi", "tree_build", "attention", "kv", "features")

__all__ = ["validation"]
for _family in _FAMILIES:
    _module = importlib.import_module(f"specops.ops.{_family}")
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
    __all__ += _module.__all__
