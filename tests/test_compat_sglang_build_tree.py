"""specops.compat.sglang_build_tree.build_tree_kernel_efficient: SGLang's own build-tree case
(test/srt/test_build_eagle_tree.py: topk 4, depth 4, 8 draft tokens; positions and links as the
test asserts them, masks of the three modes from the kernel's rules), random EAGLE trees against a
plain transcription of the kernel, and malformed input."""

from __future__ import annotations

import pytest
import torch

import specops
from specops.compat.sglang_build_tree import (
    FULL_MASK,
    QLEN_ONLY,
    QLEN_ONLY_BITPACKING,
    build_tree_kernel_efficient,
)


def _organize(score_list, token_list, parents_list, num_draft_token):
    """SGLang's organize_draft_results (eagle_utils.py)."""
    scores = torch.cat(score_list, dim=1).flatten(1)
    tokens = torch.cat(token_list, dim=1)
    top = torch.sort(torch.topk(scores, num_draft_token - 1, dim=-1).indices).values
    draft = torch.gather(tokens, index=top, dim=1)
    parent_list = torch.cat(parents_list[:-1], dim=1)
    return parent_list, top, draft


def _buffers(bs, n, seq_lens, mode):
    if mode == FULL_MASK:
        mask = torch.full((int(seq_lens.sum()) * n + n * n * bs,), True)
    elif mode == QLEN_ONLY:
        mask = torch.full((n * bs * n,), True)
    else:
        mask = torch.zeros((n * bs,), dtype=torch.uint8 if n <= 8 else torch.int16)
    ri, nt, ns = torch.full((3, bs, n), -1, dtype=torch.long)
    return mask, torch.empty(bs * n, dtype=torch.long), ri, nt, ns


def _sglang_case():
    score_list = [
        torch.tensor([[[7.1127e-01, 2.8292e-01, 2.2995e-03, 1.7357e-03]],
                      [[9.7476e-01, 2.2219e-02, 6.5031e-04, 1.3212e-04]]]),
        torch.tensor([[[6.9142e-01, 1.2863e-02, 1.6873e-03, 1.1871e-03],
                       [2.4787e-01, 1.8818e-02, 1.4204e-02, 9.2235e-04],
                       [2.2971e-03, 1.6700e-06, 1.8737e-07, 8.3146e-08],
                       [1.2771e-03, 2.4374e-04, 1.7832e-04, 1.1947e-05]],
                      [[8.4832e-02, 6.6068e-02, 5.8304e-02, 5.7851e-02],
                       [2.3616e-03, 1.1243e-03, 5.4368e-04, 2.7768e-04],
                       [2.5286e-04, 1.5578e-04, 2.8817e-05, 1.2888e-05],
                       [1.2834e-04, 2.5417e-06, 1.1279e-06, 1.6088e-08]]]),
        torch.tensor([[[6.6438e-01, 2.6997e-02, 2.4236e-05, 4.0821e-06],
                       [2.4402e-01, 2.8409e-03, 5.0935e-04, 2.9022e-04],
                       [1.6178e-02, 2.0567e-03, 4.5892e-04, 3.0034e-05],
                       [1.3023e-02, 5.0497e-04, 3.6371e-04, 8.7750e-05]],
                      [[2.3263e-02, 2.0054e-02, 9.3990e-03, 2.7783e-03],
                       [6.4156e-02, 5.5506e-04, 1.0429e-04, 9.7211e-05],
                       [4.9950e-02, 5.0630e-03, 9.0068e-04, 3.3656e-04],
                       [7.5817e-03, 8.5731e-04, 6.9972e-04, 6.0793e-04]]]),
        torch.tensor([[[6.6420e-01, 1.0525e-04, 6.5864e-05, 1.2253e-06],
                       [1.3019e-01, 1.0461e-01, 5.2083e-03, 1.6777e-03],
                       [2.0103e-02, 6.7335e-03, 1.2625e-04, 1.0364e-05],
                       [1.5142e-02, 7.0819e-04, 9.6595e-05, 8.7951e-05]],
                      [[5.8608e-02, 1.8840e-03, 7.8535e-04, 4.4400e-04],
                       [1.2185e-02, 2.0684e-03, 1.7418e-03, 1.4327e-03],
                       [6.2455e-03, 6.1487e-03, 2.6862e-03, 1.8034e-03],
                       [1.8590e-03, 1.6151e-03, 1.2481e-03, 3.6038e-04]]]),
    ]  # fmt: skip
    token_list = [
        torch.tensor([[29896, 29906, 29900, 29945], [13, 2, 29871, 28956]]),
        torch.tensor([[29889, 29974, 29945, 29900, 29974, 29922, 29930, 29958, 29889, 29974, 29930,
                       29945, 29974, 29922, 29930, 29958],
                      [22550, 4136, 16492, 8439, 29871, 2, 3001, 13, 2, 13, 29906, 29946, 2, 13,
                       29871, 259]]),
        torch.tensor([[29946, 29945, 29953, 29906, 29896, 29945, 29900, 29906, 29896, 29945, 29906,
                       29953, 29896, 29945, 29906, 29946],
                      [29871, 2, 29901, 29889, 29871, 2, 395, 259, 29901, 29871, 2, 29889, 3001,
                       1234, 7146, 2186]]),
        torch.tensor([[29946, 29974, 29945, 29930, 29889, 29922, 29974, 29930, 29974, 29946, 29930,
                       29922, 29889, 29974, 29945, 29922],
                      [29941, 29906, 2, 29946, 29871, 450, 319, 14990, 29946, 29941, 2, 29906,
                       29871, 2, 3001, 13]]),
    ]  # fmt: skip
    parents_list = [
        torch.tensor([[-1, 0, 1, 2, 3], [-1, 0, 1, 2, 3]]),
        torch.tensor([[4, 8, 9, 10], [4, 5, 6, 7]]),
        torch.tensor([[20, 24, 21, 28], [24, 28, 20, 21]]),
        torch.tensor([[36, 40, 41, 44], [36, 40, 44, 45]]),
    ]
    return _organize(score_list, token_list, parents_list, 8)


_QLEN = [[[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0, 0, 0],
          [1, 1, 0, 1, 0, 0, 0, 0], [1, 0, 1, 0, 1, 0, 0, 0], [1, 1, 0, 1, 0, 1, 0, 0],
          [1, 0, 1, 0, 1, 0, 1, 0], [1, 1, 0, 1, 0, 1, 0, 1]],
         [[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0],
          [1, 1, 0, 1, 0, 0, 0, 0], [1, 1, 0, 0, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1, 0, 0],
          [1, 1, 0, 1, 0, 0, 1, 0], [1, 1, 0, 1, 0, 0, 1, 1]]]  # fmt: skip


@pytest.mark.parametrize("mode", [FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING])
def test_sglang_build_tree_case(mode):
    parent_list, top, draft = _sglang_case()
    assert parent_list.tolist() == [[-1, 0, 1, 2, 3, 4, 8, 9, 10, 20, 24, 21, 28],
                                    [-1, 0, 1, 2, 3, 4, 5, 6, 7, 24, 28, 20, 21]]  # fmt: skip
    seq_lens = torch.tensor([5, 10])
    mask, positions, ri, nt, ns = _buffers(2, 8, seq_lens, mode)
    build_tree_kernel_efficient(parent_list, top, seq_lens, mask, positions, ri, nt, ns, 4, 4, 8,
                                mode)  # fmt: skip
    # SGLang's assertions
    assert positions.tolist() == [5, 6, 6, 7, 7, 8, 8, 9, 10, 11, 12, 12, 12, 12, 13, 14]
    assert ri.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15]]
    assert nt.tolist() == [[1, 3, 4, 5, 6, 7, -1, -1], [1, 2, -1, 6, -1, -1, 7, -1]]
    assert ns.tolist() == [[-1, 2, -1, -1, -1, -1, -1, -1], [-1, -1, 3, 4, 5, -1, -1, -1]]
    bonus = torch.tensor([29974, 13])
    tokens = torch.cat((bonus[:, None], draft), 1).flatten()
    assert tokens.tolist() == [29974, 29896, 29906, 29889, 29974, 29946, 29896, 29946,
                               13, 13, 22550, 4136, 16492, 8439, 29871, 29941]  # fmt: skip
    # the masks (column k = node k: the root, the node and its ancestors)
    want = torch.tensor(_QLEN, dtype=torch.bool)
    if mode == QLEN_ONLY:
        assert torch.equal(mask.view(2, 8, 8), want)
    elif mode == QLEN_ONLY_BITPACKING:
        assert mask.view(2, 8).tolist() == [[1, 3, 5, 11, 21, 43, 85, 171],
                                            [1, 3, 7, 11, 19, 35, 75, 203]]  # fmt: skip
    else:
        r0 = mask[: 8 * 13].view(8, 13)
        r1 = mask[8 * 13 :].view(8, 18)
        assert r0[:, :5].all() and r1[:, :10].all()  # prefix columns as the caller filled them
        assert torch.equal(r0[:, 5:], want[0]) and torch.equal(r1[:, 10:], want[1])


def _kernel(parent_list, sel, seq_lens, mask, positions, ri, nt, ns, topk, depth, n, mode):
    """The kernel's loops as plain Python (the bounded walk of SGLang's later kernels)."""
    bs = seq_lens.shape[0]
    nb = 4 if n > 16 else 2 if n > 8 else 1
    flat = mask.view(-1) if mode != QLEN_ONLY_BITPACKING else mask.view(-1).view(torch.uint8)

    def find(b, x):
        for k in range(n - 1):
            if sel[b, k] == x:
                return k
        return n - 1

    for b in range(bs):
        s = int(seq_lens[b])
        for tid in range(n):
            if mode != QLEN_ONLY_BITPACKING:
                base = base_of(mode, n, b, tid, seq_lens)
                flat[base] = True
                flat[base + 1 : base + n] = False
            else:
                flat[(b * n + tid) * nb] = 1
        positions[b * n] = s
        for i in range(n - 1, 0, -1):
            ri[b, i] = b * n + i
            g = int(sel[b, i - 1]) // topk
            pp = 0 if g == 0 else find(b, int(parent_list[b, g])) + 1
            if pp == n:
                continue
            if nt[b, pp] == -1:
                nt[b, pp] = i
            else:
                ns[b, i] = nt[b, pp]
                nt[b, pp] = i
        ri[b, 0] = b * n
        for tid in range(1, n):
            cp, position = tid - 1, 0
            while position < depth:
                position += 1
                k = cp + 1
                if mode == QLEN_ONLY_BITPACKING:
                    flat[(b * n + tid) * nb + k // 8] |= 1 << (k % 8)
                else:
                    flat[base_of(mode, n, b, tid, seq_lens) + k] = True
                g = int(sel[b, cp]) // topk
                if g == 0:
                    break
                cp = find(b, int(parent_list[b, g]))
                if cp == n - 1:
                    break
            positions[b * n + tid] = s + position


def base_of(mode, n, b, tid, seq_lens):
    s = int(seq_lens[b])
    if mode == FULL_MASK:
        return n * n * b + n * int(seq_lens[:b].sum()) + (s + n) * tid + s
    return n * n * b + n * tid


def _random_eagle(g, bs, topk, depth, n):
    """Drafter outputs as EAGLE makes them: step 0 expands the root into topk candidates (flat
    ids 0..topk-1); step i >= 1 expands topk chosen candidates of step i - 1 into topk children
    each (flat ids from topk + topk^2 (i - 1)), a child's score its parent's times a draw, so
    the best n - 1 are closed under parents; parents_list[i] holds the flat ids step i + 1
    expanded (parents_list[0] = -1, 0..topk-1)."""
    scores = [torch.rand(bs, 1, topk, generator=g)]
    parents = [torch.arange(-1, topk).expand(bs, topk + 1)]
    prev, prev_off = scores[0].flatten(1), 0
    for i in range(1, depth):
        if i == 1:
            chosen = torch.arange(topk).expand(bs, topk)
        else:
            chosen = torch.stack(
                [torch.randperm(topk * topk, generator=g)[:topk] for _ in range(bs)]
            )
            parents.append(prev_off + chosen)
        child = prev.gather(1, chosen)[:, :, None] * torch.rand(bs, topk, topk, generator=g)
        scores.append(child)
        prev, prev_off = child.flatten(1), topk + topk * topk * (i - 1)
    parents.append(parents[-1])  # the last step's entry: dropped by organize_draft_results
    tokens = [torch.randint(0, 50, sc.flatten(1).shape, generator=g) for sc in scores]
    return _organize(scores, tokens, parents, n)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", [FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING])
@pytest.mark.parametrize("broken", [False, True])
def test_random_trees_match_the_kernel(seed, mode, broken):
    """Valid EAGLE trees in validation mode; with some parents replaced by ids never selected,
    in fast mode (orphans left unlinked, their walks stopped, as the bounded kernel does)."""
    g = torch.Generator().manual_seed(seed)
    bs, topk, depth, n = 3, 3, 4, 10
    parent_list, sel, _ = _random_eagle(g, bs, topk, depth, n)
    if broken:
        parent_list = parent_list.clone()
        parent_list[:, 3::3] = 10**4
    seq_lens = torch.randint(0, 7, (bs,), generator=g)
    want = _buffers(bs, n, seq_lens, mode)
    got = _buffers(bs, n, seq_lens, mode)
    if mode == FULL_MASK:  # prefix columns: whatever the caller put there, kept
        noise = torch.rand(want[0].shape, generator=g) < 0.5
        want[0].copy_(noise)
        got[0].copy_(noise)
    _kernel(parent_list, sel, seq_lens, *want, topk, depth, n, mode)
    with specops.validation(not broken):
        build_tree_kernel_efficient(parent_list, sel, seq_lens, *got, topk, depth, n, mode)
    for w, h in zip(want, got):
        assert torch.equal(w, h)


def test_malformed_input():
    parent_list, top, _ = _sglang_case()
    seq_lens = torch.tensor([5, 10])

    def run(pl=parent_list, sel=top, mask_len=None, mode=FULL_MASK):
        mask, positions, ri, nt, ns = _buffers(2, 8, seq_lens, mode)
        if mask_len is not None:
            mask = mask[:mask_len].clone()
        build_tree_kernel_efficient(pl, sel, seq_lens, mask, positions, ri, nt, ns, 4, 4, 8, mode)
        return positions

    orphan = parent_list.clone()
    orphan[0, 2] = 999  # a parent that was never selected
    with specops.validation(True):
        with pytest.raises(ValueError, match="parent is not among"):
            run(pl=orphan)
        with pytest.raises(ValueError, match="FULL_MASK needs"):
            run(mask_len=100)
        with pytest.raises(ValueError, match="parent_list must have"):
            run(pl=parent_list[:, :5])
        with pytest.raises(ValueError, match="selected_index"):
            run(sel=top[:, :3])
    with specops.validation(False):  # fast mode: finishes, nothing outside the tensors
        assert run(pl=orphan).shape == (16,)
        assert run(mask_len=100).shape == (16,)
        big = top.clone()
        big[1, 3] = 10**6  # g far past parent_list
        assert run(sel=big).shape == (16,)
        # a negative length and a short mask: the writes that do not fit are dropped, the ones
        # that fit land, whatever order the scatter runs in
        mask, positions, ri, nt, ns = _buffers(2, 8, seq_lens, FULL_MASK)
        short = mask[:110].clone()
        build_tree_kernel_efficient(parent_list, top, torch.tensor([5, -3]), short, positions, ri,
                                    nt, ns, 4, 4, 8, FULL_MASK)  # fmt: skip
        want = torch.tensor(_QLEN, dtype=torch.bool)
        assert torch.equal(short[: 8 * 13].view(8, 13)[:, 5:], want[0])


# SGLang's jit_kernel tests (python/sglang/jit_kernel/tests/test_eagle_utils.py) ---------------
def _jit_inputs(bs, topk, depth, n, seq_len, mode, positions_2d):
    """make_build_tree_inputs of SGLang's jit_kernel test: a chain-like parent list, selected
    0..n-2, ``positions`` allocated [bs, n] as that test does (or flat, [bs * n])."""
    width = topk * (depth - 1) + 1
    parent_list = torch.arange(-1, width - 1).expand(bs, width).clone()
    parent_list[:, 0] = 0
    sel = torch.arange(n - 1).expand(bs, n - 1).contiguous()
    seq = torch.full((bs,), seq_len)
    if mode == QLEN_ONLY_BITPACKING:
        mask = torch.zeros(bs * n * (4 if n > 16 else 2 if n > 8 else 1), dtype=torch.uint8)
    elif mode == QLEN_ONLY:
        mask = torch.zeros(bs * n * n, dtype=torch.bool)
    else:
        mask = torch.zeros(bs * seq_len * n + bs * n * n, dtype=torch.bool)
    positions = torch.zeros((bs, n) if positions_2d else (bs * n,), dtype=torch.long)
    ri = torch.zeros(bs, n, dtype=torch.long)
    nt, ns = torch.full((2, bs, n), -1, dtype=torch.long)
    return parent_list, sel, seq, mask, positions, ri, nt, ns


@pytest.mark.parametrize("bs", [1, 2, 4])
@pytest.mark.parametrize("mode", [FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING])
def test_positions_as_bs_by_n(bs, mode):
    """SGLang's jit_kernel tests allocate ``positions`` [bs, N] (test_build_tree_smoke,
    test_build_tree_vs_aot): accepted, written exactly as the flat [bs * N] buffer is; the
    smoke test's assertions hold."""
    topk, depth, seq_len = 4, 5, 10
    n = topk * (depth - 1) + 1
    flat = _jit_inputs(bs, topk, depth, n, seq_len, mode, False)
    square = _jit_inputs(bs, topk, depth, n, seq_len, mode, True)
    build_tree_kernel_efficient(*flat, topk, depth, n, mode)
    build_tree_kernel_efficient(*square, topk, depth, n, mode)
    positions = square[4]
    assert positions.shape == (bs, n)
    assert (positions[:, 0] == seq_len).all()
    assert [int(square[5][b, 0]) for b in range(bs)] == [b * n for b in range(bs)]
    assert torch.equal(positions.flatten(), flat[4])
    for a, b in zip(flat[3:], square[3:]):
        assert torch.equal(a.flatten(), b.flatten())
    with pytest.raises(ValueError, match="positions"):
        bad = list(_jit_inputs(bs, topk, depth, n, seq_len, mode, True))
        bad[4] = torch.zeros(bs, n + 1, dtype=torch.long)
        build_tree_kernel_efficient(*bad, topk, depth, n, mode)


@pytest.mark.parametrize("mode", [FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING])
@pytest.mark.parametrize("depth", [1, 3])
def test_one_draft_token(mode, depth):
    """draft_token_num = 1 (the root alone), as SGLang 0.5.23's kernel runs it: positions =
    the verified lengths, retrive_index[b, 0] = b, the root's own mask bit set, the lists left
    as given (SGLang's selected_index is then [bs, 0])."""
    bs, topk, seq = 3, 2, torch.tensor([4, 0, 7])
    width = topk * (depth - 1) + 1
    parent_list = torch.arange(-1, width - 1).expand(bs, width).contiguous()
    sel = torch.zeros(bs, 0, dtype=torch.long)
    mask, positions, ri, nt, ns = _buffers(bs, 1, seq, mode)
    if mode == FULL_MASK:
        mask.fill_(False)
    for validate in (True, False):
        with specops.validation(validate):
            build_tree_kernel_efficient(parent_list, sel, seq, mask, positions, ri, nt, ns, topk,
                                        depth, 1, mode)  # fmt: skip
        assert positions.tolist() == [4, 0, 7]
        assert ri.tolist() == [[0], [1], [2]]
        assert nt.tolist() == ns.tolist() == [[-1]] * 3
        if mode == FULL_MASK:  # row b: seq_b prefix columns (left as filled), then the root
            assert mask.tolist() == [False] * 4 + [True] + [True] + [False] * 7 + [True]
        else:
            assert mask.view(-1).tolist() == [1, 1, 1] if mode == QLEN_ONLY_BITPACKING else (
                mask.tolist() == [True] * 3)  # fmt: skip


@pytest.mark.parametrize(
    "index,name,err",
    [(1, "selected_index", TypeError), (2, "verified_seq_len", TypeError),
     (4, "positions", TypeError), (5, "retrive_index", TypeError)],
)  # fmt: skip
def test_bad_arguments_are_named(index, name, err):
    args = list(_jit_inputs(2, 2, 3, 5, 4, QLEN_ONLY, False))
    args[index] = args[index].float()
    with pytest.raises(err, match=rf"\b{name}\b"):
        build_tree_kernel_efficient(*args, 2, 3, 5, QLEN_ONLY)


@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("mode", [FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING])
def test_non_contiguous_tree_mask_is_read_as_it_is(mode, validate):
    """A 2-D ``tree_mask`` seen through a transpose (issue 47: torch's view error, validation
    mode too) is written as it reads, its entries in row-major order: the same entries as a
    contiguous mask of that shape; an expanded mask is one line naming it."""
    bs, topk, depth, seq_len = 2, 2, 3, 4
    n = topk * (depth - 1) + 1
    args = list(_jit_inputs(bs, topk, depth, n, seq_len, mode, False))
    flat = args[3]
    rows = 2 * (n if mode != QLEN_ONLY_BITPACKING else 1)
    base = torch.zeros(flat.numel() // rows, rows, dtype=flat.dtype)
    if mode == FULL_MASK:  # the caller's prefix columns, kept
        base.fill_(True)
        flat.fill_(True)
    strided = base.t()  # [rows, cols], not contiguous
    assert not strided.is_contiguous()
    again = list(_jit_inputs(bs, topk, depth, n, seq_len, mode, False))
    again[3] = strided
    with specops.validation(validate):
        build_tree_kernel_efficient(*args, topk, depth, n, mode)
        build_tree_kernel_efficient(*again, topk, depth, n, mode)
    assert torch.equal(strided.reshape(-1), flat)
    assert flat.any() and (mode == QLEN_ONLY_BITPACKING or not flat.all())  # a real mask
    for a, b in zip(args[4:], again[4:]):
        assert torch.equal(a, b)
    args[3] = torch.zeros(1, dtype=flat.dtype).expand(flat.numel())
    with pytest.raises(ValueError, match="tree_mask.*expanded"):
        build_tree_kernel_efficient(*args, topk, depth, n, mode)
