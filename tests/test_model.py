"""HeadSimilarityModel: variants, token routing, checkpoints and backbone imports (tiny configs, CPU)."""
from __future__ import annotations

import json
from functools import partial

import pytest
from conftest import require_train_extra

require_train_extra()  # torch, timm, safetensors below

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from headsearch.basics.errors import ModelError
from headsearch.models.dual_cls import (
    HeadModelConfig,
    HeadSimilarityModel,
    load_adaface_vit_state_dict,
    load_checkpoint,
    load_timm_vit_state_dict,
    save_checkpoint,
)
from headsearch.models.head_config import VARIANTS


def _images(n: int = 4, seed: int = 0, size: int = 112) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=g) * 2 - 1


def _model(variant: str = "dual_cls", seed: int = 0) -> HeadSimilarityModel:
    torch.manual_seed(seed)
    model = HeadSimilarityModel(HeadModelConfig.tiny(variant=variant))
    with torch.no_grad():  # non-trivial BatchNorm statistics, so a lost buffer would show in outputs
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    return model.eval()


def test_paper_config_matches_adaface_vit_base():
    cfg = HeadModelConfig.paper()
    assert (cfg.img_size, cfg.patch_size, cfg.embed_dim, cfg.depth, cfg.num_heads, cfg.mlp_ratio, cfg.out_dim,
            cfg.variant) == (112, 8, 512, 24, 16, 3.0, 512, "dual_cls")
    model = HeadSimilarityModel(HeadModelConfig.paper(depth=1))  # one block is enough to check the layout
    assert model.pos_embed.shape == (1, 196, 512)  # no class slot: prefix tokens are added after pos_embed
    assert model.num_prefix_tokens == 2 and model.reg_token is not None
    blk = model.blocks[0]
    assert blk.attn.qkv.bias is None and blk.mlp.fc1.out_features == 1536
    assert isinstance(blk.mlp.act, nn.ReLU6) and blk.norm1.eps == 1e-5 and model.norm.eps == 1e-5
    assert model.no_weight_decay() == {"pos_embed", "cls_token", "reg_token"}
    assert HeadModelConfig.small().embed_dim == 192


def test_bad_config_rejected():
    with pytest.raises(ValueError, match="variant"):
        HeadModelConfig.tiny(variant="nope")
    with pytest.raises(ValueError, match="patch_size"):
        HeadModelConfig.tiny(img_size=100)


@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_shapes_and_norms(variant):
    model = _model(variant)
    for train in (False, True):
        model.train(train)
        z_id, z_head = model(_images(4))
        assert z_id.shape == z_head.shape == (4, 32)
        torch.testing.assert_close(z_id.norm(dim=1), torch.ones(4))
        torch.testing.assert_close(z_head.norm(dim=1), torch.ones(4))
        if variant == "shared":
            assert torch.equal(z_id, z_head) and model.g_head is None
        else:
            assert not torch.allclose(z_id, z_head)
    assert ("reg_token" in model.state_dict()) == (variant == "dual_cls")


@pytest.mark.parametrize("variant", VARIANTS)
def test_prefix_tokens_routed_to_heads(variant):
    model = _model(variant)
    seen: dict[str, torch.Tensor] = {}
    hooks = [model.g_id[0].register_forward_pre_hook(lambda m, a: seen.__setitem__("id", a[0].detach()))]
    if model.g_head is not None:
        hooks.append(model.g_head[0].register_forward_pre_hook(lambda m, a: seen.__setitem__("head", a[0].detach())))
    x = _images(3)
    with torch.no_grad():
        model(x)
        tokens = model.forward_features(x)
    for h in hooks:
        h.remove()
    d = model.embed_dim
    assert tokens.shape[1] == model.patch_embed.num_patches + (2 if variant == "dual_cls" else 1)
    if variant == "dual_cls":
        torch.testing.assert_close(seen["id"], tokens[:, 0])
        torch.testing.assert_close(seen["head"], tokens[:, 1])
        assert not torch.allclose(tokens[:, 0], tokens[:, 1])  # two distinct prefix tokens
        assert not torch.equal(model.cls_token, model.reg_token)
    elif variant == "dual_head_split":
        torch.testing.assert_close(seen["id"], tokens[:, 0, : d // 2])
        torch.testing.assert_close(seen["head"], tokens[:, 0, d // 2:])
    else:
        torch.testing.assert_close(seen["id"], tokens[:, 0])
        if variant == "dual_head_both":
            torch.testing.assert_close(seen["head"], tokens[:, 0])


@pytest.mark.parametrize("variant", ["dual_cls", "shared"])
def test_checkpoint_roundtrip(tmp_path, variant):
    model = _model(variant, seed=1)
    path = tmp_path / "ckpt" / "model.safetensors"
    save_checkpoint(model, path, {"name": "tiny", "teacher": "adaface"})
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.safetensors", "model.safetensors.json"]
    meta = json.loads((tmp_path / "ckpt" / "model.safetensors.json").read_text())
    assert meta["card"] == {"name": "tiny", "teacher": "adaface"} and meta["config"]["variant"] == variant
    loaded = load_checkpoint(path)
    assert not loaded.training and loaded.cfg == model.cfg
    x = _images(3, seed=2)
    with torch.no_grad():
        for a, b in zip(model(x), loaded(x), strict=True):
            assert torch.equal(a, b)


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        load_checkpoint(tmp_path / "absent.safetensors")
    path = tmp_path / "m.safetensors"
    save_checkpoint(_model(), path, {})
    side = tmp_path / "m.safetensors.json"
    good = side.read_text()

    meta = json.loads(good)
    meta["config"]["variant"] = "bogus"
    side.write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="bad model config"):
        load_checkpoint(path)

    meta = json.loads(good)
    meta["config"]["depth"] = 3  # weights have 2 blocks
    side.write_text(json.dumps(meta))
    with pytest.raises(ModelError, match=r"missing blocks\.2\."):
        load_checkpoint(path)

    meta = json.loads(good)
    meta["config"]["variant"] = "dual_head_both"  # weights carry reg_token
    side.write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="unexpected reg_token"):
        load_checkpoint(path)

    side.write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        load_checkpoint(path)
    side.unlink()
    with pytest.raises(ModelError, match="config file not found"):
        load_checkpoint(path)


def adaface_layout(model: HeadSimilarityModel) -> dict[str, torch.Tensor]:
    """An AdaFace/CVLface ViT checkpoint built from `model`'s backbone by the inverse mapping.

    CVLface's ViT names its modules like timm (patch_embed.proj, pos_embed, blocks.N.{norm1, attn.qkv,
    attn.proj, norm2, mlp.fc1, mlp.fc2}, norm) under `net.`, plus a flatten-all-patches `feature` head
    (Linear(D*N, D, bias=False), BN, Linear(D, out, bias=False), BN) and a training `mask_token`.
    """
    d, n = model.embed_dim, model.patch_embed.num_patches
    out = {"net." + k: v.clone() for k, v in model.state_dict().items() if k in model.backbone_keys()}
    out["net.feature.0.weight"] = torch.randn(d, d * n)
    out["net.feature.2.weight"] = torch.randn(7, d)
    for i, c in ((1, d), (3, 7)):
        out.update({f"net.feature.{i}.weight": torch.ones(c), f"net.feature.{i}.bias": torch.zeros(c),
                    f"net.feature.{i}.running_mean": torch.zeros(c), f"net.feature.{i}.running_var": torch.ones(c),
                    f"net.feature.{i}.num_batches_tracked": torch.tensor(0)})
    out["net.mask_token"] = torch.zeros(1, 1, d)
    return out


def _copy_new_keys(src: HeadSimilarityModel, dst: HeadSimilarityModel) -> None:
    sd = src.state_dict()
    dst.load_state_dict({k: sd[k] for k in src.new_keys()}, strict=False)


def test_adaface_import_reproduces_source():
    src, dst = _model(seed=3), _model(seed=4)
    x = _images(2, seed=5)
    with torch.no_grad():
        assert not torch.allclose(src(x)[0], dst(x)[0])
    load_adaface_vit_state_dict(dst, adaface_layout(src))
    for k in dst.backbone_keys():
        assert torch.equal(dst.state_dict()[k], src.state_dict()[k]), k
    assert not torch.equal(dst.cls_token, src.cls_token)  # new tokens are not touched
    _copy_new_keys(src, dst)
    with torch.no_grad():
        for a, b in zip(src(x), dst(x), strict=True):
            assert torch.equal(a, b)


def test_adaface_import_rejects_extra_missing_and_misshapen_keys():
    src = _model(seed=3)
    sd = adaface_layout(src)
    with pytest.raises(ModelError, match=r"unexpected blocks\.9\.attn\.qkv\.weight"):
        load_adaface_vit_state_dict(_model(), {**sd, "net.blocks.9.attn.qkv.weight": torch.zeros(1)})
    with pytest.raises(ModelError, match=r"unexpected cls_token"):
        load_adaface_vit_state_dict(_model(), {**sd, "net.cls_token": torch.zeros(1, 1, 64)})
    with pytest.raises(ModelError, match=r"outside `net\.`: extra"):
        load_adaface_vit_state_dict(_model(), {**sd, "extra": torch.zeros(1)})
    missing = {k: v for k, v in sd.items() if k != "net.blocks.1.mlp.fc2.bias"}
    with pytest.raises(ModelError, match=r"missing blocks\.1\.mlp\.fc2\.bias"):
        load_adaface_vit_state_dict(_model(), missing)
    with pytest.raises(ModelError, match=r"wrong shape pos_embed"):
        load_adaface_vit_state_dict(_model(), {**sd, "net.pos_embed": torch.zeros(1, 50, 64)})


def test_timm_import():
    cfg = HeadModelConfig.tiny()
    torch.manual_seed(6)
    timm_vit = VisionTransformer(img_size=112, patch_size=16, embed_dim=64, depth=2, num_heads=2, mlp_ratio=3.0,
                                 qkv_bias=False, class_token=True, reg_tokens=1, no_embed_class=True, num_classes=10,
                                 norm_layer=partial(nn.LayerNorm, eps=1e-5), act_layer=nn.ReLU6)
    model = HeadSimilarityModel(cfg).eval()
    load_timm_vit_state_dict(model, timm_vit.state_dict())
    assert torch.equal(model.cls_token, timm_vit.cls_token) and torch.equal(model.reg_token, timm_vit.reg_token)
    x = _images(2)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), timm_vit.eval().forward_features(x))
    with pytest.raises(ModelError, match="unexpected dist_token"):
        load_timm_vit_state_dict(model, {**timm_vit.state_dict(), "dist_token": torch.zeros(1, 1, 64)})
    sd = {k: v for k, v in timm_vit.state_dict().items() if k != "norm.weight"}
    with pytest.raises(ModelError, match=r"missing norm\.weight"):
        load_timm_vit_state_dict(model, sd)
