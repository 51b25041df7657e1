"""Losses against brute-force loops over all (anchor, partner, partner) combinations."""
from __future__ import annotations

import math

import pytest
from conftest import require_train_extra

require_train_extra()  # torch, timm, safetensors below

import torch
import torch.nn.functional as F

from headsearch.models.dual_cls import HeadModelConfig, HeadSimilarityModel
from trainer.losses import align_loss, head_similarity_loss, hierarchical_similarity_loss, mine_hard

M1, M2, M3 = 0.1, 0.3, 0.2


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _batch(seed: int):
    """12 samples, 3 identities, 2 states. Identity 1 has one state only (no R2 partners); sample 9 is alone
    in its (identity, state) group (no R1 partner)."""
    g = torch.Generator().manual_seed(seed)
    identity = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
    state = torch.tensor([0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1])
    perm = torch.randperm(12, generator=g)
    z = F.normalize(torch.randn(12, 8, generator=g, dtype=torch.float64), dim=1)
    return z, identity[perm], state[perm]


def _partners(identity, state, a):
    n = len(identity)
    r1 = [b for b in range(n) if b != a and identity[b] == identity[a] and state[b] == state[a]]
    r2 = [b for b in range(n) if identity[b] == identity[a] and state[b] != state[a]]
    r3 = [b for b in range(n) if identity[b] != identity[a]]
    return r1, r2, r3


def _brute_loss(z, identity, state, r2_mining):
    s = (z @ z.t()).tolist()
    identity, state = identity.tolist(), state.tolist()
    per_anchor = []
    for a in range(len(identity)):
        r1, r2, r3 = _partners(identity, state, a)
        terms = []
        if r1 and r2:  # max over all (p, n) pairs == hardest positive & hardest semi-negative
            terms.append(max(_softplus(M1 + s[a][n] - s[a][p]) for p in r1 for n in r2))
        if r1 and r3:
            terms.append(max(_softplus(M2 + s[a][n] - s[a][p]) for p in r1 for n in r3))
        if r2 and r3:
            if r2_mining == "per_term":
                terms.append(max(_softplus(M3 + s[a][n] - s[a][q]) for q in r2 for n in r3))
            else:  # the single mined R2 partner: highest similarity
                q = max(r2, key=lambda b: s[a][b])
                terms.append(max(_softplus(M3 + s[a][n] - s[a][q]) for n in r3))
        if terms:
            per_anchor.append(sum(terms))
    return sum(per_anchor) / len(per_anchor) if per_anchor else 0.0


@pytest.mark.parametrize("seed", range(5))
def test_mine_hard_matches_loops(seed):
    z, identity, state = _batch(seed)
    sim = z @ z.t()
    h = mine_hard(sim, identity, state)
    ids, sts = identity.tolist(), state.tolist()
    saw_no_r2 = saw_no_r1 = False
    for a in range(12):
        r1, r2, r3 = _partners(ids, sts, a)
        saw_no_r1 |= not r1
        saw_no_r2 |= not r2
        assert bool(h["has_ap"][a]) == bool(r1) and bool(h["has_an1"][a]) == bool(r2) and bool(h["has_an2"][a])
        if r1:
            assert h["s_ap"][a].item() == pytest.approx(min(sim[a, b].item() for b in r1))
        if r2:
            assert h["s_an1"][a].item() == pytest.approx(max(sim[a, b].item() for b in r2))
            assert h["s_an1_min"][a].item() == pytest.approx(min(sim[a, b].item() for b in r2))
        else:
            assert h["s_an1"][a].item() == 0.0
        assert h["s_an2"][a].item() == pytest.approx(max(sim[a, b].item() for b in r3))
    assert saw_no_r1 and saw_no_r2


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("r2_mining", ["single", "per_term"])
def test_hierarchical_loss_matches_brute_force(seed, r2_mining):
    z, identity, state = _batch(seed)
    got = hierarchical_similarity_loss(z, identity, state, M1, M2, M3, r2_mining=r2_mining)
    assert got.item() == pytest.approx(_brute_loss(z, identity, state, r2_mining), rel=1e-9)


def test_hierarchical_loss_edge_cases():
    z = F.normalize(torch.randn(3, 4), dim=1).requires_grad_()
    # every sample its own identity and nobody shares a group -> only R3 exists -> no term at all
    loss = hierarchical_similarity_loss(z, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 0]))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(z.grad, torch.zeros_like(z))
    with pytest.raises(ValueError):
        hierarchical_similarity_loss(z, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 0]), r2_mining="x")
    # perfectly ordered embeddings still pay softplus(margin - gap) > 0, but less than disordered ones
    e = torch.eye(4, dtype=torch.float64)
    ordered = torch.stack([e[0], e[0], F.normalize(e[0] + e[1], dim=0), e[2]])
    ident, st = torch.tensor([0, 0, 0, 1]), torch.tensor([0, 0, 1, 0])
    disordered = torch.stack([e[0], e[2], e[0], e[0]])
    assert hierarchical_similarity_loss(ordered, ident, st) < hierarchical_similarity_loss(disordered, ident, st)


def test_align_loss_masked():
    g = torch.Generator().manual_seed(0)
    t, z = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    mask = torch.tensor([1, 0, 1, 1, 0, 0], dtype=torch.bool)
    want = sum(1 - F.cosine_similarity(t[i], z[i], dim=0).item() for i in range(6) if mask[i]) / 3
    assert align_loss(t, z, mask).item() == pytest.approx(want, rel=1e-6)
    assert align_loss(t, z, None).item() == pytest.approx(
        sum(1 - F.cosine_similarity(t[i], z[i], dim=0).item() for i in range(6)) / 6, rel=1e-6)
    zz = z.clone().requires_grad_()
    none = align_loss(t, zz, torch.zeros(6, dtype=torch.bool))
    assert none.item() == 0.0
    none.backward()
    assert torch.equal(zz.grad, torch.zeros_like(zz))


def test_head_similarity_loss_end_to_end_gradients():
    torch.manual_seed(0)
    model = HeadSimilarityModel(HeadModelConfig.tiny()).train()
    x = torch.rand(12, 3, 112, 112) * 2 - 1
    _, identity, state = _batch(0)
    z_id, z_head = model(x)
    teacher = torch.randn(12, 32)
    valid = torch.tensor([True] * 10 + [False] * 2)
    loss, stats = head_similarity_loss(z_id, z_head, identity, state, teacher, valid, lambda_align=0.5)
    want = (hierarchical_similarity_loss(z_id, identity, state) + hierarchical_similarity_loss(z_head, identity, state)
            + 0.5 * align_loss(teacher, z_id, valid))
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    assert set(stats) >= {"loss", "sim_id", "sim_head", "align"} and all(math.isfinite(v) for v in stats.values())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.reg_token.grad.abs().sum() > 0 and model.cls_token.grad.abs().sum() > 0
    _, no_teacher = head_similarity_loss(z_id.detach(), z_head.detach(), identity, state)
    assert "align" not in no_teacher


def test_head_alignment_term():
    g = torch.Generator().manual_seed(1)
    identity, state = torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0, 1, 2, 2, 3, 3])
    z_id = torch.randn(6, 4, generator=g, requires_grad=True)
    z_head = torch.randn(6, 7, generator=g, requires_grad=True)
    t_head = torch.randn(6, 7, generator=g)
    valid = torch.tensor([True, True, False, True, True, True])  # e.g. one crop without a head vector
    loss, stats = head_similarity_loss(z_id, z_head, identity, state, z_teacher_head=t_head, head_valid=valid,
                                       lambda_align_head=2.0)
    want = (hierarchical_similarity_loss(z_id, identity, state) + hierarchical_similarity_loss(z_head, identity, state)
            + 2.0 * align_loss(t_head, z_head, valid))
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    assert stats["align_head"] == pytest.approx(align_loss(t_head, z_head, valid).item(), rel=1e-6)
    loss.backward()
    assert z_head.grad[2].abs().sum() > 0  # L_sim still reaches the sample without a head vector
    # The term moves z_head only: with L_sim off (one sample per identity), z_id gets no gradient from it.
    zi, zh = z_id.detach().clone().requires_grad_(), z_head.detach().clone().requires_grad_()
    one = torch.arange(6)
    loss, _ = head_similarity_loss(zi, zh, one, one, z_teacher_head=t_head, lambda_align_head=1.0)
    loss.backward()
    assert torch.equal(zi.grad, torch.zeros_like(zi)) and zh.grad.abs().sum() > 0
    # Off by default, and a width mismatch is an error, not a silent broadcast.
    _, off = head_similarity_loss(z_id.detach(), z_head.detach(), identity, state, z_teacher_head=t_head)
    assert "align_head" not in off
    with pytest.raises(ValueError, match="7-d"):
        head_similarity_loss(z_id.detach(), z_head.detach(), identity, state, z_teacher_head=t_head[:, :5], lambda_align_head=1.0)
