"""`python -m scripts.frame_strip VIDEO --out FILE.png`: a strip of frames from an eval video.

The README's picture of the agent is made this way from a real evaluation episode (the eval
actor's RUN/eval/best-<level>.mp4, or a video `make eval` wrote): `--frames` screens taken at
even steps through the episode, the last one its final screen, side by side in rows of
`--per-row`, each scaled by `--scale` (nearest neighbour, so pixels stay sharp), with a gap
between them. Pure selection and tiling above the IO banner; the test builds a video, strips it
and compares the tiles with the frames it encoded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from actor.evaluation import upscale


def pick(count: int, n: int) -> list[int]:
    """`n` indices spread evenly over `count` frames, the first and the last included."""
    if count <= 0:
        raise ValueError("the video holds no frames")
    if n <= 1 or count == 1:
        return [count - 1]
    n = min(n, count)
    return sorted({round(i * (count - 1) / (n - 1)) for i in range(n)})


def tile(frames: Sequence[np.ndarray], per_row: int, gap: int, fill: int = 255) -> np.ndarray:
    """[H, W, 3] frames in rows of `per_row`, `gap` pixels of `fill` between and around them;
    a short last row is padded with blank tiles."""
    h, w, c = frames[0].shape
    rows = -(-len(frames) // per_row)
    out = np.full((rows * (h + gap) + gap, per_row * (w + gap) + gap, c), fill, np.uint8)
    for i, frame in enumerate(frames):
        r, k = divmod(i, per_row)
        y, x = gap + r * (h + gap), gap + k * (w + gap)
        out[y : y + h, x : x + w] = frame
    return out


# ---- IO -------------------------------------------------------------------------------------


def read_frames(path: Path) -> list[np.ndarray]:
    """Every frame of a video as [H, W, 3] uint8 RGB."""
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts.frame_strip", description=__doc__.split("\n")[0])
    p.add_argument("video", type=Path, help="an eval video (.mp4)")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    p.add_argument("--frames", type=int, default=6, help="screens in the strip (default 6)")
    p.add_argument("--per-row", type=int, default=6, help="screens per row (default 6)")
    p.add_argument("--scale", type=int, default=1, help="integer upscaling (default 1)")
    p.add_argument("--gap", type=int, default=4, help="pixels between screens (default 4)")
    args = p.parse_args(argv)
    if not args.video.is_file():
        p.error(f"{args.video} is not a file: name an eval video, e.g. RUN/eval/best-1-1.mp4")
    if min(args.frames, args.per_row, args.scale) < 1 or args.gap < 0:
        p.error("--frames, --per-row and --scale must be >= 1, --gap >= 0")
    import cv2

    from common.rundir import atomic_write

    frames = read_frames(args.video)
    chosen = [upscale(frames[i], args.scale) for i in pick(len(frames), args.frames)]
    strip = tile(chosen, min(args.per_row, len(chosen)), args.gap)
    ok, png = cv2.imencode(".png", cv2.cvtColor(strip, cv2.COLOR_RGB2BGR))
    if not ok:
        raise OSError(f"cannot encode {args.out} as PNG")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, png.tobytes())
    print(f"{args.out}: {len(chosen)} of {len(frames)} frames, {strip.shape[1]}x{strip.shape[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
