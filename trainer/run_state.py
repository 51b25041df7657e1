"""Where a training run stands, and its exact resume: `TrainState` and the state.pt file that holds it with the
weights, optimizer, scheduler and RNG states; the files of the run folder.

Exact resume: every random draw of an epoch is a function of (seed, epoch, step) -- the batches, the
augmentation of each slot -- so resuming at a step boundary reproduces the uninterrupted run.
"""
from __future__ import annotations

import contextlib
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from headsearch.basics.files import atomic_write
from trainer.options import RESUME_KEYS, TrainingError, TrainOptions

STATE_FORMAT = "headsearch-train-state/1"
# The run folder.
LOG = "log.jsonl"
LAST = "last.safetensors"
BEST = "best.safetensors"
STATE = "state.pt"


def _rng_states() -> dict[str, Any]:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        with contextlib.suppress(Exception):
            torch.cuda.set_rng_state_all(states["cuda"])


def _legacy_param_groups(model: nn.Module) -> list[list[nn.Parameter]]:
    """The optimizer groups of state.pt files written before the optimizer came from timm: [decay, no_decay]."""
    skip = set(model.no_weight_decay())
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if name in skip or p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [decay, no_decay]


def _optimizer_state_for(saved: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """A saved optimizer state in `optimizer`'s group layout; an older run's [decay, no_decay] groups are
    renumbered into timm's [no_decay, decay] (one group when weight decay is 0), so runs in progress resume."""
    def layout(groups: list[dict]) -> list[tuple[int, float]]:
        return [(len(g["params"]), g["weight_decay"]) for g in groups]

    if layout(saved["param_groups"]) == layout(optimizer.param_groups):
        return saved
    legacy = [p for group in _legacy_param_groups(model) for p in group]
    saved_ids = [i for g in saved["param_groups"] for i in g["params"]]
    if len(saved["param_groups"]) != 2 or len(saved_ids) != len(legacy):
        return saved  # not the older layout: load_state_dict says what does not match
    saved_id = {id(p): i for p, i in zip(legacy, saved_ids, strict=True)}
    by_decay = {g["weight_decay"]: g for g in saved["param_groups"]}
    groups = [{**by_decay.get(g["weight_decay"], saved["param_groups"][0]), "params": [saved_id[id(p)] for p in g["params"]]}
              for g in optimizer.param_groups]
    return {"state": saved["state"], "param_groups": groups}


@dataclass
class TrainState:
    """Where a run stands. state.pt holds these fields (same keys) with the weights, optimizer, scheduler
    and RNG states, so that a resumed run continues exactly."""

    epoch: int = 0  # the epoch in progress; epochs completed when step_in_epoch is 0
    step_in_epoch: int = 0  # optimizer steps done in that epoch
    step: int = 0  # optimizer steps in total
    best_auc: float | None = None  # validation head AUC of best.safetensors
    have_best: bool = False
    sums: dict[str, float] = field(default_factory=dict)  # the epoch's logged losses, summed over its steps so far
    counts: dict[str, int] = field(default_factory=dict)  # steps in each sum
    images_seen: int = 0  # in the epoch so far
    teacher_metrics: dict | None = None  # validation metrics of the teacher's vectors
    last_val: dict | None = None  # validation metrics of the last finished epoch

    def start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.step_in_epoch == 0:
            self.sums, self.counts, self.images_seen = {}, {}, 0

    def add_step(self, stats: dict[str, float], images: int, has_teacher: bool, has_teacher_head: bool = True) -> None:
        """Count one optimizer step and its logged losses."""
        self.step += 1
        self.step_in_epoch += 1
        self.images_seen += images
        for k, v in stats.items():
            if k == "align" and not has_teacher:
                continue  # a batch without any teacher embedding says nothing about L_align
            if k == "align_head" and not has_teacher_head:
                continue
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
            self.counts[k] = self.counts.get(k, 0) + 1

    def mean_stats(self) -> dict[str, float | None]:
        keys = ("loss", "sim_id", "sim_head", "align", "align_valid_frac", "align_head")
        return {k: (self.sums[k] / self.counts[k] if self.counts.get(k) else None) for k in keys}

    def save(self, path: Path, options: TrainOptions, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler) -> None:
        """Write state.pt atomically (the RNG states are those of this moment)."""
        state = {
            "format": STATE_FORMAT,
            "options": asdict(options),
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "step": self.step,
            "sampler_epoch": self.epoch,
            "best_auc": self.best_auc,
            "have_best": self.have_best,
            "sums": self.sums,
            "counts": self.counts,
            "images_seen": self.images_seen,
            "teacher_metrics": self.teacher_metrics,
            "last_val": self.last_val,
            "rng": _rng_states(),
        }
        atomic_write(path, lambda tmp: torch.save(state, tmp))

    @staticmethod
    def read(path: Path, options: TrainOptions) -> dict[str, Any]:
        """The saved state of a run to resume with these options; TrainingError when there is none or it differs."""
        if not path.is_file():
            raise TrainingError(f"nothing to resume: {path} not found")
        try:
            saved = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:
            raise TrainingError(f"cannot read {path}: {e}") from None
        if not isinstance(saved, dict) or saved.get("format") != STATE_FORMAT:
            raise TrainingError(f"{path} is not a training state file")
        for key in RESUME_KEYS:
            if saved["options"].get(key) != getattr(options, key):
                raise TrainingError(f"--resume with {key}={getattr(options, key)!r}, but the saved run used {saved['options'].get(key)!r}")
        return saved

    @classmethod
    def restore(cls, saved: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, scheduler) -> TrainState:
        """Load the saved weights, optimizer, scheduler and RNG states; the counters as a TrainState."""
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(_optimizer_state_for(saved["optimizer"], model, optimizer))
        scheduler_state = dict(saved["scheduler"])
        for key in ("base_lrs", "_last_lr"):  # one per group (all equal): an older run may have had one more
            if isinstance(scheduler_state.get(key), list):
                scheduler_state[key] = scheduler_state[key][:len(optimizer.param_groups)]
        scheduler.load_state_dict(scheduler_state)
        state = cls(epoch=int(saved["epoch"]), step_in_epoch=int(saved["step_in_epoch"]), step=int(saved["step"]),
                    best_auc=saved.get("best_auc"), have_best=bool(saved.get("have_best")), sums=dict(saved.get("sums", {})),
                    counts=dict(saved.get("counts", {})), images_seen=int(saved.get("images_seen", 0)),
                    teacher_metrics=saved.get("teacher_metrics"), last_val=saved.get("last_val"))
        _set_rng_states(saved["rng"])
        return state
