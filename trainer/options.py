"""What `headsearch train` is asked to do, without torch (the command line offers these names on a lean install):
`TrainOptions`, the names of its choices, the model it asks for (`model_config`), the options a resumed run must
share with the saved one (`RESUME_KEYS`) and the arguments that resume a run (`resume_args`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headsearch.basics.errors import HeadsearchError
from headsearch.models.head_config import CONFIGS, HeadModelConfig

FREEZE = ("none", "early", "all")  # --freeze-stem: the pretrained stem layers kept fixed
DEVICES = ("auto", "cpu", "cuda")
# Options a resumed run must share with the saved one (they decide the batches and the split).
RESUME_KEYS = ("config", "variant", "seed", "batch_size", "val_identities", "samples_per_state", "stem", "freeze_stem", "stem_views",
               "face_token", "head_skip")
# The other options of `headsearch train` that a resumed run takes again to go on as it started: the schedule, the losses,
# where it runs. --max-steps is not one: a resumed run goes on to the end.
RESUMED_TOO = ("epochs", "lr", "weight_decay", "warmup_epochs", "grad_clip", "lambda_align", "lambda_align_head", "face_token_drop",
               "device", "workers")


class TrainingError(HeadsearchError):
    """The dataset or the options do not allow training (one line)."""


@dataclass
class TrainOptions:
    config: str = "small"  # HeadModelConfig preset (headsearch.models.head_config.CONFIGS)
    variant: str = "dual_cls"  # architecture ablation (headsearch.models.head_config.VARIANTS)
    stem: str | None = None  # hybrid CNN stem (headsearch.models.head_config.CNN_STEMS); None: the preset's (sface for hybrid)
    freeze_stem: str = "all"  # pretrained stem layers kept fixed (FREEZE): none | early | all
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
    device: str = "auto"  # DEVICES: auto | cpu | cuda
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


def check_options(options: TrainOptions) -> None:
    """TrainingError (one line) for counts the run cannot have."""
    if options.epochs < 1:
        raise TrainingError(f"--epochs must be >= 1, got {options.epochs}")
    if options.batch_size < 2:
        raise TrainingError(f"--batch-size must be >= 2, got {options.batch_size}")


def model_config(options: TrainOptions, out_dim: int | None, head_dim: int = 0) -> HeadModelConfig:
    """The model these options ask for on a dataset whose teacher vectors are `out_dim` wide (its head vectors
    `head_dim`; 0: none); TrainingError (one line) when they do not fit."""
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


def flag(name: str) -> str:
    """The command-line flag of a TrainOptions field."""
    return "--" + name.replace("_", "-")


def resume_args(dataset: Path, out: Path, options: TrainOptions) -> list[str]:
    """The arguments of `headsearch train` that resume this run: DATASET, --out, the options of RESUME_KEYS and
    RESUMED_TOO as `options` has them (a flag for True, nothing for False or None: the default), and --resume."""
    args = [str(dataset), "--out", str(out)]
    for name in RESUME_KEYS + RESUMED_TOO:
        value = getattr(options, name)
        if isinstance(value, bool):
            args += [flag(name)] if value else []
        elif value is not None:
            args += [flag(name), str(value)]
    return [*args, "--resume"]
