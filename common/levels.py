"""Level sets: which Super Mario Bros stages an env plays, and how it picks the next one.

A set: stages ("1-1,1-2,4-1"), a world ("world:1"), "all", or a mix ("world:1,4-1"), each stage
once, in the order written; anything else ("tests.fakes:Corridor-v0") is a Gymnasium id, alone,
but for a name shaped like a stage that is none ("1-5", "9-9"), which is refused. Whether
gymnasium knows such an id is `unregistered`'s question, asked where a run is set up.
Each env draws its next episode's level from the set, every level alike, with its own generator
(reproducible from the seed); the policy is never told which level it plays. A level's length is
its flag's (or axe's) x, measured by `scripts.dev.analysis.level_lengths` into
common/level_lengths.json; `progress` turns an episode's max x into a share of it.
"""

from __future__ import annotations

import importlib
import json
import re
from functools import cache
from pathlib import Path

import numpy as np

WORLDS = range(1, 9)
STAGES_PER_WORLD = range(1, 5)
ALL_STAGES: tuple[str, ...] = tuple(f"{w}-{s}" for w in WORLDS for s in STAGES_PER_WORLD)
LENGTHS_FILE = Path(__file__).with_name("level_lengths.json")

_STAGE = re.compile(r"^([1-8])-([1-4])$")
_STAGE_SHAPED = re.compile(r"^\d+-\d+$")  # "1-5", "9-9": meant as a stage, not a Gymnasium id
_WORLD = re.compile(r"^world:(\S*)$")


class LevelSetError(ValueError):
    """A level set that cannot be read; the message names every bad part and what is allowed."""


def is_stage(name: str) -> bool:
    return _STAGE.match(name) is not None


def parse_levels(text: str) -> tuple[str, ...]:
    """The levels of a set, in the order written, each once.

    >>> parse_levels("world:1,4-1,1-1")
    ('1-1', '1-2', '1-3', '1-4', '4-1')
    """
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1 and parts[0] and not _is_set_part(parts[0]):
        return (parts[0],)  # a Gymnasium id: a set of one
    levels: list[str] = []
    problems: list[str] = []
    for part in parts:
        world = _WORLD.match(part)
        if part == "all":
            levels += ALL_STAGES
        elif is_stage(part):
            levels.append(part)
        elif world and world.group(1).isdigit() and int(world.group(1)) in WORLDS:
            levels += [f"{world.group(1)}-{s}" for s in STAGES_PER_WORLD]
        elif world:
            problems.append(f"{part!r}: worlds are 1 to 8 ('world:1')")
        elif not part:
            problems.append("an empty part (two commas, or a comma at either end)")
        else:
            problems.append(f"{part!r}: not a stage W-S (1-1 to 8-4), 'world:N' or 'all'")
    if problems:
        raise LevelSetError(
            f"level set {text!r}: " + "; ".join(problems) + ". A set is stages like '1-1,1-2', "
            "a world 'world:1', 'all', or one Gymnasium id on its own"
        )
    return tuple(dict.fromkeys(levels))


def _is_set_part(part: str) -> bool:
    return part == "all" or _STAGE_SHAPED.match(part) is not None or part.startswith("world:")


def unregistered(text: str) -> list[str]:
    """The problem of a level set that is a Gymnasium id gymnasium cannot make: its module
    (`module:Name-v0`) does not import, or no env of that id is registered; [] for stages, and for
    a set `parse_levels` refuses (it says why).

    It imports gymnasium and the id's module, so it is asked once, where a run is set up (the
    learner's config, scripts/service before supervisord starts anything), not where envs are
    built; a run of stages never imports gymnasium here."""
    try:
        levels = parse_levels(text)
    except LevelSetError:
        return []
    if len(levels) != 1 or is_stage(levels[0]):
        return []
    env_id = levels[0]
    module, _, name = env_id.rpartition(":")
    fix = (
        "LEVELS (the learner's --level) takes stages 1-1 to 8-4, a set of them (1-1,1-2, world:1, "
        "all), or one Gymnasium id that is registered (module:Name-v0 for one a module registers)"
    )
    if module:
        try:
            importlib.import_module(module)
        except Exception as exc:  # not installed, or an error inside it
            return [f"level {env_id!r}: module {module!r} cannot be imported "
                    f"({type(exc).__name__}: {exc}); {fix}"]  # fmt: skip
    import gymnasium
    from gymnasium.envs.registration import find_highest_version, parse_env_id

    if name in gymnasium.registry:
        return []
    try:
        namespace, base, version = parse_env_id(name)
    except gymnasium.error.Error:
        namespace, base, version = None, name, 0
    if version is None and find_highest_version(namespace, base) is not None:
        return []  # unversioned: gymnasium makes the newest version
    what = (
        f"a Gymnasium id that module {module!r} registers"
        if module
        else "a registered Gymnasium id"
    )
    return [f"level {env_id!r} is neither a stage nor {what}; {fix}"]


@cache
def level_lengths() -> dict[str, int]:
    """Each measured level's length: the x of its flag or axe (levels whose search never reached
    it are left out)."""
    rows = json.loads(LENGTHS_FILE.read_text())["levels"]
    return {level: int(row["flag_x"]) for level, row in rows.items() if row.get("flag_x")}


def progress(level: str, max_x: int, flag: bool = False) -> float | None:
    """How far into its level an episode got, 0 to 1 (1 at the flag); None for a level of
    unknown length (not measured, or not a stage)."""
    if flag:
        return 1.0
    length = level_lengths().get(level)
    if length is None:
        return None
    return min(max(max_x / length, 0.0), 1.0)


# Width of the bins of x in which `end_x` counts where episodes end
END_X_BIN = 100


def end_x(max_xs: list[int] | tuple[int, ...]) -> float | None:
    """Where most of these episodes ended: the median max x of the END_X_BIN-wide bin of x that
    holds the most of them (the lowest such bin on a tie); None without any. Fed the episodes
    that took no flag, it names a level's wall: 1-2's ledge shows as ~980."""
    if not max_xs:
        return None
    xs = np.asarray(max_xs)
    bins = xs // END_X_BIN
    values, counts = np.unique(bins, return_counts=True)
    return float(np.median(xs[bins == values[np.argmax(counts)]]))


def unmeasured(levels: tuple[str, ...]) -> list[str]:
    """The stages of `levels` whose length is not known (their progress is None)."""
    return [lv for lv in levels if is_stage(lv) and lv not in level_lengths()]


class LevelSchedule:
    """Draws each episode's level from the set, every level alike."""

    def __init__(self, levels: tuple[str, ...], seed: int | tuple[int, ...]):
        if not levels:
            raise LevelSetError("a schedule needs at least one level")
        self.levels = levels
        self._rng = np.random.default_rng(seed)

    def next_level(self) -> str:
        if len(self.levels) == 1:
            return self.levels[0]
        return self.levels[int(self._rng.integers(len(self.levels)))]
