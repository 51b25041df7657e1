"""The training samples: identities split into training and validation (`split_samples`), the crops as a torch
dataset (`CropDataset`, one item per index or (index, augmentation seed)), batches of them (`collate`, the epoch's
batches from a step on: `SkipSampler`) and the teacher inputs of a batch that the model takes (`face_inputs`)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from headsearch.basics.images import read_image_rgb
from trainer.augment import HeadAugment, eval_transform
from trainer.dataset_format import DatasetInfo
from trainer.options import TrainingError, TrainOptions
from trainer.sampler import MixedBatchSampler, encode_labels


def split_identities(identity: list[str], fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_indices, val_indices): validation identities are a seeded ``fraction`` of those with >= 2 samples.

    At least 2 identities stay in training; validation gets at least 2 when ``fraction`` > 0 and the data
    allows (so the identity protocol has impostors); identities with a single sample always train.
    """
    if not 0.0 <= fraction < 1.0:
        raise TrainingError(f"--val-identities must be in [0, 1), got {fraction}")
    counts: dict[str, int] = {}
    for i in identity:
        counts[i] = counts.get(i, 0) + 1
    names = sorted(counts)
    eligible = [i for i in names if counts[i] >= 2]
    n_val = 0
    if fraction > 0 and eligible:
        n_val = max(2, int(round(fraction * len(eligible))))
        n_val = min(n_val, len(eligible), len(names) - 2)
        n_val = max(n_val, 0)
    rng = np.random.default_rng([seed, 0x5E1])
    val = {eligible[j] for j in rng.permutation(len(eligible))[:n_val]}
    is_val = np.array([i in val for i in identity])
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def split_samples(info: DatasetInfo, options: TrainOptions) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) sample indices; validation capped at options.val_max_samples by a seeded subset."""
    train_idx, val_idx = split_identities(info.identity, options.val_identities, options.seed)
    if len({info.identity[i] for i in train_idx}) < 2:
        raise TrainingError("fewer than 2 training identities after the validation split; lower --val-identities")
    if options.val_max_samples and len(val_idx) > options.val_max_samples:
        keep = np.random.default_rng([options.seed, 0x7A1]).choice(len(val_idx), options.val_max_samples, replace=False)
        val_idx = val_idx[np.sort(keep)]
    return train_idx, val_idx


class CropDataset(torch.utils.data.Dataset):
    """Samples of a DatasetInfo.  Key: an index (eval preprocessing) or (index, aug_seed) (augmented).

    With ``features`` (cached stem features of every dataset sample, (n, views, C, H, W)), items are stem
    features instead of pixels: view 0 for an index, a view drawn from the slot's seed when augmented."""

    def __init__(self, info: DatasetInfo, indices: np.ndarray, size: int, augment: HeadAugment | None,
                 features: np.ndarray | None = None):
        self.info = info
        self.features = features
        self.indices = np.asarray(indices, dtype=np.int64)
        self.size = size
        self.augment = augment
        self.identity_codes, _ = encode_labels([info.identity[i] for i in self.indices])
        self.state_codes, _ = encode_labels([(info.identity[i], info.state[i]) for i in self.indices])
        dim = info.teacher.shape[1] if info.teacher.size else 1
        self._zero_teacher = np.zeros(dim, np.float32)
        self._zero_head = np.zeros(max(1, info.head_dim), np.float32)

    def __len__(self) -> int:
        return len(self.indices)

    def image(self, local: int) -> np.ndarray:
        return read_image_rgb(self.info.root / self.info.head_crop[int(self.indices[local])])

    def __getitem__(self, key) -> dict[str, Any]:
        if self.features is not None:
            local, view = (key[0], int(np.random.default_rng(key[1]).integers(self.features.shape[1]))) if isinstance(key, tuple) \
                else (int(key), 0)
            x = torch.from_numpy(np.asarray(self.features[int(self.indices[local]), view], dtype=np.float32))
        elif isinstance(key, tuple):
            local, seed = key
            rng = np.random.default_rng(seed)
            rgb = self.image(local)
            other_local = int(rng.integers(len(self)))
            other = self.image(other_local) if other_local != local else rgb
            x = self.augment(rgb, rng, other) if self.augment is not None else eval_transform(rgb, self.size)
        else:
            local = int(key)
            x = eval_transform(self.image(local), self.size)
        g = int(self.indices[local])
        t = int(self.info.teacher_index[g])
        h = int(self.info.teacher_head_index[g])
        return {
            "x": x,
            "identity": int(self.identity_codes[local]),
            "state": int(self.state_codes[local]),
            "teacher": torch.from_numpy(self.info.teacher[t] if t >= 0 else self._zero_teacher),
            "has_teacher": t >= 0,
            "teacher_head": torch.from_numpy(self.info.teacher_head[h] if h >= 0 else self._zero_head),
            "has_teacher_head": h >= 0,
        }


def collate(items: list[dict]) -> dict[str, Tensor]:
    return {
        "x": torch.stack([it["x"] for it in items]),
        "identity": torch.tensor([it["identity"] for it in items], dtype=torch.long),
        "state": torch.tensor([it["state"] for it in items], dtype=torch.long),
        "teacher": torch.stack([it["teacher"] for it in items]),
        "has_teacher": torch.tensor([it["has_teacher"] for it in items], dtype=torch.bool),
        "teacher_head": torch.stack([it["teacher_head"] for it in items]),
        "has_teacher_head": torch.tensor([it["has_teacher_head"] for it in items], dtype=torch.bool),
    }


class SkipSampler:
    """The epoch's batches from ``start`` on (a resumed epoch skips the batches already trained)."""

    def __init__(self, sampler: MixedBatchSampler, epoch: int, start: int):
        self.batches = sampler.batches(epoch)[start:]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def face_inputs(model: nn.Module, batch: dict[str, Tensor], device: torch.device, keep: Tensor | None = None) -> dict[str, Tensor]:
    """The teacher inputs of a batch that the model takes: the face token's (teacher vectors, and where they exist;
    `keep` hides some) and the head skip path's (teacher head vectors, and where they exist); none for a plain model."""
    inputs: dict[str, Tensor] = {}
    if getattr(model.cfg, "face_dim", 0):
        mask = batch["has_teacher"].to(device)
        if keep is not None:
            mask = mask & keep.to(device)
        inputs.update(face=batch["teacher"].to(device), face_mask=mask)
    if getattr(model.cfg, "head_skip", False):
        inputs.update(head=batch["teacher_head"].to(device), head_mask=batch["has_teacher_head"].to(device))
    return inputs
