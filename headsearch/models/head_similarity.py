"""The dual-CLS head-similarity ViT from our checkpoints (`.safetensors` + `.safetensors.json`)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.detection.crops import HeadCrop
from headsearch.models.base import Embedder, file_digest, l2_normalise
from headsearch.models.registry import ModelSpec, register_path_loader
from schemas.records import VectorKind


class HeadSimilarityEmbedder(Embedder):
    """The whole head crop, resized to the model's input size, gives z_id (identity) and z_head
    (whole-head appearance). Runs on CUDA when torch sees a GPU, else on the CPU."""

    kinds = (VectorKind.ID, VectorKind.HEAD)
    sees_whole_head = True  # trained on whole-head crops, faces visible or not

    def __init__(self, path: Path, batch_size: int = 64, name: str | None = None, source: str | None = None):
        from headsearch.basics.extras import require_train

        require_train("a head-similarity checkpoint", ("torch", "safetensors"))
        import torch

        from headsearch.models.dual_cls import load_checkpoint, read_checkpoint_card

        self.path = Path(path)
        self.model = load_checkpoint(self.path)  # raises ModelError with one line
        self.card = read_checkpoint_card(self.path)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device).eval()
        self.size = self.model.cfg.img_size
        self.dim = self.model.cfg.out_dim
        self.batch_size = batch_size
        self.name = name or self.card.get("card", {}).get("name") or f"headsim:{self.path.stem}"
        self.version = file_digest(self.path)
        self.source = source or str(self.path.resolve())
        self.kinds = (VectorKind.ID, VectorKind.HEAD) if self.model.cfg.variant != "shared" else (VectorKind.ID,)
        self._face_model = None
        if self.model.cfg.face_dim:  # the face token: the teacher's vector of each aligned face, computed here
            teacher = (self.card.get("card", {}).get("teacher") or {}).get("name")
            if teacher != "sface":
                raise ModelError(f"{self.path}: its face token needs the teacher it was trained with (sface), the card names {teacher!r}")
            from headsearch.models.sface import SFaceEmbedder

            self._face_model = SFaceEmbedder()

    def preprocess(self, crops: Sequence[HeadCrop]) -> np.ndarray:
        """Head crops as an (N, 3, S, S) float32 batch in [-1, 1], exactly as in training's validation."""
        from headsearch.models.dual_cls import image_to_input

        return np.stack([image_to_input(c.image, self.size) for c in crops])

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        import torch

        if not crops:
            return self.empty()
        ids, heads = [], []
        with torch.inference_mode():
            for start in range(0, len(crops), self.batch_size):
                part = crops[start : start + self.batch_size]
                x = torch.from_numpy(self.preprocess(part)).to(self.device)
                face = {}
                if self._face_model is not None:
                    mask = torch.tensor([c.landmarks is not None for c in part], device=self.device)
                    vectors = self._face_model.embed(part)[VectorKind.ID]
                    face = {"face": torch.from_numpy(vectors).to(self.device), "face_mask": mask}
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
                    z_id, z_head = self.model(x, **face)
                ids.append(z_id.float().cpu().numpy())
                heads.append(z_head.float().cpu().numpy())
        out = {VectorKind.ID: l2_normalise(np.concatenate(ids))}
        if VectorKind.HEAD in self.kinds:
            out[VectorKind.HEAD] = l2_normalise(np.concatenate(heads))
        return out


@register_path_loader(ModelSpec(
    name="headsim", summary="a head-similarity .safetensors checkpoint (headsearch train)", kinds=(VectorKind.ID, VectorKind.HEAD),
    sees_whole_head=True, input="the whole head crop at the checkpoint's size, pixels in [-1, 1]", licence="the user's checkpoint",
    extra="train"), lambda p: p.suffix == ".safetensors")
def head_similarity_checkpoint(path: Path) -> Embedder:
    if not path.is_file():
        raise ModelError(f"missing model file: {path}")
    return HeadSimilarityEmbedder(path)
