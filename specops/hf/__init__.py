"""Hugging Face transformers models behind specops's decoding loop (``pip install 'specops[hf]'``).

    import specops.hf
    seqs, stats = specops.hf.generate(hf_model, input_ids, method="sjd_pac", max_new_tokens=256)
    seqs = hf_model.generate(input_ids, max_new_tokens=256,
                             custom_generate=specops.hf.custom_generate,
                             specops_method="sjd", specops_options={"window": 16})

``HFModel(hf_model)`` wraps a causal LM into the model protocol of ``specops.decode``
(docs/protocols.md): its KV cache (``SpecopsCache``) is a transformers ``Cache`` whose storage is
specops's stacked ``kv [layers, 2, B, S, Hkv, D]``, and the model's own attention layers run
``specops.tree_attention`` through an ``AttentionInterface`` registration (``"specops_tree"``),
switched on only for the adapter's calls: ``hf_model.generate`` keeps its own attention.
"""

from __future__ import annotations

from specops._optional import require

require("specops.hf", "transformers", extra="hf")

from specops.hf.attention import ATTN_NAME, tree_attention_forward  # noqa: E402
from specops.hf.cache import SpecopsCache  # noqa: E402
from specops.hf.custom import custom_generate  # noqa: E402
from specops.hf.drafter import HFDrafter  # noqa: E402
from specops.hf.generate import METHODS, generate  # noqa: E402
from specops.hf.layout import GridLayout  # noqa: E402
from specops.hf.model import HFModel  # noqa: E402

__all__ = [
    "HFModel",
    "HFDrafter",
    "GridLayout",
    "SpecopsCache",
    "generate",
    "custom_generate",
    "METHODS",
    "ATTN_NAME",
    "tree_attention_forward",
]
