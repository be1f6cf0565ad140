"""What an env is: the level set, the buttons, and how frames and rewards are made.

The learner owns it (its flags of the same names) and sends it in every Welcome; the actor builds
its envs from it (`common.env`) and has no flag for any of it. The defaults here are the plain
env; the learner's flags default to them, but train perturbed (`PERTURBATION`) with frontier starts.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

from common.levels import LevelSetError, is_stage, parse_levels

ActionSet = Literal["right_only", "simple", "complex"]
# Each set extends the one before it, so an action's index means the same in every set.
_RIGHT_ONLY = [["NOOP"], ["right"], ["right", "A"], ["right", "B"], ["right", "A", "B"]]
_SIMPLE = [*_RIGHT_ONLY, ["A"], ["left"]]
_COMPLEX = [*_SIMPLE, ["left", "A"], ["left", "B"], ["left", "A", "B"], ["down"], ["up"]]
ACTION_SETS: dict[ActionSet, list[list[str]]] = {
    "right_only": _RIGHT_ONLY,
    "simple": _SIMPLE,
    "complex": _COMPLEX,
}
BUTTON_BITS = {
    "right": 0b10000000,
    "left": 0b01000000,
    "down": 0b00100000,
    "up": 0b00010000,
    "B": 0b00000010,
    "A": 0b00000001,
    "NOOP": 0,
}


class Perturbation(NamedTuple):
    sticky_actions: float  # p per NES frame of repeating the previous frame's buttons
    noop_max: int  # episodes start after 0..noop_max agent steps without buttons


PERTURBATION = Perturbation(sticky_actions=0.25, noop_max=30)  # Machado et al. 2018


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What an env is; the learner's settings, sent to each actor in its Welcome."""

    level: str = "1-1"  # "W-S" Super Mario Bros stage, or a Gymnasium id
    action_set: ActionSet = "simple"  # Mario only
    frame_skip: int = 4  # NES frames per agent step
    frame_size: int = 84  # observation is frame_size x frame_size uint8
    no_progress_steps: int = 100  # truncate after this many steps without a new max x; 0 = never
    flag_bonus: float = 0.0  # added on reaching the flag (the game's own +50 is clamped to 15)
    death_penalty: float = 0.0  # subtracted on death (the game's own -25 is clamped to -15)
    sticky_actions: float = 0.0  # each NES frame repeats the previous frame's buttons with this p
    noop_max: int = 0  # each episode starts with 0..noop_max agent steps of no buttons
    frontier_starts: float = 0.0  # Mario episodes started near the frontier (common.frontier)

    def problems(self) -> list[str]:
        """Every invalid field, each as a sentence saying what to change."""
        out = []
        if not self.level:
            out.append("level must be a stage like '1-1', a set of them, or a Gymnasium id")
        else:
            try:
                parse_levels(self.level)
            except LevelSetError as exc:
                out.append(str(exc))
        if self.is_mario and self.action_set not in ACTION_SETS:
            out.append(f"action_set must be one of {sorted(ACTION_SETS)}, got {self.action_set!r}")
        if self.frame_skip < 1:
            out.append(f"frame_skip must be >= 1, got {self.frame_skip}")
        if not 8 <= self.frame_size <= 256:
            out.append(f"frame_size must be in [8, 256], got {self.frame_size}")
        if self.no_progress_steps < 0:
            out.append(f"no_progress_steps must be >= 0 (0 disables), got {self.no_progress_steps}")
        if not 0 <= self.sticky_actions < 1:
            out.append(f"sticky_actions must be in [0, 1) (0 = off), got {self.sticky_actions}")
        if not 0 <= self.noop_max <= 1000:
            out.append(f"noop_max must be in [0, 1000] (0 = off), got {self.noop_max}")
        if not 0 <= self.frontier_starts < 1:
            out.append(f"frontier_starts must be in [0, 1) (0 = off), got {self.frontier_starts}")
        return out

    @property
    def is_mario(self) -> bool:
        """Super Mario Bros stages (one or a set), not a Gymnasium id."""
        try:
            return is_stage(parse_levels(self.level)[0])
        except LevelSetError:
            return False

    @property
    def levels(self) -> tuple[str, ...]:
        return parse_levels(self.level)

    def to_wire(self) -> dict[str, str | int | float | bool]:
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, fields: dict) -> EnvSpec:
        """The spec a Welcome carries; ValueError naming every unknown field or invalid value."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise ValueError(f"unknown env spec fields {unknown}")
        spec = cls(**fields)
        if problems := spec.problems():
            raise ValueError("; ".join(problems))
        return spec
