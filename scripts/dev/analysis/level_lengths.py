"""Measure each level's length from the game: the x position at which Mario reaches its flag
(or, in a castle, its axe), found by a search with emulator snapshots.

    python -m scripts.dev.analysis.level_lengths 1-1 1-2 [--budget-frames 400000] [--seed 0]
        [--out common/level_lengths.json]

The search (after Go-Explore, Ecoffet et al. 2021) keeps one snapshot per cell of the level
(Mario's x and y in 16-pixel tiles), the one reached in the fewest frames, and from a cell plays a
random burst of held buttons (mostly to the right, jumping, running): a burst that dies is
dropped, one that ends in a new cell is kept. Half the bursts start from the furthest cells, half
from any cell, the less tried ones more often, so a detour that first loses ground (1-2's ledge)
is found too. It ends at the flag (the game's own
`flag_get`), or when the budget of NES frames runs out, which is reported with the furthest x.
Deterministic for a seed. Results merge into `--out` with the command that produced them.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.env import signed_x
from common.levels import parse_levels
from common.rundir import atomic_write

log = logging.getLogger("level_lengths")

# NES controller bits: right 0x80, left 0x40, B 0x02, A 0x01 (nes-py's order)
RIGHT, LEFT, B, A = 0x80, 0x40, 0x02, 0x01
BURST_BUTTONS = (RIGHT, RIGHT | A, RIGHT | B, RIGHT | A | B, RIGHT | A | B, A, LEFT, LEFT | A, 0)
FRAMES_PER_HOLD = 4  # one agent step of training


@dataclass(order=True)
class Point:
    """A snapshot the search may continue from; ordered by how good it is."""

    x: int
    neg_frames: int  # fewer frames played to get here is better
    state: object = field(default=None, compare=False)


@dataclass
class Result:
    level: str
    flag_x: int | None  # x when the game's flag_get became true; None if not reached
    max_x: int  # the furthest x reached
    frames: int  # NES frames the search played

    def to_json(self) -> dict[str, int | None]:
        return {"flag_x": self.flag_x, "max_x": self.max_x, "search_frames": self.frames}


CELL = 16  # pixels: a cell is where Mario is, in 16x16 tiles


def measure(level: str, budget_frames: int, seed: int) -> Result:
    from gym_super_mario_bros import SuperMarioBrosEnv

    world, stage = (int(x) for x in level.split("-"))
    env = SuperMarioBrosEnv(target=(world, stage))
    env.reset()
    rng = np.random.default_rng([seed, world, stage])
    *_, info = env.step(0)
    # one snapshot per cell (x, y in tiles), the one reached in the fewest frames; a cell's
    # `tries` count how often a burst started there
    cells: dict[tuple[int, int], Point] = {}
    tries: dict[tuple[int, int], int] = {}

    def x_of(info: dict) -> int:
        return signed_x(int(info["x_pos"]))

    def cell_of(info: dict) -> tuple[int, int]:
        return x_of(info) // CELL, int(info["y_pos"]) // CELL

    cells[cell_of(info)] = Point(x_of(info), -1, env.dump_state())
    played = 1
    best = x_of(info)
    while played < budget_frames:
        keys = list(cells)
        if rng.random() < 0.5:  # the furthest cells, most often the very furthest
            keys.sort(key=lambda k: cells[k], reverse=True)
            key = keys[min(int(rng.geometric(0.3)) - 1, len(keys) - 1)]
        else:  # any cell, the less tried ones more often (Go-Explore's selection)
            weights = np.array([1.0 / np.sqrt(1 + tries.get(k, 0)) for k in keys])
            key = keys[int(rng.choice(len(keys), p=weights / weights.sum()))]
        tries[key] = tries.get(key, 0) + 1
        start = cells[key]
        env.load_state(start.state)
        frames = -start.neg_frames
        ended = False
        for _ in range(int(rng.integers(1, 6))):  # holds in one burst
            button = BURST_BUTTONS[int(rng.integers(len(BURST_BUTTONS)))]
            for _ in range(FRAMES_PER_HOLD * int(rng.integers(1, 9))):
                _, _, terminated, truncated, info = env.step(button)
                frames += 1
                played += 1
                if info["flag_get"]:
                    env.close()
                    x = x_of(info)
                    log.info("%s: flag at x %d after %d search frames", level, x, played)
                    return Result(level, x, max(best, x), played)
                ended = terminated or truncated
                if ended:
                    break
            if ended:
                break
        if ended:  # died (or ran out of time): nothing to keep
            continue
        x, here = x_of(info), cell_of(info)
        if here not in cells or -frames > cells[here].neg_frames:
            cells[here] = Point(x, -frames, env.dump_state())
        if x > best:
            best = x
            log.debug("%s: x %d after %d search frames", level, x, played)
    env.close()
    log.warning("%s: no flag within %d search frames; furthest x %d", level, budget_frames, best)
    return Result(level, None, best, played)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("levels", nargs="+", help="stages or sets: 1-1, world:1, all")
    parser.add_argument("--budget-frames", type=int, default=400_000, help="NES frames per level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("common/level_lengths.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    levels = [lv for text in args.levels for lv in parse_levels(text)]
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"levels": {}}
    command = "python -m scripts.dev.analysis.level_lengths " + shlex.join(argv or sys.argv[1:])
    for level in levels:
        start = time.perf_counter()
        result = measure(level, args.budget_frames, args.seed)
        row = result.to_json() | {"seconds": round(time.perf_counter() - start, 1)}
        data["levels"][level] = row | {"command": command}
        atomic_write(args.out, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        print(f"{level}: {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
