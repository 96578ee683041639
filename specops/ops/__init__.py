"""The public ops: validation, backend choice, torch.library registration.
One module per op family declares its ops (specops/ops/<family>.py); their public functions are
written to specops/ops/_generated_<family>.py by scripts/gen_ops.py, re-exported here."""

from specops.ops._backends import validation
from specops.ops._generated_attention import append_kv, tree_attention
from specops.ops._generated_features import drafter_inputs, gather_rows, path_similarity
from specops.ops._generated_jacobi import verify_jacobi
from specops.ops._generated_kv import commit_kv
from specops.ops._generated_probs import probs_from_logits
from specops.ops._generated_sample import sample, sample_without_replacement
from specops.ops._generated_tree_build import build_dynamic_tree, select_frontier
from specops.ops._generated_verify import path_acceptance, verify_chain, verify_tree
from specops.ops.feature_cache import FeatureCache
from specops.ops.tree_build import DynamicTree, Frontier
from specops.ops.verify import Grouping, Relaxation

__all__ = [
    "validation",
    "sample",
    "sample_without_replacement",
    "probs_from_logits",
    "Relaxation",
    "Grouping",
    "verify_chain",
    "verify_tree",
    "path_acceptance",
    "verify_jacobi",
    "select_frontier",
    "build_dynamic_tree",
    "Frontier",
    "DynamicTree",
    "tree_attention",
    "append_kv",
    "commit_kv",
    "FeatureCache",
    "gather_rows",
    "drafter_inputs",
    "path_similarity",
]
