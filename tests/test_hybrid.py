"""The hybrid dual-CLS model: a pretrained CNN stem gives 14x14 tokens; training with the stem frozen runs on
cached stem features; the face token carries the teacher's vector of the aligned face."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FACES, needs_data, require_train_extra

require_train_extra()  # torch, timm, safetensors below

import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from test_train import make_dataset, printed_command

from cli.main import main
from headsearch.models.dual_cls import HeadModelConfig, HeadSimilarityModel, load_checkpoint

pytestmark = pytest.mark.slow  # media-heavy: left out of the fast tier (`-m "not slow"`)


@pytest.mark.parametrize("stem", ["sface", "efficientnet_lite0"])
def test_stem_tokens_and_cached_path_agree(stem):
    torch.manual_seed(0)
    cfg = HeadModelConfig.hybrid(stem=stem, depth=1, face_dim=8)
    model = HeadSimilarityModel(cfg).eval()
    assert model.patch_embed.num_patches == 196 and model.num_prefix_tokens == 2
    x = torch.rand(2, 3, cfg.img_size, cfg.img_size) * 2 - 1
    face, mask = torch.randn(2, 8), torch.tensor([True, False])
    with torch.no_grad():
        a = model(x, face=face, face_mask=mask)
        b = model(model.stem_features(x), from_stem=True, face=face, face_mask=mask)
        c = model(x)  # no face vectors: the "no face" token for both
    for u, v in zip(a, b, strict=True):
        torch.testing.assert_close(u, v, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[0][1], c[0][1], atol=1e-5, rtol=1e-5)  # the masked sample saw no face either way
    assert not torch.allclose(a[0][0], c[0][0])
    with pytest.raises(ValueError, match="img_size"):
        HeadModelConfig.hybrid(stem=stem, img_size=64)
    model.train()
    assert not any(m.training for m in model.stem.modules() if isinstance(m, torch.nn.BatchNorm2d))  # pretrained statistics kept


def test_face_skip_starts_as_the_teacher():
    torch.manual_seed(0)
    model = HeadSimilarityModel(HeadModelConfig.hybrid(depth=1, face_dim=128)).eval()  # face_dim == out_dim: skip path
    face = torch.nn.functional.normalize(torch.randn(3, 128), dim=-1)
    with torch.no_grad():
        z_id, z_head = model(torch.zeros(3, 3, 112, 112), face=face, face_mask=torch.tensor([True, True, False]))
    cos_id, cos_head = (z_id * face).sum(1), (z_head * face).sum(1)
    assert (cos_id[:2] > 0.98).all() and (cos_head[:2] > 0.8).all()  # z = normalize(face + beta * learned), beta 0.1 / 0.5
    assert cos_id[2] < 0.5  # no face seen: the learned part alone
    assert "face_beta" in model.new_keys() and "face_beta" in model.no_weight_decay()


def test_train_hybrid_with_frozen_stem_cache_and_face_token(tmp_path):
    data = make_dataset(tmp_path / "ds", identities=4, per_state=3)
    out = tmp_path / "run"
    args = ["train", str(data), "--out", str(out), "--config", "hybrid", "--stem", "sface", "--face-token", "--epochs", "2",
            "--batch-size", "12", "--stem-views", "2", "--val-identities", "0", "-q"]
    result = CliRunner().invoke(main, args + ["--max-steps", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    resume = printed_command(result.stdout, "continue with: ")
    info = json.loads((out / "stem_cache.json").read_text())
    assert info["shape"] == [24, 2, 768, 14, 14] and info["done"] == 24
    cache = np.load(out / "stem_cache.npy", mmap_mode="r")
    assert np.isfinite(cache[:, :, :4]).all() and not np.array_equal(cache[:, 0], cache[:, 1])  # view 1 is mirrored
    # The frozen stem left training as the SFace trunk it started from; the rest was trained.
    from headsearch.models.stems import SFaceNet, load_sface_weights

    net = SFaceNet(stages=12, tail=False)
    load_sface_weights(net)
    state = load_file(str(out / "last.safetensors"))
    torch.testing.assert_close(state["patch_embed.backbone.net.body.conv_7.0.weight"], net.body.conv_7[0].weight)
    model = load_checkpoint(out / "last.safetensors")
    assert model.cfg.stem == "sface" and model.cfg.face_dim == 16
    card = json.loads((out / "last.safetensors.json").read_text())["card"]
    assert card["face_token"] is True and card["stem"] == "sface" and card["freeze_stem"] == "all"
    # Continue as the run said (its stem, frozen, its views, the face token): the cache is reused as it is, training
    # goes on to the end.
    result = CliRunner().invoke(main, resume, catch_exceptions=False)
    assert result.exit_code == 0 and "resuming" in result.output and "trained 2/2 epochs" in result.stdout, result.output
    assert json.loads((out / "stem_cache.json").read_text())["done"] == 24
    # Its face token needs the teacher it was trained with to embed: one clear line for this synthetic teacher.
    result = CliRunner().invoke(main, ["index", str(data / "crops" / "0000.jpg"), "--library", str(tmp_path / "lib"),
                                       "--model", str(out / "last.safetensors")])
    assert result.exit_code != 0 and "face token needs the teacher" in result.output and "Traceback" not in result.output


@needs_data
def test_head_skip_student_embeds_real_crops_through_its_teacher(tmp_path):
    """A head-skip student of the sface+lite0 teacher, loaded as users load a checkpoint: its embedder runs the teacher
    on each crop (SFace for the face token, the fused head vector for the skip path); untrained, it is its teacher plus
    a small learned part. A head-skip card naming another teacher is refused with one line."""
    from headsearch.basics.errors import ModelError
    from headsearch.basics.images import read_image_rgb
    from headsearch.detection.faces import FaceDetector
    from headsearch.embedding.photo_heads import photo_heads
    from headsearch.models import load_embedder
    from headsearch.models.dual_cls import save_checkpoint
    from headsearch.models.whole_head import SFACE_DIM, WholeHeadEmbedder
    from schemas.records import VectorKind

    teacher = WholeHeadEmbedder()
    head_dim = teacher.dims[VectorKind.HEAD]
    torch.manual_seed(0)
    model = HeadSimilarityModel(HeadModelConfig.hybrid(depth=1, face_dim=SFACE_DIM, head_dim=head_dim, head_skip=True)).eval()
    path = tmp_path / "student.safetensors"
    save_checkpoint(model, path, {"name": "headsim-test", "teacher": teacher.describe().to_dict()})
    student = load_embedder(str(path))
    assert student.dims == {VectorKind.ID: SFACE_DIM, VectorKind.HEAD: head_dim}
    detector = FaceDetector()
    photos = [FACES / "leonard" / "leonard1.png", FACES / "raj" / "raj1.png"]
    crops = [photo_heads(read_image_rgb(p), p.name, detector, student)[0].crop for p in photos]
    got, want = student.embed(crops), teacher.embed(crops)
    for kind, floor in ((VectorKind.ID, 0.98), (VectorKind.HEAD, 0.98)):
        assert got[kind].shape == want[kind].shape
        cos = (got[kind] * want[kind]).sum(1)
        assert (cos > floor).all() and (cos < 0.99999).all(), (kind, cos)  # the teacher, plus the learned part
    assert float(got[VectorKind.HEAD][0] @ got[VectorKind.HEAD][1]) < 0.9  # two people stay apart
    save_checkpoint(model, path, {"name": "headsim-test", "teacher": {"name": "sface", "version": "x"}})
    with pytest.raises(ModelError, match="head skip path needs the teacher it was trained with"):
        load_embedder(str(path))
