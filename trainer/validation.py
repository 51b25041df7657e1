"""Validation of a training run: the held-out samples (`ValidationSet`), the model's vectors of them and their
metrics (head and identity protocols, the bench's recipe), and the same metrics of the teacher's vectors: the bar."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from headsearch.evaluation.verification import evaluate
from schemas.records import VectorKind
from trainer.dataset_format import DatasetInfo
from trainer.options import TrainOptions
from trainer.samples import CropDataset, face_inputs

VAL_FAR = 1e-2


def embedding_summary(z: np.ndarray, identities: list[str], states: list[str]) -> dict[str, Any]:
    """Head protocol (R1 vs R2+R3) and identity protocol (R1+R2 vs R3): AUC and exact VR@FAR 1e-2 (None when
    not measurable), and hierarchy accuracy, from cosine similarities of the rows of z (the bench's recipe)."""
    return evaluate({VectorKind.ID: z}, identities, states, fars=(VAL_FAR,)).summary(VAL_FAR)


@dataclass
class ValidationSet:
    """The held-out samples: their loader (None when no identity is held out) and labels."""

    indices: np.ndarray
    loader: torch.utils.data.DataLoader | None = None
    identities: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)


def validation_set(info: DatasetInfo, val_idx: np.ndarray, size: int, options: TrainOptions, loader_kw: dict,
                   features: np.ndarray | None = None) -> ValidationSet:
    """The held-out samples' loader (evaluation preprocessing, batches of val_batch_size) and labels."""
    if not len(val_idx):
        return ValidationSet(val_idx)
    val_set = CropDataset(info, val_idx, size, None, features)
    bs = options.val_batch_size
    batches = [list(range(s, min(s + bs, len(val_set)))) for s in range(0, len(val_set), bs)]
    return ValidationSet(val_idx, torch.utils.data.DataLoader(val_set, batch_sampler=batches, **loader_kw),
                         [info.identity[i] for i in val_idx], [info.state[i] for i in val_idx])


@torch.no_grad()
def embed(model: nn.Module, loader, device: torch.device, amp: bool, from_stem: bool = False) -> tuple[np.ndarray, np.ndarray]:
    was_training = model.training
    model.eval()
    ids, heads = [], []
    try:
        for batch in loader:
            x = batch["x"].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                z_id, z_head = model(x, from_stem=from_stem, **face_inputs(model, batch, device))
            ids.append(z_id.float().cpu().numpy())
            heads.append(z_head.float().cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(ids), np.concatenate(heads)


def validate(model, loader, device, amp, identities, states, from_stem: bool = False) -> dict[str, Any]:
    z_id, z_head = embed(model, loader, device, amp, from_stem)
    m_id = embedding_summary(z_id, identities, states)
    m_head = embedding_summary(z_head, identities, states)
    out = dict(m_id)  # top level: z_id (the best checkpoint is chosen by its head_auc)
    out["hierarchy_head"] = m_head["hierarchy"]
    out["z_head"] = m_head
    return out


def teacher_validation(info: DatasetInfo, val: ValidationSet) -> dict[str, Any]:
    """The same metrics on the teacher's vectors of the held-out samples that have one: the bar to reach (with head
    vectors, theirs under "z_head")."""
    has = [k for k, g in enumerate(val.indices) if info.teacher_index[g] >= 0]
    if len(has) < 2:
        out: dict[str, Any] = {"n": len(has)}
    else:
        zt = info.teacher[info.teacher_index[val.indices[has]]]
        out = embedding_summary(zt, [val.identities[k] for k in has], [val.states[k] for k in has])
    heads = [k for k, g in enumerate(val.indices) if info.teacher_head_index[g] >= 0]
    if len(heads) >= 2:
        zh = info.teacher_head[info.teacher_head_index[val.indices[heads]]]
        out["z_head"] = embedding_summary(zh, [val.identities[k] for k in heads], [val.states[k] for k in heads])
    return out
