"""specops inside SGLang (tested against 0.5.23's call sites): one call puts specops's EAGLE
verification and tree construction where SGLang's EAGLE worker looks them up.

    import specops.sglang
    specops.sglang.install()

SGLang also calls ``install()`` by itself in every process through the general-plugin entry
point ``sglang.srt.plugins: specops = specops.sglang:install``; ``SPECOPS_SGLANG=0`` makes it do
nothing, ``uninstall()`` puts SGLang's functions back.  Replaced: four attributes of
``sglang.srt.speculative.eagle_utils`` (tree and chain sampling, greedy tree verification, tree
building), each the semantics of SGLang's kernel on the tensors' own device.  Importing this
module imports nothing of SGLang.  The full list and rules: docs/sglang.md."""

from __future__ import annotations

import importlib
import os

from specops.compat.sglang_build_tree import build_tree_kernel_efficient
from specops.compat.sglang_verify import (
    chain_speculative_sampling_triton,
    tree_speculative_sampling_target_only,
    verify_tree_greedy,
)

__all__ = ["install", "installed", "uninstall", "TARGET_MODULE"]

TARGET_MODULE = "sglang.srt.speculative.eagle_utils"
_saved: dict[str, object] = {}


def verify_tree_greedy_func(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    target_predict,
    topk: int = -1,
):
    """SGLang's ``verify_tree_greedy_func`` wrapper over ``verify_tree_greedy``."""
    verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrieve_index,
                       retrieve_next_token, retrieve_next_sibling, target_predict)  # fmt: skip
    return predicts, accept_index, accept_token_num


def build_tree_kernel_efficient_func(
    parent_list,
    top_scores_index,
    seq_lens,
    tree_mask,
    positions,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    topk,
    spec_steps,
    num_verify_tokens,
    tree_mask_mode,
) -> None:
    """SGLang's ``build_tree_kernel_efficient_func`` wrapper (over
    ``build_tree_kernel_efficient``)."""
    build_tree_kernel_efficient(parent_list, top_scores_index, seq_lens, tree_mask, positions,
                                retrieve_index, retrieve_next_token, retrieve_next_sibling, topk,
                                spec_steps, num_verify_tokens, int(tree_mask_mode))  # fmt: skip


REPLACEMENTS = {
    "chain_speculative_sampling_triton": chain_speculative_sampling_triton,
    "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only,
    "verify_tree_greedy_func": verify_tree_greedy_func,
    "build_tree_kernel_efficient_func": build_tree_kernel_efficient_func,
}


def install() -> list[str]:
    """Put specops's functions in SGLang's place; returns the names replaced (none when
    ``SPECOPS_SGLANG=0``).  Idempotent.  Raises ImportError when SGLang's EAGLE module does not
    import, and AttributeError when it lacks a name specops replaces (another SGLang version)."""
    if os.environ.get("SPECOPS_SGLANG", "1") == "0":
        return []
    mod = importlib.import_module(TARGET_MODULE)
    missing = [name for name in REPLACEMENTS if not hasattr(mod, name)]
    if missing:
        raise AttributeError(
            f"specops.sglang.install: {TARGET_MODULE} has no {missing} (specops follows SGLang "
            "0.5.23's EAGLE module)"
        )
    for name, fn in REPLACEMENTS.items():
        current = getattr(mod, name)
        if current is not fn:
            _saved[name] = current
            setattr(mod, name, fn)
    return list(REPLACEMENTS)


def installed() -> bool:
    """Whether SGLang's EAGLE module (if imported) currently runs specops's functions."""
    import sys

    mod = sys.modules.get(TARGET_MODULE)
    return mod is not None and all(getattr(mod, n, None) is f for n, f in REPLACEMENTS.items())


def uninstall() -> None:
    """Put SGLang's own functions back."""
    import sys

    mod = sys.modules.get(TARGET_MODULE)
    if mod is not None:
        for name, fn in _saved.items():
            setattr(mod, name, fn)
    _saved.clear()
