"""The reference curves drawn beside training: Sample Factory's APPO on 1-1 and a uniformly random
policy's floor per level, each with the env setting it was measured on.

A curve means little beside one measured on another env: training is perturbed by default (sticky
actions 0.25, no-op starts 0..30, `common.env_spec.PERTURBATION`), so a reference says which
setting it had, `UNPERTURBED` or `PERTURBED`, and every legend and table header that shows it says
so. `setting_of_run` reads a run's setting from RUN/config.json, so that its curves are drawn
beside the floors of the same setting.

Random floors live in scripts/random_floors.json, level by level and setting by setting, each with
the command that measured it (`python -m scripts.analysis.random_baseline ... --floors
scripts/random_floors.json` merges what it plays there): the frame skip, action set and no-progress
cutoff of the learner's defaults, and level-start episodes, as the curves count them.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import NamedTuple

from common.env_spec import PERTURBATION
from common.rundir import RunDir, atomic_write

UNPERTURBED = "unperturbed"
PERTURBED = "perturbed"
SETTINGS = (UNPERTURBED, PERTURBED)
FLOORS_FILE = Path(__file__).with_name("random_floors.json")


class ReferenceCurve(NamedTuple):
    name: str  # as legends and table headers show it, with its setting
    setting: str  # UNPERTURBED | PERTURBED
    points: tuple[tuple[float, ...], ...]


# Sample Factory 2.1.1 APPO on a 2-core machine like the project's dev machines, same env stack
# (skip 4, gray 84x84, stack 4, SIMPLE_MOVEMENT, game reward x 0.1, gamma 0.9), unperturbed: mean
# max x per 2-minute window over its first 10 minutes, and the env frames at each window's end
# (466 k at 10 minutes, ~773 frames/s): (seconds, env frames, mean max x).
SAMPLE_FACTORY_1_1 = ReferenceCurve(
    "Sample Factory APPO, unperturbed",
    UNPERTURBED,
    (
        (120.0, 93_000, 800.0),
        (240.0, 186_000, 870.0),
        (360.0, 280_000, 1_008.0),
        (480.0, 373_000, 1_172.0),
        (600.0, 466_000, 1_415.0),
    ),
)
# The same harness for 30 minutes (1.04 M frames at 575 frames/s): mean max x and flag rate per
# 200 k env frames, (bin end, mean max x, flag rate).
SAMPLE_FACTORY_1_1_BY_FRAMES = ReferenceCurve(
    "Sample Factory APPO, unperturbed",
    UNPERTURBED,
    (
        (200_000, 857.0, 0.01),
        (400_000, 1_193.0, 0.02),
        (600_000, 1_880.0, 0.14),
        (800_000, 2_130.0, 0.34),
        (1_000_000, 2_387.0, 0.49),
    ),
)


class Floor(NamedTuple):
    """A uniformly random policy on one level in one setting."""

    level: str
    setting: str  # UNPERTURBED | PERTURBED
    episodes: int
    mean_max_x: float
    mean_progress: float | None  # 0-1; None for a level of unknown length
    flag_rate: float
    command: str  # what measured it

    @property
    def label(self) -> str:
        return f"random policy, {self.setting}"


@cache
def _floors(path: Path) -> dict[str, dict[str, dict]]:
    if not path.is_file():
        return {}
    return json.loads(path.read_text())["levels"]


def floor(level: str, setting: str, path: Path | None = None) -> Floor | None:
    """The random floor of `level` in `setting` from `path` (FLOORS_FILE); None if not measured."""
    row = _floors(path or FLOORS_FILE).get(level, {}).get(setting)
    if row is None:
        return None
    return Floor(
        level, setting, int(row["episodes"]), float(row["mean_max_x"]),
        None if row.get("mean_progress") is None else float(row["mean_progress"]),
        float(row["flag_rate"]), str(row["command"]),
    )  # fmt: skip


def floors(levels: list[str], settings: list[str], path: Path | None = None) -> list[Floor]:
    """The measured floors of `levels` in `settings`, level by level."""
    out = [floor(lv, s, path) for lv in levels for s in settings]
    return [f for f in out if f is not None]


def save_floor(path: Path, f: Floor) -> None:
    """Merge one level's floor in one setting into the floors file at `path` (made if absent)."""
    data = json.loads(path.read_text()) if path.is_file() else {"levels": {}}
    row = {k: v for k, v in f._asdict().items() if k not in ("level", "setting")}
    data["levels"].setdefault(f.level, {})[f.setting] = row
    data["levels"] = dict(sorted(data["levels"].items(), key=lambda kv: _stage_key(kv[0])))
    atomic_write(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
    _floors.cache_clear()


def _stage_key(level: str) -> tuple:
    w, _, s = level.partition("-")
    return (int(w), int(s)) if w.isdigit() and s.isdigit() else (99, level)


def describe(setting: str) -> str:
    """A setting as a caption says it: the perturbed one with its sticky actions and no-op
    starts."""
    if setting == PERTURBED:
        p = PERTURBATION
        return f"{PERTURBED} (sticky actions {p.sticky_actions:g}, no-op starts 0..{p.noop_max})"
    return setting


def setting_of(sticky_actions: float, noop_max: int) -> str | None:
    """UNPERTURBED for the plain env, PERTURBED for the recipe's; None for any other."""
    if sticky_actions == 0 and noop_max == 0:
        return UNPERTURBED
    if (sticky_actions, noop_max) == tuple(PERTURBATION):
        return PERTURBED
    return None


def setting_of_run(run: Path) -> str | None:
    """A run's setting from RUN/config.json: None without one, or for a setting other than the
    two references are measured on. A config from before the perturbation keys trained plain."""
    try:
        config = json.loads(RunDir(run).config.read_text())
        return setting_of(float(config.get("sticky_actions", 0.0)), int(config.get("noop_max", 0)))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def seed_of_run(run: Path) -> int | None:
    """A run's seed from RUN/config.json (None without one)."""
    try:
        seed = json.loads(RunDir(run).config.read_text()).get("seed")
    except (OSError, ValueError, AttributeError):
        return None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


class References(NamedTuple):
    """What a figure or table of curves is drawn beside."""

    level: str | None  # the one level every curve is of; None for several (no reference fits)
    settings: tuple[str, ...]  # the runs' settings: the random floors of each are drawn

    @property
    def sample_factory(self) -> bool:
        """Sample Factory's curve is of 1-1 alone."""
        return self.level == "1-1"

    def floors(self) -> list[Floor]:
        return floors([self.level], list(self.settings)) if self.level else []


NO_REFERENCES = References(None, ())


def settings_drawn(run_settings: list[str | None]) -> tuple[str, ...]:
    """The floors' settings for runs of these settings: theirs, or both where one is unknown."""
    if not run_settings or None in run_settings:
        return SETTINGS
    return tuple(s for s in SETTINGS if s in run_settings)


def references(levels: set[str], run_settings: list[str | None]) -> References:
    """The references for curves of `levels` (all the runs' together) played in `run_settings`."""
    return References(
        next(iter(levels)) if len(levels) == 1 else None, settings_drawn(run_settings)
    )
