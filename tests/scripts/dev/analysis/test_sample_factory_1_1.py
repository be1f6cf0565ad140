"""The Sample Factory harness's episode merge: per-process frame counts into the run's total."""

import json

from scripts.dev.analysis.sample_factory_1_1 import merge_episodes
from scripts.episode_windows import read_episodes


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _episode(t, frames, max_x, flag=False):
    outcome = "flag" if flag else "death"
    return {
        "time": t,
        "process_frames": frames,
        "max_x": max_x,
        "flag": flag,
        "return": 1.0,
        "length": 10,
        "outcome": outcome,
    }


def test_each_episode_gets_every_process_count_at_its_end(tmp_path):
    _write(tmp_path / "episodes-1.jsonl", [_episode(10.0, 400, 300), _episode(30.0, 1200, 900)])
    _write(tmp_path / "episodes-2.jsonl", [_episode(20.0, 800, 500, flag=True)])
    assert merge_episodes(tmp_path, start=5.0) == 3
    lines = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert lines[0] == {"event": "start", "time": 5.0, "env_frames": 0}
    # at t=10 process 2 has logged nothing; at t=20 process 1 had logged 400; at 30, 2 had 800
    assert [(x["time"], x["env_frames"], x["max_x"]) for x in lines[1:]] == [
        (10.0, 400, 300),
        (20.0, 1200, 500),
        (30.0, 2000, 900),
    ]
    assert [x["flag"] for x in lines[1:]] == [False, True, False]
    episodes = read_episodes(tmp_path / "episodes.jsonl")  # the project's reader takes it
    assert episodes.malformed == 0
    assert list(episodes.env_frames) == [400, 1200, 2000]
