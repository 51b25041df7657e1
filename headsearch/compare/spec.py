"""A comparison's spec: everything that decides its verdicts, in one file that travels with the numbers.

The model (its name, and its version, which carries its weights' SHA-256), the detectors' weights (SHA-256), the bars
and their false-accept rate, the sample rate and every setting of the analysis and of the timeline. `compare
--write-spec FILE` writes the one in force; `compare --spec FILE` runs with it (refusing, in one line, a model or a
detector whose weights differ); every entry of `compare --json` names the digest of the spec it ran with. The same
spec on the same clip gives the same verdicts, to the frame.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.settings import IndexSettings
from headsearch.compare.timeline import CompareSettings
from headsearch.evaluation.thresholds import Thresholds
from schemas.records import ModelInfo

SPEC_FORMAT = 1
NOT_VERDICTS = ("decode_ahead", "embed_batch", "thumbnail_px")  # settings of the analysis that change no verdict: left out
THRESHOLD_FIELDS = ("far", "identity", "same_look", "head_identity", "appearance", "union_factor", "frame_noise")


def detector_digests() -> dict[str, str]:
    """The SHA-256 of the face detector's and the keypoint finder's weights."""
    from retinaface.weights import WEIGHTS

    from headsearch.detection.keypoints import MOVENET_PATH

    return {"faces": hashlib.sha256(WEIGHTS).hexdigest(), "keypoints": hashlib.sha256(MOVENET_PATH.read_bytes()).hexdigest()}


@dataclass(frozen=True)
class CompareSpec:
    """What decides a comparison's verdicts (see the module's docstring)."""

    model: dict  # name, version (its weights' digests), source
    detectors: dict  # name -> SHA-256 of its weights
    thresholds: dict  # THRESHOLD_FIELDS
    analysis: dict  # IndexSettings, the sample rate among them (`sample_fps`; every frame: EVERY_FRAME_FPS)
    compare: dict  # CompareSettings
    format: int = SPEC_FORMAT

    @classmethod
    def of(cls, model: ModelInfo, thresholds: Thresholds, analysis: IndexSettings, compare: CompareSettings) -> CompareSpec:
        return cls({"name": model.name, "version": model.version, "source": model.source or model.name}, detector_digests(),
                   {name: getattr(thresholds, name) for name in THRESHOLD_FIELDS},
                   {k: v for k, v in asdict(analysis).items() if k not in NOT_VERDICTS}, asdict(compare))

    def text(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @property
    def digest(self) -> str:
        """The first 16 hex digits of the SHA-256 of the spec, written canonically."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]

    def write(self, path: Path) -> None:
        try:
            write_bytes_atomic(Path(path), self.text().encode())
        except OSError as e:
            raise HeadsearchError(f"{path}: cannot write the spec ({e.strerror or e})") from e

    @classmethod
    def read(cls, path: Path) -> CompareSpec:
        """A spec file; one line when it cannot be read or is not a spec of this format."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise HeadsearchError(f"{path}: cannot read the spec ({e.strerror or e})") from e
        except ValueError as e:
            raise HeadsearchError(f"{path}: not a spec (not JSON: {e})") from e
        names = {f.name for f in fields(cls)}
        if not isinstance(d, dict) or set(d) != names or d.get("format") != SPEC_FORMAT:
            raise HeadsearchError(f"{path}: not a compare spec of format {SPEC_FORMAT} (`headsearch compare --write-spec` writes one)")
        spec = cls(**d)
        try:
            spec.index_settings(), spec.compare_settings()
            if not all(isinstance(spec.model.get(k), str) for k in ("name", "version", "source")):
                raise TypeError("model: name, version and source")
            spec.thresholds_for(ModelInfo(spec.model["name"], spec.model["version"], 0))
        except (TypeError, ValueError, KeyError) as e:
            raise HeadsearchError(f"{path}: a damaged spec ({e})") from None
        return spec

    def index_settings(self) -> IndexSettings:
        return IndexSettings.from_env(**self.analysis)  # the environment's only for what changes no verdict

    def compare_settings(self) -> CompareSettings:
        return CompareSettings(**self.compare)

    def thresholds_for(self, model: ModelInfo) -> Thresholds:
        t = self.thresholds
        optional = {name: None if t.get(name) is None else float(t[name]) for name in ("head_identity", "appearance")}
        return Thresholds(float(t["far"]), float(t["identity"]), float(t["same_look"]), model.name, model.version, **optional,
                          union_factor=float(t.get("union_factor") or 1.0),
                          frame_noise=t.get("frame_noise") if isinstance(t.get("frame_noise"), dict) else None)

    def check(self, model: ModelInfo) -> None:
        """One line when the model or a detector in use is not the one the spec was made with."""
        if (model.name, model.version) != (self.model["name"], self.model["version"]):
            raise HeadsearchError(f"the spec was made with {self.model['name']} ({self.model['version']}), not {model.label()}: "
                                  "its verdicts need the same weights")
        ours = detector_digests()
        for name, digest in self.detectors.items():
            if ours.get(name) != digest:
                raise HeadsearchError(f"the spec's {name} detector weights ({digest[:12]}) are not those installed "
                                      f"({(ours.get(name) or 'none')[:12]}): its verdicts need the same weights")
