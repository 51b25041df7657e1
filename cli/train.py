"""`headsearch train`: train the dual-CLS head-similarity model on a dataset folder. Thin: parses options."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from cli.options import EXIT_INTERRUPTED, FiniteFloat, show_progress
from trainer.dataset_format import MANIFEST, TEACHER_VECTORS


@click.command(help=f"""Train the head-similarity model on DATASET (a folder with {MANIFEST}, {TEACHER_VECTORS}, head crops).

    Each epoch appends a line to OUT/log.jsonl and writes OUT/last.safetensors; OUT/best.safetensors
    keeps the best validation head-protocol AUC. Ctrl-C saves the state; --resume continues exactly.
    """)
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run folder: checkpoints, log.jsonl, state.pt.")
@click.option("--config", type=click.Choice(["small", "tiny", "paper", "hybrid"]), default="small", show_default=True,
              help="Model size preset (hybrid: a pretrained CNN stem, 14x14 tokens, 4 blocks).")
@click.option("--stem", type=click.Choice(["sface", "efficientnet_lite0"]), default=None,
              help="CNN stem of --config hybrid (default sface: the teacher's face trunk; efficientnet_lite0: ImageNet).")
@click.option("--freeze-stem", type=click.Choice(["all", "early", "none"]), default="all", show_default=True,
              help="Pretrained stem layers kept fixed during training.")
@click.option("--face-token", is_flag=True,
              help="Feed the teacher's vector of the aligned face as one more input token (the embedder computes it at run time).")
@click.option("--face-token-drop", type=FiniteFloat(min=0, max=1), default=0.3, show_default=True,
              help="Share of training samples whose face token is hidden, so identity is learned from the head too.")
@click.option("--head-skip", is_flag=True,
              help="z_head = the teacher's head vector of the crop plus a learned part (needs a dataset built with a whole-head "
                   "teacher such as sface+lite0; the embedder runs that teacher at run time).")
@click.option("--stem-views", type=click.IntRange(min=0), default=4, show_default=True,
              help="With --freeze-stem all: stem features computed once for this many views per sample (0: every step).")
@click.option("--variant", type=click.Choice(["dual_cls", "shared", "dual_head_split", "dual_head_both"]), default="dual_cls",
              show_default=True, help="Architecture ablation.")
@click.option("--epochs", type=click.IntRange(min=1), default=30, show_default=True, help="Passes over the training crops.")
@click.option("--batch-size", type=click.IntRange(min=2), default=256, show_default=True, help="Head crops per optimisation step.")
@click.option("--lr", type=FiniteFloat(min=0, min_open=True), default=1e-4, show_default=True, help="Peak learning rate (AdamW).")
@click.option("--weight-decay", type=FiniteFloat(min=0), default=5e-2, show_default=True, help="AdamW's decoupled weight decay.")
@click.option("--warmup-epochs", type=FiniteFloat(min=0), default=1.0, show_default=True, help="Linear warm-up, then cosine decay.")
@click.option("--grad-clip", type=FiniteFloat(min=0), default=5.0, show_default=True, help="Max gradient norm (0: off).")
@click.option("--lambda-align", type=FiniteFloat(min=0), default=1.0, show_default=True, help="Weight of the teacher alignment loss.")
@click.option("--lambda-align-head", type=FiniteFloat(min=0), default=0.0, show_default=True,
              help="Weight of aligning z_head with the teacher's head vectors, every sample, faces or not (needs a dataset "
                   "built with a whole-head teacher; z_head then takes their width).")
@click.option("--samples-per-state", type=click.IntRange(min=2), default=4, show_default=True,
              help="K: samples of each of two states per identity in a batch.")
@click.option("--val-identities", type=FiniteFloat(min=0, max=1, max_open=True), default=0.2, show_default=True,
              help="Fraction of identities held out for validation.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the initialisation, the split and the batches.")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its state.pt.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="auto: CUDA when torch sees a GPU, else the CPU.")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True, help="Decoding worker processes.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Stop (resumably) after this many steps.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def train(dataset: Path, out: Path, config: str, stem: str | None, freeze_stem: str, face_token: bool, face_token_drop: float,
          head_skip: bool, stem_views: int, variant: str, epochs: int, batch_size: int, lr: float, weight_decay: float,
          warmup_epochs: float, grad_clip: float, lambda_align: float, lambda_align_head: float, samples_per_state: int,
          val_identities: float,
          seed: int, resume: bool, device: str, workers: int, max_steps: int | None, quiet: bool) -> None:
    from headsearch.basics.extras import require_train

    require_train("headsearch train")
    from trainer.options import TrainOptions
    from trainer.train import train as run_training

    options = TrainOptions(
        config=config, stem=stem, freeze_stem=freeze_stem, stem_views=stem_views, face_token=face_token,
        face_token_drop=face_token_drop, head_skip=head_skip, variant=variant, epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=weight_decay,
        warmup_epochs=warmup_epochs, grad_clip=grad_clip, lambda_align=lambda_align, lambda_align_head=lambda_align_head, samples_per_state=samples_per_state,
        val_identities=val_identities, seed=seed, resume=resume, device=device, workers=workers, max_steps=max_steps,
        progress=show_progress(quiet=quiet), command_line=shlex.join(["headsearch", *sys.argv[1:]]) if sys.argv else None,
    )
    result = run_training(dataset, out, options, report=lambda m: click.echo(m, err=True))
    resume_cmd = shlex.join(["headsearch", "train", str(dataset), "--out", str(out), "--config", config,
                             *(["--stem", stem] if stem else []), "--freeze-stem", freeze_stem, "--stem-views", str(stem_views),
                             *(["--face-token", "--face-token-drop", str(face_token_drop)] if face_token else []),
                             *(["--head-skip"] if head_skip else []),
                             "--lambda-align", str(lambda_align), "--lambda-align-head", str(lambda_align_head),
                             "--variant", variant,
                             "--epochs", str(epochs), "--batch-size", str(batch_size), "--seed", str(seed),
                             "--val-identities", str(val_identities), "--samples-per-state", str(samples_per_state), "--resume"])
    if result["interrupted"]:
        click.echo(f"interrupted after step {result['steps']}: state saved to {result['state']}; resume with: {resume_cmd}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    val = result.get("val") or {}
    auc = val.get("head_auc")
    summary = f"trained {result['epochs_done']}/{epochs} epochs, {result['steps']} steps"
    if auc is not None:
        summary += f"; val head AUC {auc:.4f}, identity AUC {val.get('identity_auc') or float('nan'):.4f}"
    summary += f"; last {result['last']}, best {result['best']}"
    if result["stopped_early"]:
        summary += f"; stopped at --max-steps, continue with: {resume_cmd}"
    click.echo(summary)
