"""Make bench/sets/profiles.csv: same-person pairs across a head turn, from head tracks (issue 39).

    python research/make_profile_set.py tracks [--out /tmp/profile_tracks]   one sheet per video: every track's face
                                                                             sightings, to decide identities by eye
    python research/make_profile_set.py write  [--set bench/sets/profiles.csv]
    python research/make_profile_set.py sheets [--set bench/sets/profiles.csv] [--out /tmp/profile_sheets]
                                                                             one sheet per identity of the set, to check it

As the paper builds its data: the product's own analysis (`indexer.analysis.analyse_file`, `IndexSettings` with
SAMPLE_FPS samples a second, RetinaFace, SFace) gives head tracks with every sampled sighting; a track that turns
gives weakly labelled same-person pairs between its frontal and its turned sightings, other people's sightings the
impostors. Only sightings with a face (five landmarks) count; their yaw is
`headsearch.detection.pose.yaw_from_landmarks` (signed, 0 frontal). Identities were decided by eye on the `tracks` sheets (and the
labelled photos of ../shared/data) and are written below (TRACKS): a track is named by its file, its first
sighting's time and the centre x of its first head box (file pixels); tracks not named there are left out
(LEFT_OUT says why). Per track, `choose` keeps every sighting at |yaw| >= TURNED (up to TURNED_CAP, spread over
time) and a few frontal ones spread over time (FRONTAL_WITH_TURN; FRONTAL_ONLY for tracks that never turn).
Media stay in ../shared/data: the set holds file, time, head box, identity and yaw. `write` names any track with a
face that TRACKS and LEFT_OUT do not (a changed analysis): look at the `tracks` sheets again before using its output.
The analyses are kept in CACHE (/tmp) between runs.
"""
from __future__ import annotations

import argparse
import csv
import math
import pickle
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headsearch.basics.settings import IndexSettings  # noqa: E402
from headsearch.detection.crops import crop_head, picture_of  # noqa: E402
from headsearch.detection.faces import FaceDetector  # noqa: E402
from headsearch.detection.pose import yaw_from_landmarks  # noqa: E402
from headsearch.models.registry import load_embedder  # noqa: E402
from indexer.analysis import analyse_file  # noqa: E402
from schemas.records import Box, FaceDetection, FileResult  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SET = ROOT / "bench" / "sets" / "profiles.csv"
CACHE = Path("/tmp/profile_set_analysis.pkl")
MODEL = "sface"  # the embedder plays no part in the tracks; the fastest one
SAMPLE_FPS = 6.0  # the default 2 gives too few sightings of a turn that lasts a second
COLUMNS = ("file", "time", "x1", "y1", "x2", "y2", "identity", "yaw")

# The videos of ../shared/data outside more/ (public, permissively licensed examples).
VIDEOS = (
    "face_recognition/examples/short_hamilton_clip.mp4",
    "facenet-pytorch/examples/video.mp4",
    "PySceneDetect/tests/resources/goldeneye-vfr-drop3.mp4",
    "face-api.js/test/media/video.mp4",
    *(f"LivePortrait/assets/examples/driving/d{n}.mp4" for n in (3, 9, 10, 11, 20)),
    *(f"LivePortrait/assets/examples/source/s{n}.mp4" for n in (18, 20, 32)),
    *(f"video-retalking/examples/face/{n}.mp4" for n in (1, 2, 3, 4, 5)),
)

TURNED = 30.0  # |yaw| from here on is a turned sighting
TURNS = (30.0, 45.0)  # a track turns when it has sightings at |yaw| < TURNS[0] and at |yaw| >= TURNS[1]
TURNED_CAP = 12  # turned sightings kept per track at most (spread over time)
FRONTAL_WITH_TURN = 4  # frontal sightings kept from a track with turned ones
FRONTAL_ONLY = 6  # ...and from a track that stays frontal (impostors, and same-person frontal pairs)

HAMILTON = "face_recognition/examples/short_hamilton_clip.mp4"
CROWD = "facenet-pytorch/examples/video.mp4"
GOLDENEYE = "PySceneDetect/tests/resources/goldeneye-vfr-drop3.mp4"
LP, VR = "LivePortrait/assets/examples", "video-retalking/examples/face"
# (file, first sighting's time, its head box's centre x in file pixels) -> identity, decided by eye; a tuple of
# (until, identity) splits a track the tracker carried from one head to another: sightings before `until` seconds.
TRACKS: dict[tuple[str, float, float], str | tuple[tuple[float, str], ...]] = {
    (HAMILTON, 0.852, 544): "lin_manuel_miranda",  # singing at the microphone, wide first shot
    (HAMILTON, 0.852, 67): "alex_lacamoire",  # at the piano, same shot: curly hair, beard, light jacket
    (HAMILTON, 1.519, 537): "alex_lacamoire",  # the profile close-up, turning away
    (HAMILTON, 3.588, 177): "lin_manuel_miranda",  # medium shot, frontal
    (HAMILTON, 7.892, 419): "michelle_obama",
    (HAMILTON, 7.892, 355): "barack_obama",
    (HAMILTON, 7.892, 202): "short_hamilton_clip/person1",  # woman left of the Obamas, laughing, in profile
    (HAMILTON, 7.892, 73): "short_hamilton_clip/person2",  # woman at the left edge, smiling
    (CROWD, 0.0, 1482): "video/person1",  # man in profile leaving at the right
    (CROWD, 0.0, 328): "video/person2",  # dark-haired woman with a pink scarf, walking across
    (CROWD, 0.0, 700): "video/person3",  # red-haired boy
    (CROWD, 0.0, 954): "video/person4",  # dark-haired boy, blue hoodie
    (CROWD, 0.0, 1106): ((1.5, "video/person5"), (99.0, "video/person6")),  # grey-haired man, then (id switch at
    (CROWD, 2.2, 1105): "video/person5",  # 1.2-1.8 s) the man with black hair and glasses in front of him
    (CROWD, 0.0, 484): "video/person7",  # bald man with glasses and a scarf
    (CROWD, 0.0, 885): "video/person8",  # woman with curly hair, red coat
    (CROWD, 4.0, 928): "video/person8",  # the same woman again (her first track followed the wrong region)
    (CROWD, 0.2, 316): "video/person9",  # white-haired woman, red scarf
    (GOLDENEYE, 8.759, 378): "goldeneye-vfr-drop3/person1",  # man with glasses
    (GOLDENEYE, 8.759, 708): "goldeneye-vfr-drop3/person2",  # woman
    **{(f"{LP}/driving/d{n}.mp4", 0.0, x): f"lp_d{n}_person" for n, x in ((3, 271), (9, 252), (10, 254), (11, 267), (20, 256))},
    **{(f"{LP}/source/s{n}.mp4", 0.0, x): f"lp_s{n}_person" for n, x in ((18, 758), (20, 182), (32, 560))},
    (f"{VR}/1.mp4", 0.033, 382): "vr_person1",
    (f"{VR}/2.mp4", 0.0, 397): "vr_person2",
    (f"{VR}/3.mp4", 0.0, 285): "alexandria_ocasio_cortez",
    (f"{VR}/4.mp4", 0.0, 408): "vr_person4",
    (f"{VR}/5.mp4", 0.0, 253): "vr_person5",
}
# The same, for tracks with a face that are left out: -> why.
LEFT_OUT: dict[tuple[str, float, float], str] = {
    (HAMILTON, 1.519, 294): "out-of-focus, dark audience behind the close-up (heads.csv: ignore)",
    (HAMILTON, 1.686, 161): "out-of-focus, dark audience behind the close-up (heads.csv: ignore)",
    (HAMILTON, 2.520, 362): "out-of-focus, dark audience behind the close-up (heads.csv: ignore)",
    (HAMILTON, 2.687, 504): "out-of-focus, dark audience behind the close-up (heads.csv: ignore)",
    (HAMILTON, 2.854, 435): "out-of-focus, dark audience behind the close-up (heads.csv: ignore)",
    (HAMILTON, 7.892, 610): "the WH.GOV logo",
    (HAMILTON, 8.226, 50): "dim face half hidden behind person2's head at the top-left edge: too unclear to tell",
    (HAMILTON, 9.060, 406): "no face: a detection between Barack Obama's cheek and Michelle Obama's hair",
    (CROWD, 0.4, 1343): "its one 'face' is the side and back of a bald head in a dark coat, no face visible",
    (GOLDENEYE, 0.0, 597): "a drawn caricature on a monitor, not a real face",
    (GOLDENEYE, 3.754, 352): "a drawn caricature on a monitor, not a real face",
    (f"{LP}/source/s18.mp4", 6.167, 910): "no face: a detection in the blurred background beside the woman's face",
}
MATCH_S, MATCH_PX = 0.02, 25.0  # how close a track's start and first centre must be to a key above


@dataclass
class Sighting:
    file: str
    time: float  # as the analysis gave it
    head: Box  # file pixels
    landmarks: np.ndarray  # (5, 2) file pixels
    score: float
    yaw: float


@dataclass
class Track:
    file: str
    index: int
    shot: int
    key: tuple[str, float, float]
    sightings: list[Sighting]  # with a face only
    observations: int  # all sightings, with or without a face


def settings() -> IndexSettings:
    return replace(IndexSettings(), sample_fps=SAMPLE_FPS)


def analyse(cache: Path = CACHE) -> dict[str, FileResult]:
    """Every video's analysis (cached: the vectors are not kept)."""
    s = settings()
    stored: dict = {}
    if cache.exists():
        try:
            with open(cache, "rb") as f:
                stored = pickle.load(f)
        except Exception as e:  # noqa: BLE001 - made by another version of the records: analyse again
            print(f"{cache}: not read ({type(e).__name__}: {e}), analysing again", file=sys.stderr)
        if stored.get("settings") == s and set(stored["results"]) == set(VIDEOS):
            return stored["results"]
    detector, embedder = FaceDetector.from_settings(s), load_embedder(MODEL)
    results = {}
    for rel in VIDEOS:
        r = analyse_file(DATA / rel, s, detector, embedder)
        for t in r.tracks:
            for o in t.observations:
                o.embeddings = {}
        results[rel] = r
        print(f"{rel}: {len(r.tracks)} tracks, {r.frames_sampled} frames sampled", file=sys.stderr)
    with open(cache, "wb") as f:
        pickle.dump({"settings": s, "results": results}, f)
    return results


def tracks_of(rel: str, r: FileResult) -> list[Track]:
    w, h = r.source_size or (r.width, r.height)
    sx, sy = w / max(r.width, 1), h / max(r.height, 1)
    out = []
    for i, t in enumerate(r.tracks):
        seen = []
        for o in t.observations:
            face: FaceDetection | None = o.face
            if face is None or face.landmarks is None:
                continue
            head = Box(o.head.x1 * sx, o.head.y1 * sy, o.head.x2 * sx, o.head.y2 * sy)
            lm = np.asarray(face.landmarks, np.float64) * np.array([sx, sy])
            seen.append(Sighting(rel, o.time, head, lm, face.score, yaw_from_landmarks(lm)))
        first = t.observations[0]
        key = (rel, round(first.time, 3), round(first.head.center[0] * sx, 1))
        out.append(Track(rel, i, t.shot_index, key, seen, len(t.observations)))
    return out


def lookup(table: dict, key: tuple[str, float, float]):
    for (rel, t, x), value in table.items():
        if rel == key[0] and abs(t - key[1]) <= MATCH_S and abs(x - key[2]) <= MATCH_PX:
            return value
    return None


def parts(track: Track, named: str | tuple[tuple[float, str], ...]) -> list[tuple[str, Track]]:
    """The track's sightings by identity: one part, or one per span of a track split in TRACKS."""
    if isinstance(named, str):
        return [(named, track)]
    out, start = [], -1.0
    for until, identity in named:
        seen = [s for s in track.sightings if start <= s.time < until]
        if seen:
            out.append((identity, replace(track, sightings=seen)))
        start = until
    return out


def spread(items: list, n: int) -> list:
    """n of the items (in time order), evenly spread, the first and last included."""
    if len(items) <= n:
        return list(items)
    if n <= 0:
        return []
    if n == 1:
        return [items[len(items) // 2]]
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


def turns(track: Track) -> bool:
    yaws = [abs(s.yaw) for s in track.sightings]
    return any(y < TURNS[0] for y in yaws) and any(y >= TURNS[1] for y in yaws)


def choose(track: Track) -> list[Sighting]:
    turned = [s for s in track.sightings if abs(s.yaw) >= TURNED]
    frontal = [s for s in track.sightings if abs(s.yaw) < TURNED]
    kept = spread(turned, TURNED_CAP)
    kept += spread(frontal, FRONTAL_WITH_TURN if kept else FRONTAL_ONLY)
    return sorted(kept, key=lambda s: s.time)


def pyav_times(rel: str) -> np.ndarray:
    """Every frame's presentation time as PyAV gives it."""
    import av

    with av.open(str(DATA / rel)) as c:
        return np.array([f.time for f in c.decode(c.streams.video[0])], np.float64)


def frames_at(rel: str, times: list[float]) -> dict[float, np.ndarray]:
    """The decoded frames (RGB) at these times (each within half a frame period), by the asked time."""
    import av

    out = {}
    with av.open(str(DATA / rel)) as c:
        stream = c.streams.video[0]
        half = 0.5 / float(stream.average_rate or 25)
        for f in c.decode(stream):
            for t in times:
                if t not in out and abs(f.time - t) <= half:
                    out[t] = f.to_ndarray(format="rgb24")
    return out


def write(path: Path, cache: Path) -> None:
    results = analyse(cache)
    rows, unnamed = [], []
    for rel in VIDEOS:
        stamps = pyav_times(rel)
        for track in tracks_of(rel, results[rel]):
            if not track.sightings:
                continue
            named = lookup(TRACKS, track.key)
            if named is None:
                if lookup(LEFT_OUT, track.key) is None:
                    unnamed.append(track.key)
                continue
            for identity, part in parts(track, named):
                for s in choose(part):
                    t = round(float(stamps[np.argmin(np.abs(stamps - s.time))]), 3)  # PyAV's time of that frame
                    b = s.head
                    rows.append((rel, f"{t:.3f}", f"{b.x1:.1f}", f"{b.y1:.1f}", f"{b.x2:.1f}", f"{b.y2:.1f}", identity,
                                 str(int(round(s.yaw)))))
    if unnamed:
        print("tracks with a face that TRACKS and LEFT_OUT do not name:", *unnamed, sep="\n  ", file=sys.stderr)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows(rows)
    print(f"{path}: {len(rows)} rows", file=sys.stderr)
    summary(path)


def band(yaw: float) -> str:
    y = abs(yaw)
    return "0-30" if y < 30 else "30-60" if y < 60 else "60+"


def summary(path: Path) -> None:
    """Rows per identity and per yaw band, as a markdown table."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    files: dict[str, set[str]] = defaultdict(set)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            counts[row["identity"]][band(float(row["yaw"]))] += 1
            files[row["identity"]].add(row["file"])
    bands = ("0-30", "30-60", "60+")
    print("| identity | files | " + " | ".join(bands) + " | rows |")
    print("|---|---|" + "---|" * (len(bands) + 1))
    total = defaultdict(int)
    for ident in sorted(counts):
        c = counts[ident]
        for b in bands:
            total[b] += c[b]
        names = ", ".join(sorted(Path(p).name for p in files[ident]))
        print(f"| {ident} | {names} | " + " | ".join(str(c[b]) for b in bands) + f" | {sum(c.values())} |")
    print("| **total** | | " + " | ".join(f"**{total[b]}**" for b in bands) + f" | **{sum(total.values())}** |")


TILE = 128
FONT = cv2.FONT_HERSHEY_SIMPLEX


def tile(rgb: np.ndarray, head: Box, lines: list[str]) -> np.ndarray:
    """The head crop with text lines under it (BGR, for cv2)."""
    pic = cv2.cvtColor(picture_of(crop_head(rgb, head, None, TILE)), cv2.COLOR_RGB2BGR)
    text = np.full((14 * len(lines) + 4, TILE, 3), 255, np.uint8)
    for i, line in enumerate(lines):
        cv2.putText(text, line, (2, 12 + 14 * i), FONT, 0.36, (0, 0, 0), 1, cv2.LINE_AA)
    return np.vstack([pic, text])


def grid(tiles: list[np.ndarray], per_row: int, title: str) -> np.ndarray:
    th, tw = tiles[0].shape[:2]
    n_rows = math.ceil(len(tiles) / per_row)
    sheet = np.full((30 + n_rows * (th + 4), per_row * (tw + 4), 3), 200, np.uint8)
    cv2.putText(sheet, title, (4, 20), FONT, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
    for i, t in enumerate(tiles):
        r, c = divmod(i, per_row)
        sheet[30 + r * (th + 4):30 + r * (th + 4) + th, c * (tw + 4):c * (tw + 4) + tw] = t
    return sheet


def track_sheets(out: Path, cache: Path, per_row: int = 12) -> None:
    """One sheet per video: a row per track with a face (its face sightings, spread over time), to decide identities."""
    out.mkdir(parents=True, exist_ok=True)
    results = analyse(cache)
    for rel in VIDEOS:
        tracks = [t for t in tracks_of(rel, results[rel]) if t.sightings]
        if not tracks:
            print(f"{rel}: no track with a face", file=sys.stderr)
            continue
        shown = {t.index: spread(t.sightings, per_row - 1) for t in tracks}
        frames = frames_at(rel, sorted({s.time for ss in shown.values() for s in ss}))
        tiles = []
        for t in tracks:
            named = lookup(TRACKS, t.key)
            ident = ("LEFT OUT" if lookup(LEFT_OUT, t.key) else "?") if named is None else \
                " / ".join(i for i, _ in parts(t, named))
            label = np.full((TILE + 18, TILE, 3), 255, np.uint8)
            for i, line in enumerate([f"track {t.index} shot {t.shot}", f"start {t.key[1]:.3f}", f"x {t.key[2]:.0f}",
                                      f"{len(t.sightings)}/{t.observations} faces", "turns" if turns(t) else "",
                                      ident[:20], ident[20:40]]):
                cv2.putText(label, line, (2, 14 + 18 * i), FONT, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
            row = [label] + [tile(frames[s.time], s.head, [f"{s.time:.2f}s yaw {s.yaw:+.0f}"]) for s in shown[t.index]]
            row += [np.full_like(label, 200)] * (per_row - len(row))
            tiles += row
        name = rel.replace("/", "_").removesuffix(".mp4")
        cv2.imwrite(str(out / f"{name}.png"), grid(tiles, per_row, rel))
    print(f"sheets in {out}", file=sys.stderr)


def identity_sheets(path: Path, out: Path, per_row: int = 8) -> None:
    """One sheet per identity of the set: the head crops of its rows, time and yaw under each."""
    out.mkdir(parents=True, exist_ok=True)
    by_ident: dict[str, list[dict]] = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            by_ident[row["identity"]].append(row)
    frames: dict[tuple[str, float], np.ndarray] = {}
    by_file: dict[str, list[float]] = defaultdict(list)
    for rows in by_ident.values():
        for row in rows:
            by_file[row["file"]].append(float(row["time"]))
    for rel, times in by_file.items():
        for t, rgb in frames_at(rel, times).items():
            frames[(rel, t)] = rgb
    for ident, rows in sorted(by_ident.items()):
        tiles = []
        for row in rows:
            rel, t = row["file"], float(row["time"])
            head = Box(*(float(row[k]) for k in ("x1", "y1", "x2", "y2")))
            tiles.append(tile(frames[(rel, t)], head, [Path(rel).stem[:18], f"{t:.3f}s yaw {int(row['yaw']):+d}"]))
        cv2.imwrite(str(out / f"{ident.replace('/', '_')}.png"), grid(tiles, per_row, f"{ident}: {len(rows)} rows"))
    print(f"{len(by_ident)} sheets in {out}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("tracks", "write", "sheets", "summary"))
    ap.add_argument("--set", type=Path, default=SET)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cache", type=Path, default=CACHE, help="the analyses, kept between runs")
    args = ap.parse_args()
    if args.command == "tracks":
        track_sheets(args.out or Path("/tmp/profile_tracks"), args.cache)
    elif args.command == "write":
        write(args.set, args.cache)
    elif args.command == "sheets":
        identity_sheets(args.set, args.out or Path("/tmp/profile_sheets"))
    else:
        summary(args.set)


if __name__ == "__main__":
    main()
