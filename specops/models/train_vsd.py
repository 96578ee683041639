"""VSD drafter training: the path-level objective of Variational Speculative Decoding.

``python -m specops.models.train --only-drafter --objective vsd`` fine-tunes the shipped
cross-entropy drafter (``drafter.pt``) into ``drafter_vsd.pt``: the drafter's token-level CE
loss plus VSD's path term E_{z~q}[log kappa(x, z)] (Eqs. 7-8), weighted by ``--vsd-weight``,
estimated with the paper's MCMC-EM (App. A.1 Algorithm 1).  ``path_acceptance_torch`` is the
autograd version of ``specops.path_acceptance``; ``chain_log_survival`` the same in log space
for chains.

Measured (``python -m bench.drafters_e2e --offline 16``): what fine-tuning buys here comes from
the extra training steps; the path term's own effect is within the training-seed spread.

Each equation, the estimator, the deviations from the paper and the shipped run's command:
docs/training.md, "VSD".
"""

from __future__ import annotations

import math
import time

import torch

from specops._progress import Progress
from specops.models.drafter import Drafter
from specops.models.transformer import Transformer

__all__ = [
    "path_acceptance_torch",
    "chain_log_survival",
    "vsd_loss",
    "train_drafter_vsd",
]

W_BASE = 1.05  # w(l) = 1.05^l (App. E)


# path acceptance (Eqs. 2, 9, 10) ---------------------------------------------------------------
def path_acceptance_torch(target_probs, draft_probs, parents, draft_tokens):
    """Differentiable ``specops.path_acceptance``: (kappa, expected_len) [B, P] per root-to-leaf
    path (leaves in index order, rows padded with 0), same node convention: node n >= 1 carries
    x_n drafted from row parent(n) of q and verified against row parent(n) of p.
    alpha_n = min(1, p(x_n)/q(x_n)) (1 if q(x_n) = 0 < p(x_n); min(1, p) when draft_probs is None);
    S_n = prod of alpha over the path root..n (Eq. 9), kappa = S_leaf (Eq. 2),
    expected_len = sum of S over the path (Eq. 10)."""
    b, n, v = target_probs.shape
    dev = target_probs.device
    par = torch.as_tensor(parents, device=dev).long().expand(b, n)
    x = draft_tokens.to(dev).long()
    ok = (x >= 0) & (x < v)
    xc = x.clamp(0, v - 1)
    pp = par.clamp(min=0)
    rows = torch.arange(b, device=dev)[:, None]
    px = torch.where(ok, target_probs[rows, pp, xc], 0.0)
    if draft_probs is None:
        alpha = px.clamp(max=1.0)
    else:
        qx = torch.where(ok, draft_probs[rows, pp, xc], 0.0)
        alpha = torch.where(qx > 0, (px / qx.clamp_min(1e-30)).clamp(max=1.0), (px > 0).to(px))
    ids = torch.arange(n, device=dev)
    # anc[b, m, a]: a is m or an ancestor of m, a >= 1 (the root carries no token)
    anc = torch.zeros(b, n, n, dtype=torch.bool, device=dev)
    for m in range(1, n):
        anc[:, m] = anc[rows[:, 0], pp[:, m]]
        anc[:, m, m] = True
    s = torch.where(anc, alpha[:, None, :], torch.ones_like(alpha)[:, None, :]).prod(-1)
    s = torch.where(ids == 0, torch.ones_like(s), s)
    e = (anc.to(s) * s[:, None, :]).sum(-1)  # sum of S over the path's nodes 1..m
    is_leaf = ~(par[:, :, None] == ids[None, None, :]).any(1)
    is_leaf[:, 0] = n == 1
    num_paths = int(is_leaf.sum(1).max())
    rank = is_leaf.long().cumsum(-1) - 1
    slot = torch.where(is_leaf, rank, num_paths)
    zeros = s.new_zeros(b, num_paths + 1)
    kappa = zeros.scatter(1, slot, torch.where(is_leaf, s, 0.0))
    exp_len = zeros.scatter(1, slot, torch.where(is_leaf, e, 0.0))
    return kappa[:, :num_paths], exp_len[:, :num_paths]


def chain_log_survival(logp_x, logq_x):
    """log S_k (Eq. 9) along chains: logp_x, logq_x [..., L] = log p(z_i), log q(z_i) of the path
    tokens -> [..., L], log S_k = sum_{i<=k} min(0, log p_i - log q_i)."""
    return (logp_x - logq_x).clamp(max=0.0).cumsum(-1)


# rollouts --------------------------------------------------------------------------------------
def target_kv(target: Transformer, seq):
    """Causal target pass that also returns every layer's (k, v) [B, T, Hkv, D]."""
    b, t = seq.shape
    pos = torch.arange(t, device=seq.device).expand(b, t)
    x = target.embed(seq)
    kvs = []
    for blk in target.blocks:
        x, kv = blk.forward_masked(x, target.rope, pos)
        kvs.append(kv)
    h = target.norm(x)
    return target.head(h).float(), h, kvs


def _target_step(target, tokens, pos, mask, extra):
    """One unrolled target step: tokens/pos [B, Q]; extra[l] = (k, v) keys before the Q new ones."""
    x = target.embed(tokens)
    new = []
    for blk, kv in zip(target.blocks, extra):
        x, kv_new = blk.forward_masked(x, target.rope, pos, mask, kv)
        new.append(kv_new)
    return target.head(target.norm(x)).float(), new


def _cat_kv(a, b):
    return torch.cat([a[0], b[0]], 1), torch.cat([a[1], b[1]], 1)


def rollout(drafter: Drafter, target: Transformer, seq, starts, samples: int, length: int, gen):
    """Chains of ``length`` tokens after the prefixes seq[:, :t+2] (t in ``starts`` [M]), K = 2S+1
    per prefix: S drawn from the drafter q, 1 greedy target path, S drawn from the target p.
    -> logq [B, M, K, L] (autograd to the drafter), logp [B, M, K, L], q(.) never detached."""
    b, t_len = seq.shape
    dev = seq.device
    n = t_len - 1
    m = starts.numel()
    k = 2 * samples + 1
    q_n = m * k
    with torch.no_grad():
        logits, f, tkv = target_kv(target, seq)
    # drafter step 0 over every position (teacher forcing), as in drafter_loss
    idx = torch.arange(n, device=dev)
    lg0, g0, dkv0 = drafter.forward_train(seq[:, 1:], f[:, :n], 0, idx.expand(b, n))
    st = starts.repeat_interleave(k)  # [Q]: the prefix position of each path row
    eye = torch.eye(q_n, dtype=torch.bool, device=dev)
    t_mask = torch.arange(t_len, device=dev)[None, :] <= (st + 1)[:, None]  # target sees <= t+1
    d_mask = idx[None, :] <= st[:, None]  # drafter sees its step-0 keys <= t
    logq_i = lg0[:, st].log_softmax(-1)  # [B, Q, V]: q_1
    logp_i = logits[:, st + 1].log_softmax(-1)  # p_1
    feat = g0[:, st]
    kind = torch.arange(k, device=dev).repeat(m)  # 0..S-1 drafter, S greedy, >S target sample
    t_extra, d_extra = list(tkv), dkv0
    out_q, out_p = [], []
    for i in range(1, length + 1):
        with torch.no_grad():
            zq = torch.multinomial(logq_i.detach().exp().reshape(-1, logq_i.shape[-1]), 1,
                                   generator=gen).view(b, q_n)  # fmt: skip
            zp = torch.multinomial(logp_i.exp().reshape(-1, logp_i.shape[-1]), 1,
                                   generator=gen).view(b, q_n)  # fmt: skip
            z = torch.where(kind < samples, zq, torch.where(kind == samples, logp_i.argmax(-1), zp))
        out_q.append(logq_i.gather(-1, z[..., None])[..., 0])
        out_p.append(logp_i.gather(-1, z[..., None])[..., 0])
        if i == length:
            break
        # target: z_i at sequence position t+1+i sees the real prefix and its own path
        with torch.no_grad():
            mask = torch.cat([t_mask] + [eye] * i, 1)
            lg, new = _target_step(target, z, (st + 1 + i).expand(b, q_n), mask, t_extra)
            t_extra = [_cat_kv(e, nw) for e, nw in zip(t_extra, new)]
            logp_i = lg.log_softmax(-1)
        # drafter: [e(z_i) || g_{i-1} || e_seq^i] at position t+i sees its step-0 keys <= t
        mask = torch.cat([d_mask] + [eye] * i, 1)
        lgd, feat, kv = drafter.forward_train(z, feat, i, (st + i).expand(b, q_n), mask, d_extra)
        d_extra = _cat_kv(d_extra, kv)
        logq_i = lgd.log_softmax(-1)
    logq = torch.stack(out_q, -1).view(b, m, k, length)
    logp = torch.stack(out_p, -1).view(b, m, k, length)
    return logq, logp


# the estimator (Algorithm 1, Eqs. 14-17) ------------------------------------------------------
def vsd_loss(logq, logp, samples: int, tau: float = 0.2, pathwise: float = 0.0):
    """Surrogate loss whose gradient is -g of Eq. 17, from ``rollout``'s [B, M, 2S+1, L] log-probs.
    ``pathwise`` > 0 (an extension, off by default) adds -pathwise * the mean of Eq. 10's
    E[A | z~] = sum_k S_k over the drafter's own chains, differentiated through q in
    alpha_i = min(1, p_i / q_i): the pathwise half of grad E_q[...], which Eq. 17 (a score-function
    estimator over oracle-filtered samples) leaves out.  Returns (loss, stats dict of floats)."""
    s_n = samples
    length = logq.shape[-1]
    cum_q = logq.cumsum(-1)  # log q(z_<=l), autograd
    log_s = chain_log_survival(logp, logq.detach())  # log S_l = log kappa(z_<=l)
    w = W_BASE ** torch.arange(1, length + 1, device=logq.device, dtype=logq.dtype)
    bar = log_s[:, :, s_n : s_n + 1]  # greedy target path zbar (Algorithm 2)
    ok_d = log_s[:, :, :s_n] >= bar  # o~ / w: drafter proposal passes the oracle
    ok_t = log_s[:, :, s_n + 1 :] >= bar  # oracle on the target-drawn replacement z'
    # E-step: z = z~ if accepted else z' ~ p;  o' = o(z)
    cum_z = torch.where(ok_d, cum_q[:, :, :s_n], cum_q[:, :, s_n + 1 :])
    o_prime = torch.where(ok_d, w, torch.where(ok_t, w, 0.0))
    o_tilde = ok_d.to(w)  # binary validity of the proposal (App. A.2)
    # ARW, Eq. 15: leave-one-out over the S samples of the same (x, l)
    num = (o_prime * o_tilde).sum(2, keepdim=True) - o_prime * o_tilde
    den = o_prime.sum(2, keepdim=True) - o_prime
    beta = torch.where(den > 0, num / den.clamp_min(1e-12), 0.0)
    # CAR, Eq. 16: softmax over s of q(z~_<=l) / tau (path probability, not its log)
    zeta = (cum_q[:, :, :s_n].detach().exp() / tau).softmax(2)
    inner = cum_z - (beta * zeta).detach() * cum_q[:, :, :s_n]
    norm = o_prime.sum((2, 3))  # sum over l, s per prefix
    per_prefix = -(o_prime * inner).sum((2, 3)) / norm.clamp_min(1e-12)
    has = norm > 0
    loss = (per_prefix * has).sum() / has.sum().clamp_min(1)
    if pathwise:
        # d/dq of sum_k S_k with S_k = exp(sum_{i<=k} min(0, log p_i - log q_i)): only tokens
        # with q > p (over-confident drafts) get a gradient, pushing their q down toward p
        s_k = chain_log_survival(logp[:, :, :s_n], logq[:, :, :s_n]).exp()
        loss = loss - pathwise * s_k.sum(-1).mean()
    e_len = log_s[:, :, :s_n].exp().sum(-1).mean()  # Eq. 11 (MC over q) on length-L chains
    stats = {
        "exp_len": e_len.item(),
        "oracle_pass": ok_d.float().mean().item(),
        "beta": beta.mean().item(),
    }
    return loss, stats


def vsd_batch_loss(drafter, target, seq, args, gen):
    length = args.unroll + 1
    n = seq.shape[1] - 1
    hi = n - length + 1  # t + 1 + L <= T - 1: the whole chain lies inside the image
    starts = torch.randperm(hi, generator=gen)[: args.vsd_prefixes].sort().values
    logq, logp = rollout(drafter, target, seq, starts, args.vsd_samples, length, gen)
    return vsd_loss(logq, logp, args.vsd_samples, args.vsd_tau, args.vsd_pathwise)


def train_drafter_vsd(args, target: Transformer, drafter: Drafter, tokens, labels):
    """Fine-tune ``drafter`` with CE (the KL surrogate) + vsd_weight * the Eq. 17 path term."""
    from specops.models.drafter_loss import cosine_lr, drafter_loss

    seed = args.seed + 2 + 10 * getattr(args, "vsd_seed", 0)  # batches / draws of this run
    torch.manual_seed(seed)
    for p in target.parameters():
        p.requires_grad_(False)
    drafter.train().requires_grad_(True)
    opt = torch.optim.AdamW(
        drafter.parameters(), lr=args.vsd_lr, betas=(0.9, 0.95), weight_decay=0.0
    )
    g = torch.Generator().manual_seed(seed)  # batches: the same whatever the weight
    g_paths = torch.Generator().manual_seed(seed + 1)  # E-step draws
    t0 = time.time()
    steps = args.vsd_steps
    bar = Progress("drafter-vsd", steps, unit="steps")
    warm = max(1, math.ceil(0.02 * steps))
    loss = torch.zeros(())
    for step in range(steps):
        bar.update(step)
        idx = torch.randint(0, tokens.shape[0], (args.drafter_batch,), generator=g)
        seq = torch.cat([(labels[idx] + target.cfg.vocab)[:, None], tokens[idx]], 1)
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, args.vsd_lr, warmup=warm)
        ce = drafter_loss(drafter, target, seq, args.unroll)
        if args.vsd_weight:
            path, st = vsd_batch_loss(drafter, target, seq, args, g_paths)
        else:  # control run: the same schedule on the CE term alone
            path, st = torch.zeros(()), {"exp_len": float("nan"), "oracle_pass": float("nan")}
        loss = ce + args.vsd_weight * path
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 0.5)
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            bar.clear()
            print(
                f"vsd step {step:4d} ce {ce.item():.3f} path {path.item():.3f} "
                f"E[A] {st['exp_len']:.3f} pass {st['oracle_pass']:.2f} ({time.time() - t0:.0f}s)",
                flush=True,
            )
    return drafter, time.time() - t0, loss.item()
