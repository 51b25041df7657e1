"""The training-set builder of the paper's Sec. 4.4: videos -> shots -> head tracks -> segments ->
cross-video identities, plus labelled photo sets, written as a dataset folder (its format:
`trainer.dataset_format`) that the trainer reads.

Steps (`build_dataset` runs them in this order; each stage in its module)
1. shots and 2. head tracks inside shots (`trainer.dataset_parts.analyse_inputs`): `indexer.analysis.analyse_file`
   with its head crops kept (sampled at ``sample_fps``, default 4); each file's crops are written into its part
   (a 160 px head JPEG and, when the face is visible, the ArcFace-aligned 112 px face) as soon as the
   file is analysed, so memory holds one file's crops at a time.
3. Segment filtering (`trainer.dataset_segments.video_segments`): tracks with enough frames, with and without a
   visible face, and a good best face (the thresholds and why: that module).
4. Identities across videos (`trainer.dataset_identities.cluster_identities`): agglomerative clustering of the
   segments' best-face teacher vectors, never merging two segments seen in the same sampled frame.
5. The dataset folder (`assemble`): crops, teacher vectors, manifest, videos.json, contact sheets
   (`trainer.contact_sheets`). What a build counted: `trainer.dataset_summary.BuildSummary`.

Labelled sets (``--labels``, `trainer.dataset_inputs`) add one sample per photo: its largest head, identity
``label:<identity>``, state ``label:<identity>/<appearance_state or default>``. A labelled video is a one-person
video: its person's segments (the longest and those whose best face matches it) take its identity and state,
so clips of one person in one look are one state across clips (R1), and other people in it are
left out. Labelled samples are never merged with video identities.

Resumable: each input file is analysed into ``DIR/parts/<key>/`` (written to ``<key>.tmp`` and
renamed when complete; a rerun skips files whose part exists and matches the file and the
settings). Filtering, clustering and the output files are rebuilt from the parts on every run,
so changing a filter option needs no re-analysis. ``heads/`` and ``faces/`` hold hard links to the
parts' JPEGs (copies where links are impossible).
"""
from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from headsearch.basics.settings import IndexSettings
from headsearch.evaluation.metrics import relation_counts
from schemas.records import VectorKind
from trainer.contact_sheets import write_contact_sheets
from trainer.dataset_format import (
    FACES,
    HEADS,
    PARTS,
    DatasetError,
    Sample,
    crop_name,
    face_crop_path,
    fresh_dir,
    head_crop_path,
    swap_dir,
    write_manifest,
    write_summary,
    write_teacher,
    write_videos,
)
from trainer.dataset_identities import cluster_identities, default_cluster_threshold, label_video_segments
from trainer.dataset_inputs import gather_inputs
from trainer.dataset_parts import Analyser, Part, analyse_inputs, part_settings
from trainer.dataset_segments import DatasetOptions, Segment, photo_segments, video_segments
from trainer.dataset_summary import BuildSummary, Report

DEFAULT_TEACHER = "sface"  # the face model whose vectors cluster identities and are the distillation targets
DEFAULT_OPTIONS = DatasetOptions()


def build_dataset(videos: Sequence[Path], out: Path, labels: Sequence[Path] = (), teacher: str | None = None,
                  opts: DatasetOptions = DEFAULT_OPTIONS, progress: bool = True, report: Report = print) -> BuildSummary:
    """Build (or finish building) the dataset folder `out`; see the module docstring."""
    from headsearch.detection.faces import FaceDetector
    from headsearch.models import load_embedder

    start = time.perf_counter()
    summary = BuildSummary()
    out = Path(out).expanduser()
    inputs = gather_inputs(videos, labels, summary, report)

    embedder = load_embedder(teacher or DEFAULT_TEACHER)
    model = embedder.describe()
    threshold = opts.cluster_threshold if opts.cluster_threshold is not None else default_cluster_threshold(model)
    summary.cluster_threshold = threshold
    summary.options = {**asdict(opts), "cluster_threshold": threshold}
    summary.teacher = model.to_dict()
    settings = IndexSettings(sample_fps=opts.sample_fps)
    analyser = Analyser(settings, FaceDetector.from_settings(settings), embedder, part_settings(settings, model), error_log=out)
    parts_dir = out / PARTS
    try:
        parts_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError(f"{out}: cannot create the output folder ({e.strerror or e})") from e
    for stale in parts_dir.glob("*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)

    parts = analyse_inputs(inputs, parts_dir, analyser, summary, report, progress)
    segments = video_segments(inputs.videos, parts, opts, summary)
    photos = photo_segments(inputs.photos, parts, summary)
    if not segments and not photos:
        raise DatasetError("no usable segments or photos: every track was rejected by the filters "
                           f"({', '.join(f'{k} {v}' for k, v in summary.segments_rejected.items() if v) or 'no tracks'}); "
                           "try --min-invisible 0, a lower --min-frames or a higher --fps")
    unlabelled = label_video_segments(segments, inputs.labelled_videos, threshold, summary)
    cluster_identities(unlabelled, threshold, embedder.dim, summary)
    segments = [x for x in segments if x.identity]
    head_dim = embedder.dims[VectorKind.HEAD] if VectorKind.HEAD in embedder.kinds else 0
    assemble(out, segments + photos, parts, summary.teacher, embedder.dim, summary, head_dim)
    summary.wall_seconds = time.perf_counter() - start
    write_summary(out, asdict(summary))
    return summary


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def assemble(out: Path, segments: list[Segment], parts: dict[Path, Part], teacher: dict, dim: int, summary: BuildSummary,
             head_dim: int = 0) -> None:
    """Step 5: write heads/, faces/, teacher.npy (teacher_head.npy with `head_dim`), teacher.json, manifest.parquet,
    videos.json and contact/."""
    heads, faces = fresh_dir(out / HEADS), fresh_dir(out / FACES)
    samples: list[Sample] = []
    vectors, head_vectors = [], []
    for s in segments:
        for o in s.obs:
            sid = len(samples)
            _link(s.part.folder / o["head_crop"], heads / crop_name(sid))
            face_crop, ti = None, -1
            if o["face_crop"] is not None:
                _link(s.part.folder / o["face_crop"], faces / crop_name(sid))
                face_crop = face_crop_path(sid)
                ti = len(vectors)
                vectors.append(s.part.teacher[o["teacher_row"]])
            hi = -1
            if head_dim and o.get("teacher_head_row", -1) >= 0:
                hi = len(head_vectors)
                head_vectors.append(s.part.teacher_head[o["teacher_head_row"]])
            samples.append(Sample(sample_id=sid, identity=s.identity, state=s.state, source=s.source, video=s.video,
                                  segment=s.name, shot=s.shot, frame_index=o["frame"], time=o["time"],
                                  pose_hint=math.nan if o["pose"] is None else o["pose"], face_visible=o["face"] is not None,
                                  head_crop=head_crop_path(sid), face_crop=face_crop, teacher_index=ti, teacher_head_index=hi))
    swap_dir(heads, out / HEADS)
    swap_dir(faces, out / FACES)
    write_teacher(out, vectors, teacher, dim, head_vectors if head_dim else None, head_dim)
    summary.samples = write_manifest(out, samples)
    write_videos(out, {p.meta["path"]: p.video_entry() for p in parts.values()})
    identities, states = [x.identity for x in samples], [x.state for x in samples]
    summary.samples_face_visible = sum(x.face_visible for x in samples)
    summary.samples_video = sum(x.source == "video" for x in samples)
    summary.samples_photo = sum(x.source == "photo" for x in samples)
    summary.teacher_rows = len(vectors)
    summary.teacher_head_rows = len(head_vectors)
    summary.identities = len(set(identities))
    summary.states = len(set(states))
    summary.pairs = relation_counts(identities, states)
    write_contact_sheets(out, samples)
