"""A patch VQ tokenizer: image -> grid of codebook ids -> image.

The image is cut into non-overlapping p x p RGB patches; each patch becomes the id of its nearest
codebook entry (squared Euclidean distance), and the decoder pastes the codebook patches back.
The codebook is learned by k-means on training patches.  It is an honest vector quantiser without
a learned encoder/decoder (LlamaGen's VQGAN would add conv nets around the same lookup), which is
all a tiny demo model needs for flat-coloured images.  ``latents`` (the centred codebook) is the
VQ latent embedding table that VVS's path similarity (Eq. 2) compares.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["PatchVQ", "kmeans"]


class PatchVQ(torch.nn.Module):
    def __init__(self, codebook: torch.Tensor, patch: int):
        super().__init__()
        self.patch = patch
        self.register_buffer("codebook", codebook.float())  # [V, p*p*3], values in [0, 1]

    @property
    def vocab_size(self) -> int:
        return self.codebook.shape[0]

    @property
    def latents(self) -> torch.Tensor:
        """[V, p*p*3] latent embeddings for similarity: the codebook centred on its mean patch
        (raw RGB patches are all non-negative, so their cosines would all be near 1)."""
        return self.codebook - self.codebook.mean(0, keepdim=True)

    def patches(self, images) -> torch.Tensor:
        """uint8 [M, H, W, 3] -> float [M, H/p, W/p, p*p*3] in [0, 1]."""
        x = torch.as_tensor(np.asarray(images)).float() / 255.0
        m, h, w, c = x.shape
        p = self.patch
        x = x.view(m, h // p, p, w // p, p, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(m, h // p, w // p, p * p * c)

    @torch.no_grad()
    def encode(self, images, chunk: int = 256) -> torch.Tensor:
        """uint8 [M, H, W, 3] -> int64 token grid [M, H/p, W/p]: nearest codebook entry."""
        x = self.patches(images)
        flat = x.reshape(-1, x.shape[-1])
        step = chunk * 256
        ids = [nearest(flat[i : i + step], self.codebook) for i in range(0, flat.shape[0], step)]
        return torch.cat(ids).view(x.shape[:3])

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        """int token grid [M, h, w] (or [M, h*w], square) -> uint8 images [M, h*p, w*p, 3]."""
        tokens = torch.as_tensor(tokens).long().cpu()
        if tokens.dim() == 2:
            side = int(round(tokens.shape[1] ** 0.5))
            tokens = tokens.view(-1, side, side)
        m, h, w = tokens.shape
        p = self.patch
        x = self.codebook.cpu()[tokens.clamp(0, self.vocab_size - 1)]  # [M, h, w, p*p*3]
        x = x.view(m, h, w, p, p, 3).permute(0, 1, 3, 2, 4, 5).reshape(m, h * p, w * p, 3)
        return (x.clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()


def nearest(x: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """argmin_k |x - c_k|^2 = argmin_k (|c_k|^2 - 2 <x, c_k>) per row of x."""
    d = (codebook * codebook).sum(-1)[None, :] - 2.0 * x @ codebook.T
    return d.argmin(-1)


@torch.no_grad()
def kmeans(x: torch.Tensor, k: int, iters: int = 25, seed: int = 0) -> torch.Tensor:
    """Lloyd's k-means on the rows of x [M, C] -> centroids [k, C].  Runs on the distinct rows
    weighted by their counts (flat images repeat patches a lot).  Initialised from k distinct
    random rows; an emptied cluster is re-seeded at the row with the largest weighted error."""
    g = torch.Generator().manual_seed(seed)
    uniq, counts = torch.unique(x, dim=0, return_counts=True)
    w = counts.float()
    if uniq.shape[0] <= k:  # fewer distinct patches than codes: they are the codebook
        pad = uniq[torch.randint(0, uniq.shape[0], (k - uniq.shape[0],), generator=g)]
        return torch.cat([uniq, pad])
    c = uniq[torch.randperm(uniq.shape[0], generator=g)[:k]].clone()
    for _ in range(iters):
        assign = nearest(uniq, c)
        sums = torch.zeros_like(c).index_add_(0, assign, uniq * w[:, None])
        mass = torch.zeros(k).index_add_(0, assign, w)
        new = sums / mass.clamp_min(1e-9)[:, None]
        empty = (mass == 0).nonzero().flatten()
        if empty.numel():
            err = ((uniq - c[assign]) ** 2).sum(-1) * w
            new[empty] = uniq[err.topk(empty.numel()).indices]
        c = new
    return c
