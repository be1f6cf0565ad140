"""The best policy the eval actor keeps (actor/best.py): the score against a slow reference, no
score before every level's window is full, the file replaced only by a better score, read back
by a restarted keeper, and played by `make eval` as a checkpoint; one definition of perturbed."""

from __future__ import annotations

import random

import pytest
import torch

from actor import best, evaluation
from common.env import EpisodeSummary
from common.env_spec import EnvSpec
from common.levels import level_lengths
from common.model import ActorCritic, ModelSpec
from scripts.evaluate import matrix as em
from scripts.evaluate.checkpoint import load_checkpoint

CORRIDOR = "tests.fakes:Corridor-v0"
JUDGED_BY = {"policy": "sampled", "sticky_actions": 0.25, "noop_max": 30}


def ep(level: str, max_x: int, flag: bool = False) -> EpisodeSummary:
    return EpisodeSummary(level, 1.0, 10, max_x, flag, "flag" if flag else "death")


def reference_score(windows: dict[str, list[EpisodeSummary]], window: int) -> float | None:
    """Straight from the definition: each level's newest `window` episodes, each one's progress
    (1 at the flag; max x over the level's length, at most 1; its max x where the length is
    unknown), averaged per level, then over the levels."""
    lengths = level_lengths()
    per_level = []
    for level, episodes in windows.items():
        if len(episodes) < window:
            return None
        total = 0.0
        for e in episodes[len(episodes) - window :]:
            if level not in lengths:
                total += e.max_x
            elif e.flag:
                total += 1.0
            else:
                total += min(e.max_x / lengths[level], 1.0)
        per_level.append(total / window)
    return sum(per_level) / len(per_level)


def test_the_score_is_the_mean_over_levels_of_each_windows_mean_progress():
    rng = random.Random(0)
    for trial in range(200):
        levels = rng.sample(["1-1", "1-2", "4-4", "8-3"], rng.randint(1, 4))
        window = rng.randint(1, 6)
        windows = {
            lv: [ep(lv, rng.randint(0, 4000), rng.random() < 0.2) for _ in range(window + 3)]
            for lv in levels
        }
        s = best.policy_score(windows, window)
        assert s is not None and s.episodes == window
        assert s.value == pytest.approx(reference_score(windows, window)), trial
        for lv in levels:  # each level's figures are its own
            assert s.levels[lv] == pytest.approx(reference_score({lv: windows[lv]}, window))
            newest = windows[lv][-window:]
            assert s.flag_rates[lv] == sum(e.flag for e in newest) / window


def test_a_level_of_unknown_length_scores_its_mean_max_x():
    windows = {CORRIDOR: [ep(CORRIDOR, 4), ep(CORRIDOR, 8, flag=True)]}
    assert best.policy_score(windows, 2).value == 6.0 == reference_score(windows, 2)


def test_no_score_until_every_levels_window_is_full():
    """A lucky first episode, or one level played before the others, is never a best."""
    full = [ep("1-1", 3000)] * 3
    assert best.policy_score({"1-1": [ep("1-1", 3161, flag=True)]}, 3) is None
    assert best.policy_score({"1-1": full, "1-2": full[:2]}, 3) is None
    assert best.policy_score({}, 3) is None
    assert best.policy_score({"1-1": full, "1-2": full}, 3) is not None
    with pytest.raises(ValueError, match="window must be >= 1"):
        best.policy_score({"1-1": full}, 0)


def score_of(value: float, levels: tuple[str, ...] = ("1-1",)) -> best.Score:
    return best.Score(value, dict.fromkeys(levels, value), dict.fromkeys(levels, 0.0), 10)


def model(seed: int) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(ModelSpec(num_actions=7))


def test_a_worse_score_never_replaces_a_better_best_and_a_restart_reads_it_back(tmp_path):
    path = tmp_path / "eval" / "best-policy.pt"
    keeper = best.BestKeeper(path)
    assert keeper.best is None
    env = EnvSpec(level="1-1", action_set="simple")
    assert keeper.keep(score_of(0.6), model(1), env, 10, 10 * 512, JUDGED_BY)
    assert keeper.keep(score_of(0.8), model(2), env, 20, 20 * 512, JUDGED_BY)
    kept = path.read_bytes()
    assert not keeper.keep(score_of(0.5), model(3), env, 30, 30 * 512, JUDGED_BY)  # worse
    assert not keeper.keep(
        score_of(0.8), model(4), env, 40, 40 * 512, JUDGED_BY
    )  # a tie keeps the older
    assert path.read_bytes() == kept

    restarted = best.BestKeeper(path)  # a new eval actor on the same directory
    assert restarted.best == best.Best(0.8, 20, ("1-1",))
    assert not restarted.keep(score_of(0.7), model(5), env, 50, 50 * 512, JUDGED_BY)
    assert path.read_bytes() == kept
    assert restarted.keep(score_of(0.9), model(6), env, 60, 60 * 512, JUDGED_BY)
    assert best.BestKeeper(path).best == best.Best(0.9, 60, ("1-1",))
    assert [p.name for p in path.parent.iterdir()] == ["best-policy.pt"]  # no temp file left


def test_a_best_of_another_level_set_is_replaced(tmp_path):
    path = tmp_path / "best-policy.pt"
    keeper = best.BestKeeper(path)
    assert keeper.keep(score_of(0.9), model(1), EnvSpec(level="1-1"), 10, 10 * 512, JUDGED_BY)
    other = score_of(0.3, ("1-1", "1-2"))
    assert keeper.keep(other, model(2), EnvSpec(level="1-1,1-2"), 20, 20 * 512, JUDGED_BY)
    assert best.BestKeeper(path).best == best.Best(0.3, 20, ("1-1", "1-2"))


def test_a_file_that_is_not_a_best_is_replaced_by_the_first_best(tmp_path):
    path = tmp_path / "best-policy.pt"
    path.write_bytes(b"not a checkpoint")
    keeper = best.BestKeeper(path)
    assert keeper.best is None
    assert keeper.keep(score_of(0.1), model(1), EnvSpec(), 1, 1 * 512, JUDGED_BY)


def test_the_best_file_is_a_checkpoint_make_eval_plays_with_its_weights_and_env(tmp_path):
    path = tmp_path / "best-policy.pt"
    net = model(7)
    env = EnvSpec(level="1-1", action_set="simple", frame_skip=4, no_progress_steps=60)
    best.BestKeeper(path).keep(score_of(0.7), net, env, 33, 33 * 512, JUDGED_BY)
    ckpt = load_checkpoint(path)
    assert ckpt.policy_version == 33 and ckpt.env_frames == 33 * 512  # the weights message's
    assert ckpt.trained_action_set == "simple" and ckpt.config["no_progress_steps"] == 60
    assert ckpt.best["score"] == 0.7 and ckpt.best["policy"] == "sampled"
    for name, tensor in net.state_dict().items():
        assert torch.equal(ckpt.model.state_dict()[name], tensor), name


def test_perturbed_has_one_definition_and_never_judges_with_less_than_training():
    assert em.PERTURBED[1:] == tuple(evaluation.PERTURBATION) == (0.25, 30)
    plain = evaluation.perturbed(EnvSpec(level="1-2"))
    assert (plain.level, plain.sticky_actions, plain.noop_max) == ("1-2", 0.25, 30)
    more = evaluation.perturbed(EnvSpec(sticky_actions=0.4, noop_max=10))
    assert (more.sticky_actions, more.noop_max) == (0.4, 30)
