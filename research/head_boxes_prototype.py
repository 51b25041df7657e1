"""Prototype: square HEAD boxes from MoveNet MultiPose keypoints, merged with face-derived heads.

numpy + onnxruntime + opencv (+ PyAV to read video frames) only; a measurement tool for issue 17,
not production code. Subcommands:

    show  FILE TIME [--side 512] [--out x.png]    draw faces, keypoints and both kinds of head boxes
    eval  [--set bench/sets/heads.csv] [--cache c.pkl] [--fit [--fit-on TEXT]] [--rule JSON]
                                                   recall per view and precision of faces / keypoints / merged
    time  [--sides 256,512] [--tiles 1,3]          MoveNet ms per frame (2 threads)

The rule (`Rule` defaults, fitted by `eval --fit` on bench/sets/heads.csv):
- MoveNet sees the frame in TILES = 3 overlapping windows along its long side (each at least as long
  as the short side), each letterboxed to a long side of SIDE = 512 px (padded to multiples of 32):
  MoveNet reports 6 people at most per pass, and a crowd frame holds 10-13 heads.
- A person counts when its box score >= 0.1. Head points: nose, eyes, ears with score >= 0.2;
  shoulders count when both score >= 0.2. At least 2 head points are needed (or 1 and both shoulders).
- Side of the square = max(1.6 x the largest distance between two head points,
  0.7 x the shoulder width when both shoulders are seen).
- Centre: x halfway between the ears' mean and the face points' mean (just the points' mean when
  one kind is missing); y at the head points' mean minus 0.1 x side (hair above eyes and ears).
- Keypoint heads under 24 px are dropped; of two keypoint heads with IoU >= 0.5 (the same person
  seen in two windows) the higher-scored one stays (score = person score x mean head-point score).
- Face heads: headsearch.detection.faces.detect_heads (RetinaFace, default settings), each box scaled by 0.8
  about its centre (as is, head_box_from_face's squares are larger than the labelled heads: faces-only
  F1 at IoU 0.5 peaks at 0.8 over 0.6-1.0).
- Merge: a keypoint head is the same head as a face head when the face box's centre lies inside it
  or their IoU >= 0.2; then only the face head stays. The keypoint heads left over are new heads.
- Every box is clipped to the frame before IoU (the labels stop at the frame edge).

Measured on bench/sets/heads.csv (27 frames; 57 face, 37 profile, 39 back heads), IoU >= 0.5:

    faces as is (scale 1.0)  face 0.632  profile 0.649  back 0.000   precision 0.750 (60/80)
    faces (scale 0.8)        face 0.825  profile 0.811  back 0.000   precision 0.963 (77/80)
    keypoints only           face 0.719  profile 0.270  back 0.436   precision 0.829 (68/82)
    merged                   face 0.895  profile 0.919  back 0.436   precision 0.919 (102/111)
                             (face-derived heads 77/80 correct, keypoint-only heads 25/31)

These are fitted on the same 27 frames (in-sample). Fitting on the 9 crowd frames alone and scoring
the 18 others (hamilton, goldeneye): keypoints add nothing there, merged = faces (face 9/9, profile
23/23, back 0/9, precision 0.914). MoveNet finds no person for the hamilton clip's close-up turned-away
head nor for its out-of-focus foreground heads (all 9 backs there), nor for crowd heads of about 30-37
px; the input size matters a lot on so few people (back recall 0.205-0.436 for SIDE 256-640 with the
rest fixed). Cost on this 2-core machine while other jobs ran (load average 4-10; medians of 20
frames of the 1080p crowd): SIDE 256 whole frame 40 ms, SIDE 512 whole frame 113 ms, SIDE 512 in 3
windows 633 ms; on 640x360 frames SIDE 512 whole frame 112 ms, 3 windows 184 ms.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODEL = ROOT / "headsearch" / "models" / "weights" / "movenet_multipose_lightning.onnx"
DATA = ROOT.parent / "shared" / "data"
SET = ROOT / "bench" / "sets" / "heads.csv"

NOSE, L_EYE, R_EYE, L_EAR, R_EAR, L_SH, R_SH = range(7)
VIEWS = ("face", "profile", "back")


@dataclass(frozen=True)
class Rule:
    """Defaults: fitted by `eval --fit` on bench/sets/heads.csv (see the module docstring)."""
    side: int = 512           # MoveNet input long side
    person_min: float = 0.1   # MoveNet person box score
    kp_min: float = 0.2       # keypoint score for nose/eyes/ears/shoulders
    min_points: int = 2       # head points needed without shoulders
    spread_k: float = 1.6     # side per largest head-point distance
    shoulder_k: float = 0.7   # side per shoulder width (lower bound)
    ear_w: float = 0.5        # weight of the ears' centre in x
    raise_k: float = 0.1      # centre above the mean head point, per side
    same_iou: float = 0.2     # keypoint head vs face head: same head
    tiles: int = 3            # MoveNet passes: 1 = whole frame; 2, 3 = overlapping windows (6 people each)
    face_scale: float = 0.8   # face-derived head boxes scaled about their centre (1.0 = headsearch's as is)
    shoulders_first: bool = False  # size from the shoulders alone when both are seen (else the larger cue)
    dedupe_iou: float = 0.5   # keypoint heads overlapping a better one this much are the same head
    min_px: float = 24.0      # keypoint heads smaller than this (side, frame px) are dropped


# ----------------------------------------------------------------------------------------------
# MoveNet
# ----------------------------------------------------------------------------------------------

class MoveNet:
    def __init__(self, path: Path = MODEL, threads: int = 2):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    @staticmethod
    def letterbox(rgb: np.ndarray, side: int):
        h, w = rgb.shape[:2]
        scale = side / max(h, w)
        nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
        small = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        ph, pw = -(-nh // 32) * 32, -(-nw // 32) * 32
        x = np.zeros((1, ph, pw, 3), np.int32)
        x[0, :nh, :nw] = small
        return x, scale

    def __call__(self, rgb: np.ndarray, side: int, tiles: int = 1) -> np.ndarray:
        """People as rows of 17 keypoints (x, y, score) in frame pixels plus (x1, y1, x2, y2, score):
        an array (6 * tiles, 56). With tiles > 1 the frame's long side is cut into that many
        overlapping windows (each as long as the short side, at least), each seen at `side`."""
        if tiles > 1:
            h, w = rgb.shape[:2]
            horizontal = w >= h
            length = w if horizontal else h
            win = max(min(w, h), int(np.ceil(length / tiles * 1.25)))
            win = min(win, length)
            starts = np.linspace(0, length - win, tiles).round().astype(int)
            parts = []
            for s0 in starts:
                crop = rgb[:, s0:s0 + win] if horizontal else rgb[s0:s0 + win]
                p = self(np.ascontiguousarray(crop), side)
                k = p[:, :51].reshape(-1, 17, 3)
                k[..., 0 if horizontal else 1] += s0
                p[:, :51] = k.reshape(-1, 51)
                p[:, [51, 53] if horizontal else [52, 54]] += s0
                parts.append(p)
            return np.concatenate(parts)
        x, scale = self.letterbox(rgb, side)
        out = self.session.run(None, {"input": x})[0][0]
        ph, pw = x.shape[1], x.shape[2]
        people = np.zeros_like(out)
        kp = out[:, :51].reshape(6, 17, 3)
        res = np.stack([kp[..., 1] * pw / scale, kp[..., 0] * ph / scale, kp[..., 2]], -1)
        people[:, :51] = res.reshape(6, 51)
        people[:, 51:55] = out[:, [52, 51, 54, 53]] * np.array([pw, ph, pw, ph]) / scale
        people[:, 55] = out[:, 55]
        return people


# ----------------------------------------------------------------------------------------------
# head boxes
# ----------------------------------------------------------------------------------------------

@dataclass
class Head:
    box: tuple  # x1, y1, x2, y2
    score: float
    source: str  # "face" or "keypoints"
    view: str    # guessed view
    face_center: tuple | None = None


def iou(a, b) -> float:
    """IoU of two (x1, y1, x2, y2) boxes: the product's `Box.iou`."""
    from schemas.records import Box

    return Box(*a).iou(Box(*b))


def keypoint_view(kp: np.ndarray, t: float) -> str:
    eyes = int(kp[L_EYE, 2] >= t) + int(kp[R_EYE, 2] >= t)
    nose = kp[NOSE, 2] >= t
    if eyes == 2 and nose:
        return "face"
    if eyes or nose:
        return "profile"
    return "back"


def head_from_keypoints(person: np.ndarray, rule: Rule) -> Head | None:
    if person[55] < rule.person_min:
        return None
    kp = person[:51].reshape(17, 3)
    ok = kp[:, 2] >= rule.kp_min
    face_idx = [i for i in (NOSE, L_EYE, R_EYE) if ok[i]]
    ear_idx = [i for i in (L_EAR, R_EAR) if ok[i]]
    head_idx = face_idx + ear_idx
    shoulders = ok[L_SH] and ok[R_SH]
    if len(head_idx) < rule.min_points and not (head_idx and shoulders):
        return None
    pts = kp[head_idx, :2]
    spread = max((np.linalg.norm(a - b) for a, b in itertools.combinations(pts, 2)), default=0.0)
    side = rule.spread_k * spread
    if shoulders and rule.shoulder_k > 0:
        by_shoulders = rule.shoulder_k * float(np.linalg.norm(kp[L_SH, :2] - kp[R_SH, :2]))
        side = by_shoulders if rule.shoulders_first else max(side, by_shoulders)
    if side <= 1:
        return None
    if ear_idx and face_idx:
        cx = rule.ear_w * kp[ear_idx, 0].mean() + (1 - rule.ear_w) * kp[face_idx, 0].mean()
    else:
        cx = pts[:, 0].mean()
    cy = pts[:, 1].mean() - rule.raise_k * side
    score = float(person[55] * kp[head_idx, 2].mean())
    return Head((cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2), score, "keypoints",
                keypoint_view(kp, rule.kp_min))


def keypoint_heads(people: np.ndarray, rule: Rule) -> list[Head]:
    heads = [h for h in (head_from_keypoints(p, rule) for p in people) if h is not None]
    heads = [h for h in heads if h.box[2] - h.box[0] >= rule.min_px]
    heads.sort(key=lambda h: -h.score)
    kept: list[Head] = []
    for h in heads:
        if all(iou(h.box, k.box) < rule.dedupe_iou for k in kept):
            kept.append(h)
    return kept


def scaled(h: Head, k: float) -> Head:
    if k == 1.0:
        return h
    cx, cy = (h.box[0] + h.box[2]) / 2, (h.box[1] + h.box[3]) / 2
    r = (h.box[2] - h.box[0]) * k / 2
    return replace(h, box=(cx - r, cy - r, cx + r, cy + r))


def face_heads(detector, rgb: np.ndarray) -> list[Head]:
    from headsearch.detection.faces import detect_heads, yaw_hint

    out = []
    for d in detect_heads(detector, rgb):
        b = d.head
        yaw = abs(yaw_hint(d.face))
        out.append(Head((b.x1, b.y1, b.x2, b.y2), float(d.score), "face", "face" if yaw < 0.25 else "profile",
                        d.face.box.center))
    return out


def merge(faces: list[Head], kps: list[Head], rule: Rule) -> list[Head]:
    result = list(faces)
    for h in kps:
        same = False
        for f in faces:
            fx, fy = f.face_center
            inside = h.box[0] <= fx <= h.box[2] and h.box[1] <= fy <= h.box[3]
            if inside or iou(h.box, f.box) >= rule.same_iou:
                same = True
                break
        if not same:
            result.append(h)
    return result


# ----------------------------------------------------------------------------------------------
# frames and the labelled set
# ----------------------------------------------------------------------------------------------

def read_frame(rel: str, t: float, data: Path = DATA) -> np.ndarray:
    path = data / rel
    if path.suffix.lower() in (".jpg", ".jpeg", ".png"):
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    import av

    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        half = 0.5 / float(stream.average_rate or 25)
        c.seek(max(0, int((t - 1.0) / stream.time_base)), stream=stream, backward=True)
        for f in c.decode(stream):
            if f.time is not None and abs(f.time - t) <= half:
                return f.to_ndarray(format="rgb24")
            if f.time is not None and f.time > t + half:
                break
    raise ValueError(f"no frame at {t} s in {rel}")


def load_set(path: Path = SET):
    frames: dict[tuple[str, float], list[dict]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["file"], float(row["time"]))
            frames.setdefault(key, []).append({
                "box": tuple(float(row[k]) for k in ("x1", "y1", "x2", "y2")), "view": row["view"],
                "ignore": row.get("ignore", "") not in ("", "0")})
    return frames


def match(dets: list[Head], gts: list[dict], thr: float = 0.5):
    """Greedy by score: (per-gt matched detection index or None, per-detection 'tp'/'fp'/'ignored')."""
    order = sorted(range(len(dets)), key=lambda i: -dets[i].score)
    gt_hit = [None] * len(gts)
    status = ["fp"] * len(dets)
    for i in order:
        best, best_j = thr, None
        for j, g in enumerate(gts):
            if gt_hit[j] is not None or g["ignore"]:
                continue
            o = iou(dets[i].box, g["box"])
            if o >= best:
                best, best_j = o, j
        if best_j is not None:
            gt_hit[best_j] = i
            status[i] = "tp"
            continue
        # unmatched: not a false positive when it lies mostly inside an ignore box, or duplicates an
        # ignored head
        d = dets[i].box
        area = max(1e-6, (d[2] - d[0]) * (d[3] - d[1]))
        for g in gts:
            if g["ignore"]:
                b = g["box"]
                inter = max(0.0, min(d[2], b[2]) - max(d[0], b[0])) * max(0.0, min(d[3], b[3]) - max(d[1], b[1]))
                if inter / area >= 0.5 or iou(d, b) >= thr:
                    status[i] = "ignored"
                    break
    return gt_hit, status


def score_table(cache, rule: Rule, method: str):
    """Recall per labelled view; precision overall and per guessed view."""
    hits = {v: [0, 0] for v in VIEWS}
    pred = {v: [0, 0] for v in VIEWS}  # tp, all by guessed view
    source = {"face": [0, 0], "keypoints": [0, 0]}  # tp, all by where the head came from
    tp = fp = 0
    ious = []
    for item in cache.values():
        dets = detections(item, rule, method)
        gt_hit, status = match(dets, item["gts"])
        for g, hit in zip(item["gts"], gt_hit, strict=True):
            if g["ignore"]:
                continue
            hits[g["view"]][1] += 1
            if hit is not None:
                hits[g["view"]][0] += 1
                ious.append(iou(dets[hit].box, g["box"]))
        for d, s in zip(dets, status, strict=True):
            if s == "ignored":
                continue
            tp += s == "tp"
            fp += s == "fp"
            pred[d.view][1] += 1
            pred[d.view][0] += s == "tp"
            source[d.source][1] += 1
            source[d.source][0] += s == "tp"
    return {"recall": {v: (h[0] / h[1] if h[1] else None, h[0], h[1]) for v, h in hits.items()},
            "precision": (tp / (tp + fp) if tp + fp else None, tp, tp + fp),
            "precision_by_guessed_view": {v: (p[0] / p[1] if p[1] else None, p[0], p[1]) for v, p in pred.items()},
            "precision_by_source": {v: (p[0] / p[1] if p[1] else None, p[0], p[1]) for v, p in source.items()},
            "mean_iou_matched": float(np.mean(ious)) if ious else None}


def clip(heads: list[Head], shape) -> list[Head]:
    """Boxes cut to the frame, as the labels are (a head cut by the frame edge ends there)."""
    h, w = shape[:2]
    out = []
    for d in heads:
        b = (max(0.0, d.box[0]), max(0.0, d.box[1]), min(float(w), d.box[2]), min(float(h), d.box[3]))
        if b[2] > b[0] and b[3] > b[1]:
            out.append(replace(d, box=b))
    return out


def detections(item, rule: Rule, method: str) -> list[Head]:
    faces = [scaled(f, rule.face_scale) for f in item["faces"]]
    if method == "faces":
        return clip(faces, item["shape"])
    kps = keypoint_heads(item["people"][(rule.side, rule.tiles)], rule)
    if method == "keypoints":
        return clip(kps, item["shape"])
    return clip(merge(faces, kps, rule), item["shape"])


def build_cache(frames, sides, movenet, detector, tiles=(1, 2)):
    cache = {}
    for key, gts in frames.items():
        rgb = read_frame(*key)
        cache[key] = {"gts": gts, "faces": face_heads(detector, rgb), "shape": rgb.shape,
                      "people": {(s, t): movenet(rgb, s, t) for s in sides for t in tiles}}
    return cache


def fit(cache, base: Rule, sides, tiles=(1, 2, 3), frames=None, log=print):
    # the grid was widened once after a first run ended on its edges (spread_k 2.0, shoulder_k 0.7,
    # kp_min 0.4, person_min 0.05); sides and tiles come from the command line
    """Two stages, on the frames given (default: all).
    1. face_scale: the scale of headsearch's face-derived head boxes that maximises F1 of faces alone.
    2. keypoint rule: maximise the mean of profile and back recall of the merged heads while
       precision >= 0.9, then frontal recall, then mean IoU."""
    sub = cache if frames is None else {k: v for k, v in cache.items() if k in frames}
    best_f = None
    for k in (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0):
        t = score_table(sub, replace(base, face_scale=k), "faces")
        tp, n = t["precision"][1], t["precision"][2]
        gts = sum(r[2] for r in t["recall"].values())
        f1 = 2 * tp / (n + gts) if n + gts else 0.0
        log(f"  face_scale {k}: faces-only F1 {f1:.3f}")
        if best_f is None or f1 > best_f[0]:
            best_f = (f1, k)
    base = replace(base, face_scale=best_f[1])
    grid = {
        "side": sides,
        "tiles": tiles,
        "person_min": [0.03, 0.05, 0.1, 0.2],
        "kp_min": [0.2, 0.3, 0.4, 0.5],
        "min_points": [2, 3],
        "spread_k": [1.6, 1.8, 2.0, 2.2, 2.4, 2.6],
        "shoulder_k": [0.0, 0.6, 0.7, 0.8, 0.9],
        "raise_k": [0.0, 0.05, 0.1],
        "shoulders_first": [False, True],
    }
    best = None
    names = list(grid)
    for values in itertools.product(*grid.values()):
        rule = replace(base, **dict(zip(names, values, strict=True)))
        t = score_table(sub, rule, "merged")
        prec = t["precision"][0] or 0.0
        rec = t["recall"]
        faceless = np.mean([rec[v][0] or 0.0 for v in ("profile", "back")])
        key = (prec >= 0.9, round(float(faceless), 4), rec["face"][0] or 0.0, t["mean_iou_matched"] or 0.0, prec)
        if best is None or key > best[0]:
            best = (key, rule, t)
    return best


# ----------------------------------------------------------------------------------------------
# drawing
# ----------------------------------------------------------------------------------------------

SKELETON = [(0, 1), (0, 2), (1, 3), (2, 4), (5, 6), (5, 7), (7, 9), (6, 8), (8, 10), (5, 11), (6, 12), (11, 12)]


def draw(rgb, people, heads, gts=(), rule: Rule = Rule()):
    im = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    for p in people:
        if p[55] < rule.person_min:
            continue
        kp = p[:51].reshape(17, 3)
        for a, b in SKELETON:
            if kp[a, 2] >= rule.kp_min and kp[b, 2] >= rule.kp_min:
                cv2.line(im, tuple(map(int, kp[a, :2])), tuple(map(int, kp[b, :2])), (255, 0, 255), 1)
        for i in range(7):
            if kp[i, 2] >= rule.kp_min:
                cv2.circle(im, tuple(map(int, kp[i, :2])), 3, (255, 0, 255), -1)
    for g in gts:
        b = tuple(map(int, g["box"]))
        cv2.rectangle(im, b[:2], b[2:], (0, 255, 0) if not g["ignore"] else (128, 128, 128), 2)
        cv2.putText(im, g["view"], (b[0], b[3] + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 255, 0), 1)
    for h in heads:
        b = tuple(map(int, h.box))
        col = (0, 200, 255) if h.source == "face" else (255, 128, 0)
        cv2.rectangle(im, b[:2], b[2:], col, 1)
        cv2.putText(im, f"{h.source[0]}{h.view[0]} {h.score:.2f}", (b[0], b[1] - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, col, 1)
    return im


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("show")
    s.add_argument("file")
    s.add_argument("time", type=float)
    s.add_argument("--side", type=int, default=Rule.side)
    s.add_argument("--out", default="/tmp/heads_show.png")
    e = sub.add_parser("eval")
    e.add_argument("--set", default=str(SET))
    e.add_argument("--fit", action="store_true")
    e.add_argument("--fit-on", help="fit on the frames of files containing this text only; report all, and the rest apart")
    e.add_argument("--sides", default="256,384,512,640")
    e.add_argument("--tiles", default="1,2,3")
    e.add_argument("--cache", help="pickle of MoveNet/RetinaFace outputs per frame (made if missing)")
    e.add_argument("--rule", help="JSON of Rule fields to evaluate (default: the defaults above)")
    e.add_argument("--json", help="write the tables here")
    t = sub.add_parser("time")
    t.add_argument("--sides", default="256,384,512,640")
    t.add_argument("--tiles", default="1,2,3")
    t.add_argument("--file", default="facenet-pytorch/examples/video.mp4")
    args = ap.parse_args(argv)

    if args.cmd == "time":
        mn = MoveNet()
        import av

        with av.open(str(DATA / args.file)) as c:
            frames = [f.to_ndarray(format="rgb24") for _, f in zip(range(20), c.decode(video=0), strict=False)]
        for side in map(int, args.sides.split(",")):
            for tiles in map(int, args.tiles.split(",")):
                mn(frames[0], side, tiles)
                per, cpu = [], []
                for f in frames:  # per frame; the median resists other jobs on a shared machine
                    t0, c0 = time.perf_counter(), time.process_time()
                    mn(f, side, tiles)
                    per.append((time.perf_counter() - t0) * 1000)
                    cpu.append((time.process_time() - c0) * 1000)
                x, _ = MoveNet.letterbox(frames[0], side)
                print(f"side {side} tiles {tiles} (whole-frame input {x.shape[2]}x{x.shape[1]}; frames "
                      f"{frames[0].shape[1]}x{frames[0].shape[0]}): median {np.median(per):.1f} ms/frame, "
                      f"min {min(per):.1f}; CPU time median {np.median(cpu):.1f} ms/frame (incl. resize, 2 threads, {len(per)} frames)")
        return

    from headsearch.detection.faces import FaceDetector

    detector = FaceDetector()
    mn = MoveNet()
    if args.cmd == "show":
        rule = replace(Rule(), side=args.side)
        rgb = read_frame(args.file, args.time)
        people = mn(rgb, rule.side)
        faces = face_heads(detector, rgb)
        heads = merge(faces, keypoint_heads(people, rule), rule)
        gts = load_set().get((args.file, args.time), []) if SET.exists() else []
        cv2.imwrite(args.out, draw(rgb, people, heads, gts, rule))
        print(args.out)
        return

    sides = [int(x) for x in args.sides.split(",")]
    tiles = [int(x) for x in args.tiles.split(",")]
    frames = load_set(Path(args.set))
    import pickle

    if args.cache and Path(args.cache).exists():
        cache = pickle.loads(Path(args.cache).read_bytes())
        for key, item in cache.items():  # the labels may have changed since the cache was made
            item["gts"] = frames[key]
    else:
        cache = build_cache(frames, sides, mn, detector, tiles)
        if args.cache:
            Path(args.cache).write_bytes(pickle.dumps(cache))
    rule = Rule(**json.loads(args.rule)) if args.rule else Rule()
    held_out = None
    if args.fit:
        fit_frames = [k for k in cache if args.fit_on in k[0]] if args.fit_on else None
        key, rule, _ = fit(cache, rule, sides, tiles, fit_frames)
        print("fitted rule:", rule, "on", "all frames" if fit_frames is None else f"{len(fit_frames)} frames of *{args.fit_on}*")
        if fit_frames is not None:
            held_out = {k: v for k, v in cache.items() if k not in fit_frames}
    tables = {m: score_table(cache, rule, m) for m in ("faces", "keypoints", "merged")}
    counts = {v: sum(1 for gts in frames.values() for g in gts if g["view"] == v and not g["ignore"]) for v in VIEWS}
    print(f"set: {len(frames)} frames, heads {counts}, ignored {sum(g['ignore'] for gts in frames.values() for g in gts)}")
    print(f"rule: {rule}")
    for m, tb in tables.items():
        rec = " ".join(f"{v} {r[0]:.3f} ({r[1]}/{r[2]})" if r[0] is not None else f"{v} -" for v, r in tb["recall"].items())
        p = tb["precision"]
        pv = " ".join(f"{v} {r[0]:.3f} ({r[1]}/{r[2]})" for v, r in tb["precision_by_source"].items() if r[2])
        print(f"{m:9s} recall: {rec} | precision {p[0]:.3f} ({p[1]}/{p[2]}) | by source: {pv} | "
              f"mean IoU {tb['mean_iou_matched']:.3f}")
    if held_out:
        print(f"held out ({len(held_out)} frames not fitted on):")
        for m in ("faces", "keypoints", "merged"):
            tb = score_table(held_out, rule, m)
            rec = " ".join(f"{v} {r[0]:.3f} ({r[1]}/{r[2]})" if r[0] is not None else f"{v} -" for v, r in tb["recall"].items())
            p = tb["precision"]
            print(f"{m:9s} recall: {rec} | precision {p[0]:.3f} ({p[1]}/{p[2]})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rule": rule.__dict__, "tables": tables}, indent=1))


if __name__ == "__main__":
    main()
