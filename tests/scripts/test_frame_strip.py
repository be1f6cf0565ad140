"""scripts.frame_strip: the frames it picks and tiles, against a video it is given."""

from __future__ import annotations

from fractions import Fraction

import cv2
import numpy as np
import pytest

from actor.evaluation import write_video
from scripts import frame_strip


def test_pick_spreads_the_indices_and_keeps_both_ends():
    assert frame_strip.pick(10, 4) == [0, 3, 6, 9]
    assert frame_strip.pick(3, 6) == [0, 1, 2]  # never more frames than the video has
    assert frame_strip.pick(5, 1) == [4]  # one screen: the final one
    with pytest.raises(ValueError, match="no frames"):
        frame_strip.pick(0, 3)


def test_tile_places_each_frame_in_its_cell():
    frames = [np.full((2, 3, 3), v, np.uint8) for v in (10, 20, 30)]
    out = frame_strip.tile(frames, per_row=2, gap=1, fill=0)
    assert out.shape == (2 * 3 + 1, 2 * 4 + 1, 3)
    for i, v in enumerate((10, 20, 30)):
        r, k = divmod(i, 2)
        y, x = 1 + r * 3, 1 + k * 4
        assert (out[y : y + 2, x : x + 3] == v).all()
    assert (out[4:6, 5:8] == 0).all()  # the short last row's blank cell


def test_a_strip_of_a_real_video(tmp_path):
    # flat screens of distinct greys survive H.264 closely enough to tell apart
    levels = [20 * i + 20 for i in range(10)]
    frames = [np.full((64, 64, 3), v, np.uint8) for v in levels]
    video = tmp_path / "best-1-1.mp4"
    write_video(video, frames, Fraction(15))
    out = tmp_path / "strip.png"
    assert frame_strip.main([str(video), "--out", str(out), "--frames", "4", "--gap", "2"]) == 0
    strip = cv2.cvtColor(cv2.imread(str(out)), cv2.COLOR_BGR2RGB)
    assert strip.shape == (64 + 4, 4 * 66 + 2, 3)
    for k, i in enumerate(frame_strip.pick(10, 4)):
        x = 2 + k * 66
        assert abs(float(strip[2:66, x : x + 64].mean()) - levels[i]) < 4


def test_a_missing_video_is_refused_naming_what_to_give(tmp_path, capsys):
    with pytest.raises(SystemExit):
        frame_strip.main([str(tmp_path / "none.mp4"), "--out", str(tmp_path / "s.png")])
    assert "name an eval video" in capsys.readouterr().err
