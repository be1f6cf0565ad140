"""`--frontier-starts-by stall` through real processes: a learner and a Mario actor on 1-1. The
learner sends each level's share of frontier starts with its weights, the actor starts that share
of its episodes from its snapshots, and the share is --frontier-starts times the level's stall rate
(0 until the level has played STALL_MIN_EPISODES from its start)."""

from __future__ import annotations

import pytest

from learner.levels import STALL_MIN_EPISODES
from tests import procs

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal, pytest.mark.integration]

SHARE = 0.9
LEARNER_ARGS = ["--unroll-length", "32", "--batch-chunks", "1", "--no-progress-steps", "32",
                "--frontier-starts", str(SHARE), "--frontier-starts-by", "stall"]  # fmt: skip


def test_the_learners_share_per_level_starts_the_actors_episodes_at_their_frontier(tmp_path):
    port, lport, aport = procs.free_port(2), procs.free_port(), procs.free_port()
    learner = procs.learner(tmp_path / "run", port, lport, *LEARNER_ARGS)
    actor = procs.actor(tmp_path, port, 0, aport, "--num-envs", "2")
    started = [learner, actor]
    lm = lambda: procs.scrape(lport)  # noqa: E731
    share_key, stall_key = (
        f"mario_level_{k}{{level=1-1}}" for k in ("frontier_share", "stall_rate")
    )
    frontier_key = "mario_frontier_episodes_total{level=1-1}"

    early: list[dict[str, float]] = []  # scrapes with frontier episodes before the share could be

    def seen() -> dict[str, float]:
        m = lm()
        from_start = sum(v for k, v in m.items() if k.startswith("mario_episodes_total{level=1-1,"))
        if m.get(frontier_key, 0) > 0 and from_start < STALL_MIN_EPISODES:
            early.append(m)  # the spec's flat share, not the learner's
        return m

    def scaled(m: dict[str, float]) -> bool:  # one record: the share is SHARE x the stall rate
        return m.get(share_key, 0) > 0 and m[share_key] == pytest.approx(SHARE * m[stall_key])

    try:
        procs.wait_until("1-1's share from its stall rate", lambda: scaled(seen()), 300, started)
        procs.wait_until("episodes from 1-1's frontier", lambda: seen().get(frontier_key, 0) >= 2,
                         300, started)  # fmt: skip
        assert not early, early[0]
    finally:
        actor.stop()
        learner.stop()
