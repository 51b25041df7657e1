"""Training loop of the head-similarity model (arXiv 2605.07766): dual-CLS ViT distilled from a face teacher.

``train(dataset, out, options)`` reads a dataset folder (`trainer.dataset_format`), splits identities into
train / validation (`trainer.samples`), and trains ``HeadSimilarityModel`` with ``trainer.losses.head_similarity_loss``
on mixed batches (``trainer.sampler.MixedBatchSampler``) of augmented crops (``trainer.augment.HeadAugment``).
Its steps: `trainer.run.setup` (data, model, optimizer, scheduler), `train_epoch` (one pass over the epoch's
batches), `finish_epoch` (validation (`trainer.validation`), log line, checkpoints, state), with
`trainer.run_state.TrainState` as what a resume needs. Its options: `trainer.options.TrainOptions`.

Writes into ``out``: ``log.jsonl`` (one line per epoch, plus a first ``teacher`` line), ``last.safetensors``
(every epoch), ``best.safetensors`` (best validation head-protocol AUC of z_id), ``state.pt`` (everything
needed to resume exactly: weights, optimizer, scheduler, epoch, step, RNG states, running epoch sums).
"""
from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from headsearch.models.dual_cls import save_checkpoint
from trainer.losses import head_similarity_loss
from trainer.options import TrainOptions
from trainer.run import Run, jsonable, progress_bar, setup
from trainer.run_state import BEST, LAST, STATE, TrainState
from trainer.samples import SkipSampler, face_inputs
from trainer.validation import teacher_validation, validate


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
    batches = SkipSampler(run.sampler, epoch, state.step_in_epoch)
    loader = torch.utils.data.DataLoader(run.train_set, batch_sampler=batches, **run.loader_kw)
    step_bar = progress_bar(loader, options.progress, desc=f"epoch {epoch + 1}/{options.epochs}",
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
    save_checkpoint(run.model, run.out / LAST, jsonable(card))
    auc = val.get("head_auc") if val else None
    if not state.have_best or (auc is not None and (state.best_auc is None or auc > state.best_auc)):
        state.best_auc = auc if auc is not None else state.best_auc
        state.have_best = True
        save_checkpoint(run.model, run.out / BEST, jsonable(card))
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
    epoch_bar = progress_bar(range(state.epoch, options.epochs), options.progress, desc="epochs", initial=state.epoch,
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
    return jsonable({
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
