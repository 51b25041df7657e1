"""The five-landmark yaw of `headsearch/detection/pose.py` against a head-pose reference, and its constant fitted.

    python research/yaw_reference.py ../shared/data [--plot yaw.png] [--mediapipe-python /tmp/mp/bin/python]

Faces: RetinaFace (`FaceDetector`) on every 5th frame of every video under the folder (every 20th of the frontal
MEAD talking heads, `*_front_*`; the 5-frame face-api.js decode fixture left out) and on every photo, faces at least
40 px.

Reference: dlib's 68-point shape predictor (`face_recognition_models`) run in a dlib-style box made from the RetinaFace
box (square, 0.80 face heights, 0.056 face heights lower: dlib's own HOG detector's box on these frames, median of
442 matched faces, `--measure-dlib-box`; the tall RetinaFace box itself squeezes dlib's shapes narrow, which PnP
reads as a turn), then `cv2.solvePnP` (SQPnP, focal length = image width) of 33 of its points (brows, nose, eyes,
mouth corners; not the jaw line, which is a silhouette, not a fixed point) on the same points of MediaPipe's
canonical face model (`canonical_face_model.obj`, Apache-2.0, numbers copied below), yaw relative to the line of
sight. The much-copied 6-point model (nose tip, chin, eye corners, mouth corners: nose 135 in front of eye corners 450
apart, where real faces and the canonical model have about 0.48 of the eye span) reads turns ~1.5x too large and
reads an open mouth as a turn; it is printed for comparison.
A face's reference counts only where dlib's eyes, nose tip and mouth corners lie within 0.08 face heights (mean) of
RetinaFace's: past ~40° dlib fails silently (it puts a near-frontal shape on 3/4 views and profiles and reads them
0-40°), and this rejects those faces, so the reference has turned faces up to ~40° and none past 60°.
Cross-check (optional): MediaPipe's face mesh (mediapipe 0.10.14, whose wheel bundles face_landmark.tflite, nothing
downloaded) on a crop around each face, solved on the same 33 canonical points; it agrees with the dlib reference
(MAE 1.8°) and follows turns further, but saturates near 55° and finds no full profile. It needs its own venv, as
mediapipe's protobuf pin clashes with the project's: `python -m venv /tmp/mp && /tmp/mp/bin/pip install mediapipe==0.10.14 av`.

Prints faces, Pearson r, mean absolute error overall and per band of the reference (0-30, 30-60, 60+), the fitted
constant `YAW_K`, what the estimate reads on the full profiles of `short_hamilton_clip.mp4` (frames 20-81, the
close-up's face; visually labelled in LABELS.csv) and on the faces the reference rejects; `--plot` writes a scatter.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headsearch.detection.faces import FaceDetector, yaw_hint  # noqa: E402
from headsearch.detection.pose import YAW_K, yaw_features, yaws_from_landmarks  # noqa: E402

MIN_FACE_PX = 40
DLIB_SIDE_PER_FACE_HEIGHT = 0.80
DLIB_DROP_PER_FACE_HEIGHT = 0.056
MAX_LANDMARK_DISAGREEMENT = 0.08  # mean distance of dlib's five points from RetinaFace's, in face heights
TRUSTED_REFERENCE = 60.0  # the constant is fitted on reference yaws up to this
PROFILE_CLIP, PROFILE_FRAMES, PROFILE_MIN_HEIGHT = "short_hamilton_clip.mp4", range(20, 82), 100

# dlib 68-point index, MediaPipe face-mesh index, canonical face model x, y, z (cm; x image-right, y up, z towards the
# viewer) from mediapipe/modules/face_geometry/data/canonical_face_model.obj (Apache-2.0). The pairing of dlib's points
# with mesh vertices: the nearest vertex, most often, over 755 near-frontal faces both found here (made symmetric).
CANONICAL = np.array([
    (17, 70, -5.721, 4.255, 2.831), (18, 63, -4.986, 4.802, 3.752), (19, 105, -3.987, 5.109, 4.466),
    (20, 66, -2.760, 5.101, 5.016), (21, 107, -1.396, 5.012, 5.316), (22, 336, 1.396, 5.012, 5.316),
    (23, 296, 2.760, 5.101, 5.016), (24, 334, 3.987, 5.109, 4.466), (25, 293, 4.986, 4.802, 3.752),
    (26, 300, 5.721, 4.255, 2.831), (27, 168, 0.000, 3.271, 5.236), (28, 197, 0.000, 1.728, 6.317),
    (29, 195, 0.000, 1.059, 6.775), (30, 4, 0.000, -0.463, 7.587), (31, 75, -1.044, -1.465, 5.662),
    (32, 99, -0.662, -1.819, 5.864), (33, 2, 0.000, -2.089, 6.058), (34, 328, 0.662, -1.819, 5.864),
    (35, 305, 1.044, -1.465, 5.662), (36, 33, -4.446, 2.664, 3.173), (37, 160, -3.670, 2.928, 3.724),
    (38, 158, -2.724, 2.962, 3.872), (39, 133, -1.856, 2.585, 3.758), (40, 153, -2.724, 2.316, 3.777),
    (41, 144, -3.670, 2.360, 3.635), (42, 362, 1.856, 2.585, 3.758), (43, 385, 2.724, 2.962, 3.872),
    (44, 387, 3.670, 2.928, 3.724), (45, 263, 4.446, 2.664, 3.173), (46, 373, 3.670, 2.360, 3.635),
    (47, 380, 2.724, 2.316, 3.777), (48, 61, -2.456, -4.343, 4.284), (54, 291, 2.456, -4.343, 4.284),
])
DLIB_IDS, MESH_IDS, CANONICAL_XYZ = CANONICAL[:, 0].astype(int), CANONICAL[:, 1].astype(int), CANONICAL[:, 2:]
# The much-copied 6-point model: nose tip, chin, eye outer corners, mouth corners (dlib 30, 8, 36, 45, 48, 54).
SIX_IDS = [30, 8, 36, 45, 48, 54]
SIX_XYZ = np.array([(0, 0, 0), (0, -330, -65), (-225, 170, -135), (225, 170, -135), (-150, -150, -125), (150, -150, -125)], float)


@dataclass
class Face:
    source: str
    frame: int
    box: np.ndarray
    landmarks: np.ndarray
    hint: float
    width: int
    height: int
    dlib68: np.ndarray = field(default=None)
    reference: float = np.nan
    six_point: float = np.nan
    disagreement: float = np.nan
    mediapipe: float = np.nan


def media(root: Path) -> list[tuple[Path, int]]:
    """Videos with the stride to sample them at, and photos (stride 0)."""
    out = []
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() == ".mp4" and "face-api.js" not in path.parts:
            out.append((path, 20 if "_front_" in path.name else 5))
        elif path.suffix.lower() in (".jpg", ".jpeg", ".png"):
            out.append((path, 0))
    return out


def frames(path: Path, stride: int):
    """(frame index, RGB) of every `stride`-th frame of a video; (-1, RGB) of a photo (stride 0)."""
    if not stride:
        bgr = cv2.imread(str(path))
        if bgr is not None:
            yield -1, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        return
    import av

    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i % stride == 0:
                yield i, frame.to_ndarray(format="rgb24")


def dlib_rect(box: np.ndarray):
    import dlib

    h = box[3] - box[1]
    side = DLIB_SIDE_PER_FACE_HEIGHT * h
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2 + DLIB_DROP_PER_FACE_HEIGHT * h
    return dlib.rectangle(*(int(round(v)) for v in (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2)))


def pnp_yaw(points: np.ndarray, model: np.ndarray, width: int, height: int) -> float:
    """Yaw (degrees, positive: face turned towards the image's right) of a rigid `model` seen at `points`, relative
    to the line of sight (a face at the frame's edge looking at the camera reads 0), with focal length = width."""
    camera = np.array([[width, 0, width / 2], [0, width, height / 2], [0, 0, 1]], float)
    _, rvec, tvec = cv2.solvePnP(model.astype(float), points.astype(float), camera, None, flags=cv2.SOLVEPNP_SQPNP)
    normal = cv2.Rodrigues(rvec)[0][:, 2]  # model +z (out of the face) in camera coordinates
    t = tvec.ravel()
    yaw = np.degrees(np.arctan2(normal[0], -normal[2]) - np.arctan2(-t[0], t[2]))
    return float((yaw + 180) % 360 - 180)


def collect(root: Path) -> list[Face]:
    import dlib
    import face_recognition_models

    detector = FaceDetector()
    predictor = dlib.shape_predictor(face_recognition_models.pose_predictor_model_location())
    faces = []
    for path, stride in media(root):
        for i, rgb in frames(path, stride):
            h, w = rgb.shape[:2]
            for d in detector.detect(rgb):
                box = np.array([d.box.x1, d.box.y1, d.box.x2, d.box.y2])
                if min(d.box.width, d.box.height) < MIN_FACE_PX:
                    continue
                f = Face(str(path.relative_to(root)), i, box, np.asarray(d.landmarks, float), yaw_hint(d), w, h)
                shape = predictor(rgb, dlib_rect(box))
                f.dlib68 = np.array([(p.x, p.y) for p in shape.parts()], float)
                f.reference = pnp_yaw(f.dlib68[DLIB_IDS], CANONICAL_XYZ, w, h)
                f.six_point = pnp_yaw(f.dlib68[SIX_IDS], SIX_XYZ, w, h)
                five = np.stack([f.dlib68[36:42].mean(0), f.dlib68[42:48].mean(0), f.dlib68[30], f.dlib68[48], f.dlib68[54]])
                f.disagreement = float(np.linalg.norm(five - f.landmarks, axis=1).mean() / (box[3] - box[1]))
                faces.append(f)
        if stride:
            print(f"  {path.relative_to(root)}: {sum(f.source == str(path.relative_to(root)) for f in faces)} faces", file=sys.stderr)
    return faces


# Runs in the mediapipe venv: argv = faces.json, out.npy. Face mesh on a square crop, 2 face heights, around each face.
MEDIAPIPE_WORKER = r"""
import json, sys
import av, cv2, numpy as np, mediapipe as mp
todo = json.load(open(sys.argv[1]))
mesh = mp.solutions.face_mesh.FaceMesh(static_image_mode=True, max_num_faces=3, min_detection_confidence=0.3)
out = np.full((len(todo), 468, 2), np.nan)
wanted = {}
for k, (path, frame, box) in enumerate(todo):
    wanted.setdefault(path, {}).setdefault(frame, []).append((k, box))

def images(path, frames):
    if -1 in frames:
        yield -1, cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        return
    with av.open(path) as c:
        for i, fr in enumerate(c.decode(video=0)):
            if i in frames:
                yield i, fr.to_ndarray(format="rgb24")

for path, frames in wanted.items():
    for i, img in images(path, frames):
        for k, (x1, y1, x2, y2) in frames[i]:
            side = int(round(2 * (y2 - y1)))
            ox, oy = int(round((x1 + x2) / 2 - side / 2)), int(round((y1 + y2) / 2 - side / 2))
            pad = cv2.copyMakeBorder(img, side, side, side, side, cv2.BORDER_CONSTANT)
            crop = np.ascontiguousarray(pad[oy + side:oy + 2 * side, ox + side:ox + 2 * side])
            res = mesh.process(cv2.resize(crop, (192, 192)) if side < 192 else crop)
            best = None
            for lm in res.multi_face_landmarks or []:
                a = np.array([(p.x, p.y) for p in lm.landmark])
                dist = np.hypot(*(a[1] - 0.5))
                if dist < 0.25 and (best is None or dist < best[0]):
                    best = (dist, a)
            if best is not None:
                out[k] = best[1] * side + (ox, oy)
np.save(sys.argv[2], out)
"""


def add_mediapipe(faces: list[Face], root: Path, python: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        todo = Path(tmp) / "faces.json"
        todo.write_text(json.dumps([(str(root / f.source), f.frame, f.box.tolist()) for f in faces]))
        subprocess.run([python, "-c", MEDIAPIPE_WORKER, str(todo), str(Path(tmp) / "mesh.npy")], check=True,
                       stderr=subprocess.DEVNULL)
        meshes = np.load(Path(tmp) / "mesh.npy")
    for f, m in zip(faces, meshes, strict=True):
        if not np.isnan(m).any():
            f.mediapipe = pnp_yaw(m[MESH_IDS], CANONICAL_XYZ, f.width, f.height)


def measure_dlib_box(root: Path) -> None:
    """Where dlib's own (HOG) detector puts its box, relative to RetinaFace's, on every 15th frame."""
    import dlib

    hog, detector, rows = dlib.get_frontal_face_detector(), FaceDetector(), []
    for path, stride in media(root):
        for _, rgb in frames(path, stride * 3):
            found = hog(rgb, 1)
            for d in detector.detect(rgb):
                b = d.box
                if min(b.width, b.height) < MIN_FACE_PX:
                    continue
                for r in found:
                    dx, dy = (r.left() + r.right()) / 2 - b.center[0], (r.top() + r.bottom()) / 2 - b.center[1]
                    if abs(dx) < b.width / 3 and abs(dy) < b.height / 3:
                        rows.append((dy / b.height, r.width() / b.height))
    drop, side = np.median(rows, axis=0)
    print(f"dlib box vs RetinaFace box, median of {len(rows)} faces: side {side:.3f} face heights, centre {drop:.3f} lower")


def balanced_mae(estimate: np.ndarray, reference: np.ndarray) -> float:
    """Mean absolute error with each 15° band of |reference| weighted equally (bands of under 5 faces left out): the
    faces are mostly near frontal, where landmark noise pulls a plain fit's constant down and turned faces read low."""
    a = np.abs(reference)
    bands = [(a >= lo) & (a < lo + 15) for lo in range(0, 90, 15)]
    return float(np.mean([np.abs(estimate[b] - reference[b]).mean() for b in bands if b.sum() >= 5]))


def fit_k(offset: np.ndarray, width: np.ndarray, target: np.ndarray) -> float:
    """The YAW_K of least band-balanced mean absolute error."""
    ks = np.arange(0.5, 4.0, 0.01)
    errors = [balanced_mae(np.degrees(np.arctan2(k * offset, np.maximum(width, 0))), target) for k in ks]
    return round(float(ks[int(np.argmin(errors))]), 2)


def asin_yaw(ratio: np.ndarray, c: float) -> np.ndarray:
    """The alternative normalised by the eye-mouth distance alone: yaw = asin(offset / (c height))."""
    return np.degrees(np.arcsin(np.clip(ratio / c, -1, 1)))


def fit_asin(ratio: np.ndarray, target: np.ndarray) -> float:
    cs = np.arange(0.2, 1.5, 0.005)
    return float(cs[int(np.argmin([balanced_mae(asin_yaw(ratio, c), target) for c in cs]))])


def agreement(name: str, estimate: np.ndarray, reference: np.ndarray) -> None:
    err = np.abs(estimate - reference)
    bands = []
    for lo, hi in ((0, 30), (30, 60), (60, 181)):
        m = (np.abs(reference) >= lo) & (np.abs(reference) < hi)
        bands.append(f"{lo}-{hi if hi < 181 else ''}: {err[m].mean():.1f} ({m.sum()})" if m.any() else f"{lo}-{hi if hi < 181 else ''}: - (0)")
    r = np.corrcoef(estimate, reference)[0, 1]
    print(f"{name}: n {len(err)}, Pearson r {r:.3f}, MAE {err.mean():.1f}° [{', '.join(bands)}], bias {np.mean(estimate - reference):+.1f}°")


def plot(path: Path, faces: list[Face], estimate: np.ndarray, trusted: np.ndarray, profile: np.ndarray, k: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = np.array([f.reference for f in faces])
    mp_ref = np.array([f.mediapipe for f in faces])
    groups = np.array([f.source.split("/")[0] if "_front_" not in f.source else "MEAD" for f in faces])
    fig, axes = plt.subplots(1, 3, figsize=(21, 7))
    dlib_label = "reference yaw: dlib 68 + PnP on the canonical face, degrees"
    ax = axes[0]
    for g in np.unique(groups):
        m = trusted & (groups == g)
        ax.scatter(ref[m], estimate[m], s=7, label=f"{g} ({m.sum()})")
    rejected = ~trusted & ~profile
    ax.scatter(ref[rejected], estimate[rejected], s=12, marker="x", c="0.6", label=f"reference rejected: dlib failed ({rejected.sum()})")
    ax.scatter(np.full(profile.sum(), -90.0), estimate[profile], s=25, marker="<", c="red",
               label=f"full profiles, placed at -90 ({profile.sum()})")
    ax.set(xlabel=dlib_label, ylabel=f"yaw_from_landmarks (k={k:.2f}), degrees", title="five-landmark yaw against the dlib reference")
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[1]
    found = ~np.isnan(mp_ref)
    ax.scatter(mp_ref[found & trusted], estimate[found & trusted], s=7, c="tab:blue", label=f"dlib reference trusted ({np.sum(found & trusted)})")
    ax.scatter(mp_ref[found & ~trusted], estimate[found & ~trusted], s=12, marker="x", c="tab:red",
               label=f"dlib reference rejected ({np.sum(found & ~trusted)})")
    ax.set(xlabel="MediaPipe face mesh + PnP on the canonical face, degrees", ylabel=f"yaw_from_landmarks (k={k:.2f}), degrees",
           title="five-landmark yaw against MediaPipe" + ("" if found.any() else " (not run: --mediapipe-python)"))
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[2]
    six = np.array([f.six_point for f in faces])
    ax.scatter(ref[trusted], six[trusted], s=6, c="tab:orange", label="dlib 68 + PnP on the 6-point model")
    ax.scatter(ref[trusted & found], mp_ref[trusted & found], s=6, c="tab:blue", label="MediaPipe face mesh + PnP on the canonical face")
    ax.set(xlabel=dlib_label, ylabel="other reference, degrees", title="the references against each other (trusted faces)")
    ax.legend(fontsize=7, loc="upper left")
    for ax in axes:
        ax.plot([-90, 90], [-90, 90], "k-", lw=0.8)
        ax.set(xlim=(-95, 95), ylim=(-95, 95), aspect="equal")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=70)


def spread(values: np.ndarray, unit: str = "°", digits: int = 0) -> str:
    if not len(values):
        return "none"
    return f"median {np.median(values):+.{digits}f}{unit}, range {values.min():+.{digits}f}..{values.max():+.{digits}f}{unit}"


def report(faces: list[Face], plot_path: Path | None) -> None:
    landmarks = np.stack([f.landmarks for f in faces])
    offset, width, height = yaw_features(landmarks)
    ref = np.array([f.reference for f in faces])
    mp_ref = np.array([f.mediapipe for f in faces])
    profile = np.array([f.source.endswith(PROFILE_CLIP) and f.frame in PROFILE_FRAMES and f.box[3] - f.box[1] > PROFILE_MIN_HEIGHT
                        for f in faces])
    # dlib's frontal shapes on the profiles can land near RetinaFace's points: they never count.
    trusted = (np.array([f.disagreement for f in faces]) < MAX_LANDMARK_DISAGREEMENT) & ~profile
    fit = trusted & (np.abs(ref) < TRUSTED_REFERENCE)
    k = fit_k(offset[fit], width[fit], ref[fit])
    estimate = yaws_from_landmarks(landmarks, k)

    print(f"faces: {len(faces)} from {len({f.source for f in faces})} videos and photos ({np.sum([f.frame < 0 for f in faces])} in photos); reference trusted on {trusted.sum()} (dlib's points "
          f"within {MAX_LANDMARK_DISAGREEMENT} face heights of RetinaFace's), {profile.sum()} full profiles apart")
    ks = np.arange(0.5, 4.0, 0.01)
    plain = ks[int(np.argmin([np.abs(np.degrees(np.arctan2(q * offset[fit], np.maximum(width[fit], 0))) - ref[fit]).mean() for q in ks]))]
    print(f"fitted YAW_K = {k:.2f} (band-balanced least MAE on {fit.sum()} trusted faces under {TRUSTED_REFERENCE:.0f}°; plain least MAE: "
          f"{plain:.2f}; the canonical face's own W/D: 1.56; pose.py ships {YAW_K})")
    agreement("yaw_from_landmarks", estimate[trusted], ref[trusted])
    if k != YAW_K:
        agreement(f"yaw_from_landmarks, shipped k={YAW_K}", yaws_from_landmarks(landmarks)[trusted], ref[trusted])
    c = fit_asin(offset[fit] / height[fit], ref[fit])
    agreement(f"alternative asin(offset / ({c:.2f} eye-mouth distance))", asin_yaw(offset / height, c)[trusted], ref[trusted])
    hint = np.array([f.hint for f in faces])
    scale = np.sum(hint[fit] * ref[fit]) / np.sum(hint[fit] ** 2)
    agreement(f"faces.yaw_hint x {scale:.0f}° (least squares)", scale * hint[trusted], ref[trusted])
    agreement("reference with the 6-point model instead", np.array([f.six_point for f in faces])[trusted], ref[trusted])
    found = ~np.isnan(mp_ref)
    if found.any():
        print(f"MediaPipe face mesh found {found.sum()} of {len(faces)} faces, {np.sum(found & profile)} of the {profile.sum()} profiles; "
              f"its own fit: YAW_K = {fit_k(offset[found], width[found], mp_ref[found]):.2f}")
        agreement("MediaPipe vs the reference", mp_ref[found & trusted], ref[found & trusted])
        agreement("yaw_from_landmarks vs MediaPipe", estimate[found], mp_ref[found])
        agreement("  on the faces the dlib reference rejects", estimate[found & ~trusted & ~profile], mp_ref[found & ~trusted & ~profile])
    print(f"full profiles ({PROFILE_CLIP} frames {PROFILE_FRAMES.start}-{PROFILE_FRAMES.stop - 1}, visually ~90°), n {profile.sum()}: "
          f"estimate {spread(estimate[profile])}, width/height {spread(width[profile] / height[profile], '', 2)}, "
          f"dlib reference (untrusted) {spread(ref[profile])}")
    rest = ~trusted & ~profile
    print(f"faces the dlib reference rejects, n {rest.sum()}: |estimate| {spread(np.abs(estimate[rest])).replace('+', '')}, "
          f"{np.sum(np.abs(estimate[rest]) > 60)} past 60°; dlib reads them {spread(np.abs(ref[rest])).replace('+', '')}")
    print(f"frontal width/height (|reference| < 10°): {np.median((width / height)[trusted & (np.abs(ref) < 10)]):.2f}")
    if plot_path:
        plot(plot_path, faces, estimate, trusted, profile, k)
        print(f"wrote {plot_path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path, help="the shared media folder (../shared/data)")
    ap.add_argument("--plot", type=Path, help="write a scatter PNG here")
    ap.add_argument("--mediapipe-python", help="a Python with mediapipe 0.10.14 and av: adds the face-mesh cross-check")
    ap.add_argument("--measure-dlib-box", action="store_true", help="measure the dlib box constants and stop")
    args = ap.parse_args()
    if args.measure_dlib_box:
        measure_dlib_box(args.data)
        return
    faces = collect(args.data)
    if args.mediapipe_python:
        add_mediapipe(faces, args.data, args.mediapipe_python)
    report(faces, args.plot)


if __name__ == "__main__":
    main()
