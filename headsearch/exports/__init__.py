"""Results where editors act: moments (a query's hits, a person's tracks) as timelines of OpenTimelineIO and its
adapters (.otio, CMX 3600 .edl, Final Cut 7 / Premiere .xml, .fcpxml, MLT .mlt), WebVTT cues and CSV rows.

Clips reference the original files, with source ranges on each file's own frame grid (`Timing`) and its start
timecode; nothing is re-encoded. OpenTimelineIO is the `export` extra; VTT and CSV need nothing more."""
