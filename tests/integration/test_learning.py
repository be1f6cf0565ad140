"""A learner and 2 actor processes over loopback learn the image-based Corridor env.

The goal side changes every episode and shows only in the image, so the policy must read the
frames it is given: a broken stack, an off-by-one between frames and actions, or a wrong sign in
the update keeps the return at a random policy's level.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.env import FrameEnv
from common.env_spec import EnvSpec
from common.rundir import RunDir
from scripts import report
from tests import procs
from tests.fakes import CORRIDOR_LEARNER_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LEVEL = "tests.fakes:Corridor-v0"
FRAME_BUDGET = 400_000  # env frames within which the policy must have learned (1 frame per step)


def random_policy_return(episodes: int = 300) -> float:
    env = FrameEnv(EnvSpec(level=LEVEL, frame_skip=1, no_progress_steps=20))
    rng = np.random.default_rng(0)
    returns = []
    for _ in range(episodes):
        env.reset()
        while (step := env.step(int(rng.integers(7)))).episode is None:
            pass
        returns.append(step.episode.episode_return)
    return float(np.mean(returns))


@pytest.mark.parametrize(
    "replay",
    [
        ["--replay-capacity", "0"],
        pytest.param(
            ["--replay-capacity", "512", "--replay-fraction", "0.5"],
            marks=pytest.mark.rehearsal,  # fresh-only is make test's end-to-end run
        ),
    ],
    ids=["fresh-only", "with-replay"],
)
def test_two_actor_processes_learn_corridor(tmp_path, replay):
    baseline = random_policy_return()
    target = max(1.5, baseline + 1.0)  # optimal is 1.8 (8 steps of 0.1, then +1)
    port, mport = procs.free_port(2), procs.free_port()
    run = tmp_path / "run"
    learner = procs.learner(
        run,
        port,
        mport,
        "--unroll-length",
        "16",
        "--batch-chunks",
        "4",
        "--loss-reward-scale",
        "1",
        "--loss-reward-clip",
        "0",
        "--discount",
        "0.95",
        "--learning-rate",
        "5e-4",
        *replay,
        *CORRIDOR_LEARNER_ARGS,
    )
    actor_args = ["--num-envs", "4"]
    actors = [procs.actor(tmp_path, port, i, procs.free_port(), *actor_args) for i in range(2)]
    everyone = [learner, *actors]
    rows: list[dict] = []

    def learned() -> bool:
        log = RunDir(run).metrics
        if log.exists():
            rows[:] = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        if rows and rows[-1]["env_frames"] > FRAME_BUDGET:
            raise AssertionError(f"not learned within {FRAME_BUDGET} frames: {rows[-1]}")
        return bool(rows) and (rows[-1]["mean_return"] or 0) >= target

    try:  # judged by FRAME_BUDGET; the wall-clock cap only ends a run that stopped moving, and a
        # loaded box (the CPU shared with training runs) can take several minutes to stream it
        procs.wait_until(
            f"mean return >= {target:.2f} (random policy: {baseline:.2f})", learned, 1200, everyone
        )
        final = procs.scrape(mport)
        replayed = final.get("mario_learner_samples_total{source=replay}", 0)
    finally:
        for p in everyone:
            p.stop()
    last = rows[-1]
    print(
        f"random {baseline:.2f} -> learned {last['mean_return']:.2f} after {last['env_frames']} frames, "
        f"{last['updates']} updates"
    )
    assert last["mean_return"] >= target > baseline
    # make report turns this real run's log into plots and a summary.
    assert report.main(["--run-dir", str(run)]) == 0
    for name in ("max_x.png", "return.png", "throughput.png", "losses.png", "REPORT.md"):
        assert (run / "report" / name).stat().st_size > 0
    if "0" in replay[:2]:
        assert replayed == 0
    else:  # replay was really mixed in
        assert replayed > 0 and last["replay_size"] > 0
