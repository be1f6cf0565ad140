"""The learner's ingest with episodes started from frontier snapshots among the others."""

from __future__ import annotations

from common import status, wire
from common.levels import level_lengths
from tests.learner.test_ingest import chunk, counter, registered_ingest


def test_frontier_start_episodes_reach_the_curves_log_and_nothing_else():
    """An episode started from a frontier snapshot (start_x >= 0) goes to episodes.jsonl with its
    start; the episode metrics (the status line's figures), the recent means and the level
    statistics count only those from the level's start."""
    ing, seen, c, _ = registered_ingest()
    try:
        start = wire.EpisodeStats(
            level="1-1", episode_return=1.0, length=3, max_x=300, flag=False, outcome="death"
        )
        frontier = wire.EpisodeStats(
            level="1-1", episode_return=9.0, length=5, max_x=3160, flag=True, outcome="flag",
            start_x=2900,
        )  # fmt: skip
        c.send(chunk(episodes=(frontier, start, frontier)))
        assert isinstance(c.recv(), wire.Credit)
        assert seen == [start] and list(ing.episodes) == [start]
        assert [e.start_x for _, _, e in ing.drain_episodes()] == [2900, -1, 2900]
        assert counter(ing, "mario_frontier_episodes_total", level="1-1") == 2
        assert counter(ing, "mario_episodes_total", level="1-1", outcome="flag") == 0
        assert counter(ing, "mario_episodes_total", level="1-1", outcome="death") == 1
        assert counter(ing, "mario_episode_max_x_sum", level="1-1") == 300
        assert counter(ing, "mario_episode_progress_count", level="1-1") == 1
        now = status.flatten(ing.metrics.registry.collect())
        assert status.level_figures(now, {})["1-1"][:3] == (300 / level_lengths()["1-1"], 0.0, 1)
        assert "flags   0.0% |" in status.status_line(now, {}, 60.0)
    finally:
        ing.stop()
