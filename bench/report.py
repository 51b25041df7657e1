"""Benchmark results as text tables and ROC plots: each function takes a run's result object
(`AccuracyRun`, `SpeedRun`, `HeadsRun`, `CompareBenchRun`, `PresenceRun`; a people run shows itself, `bench.people.people_text`)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.accuracy import AccuracyRun, ModelReport
from bench.search import SYNTHETIC_PER_CLUSTER, SYNTHETIC_SPREAD, SearchSpeed
from headsearch.evaluation.metrics import DEFAULT_FARS, PROTOCOL_TITLES, PROTOCOLS, far_key, needed_impostors, roc_points
from headsearch.evaluation.verification import YAW_BANDS

if TYPE_CHECKING:  # types only: whoever made the run has loaded its module (a report need not load the others)
    from bench.compare import CompareBenchRun
    from bench.heads import HeadsRun
    from bench.presence import Coverage, PresenceRun
    from bench.speed import SpeedRun


def format_table(rows: list[list[str]], align: str) -> list[str]:
    """Rows of cells as fixed-width lines; align[i] is '<' or '>' for column i."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(f"{cell:{align[c]}{widths[c]}}" for c, cell in enumerate(r)).rstrip() for r in rows]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _vr_cell(r, insightface: bool = False) -> str:
    if r.vr is None:
        return "n/m"
    return f"{r.vr:.3f}" + ("*" if insightface and not r.measurable else "")


def _accuracy_row(r: ModelReport, keys: Sequence[str], width: int) -> list[str]:
    """One model's cells of the accuracy table."""
    if r.error:
        return [r.spec] + ["-"] * (width - 1)
    e = r.evaluation
    row = [r.spec]
    for p in PROTOCOLS:
        pr = e.protocols.get(p)
        row += ["n/m"] * (len(keys) + 1) if pr is None else [_vr_cell(pr.vr[k]) for k in keys] + ["n/m" if pr.auc is None else f"{pr.auc:.4f}"]
    row.append("n/m" if e.hierarchy is None else f"{e.hierarchy:.3f}")
    row.append("-" if r.ms_per_face is None else f"{r.ms_per_face:.0f}")
    return row


def _accuracy_counts(r: ModelReport, keys: Sequence[str], fars: Sequence[float]) -> str:
    """A measured model's samples, pairs and what could not be measured, in one line."""
    e = r.evaluation
    counts = "; ".join(f"{p} {e.protocols[p].n_genuine} genuine / {e.protocols[p].n_impostor} impostor" for p in PROTOCOLS if p in e.protocols)
    unmeasurable = sorted({f"VR@{k} needs {needed_impostors(f)}" for p in e.protocols.values() for k, f in zip(keys, fars, strict=True)
                           if not p.vr[k].measurable and p.n_genuine}, key=len)
    frames = f", {r.n_frames} heads in video frames" if r.n_frames else ""
    return (f"{r.spec}: {e.n_samples} samples ({r.n_photos} photos, {r.n_tracks} video tracks{frames}) of "
            f"{_count(e.n_identities, 'identity', 'identities')}; "
            f"pairs R1 {e.pairs.get('R1', 0)}, R2 {e.pairs.get('R2', 0)}, R3 {e.pairs.get('R3', 0)}; {counts or 'no pairs'}; "
            f"hierarchy over {e.quadruples} quadruples ({e.head_kind} vectors)"
            + (f"; n/m: {', '.join(unmeasurable)} impostors" if unmeasurable else ""))


def _insightface_table(measured: Sequence[ModelReport], keys: Sequence[str]) -> list[str]:
    """The insightface convention, labelled as such."""
    head = ["model"] + [f"{p} VR@{k}" for p in PROTOCOLS for k in keys]
    rows = [head] + [[r.spec] + [_vr_cell(r.evaluation.protocols[p].vr_insightface[k], True) for p in PROTOCOLS for k in keys]
                     for r in measured]
    return ["", "insightface convention (ROC point whose FPR is closest to the FAR, no interpolation; "
                "* = fewer than 1/FAR impostors, not a real VR@FAR):"] + format_table(rows, "<" + ">" * (len(head) - 1))


def format_accuracy(reports: Sequence[ModelReport], fars: Sequence[float] = DEFAULT_FARS) -> str:
    """The benchmark as a paper-style table (rows = models, columns = protocol x metric)."""
    keys = [far_key(f) for f in fars]
    head = ["model"]
    for _ in PROTOCOLS:
        head += [f"VR@{k}" for k in keys] + ["AUC"]
    head += ["hierarchy", "ms/face"]
    rows = [head] + [_accuracy_row(r, keys, len(head)) for r in reports]
    errors = [f"{r.spec}: not measured: {r.error}" for r in reports if r.error]
    lines, widths = format_table(rows, "<" + ">" * (len(head) - 1)), [max(len(r[c]) for r in rows) for c in range(len(head))]
    # Protocol titles above their column groups.
    group = len(keys) + 1
    offset = lambda col: sum(w + 2 for w in widths[:col])  # noqa: E731
    title = " " * offset(1) + PROTOCOL_TITLES[PROTOCOLS[0]]
    title = title.ljust(offset(1 + group) - 1) + " " + PROTOCOL_TITLES[PROTOCOLS[1]]
    out = [title.rstrip()] + lines
    out += errors
    out.append("VR: exact verification rate at the FAR (threshold = (k+1)-th highest impostor score, k = floor(FAR x impostors)); "
               "n/m: not measurable (fewer than 1/FAR impostor pairs, or no genuine pair). ms/face: embedder time per photo "
               "head crop on this machine, in batches of up to 32 (a model whose vectors were cached shows none).")
    out += [_accuracy_counts(r, keys, fars) for r in reports if not r.error]
    measured = [r for r in reports if not r.error and r.evaluation.protocols]
    if measured:
        out += _yaw_band_table(measured, keys)
        out += _insightface_table(measured, keys)
    return "\n".join(out)


def _yaw_band_table(measured: Sequence[ModelReport], keys: Sequence[str]) -> list[str]:
    """The identity protocol per yaw band: pairs of a frontal side and a side in the band (none without a known yaw)."""
    bands = [name for name, _, _ in YAW_BANDS]
    if not any(r.evaluation.bands for r in measured):
        return []
    head = ["model"] + [f"{b}: {cell}" for b in bands for cell in (f"VR@{keys[min(1, len(keys) - 1)]}", "AUC", "genuine/impostor")]
    rows = [head]
    for r in measured:
        row = [r.spec]
        for b in bands:
            p = r.evaluation.bands.get(b)
            if p is None:
                row += ["n/m"] * 3
                continue
            row += [_vr_cell(p.vr[keys[min(1, len(keys) - 1)]]), "n/m" if p.auc is None else f"{p.auc:.4f}", f"{p.n_genuine}/{p.n_impostor}"]
        rows.append(row)
    return ["", "identity by yaw band (degrees of yaw from the five landmarks; pairs of a frontal side, under 30, and a side "
                "in the band, as a frontal photo asks for a turned sighting):"] + format_table(rows, "<" + ">" * (len(head) - 1))


def plot_roc(run: AccuracyRun, path: Path) -> Path | None:
    """ROC curves of all models, one panel per protocol, log-FAR x axis (matplotlib, Agg); None (and no
    file) when no model measured anything."""
    reports, fars = run.reports, run.fars
    if not any(r.evaluation.scores for r in reports):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PROTOCOLS), figsize=(6 * len(PROTOCOLS), 5), squeeze=False)
    for ax, protocol in zip(axes[0], PROTOCOLS, strict=True):
        curves = [(r, *r.evaluation.scores[protocol]) for r in reports if not r.error and protocol in r.evaluation.scores]
        curves = [(r, g, i) for r, g, i in curves if g.size and i.size]
        # A FAR of 0 cannot sit on a log axis: such points are drawn at the left edge.
        left = min([min(fars)] + [1.0 / i.size for _, _, i in curves]) / 2
        for r, genuine, impostor in curves:
            fpr, tpr, _ = roc_points(genuine, impostor)
            auc = r.evaluation.protocols[protocol].auc
            ax.step(np.maximum(fpr, left), tpr, where="post", label=f"{r.spec} (AUC {auc:.3f}, {impostor.size} impostors)")
        for far in fars:
            ax.axvline(far, color="0.85", lw=0.8, zorder=0)
        ax.set_xscale("log")
        ax.set_xlim(left, 1.0)
        ax.set_ylim(0.0, 1.01)
        ax.set_xlabel("false accept rate (log; 0 at the left edge)")
        ax.set_ylabel("verification rate")
        ax.set_title(PROTOCOL_TITLES[protocol])
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=8)
        else:
            ax.text(0.5, 0.5, "not measurable", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def accuracy_text(run: AccuracyRun, roc: Path | None = None) -> str:
    """The set, the models' table and notes, the ROC plot written (`roc`) and the calibration."""
    s = run.labels.to_dict()
    frames = f"{s['frames']} heads in video frames, " if s["frames"] else ""
    parts = [f"set {run.options.set_csv}: {s['usable']} usable of {s['rows']} rows ({s['photos']} photos, {s['videos']} videos, {frames}"
             f"{_count(s['identities'], 'identity', 'identities')})\n" + format_accuracy(run.reports, run.fars)]
    if roc is not None:
        parts.append(f"ROC curves: {roc}")
    c = run.calibration
    if c is not None:
        look = "n/m" if c.get("same_look_accuracy") is None else f"{c['same_look_accuracy']:.3f}"
        line = (f"calibrated {c['path']} at FAR {run.options.calibrate:g} for {c['model']}: identity > {c['identity']:.4f} "
                f"(VR {c['vr']['identity']:.3f}), same_look > {c['same_look']:.4f} ({c['same_look_vectors']} vectors; same look told "
                f"from other look with balanced accuracy {look})")
        for name in ("head_identity", "appearance"):
            if c.get(name) is not None:
                line += f", {name} > {c[name]:.4f} (VR {c['vr'][name]:.3f})"
        route = c.get("head_route")
        if route and route.get("vr_either") is not None:
            line += (f"; a second 'same person' bar on the head score {'kept' if route['kept'] else 'left out'}: with both held to "
                     f"the FAR together, VR {route['vr_either']:.3f} against {route['vr_identity_alone']:.3f} for the identity bar alone")
        parts.append(line)
    return "\n\n".join(parts)


def speed_text(run: SpeedRun) -> str:
    """The indexing table and/or the search tables of one speed run."""
    parts = []
    if run.indexing is not None:
        parts.append(format_indexing(run.indexing))
    if run.search:
        parts.append(format_search(run.search, run.options.search.seed))
    if run.cold_query is not None:
        parts.append(format_cold_query(run.cold_query))
    return "\n\n".join(parts)


def format_cold_query(record: dict) -> str:
    """The cold query's median against the bare import's, and where the median query's seconds went."""
    stages = ", ".join(f"{name} {seconds:.2f}" for name, seconds in record["stages"].items())
    times = lambda key: " ".join(f"{r[key]:.2f}" for r in record["runs"])  # noqa: E731
    return "\n".join([
        f"cold query: `headsearch query {Path(record['photo']).name} -k {record['k']}` on a library of {Path(record['video']).name}, "
        f"{record['repeat']} fresh processes, each after a bare `python -c \"{record['bare']}\"`",
        f"  query  median {record['query_median_s']:.2f} s  ({times('query_s')})",
        f"  bare   median {record['bare_median_s']:.2f} s  ({times('bare_s')})",
        f"  ratio  {record['ratio']:.1f}x the bare import",
        f"  stages of the median query (s): {stages}" if stages else "  (the query said no stages)",
    ])


def format_search(results: Sequence[SearchSpeed], seed: int) -> str:
    if not results:
        return ""
    r0 = results[0]
    lines = [f"search: {r0.dim}-d synthetic unit vectors (seed {seed}; clusters of {SYNTHETIC_PER_CLUSTER}, in-cluster cosine "
             f"~{1 / (1 + SYNTHETIC_SPREAD ** 2):.2f}), {r0.queries} queries, k={r0.k}; latency of "
             f"single queries on one faiss thread (as the library searches one query), batch q/s on {r0.threads}; recall against "
             f"exact float64 search"]
    rows = [["vectors", "index", "p50 ms", "p95 ms", "batch q/s", f"recall@{r0.k}", "memory MB", "build s"]]
    for r in results:
        rows.append([f"{r.n:,}", r.label(), f"{r.p50_ms:.3f}", f"{r.p95_ms:.3f}", f"{r.batch_qps:,.0f}", f"{r.recall_at_k:.4f}",
                     f"{r.memory_bytes / 1e6:,.1f}", f"{r.build_s:,.2f}"])
    lines += format_table(rows, ">" + "<" + ">" * 6)
    notes = []
    if any(r.index in ("flat", "ivf", "hnsw") for r in results):
        notes.append("memory of flat/ivf/hnsw: the index's own size; ivf: the library's recipe, nprobe tuned at build time "
                     "on its own vectors to recall@10 >= 0.97")
    ondisk = [r for r in results if r.index == "ivfpq-ondisk"]
    if ondisk:
        notes += ["", "ivfpq-ondisk (stand-alone), each searched by a fresh process after its files were dropped "
                      "from the page cache: cold = its first 20 queries, cached = the measured queries run again; memory = that "
                      "process's resident memory (before = before loading the index: interpreter, numpy, faiss)"]
        rows = [["vectors", "nprobe", "cold p50 ms", "cached p50 ms", "RSS MB", "before MB", "anon MB", "file MB", "index MB on disk",
                 "raw vectors MB"]]
        for r in ondisk:
            e = r.extra
            rows.append([f"{r.n:,}", str(r.params["nprobe"]), f"{e['cold_p50_ms']:.1f}", f"{e['cached_p50_ms']:.1f}", f"{e['rss_mb']:,.0f}",
                         f"{e['baseline_rss_mb']:,.0f}", f"{e['rss_anon_mb']:,.0f}", f"{e['rss_file_mb']:,.0f}", f"{e['disk_mb']:,.0f}",
                         f"{e['raw_vectors_mb']:,.0f}"])
        notes += format_table(rows, ">" * len(rows[0]))
    library = [r for r in results if r.index == "library"]
    if library:
        notes += ["", "library: the library's own store past memory, built as a library builds it (segments trained and encoded from "
                      "99% of the vectors, the last 1% added in 10 saves) and searched by a fresh process as the query engine does, "
                      "its files first dropped from the page cache; same as exact = share of queries whose top k (ids in order) equal "
                      "an exact in-memory index's"]
        rows = [["vectors", "nprobe", "segments", "cold p50 ms", "cached p50 ms", "RSS MB", "before MB", "anon MB", "file MB",
                 "store MB on disk", "same as exact", "device"]]
        for r in library:
            e = r.extra
            same = f"{e['same_as_exact']:.3f}" if "same_as_exact" in e else "-"
            rows.append([f"{r.n:,}", str(r.params["nprobe"]), str(r.params["segments"]), f"{e['cold_p50_ms']:.1f}", f"{e['cached_p50_ms']:.1f}",
                         f"{e['rss_mb']:,.0f}", f"{e['baseline_rss_mb']:,.0f}", f"{e['rss_anon_mb']:,.0f}", f"{e['rss_file_mb']:,.0f}",
                         f"{e['disk_mb']:,.0f}", same, e["device"]])
        notes += format_table(rows, ">" * (len(rows[0]) - 1) + "<")
    return "\n".join(lines + notes)


def format_indexing(r: dict) -> str:
    """The indexing speed as a table: stages, end to end, decode-only bound."""
    lines = [f"indexing: {Path(r['video']).name} ({r['video_seconds']:.1f} s, {r['width']}x{r['height']} decoded, "
             f"{r['fps']:.2f} fps, {r['decoder']}), sampling {r['sample_fps']:g} fps, model {r['model']['name']}: "
             f"{r['frames_decoded']} frames, {r['frames_sampled']} sampled, {r['tracks']} tracks, {r['sightings']} sightings"]
    rows = [["stage", "seconds", "share", "throughput", "x real time"]]
    for stage, s in r["stages"].items():
        rate = "-" if s["per_second"] is None else f"{s['per_second']:,.1f} {s['unit']}/s"
        rows.append([stage, f"{s['seconds']:.2f}", "-" if s["share"] is None else f"{100 * s['share']:.0f}%", rate,
                     "-" if s["realtime"] is None else f"{s['realtime']:.1f}x"])
    rows.append(["end to end", f"{r['wall_s']:.2f}", "100%", f"{r['frames_decoded'] / r['wall_s']:,.1f} frames/s" if r["wall_s"] else "-",
                 f"{r['realtime']:.2f}x"])
    for title, b in (("decode-only bound", r["decode_only"]), ("earlier bound (every frame RGB)", r.get("decode_every_frame_rgb"))):
        if b is not None:
            rows.append([title, f"{b['seconds']:.2f}", "", "-" if b["fps"] is None else f"{b['fps']:,.1f} frames/s",
                         "-" if b["realtime"] is None else f"{b['realtime']:.1f}x"])
    lines += format_table(rows, "<>>>>")
    if r.get("ratio") is not None:
        lines.append(f"end to end at {r['ratio']:.3f} of the decode-only rate"
                     + (f" ({r['ratio_every_frame_rgb']:.3f} of the earlier bound)" if r.get("ratio_every_frame_rgb") is not None else ""))
    if r.get("cpu_ceiling_ratio") is not None:
        b = r["decode_only"]
        lines.append(f"CPU: indexing used {r['cpu_s']:.1f} CPU s ({r['cores']:.2f} of {r['usable_cpus']} cores busy), decoding alone "
                     f"{b['cpu_s']:.1f} CPU s ({b['cores']:.2f} cores): with every core busy this work reaches at most "
                     f"{r['cpu_ceiling_ratio']:.3f} of the decode-only rate")
    if r.get("runs"):
        ratios = sorted(x["ratio"] for x in r["runs"] if x["ratio"] is not None)
        lines.append(f"over {len(r['runs'])} runs (each indexing run then its own decode-only run), the median run shown: ratios "
                     + ", ".join(f"{x:.3f}" for x in ratios))
    lines.append(f"(decode-only: every frame decoded and its small copy histogrammed, the pixels of the sampled frames "
                 f"converted, no detection; the earlier bound converted every frame's pixels; model load and detector "
                 f"start-up {r['startup_s']:.1f} s not counted)")
    if r.get("overlapped"):
        lines.append(f"(stages are busy seconds: decoding and shots run ahead in their own thread while detection, tracking and "
                     f"embedding run, so they add up to more than the wall time; detection waited {r.get('wait_s', 0.0):.2f} s for "
                     f"frames; {r.get('embedded', 0)} of {r['sightings']} sightings embedded)")
    if r.get("runtimes"):
        lines.append("(batches run on: " + "; ".join(f"{name} {_runtime_note(c)}" for name, c in r["runtimes"].items()) + ")")
    return "\n".join(lines)


def _runtime_note(choice: dict) -> str:
    """`openvino (trial: ONNX Runtime 376.4 ms, OpenVINO 115.0 ms a batch of 32)`, or the runtime alone (no trial)."""
    if choice.get("onnxruntime_ms") is None:
        return choice["runtime"]
    openvino = "failed or disagreed" if choice.get("openvino_ms") is None else f"{choice['openvino_ms']:.1f} ms"
    return f"{choice['runtime']} (trial: ONNX Runtime {choice['onnxruntime_ms']:.1f} ms, OpenVINO {openvino} a batch of {choice.get('rows')})"


def heads_text(run: HeadsRun) -> str:
    """One row per method: recall per view, precision, by source, mean IoU, time."""
    from bench.heads import METHOD_TITLES
    from headsearch.evaluation.head_boxes import VIEWS

    d = run.to_dict()
    heads = d["heads"]
    lines = [f"set {run.options.set_csv}: {d['frames']} frames of {d['files']} files, heads "
             + ", ".join(f"{v} {heads[v]}" for v in VIEWS) + f" ({d['ignored']} ignored); IoU >= {run.options.iou:g}"]
    rows = [["method"] + [f"{v} recall" for v in VIEWS] + ["precision", "by source", "mean IoU", "seconds"]]
    for r in run.results:
        t = r.scores.to_dict()
        cells = [r.method]
        for v in VIEWS:
            c = t["recall"][v]
            cells.append("-" if c["recall"] is None else f"{c['recall']:.3f} ({c['found']}/{c['heads']})")
        p = t["precision"]
        cells.append("-" if p["precision"] is None else f"{p['precision']:.3f} ({p['right']}/{p['reported']})")
        cells.append(" ".join(f"{s} {b['right']}/{b['reported']}" for s, b in t["by_source"].items()) or "-")
        cells.append("-" if t["mean_iou"] is None else f"{t['mean_iou']:.3f}")
        cells.append(f"{r.seconds:.1f}")
        rows.append(cells)
    lines += format_table(rows, "<>>>>>>>")
    for r in run.results:
        line = f"{r.method}: {METHOD_TITLES[r.method]}"
        if r.method != "faces":
            kp = r.stage_seconds.get("keypoints", 0.0)
            line += (f"; {r.sampled_frames} frames sampled (labelled ones included), keypoint head finder on {r.keypoint_frames} "
                     f"({kp:.1f} s), face detection {r.stage_seconds.get('detect', 0.0):.1f} s")
        lines.append(line)
    lines.append(f"(boxes: each stored head box scaled by {d['head_in_box']:g} about its centre is the head it holds; "
                 "by source: found heads right / counted, per how they were found)")
    return "\n".join(lines)


def compare_text(run: CompareBenchRun) -> str:
    """Per clip: its own person's same-person share, drift events, FaceSim-style number, faceless head frames, and the
    other people's other-person shares; the joined clips; the speed of the longest clip."""
    lines = [f"compare on {_count(len(run.clips), 'clip', 'clips')}, model {run.model}"]
    rows = [["clip", "identity", "reference", "head frames", "same person", "drifts", "FaceSim", "faceless", "others: other person (min)"]]
    for c in run.clips:
        o = c.own
        rows.append([Path(c.video).name, c.identity, c.reference, str(o["head_frames"]), f"{o['same_person_share']:.3f}", str(c.own_drifts),
                     "-" if o["facesim"] is None else f"{o['facesim']:.3f}", str(o["faceless_head_frames"]),
                     "-" if c.worst_other is None else f"{c.worst_other:.3f} of {len(c.others)}"])
    lines += format_table(rows, "<<<>>>>>>")
    if run.clips:
        own = [c.same_person_share for c in run.clips]
        others = [v for c in run.clips for v in c.others.values()]
        lines.append(f"own person, same person on: min {min(own):.3f}, mean {float(np.mean(own)):.3f}; clips at 0.95 or more: "
                     f"{sum(v >= 0.95 for v in own)} of {len(own)}; drift events on own clips: {sum(c.own_drifts for c in run.clips)}")
        if others:
            lines.append(f"other people's references, other person on: min {min(others):.3f}, mean {float(np.mean(others)):.3f}; "
                         f"pairs at 0.95 or more: {sum(v >= 0.95 for v in others)} of {len(others)}")
    if run.joins:
        lines.append("joined clips (first person's reference):")
        rows = [["first", "second", "join s", "change reported s", "error s", "verdict"]]
        for j in run.joins:
            rows.append([Path(j.first).name, Path(j.second).name, f"{j.join:.3f}", "-" if j.reported is None else f"{j.reported:.3f}",
                         "-" if j.error is None else f"{j.error:.3f}", j.verdict])
        lines += format_table(rows, "<<>>><")
    if run.index_seconds:
        s = run.index_seconds
        d = max(s["duration"], 1e-6)
        lines.append(f"speed on {Path(s['video']).name} ({d:.1f} s): compare's analysis {s['compare_analysis_s'] / d:.2f} s per video "
                     f"second, the indexer's {s['index_analysis_s'] / d:.2f} (compare embeds every sampled sighting, index one a second)")
    noise = run.noise_in_use
    lines.append("drift events held to the frame noise " + (f"measured on {noise.get('frames', {}).get('identity', '?')} frames: identity sd "
                 f"{noise['identity']:.4f}, head sd {noise['head']:.4f}, {noise['independent_per_s']:.2f} independent frames a second"
                 if noise and "identity" in noise and "head" in noise else "(not measured for this model: mean scores only)"))
    if run.frame_noise is not None:
        n = run.frame_noise
        lines.append(f"frame noise written to {run.options.noise_out}: identity sd {n.get('identity', float('nan')):.4f}, head sd "
                     f"{n.get('head', float('nan')):.4f}, lag-one autocorrelation {n['autocorrelation']:.3f}")
    for f in run.failed:
        lines.append(f"failed: {f}")
    return "\n".join(lines)


def _share(c: Coverage, views: Sequence[str]) -> str:
    on = sum(c.on[v] for v in views)
    return "-" if not on else f"{sum(c.covered[v] for v in views) / on:.3f}"


def _coverage_cells(c: Coverage) -> list[str]:
    d = c.to_dict()
    found = d["pieces_per_found_shot"]
    return ([_share(c, (v,)) for v in ("front", "profile", "back")]
            + [_share(c, ("front", "profile", "back")), f"{c.false}/{c.claimed}",
               f"{found:.2f} ({d['shots_found']}/{d['shots_on_screen']})" if found is not None else f"- (0/{d['shots_on_screen']})"])


def presence_text(run: PresenceRun) -> str:
    """Per person and pooled: on-screen frames by view; coverage by query and by tracks, by view; false frames; pieces."""
    d = run.to_dict()
    lines = [f"presence set {run.options.set_csv}: {d['people']} people in {d['videos']} videos; indexed in {run.index_seconds:.0f} s, "
             f"measured in {run.measure_seconds:.0f} s" + (f" (library kept: {run.library})" if run.library else "")]
    head = ["person", "on F/P/B"]
    for method in ("query", "tracks"):
        head += [f"{method} front", "profile", "back", "all", "false/claimed", "pieces (shots)"]
    rows = [head]
    for p in run.people + [None]:
        q, t = (p.query, p.tracks) if p is not None else (run.total("query"), run.total("tracks"))
        rows.append([p.name if p is not None else "all (pooled)", "/".join(str(q.on[v]) for v in ("front", "profile", "back"))]
                    + _coverage_cells(q) + _coverage_cells(t))
    lines += format_table(rows, "<" + ">" * (len(head) - 1))
    for method in ("query", "tracks"):
        c = run.total(method)
        tf = c.turned_in_found
        lines.append(f"{method}: turned (profile and back) {_share(c, ('profile', 'back'))}; in shots where the person is found "
                     + (f"{tf[0] / tf[1]:.3f} ({tf[0]}/{tf[1]} frames)" if tf[1] else "- (no turned frames there)"))
    lines.append("(coverage: share of on-screen frames claimed; false: claimed frames where the person is not on screen; pieces: "
                 "distinct tracks per shot the person is found in, mean (found shots/shots on screen); query: confident hits of "
                 "`query PHOTO`; tracks: those `redact --ref PHOTO` hides)")
    for p in run.people:
        lines += [f"{p.name}: {n}" for n in p.notes]
    lines += [f"note: {n}" for n in run.notes]
    return "\n".join(lines)


VIEW_COLOURS = {"front": (60, 170, 75), "profile": (240, 160, 40), "back": (200, 60, 60)}


def plot_presence(run: PresenceRun, path: Path) -> Path:
    """One strip per person and video: on-screen frames coloured by view, and below them the frames the query's hits
    and the redaction's tracks claim (grey), frame 0 at the left, every video scaled to the same width."""
    from PIL import Image, ImageDraw

    from bench.presence import views_of

    label_w, strip_w, lane, gap = 300, 700, 9, 8
    items = [(p, f) for p in run.people for f in sorted(set(run.on_screen[p.name]) | set(p.claims["query"]) | set(p.claims["tracks"]))]
    height = 30 + len(items) * (3 * lane + gap)
    image = Image.new("RGB", (label_w + strip_w + 10, height), "white")
    draw = ImageDraw.Draw(image)
    draw.text((4, 4), "on screen (front green, profile orange, back red); query hits; redact --ref tracks", fill="black")
    y = 30
    for person, file in items:
        frames = max(run.frame_counts.get(file, 1), 1)

        def x(f: int, frames: int = frames) -> int:
            return label_w + round(f * strip_w / frames)

        draw.text((4, y), f"{person.name[:28]} | {Path(file).name[:14]}", fill="black")
        for n in range(3):
            draw.rectangle((label_w, y + n * lane, label_w + strip_w, y + n * lane + lane - 2), fill=(235, 235, 235))
        for first, last, view in views_of(run.on_screen[person.name]).get(file, []):
            draw.rectangle((x(first), y, x(last + 1) - 1, y + lane - 2), fill=VIEW_COLOURS[view])
        for n, method in enumerate(("query", "tracks"), 1):
            for first, last in person.claims[method].get(file, []):
                draw.rectangle((x(first), y + n * lane, x(last + 1) - 1, y + n * lane + lane - 2), fill=(90, 90, 90))
        y += 3 * lane + gap
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path
