"""The layout the rehearsal starts: docs/DEPLOY.md's "Actors on other hosts", read from the page.

The page's `make keys` and `make up` lines are what a user types on each host: the learner host
(the `make up` without LEARNER_AUTOSTART=false: the learner, its actors and the eval actor) and
each actor host. The rehearsal runs those very lines, with its own addresses in place of the
page's, its own run and key directories, and fewer actors per host (the ids keep the page's
FIRST_ACTOR). So the page and the rehearsal cannot drift: change the page's commands and the
rehearsal runs the new ones; a page whose hosts would give two processes one id is refused here,
before anything starts (and by tests/scripts/dev/chaos/hosts/test_layout.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from scripts.checkout import ROOT
from scripts.service.host import PREFIX, Host

PAGE = ROOT / "docs" / "DEPLOY.md"
SECTION = "## Actors on other hosts"


class LayoutError(ValueError):
    """The page's layout cannot be rehearsed as it stands; the message says what to fix."""


@dataclass(frozen=True)
class Command:
    """One `make TARGET NAME=value ...` line of the page."""

    target: str  # keys | up
    variables: dict[str, str]

    @property
    def learner_host(self) -> bool:
        return self.variables.get("LEARNER_AUTOSTART", "true") != "false"

    def host(self) -> Host:
        """The settings this line gives `scripts.service` (as `make` passes them on)."""
        return Host.from_env({PREFIX + k: v for k, v in self.variables.items()})


@dataclass(frozen=True)
class Layout:
    keys: Command  # `make keys` on the learner host
    learner: Command  # `make up` on the learner host
    actor_hosts: tuple[Command, ...]  # `make up` on each actor host, in the page's order

    @property
    def learner_address(self) -> str:
        """The learner's address as the page writes it (its HOST)."""
        return self.learner.variables["HOST"]


def commands(text: str) -> list[Command]:
    """Every `make` line in the section's shell blocks, continuations joined, comments dropped."""
    if SECTION not in text:
        raise LayoutError(f"docs/DEPLOY.md has no section {SECTION!r}")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if len(words) >= 2 and words[0] == "make":
                variables = dict(w.split("=", 1) for w in words[2:] if "=" in w)
                out.append(Command(words[1], variables))
    return out


def read(path: Path = PAGE) -> Layout:
    """The page's layout; LayoutError when it is not one learner host and actor hosts whose ids
    (the eval actor's included) are all distinct and all hold keys."""
    found = commands(path.read_text())
    keys = [c for c in found if c.target == "keys"]
    ups = [c for c in found if c.target == "up"]
    learners = [c for c in ups if c.learner_host]
    if len(keys) != 1 or len(learners) != 1 or len(ups) < 2:
        raise LayoutError(
            f"{SECTION!r} must show one `make keys`, one `make up` of the learner host and at "
            f"least one of an actor host (LEARNER_AUTOSTART=false); found {len(keys)}, "
            f"{len(learners)} and {len(ups) - len(learners)}"
        )
    layout = Layout(keys[0], learners[0], tuple(c for c in ups if not c.learner_host))
    if "HOST" not in layout.learner.variables:
        raise LayoutError("the learner host's `make up` must set HOST (its address)")
    problems = id_problems(layout)
    if problems:
        raise LayoutError("; ".join(problems))
    return layout


def ids(h: Host) -> list[int]:
    """The actor ids a host's processes register with: its actors, and its eval actor."""
    return [*h.actor_ids, *([h.eval_id] if h.eval else [])]


def id_problems(layout: Layout) -> list[str]:
    """Two processes with one id, or an id `make keys` made no key pair for."""
    seen: dict[int, str] = {}
    problems = []
    for i, command in enumerate((layout.learner, *layout.actor_hosts)):
        where = "the learner host" if i == 0 else f"actor host {i}"
        for actor_id in ids(command.host()):
            if actor_id in seen:
                problems.append(f"id {actor_id} runs on {seen[actor_id]} and on {where}")
            seen[actor_id] = where
    keyed = set(ids(layout.keys.host()))
    if missing := sorted(set(seen) - keyed):
        problems.append(f"`make keys` makes no key pair for ids {missing}")
    return problems


def actor_host_labels(layout: Layout) -> list[str]:
    """The rehearsal's names of the page's actor hosts, in its order."""
    return [f"actors-{k + 1}" for k in range(len(layout.actor_hosts))]
