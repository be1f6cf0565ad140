"""A learner with the progress schedule and a real Mario actor over a set of two levels: the
learner's per-level statistics become weights, the weights travel with the policy, and the
actor's envs draw with them."""

from __future__ import annotations

import pytest

from tests import procs

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LEVELS = ("1-1", "1-4")


def test_the_actor_draws_levels_with_the_learners_progress_weights(tmp_path):
    port, lport, aport = procs.free_port(2), procs.free_port(), procs.free_port()
    # short episodes (cut after 16 steps without progress) so that both levels finish many
    learner = procs.learner(
        tmp_path / "run",
        port,
        lport,
        *("--level", ",".join(LEVELS), "--no-progress-steps", "16"),
        "--level-schedule",
        "progress",
        "--level-window",
        "4",
        "--schedule-staleness",
        "0",  # rank weights alone: 2/3 and 1/3, steady while the ranking holds
        "--unroll-length",
        "16",
        "--batch-chunks",
        "1",
    )
    actor = procs.actor(tmp_path, port, 0, aport, "--num-envs", "2")
    started = [learner, actor]

    def weights(port: int, name: str) -> dict[str, float]:
        m = procs.scrape(port)
        return {lv: m.get(f"{name}{{level={lv}}}", -1.0) for lv in LEVELS}

    def agree() -> bool:
        """The learner's gauges show both levels' progress (the weights are set beside them)
        and uneven weights, and the actor draws with exactly those."""
        played = all(p > 0 for p in weights(lport, "mario_level_progress").values())
        sent = weights(lport, "mario_level_schedule_weight")
        used = weights(aport, "mario_actor_level_probability")
        uneven = abs(sent["1-1"] - 0.5) > 0.05  # both levels ranked: no longer the tie's 50/50
        return played and uneven and all(abs(sent[lv] - used[lv]) < 1e-6 for lv in LEVELS)

    try:
        procs.wait_until(
            "an episode of each level at the learner",
            lambda: all(
                procs.scrape(lport).get(f"mario_episode_progress_count{{level={lv}}}", 0) > 0
                for lv in LEVELS
            ),
            240,
            started,
        )
        procs.wait_until("the actor drawing with the learner's weights", agree, 120, started)
        m = procs.scrape(lport)
        for lv in LEVELS:
            assert 0 < m[f"mario_level_progress{{level={lv}}}"] <= 1
        # the weaker level (lower progress) is drawn more often: both gauges of one scrape
        sent = {lv: m[f"mario_level_schedule_weight{{level={lv}}}"] for lv in LEVELS}
        prog = {lv: m[f"mario_level_progress{{level={lv}}}"] for lv in LEVELS}
        weak, strong = sorted(LEVELS, key=prog.get)
        assert prog[weak] == prog[strong] or sent[weak] > sent[strong]
    finally:
        for p in started:
            p.stop()
