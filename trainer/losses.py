"""Losses of the head-similarity paper (arXiv 2605.07766): teacher alignment and hierarchical similarity.

Relations of a pair (anchor a, other sample b != a) inside a batch:

* R1 positive       -- same identity, same appearance state (e.g. both with / both without hat)
* R2 semi-negative  -- same identity, different appearance state
* R3 negative       -- different identity

The hierarchical loss asks, on cosine similarities s, for R1 > R2 > R3 with margins::

    L_sim(a) = softplus(m1 + s_an1 - s_ap)      # R1 above R2
             + softplus(m2 + s_an2 - s_ap)      # R1 above R3 by the larger margin
             + softplus(m3 + s_an2 - s_an1')    # R2 above R3

with online hard mining per anchor: s_ap = lowest-similarity R1, s_an1 = highest-similarity R2,
s_an2 = highest-similarity R3.  For the third term, ``r2_mining`` chooses s_an1':

* ``"single"`` (default, the paper's literal "hardest R2 semi-negative per anchor"): s_an1' = s_an1, the
  highest-similarity R2 -- one mined R2 partner serves both terms.
* ``"per_term"``: s_an1' = the *lowest*-similarity R2, i.e. the hardest R2 for the R2-above-R3 ordering.
  Then every term equals the maximum of that term over all (anchor, partner, partner) combinations.

Head alignment (for a whole-head teacher, which has a head vector for every crop, faces or not):
L_align_head = mean over samples with a teacher head vector of 1 - cos(t_head, z_head), the same form as L_align.

Averaging: a term exists for an anchor only if the anchor has both partners it needs (term 1: R1 and R2,
term 2: R1 and R3, term 3: R2 and R3); missing terms are omitted.  The loss is the mean, over anchors with
at least one existing term, of the sum of that anchor's existing terms.  With no such anchor it is 0
(still attached to the graph).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

R2_MINING = ("single", "per_term")


def _zero_like_graph(z: Tensor) -> Tensor:
    return z.sum() * 0.0


def align_loss(z_teacher: Tensor, z_id: Tensor, valid_mask: Tensor | None = None) -> Tensor:
    """Mean of 1 - cos(z_teacher, z_id) over samples with a valid aligned face (mask True).

    The teacher embedding is treated as a constant (detached).  No valid sample -> 0.
    """
    cos = F.cosine_similarity(z_teacher.detach().to(z_id.dtype), z_id, dim=-1)
    if valid_mask is None:
        return (1.0 - cos).mean()
    valid = valid_mask.to(device=z_id.device, dtype=torch.bool).reshape(-1)
    if not bool(valid.any()):
        return _zero_like_graph(z_id)
    return (1.0 - cos[valid]).mean()


def relation_masks(identity: Tensor, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(R1, R2, R3) boolean (N, N) masks; the diagonal is in none of them."""
    identity = identity.reshape(-1)
    state = state.reshape(-1)
    same_id = identity[:, None] == identity[None, :]
    same_state = state[:, None] == state[None, :]
    eye = torch.eye(identity.numel(), dtype=torch.bool, device=identity.device)
    return same_id & same_state & ~eye, same_id & ~same_state, ~same_id


def _masked_extreme(sim: Tensor, mask: Tensor, largest: bool) -> tuple[Tensor, Tensor]:
    has = mask.any(dim=1)
    fill = float("-inf") if largest else float("inf")
    filled = sim.masked_fill(~mask, fill)
    value = filled.max(dim=1).values if largest else filled.min(dim=1).values
    return torch.where(has, value, torch.zeros_like(value)), has


def mine_hard(sim: Tensor, identity: Tensor, state: Tensor) -> dict[str, Tensor]:
    """Hardest partners per anchor from an (N, N) similarity matrix.

    Returns s_ap (min R1), s_an1 (max R2), s_an1_min (min R2), s_an2 (max R3), each (N,), set to 0 where the
    anchor has no such partner, and the masks has_ap, has_an1, has_an2.
    """
    r1, r2, r3 = relation_masks(identity.to(sim.device), state.to(sim.device))
    s_ap, has_ap = _masked_extreme(sim, r1, largest=False)
    s_an1, has_an1 = _masked_extreme(sim, r2, largest=True)
    s_an1_min, _ = _masked_extreme(sim, r2, largest=False)
    s_an2, has_an2 = _masked_extreme(sim, r3, largest=True)
    return {
        "s_ap": s_ap, "s_an1": s_an1, "s_an1_min": s_an1_min, "s_an2": s_an2,
        "has_ap": has_ap, "has_an1": has_an1, "has_an2": has_an2,
    }


def hierarchical_similarity_terms(
    z: Tensor, identity: Tensor, state: Tensor, m1: float = 0.1, m2: float = 0.3, m3: float = 0.2,
    r2_mining: str = "single",
) -> tuple[Tensor, Tensor]:
    """Per-anchor terms (N, 3) and their validity mask (N, 3); invalid entries are 0."""
    if r2_mining not in R2_MINING:
        raise ValueError(f"r2_mining must be one of {R2_MINING}, got {r2_mining!r}")
    zn = F.normalize(z, dim=-1)
    sim = zn @ zn.t()
    h = mine_hard(sim, identity, state)
    s_an1_t3 = h["s_an1"] if r2_mining == "single" else h["s_an1_min"]
    terms = torch.stack(
        [
            F.softplus(m1 + h["s_an1"] - h["s_ap"]),
            F.softplus(m2 + h["s_an2"] - h["s_ap"]),
            F.softplus(m3 + h["s_an2"] - s_an1_t3),
        ],
        dim=1,
    )
    valid = torch.stack(
        [h["has_ap"] & h["has_an1"], h["has_ap"] & h["has_an2"], h["has_an1"] & h["has_an2"]], dim=1
    )
    return torch.where(valid, terms, torch.zeros_like(terms)), valid


def hierarchical_similarity_loss(
    z: Tensor, identity: Tensor, state: Tensor, m1: float = 0.1, m2: float = 0.3, m3: float = 0.2,
    r2_mining: str = "single",
) -> Tensor:
    """L_sim on embeddings z (N, d): mean over anchors having any term of the sum of their existing terms."""
    terms, valid = hierarchical_similarity_terms(z, identity, state, m1, m2, m3, r2_mining)
    anchors = valid.any(dim=1)
    if not bool(anchors.any()):
        return _zero_like_graph(z)
    return terms.sum(dim=1)[anchors].mean()


def head_similarity_loss(
    z_id: Tensor, z_head: Tensor, identity: Tensor, state: Tensor,
    z_teacher: Tensor | None = None, face_valid: Tensor | None = None, lambda_align: float = 1.0,
    m1: float = 0.1, m2: float = 0.3, m3: float = 0.2, r2_mining: str = "single",
    z_teacher_head: Tensor | None = None, head_valid: Tensor | None = None, lambda_align_head: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Total = L_sim(z_id) + L_sim(z_head) + lambda_align * L_align(z_teacher, z_id) (align only if a teacher)
    + lambda_align_head * L_align(z_teacher_head, z_head) (only with teacher head vectors; `head_valid` marks them).

    For the "shared" variant z_head is z_id and L_sim is simply counted twice.  Returns (loss, logged floats).
    """
    sim_id = hierarchical_similarity_loss(z_id, identity, state, m1, m2, m3, r2_mining)
    sim_head = hierarchical_similarity_loss(z_head, identity, state, m1, m2, m3, r2_mining)
    total = sim_id + sim_head
    stats = {"sim_id": float(sim_id.detach()), "sim_head": float(sim_head.detach())}
    if z_teacher is not None and lambda_align:
        align = align_loss(z_teacher, z_id, face_valid)
        total = total + lambda_align * align
        stats["align"] = float(align.detach())
        stats["align_valid_frac"] = float(face_valid.float().mean()) if face_valid is not None else 1.0
    if z_teacher_head is not None and lambda_align_head:
        if z_teacher_head.shape[-1] != z_head.shape[-1]:
            raise ValueError(f"teacher head vectors are {z_teacher_head.shape[-1]}-d but z_head is {z_head.shape[-1]}-d")
        align_head = align_loss(z_teacher_head, z_head, head_valid)
        total = total + lambda_align_head * align_head
        stats["align_head"] = float(align_head.detach())
    stats["loss"] = float(total.detach())
    return total, stats
