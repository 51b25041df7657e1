"""The web app's redactions (`headsearch redact` from the video and person pages) as jobs (`serve.jobs`): one redacting
at a time in the process (it decodes and encodes a whole video), the others waiting their turn.

A job follows its redaction's progress (frames done of the total, from the redactor's progress callback) and, when it is
done, shows the check of its output and its contact sheet, then offers the file and its audit trail. Its files are
written in the job's folder in the app's cache, never beside the library's videos; the source is only read.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from serve.jobs import Job, JobsBusy

RedactBusy = JobsBusy  # too many jobs waiting: the name the redaction pages knew it by


@dataclass(kw_only=True)
class RedactJob(Job):
    """One redaction: what it does, how far it is (it is the redactor's progress bar: `reset`, `update`,
    `set_description`), and its outcome."""

    video_id: int
    video: str  # the source's file name
    whom: str  # whom it hides, in words
    style: str
    out: Path  # the redacted file, in the job's folder
    audit: Path  # its audit trail
    sheet: Path  # its contact sheet
    margin: float  # a share of the head box hidden around it
    before_writing: Callable[[], None] | None = None  # called when the analysis is done and the writing starts (may refuse)

    def set_description(self, what: str) -> None:
        if what == "redacting" and self.before_writing is not None:
            self.before_writing()
        super().set_description(what)

    def to_dict(self, prefix: str = "") -> dict:
        """The job as its page and /api twin show it (links to the file and audit trail once done)."""
        done = self.state == "done"
        return {**super().to_dict(prefix), "video_id": self.video_id, "video": self.video, "whom": self.whom, "style": self.style,
                "margin": self.margin, "check": self.result.get("verify") if done else None,
                "sheet": f"/jobs/{self.id}/sheet" if done and self.sheet.is_file() else None,
                "file": f"/jobs/{self.id}/file" if done else None, "audit": f"/jobs/{self.id}/audit" if done else None,
                "file_name": self.out.name if done else None}
