"""SGLang's EAGLE tree construction (``build_tree_kernel_efficient``: the sgl_kernel / SGLang
0.5.23 JIT kernel's contract), on device tensors, in place, without a host sync.

Per request the tree has ``draft_token_num`` = N nodes: the root, then the drafts
``selected_index[b, :]`` linked to their parents through ``parent_list``.  Written: the
``retrive_*`` links, ``positions`` and ``tree_mask`` in SGLang's three mask modes (a
non-contiguous ``tree_mask`` is written as it reads, its entries in row-major order).  An invalid
tree raises in validation mode; in fast mode nothing is read or written outside its tensor.
The exact rules: docs/sglang.md."""

from __future__ import annotations

import torch

from specops.ops import checks as c

__all__ = ["build_tree_kernel_efficient", "FULL_MASK", "QLEN_ONLY", "QLEN_ONLY_BITPACKING"]

FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2
_OP = "specops.compat.sglang_build_tree.build_tree_kernel_efficient"


def _parents(selected: torch.Tensor, parent_list: torch.Tensor, topk: int) -> torch.Tensor:
    """[bs, N] tree-local parent of each node: 0 for the root's children, -1 for node 0 and for
    nodes whose parent is not among the selected."""
    bs, m = selected.shape
    root = torch.full((bs, 1), -1, dtype=torch.long, device=selected.device)
    if m == 0:  # draft_token_num = 1: the root alone
        return root
    g = torch.div(selected, topk, rounding_mode="floor")
    w = parent_list.shape[1]
    want = parent_list.gather(1, g.clamp(0, max(w - 1, 0))) if w else torch.zeros_like(g)
    # position of the first selected entry equal to ``want`` (m when none): node = position + 1
    eq = selected[:, None, :] == want[:, :, None]  # [bs, m (node), m (candidate position)]
    pos = torch.where(eq.any(-1), eq.int().argmax(-1), m)
    par = torch.where(g == 0, 0, torch.where((pos < m) & (g > 0) & (g < w), pos + 1, -1))
    return torch.cat([root, par.long()], 1)


def _ancestors(par: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask [bs, N, N]: column 0, the node and its ancestors below the root; steps [bs, N]: the
    node's depth), each walk at most ``depth`` steps and stopping at a missing parent."""
    bs, n = par.shape
    dev = par.device
    cols = torch.arange(n, device=dev)
    mask = torch.zeros(bs, n, n, dtype=torch.bool, device=dev)
    mask[:, :, 0] = True
    steps = torch.zeros(bs, n, dtype=torch.long, device=dev)
    cur = cols.expand(bs, n).clone()
    live = cur > 0
    for _ in range(depth):
        mask |= live[:, :, None] & (cols[None, None, :] == cur[:, :, None])
        steps += live.long()
        cur = torch.where(live, par.gather(1, cur.clamp(min=0)), cur)
        live = live & (cur > 0)
    return mask, steps


def _check(parent_list, selected_index, seq_lens, tree_mask, positions, r_index, r_next, r_sib,
           topk, depth, n, mode):  # fmt: skip
    if topk <= 0 or depth <= 0 or not 0 < n <= 1024 or mode not in (0, 1, 2):
        raise ValueError(
            f"{_OP}: need topk > 0, depth > 0, 0 < draft_token_num <= 1024 and tree_mask_mode in "
            f"(0, 1, 2), got {topk}, {depth}, {n}, {mode}"
        )
    op = _OP[len("specops.") :]
    c.check_ids(op, "verified_seq_len", seq_lens, ndim=1)
    dev = seq_lens.device
    for name, t in (("parent_list", parent_list), ("selected_index", selected_index),
                    ("positions", positions), ("retrive_index", r_index),
                    ("retrive_next_token", r_next), ("retrive_next_sibling", r_sib)):  # fmt: skip
        c.check_ids(op, name, t, device=dev)
    c.check_tensor(op, "tree_mask", tree_mask, device=dev)
    if any(st == 0 and sz > 1 for st, sz in zip(tree_mask.stride(), tree_mask.shape)):
        raise ValueError(
            f"{_OP}: tree_mask is written, so no two of its entries may share memory; got strides "
            f"{list(tree_mask.stride())} for shape {list(tree_mask.shape)} (an expanded tensor)"
        )
    bs = seq_lens.shape[0]
    shapes = {
        "selected_index": (selected_index, (bs, n - 1)),
        "retrive_index": (r_index, (bs, n)),
        "retrive_next_token": (r_next, (bs, n)),
        "retrive_next_sibling": (r_sib, (bs, n)),
    }
    for name, (t, want) in shapes.items():
        if tuple(t.shape) != want:
            raise ValueError(f"{_OP}: {name} must be {list(want)}, got {list(t.shape)}")
    if tuple(positions.shape) not in ((bs * n,), (bs, n)):  # SGLang's callers allocate either
        raise ValueError(
            f"{_OP}: positions must be [{bs * n}] or [{bs}, {n}] (bs * draft_token_num), got "
            f"{list(positions.shape)}"
        )
    if parent_list.dim() != 2 or parent_list.shape[0] != bs:
        raise ValueError(f"{_OP}: parent_list must be [{bs}, W], got {list(parent_list.shape)}")
    if depth > 1 and parent_list.shape[1] != topk * (depth - 1) + 1:
        raise ValueError(
            f"{_OP}: parent_list must have topk * (depth - 1) + 1 = {topk * (depth - 1) + 1} "
            f"columns, got {parent_list.shape[1]}"
        )
    if mode == QLEN_ONLY_BITPACKING:
        if n > 32:
            raise ValueError(f"{_OP}: QLEN_ONLY_BITPACKING needs draft_token_num <= 32, got {n}")
        if tree_mask.numel() * tree_mask.element_size() < bs * n * _nbytes(n):
            raise ValueError(f"{_OP}: tree_mask holds fewer than {bs * n * _nbytes(n)} bytes")
    elif mode == QLEN_ONLY and tree_mask.numel() < bs * n * n:
        raise ValueError(f"{_OP}: tree_mask holds fewer than {bs * n * n} entries")
    elif mode == FULL_MASK and tree_mask.dtype != torch.bool:
        raise TypeError(f"{_OP}: tree_mask must be bool for FULL_MASK, got {tree_mask.dtype}")
    if not c.validating():
        return
    if bool((seq_lens < 0).any()):
        raise ValueError(f"{_OP}: verified_seq_len holds a negative length")
    if mode == FULL_MASK and tree_mask.numel() < n * int(seq_lens.sum()) + n * n * bs:
        raise ValueError(
            f"{_OP}: tree_mask holds {tree_mask.numel()} entries, FULL_MASK needs "
            f"{n * int(seq_lens.sum()) + n * n * bs}"
        )
    par = _parents(selected_index.long(), parent_list.long(), topk)
    orphan = par[:, 1:] < 0
    if bool(orphan.any()):
        b, i = (int(j) for j in orphan.nonzero()[0])
        g = int(selected_index[b, i]) // topk
        raise ValueError(
            f"{_OP}: selected_index[{b}, {i}] = {int(selected_index[b, i])}: a draft whose "
            f"parent is not among the selected (parent_list[{b}, {g}] is not in "
            f"selected_index[{b}], or column {g} is outside parent_list's "
            f"{parent_list.shape[1]})"
        )
    _, steps = _ancestors(par, n)
    if bool((steps > depth).any()):
        raise ValueError(f"{_OP}: a node lies deeper than depth {depth} (or its parents cycle)")


def _nbytes(n: int) -> int:
    return 4 if n > 16 else 2 if n > 8 else 1


def build_tree_kernel_efficient(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int = FULL_MASK,
) -> None:
    """SGLang's ``build_tree_kernel_efficient`` kernel (module docstring): ``tree_mask``,
    ``positions`` and the three ``retrive_*`` tensors written in place."""
    n, mode = int(draft_token_num), int(tree_mask_mode)
    _check(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
           retrive_next_token, retrive_next_sibling, topk, depth, n, mode)  # fmt: skip
    bs = verified_seq_len.shape[0]
    if bs == 0:
        return
    dev = selected_index.device
    seq = verified_seq_len.long()
    par = _parents(selected_index.long(), parent_list.long(), topk)
    nodes = torch.arange(n, device=dev)
    retrive_index.copy_((torch.arange(bs, device=dev)[:, None] * n + nodes).to(retrive_index.dtype))

    # links: first child = the smallest child; sibling = the next larger child of the same parent
    is_child = par[:, None, :] == nodes[None, :, None]  # [bs, parent p, node i]
    has = is_child.any(-1)
    first = is_child.int().argmax(-1)
    old_next = retrive_next_token.long()
    same = (par[:, :, None] == par[:, None, :]) & (par[:, :, None] >= 0)  # [bs, i, j]
    later = same & (nodes[None, None, :] > nodes[None, :, None])  # j: a later child of i's parent
    nxt_sib = torch.where(later.any(-1), later.int().argmax(-1), -1)
    last_child = (par >= 0) & ~later.any(-1)  # its sibling: the parent's entry as given, if set
    carried = old_next.gather(1, par.clamp(min=0))
    sib = torch.where(last_child & (carried != -1), carried, nxt_sib)
    write_sib = (par >= 0) & ((nxt_sib >= 0) | (carried != -1))
    retrive_next_sibling.copy_(
        torch.where(write_sib, sib, retrive_next_sibling.long()).to(retrive_next_sibling.dtype)
    )
    retrive_next_token.copy_(torch.where(has, first, old_next).to(retrive_next_token.dtype))

    mask, steps = _ancestors(par, depth)
    positions.copy_((seq[:, None] + steps).reshape(positions.shape).to(positions.dtype))
    if tree_mask.is_contiguous():
        _write_mask(tree_mask, mask, seq, bs, n, mode)
    else:  # read as it is: entries in row-major order, whatever the strides
        flat = tree_mask.contiguous()
        _write_mask(flat, mask, seq, bs, n, mode)
        tree_mask.copy_(flat)


def _write_mask(tree_mask, mask, seq, bs: int, n: int, mode: int) -> None:
    """The mask of every request written into ``tree_mask`` (contiguous) in ``mode``."""
    if mode == QLEN_ONLY_BITPACKING:
        _write_packed(tree_mask, mask, bs, n)
        return
    flat = tree_mask.view(-1)
    if mode == QLEN_ONLY:
        flat[: bs * n * n].copy_(mask.reshape(-1))
        return
    dev = flat.device
    nodes = torch.arange(n, device=dev)
    # FULL_MASK: row i of request b starts at N*N*b + N*sum(seq[:b]) + (seq_b + N) * i
    before = torch.cumsum(seq, 0) - seq
    row0 = n * n * torch.arange(bs, device=dev) + n * before
    s3 = seq[:, None, None]
    at = row0[:, None, None] + (s3 + n) * nodes[None, :, None] + s3 + nodes[None, None, :]
    if flat.numel() == 0:
        return
    # a mask too short or a negative length (fast mode): those writes are dropped.  Two
    # order-independent passes (min, then max) write exactly the inside cells, whatever the
    # dropped writes' indices collide with: min(old, m) then max(., m) = m; neutral elsewhere.
    inside = ((at >= 0) & (at < flat.numel())).reshape(-1)
    at = torch.where(inside, at.reshape(-1), 0)
    m = mask.reshape(-1).to(torch.uint8)
    u8 = flat.view(torch.uint8)
    u8.scatter_reduce_(0, at, torch.where(inside, m, 1), "amin")
    u8.scatter_reduce_(0, at, torch.where(inside, m, 0), "amax")


def _write_packed(tree_mask: torch.Tensor, mask: torch.Tensor, bs: int, n: int) -> None:
    nb = _nbytes(n)
    byte_view = tree_mask.view(-1).view(torch.uint8)[: bs * n * nb].view(bs, n, nb)
    cols = torch.arange(n, device=mask.device)
    bits = mask.long() << (cols % 8)  # bit k of byte k // 8
    packed = torch.zeros(bs, n, nb, dtype=torch.long, device=mask.device)
    packed.index_add_(2, cols // 8, bits)
    packed[:, :, 0] |= 1  # byte 0 is assigned (root bit set), the others OR-ed in
    old = byte_view.long()
    old[:, :, 0] = 0
    byte_view.copy_((old | packed).to(torch.uint8))
