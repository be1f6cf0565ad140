"""Per-200 k curves of level-start episodes, the last window counted to the final checkpoint's
env frames. From the repository root: python docs/lab/2026-12-frontier-starts-1-1/curves.py
RUNS_DIR NAME..."""

import glob
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from common.rundir import RunDir
from scripts.episode_windows import frame_windows, read_episodes


def final_frames(run: str) -> int:
    last = sorted(glob.glob(f"{run}/checkpoints/ckpt-*.pt"))[-1]
    return int(torch.load(last, map_location="cpu", weights_only=False)["env_frames"])


runs = {}
for name in sys.argv[2:]:
    run = f"{sys.argv[1]}/{name}"
    runs[name] = frame_windows(read_episodes(RunDir(run).episodes), 200000, final_frames(run))
print("| env frames | " + " | ".join(runs) + " | mean |")
print("|---|" + "---|" * (len(runs) + 1))
for end in sorted({w.end_frames for ws in runs.values() for w in ws}):
    cells, xs, flags = [], [], []
    for ws in runs.values():
        w = next((w for w in ws if w.end_frames == end and w.mean_max_x is not None), None)
        if w is None:
            cells.append("-")
            continue
        cells.append(f"{w.mean_max_x:,.0f} / {w.flag_rate:.0%} ({w.episodes})")
        xs.append(w.mean_max_x)
        flags.append(w.flag_rate)
    mean = f"{sum(xs) / len(xs):,.0f} / {sum(flags) / len(flags):.0%}" if xs else "-"
    print(f"| {end:,} | " + " | ".join(cells) + f" | {mean} |")
