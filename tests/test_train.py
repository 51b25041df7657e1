"""Training loop: CLI run, overfit sanity, mixed-batch sampler, augmentation, exact resume, bad inputs.

Everything runs on the tiny config and a synthetic dataset (6 identities x 2 states x 4 samples of
generated head-ish images) built in tmp_path in the dataset builder's format.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import require_train_extra

require_train_extra()  # torch, timm, safetensors below

import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from cli.main import main
from headsearch.basics.errors import HeadsearchError
from headsearch.models.dual_cls import HeadModelConfig, HeadSimilarityModel, load_checkpoint
from trainer.augment import HeadAugment, eval_transform, head_mask
from trainer.dataset_format import load_dataset
from trainer.options import RESUME_KEYS, RESUMED_TOO, TrainOptions
from trainer.run import lr_factor, param_groups
from trainer.sampler import MixedBatchSampler, encode_labels, partner_report
from trainer.samples import split_identities
from trainer.train import train

TEACHER_DIM = 16


def make_dataset(root: Path, identities: int = 6, states: int = 2, per_state: int = 4, size: int = 96,
                 seed: int = 0, teacher_every: int = 3, head_dim: int = 0) -> Path:
    """A dataset folder in the builder's format: head-ish blobs whose colour/shape encode identity and state.
    With `head_dim`, a whole-head teacher's head vectors too (teacher_head.npy, one per sample, faces or not)."""
    rng = np.random.default_rng(seed)
    (root / "crops").mkdir(parents=True, exist_ok=True)
    rows = []
    teacher = []
    heads = []
    head_dirs = rng.normal(size=(identities, states, head_dim))
    id_dirs = rng.normal(size=(identities, TEACHER_DIM))
    for i in range(identities):
        skin = rng.uniform(60, 230, size=3)
        for s in range(states):
            hat = rng.uniform(0, 255, size=3)
            for k in range(per_state):
                img = np.clip(rng.normal(rng.uniform(40, 200), 30, size=(size, size, 3)), 0, 255).astype(np.uint8)
                c = (size // 2 + int(rng.integers(-3, 4)), size // 2 + int(rng.integers(-3, 4)))
                cv2.ellipse(img, c, (size // 3, int(size / 2.4)), 0, 0, 360, tuple(float(v) for v in skin), -1)
                if s == 1:  # "hat" state: a band over the top of the head
                    cv2.rectangle(img, (c[0] - size // 3, c[1] - size // 2), (c[0] + size // 3, c[1] - size // 5),
                                  tuple(float(v) for v in hat), -1)
                cv2.circle(img, (c[0] - size // 8 + i, c[1]), 3 + i % 3, (20, 20, 20), -1)
                cv2.circle(img, (c[0] + size // 8 - i, c[1]), 3 + i % 3, (20, 20, 20), -1)
                n = len(rows)
                rel = f"crops/{n:04d}.jpg"
                cv2.imwrite(str(root / rel), img)
                has_teacher = n % teacher_every != 0
                if has_teacher:
                    v = id_dirs[i] + 0.3 * rng.normal(size=TEACHER_DIM)
                    teacher.append(v / np.linalg.norm(v))
                rows.append({
                    "sample_id": n, "identity": f"person{i}", "state": "hat" if s == 1 else "plain", "source": "synthetic",
                    "video": f"v{i}.mp4", "segment": f"v{i}:{s}", "time": float(k), "pose_hint": 0.0,
                    "face_visible": has_teacher, "head_crop": rel, "face_crop": rel if has_teacher else None,
                    "teacher_index": len(teacher) - 1 if has_teacher else -1,
                })
                if head_dim:
                    h = head_dirs[i, s] + 0.3 * rng.normal(size=head_dim)
                    heads.append(h / np.linalg.norm(h))
                    rows[-1]["teacher_head_index"] = len(heads) - 1
    pq.write_table(pa.Table.from_pylist(rows), root / "manifest.parquet")
    np.save(root / "teacher.npy", np.asarray(teacher, np.float32))
    meta = {"name": "synthetic-teacher", "dim": TEACHER_DIM}
    if head_dim:
        np.save(root / "teacher_head.npy", np.asarray(heads, np.float32))
        meta.update(kinds=["id", "head"], dims={"id": TEACHER_DIM, "head": head_dim})
    (root / "teacher.json").write_text(json.dumps(meta))
    return root


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "ds")


def _opts(**kw) -> TrainOptions:
    base = dict(config="tiny", epochs=2, batch_size=16, lr=1e-3, warmup_epochs=0.5, val_identities=0.34, seed=3,
                device="cpu", progress=False)
    base.update(kw)
    return TrainOptions(**base)


def _run(*args, ok: bool = True):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


# --- CLI end to end -----------------------------------------------------------------------------------


def test_cli_train_writes_checkpoints_and_log(dataset, tmp_path):
    out = tmp_path / "run"
    result = _run("train", dataset, "--out", out, "--config", "tiny", "--epochs", "2", "--batch-size", "16",
                  "--val-identities", "0.34", "--device", "cpu", "--quiet")
    assert "trained 2/2 epochs" in result.stdout
    for name in ("last.safetensors", "last.safetensors.json", "best.safetensors", "best.safetensors.json", "state.pt"):
        assert (out / name).is_file(), name
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    teacher = [e for e in lines if e["event"] == "teacher"]
    epochs = [e for e in lines if e["event"] == "epoch"]
    assert len(teacher) == 1 and [e["epoch"] for e in epochs] == [1, 2]
    for e in epochs:
        for k in ("loss", "sim_id", "sim_head", "align"):
            assert isinstance(e[k], float) and np.isfinite(e[k])
        val = e["val"]
        for k in ("head_auc", "identity_auc", "head_vr@1e-2", "identity_vr@1e-2", "hierarchy", "hierarchy_head"):
            assert k in val
        assert 0.0 <= val["head_auc"] <= 1.0 and 0.0 <= val["identity_auc"] <= 1.0
    # the teacher separates identities by construction
    assert teacher[0]["val"]["identity_auc"] > 0.9
    model = load_checkpoint(out / "last.safetensors")
    assert model.cfg.out_dim == TEACHER_DIM and model.cfg.variant == "dual_cls"
    card = json.loads((out / "last.safetensors.json").read_text())["card"]
    assert card["epoch"] == 2 and card["config"] == "tiny" and "head_auc" in card["val"]
    # a second run into the same folder without --resume is refused
    again = _run("train", dataset, "--out", out, "--config", "tiny", "--quiet", ok=False)
    assert again.exit_code == 1 and "--resume" in again.output and "Traceback" not in again.output


# --- overfit sanity ------------------------------------------------------------------------------------


def test_loss_decreases_on_a_fixed_batch(dataset):
    from trainer.losses import head_similarity_loss
    from trainer.samples import CropDataset, collate

    info = load_dataset(dataset)
    idx = np.arange(len(info))
    ds = CropDataset(info, idx, 112, None)
    sampler = MixedBatchSampler(ds.identity_codes, ds.state_codes, 16, seed=0)
    batch = collate([ds[i] for i in sampler.batches(0)[0]])
    torch.manual_seed(0)
    model = HeadSimilarityModel(HeadModelConfig.tiny(out_dim=TEACHER_DIM))
    opt = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3)
    losses = []
    for _ in range(8):
        z_id, z_head = model(batch["x"])
        loss, _ = head_similarity_loss(z_id, z_head, batch["identity"], batch["state"], batch["teacher"], batch["has_teacher"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.7 * losses[0], losses


def test_param_groups_and_schedule():
    model = HeadSimilarityModel(HeadModelConfig.tiny())
    groups = param_groups(model, 0.05)
    decay = next(g for g in groups if g["weight_decay"] == 0.05)
    no_decay = next(g for g in groups if g["weight_decay"] == 0.0)
    names = {id(p): n for n, p in model.named_parameters()}
    nd = {names[id(p)] for p in no_decay["params"]}
    assert {"pos_embed", "cls_token", "reg_token"} <= nd
    assert all(p.ndim >= 2 for p in decay["params"]) and all(names[id(p)] not in nd for p in decay["params"])
    assert lr_factor(0, 100, 10) == pytest.approx(0.1) and lr_factor(9, 100, 10) == pytest.approx(1.0)
    assert lr_factor(10, 100, 10) == pytest.approx(1.0) and lr_factor(100, 100, 10) == pytest.approx(0.0)
    assert lr_factor(55, 100, 10) == pytest.approx(0.5)


# --- sampler ------------------------------------------------------------------------------------------


def test_sampler_gives_every_anchor_r1_r2_r3_partners():
    ids, st = [], []
    for i in range(7):
        n_states = 1 if i == 6 else 2 + i % 2
        for s in range(n_states):
            ids += [f"p{i}"] * (3 + (i + s) % 4)
            st += [f"s{s}"] * (3 + (i + s) % 4)
    identity, _ = encode_labels(ids)
    state, _ = encode_labels(list(zip(ids, st, strict=True)))
    n = len(identity)
    multi = {i for i in set(identity.tolist()) if len(set(state[identity == i].tolist())) > 1}
    assert len(multi) == 6  # identities 0-5 have several looks, 6 has one
    for bs in (8, 12, 16, 32):
        sampler = MixedBatchSampler(identity, state, bs, samples_per_state=4, seed=1)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            batches = list(sampler)
            assert len(batches) == len(sampler) == n // bs >= 1, (bs, epoch, len(batches))
            for batch in batches:
                assert len(batch) == bs and len(set(batch)) == bs and all(0 <= b < n for b in batch)
                rep = partner_report(identity, state, batch)
                assert rep["r1"].all() and rep["r3"].all()
                with_looks = [a for a, b in enumerate(batch) if identity[b] in multi]
                assert with_looks and all(rep["r2"][a] for a in with_looks)  # R2 partners checked on every batch


def test_sampler_is_deterministic_per_seed_and_epoch():
    identity = np.repeat(np.arange(6), 8)
    state = identity * 2 + np.tile(np.repeat([0, 1], 4), 6)
    a = MixedBatchSampler(identity, state, 16, seed=5, with_seeds=True)
    b = MixedBatchSampler(identity, state, 16, seed=5, with_seeds=True)
    assert a.batches(2) == b.batches(2)
    assert a.batches(1) != a.batches(2)
    assert MixedBatchSampler(identity, state, 16, seed=6, with_seeds=True).batches(2) != a.batches(2)
    a.set_epoch(2)
    assert list(a) == b.batches(2) and len(a) == 3
    # an epoch covers most samples
    seen = {i for batch in a.batches(0) for i, _ in batch}
    assert len(seen) >= 0.75 * len(identity)


# --- augmentation -------------------------------------------------------------------------------------


def test_augment_shape_range_and_determinism():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(160, 160, 3), dtype=np.uint8)
    other = rng.integers(0, 256, size=(150, 150, 3), dtype=np.uint8)
    aug = HeadAugment(background_p=0.5)
    outs = [aug(img, np.random.default_rng(s), other) for s in range(12)]
    for x in outs:
        assert x.shape == (3, 112, 112) and x.dtype == torch.float32
        assert float(x.min()) >= -1.0 and float(x.max()) <= 1.0
    again = aug(img, np.random.default_rng(4), other)
    assert torch.equal(again, outs[4])
    assert not torch.equal(outs[0], outs[1])
    # background randomisation keeps the head centre and changes the corners
    always = HeadAugment(background_p=1.0, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip_p=0.0, jitter=0.0)
    plain = eval_transform(img)
    x = always(img, np.random.default_rng(1), other)
    assert torch.allclose(x[:, 50:62, 50:62], plain[:, 50:62, 50:62], atol=0.05)
    assert not torch.allclose(x[:, :8, :8], plain[:, :8, :8], atol=0.05)
    m = head_mask(100, 100)
    assert m[50, 50] == 1.0 and m[0, 0] == 0.0 and 0.0 < m.mean() < 1.0


# --- exact resume ---------------------------------------------------------------------------------------


def test_resume_is_exact(dataset, tmp_path):
    straight = train(dataset, tmp_path / "a", _opts())
    assert straight["epochs_done"] == 2 and not straight["stopped_early"]
    steps_per_epoch = straight["steps"] // 2
    # one epoch (stop at its last step), then resume; and a stop in the middle of an epoch, then resume
    for name, stop in (("b", steps_per_epoch), ("c", 1)):
        first = train(dataset, tmp_path / name, _opts(max_steps=stop))
        assert first["stopped_early"] and first["steps"] == stop
        second = train(dataset, tmp_path / name, _opts(resume=True))
        assert second["epochs_done"] == 2 and second["steps"] == straight["steps"]
        wa = load_file(str(tmp_path / "a" / "last.safetensors"))
        wb = load_file(str(tmp_path / name / "last.safetensors"))
        assert wa.keys() == wb.keys()
        for k in wa:
            assert torch.allclose(wa[k].float(), wb[k].float(), atol=1e-6, rtol=0), k
        log_a = [json.loads(x) for x in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
        log_b = [json.loads(x) for x in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        assert [e.get("loss") for e in log_a] == pytest.approx([e.get("loss") for e in log_b], abs=1e-6)


def test_ctrl_c_saves_state_and_resume_finishes(dataset, tmp_path, monkeypatch):
    import os
    import signal

    import trainer.train as tt

    calls = {"n": 0}
    real_loss = tt.head_similarity_loss

    def loss_then_ctrl_c(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # during the 3rd step: the step completes, then training stops
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(tt, "head_similarity_loss", loss_then_ctrl_c)
    out = tmp_path / "run"
    args = ["train", dataset, "--out", out, "--config", "tiny", "--epochs", "2", "--batch-size", "16",
            "--val-identities", "0.34", "--device", "cpu", "--seed", "3", "--quiet"]
    r = _run(*args, ok=False)
    assert r.exit_code == 130, r.output
    assert "resume with:" in r.output and "Traceback" not in r.output
    state = torch.load(out / "state.pt", weights_only=False)
    assert state["step"] == 3 and state["epoch"] == 1 and state["step_in_epoch"] == 1
    monkeypatch.setattr(tt, "head_similarity_loss", real_loss)
    r = _run(*printed_command(r.output, "resume with: "))
    assert f"resuming {out} at epoch 2, step 3" in r.output and "trained 2/2 epochs, 4 steps" in r.stdout


def printed_command(output: str, after: str) -> list[str]:
    """The `headsearch train ...` command printed after `after`, as arguments of the CLI (the program's name cut off)."""
    argv = shlex.split(output.split(after, 1)[1].splitlines()[0])
    return argv[argv.index("train"):]


def test_printed_resume_command_carries_every_option(tmp_path):
    """The command printed at --max-steps, run as printed, continues the run with every option it was started with
    (each set here to other than its default): the saved state's options are the same before and after."""
    ds = make_dataset(tmp_path / "ds", identities=4, per_state=3, size=48, head_dim=8)
    out = tmp_path / "run"
    chosen = {"config": "tiny", "variant": "dual_head_both", "seed": 5, "batch_size": 12, "val_identities": 0.34,
              "samples_per_state": 3, "freeze_stem": "early", "stem_views": 2, "face_token": True, "head_skip": True,
              "epochs": 2, "lr": 0.002, "weight_decay": 0.01, "warmup_epochs": 0.5, "grad_clip": 1.5, "lambda_align": 0.5,
              "lambda_align_head": 0.25, "face_token_drop": 0.5, "device": "cpu", "workers": 1}
    default = TrainOptions()
    assert set(chosen) == set(RESUME_KEYS + RESUMED_TOO) - {"stem"}  # --stem: a hybrid run, in test_hybrid
    assert all(value != getattr(default, name) for name, value in chosen.items())
    flags = [a for name, value in chosen.items()
             for a in ([f"--{name.replace('_', '-')}"] if value is True else [f"--{name.replace('_', '-')}", value])]
    first = _run("train", ds, "--out", out, *flags, "--max-steps", "1", "--quiet")
    assert "stopped at --max-steps, continue with:" in first.stdout
    saved = torch.load(out / "state.pt", weights_only=False)["options"]
    assert {name: saved[name] for name in chosen} == chosen
    again = _run(*printed_command(first.stdout, "continue with: "))
    assert f"resuming {out} at epoch 2, step 1" in again.output and "trained 2/2 epochs, 2 steps" in again.stdout
    resumed = torch.load(out / "state.pt", weights_only=False)["options"]
    assert {name: resumed[name] for name in chosen} == chosen and resumed["resume"] and resumed["max_steps"] is None


def test_every_train_option_is_resumed_or_said_not_to_be():
    """Each option of `headsearch train` but --out (always in the resume command, beside DATASET) and --quiet is a
    TrainOptions field that the printed resume command carries (RESUME_KEYS, which a resume must share, or
    RESUMED_TOO), or one it leaves out on purpose (--resume itself, --max-steps)."""
    from cli.train import train as command

    names = {p.name for p in command.params if p.param_type_name == "option"} - {"out", "quiet"}
    assert names == set(RESUME_KEYS + RESUMED_TOO) | {"resume", "max_steps"}
    assert names <= {f.name for f in dataclasses.fields(TrainOptions)}


NO_TORCH = """
import sys
class NotInstalled:  # imports of these fail as when they are not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "timm", "safetensors"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
from cli.main import main
main(sys.argv[1:])
"""


def test_train_help_needs_no_torch():
    """`headsearch train --help` offers the presets, variants, stems and devices where they are defined, on an install
    without torch; `headsearch --help` lists train there too."""
    from headsearch.models.head_config import CNN_STEMS, CONFIGS, VARIANTS
    from trainer.options import DEVICES, FREEZE

    r = subprocess.run([sys.executable, "-c", NO_TORCH, "train", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for names in (CONFIGS, CNN_STEMS, FREEZE, VARIANTS, DEVICES):
        assert f"[{'|'.join(names)}]" in text
    r = subprocess.run([sys.executable, "-c", NO_TORCH, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and " train " in r.stdout, r.stderr


# --- bad inputs -----------------------------------------------------------------------------------------


def test_bad_inputs(tmp_path, dataset):
    r = _run("train", tmp_path / "nope", "--out", tmp_path / "o", "--config", "tiny", ok=False)
    assert r.exit_code == 1 and "dataset folder not found" in r.output and "Traceback" not in r.output
    (tmp_path / "empty").mkdir()
    r = _run("train", tmp_path / "empty", "--out", tmp_path / "o", "--config", "tiny", ok=False)
    assert r.exit_code == 1 and "manifest.parquet" in r.output and len(r.output.strip().splitlines()) == 1
    one = make_dataset(tmp_path / "one", identities=1, per_state=2, size=48)
    r = _run("train", one, "--out", tmp_path / "o", "--config", "tiny", ok=False)
    assert r.exit_code == 1 and "at least 2" in r.output
    r = _run("train", dataset, "--out", tmp_path / "o2", "--config", "tiny", "--resume", ok=False)
    assert r.exit_code == 1 and "nothing to resume" in r.output
    with pytest.raises(HeadsearchError, match="val-identities"):
        split_identities(["a", "b"], 1.5, 0)


def test_split_is_identity_disjoint_and_seeded():
    ids = [f"p{i}" for i in range(10) for _ in range(3)] + ["single"]
    tr, va = split_identities(ids, 0.2, 0)
    assert {ids[i] for i in tr}.isdisjoint({ids[i] for i in va})
    assert len({ids[i] for i in va}) == 2 and "single" in {ids[i] for i in tr}
    assert np.array_equal(split_identities(ids, 0.2, 0)[1], va)
    assert len(tr) + len(va) == len(ids)


# --- a whole-head teacher: head vectors, head alignment, the head skip path ---------------------------------


def test_dataset_head_vectors_read_and_older_folders(tmp_path, dataset):
    old = load_dataset(dataset)  # no teacher_head_index column: a folder from before head vectors
    assert old.head_dim == 0 and not old.has_head_vectors and (old.teacher_head_index == -1).all()
    ds = make_dataset(tmp_path / "heads", identities=3, per_state=2, size=48, head_dim=24)
    info = load_dataset(ds)
    assert info.has_head_vectors and info.head_dim == 24 and info.teacher_head.shape == (len(info), 24)
    assert info.teacher_head_index.tolist() == list(range(len(info)))
    # Refused with one line: the manifest points at head vectors that are missing or too few.
    (ds / "teacher_head.npy").rename(ds / "moved.npy")
    r = _run("train", ds, "--out", tmp_path / "o", "--config", "tiny", "--lambda-align-head", "1", ok=False)
    assert r.exit_code == 1 and "teacher_head.npy is missing" in r.output and len(r.output.strip().splitlines()) == 1
    np.save(ds / "teacher_head.npy", np.load(ds / "moved.npy")[:3])
    r = _run("train", ds, "--out", tmp_path / "o", "--config", "tiny", ok=False)
    assert r.exit_code == 1 and "teacher_head_index up to" in r.output and "Traceback" not in r.output


def test_head_alignment_needs_head_vectors(tmp_path, dataset):
    for flag in (["--lambda-align-head", "1"], ["--head-skip"]):
        r = _run("train", dataset, "--out", tmp_path / "o", "--config", "tiny", *flag, ok=False)
        assert r.exit_code == 1 and "needs teacher head vectors" in r.output and "sface+lite0" in r.output
        assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("head_skip", [False, True])
def test_train_with_head_alignment(tmp_path, head_skip):
    ds = make_dataset(tmp_path / "ds", identities=4, per_state=3, size=64, head_dim=24)
    result = train(ds, tmp_path / "run", _opts(head_skip=head_skip, lambda_align_head=1.0, val_identities=0.0, epochs=1,
                                                   batch_size=12))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    epoch = [e for e in log if e["event"] == "epoch"][-1]
    assert np.isfinite(epoch["align_head"]) and 0.0 <= epoch["align_head"] <= 2.0
    model = load_checkpoint(result["last"])
    assert model.cfg.head_dim == 24 and model.cfg.z_head_dim == 24 and model.cfg.out_dim == TEACHER_DIM
    assert model.cfg.head_skip is head_skip and ("head_beta" in dict(model.named_parameters())) is head_skip
    card = json.loads((tmp_path / "run" / "last.safetensors.json").read_text())["card"]
    assert card["lambda_align_head"] == 1.0 and card["head_skip"] is head_skip
    if head_skip:  # starts near the teacher: the learned part is added at beta ~0.1
        info = load_dataset(ds)
        t = torch.from_numpy(info.teacher_head[:4])
        with torch.no_grad():
            _, z_head = model(torch.zeros(4, 3, 112, 112), head=t, head_mask=torch.tensor([True, True, True, False]))
        cos = torch.nn.functional.cosine_similarity(z_head, t, dim=1)
        assert (cos[:3] > 0.9).all() and cos[3] < 0.9  # the masked sample has the learned part alone
