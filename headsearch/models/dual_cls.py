"""Dual-CLS head-similarity Vision Transformer (arXiv 2605.07766, "Head Similarity").

The backbone is AdaFace's ViT (CVLface ``vit`` "base": 112x112 input, patch 8, width 512, depth 24,
16 heads, MLP ratio 3, ReLU6 MLP, qkv without bias, LayerNorm eps 1e-5, pixels in [-1, 1]) built on
timm's ``VisionTransformer``.  Two learnable prefix tokens, [CLS_id, CLS_head], are concatenated
*after* the positional embedding is added to the patches (timm ``class_token=True, reg_tokens=1,
no_embed_class=True``), so the output tokens are ``[cls, reg, patches...]``; after the final norm,
token 0 feeds ``g_id`` and token 1 feeds ``g_head``.

Because the model subclasses timm's ``VisionTransformer``, its state-dict keys are timm's own
(``patch_embed.proj``, ``pos_embed``, ``blocks.N.*``, ``norm``, ``cls_token``, ``reg_token``) plus
``g_id.*`` / ``g_head.*``.  Its configuration (`HeadModelConfig`, presets, variants) is in
`headsearch.models.head_config`, without torch.  This module must never import ``trainer``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from functools import partial
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn

from headsearch.basics.errors import ModelError
from headsearch.basics.files import atomic_write
from headsearch.models.head_config import HeadModelConfig

CHECKPOINT_FORMAT = "headsearch-head-similarity/1"


def pixels_to_input(rgb: np.ndarray) -> np.ndarray:
    """(H, W, 3) RGB in [0, 255] -> (3, H, W) float32 in [-1, 1]: the model's input scaling."""
    x = (np.asarray(rgb, dtype=np.float32) - 127.5) / 127.5
    return np.ascontiguousarray(np.clip(x, -1.0, 1.0).transpose(2, 0, 1))


def image_to_input(rgb: np.ndarray, size: int) -> np.ndarray:
    """A head crop as the model sees it at inference and validation: resized to size x size
    (INTER_AREA), then scaled by `pixels_to_input`."""
    if rgb.shape[0] != size or rgb.shape[1] != size:
        rgb = cv2.resize(rgb, (size, size), interpolation=cv2.INTER_AREA)
    return pixels_to_input(rgb)


def _projection(in_dim: int, hidden: int, out_dim: int, relu: bool) -> nn.Sequential:
    # Linear layers feeding a BatchNorm carry no bias (the BN shift makes it redundant), as in AdaFace's head.
    layers: list[nn.Module] = [nn.Linear(in_dim, hidden, bias=False), nn.BatchNorm1d(hidden)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    layers += [nn.Linear(hidden, out_dim, bias=False), nn.BatchNorm1d(out_dim)]
    return nn.Sequential(*layers)


class HeadSimilarityModel(VisionTransformer):
    """timm ViT backbone + g_id (Linear-BN-Linear-BN) and g_head (Linear-BN-ReLU-Linear-BN).

    ``forward`` takes (N, 3, H, W) pixels in [-1, 1] and returns ``(z_id, z_head)``, both L2-normalised.
    The projection hidden width is ``embed_dim``.
    """

    def __init__(self, cfg: HeadModelConfig):
        embed: dict[str, Any] = {}
        if cfg.stem != "patch":
            from timm.layers import HybridEmbed

            from headsearch.models.stems import make_stem

            backbone = make_stem(cfg.stem)
            # One token per stem output position (14x14); timm's hybrid embedding projects them to the width.
            embed["embed_layer"] = lambda **kw: HybridEmbed(backbone=backbone, **{**kw, "patch_size": 1})
        super().__init__(
            img_size=cfg.img_size,
            patch_size=cfg.patch_size,
            in_chans=3,
            num_classes=0,
            global_pool="",
            embed_dim=cfg.embed_dim,
            depth=cfg.depth,
            num_heads=cfg.num_heads,
            mlp_ratio=cfg.mlp_ratio,
            qkv_bias=False,
            class_token=True,
            reg_tokens=1 if cfg.variant == "dual_cls" else 0,
            no_embed_class=True,
            norm_layer=partial(nn.LayerNorm, eps=1e-5),
            act_layer=nn.ReLU6,
            **embed,
        )
        self.cfg = cfg
        d = cfg.embed_dim
        # timm initialises prefix tokens at std 1e-6; two near-identical prefix tokens would start out as the
        # same query, so give them distinct (ViT-standard) std 0.02 values.
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        if self.reg_token is not None:
            nn.init.trunc_normal_(self.reg_token, std=0.02)
        if cfg.face_dim:
            # The face token: the teacher's vector of the aligned face, projected to the width, plus a learned type
            # embedding; a learned "no face" token where no face was seen (a back of a head, a profile).
            self.face_embed = nn.Linear(cfg.face_dim, d)
            self.face_type = nn.Parameter(torch.zeros(1, 1, d))
            self.face_missing = nn.Parameter(torch.zeros(1, 1, d))
            nn.init.trunc_normal_(self.face_type, std=0.02)
            nn.init.trunc_normal_(self.face_missing, std=0.02)
            # ...and a skip path: where a face was seen, z = normalize(face + beta * g(f)), the learned part starting
            # small, so the student starts as its teacher and learns what the whole head adds (cfg.face_dim == out_dim).
            self.face_beta = nn.Parameter(torch.tensor([0.1, 0.5]))  # (z_id, z_head)
        if cfg.head_skip:
            # The head skip path: z_head = normalize(t + beta * g_head(f)) with t the whole-head teacher's head vector of the
            # same crop (every crop has one), the learned part starting small: the student starts as the teacher's head vector.
            self.head_beta = nn.Parameter(torch.tensor(0.1))
        in_dim = d // 2 if cfg.variant == "dual_head_split" else d
        self.g_id = _projection(in_dim, d, cfg.out_dim, relu=False)
        self.g_head = None if cfg.variant == "shared" else _projection(in_dim, d, cfg.z_head_dim, relu=True)

    @property
    def stem(self) -> nn.Module | None:
        """The pretrained CNN stem of a hybrid model (None for the pure ViT)."""
        return self.patch_embed.backbone if self.cfg.stem != "patch" else None

    def train(self, mode: bool = True) -> HeadSimilarityModel:
        super().train(mode)
        if self.stem is not None:  # a pretrained stem keeps its BatchNorm statistics
            from headsearch.models.stems import freeze_batchnorm

            freeze_batchnorm(self.stem)
        return self

    def stem_features(self, x: Tensor) -> Tensor:
        """The stem's feature map (N, C, 14, 14) of a hybrid model."""
        return self.stem(x)

    def forward_tokens(self, tokens: Tensor, face: Tensor | None = None, face_mask: Tensor | None = None) -> Tensor:
        """Patch tokens (N, 196, D) -> all tokens after the blocks and the final norm, as timm's forward_features;
        with a face token (cfg.face_dim) after the two prefix tokens."""
        x = self._pos_embed(tokens)
        if self.cfg.face_dim:
            n = x.shape[0]
            missing = self.face_missing.expand(n, 1, -1)
            if face is None:
                token = missing
            else:
                token = self.face_embed(face.to(x.dtype))[:, None] + self.face_type
                if face_mask is not None:
                    token = torch.where(face_mask.reshape(n, 1, 1).to(torch.bool), token, missing)
            p = self.num_prefix_tokens
            x = torch.cat([x[:, :p], token, x[:, p:]], dim=1)
        x = self.patch_drop(x)
        x = self.norm_pre(x)
        x = self.blocks(x)
        return self.norm(x)

    def prefix_features(self, x: Tensor, from_stem: bool = False, face: Tensor | None = None,
                        face_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The normed prefix-token features (f_id, f_head) that feed g_id and g_head (`from_stem`: x is the
        stem's feature map, e.g. cached while the stem is frozen; `face`, `face_mask`: the face token's input)."""
        if from_stem:
            tokens = self.forward_tokens(self.patch_embed.proj(x).flatten(2).transpose(1, 2), face, face_mask)
        elif self.cfg.face_dim:
            tokens = self.forward_tokens(self.patch_embed(x), face, face_mask)
        else:
            tokens = self.forward_features(x)  # (N, prefix + patches, D) after the final norm
        variant = self.cfg.variant
        if variant == "dual_cls":
            return tokens[:, 0], tokens[:, 1]
        cls = tokens[:, 0]
        if variant == "dual_head_split":
            half = cls.shape[-1] // 2
            return cls[:, :half], cls[:, half:]
        return cls, cls

    def forward(self, x: Tensor, from_stem: bool = False, face: Tensor | None = None,  # type: ignore[override]
                face_mask: Tensor | None = None, head: Tensor | None = None, head_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """`head`, `head_mask` (head_skip models): the whole-head teacher's head vectors (N, head_dim) and where they exist;
        without them (or where the mask is False) z_head is the learned part alone."""
        f_id, f_head = self.prefix_features(x, from_stem, face, face_mask)
        z_id = F.normalize(self.g_id(f_id), dim=-1)
        z_head = z_id if self.g_head is None else F.normalize(self.g_head(f_head), dim=-1)
        if self.cfg.face_dim and face is not None and self.cfg.face_dim == z_id.shape[-1]:
            f = F.normalize(face.to(z_id.dtype), dim=-1)
            m = torch.ones(len(f), 1, dtype=torch.bool, device=f.device) if face_mask is None else face_mask.reshape(-1, 1).to(torch.bool)
            z_id = torch.where(m, F.normalize(f + self.face_beta[0] * z_id, dim=-1), z_id)
            if not self.cfg.head_skip and z_head.shape[-1] == f.shape[-1]:
                z_head = torch.where(m, F.normalize(f + self.face_beta[1] * z_head, dim=-1), z_head)
        if self.cfg.head_skip and head is not None:
            t = F.normalize(head.to(z_head.dtype), dim=-1)
            m = torch.ones(len(t), 1, dtype=torch.bool, device=t.device) if head_mask is None else head_mask.reshape(-1, 1).to(torch.bool)
            z_head = torch.where(m, F.normalize(t + self.head_beta * z_head, dim=-1), z_head)
        return z_id, z_head

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        names = {n for n, _ in self.named_parameters()}
        return {n for n in ("pos_embed", "cls_token", "reg_token", "face_type", "face_missing", "face_beta", "head_beta") if n in names}

    # --- key bookkeeping for the loaders -------------------------------------------------------------
    def new_keys(self) -> set[str]:
        """State-dict keys a face-recognition ViT checkpoint does not have: prefix tokens and projection heads."""
        return {k for k in self.state_dict()
                if k in ("cls_token", "reg_token", "face_type", "face_missing", "face_beta", "head_beta")
                or k.startswith(("g_id.", "g_head.", "face_embed."))}

    def backbone_keys(self) -> set[str]:
        return set(self.state_dict()) - self.new_keys()


# --- checkpoints -------------------------------------------------------------------------------------


def _side_file(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def save_checkpoint(model: HeadSimilarityModel, path: Path, card: dict) -> None:
    """Write the weights as safetensors at ``path`` and ``<path>.json`` (format, config, model card).

    Each file is written to a temporary file in the same folder and renamed into place; the side file is
    written last, so a reader that finds it finds complete weights.
    """
    path = Path(path)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {"format": CHECKPOINT_FORMAT, "config": asdict(model.cfg), "card": card}
    text = json.dumps(meta, indent=2, sort_keys=True)  # fails early if the card is not JSON-serialisable
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata={"format": CHECKPOINT_FORMAT}))
    atomic_write(_side_file(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_checkpoint_card(path: Path) -> dict:
    """The side file's content: {"format", "config", "card"}."""
    side = _side_file(Path(path))
    if not side.is_file():
        raise ModelError(f"model config file not found: {side}")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"model config file {side} is not valid JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT or not isinstance(meta.get("config"), dict):
        raise ModelError(f"model config file {side} is not a {CHECKPOINT_FORMAT} config")
    return meta


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> HeadSimilarityModel:
    """Rebuild the model from ``path`` and its ``<path>.json`` side file; returned in eval mode."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model weights not found: {path}")
    meta = read_checkpoint_card(path)
    raw = meta["config"]
    known = {f.name for f in fields(HeadModelConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ModelError(f"model config in {_side_file(path)} has unknown fields: {', '.join(unknown)}")
    try:
        cfg = HeadModelConfig(**raw)
    except (TypeError, ValueError) as e:
        raise ModelError(f"bad model config in {_side_file(path)}: {e}") from None
    try:
        state = load_file(str(path), device=str(map_location))
    except Exception as e:  # safetensors raises its own error types for truncated / foreign files
        raise ModelError(f"cannot read model weights {path}: {e}") from None
    model = HeadSimilarityModel(cfg)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ModelError(f"weights in {path} do not match the config: " + _key_report(missing, unexpected))
    _load_checked(model, state, source=str(path))
    model.to(map_location)
    model.eval()
    return model


# --- importing face-recognition backbones -------------------------------------------------------------

# CVLface/AdaFace ViT (cvlface/research/recognition/code/run_v1/models/vit/vit.py) already uses timm's
# names for everything we keep: patch_embed.proj, pos_embed (1, 196, D, no class slot), blocks.N.{norm1,
# attn.qkv (no bias), attn.proj, norm2, mlp.fc1, mlp.fc2}, norm.  Its checkpoints wrap the net as `net.`.
# Dropped: `feature.*` (the flatten-all-patches Linear-BN-Linear-BN identity head, replaced by g_id/g_head)
# and `mask_token` (the training-time patch-masking token).  Nothing else is renamed.
ADAFACE_PREFIX = "net."
ADAFACE_DROPPED_PREFIXES = ("feature.",)
ADAFACE_DROPPED_KEYS = ("mask_token",)
# timm checkpoints: the classifier and the pooled-feature norm are unused (num_classes=0, global_pool="").
TIMM_DROPPED_PREFIXES = ("head.", "fc_norm.", "head_drop.")


def _key_report(missing, unexpected, mismatched=()) -> str:
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if unexpected:
        parts.append("unexpected " + ", ".join(unexpected))
    if mismatched:
        parts.append("wrong shape " + ", ".join(mismatched))
    return "; ".join(parts)


def _load_checked(model: HeadSimilarityModel, state: dict[str, Tensor], source: str) -> None:
    own = model.state_dict()
    mismatched = sorted(
        f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items() if k in own and v.shape != own[k].shape
    )
    if mismatched:
        raise ModelError(f"{source}: " + _key_report((), (), mismatched))
    model.load_state_dict(state, strict=False)


def _load_backbone(model: HeadSimilarityModel, state: dict[str, Tensor], source: str, tokens_optional: bool) -> None:
    """Load backbone weights; the only keys allowed to be missing are the new tokens/heads.

    ``tokens_optional``: the checkpoint may also carry cls_token / reg_token (timm); otherwise it must not.
    """
    new = model.new_keys()
    backbone = model.backbone_keys()
    tokens = {"cls_token", "reg_token"} & new
    allowed = backbone | (tokens if tokens_optional else set())
    unexpected = sorted(set(state) - allowed)
    missing_backbone = sorted(backbone - set(state))
    if unexpected or missing_backbone:
        raise ModelError(f"{source} does not fit this ViT: " + _key_report(missing_backbone, unexpected))
    _load_checked(model, state, source)


def load_adaface_vit_state_dict(model: HeadSimilarityModel, state_dict: dict) -> None:
    """Load an AdaFace/CVLface ViT checkpoint (keys ``net.*``) into the backbone.

    Missing afterwards are exactly cls_token, reg_token (dual_cls), g_id.* and g_head.*; any other missing or
    leftover key raises ModelError naming it.  A Lightning-style ``{"state_dict": {...}}`` wrapper is unwrapped.
    """
    if "state_dict" in state_dict and isinstance(state_dict["state_dict"], dict):
        state_dict = state_dict["state_dict"]
    mapped: dict[str, Tensor] = {}
    foreign: list[str] = []
    for key, value in state_dict.items():
        if not key.startswith(ADAFACE_PREFIX):
            foreign.append(key)
            continue
        name = key[len(ADAFACE_PREFIX):]
        if name.startswith(ADAFACE_DROPPED_PREFIXES) or name in ADAFACE_DROPPED_KEYS:
            continue
        mapped[name] = value
    if foreign:
        raise ModelError("AdaFace ViT checkpoint has keys outside `net.`: " + ", ".join(sorted(foreign)))
    _load_backbone(model, mapped, "AdaFace ViT checkpoint", tokens_optional=False)


def load_timm_vit_state_dict(model: HeadSimilarityModel, state_dict: dict) -> None:
    """Load a timm ViT checkpoint of the same shape (pos_embed without class slot, i.e. no_embed_class).

    head.* / fc_norm.* are dropped; cls_token / reg_token are loaded when present; every backbone key must
    be present and no other key may be left over, else ModelError naming them.
    """
    mapped = {k: v for k, v in state_dict.items() if not k.startswith(TIMM_DROPPED_PREFIXES)}
    _load_backbone(model, mapped, "timm ViT checkpoint", tokens_optional=True)
