"""The model runners of the decoding loop: the target (static KV cache, CFG pairs, probabilities)
and an EAGLE/HiViS feature drafter (its own cache).

Model protocol (DESIGN.md, "The decoding loop")::

    cache = model.new_cache(batch, capacity)   # .kv [layers, 2, B, S, Hkv, D], .seqlens [B] int32
    logits, hidden = model(tokens [B, N], positions [B, N], cache, tree=None)

The N new tokens' K/V land at cache.seqlens + n and are not committed by the model; the loop
commits the accepted ones with ``specops.commit_kv``.  Sequence bookkeeping used throughout:
the cache holds the committed prefix s_0 .. s_{c-1} (c = seqlens); the *root* s_c is the last
token emitted, not yet fed to the target; a draft node at depth d sits at position c + d.
"""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode.sampling import Sampling
from specops.decode.stats import Recorder
from specops.tree import Tree

__all__ = ["TargetRunner", "DraftRunner"]


class TargetRunner:
    """The target model with its static KV cache.  With ``sampling.cfg_scale`` the cache holds
    2B rows, cond then uncond; both halves get the same draft tokens and their logits are
    combined by ``probs_from_logits(cond, cfg_scale=s, uncond_logits=uncond)`` (uncond +
    s (cond - uncond)).
    Returns float32 probabilities at the sampling temperature / top-k / top-p, and the cond
    half's hidden states."""

    def __init__(
        self,
        model,
        prompt: torch.Tensor,
        *,
        capacity: int,
        rec: Recorder,
        sampling: Sampling = Sampling(),
        uncond_prompt: torch.Tensor | None = None,
    ):
        self.model, self.rec = model, rec
        self.batch = prompt.shape[0]
        self.cfg_scale = sampling.cfg_scale
        self.cfg = self.cfg_scale is not None
        self.sampling = sampling.probs_kwargs
        self.prompt = prompt
        if self.cfg:
            if uncond_prompt is None and callable(getattr(model, "uncond_prompt", None)):
                uncond_prompt = model.uncond_prompt(prompt)  # e.g. a negative prompt [B, P']
            if uncond_prompt is None:
                null = model.cfg.null_class
                uncond_prompt = torch.full_like(prompt, null)
            self.uncond_prompt = uncond_prompt
            # an uncond prompt longer than the prompt (Emu3's negative prompt) needs that room too
            capacity += max(0, uncond_prompt.shape[1] - prompt.shape[1])
        rows = 2 * self.batch if self.cfg else self.batch
        self.cache = model.new_cache(rows, capacity)
        self.device = prompt.device

    @property
    def seqlens(self) -> torch.Tensor:
        return self.cache.seqlens[: self.batch]

    def _pair(self, t):
        return torch.cat([t, t]) if (self.cfg and t is not None) else t

    def forward(self, tokens, positions, tree=None, *, charged, _uncond_tokens=None):
        """-> probs [B, N, V] float32, hidden [B, N, H]; one target pass charged to ``charged``.
        ``positions`` are the cond rows'; an uncond row whose prompt had another length sits at
        the same depth after its own committed prefix."""
        with nvtx_range("target_forward"):
            b = self.batch
            if isinstance(tree, Tree):
                tree = tree.expand(b).mask_bits if tree.batch_size == 1 else tree.mask_bits
            if self.cfg:
                unc = _uncond_tokens if _uncond_tokens is not None else tokens
                tokens = torch.cat([tokens, unc])
                shift = (self.cache.seqlens[b:] - self.cache.seqlens[:b]).long()[:, None]
                positions = torch.cat([positions, positions + shift])
                tree = self._pair(tree)
            with self.rec.timer("model"):
                logits, hidden = self.model(tokens, positions, self.cache, tree)
            self.rec.target_pass(charged)
            return self._probs(logits), hidden[:b]

    def _probs(self, logits):
        """Rows [B (cond) + B (uncond) with CFG, ..., V] -> float32 probabilities [B, ..., V]."""
        b = self.batch
        with self.rec.timer("specops"):
            if self.cfg:
                return specops.probs_from_logits(
                    logits[:b], cfg_scale=self.cfg_scale, uncond_logits=logits[b:], **self.sampling
                )
            return specops.probs_from_logits(logits, **self.sampling)

    def prefill(self):
        """Read the prompt [B, P] (and the uncond prompt [B, P'] with CFG); commit it.  Ragged
        prompts are -1 padded on the right: row r's first n_r = #(prompt[r] >= 0) entries are its
        prompt (the padding comes after them in the causal chain, so no real token sees it, and
        only n_r slots are committed); cond and uncond prompts may differ in length.
        -> (probs [B, V] of the first token, hidden [B, P, H] of the prompt)."""
        b, dev = self.batch, self.device
        rows = self.prompt
        if self.cfg:
            unc = self.uncond_prompt
            width = max(rows.shape[1], unc.shape[1])
            pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-1)
            rows = torch.cat([pad(rows), pad(unc.to(rows.dtype))])
        r, p = rows.shape
        n = (rows >= 0).sum(1)
        with nvtx_range("target_forward"):
            with self.rec.timer("model"):
                pos = torch.arange(p, device=dev).expand(r, p)
                logits, hidden = self.model(rows, pos, self.cache)
            self.rec.target_pass(torch.ones(b, dtype=torch.bool, device=dev))
            probs = self._probs(logits[torch.arange(r, device=dev), n - 1])  # last prompt tokens
        cols = torch.arange(p, device=dev, dtype=torch.int32).expand(r, p)
        with nvtx_range("commit"), self.rec.timer("specops"):
            specops.commit_kv(
                self.cache.kv, self.cache.seqlens, torch.where(cols < n[:, None], cols, -1)
            )
        return probs, hidden[:b, : self.prompt.shape[1]]

    def commit(self, slots: torch.Tensor) -> None:
        """Keep the tree slots ``slots`` [B, M] (offsets from seqlens, path order, -1 padded)."""
        with nvtx_range("commit"), self.rec.timer("specops"):
            specops.commit_kv(self.cache.kv, self.cache.seqlens, self._pair(slots))


class DraftRunner:
    """An EAGLE/HiViS feature drafter with its own static KV cache.  Drafter entry i holds the
    input [e(s_{i+1}) || f_i]: after the target verified up to s_c, entries 0 .. c-1 are
    committed and the output of entry c-1 predicts f_c, i.e. the root's children."""

    def __init__(self, drafter, batch: int, capacity: int, rec: Recorder, device):
        self.drafter, self.rec = drafter, rec
        self.cache = drafter.new_cache(batch, capacity, device=device)
        self.batch = batch
        # drafter position = own entry count + shift: 0 (compact sequence), or the number of
        # hidden prompt positions when hidden visual tokens keep the target's positions
        self.shift = torch.zeros(batch, dtype=torch.long, device=device)
        self._positions = None

    def prefill(self, prompt: torch.Tensor) -> None:
        """A standalone draft model (``drafter.reads_prompt``) first reads the prompt [B, P] (-1
        padded on the right) into its cache, so its entry i then holds s_{i+1} at the target's
        position of s_{i+1}.  A feature drafter starts from the first generated token."""
        if not getattr(self.drafter, "reads_prompt", False):
            return
        b, p = prompt.shape
        cols = torch.arange(p, device=prompt.device)
        with nvtx_range("drafter_forward"), self.rec.timer("model"):
            self.drafter(prompt, None, 0, cols.expand(b, p), self.cache)
        self.rec.drafter_pass()
        n = (prompt >= 0).sum(1)
        with self.rec.timer("specops"):
            slots = torch.where(cols < n[:, None], cols, -1).int()
            specops.commit_kv(self.cache.kv, self.cache.seqlens, slots)

    def first_entries(self, prompt, hidden, root, *, prefill=True, hide=None, keep_positions=False):
        """The entries of the drafter's first update, after the target's prefill (prompt [B, P],
        -1 padded on the right; hidden [B, P, H] = f_0 .. f_{P-1}; root [B] = s_1).
        -> (tokens [B, M], feats [B, M, H], n [B]) for ``update``.

        ``prefill`` (HiViS Eq. 3, EAGLE): one entry per prompt position i, [e(x_{i+1}) || f_i]
        with x_{i+1} the next prompt token and, at the last position, s_1 -- the drafter attends
        over the whole prompt.  Otherwise (or for a draft model that read the prompt itself) the
        single entry [e(s_1) || f_{n-1}] of the last prompt position.
        ``hide`` [B, P] bool (HiViS, hidden visual tokens): those positions get no entry; the
        sequence is the kept positions j_0 < .. < j_{m-1} with entry k = [e(x_{j_{k+1}}) ||
        f_{j_k}] (the next *kept* token, Eq. 3's e_text^{t+1} || f_text^t), the image reaching
        the drafter only through the features.  The last prompt position is always kept (its
        feature is the one that predicts s_1).  Drafter positions are compact (0 .. m-1, the
        paper's: the drafter is trained on text-only sequences), or with ``keep_positions`` the
        target's (j_k; later entries sit at the target's positions too)."""
        b, p = prompt.shape
        dev = prompt.device
        rows = torch.arange(b, device=dev)
        n = (prompt >= 0).sum(1)  # real prompt length n_b
        if not prefill or getattr(self.drafter, "reads_prompt", False):
            return root[:, None], hidden[rows, n - 1][:, None], torch.ones_like(n)
        keep = prompt >= 0
        if hide is not None:
            keep = keep & ~hide.to(dev, torch.bool)
            keep[rows, n - 1] = True
        m = keep.sum(1)  # the drafter's prefill length m_b
        # j[b, k]: the k-th kept position (k < m_b), then the rest; a stable sort keeps the order
        j = torch.sort((~keep).int(), dim=1, stable=True).indices
        k = torch.arange(p, device=dev)[None, :]
        nxt = prompt.gather(1, torch.cat([j[:, 1:], j[:, :1]], 1))  # x_{j_{k+1}}
        tokens = torch.where(k < m[:, None] - 1, nxt, -1)
        tokens = torch.where(k == m[:, None] - 1, root[:, None].to(tokens.dtype), tokens)
        with self.rec.timer("specops"):
            feats = specops.gather_rows(hidden, torch.where(k < m[:, None], j, -1))
        if keep_positions:
            self._positions = torch.where(k < m[:, None], j, k)
            self.shift = (n - m).long()  # later entries: own count + hidden positions
        return tokens, feats, m

    def update(self, tokens, feats, n):
        """Append the committed entries (tokens [B, M] = s_{i+1}, feats [B, M, H] = f_i, the
        first n[b] valid), commit them, and return (logits, feature) of the last one [B, V],
        [B, H]: the drafter's prediction for the root's children."""
        b, m = tokens.shape
        dev = tokens.device
        cols = torch.arange(m, device=dev)
        pos = (self.cache.seqlens.long() + self.shift)[:, None] + cols
        if self._positions is not None:  # the prefill with the target's positions
            pos, self._positions = self._positions, None
        with nvtx_range("drafter_forward"), self.rec.timer("model"):
            logits, g = self.drafter(tokens, feats, 0, pos, self.cache)
        self.rec.drafter_pass()
        slots = torch.where(cols[None, :] < n[:, None], cols.int(), -1).int()
        with self.rec.timer("specops"):
            specops.commit_kv(self.cache.kv, self.cache.seqlens, slots)
        last = (n.long() - 1).clamp(min=0)
        rows = torch.arange(b, device=dev)
        return logits[rows, last], g[rows, last]

    def extend(self, tokens, feats, depth: int, bits, n_old: int):
        """Draft nodes at tree depth ``depth`` (drafter position seqlens + depth - 1), slots
        n_old .. of the draft tree; -> (logits [B, k, V], features [B, k, H])."""
        b, k = tokens.shape
        pos = (self.cache.seqlens.long() + self.shift + depth - 1)[:, None].expand(b, k)
        with nvtx_range("drafter_forward"), self.rec.timer("model"):
            out = self.drafter.extend(tokens, feats, depth, pos, self.cache, bits, n_old)
        self.rec.drafter_pass()
        return out

    def rewind(self, n: torch.Tensor) -> None:
        """Forget the last n[b] committed entries (VVS: they were built on stale features and
        are redone after post-verification)."""
        self.cache.seqlens -= n.to(self.cache.seqlens.dtype)
