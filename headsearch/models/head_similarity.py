"""The dual-CLS head-similarity ViT from our checkpoints (`.safetensors` + `.safetensors.json`)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.detection.crops import HeadCrop
from headsearch.models.base import Embedder, ModelSpec, file_digest, l2_normalise
from headsearch.models.registry import register_path_loader
from schemas.records import VectorKind


class HeadSimilarityEmbedder(Embedder):
    """The whole head crop, resized to the model's input size, gives z_id (identity) and z_head
    (whole-head appearance). Runs on CUDA when torch sees a GPU, else on the CPU."""

    def __init__(self, family: ModelSpec, path: Path, batch_size: int = 64):
        """Its spec is `family`'s with the checkpoint's name, kinds (a `shared` variant gives identity vectors only) and
        widths (z_id's; z_head's, a head-aligned student's: its teacher's head vector width)."""
        from headsearch.basics.extras import require_train

        require_train("a head-similarity checkpoint", ("torch", "safetensors"))
        import torch

        from headsearch.models.dual_cls import load_checkpoint, read_checkpoint_card

        self.path = Path(path)
        self.model = load_checkpoint(self.path)  # raises ModelError with one line
        self.card = read_checkpoint_card(self.path)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device).eval()
        cfg = self.model.cfg
        kinds = (VectorKind.ID, VectorKind.HEAD) if cfg.variant != "shared" else (VectorKind.ID,)
        super().__init__(replace(family, name=self.card.get("card", {}).get("name") or f"headsim:{self.path.stem}", kinds=kinds,
                                 dims=(cfg.out_dim, cfg.z_head_dim)[:len(kinds)]))
        self.size = cfg.img_size
        self.batch_size = batch_size
        self.version = file_digest(self.path)
        self.source = str(self.path.resolve())
        self._face_model = None
        self._teacher = None
        if cfg.face_dim or cfg.head_skip:
            self._load_teacher(cfg.head_skip)

    def _load_teacher(self, head: bool) -> None:
        """The teacher the checkpoint was trained with, run here for its inputs: the face token takes the teacher's
        vector of each aligned face (SFace's, for the sface and sface+lite0 teachers); the head skip path its head vector."""
        info = self.card.get("card", {}).get("teacher") or {}
        teacher = info.get("name")
        if head:
            if teacher != "sface+lite0":
                raise ModelError(f"{self.path}: its head skip path needs the teacher it was trained with (sface+lite0), the card "
                                 f"names {teacher!r}")
            from headsearch.models.whole_head import WholeHeadEmbedder

            self._teacher = WholeHeadEmbedder()
            if info.get("version") and info["version"] != self._teacher.version:
                raise ModelError(f"{self.path}: trained with teacher {teacher} {info['version']}, but this install has "
                                 f"{self._teacher.version}: its head vectors are not the ones it learned from")
            self._face_model = self._teacher
            return
        if teacher not in ("sface", "sface+lite0"):  # both give SFace's vector of the aligned face
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
                    teacher = self._face_model.embed(part)
                    face = {"face": torch.from_numpy(teacher[VectorKind.ID]).to(self.device), "face_mask": mask}
                    if self._teacher is not None:  # the head skip path: every crop has a teacher head vector
                        face["head"] = torch.from_numpy(teacher[VectorKind.HEAD]).to(self.device)
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
def head_similarity_checkpoint(family: ModelSpec, path: Path) -> Embedder:
    if not path.is_file():
        raise ModelError(f"missing model file: {path}")
    return HeadSimilarityEmbedder(family, path)
