"""Draft trees: parent arrays and the structures kernels derive from them.

A tree of N nodes is a parent array with ``parents[0] == -1`` (node 0 is the root, the last
committed token) and ``0 <= parents[n] < n`` for every other node (topological order).  Batched
trees are ``[B, N]``; every row is its own tree over the same N slots (B = 0 allowed).

Derived (int32 on the parents' device): ``depth``, ``mask_bits [B, N, ceil(N/32)]`` (bit
``j % 32`` of word ``j // 32`` of row ``n`` set iff ``j`` is ``n`` or an ancestor of ``n``),
``first_child``, ``next_sibling``, ``is_leaf``, ``ancestors`` and ``paths()``.  At most
``Tree.MAX_NODES`` = 16384 nodes; building takes O(log N) vectorised steps and no host sync.
Trees built with ``validate=False`` are trusted: an out-of-range parent counts as "no parent".

Each field, the size limits and the build cost in full: docs/trees.md.
"""

from __future__ import annotations

import torch

from specops._int_arg import check_int

__all__ = ["Tree", "MAX_NODES"]

MAX_NODES = 16384  # nodes of one tree; mask_bits [B, N, N/32] int32 = 32 MiB per row at the max
_MAX_MASK_WORDS = 2**31 - 1  # B * N * ceil(N/32): 32-bit offsets into mask_bits


def _words(n: int) -> int:
    return (n + 31) // 32


def _check_int(op: str, name: str, v, lo: int, hi: int | None = None) -> int:
    """``v`` must be an int (not a bool, not a float) in [lo, hi]; the error names ``name``."""
    return check_int(f"specops.Tree.{op}", name, v, lo, hi)


def _check_batch(op: str, batch, n: int) -> int:
    batch = _check_int(op, "batch", batch, 0)
    if batch * n * _words(n) > _MAX_MASK_WORDS:
        raise ValueError(
            f"specops.Tree.{op}: batch must keep B * N * ceil(N/32) <= {_MAX_MASK_WORDS} words of "
            f"mask_bits for N = {n} nodes (at most {_MAX_MASK_WORDS // (n * _words(n))}), "
            f"got {batch}"
        )
    return batch


def _check_device(op: str, device) -> torch.device | None:
    if device is None:
        return None
    try:
        dev = torch.device(device)
        torch.empty(0, device=dev)  # an unavailable device (no CUDA, index out of range)
    except (RuntimeError, TypeError, ValueError, AssertionError) as e:
        raise ValueError(
            f"specops.Tree.{op}: device must be None or an available torch device, got "
            f"{device!r} ({e})"
        ) from None
    return dev


def _check_num_nodes(op: str, name: str, n: int, what: str) -> None:
    if n > MAX_NODES:
        raise ValueError(
            f"specops.Tree.{op}: {name} must give at most Tree.MAX_NODES = {MAX_NODES} nodes, "
            f"got {what}"
        )


def _as_parents(parents) -> torch.Tensor:
    op = "from_parents"
    if not isinstance(parents, torch.Tensor):
        try:
            parents = torch.as_tensor(parents)
        except (TypeError, ValueError, RuntimeError, OverflowError) as e:
            raise TypeError(
                f"specops.Tree.{op}: parents must be an integer tensor or a nested list of ints "
                f"of shape [N] or [B, N], got {type(parents).__name__} ({e})"
            ) from None
    if parents.dtype not in (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8):
        raise TypeError(
            f"specops.Tree.{op}: parents must be an integer tensor, got dtype {parents.dtype}"
        )
    if parents.dim() == 1:
        parents = parents.unsqueeze(0)
    if parents.dim() != 2:
        raise ValueError(
            f"specops.Tree.{op}: parents must have shape [N] or [B, N], got shape "
            f"{tuple(parents.shape)}"
        )
    b, n = parents.shape
    if n < 1:
        raise ValueError(
            f"specops.Tree.{op}: parents must hold at least the root (N >= 1), got shape "
            f"{tuple(parents.shape)}"
        )
    _check_num_nodes(op, "parents", n, f"shape {tuple(parents.shape)}")
    if b * n * _words(n) > _MAX_MASK_WORDS:
        raise ValueError(
            f"specops.Tree.{op}: parents must keep B * N * ceil(N/32) <= {_MAX_MASK_WORDS} words "
            f"of mask_bits, got shape {tuple(parents.shape)}"
        )
    return parents


def _validate_parents(parents: torch.Tensor) -> None:
    """Host-side structural check: one root at node 0, parents before children, in range."""
    p = parents.to("cpu", torch.int64)
    b, n = p.shape
    op = "specops.Tree.from_parents"
    if (p[:, 0] != -1).any():
        row = int((p[:, 0] != -1).nonzero()[0, 0])
        raise ValueError(
            f"{op}: parents[{row}, 0] must be -1 (node 0 is the root), got {int(p[row, 0])}"
        )
    if n == 1:
        return
    rest = p[:, 1:]
    idx = torch.arange(1, n).expand(b, -1)
    roots = rest == -1
    if roots.any():
        r, c = (roots.nonzero()[0]).tolist()
        raise ValueError(
            f"{op}: parents[{r}, {c + 1}] must not be -1: only node 0 may be a root (two roots)"
        )
    bad = (rest < 0) | (rest >= idx)
    if bad.any():
        r, c = (bad.nonzero()[0]).tolist()
        raise ValueError(
            f"{op}: parents[{r}, {c + 1}] must be in [0, {c + 1}) (parents are topological, "
            f"0 <= parents[n] < n, over N = {n} nodes), got {int(rest[r, c])}: out of range"
        )


def _jump(p: torch.Tensor) -> torch.Tensor:
    """[B, N] long parent pointers with every root (and, in unvalidated trees, every entry
    outside [0, n) at node n) pointing at itself."""
    ids = torch.arange(p.shape[1], device=p.device)
    return torch.where((p >= 0) & (p < ids), p, ids)


# A Tree's tensors, each [B, N, ...]; everything else on it is the two static sizes below.
_FIELDS = ("parents", "depth", "mask_bits", "first_child", "next_sibling", "is_leaf")


class Tree:
    """A batch of draft trees over N slots.  Build with the classmethods.

    At most ``Tree.MAX_NODES`` = 16384 nodes, and B * N * ceil(N/32) <= 2**31 - 1 words of
    ``mask_bits`` (ValueError otherwise, raised before any allocation).  Construction needs
    O(B * N * ceil(N/32)) memory and O(log N) vectorised steps; B = 0 is allowed."""

    MAX_NODES = MAX_NODES
    # The static sizes behind ``path_width`` and ``num_leaves``; None until known.
    _path_width: int | None = None
    _num_leaves: int | None = None

    def __init__(self, parents: torch.Tensor, *, validate: bool = True):
        if not isinstance(validate, bool):
            raise TypeError(
                f"specops.Tree.from_parents: validate must be a bool, got "
                f"{type(validate).__name__} {validate!r}"
            )
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
            empty = self.depth.numel() == 0
            self._path_width = 1 if empty else int(self.depth.max()) + 1
            self._num_leaves = 0 if empty else int(self.is_leaf.sum(-1).max())

    # construction -------------------------------------------------------------------------
    @classmethod
    def from_parents(cls, parents, *, validate: bool = True) -> Tree:
        """``parents`` [N] or [B, N] (an integer tensor or nested lists of ints), N <=
        ``Tree.MAX_NODES``; validated on the host unless ``validate=False`` (for trees built on
        the device, which are valid by construction)."""
        return cls(parents, validate=validate)

    @classmethod
    def _broadcast(cls, parents: torch.Tensor, batch: int, sizes: tuple[int, int]) -> Tree:
        """Derive a one-row tree, then give every one of ``batch`` rows its own copy."""
        tree = cls(parents[None], validate=False)
        if batch != 1:
            tree = tree._map(lambda v: v.expand(batch, *v.shape[1:]).contiguous())
        return tree._sizes(*sizes)

    @classmethod
    def _of(cls, tensors, path_width: int | None = None, num_leaves: int | None = None) -> Tree:
        """A Tree from its tensors in ``_FIELDS`` order, taken as they are (no derivation, no
        validation): for trees built on the device.  Plain attribute writes, which
        torch.compile traces (it cannot trace ``__dict__`` methods on every torch version)."""
        t = object.__new__(cls)
        for k, v in zip(_FIELDS, tensors):
            setattr(t, k, v)
        t._path_width = path_width
        t._num_leaves = num_leaves
        return t

    def _tensors(self) -> tuple:
        return tuple(getattr(self, k) for k in _FIELDS)

    def _map(self, f) -> Tree:
        """The tree with ``f`` applied to each tensor; the static sizes carried over."""
        return Tree._of(tuple(f(v) for v in self._tensors()), self._path_width, self._num_leaves)

    @classmethod
    def chain(cls, n: int, *, batch: int = 1, device=None) -> Tree:
        """n nodes, each the child of the one before: the root and n - 1 drafts
        (1 <= n <= ``Tree.MAX_NODES``)."""
        n = _check_int("chain", "n", n, 1, MAX_NODES)
        batch = _check_batch("chain", batch, n)
        dev = _check_device("chain", device)
        parents = torch.arange(-1, n - 1, dtype=torch.int32, device=dev)
        return cls._broadcast(parents, batch, (n, 1))

    @staticmethod
    def _kary_nodes(op: str, k: int, depth: int) -> int:
        """(k^D - 1)/(k - 1) nodes, or a ValueError past MAX_NODES (without computing k^D)."""
        count, level = 0, 1
        for _ in range(depth):
            count += level
            level *= k
            if count > MAX_NODES:
                break
        if count > MAX_NODES:  # checked before anything is allocated
            exact = (k**depth - 1) // (k - 1) if k > 1 and depth <= 64 else None
            what = f"{exact}" if exact is not None else f"more than {MAX_NODES}"
            raise ValueError(
                f"specops.Tree.{op}: depth must give at most Tree.MAX_NODES = {MAX_NODES} nodes "
                f"((k^depth - 1)/(k - 1) with k = {k}), got depth = {depth}: {what} nodes"
            )
        return count

    @staticmethod
    def _kary_parents(k: int, nodes: int, device=None) -> torch.Tensor:
        # Breadth-first order: level l holds k^l nodes; children of a node are consecutive, so
        # node i >= 1 hangs from (i - 1) // k.
        ids = torch.arange(nodes, dtype=torch.int32, device=device)
        parents = torch.div(ids - 1, k, rounding_mode="floor")
        parents[0] = -1
        return parents

    @classmethod
    def kary(cls, k: int, depth: int, *, batch: int = 1, device=None) -> Tree:
        """Complete k-ary tree with ``depth`` levels counting the root: (k^D - 1)/(k - 1) nodes
        (at most ``Tree.MAX_NODES``)."""
        k = _check_int("kary", "k", k, 1)
        depth = _check_int("kary", "depth", depth, 1, MAX_NODES)
        nodes = cls._kary_nodes("kary", k, depth)
        batch = _check_batch("kary", batch, nodes)
        dev = _check_device("kary", device)
        return cls._broadcast(cls._kary_parents(k, nodes, dev), batch, (depth, k ** (depth - 1)))

    @classmethod
    def kary_chain(cls, k: int, depth: int, length: int, *, batch: int = 1, device=None) -> Tree:
        """SJD-PAC's window of ``length`` nodes: ``kary(k, depth)`` with its first root-to-leaf
        path (0, 1, first child of 1, ...) extended as a chain until ``length`` nodes
        (kary(k, depth)'s node count <= length <= ``Tree.MAX_NODES``)."""
        op = "kary_chain"
        k = _check_int(op, "k", k, 1)
        depth = _check_int(op, "depth", depth, 1, MAX_NODES)
        kary_nodes = cls._kary_nodes(op, k, depth)
        length = _check_int(op, "length", length, kary_nodes, MAX_NODES)
        batch = _check_batch(op, batch, length)
        dev = _check_device(op, device)
        parents = torch.empty(length, dtype=torch.int32, device=dev)
        parents[:kary_nodes] = cls._kary_parents(k, kary_nodes, dev)
        # First leaf of the k-ary part: follow first children (node x's first is k x + 1).
        leaf = 0
        for _ in range(depth - 1):
            leaf = k * leaf + 1
        if length > kary_nodes:
            parents[kary_nodes] = leaf
            parents[kary_nodes + 1 :] = torch.arange(
                kary_nodes, length - 1, dtype=torch.int32, device=dev
            )
        return cls._broadcast(parents, batch, (depth + length - kary_nodes, k ** (depth - 1)))

    def _sizes(self, path_width: int, num_leaves: int) -> Tree:
        self._path_width = path_width
        self._num_leaves = num_leaves
        return self

    # derived structure --------------------------------------------------------------------
    def _derive(self) -> None:
        p = self.parents.long()
        b, n = p.shape
        dev = p.device
        ids = torch.arange(n, device=dev)
        jump = _jump(p)  # roots point at themselves
        has_parent = jump != ids
        # depth by pointer doubling (list ranking): after step s, jump[n] is n's 2^s-th
        # ancestor (or its root) and dist[n] the distance to it; ceil(log2 N) steps, each a
        # gather over [B, N].
        dist = has_parent.to(torch.int32)
        for _ in range((n - 1).bit_length()):
            dist = dist + dist.gather(1, jump)
            jump = jump.gather(1, jump)
        self.depth = dist
        self.mask_bits = self._ancestor_bits(p, has_parent)
        # first child: the smallest node whose parent is q (scatter-min; column n collects roots)
        tgt = torch.where(has_parent, p, n)
        first = torch.full((b, n + 1), n, dtype=torch.int64, device=dev)
        first.scatter_reduce_(1, tgt, ids.expand(b, n), reduce="amin")
        first = first[:, :n]
        self.first_child = torch.where(first < n, first, -1).to(torch.int32)
        # next sibling: the next node of the same parent in (parent, index) order
        key = torch.where(has_parent, p, -1)
        order = torch.sort(key, dim=1, stable=True).indices
        skey = key.gather(1, order)
        same = (skey[:, 1:] == skey[:, :-1]) & (skey[:, 1:] >= 0)
        nxt = torch.cat(
            [torch.where(same, order[:, 1:], -1), torch.full((b, 1), -1, device=dev)], 1
        )
        self.next_sibling = torch.empty_like(nxt).scatter_(1, order, nxt).to(torch.int32)
        self.is_leaf = first >= n

    @staticmethod
    def _ancestor_bits(p: torch.Tensor, has_parent: torch.Tensor) -> torch.Tensor:
        """[B, N, ceil(N/32)] int32 ancestors-or-self bits in O(B N W) memory and work.

        Node ids increase along every root-to-node path, so n's ancestors inside a 32-node block
        form one contiguous stretch of that path.  Word block(n) of n is its *local* bits (its
        ancestors in its own block: pointer doubling, 5 steps over [B, N] words); the words
        before it are those of q(n), the parent of the shallowest ancestor of n in n's block,
        which lies in an earlier block.  One pass over the W blocks in order copies them: W - 1
        small gathers, no [N, N] intermediate, no host sync."""
        b, n = p.shape
        dev = p.device
        ids = torch.arange(n, device=dev)
        w = _words(n)
        one = torch.bitwise_left_shift(torch.ones((), dtype=torch.int64, device=dev), ids % 32)
        local = torch.where(one >= 2**31, one - 2**32, one).to(torch.int32).expand(b, n)
        inside = has_parent & (torch.div(p, 32, rounding_mode="floor") == (ids // 32))
        entry = torch.where(inside, p, ids)  # -> the shallowest ancestor in the block
        for _ in range(min(5, (n - 1).bit_length())):
            local = local | local.gather(1, entry)
            entry = entry.gather(1, entry)
        has_q = has_parent.gather(1, entry)
        q = torch.where(has_q, p.gather(1, entry), 0)
        bits = torch.zeros(b, n, w, dtype=torch.int32, device=dev)
        bits[:, ids, ids // 32] = local
        for c in range(1, w):
            lo, hi = 32 * c, min(32 * c + 32, n)
            idx = q[:, lo:hi, None].expand(b, hi - lo, c)
            prev = bits[:, :lo, :c].gather(1, idx)
            bits[:, lo:hi, :c] = torch.where(has_q[:, lo:hi, None], prev, 0)
        return bits

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

    @property
    def path_width(self) -> int:
        """Nodes on the longest root-to-leaf path of any row (max depth + 1; 1 for B = 0): the
        width of ``verify_tree``'s outputs.  Static (no device read) for a tree validated on the
        host, on the CPU, from a classmethod or from ``with_path_width``; otherwise read from the
        device once and kept."""
        if self._path_width is None:
            self._path_width = int(self.depth.max()) + 1 if self.depth.numel() else 1
        return self._path_width

    @property
    def num_leaves(self) -> int:
        """Most leaves of any row (0 for B = 0): the path count of ``paths()`` and
        ``path_acceptance``; static as ``path_width`` is."""
        if self._num_leaves is None:
            self._num_leaves = int(self.is_leaf.sum(-1).max()) if self.is_leaf.numel() else 0
        return self._num_leaves

    def with_path_width(self, width: int) -> Tree:
        """This tree (the same tensors) with its ``path_width`` stated, for a tree built on the
        device whose longest path the builder knows without looking (EAGLE-2's tree of depth D:
        at most D + 1 nodes), so that verifying it reads nothing from the device.  ``width`` must
        be at least max depth + 1 (not checked: that would read the device); a wider one only
        pads the outputs."""
        width = _check_int("with_path_width", "width", width, 1)
        return Tree._of(self._tensors(), width, self._num_leaves)

    @property
    def ancestors(self) -> torch.Tensor:
        """[B, N, N] bool, row n = n and its ancestors: ``mask_bits`` unpacked on each access
        (O(B N^2) memory: for tests and small trees; kernels read ``mask_bits``)."""
        return unpack_bits(self.mask_bits, self.num_nodes)

    def max_depth(self) -> int:
        """Deepest node's depth (a host read: call outside hot loops); 0 for an empty batch."""
        return int(self.depth.max()) if self.depth.numel() else 0

    def paths(self) -> torch.Tensor:
        """Root-to-leaf paths [B, P, max_depth + 1], node ids root first, -1 padded; P = the most
        leaves of any row, rows with fewer leaves padded with all -1 paths; leaves in index order.
        A host-side helper (it reads P and the depth from the tree).  O(B P D log D) work by
        pointer doubling from the leaves, no [N, N] intermediate."""
        b, n = self.parents.shape
        dev = self.device
        leaf = self.is_leaf
        depth = self.depth.long()
        d = self.max_depth() + 1
        p = int(leaf.sum(-1).max()) if leaf.numel() else 0
        # leaves of each row in index order, then the non-leaves (padding)
        order = torch.sort((~leaf).to(torch.int8), dim=1, stable=True).indices[:, :p]
        valid = leaf.gather(1, order)  # [B, P]
        # out[b, i, l] = the ancestor of leaf i at depth l = its (depth(leaf) - l)-th ancestor
        up = depth.gather(1, order)[:, :, None] - torch.arange(d, device=dev)  # [B, P, D]
        ok = valid[:, :, None] & (up >= 0)
        up = up.clamp(min=0)
        cur = order[:, :, None].expand(b, p, d).reshape(b, p * d)
        up = up.reshape(b, p * d)
        jump = _jump(self.parents.long())  # 2^s-th ancestors at step s
        for s in range((d - 1).bit_length()):
            cur = torch.where((up >> s) & 1 == 1, jump.gather(1, cur), cur)
            jump = jump.gather(1, jump)
        return torch.where(ok, cur.view(b, p, d), -1).to(torch.int32)

    def to(self, device) -> Tree:
        return self._map(lambda v: v.to(device))

    def expand(self, batch: int) -> Tree:
        """The same tree for each of ``batch`` rows (from a batch-1 tree; stride-0 views)."""
        batch = _check_int("expand", "batch", batch, 0)
        if self.batch_size == batch:
            return self
        if self.batch_size != 1:
            raise ValueError(
                f"specops.Tree.expand: batch must equal the tree's batch {self.batch_size} "
                f"(only a batch-1 tree expands), got {batch}"
            )
        return self._map(lambda v: v.expand(batch, *v.shape[1:]))

    def __repr__(self) -> str:
        return f"Tree(batch={self.batch_size}, nodes={self.num_nodes}, device={self.device})"


_CHAIN_BITS: dict = {}


def chain_bits(n: int, batch: int, device) -> torch.Tensor:
    """mask_bits [batch, n, ceil(n/32)] of a causal chain of n tokens (row i sees 0 .. i), built
    once per (n, batch, device) and shared (read-only)."""
    key = (n, batch, str(device))
    bits = _CHAIN_BITS.get(key)
    if bits is None:
        bits = _CHAIN_BITS[key] = Tree.chain(n, batch=batch, device=device).mask_bits
    return bits


def call_bits(tree, batch: int, n: int, device) -> torch.Tensor:
    """The mask bits a model call of ``n`` tokens attends with: a causal chain for ``tree=None``,
    a Tree's own (batch 1 expanded to ``batch``), or ``tree`` itself when it is already bits."""
    if tree is None:
        return chain_bits(n, batch, device)
    if isinstance(tree, Tree):
        return tree.expand(batch).mask_bits if tree.batch_size == 1 else tree.mask_bits
    return tree


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
    words = bits.to(torch.int32)[..., j // 32]  # arithmetic shift: bit 31 still lands in bit 0
    return ((words >> (j % 32).to(torch.int32)) & 1).bool()
