"""Copy a trained checkpoint into the package as the bundled default model (headsearch/models/), its weights stored
as float16 (half the size; the model computes in float32), its card extended with --note lines.

Then calibrate its thresholds on held-out identities (see headsearch/models/MODEL_CARD.md for the exact commands):
    headsearch bench HELDOUT.csv -m default --calibrate 1e-3 --thresholds-out headsearch/models/headsim-hybrid.safetensors.thresholds.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from headsearch.embedders.bundled import BUNDLED_FILE
from headsearch.model import CHECKPOINT_FORMAT, load_checkpoint, read_checkpoint_card


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--note", action="append", default=[], help="A line for the card (e.g. the training command).")
    args = parser.parse_args()
    load_checkpoint(args.checkpoint)  # fails with one line when it is not a loadable checkpoint
    meta = read_checkpoint_card(args.checkpoint)
    state = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in load_file(str(args.checkpoint)).items()}
    BUNDLED_FILE.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(BUNDLED_FILE), metadata={"format": CHECKPOINT_FORMAT})
    meta["card"] = {**meta.get("card", {}), "bundled_from": str(args.checkpoint), "weights_dtype": "float16", "notes": args.note}
    BUNDLED_FILE.with_name(BUNDLED_FILE.name + ".json").write_text(json.dumps(meta, indent=2, sort_keys=True), encoding="utf-8")
    model = load_checkpoint(BUNDLED_FILE)
    with torch.no_grad():
        z_id, z_head = model(torch.zeros(1, 3, model.cfg.img_size, model.cfg.img_size))
    print(f"wrote {BUNDLED_FILE} ({BUNDLED_FILE.stat().st_size / 1e6:.1f} MB), outputs {tuple(z_id.shape)} {tuple(z_head.shape)}")


if __name__ == "__main__":
    main()
