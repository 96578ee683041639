"""Plain-PyTorch semantics of every public op: the ground truth, and the fallback backend.

Readable, vectorised over the batch, correct on any device.  One module per op family; each
lists its public names in ``__all__`` and they are re-exported here."""

import importlib

_FAMILIES = ("philox", "sampling", "probs", "verify", "tree_build", "attention", "kv", "features")

__all__: list[str] = []
for _family in _FAMILIES:
    _module = importlib.import_module(f"specops.reference.{_family}")
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
    __all__ += _module.__all__
