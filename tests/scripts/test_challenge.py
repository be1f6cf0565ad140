"""`make best` (scripts/evaluate/challenge.py): a stopped run's latest checkpoint against its kept
best policy, judged as the eval actor judges, against a slow replay of the same episodes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from actor.best import BestKeeper, Score, challenge_plan
from actor.evaluation import EpisodePlayer, model_policy, perturbed
from common.env import build_envs
from common.env_spec import EnvSpec
from common.model import ActorCritic, ModelSpec
from common.rundir import RunDir
from learner import checkpoint
from scripts.checkout import ROOT
from scripts.evaluate import challenge
from tests.fakes import Corridor

CORRIDOR = "tests.fakes:Corridor-v0"
# as the learner records it: frontier starts resolved by the learner (None: its own default)
CONFIG = {"level": CORRIDOR, "action_set": "simple", "frame_size": 84, "sticky_actions": 0.25,
          "frontier_starts": None}  # fmt: skip


@pytest.fixture(autouse=True)
def seeded_corridor(monkeypatch):
    """The corridor's goal sides drawn from seed 0 in every env: a Gymnasium env is reset unseeded
    (only the game's own levels replay alike), and both plays here must see the same episodes."""
    reset = Corridor.reset

    def seeded(self, *, seed=None, options=None):
        if not getattr(self, "seeded", False):
            self.seeded, seed = True, 0
        return reset(self, seed=seed, options=options)

    monkeypatch.setattr(Corridor, "reset", seeded)


def network(seed: int) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(ModelSpec(num_actions=7)).eval()


def save_checkpoint(run: RunDir, model: ActorCritic, version: int) -> None:
    state = {
        "model": model.state_dict(), "policy_version": version, "env_frames": 1024 * version,
        "agent_steps": 256 * version, "model_spec": model.spec.to_wire(), "config": CONFIG,
        "saved_at": 0.0,
    }  # fmt: skip
    checkpoint.save(run, state, version)


def keep(run: RunDir, model: ActorCritic, version: int, score: float) -> None:
    """What the eval actor leaves after a challenge its candidate won."""
    keeper = BestKeeper(run.best_policy)
    s = Score(score, {CORRIDOR: score}, {CORRIDOR: 0.0}, 15)
    spec = EnvSpec(level=CORRIDOR)
    assert keeper.settle(s, None, s, model, spec, version, 1024 * version, {"policy": "sampled"})


def reference(models: list[ActorCritic], episodes: int, seed: int) -> list[float]:
    """Each model's mean max x, played as the eval actor plays a challenge: one env, the
    models in turn, one generator for the sampling."""
    setting = perturbed(EnvSpec(level=CORRIDOR, sticky_actions=0.25))
    env = build_envs(dataclasses.replace(setting, level=CORRIDOR), 1, seed=seed)[0]
    player = EpisodePlayer(env, models[0].spec.state_size, record=False)
    rng = np.random.default_rng(seed)
    (n,) = challenge_plan([CORRIDOR], episodes).values()
    means = []
    with torch.no_grad():
        for model in models:
            policy = model_policy(model, greedy=False, rng=rng)
            means.append(float(np.mean([player.play(policy).summary.max_x for _ in range(n)])))
    env.close()
    return means


@pytest.mark.parametrize(("latest_seed", "kept_seed", "stays"), [(1, 0, 40), (0, 1, 20)])
def test_the_latest_checkpoint_and_the_kept_best_play_the_same_episodes_and_the_better_stays(
    tmp_path, latest_seed, kept_seed, stays
):
    run = RunDir(tmp_path / "run")
    latest, kept = network(latest_seed), network(kept_seed)
    save_checkpoint(run, latest, 40)
    keep(run, kept, 20, score=123.0)
    ours, theirs = reference([latest, kept], episodes=6, seed=0)

    said = challenge.challenge(run.root, episodes=6, seed=0)

    best = BestKeeper(run.best_policy).best
    winner = (40, ours) if ours > theirs else (20, theirs)  # a tie keeps the kept one
    assert winner[0] == stays  # each outcome is played here
    assert (best.policy_version, best.score) == pytest.approx(winner)
    assert f"score {ours:.3f}" in said and f"v20 (kept): score {theirs:.3f}" in said
    assert f"holds v{winner[0]}" in said
    state = torch.load(run.best_policy, weights_only=True)
    assert state["best"]["judged_on"] == "challenge" and state["best"]["sticky_actions"] == 0.25
    assert state["best"]["episodes_per_level"] == 6
    if winner[0] == 40:
        assert state["env_frames"] == 40 * 1024 and "window_score" not in state["best"]
        assert all((state["model"][k] == v).all() for k, v in latest.state_dict().items())


def test_with_nothing_kept_the_latest_checkpoint_is_kept_on_its_own_score(tmp_path):
    run = RunDir(tmp_path / "run")
    save_checkpoint(run, network(0), 40)
    (ours,) = reference([network(0)], episodes=4, seed=3)
    said = challenge.challenge(run.root, episodes=4, seed=3)
    assert "nothing comparable kept" in said
    assert BestKeeper(run.best_policy).best[:2] == pytest.approx((ours, 40))


def test_a_kept_best_as_new_as_the_latest_checkpoint_is_left_as_it_is(tmp_path):
    run = RunDir(tmp_path / "run")
    save_checkpoint(run, network(0), 40)
    keep(run, network(1), 40, score=5.0)
    before = run.best_policy.read_bytes()
    assert "nothing to challenge" in challenge.challenge(run.root, episodes=4)
    assert run.best_policy.read_bytes() == before
    assert challenge.unjudged(run.root) is None  # make train says nothing at its stop


def test_a_stopped_run_whose_last_checkpoint_was_never_judged_is_told_to_make_best(tmp_path):
    run = RunDir(tmp_path / "run")
    assert challenge.unjudged(run.root) is None  # nothing there
    save_checkpoint(run, network(0), 20)
    assert challenge.unjudged(run.root) is None  # nothing kept: make eval plays the latest
    keep(run, network(1), 20, score=5.0)
    save_checkpoint(run, network(0), 41)
    hint = challenge.unjudged(run.root)
    assert "v20 (what make eval plays)" in hint and "last checkpoint, v41" in hint
    assert f"make best RUN={run.root}" in hint


def test_make_best_refuses_a_run_it_cannot_play_saying_what_to_pass(tmp_path):
    def make_best(run: Path, *extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "scripts.evaluate.challenge", "--run-dir", str(run), *extra]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)

    out = make_best(tmp_path / "nope")
    assert out.returncode == 2 and "pass RUN=<run dir>" in out.stderr
    (tmp_path / "empty").mkdir()
    out = make_best(tmp_path / "empty")
    assert out.returncode == 2 and "has no checkpoints" in out.stderr
    out = make_best(tmp_path / "empty", "--episodes", "0")
    assert out.returncode == 2 and "--episodes must be >= 1" in out.stderr
    assert "Traceback" not in out.stderr
