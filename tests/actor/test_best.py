"""The best policy the eval actor keeps (actor/best.py): the window score against a slow
reference, no score before every level's window is full; the rule: a window only nominates, and a
nominee is kept only if it beats the kept policy on fresh episodes, so a lucky window no longer
wins and the newest policy displaces an old lucky one; the file read back by a restarted keeper,
and played by `make eval` as a checkpoint; one definition of perturbed."""

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


def played(flags: int, n: int, level: str = "1-1") -> list[EpisodeSummary]:
    """`n` episodes of `level`, `flags` of them at the flag, the others dead halfway (3161 / 2)."""
    return [ep(level, 3161, True) for _ in range(flags)] + [ep(level, 1580)] * (n - flags)


class Run:
    """A run's eval actor as actor/eval.py drives the keeper: each window score asks whether it
    nominates its policy; a nominee plays `fresh` episodes of its own, as does the kept policy,
    each drawn from the policy's true flag rate (`rates`), and the keeper settles. `old_rule`:
    what the keeper did before, the highest window kept."""

    ENV = EnvSpec(level="1-1")

    def __init__(self, path, rates: dict[int, float], fresh: int = 30):
        self.keeper, self.rates, self.fresh = best.BestKeeper(path), rates, fresh
        self.models: dict[int, ActorCritic] = {}
        self.highest: tuple[float, int] = (-1.0, -1)  # the old rule: (window score, version)
        self.challenges = 0

    def fresh_score(self, version: int) -> best.Score:
        flags = round(self.rates[version] * self.fresh)
        return best.episodes_score({"1-1": played(flags, self.fresh)})

    def window(self, version: int, flags: int) -> None:
        """A full window of 10 sampled episodes, `flags` at the flag, ends at policy `version`."""
        window = best.policy_score({"1-1": played(flags, 10)}, 10)
        self.highest = max(self.highest, (window.value, version))
        if not self.keeper.nominates(window):
            return
        self.challenges += 1
        net = self.models.setdefault(version, model(version))
        rival = self.keeper.rival(net.spec, ("1-1",))
        kept = self.keeper.best
        if rival is not None:  # the kept policy's weights are what it plays with
            torch.testing.assert_close(
                rival.state_dict(), self.models[kept.policy_version].state_dict()
            )
        theirs = self.fresh_score(kept.policy_version) if rival is not None else None
        self.keeper.settle(
            self.fresh_score(version), theirs, window, net, self.ENV, version, version * 512,
            JUDGED_BY,
        )  # fmt: skip


def test_a_lucky_window_no_longer_wins(tmp_path):
    """1-1, as the 4 M-frame run went: v2792 drew a window of 10 flags out of 10 (0.994 then) but
    flags 73% of fresh episodes; v3600 and the last policy, v4000, flag 80% and 87%. The highest
    window kept v2792 for good; now it loses its challenge to the kept v2000 (77%), and the
    newest policy, better on fresh episodes, is what is kept."""
    rates = {1000: 0.40, 2000: 0.77, 2792: 0.73, 3600: 0.80, 4000: 0.87}
    run = Run(tmp_path / "best-policy.pt", rates)
    windows = [(1000, 4), (2000, 8), (2792, 10), (3000, 7), (3600, 9), (4000, 9), (4000, 8)]
    rates[3000] = 0.74
    for version, flags in windows:
        run.window(version, flags)
    assert run.highest == (1.0, 2792)  # what the window's maximum would have kept
    kept = run.keeper.best
    assert kept.policy_version == 4000 and kept.score == run.fresh_score(4000).value
    assert run.challenges == 5  # v1000, v2000, v2792 (lost), v3600, v4000; v3000 fell short
    state = best.read_best(run.keeper.path)
    assert state["env_frames"] == 4000 * 512 and state["best"]["window_score"] == pytest.approx(
        0.95, abs=1e-3
    )
    assert (
        state["best"]["episodes_per_level"] == 30 and state["best"]["flag_rates"]["1-1"] == 26 / 30
    )


def test_a_kept_policy_is_measured_again_at_every_challenge(tmp_path):
    """A best kept on its lucky window (as a release before challenges kept them) or on a lucky
    challenge holds its score only until the next challenge: it plays fresh episodes then, and
    a newer, better policy displaces it. A lost challenge leaves the kept one its new score."""
    path = tmp_path / "best-policy.pt"
    rates = {2792: 0.73, 3600: 0.77, 4000: 0.87}
    run = Run(path, rates)
    run.models[2792] = model(2792)
    lucky = {"model": run.models[2792].state_dict(), "model_spec": run.models[2792].spec.to_wire()}
    lucky |= {"policy_version": 2792, "env_frames": -1, "config": Run.ENV.to_wire()}
    lucky["best"] = {"score": 0.994, "levels": {"1-1": 0.994}}  # a window's, never challenged
    torch.save(lucky, path)
    run.keeper = best.BestKeeper(path)
    run.window(3600, 9)  # 0.95: below the lucky score, no challenge
    assert run.challenges == 0
    run.window(3600, 10)  # a window of its own luck: challenged; fresh, 0.885 against 0.865
    assert run.keeper.best.policy_version == 3600
    run.window(4000, 9)  # 0.95 now beats the kept score, a fresh one
    assert run.keeper.best == best.Best(run.fresh_score(4000).value, 4000, ("1-1",))

    rates[4100] = 0.70
    run.window(4100, 10)  # a lucky window of a worse policy: the kept one stays, freshly scored
    assert run.keeper.best.policy_version == 4000
    assert run.keeper.best.score == run.fresh_score(4000).value
    restarted = best.BestKeeper(path)  # a new eval actor on the same directory
    assert restarted.best == run.keeper.best
    assert [p.name for p in path.parent.iterdir()] == ["best-policy.pt"]  # no temp file left


def test_a_tie_keeps_the_kept_policy():
    assert best.wins(0.9, None) and best.wins(0.91, 0.9)
    assert not best.wins(0.9, 0.9) and not best.wins(0.5, 0.9)


def test_a_challenge_spreads_its_episodes_over_the_levels():
    assert best.challenge_plan(("1-1",), 30) == {"1-1": 30}
    assert best.challenge_plan(("1-1", "1-2", "1-3", "1-4"), 30) == dict.fromkeys(
        ("1-1", "1-2", "1-3", "1-4"), 8
    )
    assert set(
        best.challenge_plan(
            tuple(f"{w}-{s}" for w in range(1, 9) for s in range(1, 5)), 30
        ).values()
    ) == {1}
    fresh = best.episodes_score({"1-1": played(3, 4), "1-2": played(1, 4, "1-2")})
    assert fresh.value == pytest.approx((3.5 / 4 + 2.5 / 4) / 2, abs=1e-3) and fresh.episodes == 4


def test_what_cannot_be_compared_has_no_rival_and_the_candidate_plays_alone(tmp_path):
    """Nothing kept, a best of another level set or of another network: the candidate plays
    its fresh episodes alone and is kept; a file that is not a best is replaced too."""
    path = tmp_path / "best-policy.pt"
    keeper = best.BestKeeper(path)
    spec = ModelSpec(num_actions=7)
    assert keeper.nominates(score_of(0.0)) and keeper.rival(spec, ("1-1",)) is None
    assert keeper.settle(score_of(0.9), None, score_of(0.9), model(1), EnvSpec(), 10, 0, JUDGED_BY)
    assert keeper.rival(spec, ("1-1",)) is not None
    assert keeper.nominates(score_of(0.3, ("1-1", "1-2")))  # another set: any score
    assert keeper.rival(spec, ("1-1", "1-2")) is None
    assert keeper.rival(ModelSpec(num_actions=7, arch="nature"), ("1-1",)) is None
    other = score_of(0.3, ("1-1", "1-2"))
    assert keeper.settle(other, None, other, model(2), EnvSpec(level="1-1,1-2"), 20, 0, JUDGED_BY)
    assert best.BestKeeper(path).best == best.Best(0.3, 20, ("1-1", "1-2"))

    path.write_bytes(b"not a checkpoint")
    keeper = best.BestKeeper(path)
    assert keeper.best is None and keeper.rival(spec, ("1-1",)) is None


def test_the_best_file_is_a_checkpoint_make_eval_plays_with_its_weights_and_env(tmp_path):
    path = tmp_path / "best-policy.pt"
    net = model(7)
    env = EnvSpec(level="1-1", action_set="simple", frame_skip=4, no_progress_steps=60)
    best.BestKeeper(path).settle(
        score_of(0.7), None, score_of(0.8), net, env, 33, 33 * 512, JUDGED_BY
    )
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
