"""Draft trees: parent arrays and the structures kernels derive from them.

A tree of N nodes is a parent array with ``parents[0] == -1`` (node 0 is the root, the last
committed token) and ``0 <= parents[n] < n`` for every other node (topological order).  Batched
trees are ``[B, N]``; every row is its own tree over the same N slots.

Derived fields (all int32 tensors on the parents' device):

- ``depth [B, N]``: root 0; position ids are ``cache_len + depth``.
- ``mask_bits [B, N, ceil(N/32)]``: bit ``j % 32`` of word ``j // 32`` of row ``n`` is set iff
  ``j`` is ``n`` or an ancestor of ``n`` (the compact attention mask of the tree part).
- ``first_child [B, N]`` and ``next_sibling [B, N]``: -1 where none; siblings in index order.
- ``paths() -> [B, P, max_depth + 1]``: root-to-leaf node ids, root first, -1 padded.
"""

from __future__ import annotations

import torch

__all__ = ["Tree"]


def _as_parents(parents) -> torch.Tensor:
    if not isinstance(parents, torch.Tensor):
        parents = torch.as_tensor(parents)
    if parents.dtype not in (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"Tree: parents must be an integer tensor, got dtype {parents.dtype}")
    if parents.dim() == 1:
        parents = parents.unsqueeze(0)
    if parents.dim() != 2:
        raise ValueError(
            f"Tree: parents must have shape [N] or [B, N], got shape {tuple(parents.shape)}"
        )
    if parents.shape[1] < 1:
        raise ValueError("Tree: parents must hold at least the root (N >= 1)")
    return parents


def _validate_parents(parents: torch.Tensor) -> None:
    """Host-side structural check: one root at node 0, parents before children, in range."""
    p = parents.to("cpu", torch.int64)
    b, n = p.shape
    if (p[:, 0] != -1).any():
        row = int((p[:, 0] != -1).nonzero()[0, 0])
        raise ValueError(
            f"Tree: parents[{row}, 0] must be -1 (node 0 is the root), got {int(p[row, 0])}"
        )
    if n == 1:
        return
    rest = p[:, 1:]
    idx = torch.arange(1, n).expand(b, -1)
    roots = rest == -1
    if roots.any():
        r, c = (roots.nonzero()[0]).tolist()
        raise ValueError(
            f"Tree: parents[{r}, {c + 1}] is -1 but only node 0 may be a root (two roots)"
        )
    bad = (rest < 0) | (rest >= idx)
    if bad.any():
        r, c = (bad.nonzero()[0]).tolist()
        raise ValueError(
            f"Tree: parents[{r}, {c + 1}] = {int(rest[r, c])} is out of range; parents must be "
            f"topological (0 <= parents[n] < n) over N = {n} nodes"
        )


class Tree:
    """A batch of draft trees over N slots.  Build with the classmethods."""

    def __init__(self, parents: torch.Tensor, *, validate: bool = True):
        parents = _as_parents(parents)
        if validate:
            _validate_parents(parents)  # on the ids as given, before the int32 conversion
        if parents.dtype == torch.int64:  # unvalidated: past int32 stays invalid, never wraps
            parents = parents.clamp(-(2**31), 2**31 - 1)
        self.parents = parents.to(torch.int32)
        self._derive()
        # Static sizes the verify ops need (the longest root-to-leaf path and the most leaves of
        # any row).  Known without a device read when the tree was validated on the host, lives
        # on the CPU, or comes from a classmethod; otherwise read once on first use and cached.
        if validate or parents.device.type == "cpu":
            self._path_width = int(self.depth.max()) + 1
            self._num_leaves = int(self.is_leaf.sum(-1).max())

    # construction -------------------------------------------------------------------------
    @classmethod
    def from_parents(cls, parents, *, validate: bool = True) -> Tree:
        """``parents`` [N] or [B, N]; validated on the host unless ``validate=False`` (for trees
        built on the device, which are valid by construction)."""
        return cls(parents, validate=validate)

    @classmethod
    def chain(cls, n: int, *, batch: int = 1, device=None) -> Tree:
        """n nodes, each the child of the one before: the root and n - 1 drafts."""
        if n < 1:
            raise ValueError(f"Tree.chain: n must be >= 1, got {n}")
        parents = torch.arange(-1, n - 1, dtype=torch.int32, device=device)
        return cls(parents.expand(batch, n).contiguous(), validate=False)._sizes(n, 1)

    @staticmethod
    def _kary_parents(k: int, depth: int) -> list[int]:
        # Breadth-first order: level l holds k^l nodes; children of a node are consecutive.
        parents = [-1]
        level = [0]
        for _ in range(depth - 1):
            nxt = []
            for node in level:
                for _ in range(k):
                    parents.append(node)
                    nxt.append(len(parents) - 1)
            level = nxt
        return parents

    @classmethod
    def kary(cls, k: int, depth: int, *, batch: int = 1, device=None) -> Tree:
        """Complete k-ary tree with ``depth`` levels counting the root: (k^D - 1)/(k - 1) nodes."""
        if k < 1 or depth < 1:
            raise ValueError(f"Tree.kary: need k >= 1 and depth >= 1, got k={k}, depth={depth}")
        parents = torch.tensor(cls._kary_parents(k, depth), dtype=torch.int32, device=device)
        tree = cls(parents.expand(batch, -1).contiguous(), validate=False)
        return tree._sizes(depth, k ** (depth - 1))

    @classmethod
    def kary_chain(cls, k: int, depth: int, length: int, *, batch: int = 1, device=None) -> Tree:
        """SJD-PAC's window of ``length`` nodes: ``kary(k, depth)`` with its first root-to-leaf
        path (0, 1, first child of 1, ...) extended as a chain until ``length`` nodes."""
        parents = cls._kary_parents(k, depth) if k >= 1 and depth >= 1 else []
        if not parents:
            raise ValueError(
                f"Tree.kary_chain: need k >= 1 and depth >= 1, got k={k}, depth={depth}"
            )
        if length < len(parents):
            raise ValueError(
                f"Tree.kary_chain: length must be >= the {len(parents)} nodes of "
                f"kary({k}, {depth}),"
                f" got {length}"
            )
        kary_nodes = len(parents)
        # First leaf of the k-ary part: follow first children from the root.
        leaf = 0
        for _ in range(depth - 1):
            leaf = parents.index(leaf)
        while len(parents) < length:
            parents.append(leaf)
            leaf = len(parents) - 1
        t = torch.tensor(parents, dtype=torch.int32, device=device)
        tree = cls(t.expand(batch, -1).contiguous(), validate=False)
        return tree._sizes(depth + length - kary_nodes, k ** (depth - 1))

    def _sizes(self, path_width: int, num_leaves: int) -> Tree:
        self._path_width = path_width
        self._num_leaves = num_leaves
        return self

    # derived structure --------------------------------------------------------------------
    def _derive(self) -> None:
        p = self.parents.long()
        b, n = p.shape
        dev = p.device
        # ancestors-or-self by pointer doubling: reach_1 = I | parent edges, and reach_{2k} =
        # reach_k . reach_k (boolean product) covers paths of length <= 2k; ceil(log2 N) steps
        # reach the root from every node.  No loop over nodes, no host sync.
        ids = torch.arange(n, device=dev)
        anc = (p[:, :, None] == ids[None, None, :]) | (ids[:, None] == ids[None, :])
        steps = max(1, (n - 1).bit_length())
        for _ in range(steps):
            f = anc.to(torch.float32)
            anc = torch.bmm(f, f) > 0
        depth = anc.sum(-1) - 1
        self.ancestors = anc  # [B, N, N] bool, row n = n and its ancestors
        self.depth = depth.to(torch.int32)
        self.mask_bits = pack_bits(anc)
        # children[b, q, m]: node m is a child of q
        children = p[:, None, :] == ids[None, :, None]
        has_child = children.any(-1)
        first = torch.where(children, ids, n).amin(-1)
        self.first_child = torch.where(has_child, first, -1).to(torch.int32)
        same_parent = (p[:, :, None] == p[:, None, :]) & (ids[None, None, :] > ids[None, :, None])
        same_parent &= p[:, :, None] >= 0
        nxt = torch.where(same_parent, ids, n).amin(-1)
        self.next_sibling = torch.where(nxt < n, nxt, -1).to(torch.int32)
        self.is_leaf = ~has_child

    # properties -----------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.parents.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.parents.shape[1]

    @property
    def device(self) -> torch.device:
        return self.parents.device

    def max_depth(self) -> int:
        """Deepest node's depth (a host read: call outside hot loops)."""
        return int(self.depth.max())

    def paths(self) -> torch.Tensor:
        """Root-to-leaf paths [B, P, max_depth + 1], node ids root first, -1 padded; P = the most
        leaves of any row, rows with fewer leaves padded with all -1 paths; leaves in index order.
        A host-side helper (it reads the tree)."""
        anc = self.ancestors.cpu()
        leaf = self.is_leaf.cpu()
        depth = self.depth.cpu().long()
        b, n = self.parents.shape
        d = int(depth.max()) + 1
        p = int(leaf.sum(-1).max())
        out = torch.full((b, p, d), -1, dtype=torch.int32)
        for r in range(b):
            leaves = leaf[r].nonzero().flatten()
            for i, lf in enumerate(leaves.tolist()):
                nodes = anc[r, lf].nonzero().flatten()  # ancestors in index (= depth) order
                out[r, i, : len(nodes)] = nodes.to(torch.int32)
        return out.to(self.device)

    def to(self, device) -> Tree:
        t = object.__new__(Tree)
        for k, v in self.__dict__.items():
            t.__dict__[k] = v.to(device) if isinstance(v, torch.Tensor) else v
        return t

    def expand(self, batch: int) -> Tree:
        """The same tree for each of ``batch`` rows (from a batch-1 tree)."""
        if self.batch_size == batch:
            return self
        if self.batch_size != 1:
            raise ValueError(f"Tree.expand: can only expand a batch-1 tree, have {self.batch_size}")
        t = object.__new__(Tree)
        for k, v in self.__dict__.items():
            t.__dict__[k] = v.expand(batch, *v.shape[1:]) if isinstance(v, torch.Tensor) else v
        return t

    def __repr__(self) -> str:
        return f"Tree(batch={self.batch_size}, nodes={self.num_nodes}, device={self.device})"


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """[..., N] bool -> [..., ceil(N/32)] int32 with bit j % 32 of word j // 32 = mask[..., j]."""
    n = mask.shape[-1]
    words = (n + 31) // 32
    pad = words * 32 - n
    m = torch.nn.functional.pad(mask.to(torch.int64), (0, pad)).view(*mask.shape[:-1], words, 32)
    weights = torch.bitwise_left_shift(
        torch.ones(32, dtype=torch.int64, device=mask.device), torch.arange(32, device=mask.device)
    )
    packed = (m * weights).sum(-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed)  # two's complement int32
    return packed.to(torch.int32)


def unpack_bits(bits: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of pack_bits: [..., W] int32 -> [..., n] bool."""
    j = torch.arange(n, device=bits.device)
    words = bits.long()[..., j // 32]
    return ((words >> (j % 32)) & 1).bool()
