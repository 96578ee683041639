"""The decoding loop: one short function per method, gpt-fast style (static KV cache, no host
sync inside a step except the read that decides when to stop, the maths in comments).

    tokens, stats = ar(model, classes)
    tokens, stats = speculative(model, drafter, classes, tree="dynamic")   # or None / a Tree
    tokens, stats = speculative(model, drafter, classes, tree="confidence", threshold=0.5)
    tokens, stats = sjd(model, classes, window=64)
    tokens, stats = sjd_pac(model, classes)          # window 64, K = 4, D = 3 (the paper's)
    tokens, stats = vvs(model, drafter, classes, codebook, relax=lantern(codebook, 16, 0.2))

Models follow the protocol ``logits, hidden = model(tokens [B, N], positions [B, N], cache,
tree=None)`` (docs/protocols.md).  Every function returns the tokens [B, length] int32 and a
``Stats``.  Each method step by step, ``Stats``, ``progress`` and ``compile_step``:
docs/decoding.md.
"""

from specops.decode._loop import compiled_step
from specops.decode.ar import ar
from specops.decode.hooks import progress
from specops.decode.sampling import Sampling
from specops.decode.sjd import sjd
from specops.decode.sjd_pac import sjd_pac
from specops.decode.speculative import speculative
from specops.decode.stats import Stats
from specops.decode.vvs import lantern, vvs

__all__ = [
    "compiled_step", "ar", "speculative", "sjd", "sjd_pac", "vvs", "lantern", "Sampling", "Stats",
    "progress",
]  # fmt: skip
