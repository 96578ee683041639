"""What the verification ops (verify.py, jacobi.py) share: their argument checks, the forms
the compiled kernels read, and the reference's view of a tree."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from specops.ops import _common as c
from specops.ops._decl import Ten
from specops.reference.grouped import Grouping, check_grouping
from specops.reference.verify import Relaxation
from specops.tree import Tree


def check_target(op: str, t, backend: str) -> tuple[int, int, int]:
    c.check_probs(op, "target_probs", t, ndim=3, backend=backend)
    b, n, v = t.shape
    if n < 1 or v < 1:
        raise ValueError(
            f"specops.{op}: target_probs must have at least one row and a non-empty vocab, "
            f"got shape {tuple(t.shape)}"
        )
    return b, n, v


def check_draft_probs(op: str, t, b: int, rows: int, v: int, dev):
    if t is None:
        return
    c.check_probs(op, "draft_probs", t, ndim=3, device=dev)
    if t.shape[-1] != v:
        raise ValueError(
            f"specops.{op}: draft_probs has vocab {t.shape[-1]} but target_probs has vocab {v} "
            f"(draft_probs shape {tuple(t.shape)})"
        )
    c.check_tensor(op, "draft_probs", t, shape=(b, rows, v))


def check_relax(op: str, relax, v: int, dev):
    """-> (neighbors tensor, or a Grouping's codebook, or None; delta float)."""
    if relax is None:
        return None, 0.0
    if isinstance(relax, Grouping):
        check_grouping(f"specops.{op}", relax, v)
        c.check_probs(op, "relax.codebook", relax.codebook, ndim=2, device=dev)
        return relax.codebook, 0.0
    if not isinstance(relax, Relaxation):
        raise TypeError(
            f"specops.{op}: relax must be a specops.Relaxation(neighbors, delta) or a "
            f"specops.Grouping(codebook, ...), got {type(relax).__name__}"
        )
    nb, delta = relax.neighbors, relax.delta
    c.check_ids(op, "relax.neighbors", nb, ndim=2, device=dev)
    if nb.shape[0] != v:
        raise ValueError(
            f"specops.{op}: relax.neighbors must have shape [V={v}, k], got {tuple(nb.shape)}"
        )
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise TypeError(f"specops.{op}: relax.delta must be a float, got {type(delta).__name__}")
    if not 0 <= delta < math.inf:
        raise ValueError(f"specops.{op}: relax.delta must be finite and >= 0, got {delta}")
    if c.validating():
        c.check_values_ids(op, "relax.neighbors", nb, v)
    return nb, float(delta)


def check_uniforms(op: str, u, b: int, draws: int, dev):
    if u is not None:
        c.check_tensor(op, "uniforms", u, dtypes=(torch.float32,), device=dev, shape=(b, draws))


def check_tree(op: str, tree, b: int, n: int, dev) -> None:
    if not isinstance(tree, Tree):
        raise TypeError(f"specops.{op}: tree must be a specops.Tree, got {type(tree).__name__}")
    if tree.batch_size not in (1, b):
        raise ValueError(
            f"specops.{op}: tree has batch {tree.batch_size} but target_probs has batch {b} "
            f"(a tree must have batch 1 or {b})"
        )
    if tree.num_nodes != n:
        raise ValueError(
            f"specops.{op}: tree has {tree.num_nodes} nodes but target_probs has {n} rows "
            "(one per node)"
        )
    if tree.device != torch.device(dev):
        raise ValueError(f"specops.{op}: tree is on {tree.device} but the inputs are on {dev}")


def check_tree_rows(op: str, target_probs, tree, draft_tokens, draft_probs, backend: str):
    """The rows of a tree op: target [B, N, V], a Tree of N nodes, draft_tokens [B, N], draft
    probs [B, N, V] or None -> (B, N, V, device)."""
    b, n, v = check_target(op, target_probs, backend)
    dev = target_probs.device
    check_tree(op, tree, b, n, dev)
    c.check_ids(op, "draft_tokens", draft_tokens, ndim=2, device=dev)
    c.check_tensor(op, "draft_tokens", draft_tokens, shape=(b, n))
    check_draft_probs(op, draft_probs, b, n, v, dev)
    return b, n, v, dev


def check_bool(op: str, name: str, val) -> bool:
    if not isinstance(val, bool):
        raise TypeError(f"specops.{op}: {name} must be a bool, got {type(val).__name__}")
    return val


def relax_of(neighbors, delta, codebook=None, group_window=0, group_p=0.0, group_d=0.0,
             image_start=0):  # fmt: skip
    """The relaxation the flat arguments describe (``RelaxArg``): LANTERN's, GSD's or None."""
    if codebook is not None:
        rng = (image_start, image_start + codebook.shape[0])
        return Grouping(codebook, group_window, group_p, group_d, rng)
    return None if neighbors is None else Relaxation(neighbors, delta)


class TreeArrays:
    """What the reference walk reads of a Tree: first_child / next_sibling."""

    def __init__(self, first_child, next_sibling):
        self.first_child = first_child
        self.next_sibling = next_sibling


def check_values(op, target_probs, draft_probs, ids, v, *, ids_name="draft_tokens",
                 tree=False) -> None:  # fmt: skip
    """Validation mode: the probabilities, and the token ids ``ids`` [B, N] in [0, V) (-1: none),
    without column 0 (the root) when ``tree``."""
    if c.validating():
        c.check_values_probs(op, "target_probs", target_probs)
        if draft_probs is not None:
            c.check_values_probs(op, "draft_probs", draft_probs)
        c.check_values_ids(op, ids_name, ids[:, 1:] if tree else ids, v)


# what the compiled kernels read (specops/ops/_decl.py ``Ten.form``): float32 probability rows
# with a contiguous last dim (other float dtypes converted once), token ids int32 or int64 in
# place with a contiguous last dim, tree arrays int32, counts int64.
def f32_rows(t: Tensor) -> Tensor:
    return t if t.dtype == torch.float32 and t.stride(-1) == 1 else t.float().contiguous()


def id_rows(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def tree_array(t: Tensor) -> Tensor:
    return t if t.dtype == torch.int32 and t.is_contiguous() else t.to(torch.int32).contiguous()


def counts(t: Tensor) -> Tensor:
    return t.to(torch.int64).contiguous()


# the declared arguments every verification op shares (specops/ops/_decl.py)
def target_probs(shape: str) -> Ten:
    """``target_probs`` (``shape`` in symbols, e.g. "B N V"), read as float32 rows."""
    return Ten("target_probs", shape, form=f32_rows, fast_rank=3)


def draft_probs(shape: str) -> Ten:
    """``draft_probs`` or None, read as float32 rows."""
    return Ten("draft_probs", shape, optional=True, form=f32_rows)
