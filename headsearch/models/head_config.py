"""The head-similarity ViT's configuration, without torch: its presets, architecture variants and stems.

`headsearch.models.dual_cls` builds the network from a `HeadModelConfig` and `headsearch.models.stems` the CNN
stems; the names live here so that the command line (`headsearch train --help`) offers them on an install
without PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VARIANTS = (
    "shared",  # one CLS token, one projection head g_id; z_head is z_id (no separate head space)
    "dual_head_split",  # one CLS token split in halves: g_id on the first half, g_head on the second
    "dual_head_both",  # one CLS token; g_id and g_head both read the full CLS feature
    "dual_cls",  # the paper's model: two prefix tokens, CLS_id -> g_id and CLS_head -> g_head
)
# Input side and token grid of each pretrained CNN stem (grid = img_size / stride = 14, as the paper's 196 patches).
STEM_INPUT = {"sface": 112, "efficientnet_lite0": 224}
STEM_STRIDE = {"sface": 8, "efficientnet_lite0": 16}
CNN_STEMS = tuple(STEM_INPUT)  # the pretrained stems of the hybrid preset (headsearch.models.stems)
STEMS = ("patch", *CNN_STEMS)  # "patch": the ViT's own patch embedding
DEFAULT_CNN_STEM = "sface"  # the hybrid preset's stem: the face teacher's own trunk
CONFIGS = ("small", "tiny", "paper", "hybrid")  # the presets: classmethods of HeadModelConfig


@dataclass
class HeadModelConfig:
    img_size: int = 112  # input side in pixels (square crops, aligned-face size of AdaFace)
    patch_size: int = 8  # patch side; 112/8 -> 14x14 = 196 patches
    embed_dim: int = 512  # transformer width D
    depth: int = 24  # number of transformer blocks
    num_heads: int = 16  # attention heads per block
    mlp_ratio: float = 3.0  # MLP hidden width = mlp_ratio * D (ReLU6 activation)
    out_dim: int = 512  # dimension of the L2-normalised embeddings z_id and z_head
    variant: str = "dual_cls"  # ablation, one of VARIANTS (see their comments)
    stem: str = "patch"  # "patch": the ViT's own patch embedding; else a pretrained CNN stem (CNN_STEMS)
    face_dim: int = 0  # > 0: one more input token, the face teacher's vector of the aligned face (a learned token without a face)
    head_dim: int = 0  # width of z_head (0: out_dim); e.g. the width of a whole-head teacher's head vectors, to align with them
    head_skip: bool = False  # z_head = normalize(t_head + beta * g_head): the teacher's head vector (head_dim wide) as the base

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; expected one of {', '.join(VARIANTS)}")
        if self.stem not in STEMS:
            raise ValueError(f"unknown stem {self.stem!r}; expected one of {', '.join(STEMS)}")
        if self.stem != "patch" and (self.img_size, self.patch_size) != (STEM_INPUT[self.stem], STEM_STRIDE[self.stem]):
            raise ValueError(f"stem {self.stem} takes img_size {STEM_INPUT[self.stem]} and gives one token per "
                             f"{STEM_STRIDE[self.stem]} px (patch_size), got {self.img_size} and {self.patch_size}")
        if self.img_size % self.patch_size:
            raise ValueError(f"img_size {self.img_size} is not a multiple of patch_size {self.patch_size}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim {self.embed_dim} is not a multiple of num_heads {self.num_heads}")
        if self.variant == "dual_head_split" and self.embed_dim % 2:
            raise ValueError(f"variant dual_head_split needs an even embed_dim, got {self.embed_dim}")
        if self.out_dim < 1 or self.depth < 1 or self.head_dim < 0:
            raise ValueError("out_dim and depth must be positive (head_dim >= 0)")
        if self.head_skip and (self.variant == "shared" or not self.head_dim):
            raise ValueError("head_skip needs a separate z_head (not variant shared) and head_dim (the teacher's head vector width)")

    @property
    def z_head_dim(self) -> int:
        """The width of z_head."""
        return self.head_dim or self.out_dim

    @classmethod
    def paper(cls, **overrides: Any) -> HeadModelConfig:
        """AdaFace ViT-base backbone, as in the paper."""
        return cls(**overrides)

    @classmethod
    def tiny(cls, **overrides: Any) -> HeadModelConfig:
        """For unit tests: a few hundred thousand parameters, 49 patches."""
        kw = dict(img_size=112, patch_size=16, embed_dim=64, depth=2, num_heads=2, mlp_ratio=3.0, out_dim=32)
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def small(cls, **overrides: Any) -> HeadModelConfig:
        """CPU-friendly (ViT-Tiny width) with the paper's 196-patch layout."""
        kw = dict(img_size=112, patch_size=8, embed_dim=192, depth=6, num_heads=3, mlp_ratio=3.0, out_dim=512)
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def hybrid(cls, **overrides: Any) -> HeadModelConfig:
        """CPU-trainable hybrid: a pretrained CNN stem (default SFace's face trunk, 14x14 tokens) and 4 blocks of
        ViT-Tiny width; 128-d outputs like the SFace teacher."""
        stem = overrides.get("stem", DEFAULT_CNN_STEM)
        kw = dict(img_size=STEM_INPUT[stem], patch_size=STEM_STRIDE[stem], embed_dim=192, depth=4, num_heads=3,
                  mlp_ratio=3.0, out_dim=128, stem=stem)
        kw.update(overrides)
        return cls(**kw)

    @property
    def num_prefix_tokens(self) -> int:
        return 2 if self.variant == "dual_cls" else 1
