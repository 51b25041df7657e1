"""The bundled default model: a dual-CLS hybrid head-similarity model trained with `headsearch train`, shipped
inside the package (`headsearch/models/`, with its model card MODEL_CARD.md and thresholds calibrated on held-out
identities). `--model default` (or no --model) names it in every command."""
from __future__ import annotations

from pathlib import Path

from headsearch.embedders.base import Embedder
from headsearch.embedders.registry import DEFAULT_MODEL, register_model
from headsearch.errors import ModelError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
BUNDLED_FILE = MODELS_DIR / f"{DEFAULT_MODEL}.safetensors"


@register_model(DEFAULT_MODEL)
def bundled() -> Embedder:
    from headsearch.embedders.head_similarity import HeadSimilarityEmbedder

    if not BUNDLED_FILE.is_file():
        raise ModelError(f"missing model file: {BUNDLED_FILE} (the bundled model; reinstall headsearch)")
    return HeadSimilarityEmbedder(BUNDLED_FILE, name=DEFAULT_MODEL, source=DEFAULT_MODEL)
