"""The dataset folder's contact sheets: contact/<identity>.png, one row per state, for a person to check the identities."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from trainer.dataset_format import CONTACT, Sample, contact_sheet_name, fresh_dir, swap_dir

THUMB = 64
PER_ROW = 12
MAX_ROWS = 40
LABEL_W = 300
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def write_contact_sheets(out: Path, samples: Sequence[Sample]) -> None:
    """contact/<identity>.png: one row per state (segment), up to PER_ROW crops spread over it,
    green frame = face visible, red = not, labelled with the state, file, time span and count."""
    contact = fresh_dir(out / CONTACT)
    rows_by_identity: dict[str, dict[str, list[Sample]]] = defaultdict(dict)
    for s in samples:
        rows_by_identity[s.identity].setdefault(s.state, []).append(s)
    for ident, states in rows_by_identity.items():
        cv2.imwrite(str(contact / contact_sheet_name(ident)), _contact_sheet(out, ident, states))
    swap_dir(contact, out / CONTACT)


def _contact_sheet(out: Path, ident: str, states: dict[str, list[Sample]]) -> np.ndarray:
    shown = list(states.items())[:MAX_ROWS]
    header = 28
    h = header + len(shown) * (THUMB + 6) + (18 if len(states) > MAX_ROWS else 0)
    w = LABEL_W + PER_ROW * (THUMB + 4)
    sheet = np.full((h, w, 3), 255, np.uint8)
    n_samples = sum(len(v) for v in states.values())
    cv2.putText(sheet, f"{ident}: {len(states)} states, {n_samples} samples", (6, 19), _FONT, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
    for r, (state, members) in enumerate(shown):
        _draw_state_row(sheet, out, header + r * (THUMB + 6), state, members)
    if len(states) > MAX_ROWS:
        cv2.putText(sheet, f"... {len(states) - MAX_ROWS} more states", (6, h - 5), _FONT, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    return sheet


def _draw_state_row(sheet: np.ndarray, out: Path, y: int, state: str, members: list[Sample]) -> None:
    """One state's label and up to PER_ROW of its crops, spread over it, at height y of the sheet."""
    pick = members if len(members) <= PER_ROW else [members[round(k * (len(members) - 1) / (PER_ROW - 1))] for k in range(PER_ROW)]
    times = [s.time for s in members]
    label1 = state.split("/", 1)[-1][-38:]
    label2 = f"{Path(members[0].video).name[-24:]}  {min(times):.1f}-{max(times):.1f}s  n={len(members)}"
    cv2.putText(sheet, label1, (6, y + 24), _FONT, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(sheet, label2, (6, y + 44), _FONT, 0.4, (80, 80, 80), 1, cv2.LINE_AA)
    for c, s in enumerate(pick):
        img = cv2.imread(str(out / s.head_crop))
        if img is None:
            continue
        img = cv2.resize(img, (THUMB - 4, THUMB - 4), interpolation=cv2.INTER_AREA)
        x = LABEL_W + c * (THUMB + 4)
        color = (0, 160, 0) if s.face_visible else (0, 0, 200)
        sheet[y:y + THUMB, x:x + THUMB] = color
        sheet[y + 2:y + THUMB - 2, x + 2:x + THUMB - 2] = img
