"""The model of the decoding-loop losslessness tests (tests/test_decode_lossless_*.py), whose output
distribution is known exactly: a second-order Markov chain over a few tokens, wrapped in the
model protocol.  Its "KV cache" stores the token ids (so a wrong ``commit_kv`` or a wrong tree
mask changes the distribution), and the parent of every tree node is read from the mask bits.
``_check`` holds decoded tokens to the chain's exact joint distribution of every three
consecutive tokens (chi-square, fixed seeds)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import torch
from helpers import chi2_pvalue

import specops
from specops import Tree
from specops.tree import unpack_bits

V = 4  # states; token V is the prompt
LENGTH = 7
BATCH = 2000
HIDDEN = 8


class _Cache:
    def __init__(self, batch, capacity, device="cpu"):
        # token id + 1 stored in element 0 of a one-head, 64-wide "key" (0 = empty)
        self.kv = torch.zeros(1, 2, batch, capacity, 1, 64, device=device)
        self.seqlens = torch.zeros(batch, dtype=torch.int32, device=device)

    def layer(self, i):
        return self.kv[i, 0], self.kv[i, 1]


def _parents_from_bits(bits, n):
    """parent of node n = its deepest proper ancestor (-1 for the tree root)."""
    anc = unpack_bits(bits, n)  # [B, N, N]
    ids = torch.arange(n)
    proper = anc & (ids[None, None, :] != ids[None, :, None])
    return torch.where(proper, ids, -1).amax(-1)


class MarkovLM:
    """x_{t+1} ~ T[x_{t-1}, x_t]: a second-order chain; x_{-1} of the first token = 'start'."""

    def __init__(self, seed=0, concentration=0.6):
        g = np.random.default_rng(seed)
        # prev in [0, V] (V = prompt) plus V + 1 = start; cur in [0, V]
        self.table = torch.tensor(g.dirichlet([concentration] * V, size=(V + 2, V + 1)))
        self.cfg = SimpleNamespace(vocab=V, null_class=None, grid=None)

    def new_cache(self, batch, capacity, device="cpu"):
        return _Cache(batch, capacity, device)

    def __call__(self, tokens, positions, cache, tree=None):
        b, n = tokens.shape
        if tree is None:
            par = torch.arange(-1, n - 1).expand(b, n)
        else:
            bits = tree.mask_bits if isinstance(tree, Tree) else tree
            par = _parents_from_bits(bits.expand(b, -1, -1), n)
        kc, vc = cache.layer(0)
        stored = torch.zeros(b, n, 1, 64)
        stored[:, :, 0, 0] = tokens.float() + 1
        specops.append_kv(kc, vc, stored, stored, cache.seqlens)
        last = kc[torch.arange(b), (cache.seqlens.long() - 1).clamp(min=0), 0, 0].long() - 1
        last = torch.where(cache.seqlens > 0, last, V + 1)  # nothing before: 'start'
        prev = torch.where(par >= 0, tokens.gather(1, par.clamp(min=0)), last[:, None])
        cur = tokens.long().clamp(0, V)  # (a CFG null prompt reads as the prompt, index V)
        probs = self._rows(kc, b)[torch.arange(b)[:, None], prev.long(), cur]
        hidden = torch.nn.functional.one_hot(cur, HIDDEN).float()
        return probs.log().float(), hidden

    def _rows(self, kc, b):
        """The transition table of every cache row [B, V + 2, V + 1, V]."""
        return self.table.expand(b, -1, -1, -1)

    def joint(self, start: int) -> np.ndarray:
        """Exact P(x_start, x_start+1, x_start+2) (tokens 1-based, x_0 = prompt) [V, V, V]."""
        t = self.table.numpy()
        pair = np.zeros((V + 2, V + 1))  # distribution of (x_{i-1}, x_i)
        pair[getattr(self, "first", (V + 1, V))] = 1.0  # (start, prompt)
        for _ in range(start - 1):
            new = np.zeros_like(pair)
            for a, c in itertools.product(range(V + 2), range(V + 1)):
                if pair[a, c] > 0:
                    new[c, :V] += pair[a, c] * t[a, c]
            pair = new
        out = np.zeros((V, V, V))
        for a, c in itertools.product(range(V + 2), range(V + 1)):
            if pair[a, c] == 0:
                continue
            for x, y, z in itertools.product(range(V), repeat=3):
                out[x, y, z] += pair[a, c] * t[a, c, x] * t[c, x, y] * t[x, y, z]
        return out


class MarkovDrafter:
    """A first-order chain Q[x] (deliberately different from the target) in the drafter
    protocol; features are ignored."""

    def __init__(self, seed=1):
        g = np.random.default_rng(seed)
        self.table = torch.tensor(g.dirichlet([0.8] * V, size=V + 1)).float()

    def new_cache(self, batch, capacity, device="cpu"):
        return _Cache(batch, capacity, device)

    def __call__(self, tokens, features, step, positions, cache, tree=None):
        b, m = tokens.shape
        return self.table[tokens.long().clamp(0, V)].log(), torch.zeros(b, m, HIDDEN)

    def extend(self, tokens, features, step, positions, cache, bits, n_old):
        return self(tokens, features, step, positions, cache)


def _counts(tokens: torch.Tensor, start: int) -> np.ndarray:
    x = tokens[:, start - 1 : start + 2].long().numpy()
    idx = x[:, 0] * V * V + x[:, 1] * V + x[:, 2]
    return np.bincount(idx, minlength=V**3)


def _check(model, tokens, *, expect_pass=True):
    assert tokens.shape[1] == LENGTH
    assert int(tokens.min()) >= 0 and int(tokens.max()) < V
    pvals = [chi2_pvalue(_counts(tokens, s), model.joint(s)) for s in range(1, LENGTH - 1)]
    if expect_pass:
        assert min(pvals) > 1e-3, pvals
    else:
        assert min(pvals) < 1e-6, pvals
    return pvals


CLASSES = torch.zeros(BATCH, dtype=torch.long)
# SJD-PAC's branch continuation biases only some windows slightly when wired wrong: its test and
# negative control use 4x the samples
CLASSES_PAC = torch.zeros(4 * BATCH, dtype=torch.long)


# top-k / top-p filtering and classifier-free guidance: the chains a decoder must sample --------
def _filtered(m, **sampling):
    """The chain whose rows are the target's rows after top-k / top-p filtering (the exact
    distribution a lossless decoder with these settings must reproduce)."""
    import copy

    f = copy.copy(m)
    f.table = specops.probs_from_logits(m.table.log().float(), **sampling).double()
    return f


class CFGMarkovLM(MarkovLM):
    """MarkovLM whose unconditional rows (prompt = the null class V + 1) follow another chain
    table_u; with guidance scale s the decoders sample the chain with rows
    softmax(log table_u + s (log table - log table_u)) (``cfg_table``)."""

    def __init__(self, seed=0, scale=1.5):
        super().__init__(seed)
        g = np.random.default_rng(seed + 100)
        self.table_u = torch.tensor(g.dirichlet([0.6] * V, size=(V + 2, V + 1)))
        self.cfg = SimpleNamespace(vocab=V, null_class=V + 1, grid=None)
        self.scale = scale

    def _rows(self, kc, b):
        uncond = kc[:b, 0, 0, 0] == self.cfg.null_class + 1  # the row's first cached token
        t = torch.where(uncond[:, None, None, None], self.table_u[None], self.table[None])
        return t

    def cfg_table(self):
        f = MarkovLM.__new__(MarkovLM)
        f.__dict__.update(self.__dict__)
        f.table = specops.probs_from_logits(
            self.table.log().float(), cfg_scale=self.scale, uncond_logits=self.table_u.log().float()
        ).double()
        return f
