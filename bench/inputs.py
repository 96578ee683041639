"""The benchmarks' shared inputs: probability rows, drafts near them, trees with their first
rejection placed, each from a torch.Generator so that every benchmark and the traffic counts see
the same law.  Public (no underscore): bench_verify, bench_acceptance, bench_traffic,
traffic_model, traffic_triton, profile_kernels and lease_cases build their cases from here."""

from __future__ import annotations

import torch


def gen(seed: int, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def probs(shape, gen, device, sharp=2.0):
    return torch.softmax(torch.randn(*shape, generator=gen, device=device) * sharp, -1)


def near(p, gen, w=0.7):
    """A draft distribution close to p (acceptance around w)."""
    r = torch.softmax(torch.randn(p.shape, generator=gen, device=p.device) * 2.0, -1)
    return w * p + (1 - w) * r


def draw(q, gen):
    v = q.shape[-1]
    return torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(q.shape[:-1])


def chain_inputs(b, k, v, device, gen, deterministic=False):
    p = probs((b, k + 1, v), gen, device)
    q = near(p[:, :k], gen)
    x = draw(q, gen)
    return p, x, (None if deterministic else q)


def greedy_chain_inputs(b, k, v, device, gen, accept=None):
    """Greedy verification's target rows p [B, K+1, V] and drafts x [B, K]: x_i = argmax p_i for
    the first ``accept`` drafts of each request (random per request when None), then another id,
    so the walk stops there and reads a real prefix of rows."""
    p = probs((b, k + 1, v), gen, device)
    best = p[:, :k].argmax(-1)
    if accept is None:
        keep = torch.randint(0, k + 1, (b, 1), generator=gen, device=device)
    else:
        keep = torch.full((b, 1), accept, device=device)
    other = (best + 1 + torch.randint(0, v - 1, best.shape, generator=gen, device=device)) % v
    return p, torch.where(torch.arange(k, device=device) < keep, best, other)


def greedy_tree_inputs(b, tree, v, device, gen, depth):
    """Greedy tree verification's target rows p [B, N, V] and tokens [B, N]: each request's walk
    descends ``depth`` levels, each through the last child of its node (every sibling before it
    tested and rejected), then stops."""
    n = tree.num_nodes
    p = probs((b, n, v), gen, device)
    top = p.argmax(-1)
    tok = (top[:, :1] + 1 + torch.randint(0, v - 2, (b, n), generator=gen, device=device)) % v
    parents = tree.parents[0].tolist()
    cur = 0
    for _ in range(depth):
        kids = [c for c in range(n) if parents[c] == cur]
        if not kids:
            break
        tok[:, kids[-1]] = top[:, cur]
        cur = kids[-1]
    return p, tok


def torch_greedy_chain(p, x):
    """Greedy verification in eager torch (a peer): every row's argmax, the matched prefix."""
    t = p.argmax(-1)
    return t, (t[:, :-1] == x).int().cumprod(-1).sum(-1)


def tree_inputs(b, tree, v, device, gen, *, wor=False, deterministic=False):
    n = tree.num_nodes
    p = probs((b, n, v), gen, device)
    q = near(p, gen)
    par = tree.parents.long().to(device).expand(b, -1).clamp(min=0)
    rows = torch.arange(b, device=device)[:, None]
    if wor:
        # siblings distinct: Gumbel top-k order of the parent's draft row, by sibling rank
        same = par[:, :, None] == par[:, None, :]
        earlier = torch.arange(n, device=device)[None, :] < torch.arange(n, device=device)[:, None]
        rank = (same & earlier).sum(-1)
        g = -torch.log(-torch.log(torch.rand(b, n, v, generator=gen, device=device)))
        order = torch.topk(torch.log(q) + g, min(int(rank.max()) + 1, v), -1).indices
        tok = order[rows, par, rank]
    else:
        tok = draw(q[rows, par], gen)
    return p, tok, (None if deterministic else q)


def logit_rows(shape, gen, device, top_k):
    """(p, q): q = softmax of (top-k filtered) logits, p = a perturbation of them."""
    lq = torch.randn(*shape, generator=gen, device=device) * 3.0
    lp = lq + torch.randn(*shape, generator=gen, device=device)

    def probs(logits):
        if top_k is not None and top_k < shape[-1]:
            kth = logits.topk(top_k, -1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.softmax(logits, -1)

    return probs(lp), probs(lq)


def reject(p, b, row, tokens):
    """Target row ``row`` of request b gives 0 to ``tokens`` (renormalised): they fail for sure."""
    p[b, row, tokens] = 0.0
    p[b, row] /= p[b, row].sum()


def first_child_line(fc, n):
    """The first-child line below node n: fc[n], fc[fc[n]], ... (host lists)."""
    out = []
    c = fc[n]
    while 0 < c < len(fc):
        out.append(c)
        c = fc[c]
    return out


def tree_case(tree, b, v, mode, gen, device, top_k):
    """(p, q, tokens, scanned rows) with the first rejection placed by ``mode`` (see above).

    Tokens: node n's token is drawn from draft row parent(n) (the walk tests children of node m
    against rows m).  The first-child line from the root is the path the walk takes through
    accepted nodes; ``mid`` rejects at the node halfway down it."""
    n = tree.num_nodes
    par = tree.parents.reshape(-1, n)[0].tolist()
    fc = tree.first_child.reshape(-1, n)[0].tolist()
    p, q = logit_rows((b, n, v), gen, device, top_k)
    x = torch.zeros(b, n, dtype=torch.long, device=device)
    src = torch.tensor([max(pp, 0) for pp in par], device=device)
    x[:, 1:] = torch.multinomial(q[:, src[1:]].reshape(-1, v), 1, generator=gen).reshape(b, n - 1)
    line = [0] + first_child_line(fc, 0)
    stop = {"root": 0, "mid": len(line) // 2, "full": len(line)}[mode]
    for d in range(min(stop, len(line))):  # accepted for sure down to line[stop]
        p[:, line[d]] = q[:, line[d]]
    if mode == "full":
        return p, q, x, line, stop
    m = line[stop]
    kids = [c for c in range(1, n) if par[c] == m]
    for bb in range(b):
        reject(p, bb, m, x[bb, kids])
    return p, q, x, line, stop
