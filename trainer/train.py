"""Training loop of the head-similarity model (arXiv 2605.07766): dual-CLS ViT distilled from a face teacher.

``train(dataset, out, options)`` reads a dataset folder (``manifest.parquet``, ``teacher.npy``,
``teacher.json``, JPEG head crops), splits identities into train / validation, and trains
``HeadSimilarityModel`` with ``trainer.losses.head_similarity_loss`` on mixed batches
(``trainer.sampler.MixedBatchSampler``) of augmented crops (``trainer.augment.HeadAugment``).

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from headsearch.errors import HeadsearchError
from headsearch.files import atomic_write
from headsearch.images import read_image_rgb
from headsearch.metrics import evaluate_protocol, hierarchy_accuracy, pair_relations
from headsearch.model import HeadModelConfig, HeadSimilarityModel, save_checkpoint
from trainer.augment import HeadAugment, eval_transform
from trainer.losses import head_similarity_loss
from trainer.sampler import MixedBatchSampler, encode_labels

CONFIGS = ("small", "tiny", "paper")
MANIFEST_COLUMNS = ("sample_id", "identity", "state", "head_crop", "teacher_index")
STATE_FORMAT = "headsearch-train-state/1"
VAL_FAR = 1e-2


class TrainingError(HeadsearchError):
    """The dataset or the options do not allow training (one line)."""


@dataclass
class TrainOptions:
    config: str = "small"  # HeadModelConfig preset: small | tiny | paper
    variant: str = "dual_cls"
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
    samples_per_state: int = 4  # K of the mixed batches
    background_p: float = 0.5  # probability of the background randomisation
    val_batch_size: int = 128
    val_max_samples: int = 4000  # validation scores all pairs: a fixed seeded subset caps its cost (n^2 / 2 pairs)
    progress: bool = True  # tqdm bars on stderr
    command_line: str | None = None  # recorded in the model card


# --- dataset ------------------------------------------------------------------------------------------


@dataclass
class DatasetInfo:
    root: Path
    identity: list[str]
    state: list[str]
    head_crop: list[str]
    teacher_index: np.ndarray  # int64 (N,), -1 when none
    teacher: np.ndarray  # float32 (n_teacher, D), may be (0, D)
    teacher_meta: dict
    sample_id: list[int]

    @property
    def dim(self) -> int | None:
        return int(self.teacher.shape[1]) if self.teacher.ndim == 2 and self.teacher.shape[1] else self.teacher_meta.get("dim")

    def __len__(self) -> int:
        return len(self.identity)


def load_dataset(root: Path) -> DatasetInfo:
    """Read and check a dataset folder; any problem is a TrainingError naming it."""
    import pyarrow.parquet as pq

    root = Path(root)
    if not root.is_dir():
        raise TrainingError(f"dataset folder not found: {root}")
    manifest = root / "manifest.parquet"
    if not manifest.is_file():
        raise TrainingError(f"no manifest.parquet in {root} (is it a dataset folder made by the dataset builder?)")
    try:
        table = pq.read_table(manifest)
    except Exception as e:  # pyarrow raises several types for damaged files
        raise TrainingError(f"cannot read {manifest}: {e}") from None
    missing = [c for c in MANIFEST_COLUMNS if c not in table.column_names]
    if missing:
        raise TrainingError(f"{manifest} lacks column(s) {', '.join(missing)}")
    cols = {c: table.column(c).to_pylist() for c in MANIFEST_COLUMNS}
    n = table.num_rows
    if n == 0:
        raise TrainingError(f"{manifest} has no samples")
    if any(v is None or v == "" for v in cols["identity"]):
        raise TrainingError(f"{manifest}: some samples have no identity")
    if any(v is None or v == "" for v in cols["head_crop"]):
        raise TrainingError(f"{manifest}: some samples have no head_crop path")
    states = ["" if s is None else str(s) for s in cols["state"]]
    tidx = np.asarray([-1 if t is None else int(t) for t in cols["teacher_index"]], dtype=np.int64)

    meta: dict = {}
    meta_path = root / "teacher.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TrainingError(f"{meta_path} is not valid JSON: {e}") from None
        if not isinstance(meta, dict):
            raise TrainingError(f"{meta_path} is not a JSON object")
    teacher_path = root / "teacher.npy"
    if teacher_path.is_file():
        try:
            teacher = np.load(teacher_path, allow_pickle=False).astype(np.float32, copy=False)
        except (OSError, ValueError) as e:
            raise TrainingError(f"cannot read {teacher_path}: {e}") from None
        if teacher.ndim != 2:
            raise TrainingError(f"{teacher_path} must be a 2-d (n_teacher, dim) array, got shape {teacher.shape}")
        if meta.get("dim") is not None and int(meta["dim"]) != teacher.shape[1]:
            raise TrainingError(f"{meta_path} says dim {meta['dim']} but {teacher_path} has {teacher.shape[1]} columns")
    else:
        if (tidx >= 0).any():
            raise TrainingError(f"{manifest} refers to teacher embeddings but {teacher_path} is missing")
        teacher = np.zeros((0, int(meta.get("dim") or 0)), np.float32)
    if (tidx >= teacher.shape[0]).any():
        raise TrainingError(f"{manifest}: teacher_index up to {int(tidx.max())} but {teacher_path} has {teacher.shape[0]} rows")
    ids = [str(v) for v in cols["identity"]]
    if len(set(ids)) < 2:
        raise TrainingError(f"dataset {root} has {len(set(ids))} identity; training needs at least 2 (R3 negatives)")
    sample_id = [int(v) if v is not None else k for k, v in enumerate(cols["sample_id"])]
    return DatasetInfo(root, ids, states, [str(p) for p in cols["head_crop"]], tidx, teacher, meta, sample_id)


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
    """Samples of a DatasetInfo.  Key: an index (eval preprocessing) or (index, aug_seed) (augmented)."""

    def __init__(self, info: DatasetInfo, indices: np.ndarray, size: int, augment: HeadAugment | None):
        self.info = info
        self.indices = np.asarray(indices, dtype=np.int64)
        self.size = size
        self.augment = augment
        self.identity_codes, _ = encode_labels([info.identity[i] for i in self.indices])
        self.state_codes, _ = encode_labels([(info.identity[i], info.state[i]) for i in self.indices])
        dim = info.teacher.shape[1] if info.teacher.size else 1
        self._zero_teacher = np.zeros(dim, np.float32)

    def __len__(self) -> int:
        return len(self.indices)

    def image(self, local: int) -> np.ndarray:
        return read_image_rgb(self.info.root / self.info.head_crop[int(self.indices[local])])

    def __getitem__(self, key) -> dict[str, Any]:
        if isinstance(key, tuple):
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
        return {
            "x": x,
            "identity": int(self.identity_codes[local]),
            "state": int(self.state_codes[local]),
            "teacher": torch.from_numpy(self.info.teacher[t] if t >= 0 else self._zero_teacher),
            "has_teacher": t >= 0,
        }


def _collate(items: list[dict]) -> dict[str, Tensor]:
    return {
        "x": torch.stack([it["x"] for it in items]),
        "identity": torch.tensor([it["identity"] for it in items], dtype=torch.long),
        "state": torch.tensor([it["state"] for it in items], dtype=torch.long),
        "teacher": torch.stack([it["teacher"] for it in items]),
        "has_teacher": torch.tensor([it["has_teacher"] for it in items], dtype=torch.bool),
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
    """AdamW groups: no decay for model.no_weight_decay() names, norms, biases and other 1-d parameters."""
    skip = set(model.no_weight_decay())
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name in skip or p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_factor(step: int, total: int, warmup: int, min_ratio: float = 0.0) -> float:
    """Linear warm-up over ``warmup`` steps (from 1/warmup), then cosine from 1 to ``min_ratio`` at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def model_config(options: TrainOptions, out_dim: int | None) -> HeadModelConfig:
    if options.config not in CONFIGS:
        raise TrainingError(f"unknown config {options.config!r}; expected one of {', '.join(CONFIGS)}")
    overrides: dict[str, Any] = {"variant": options.variant}
    if out_dim:
        overrides["out_dim"] = int(out_dim)
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


def embedding_metrics(z: np.ndarray, identities: list[str], states: list[str]) -> dict[str, Any]:
    """Head protocol (R1 vs R2+R3) and identity protocol (R1+R2 vs R3): AUC and exact VR@FAR 1e-2 (None when
    not measurable), and hierarchy accuracy, from cosine similarities of the rows of z."""
    z = np.asarray(z, dtype=np.float64)
    z = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    sim = z @ z.T
    i, j, rel = pair_relations(identities, states)
    out: dict[str, Any] = {"n": int(len(identities))}
    for protocol in ("head", "identity"):
        rep = evaluate_protocol(sim, i, j, rel, protocol, fars=(VAL_FAR,))
        out[f"{protocol}_auc"] = rep.auc
        vr = next(iter(rep.vr.values()))
        out[f"{protocol}_vr@1e-2"] = vr.vr if vr.measurable else None
    acc, quads = hierarchy_accuracy(sim, identities, states)
    out["hierarchy"] = acc
    out["hierarchy_quads"] = int(quads)
    return out


@torch.no_grad()
def embed(model: nn.Module, loader, device: torch.device, amp: bool) -> tuple[np.ndarray, np.ndarray]:
    was_training = model.training
    model.eval()
    ids, heads = [], []
    try:
        for batch in loader:
            x = batch["x"].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                z_id, z_head = model(x)
            ids.append(z_id.float().cpu().numpy())
            heads.append(z_head.float().cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(ids), np.concatenate(heads)


def validate(model, loader, device, amp, identities, states) -> dict[str, Any]:
    z_id, z_head = embed(model, loader, device, amp)
    m_id = embedding_metrics(z_id, identities, states)
    m_head = embedding_metrics(z_head, identities, states)
    out = dict(m_id)  # top level: z_id (the best checkpoint is chosen by its head_auc)
    out["hierarchy_head"] = m_head["hierarchy"]
    out["z_head"] = m_head
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


# --- training -----------------------------------------------------------------------------------------


def _progress(iterable, enabled: bool, **kw):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kw)


def _mean_stats(sums: dict[str, float], counts: dict[str, int]) -> dict[str, float | None]:
    keys = ("loss", "sim_id", "sim_head", "align", "align_valid_frac")
    return {k: (sums[k] / counts[k] if counts.get(k) else None) for k in keys}


def train(dataset: Path, out: Path, options: TrainOptions | None = None,
          report: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train (or resume) and return a summary dict: epochs, steps, final and best val metrics, paths,
    ``interrupted`` (True when stopped by Ctrl-C or --max-steps before the last epoch ended)."""
    options = options or TrainOptions()
    say = report or (lambda m: None)
    dataset, out = Path(dataset), Path(out)
    if options.epochs < 1:
        raise TrainingError(f"--epochs must be >= 1, got {options.epochs}")
    if options.batch_size < 2:
        raise TrainingError(f"--batch-size must be >= 2, got {options.batch_size}")
    info = load_dataset(dataset)
    device = resolve_device(options.device)
    amp = device.type == "cuda"
    cfg = model_config(options, info.dim)

    train_idx, val_idx = split_identities(info.identity, options.val_identities, options.seed)
    if len({info.identity[i] for i in train_idx}) < 2:
        raise TrainingError("fewer than 2 training identities after the validation split; lower --val-identities")
    if options.val_max_samples and len(val_idx) > options.val_max_samples:
        keep = np.random.default_rng([options.seed, 0x7A1]).choice(len(val_idx), options.val_max_samples, replace=False)
        val_idx = val_idx[np.sort(keep)]

    state_path = out / "state.pt"
    resume_state = None
    if options.resume:
        if not state_path.is_file():
            raise TrainingError(f"nothing to resume: {state_path} not found")
        try:
            resume_state = torch.load(state_path, map_location="cpu", weights_only=False)
        except Exception as e:
            raise TrainingError(f"cannot read {state_path}: {e}") from None
        if not isinstance(resume_state, dict) or resume_state.get("format") != STATE_FORMAT:
            raise TrainingError(f"{state_path} is not a training state file")
        saved = resume_state["options"]
        for key in ("config", "variant", "seed", "batch_size", "val_identities", "samples_per_state"):
            if saved.get(key) != getattr(options, key):
                raise TrainingError(f"--resume with {key}={getattr(options, key)!r}, but the saved run used {saved.get(key)!r}")
    elif state_path.exists() or (out / "last.safetensors").exists():
        raise TrainingError(f"{out} already holds a training run; pass --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)

    # Seed everything (model init draws from torch's global generator).
    random.seed(options.seed)
    np.random.seed(options.seed % 2**32)
    torch.manual_seed(options.seed)
    model = HeadSimilarityModel(cfg).to(device)
    model.train()

    augment = HeadAugment(size=cfg.img_size, background_p=options.background_p)
    train_set = CropDataset(info, train_idx, cfg.img_size, augment)
    sampler = MixedBatchSampler(train_set.identity_codes, train_set.state_codes, options.batch_size,
                                options.samples_per_state, seed=options.seed, with_seeds=True)
    steps_per_epoch = len(sampler)
    total_steps = steps_per_epoch * options.epochs
    warmup_steps = int(round(options.warmup_epochs * steps_per_epoch))

    optimizer = torch.optim.AdamW(param_groups(model, options.weight_decay), lr=options.lr, betas=(0.9, 0.999))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total_steps, warmup_steps, options.min_lr_ratio))

    loader_kw: dict[str, Any] = {"collate_fn": _collate, "num_workers": max(0, options.workers),
                                 "pin_memory": device.type == "cuda"}
    if options.workers > 0:
        loader_kw["persistent_workers"] = False

    val_loader = None
    val_ids: list[str] = []
    val_states: list[str] = []
    if len(val_idx):
        val_set = CropDataset(info, val_idx, cfg.img_size, None)
        val_ids = [info.identity[i] for i in val_idx]
        val_states = [info.state[i] for i in val_idx]
        batches = [list(range(s, min(s + options.val_batch_size, len(val_set)))) for s in range(0, len(val_set), options.val_batch_size)]
        val_loader = torch.utils.data.DataLoader(val_set, batch_sampler=batches, **loader_kw)

    epoch, step_in_epoch, global_step = 0, 0, 0
    best_auc: float | None = None
    have_best = False
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    images_seen = 0
    teacher_metrics: dict | None = None
    last_val: dict | None = None
    if resume_state is not None:
        model.load_state_dict(resume_state["model"])
        optimizer.load_state_dict(resume_state["optimizer"])
        scheduler.load_state_dict(resume_state["scheduler"])
        epoch = int(resume_state["epoch"])
        step_in_epoch = int(resume_state["step_in_epoch"])
        global_step = int(resume_state["step"])
        best_auc = resume_state.get("best_auc")
        have_best = bool(resume_state.get("have_best"))
        sums = dict(resume_state.get("sums", {}))
        counts = dict(resume_state.get("counts", {}))
        images_seen = int(resume_state.get("images_seen", 0))
        teacher_metrics = resume_state.get("teacher_metrics")
        last_val = resume_state.get("last_val")
        _set_rng_states(resume_state["rng"])
        say(f"resuming {out} at epoch {epoch + 1}, step {global_step}")

    base_card = {
        "name": f"headsim-{options.config}-{options.variant}",
        "config": options.config,
        "variant": options.variant,
        "dataset": str(dataset.resolve()),
        "teacher": _jsonable(info.teacher_meta),
        "command": options.command_line or " ".join(sys.argv),
        "seed": options.seed,
        "train_samples": int(len(train_idx)),
        "val_samples": int(len(val_idx)),
        "train_identities": len({info.identity[i] for i in train_idx}),
        "val_identities": len(set(val_ids)),
    }
    log_path = out / "log.jsonl"

    def log(entry: dict) -> None:
        with log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(_jsonable(entry), sort_keys=True) + "\n")

    if teacher_metrics is None and val_loader is not None:
        has = [k for k, g in enumerate(val_idx) if info.teacher_index[g] >= 0]
        if len(has) >= 2:
            zt = info.teacher[info.teacher_index[val_idx[has]]]
            teacher_metrics = embedding_metrics(zt, [val_ids[k] for k in has], [val_states[k] for k in has])
        else:
            teacher_metrics = {"n": len(has)}
        log({"event": "teacher", "teacher": info.teacher_meta.get("name"), "val": teacher_metrics})

    def save_state(epoch_: int, step_in_epoch_: int) -> None:
        state = {
            "format": STATE_FORMAT,
            "options": asdict(options),
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "epoch": epoch_,
            "step_in_epoch": step_in_epoch_,
            "step": global_step,
            "sampler_epoch": epoch_,
            "best_auc": best_auc,
            "have_best": have_best,
            "sums": sums,
            "counts": counts,
            "images_seen": images_seen,
            "teacher_metrics": teacher_metrics,
            "last_val": last_val,
            "rng": _rng_states(),
        }
        atomic_write(state_path, lambda tmp: torch.save(state, tmp))

    clip = options.grad_clip if options.grad_clip and options.grad_clip > 0 else None
    interrupted = stopped = False
    epochs_done = epoch
    if epoch >= options.epochs:
        say(f"{out} has already trained {epoch} of {options.epochs} epochs; nothing to do")
    epoch_bar = _progress(range(epoch, options.epochs), options.progress, desc="epochs", initial=epoch, total=options.epochs)
    with _Interrupt() as stop:
        for epoch in epoch_bar:
            sampler.set_epoch(epoch)
            if step_in_epoch == 0:
                sums, counts, images_seen = {}, {}, 0
            t0 = time.perf_counter()
            batches = _SkipSampler(sampler, epoch, step_in_epoch)
            loader = torch.utils.data.DataLoader(train_set, batch_sampler=batches, **loader_kw)
            step_bar = _progress(loader, options.progress, desc=f"epoch {epoch + 1}/{options.epochs}",
                                 total=steps_per_epoch, initial=step_in_epoch, leave=False)
            for batch in step_bar:
                x = batch["x"].to(device, non_blocking=True)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                    z_id, z_head = model(x)
                has_teacher = batch["has_teacher"].to(device)
                z_teacher = batch["teacher"].to(device) if info.teacher.size and options.lambda_align else None
                loss, stats = head_similarity_loss(
                    z_id.float(), z_head.float(), batch["identity"].to(device), batch["state"].to(device),
                    z_teacher=z_teacher, face_valid=has_teacher if z_teacher is not None else None,
                    lambda_align=options.lambda_align)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                scheduler.step()
                global_step += 1
                step_in_epoch += 1
                images_seen += int(x.shape[0])
                for k, v in stats.items():
                    if k == "align" and not bool(has_teacher.any()):
                        continue  # a batch without any teacher embedding says nothing about L_align
                    sums[k] = sums.get(k, 0.0) + float(v)
                    counts[k] = counts.get(k, 0) + 1
                if options.progress and hasattr(step_bar, "set_postfix"):
                    step_bar.set_postfix(loss=f"{stats['loss']:.4f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
                if stop.requested or (options.max_steps is not None and global_step >= options.max_steps):
                    break
            if hasattr(step_bar, "close"):
                step_bar.close()
            if step_in_epoch < steps_per_epoch:  # left the epoch early: Ctrl-C or --max-steps
                interrupted, stopped = stop.requested, True
                save_state(epoch, step_in_epoch)
                break
            seconds = time.perf_counter() - t0
            val = validate(model, val_loader, device, amp, val_ids, val_states) if val_loader is not None else None
            last_val = val
            entry = {"event": "epoch", "epoch": epoch + 1, "step": global_step, "lr": scheduler.get_last_lr()[0],
                     **_mean_stats(sums, counts), "images": images_seen, "seconds": seconds,
                     "images_per_s": images_seen / seconds if seconds > 0 else None, "val": val}
            log(entry)
            card = {**base_card, "epoch": epoch + 1, "step": global_step, "val": val, "teacher_val": teacher_metrics}
            save_checkpoint(model, out / "last.safetensors", _jsonable(card))
            auc = val.get("head_auc") if val else None
            if not have_best or (auc is not None and (best_auc is None or auc > best_auc)):
                best_auc = auc if auc is not None else best_auc
                have_best = True
                save_checkpoint(model, out / "best.safetensors", _jsonable(card))
            step_in_epoch = 0
            epochs_done = epoch + 1
            save_state(epoch + 1, 0)
            if options.progress and hasattr(epoch_bar, "set_postfix"):
                epoch_bar.set_postfix(loss=f"{entry['loss']:.4f}", head_auc=f"{auc:.3f}" if auc is not None else "-")
            if stop.requested or (options.max_steps is not None and global_step >= options.max_steps):
                interrupted = stop.requested
                stopped = epoch + 1 < options.epochs
                break
    if hasattr(epoch_bar, "close"):
        epoch_bar.close()
    return _jsonable({
        "out": out,
        "epochs_done": epochs_done,
        "steps": global_step,
        "interrupted": interrupted,
        "stopped_early": stopped,
        "val": last_val,
        "best_head_auc": best_auc,
        "teacher_val": teacher_metrics,
        "last": out / "last.safetensors",
        "best": out / "best.safetensors",
        "state": state_path,
    })
