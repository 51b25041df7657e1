"""`headsearch train`: train the dual-CLS head-similarity model on a dataset folder. Thin: parses options.

The choices and defaults are those of `trainer.options.TrainOptions` and `headsearch.models.head_config`, neither of
which imports torch: the help shows on a lean install, and training says how to get the `train` extra."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from cli.options import EXIT_INTERRUPTED, FiniteFloat, command_name, show_progress
from headsearch.models.head_config import CNN_STEMS, CONFIGS, DEFAULT_CNN_STEM, VARIANTS
from trainer.dataset_format import MANIFEST, TEACHER_VECTORS
from trainer.options import DEVICES, FREEZE, TrainOptions, resume_args

DEFAULT = TrainOptions()


@click.command(help=f"""Train the head-similarity model on DATASET (a folder with {MANIFEST}, {TEACHER_VECTORS}, head crops).

    Each epoch appends a line to OUT/log.jsonl and writes OUT/last.safetensors; OUT/best.safetensors
    keeps the best validation head-protocol AUC. Ctrl-C saves the state; --resume continues exactly.
    """)
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run folder: checkpoints, log.jsonl, state.pt.")
@click.option("--config", type=click.Choice(CONFIGS), default=DEFAULT.config, show_default=True,
              help="Model size preset (hybrid: a pretrained CNN stem, 14x14 tokens, 4 blocks).")
@click.option("--stem", type=click.Choice(CNN_STEMS), default=DEFAULT.stem,
              help=f"CNN stem of --config hybrid (default {DEFAULT_CNN_STEM}: the teacher's face trunk; efficientnet_lite0: ImageNet).")
@click.option("--freeze-stem", type=click.Choice(FREEZE), default=DEFAULT.freeze_stem, show_default=True,
              help="Pretrained stem layers kept fixed during training.")
@click.option("--face-token", is_flag=True,
              help="Feed the teacher's vector of the aligned face as one more input token (the embedder computes it at run time).")
@click.option("--face-token-drop", type=FiniteFloat(min=0, max=1), default=DEFAULT.face_token_drop, show_default=True,
              help="Share of training samples whose face token is hidden, so identity is learned from the head too.")
@click.option("--head-skip", is_flag=True,
              help="z_head = the teacher's head vector of the crop plus a learned part (needs a dataset built with a whole-head "
                   "teacher such as sface+lite0; the embedder runs that teacher at run time).")
@click.option("--stem-views", type=click.IntRange(min=0), default=DEFAULT.stem_views, show_default=True,
              help="With --freeze-stem all: stem features computed once for this many views per sample (0: every step).")
@click.option("--variant", type=click.Choice(VARIANTS), default=DEFAULT.variant, show_default=True, help="Architecture ablation.")
@click.option("--epochs", type=click.IntRange(min=1), default=DEFAULT.epochs, show_default=True, help="Passes over the training crops.")
@click.option("--batch-size", type=click.IntRange(min=2), default=DEFAULT.batch_size, show_default=True,
              help="Head crops per optimisation step.")
@click.option("--lr", type=FiniteFloat(min=0, min_open=True), default=DEFAULT.lr, show_default=True, help="Peak learning rate (AdamW).")
@click.option("--weight-decay", type=FiniteFloat(min=0), default=DEFAULT.weight_decay, show_default=True,
              help="AdamW's decoupled weight decay.")
@click.option("--warmup-epochs", type=FiniteFloat(min=0), default=DEFAULT.warmup_epochs, show_default=True,
              help="Linear warm-up, then cosine decay.")
@click.option("--grad-clip", type=FiniteFloat(min=0), default=DEFAULT.grad_clip, show_default=True, help="Max gradient norm (0: off).")
@click.option("--lambda-align", type=FiniteFloat(min=0), default=DEFAULT.lambda_align, show_default=True,
              help="Weight of the teacher alignment loss.")
@click.option("--lambda-align-head", type=FiniteFloat(min=0), default=DEFAULT.lambda_align_head, show_default=True,
              help="Weight of aligning z_head with the teacher's head vectors, every sample, faces or not (needs a dataset "
                   "built with a whole-head teacher; z_head then takes their width).")
@click.option("--samples-per-state", type=click.IntRange(min=2), default=DEFAULT.samples_per_state, show_default=True,
              help="K: samples of each of two states per identity in a batch.")
@click.option("--val-identities", type=FiniteFloat(min=0, max=1, max_open=True), default=DEFAULT.val_identities, show_default=True,
              help="Fraction of identities held out for validation.")
@click.option("--seed", type=int, default=DEFAULT.seed, show_default=True, help="Seed of the initialisation, the split and the batches.")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its state.pt.")
@click.option("--device", type=click.Choice(DEVICES), default=DEFAULT.device, show_default=True,
              help="auto: CUDA when torch sees a GPU, else the CPU.")
@click.option("--workers", type=click.IntRange(min=0), default=DEFAULT.workers, show_default=True, help="Decoding worker processes.")
@click.option("--max-steps", type=click.IntRange(min=1), default=DEFAULT.max_steps, help="Stop (resumably) after this many steps.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def train(dataset: Path, out: Path, quiet: bool, **chosen) -> None:
    from headsearch.basics.extras import require_train

    require_train("headsearch train")
    from trainer.train import train as run_training

    options = TrainOptions(**chosen, progress=show_progress(quiet=quiet),
                           command_line=shlex.join(["headsearch", *sys.argv[1:]]) if sys.argv else None)
    result = run_training(dataset, out, options, report=lambda m: click.echo(m, err=True))
    resume_cmd = f"{command_name()} train {shlex.join(resume_args(dataset, out, options))}"
    if result["interrupted"]:
        click.echo(f"interrupted after step {result['steps']}: state saved to {result['state']}; resume with: {resume_cmd}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    val = result.get("val") or {}
    auc = val.get("head_auc")
    summary = f"trained {result['epochs_done']}/{options.epochs} epochs, {result['steps']} steps"
    if auc is not None:
        summary += f"; val head AUC {auc:.4f}, identity AUC {val.get('identity_auc') or float('nan'):.4f}"
    summary += f"; last {result['last']}, best {result['best']}"
    if result["stopped_early"]:
        summary += f"; stopped at --max-steps, continue with: {resume_cmd}"
    click.echo(summary)
