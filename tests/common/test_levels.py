"""Level sets: what a user may write and what each form means."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from common.levels import (
    ALL_STAGES,
    LevelSchedule,
    LevelSetError,
    LevelSpread,
    level_lengths,
    parse_levels,
    progress,
    unmeasured,
)


def test_the_32_stages_in_game_order():
    assert len(ALL_STAGES) == 32
    assert ALL_STAGES[:5] == ("1-1", "1-2", "1-3", "1-4", "2-1")
    assert ALL_STAGES[-1] == "8-4"


@pytest.mark.parametrize(
    ("text", "levels"),
    [
        ("1-1", ("1-1",)),
        ("1-1,1-2,4-1", ("1-1", "1-2", "4-1")),
        (" 4-1 , 1-1 ", ("4-1", "1-1")),
        ("world:1", ("1-1", "1-2", "1-3", "1-4")),
        ("world:2,1-1", ("2-1", "2-2", "2-3", "2-4", "1-1")),
        ("1-2,world:1", ("1-2", "1-1", "1-3", "1-4")),  # named twice, kept once, first place
        ("all", ALL_STAGES),
        ("tests.fakes:Corridor-v0", ("tests.fakes:Corridor-v0",)),  # a Gymnasium id alone
    ],
)
def test_each_form_of_a_set(text, levels):
    assert parse_levels(text) == levels


def test_every_bad_part_is_named_with_what_is_allowed():
    text = "1-1,9-1,world:9,,tests.fakes:Corridor-v0"
    with pytest.raises(LevelSetError) as err:
        parse_levels(text)
    message = str(err.value).removeprefix(f"level set {text!r}: ")
    assert "'9-1': not a stage W-S (1-1 to 8-4)" in message
    assert "'world:9': worlds are 1 to 8" in message
    assert "an empty part" in message
    assert "'tests.fakes:Corridor-v0'" in message  # a Gymnasium id cannot join a set
    assert "'1-1'" not in message  # good parts are not blamed


def test_uniform_draws_every_level_about_equally_and_repeats_with_its_seed():
    levels = parse_levels("world:1")
    a, b = LevelSchedule(levels, seed=3), LevelSchedule(levels, seed=3)
    draws = [a.next_level() for _ in range(4000)]
    assert draws == [b.next_level() for _ in range(4000)]
    counts = collections.Counter(draws)
    assert set(counts) == set(levels)
    assert all(800 <= n <= 1200 for n in counts.values()), counts  # 1000 +- 6 sigma
    assert [LevelSchedule(("1-1",), seed=s).next_level() for s in range(3)] == ["1-1"] * 3


def test_the_learners_weights_set_the_draws_and_levels_they_leave_out_get_their_mean():
    levels = ("1-1", "1-2", "1-3")
    s = LevelSchedule(levels, seed=0)
    s.set_weights({"1-1": 6.0, "1-2": 2.0})  # 1-3 unnamed: the mean, 4
    np.testing.assert_allclose(s.probabilities, [0.5, 1 / 6, 1 / 3])
    counts = collections.Counter(s.next_level() for _ in range(6000))
    for level, p in zip(levels, s.probabilities, strict=True):
        assert abs(counts[level] - 6000 * p) < 6 * np.sqrt(6000 * p * (1 - p)), counts
    s.set_weights({"4-1": 1.0})  # nothing of this set: uniform again
    np.testing.assert_allclose(s.probabilities, [1 / 3] * 3)
    s.set_weights({})
    np.testing.assert_allclose(s.probabilities, [1 / 3] * 3)


def _spread_group(levels, envs, seed=0, weights=None):
    spread = LevelSpread(len(levels), envs)
    group = [LevelSchedule(levels, seed=(seed, i), spread=spread, slot=i) for i in range(envs)]
    for g in group:
        g.set_weights(weights or {})
    return group


def _redraw(group, steps, seed=1):
    """Random envs of the group draw in turn; yields the levels the group plays after each."""
    playing = [g.next_level() for g in group]
    order = np.random.default_rng(seed)
    for _ in range(steps):
        i = int(order.integers(len(group)))
        playing[i] = group[i].next_level()
        yield i, playing


@pytest.mark.parametrize(("levels", "envs"), [(4, 4), (4, 8), (2, 6)])
def test_uniform_spread_plays_every_level_at_every_moment(levels, envs):
    """A group of a multiple of the set's size: each level played by envs/levels envs after every
    draw, in any order of the envs (each env keeps its level)."""
    names = ALL_STAGES[:levels]
    group = _spread_group(names, envs)
    for _, playing in _redraw(group, 2000):
        counts = collections.Counter(playing)
        assert [counts[lv] for lv in names] == [envs // levels] * levels, playing


def test_uniform_spread_over_more_levels_than_envs_plays_distinct_levels_drawn_alike():
    names = ALL_STAGES
    drawn = collections.Counter()
    for i, playing in _redraw(_spread_group(names, 4), 6000):
        assert len(set(playing)) == 4, playing
        drawn[playing[i]] += 1
    expected = 6000 / (32 - 3)  # each draw: uniform over the 29 levels the others leave
    assert set(drawn) == set(names)
    assert all(abs(n - expected) < 6 * np.sqrt(expected) for n in drawn.values()), drawn


def test_spread_shares_the_envs_about_as_the_weights_say():
    """Over time the share of envs on each level follows the weights, pulled a little towards
    uniform where a level's share is not a whole number of envs."""
    names = ("1-1", "1-2", "1-3", "1-4")
    for envs, weights in [(6, None), (4, {"1-1": 2.0, "1-2": 1.0, "1-3": 1.0, "1-4": 1.0})]:
        group = _spread_group(names, envs, weights=weights)
        held = np.zeros(4)
        for _, playing in _redraw(group, 20000):
            held += [playing.count(lv) for lv in names]
        share = held / held.sum()
        p = group[0].probabilities
        assert np.all(np.abs(share - p) < 0.04), (share, p)
        assert np.argmax(share) == np.argmax(p) or np.ptp(p) == 0


def test_a_spread_draw_is_in_proportion_to_how_far_each_level_is_below_its_share():
    """Slow reference: with n envs, weights p and c[l] of the other envs on level l, the next
    level is l with probability max(n p[l] - c[l], 0) / sum over levels of the same."""
    names = ("1-1", "1-2", "1-3", "1-4")
    weights = {"1-1": 4.0, "1-2": 1.0, "1-3": 3.0, "1-4": 0.0}
    total = sum(weights.values())
    draws = 6000
    for envs, others in [(2, ("1-1",)), (4, ("1-1", "1-3")), (4, ("1-2", "1-3", "1-3")), (8, ())]:
        spread = LevelSpread(len(names), envs)
        for slot, level in enumerate(others, start=1):  # the other envs' levels, placed
            spread.draw(slot, np.eye(len(names))[names.index(level)], np.random.default_rng(0))
        s = LevelSchedule(names, seed=7, spread=spread, slot=0)
        s.set_weights(weights)
        counts = collections.Counter(s.next_level() for _ in range(draws))
        below = {lv: max(envs * weights[lv] / total - others.count(lv), 0.0) for lv in names}
        for lv in names:
            p = below[lv] / sum(below.values())
            assert abs(counts[lv] - draws * p) <= 6 * np.sqrt(draws * p * (1 - p)), (others, counts)


def test_progress_is_max_x_over_the_measured_length_and_one_at_the_flag():
    length = level_lengths()["1-1"]
    assert progress("1-1", length // 2) == pytest.approx((length // 2) / length)
    assert progress("1-1", 10 * length) == 1.0  # a warp or an odd x never passes 100%
    assert progress("1-1", 40, flag=True) == 1.0
    assert progress("tests.fakes:Corridor-v0", 40) is None
    assert set(parse_levels("world:1")) <= set(level_lengths())
    assert unmeasured(("1-1", "tests.fakes:Corridor-v0")) == []


def test_an_env_of_a_set_plays_each_drawn_level_on_its_own_emulator():
    """Real emulators: each episode starts on the level drawn for it, reports that level, and
    each level's emulator is built once, when it is first drawn."""
    import numpy as np

    from common.env import FrameEnv
    from common.env_spec import EnvSpec

    built: list[float] = []
    spec = EnvSpec(level="1-1,1-2", no_progress_steps=3)
    env = FrameEnv(spec, seed=(0, 1), on_level_built=built.append)
    starts: dict[str, np.ndarray] = {}
    played = []
    for _ in range(12):
        frame = env.reset()
        starts.setdefault(env.level, frame.copy())
        assert np.array_equal(frame, starts[env.level])  # every start of a level looks alike
        while (step := env.step(0)).episode is None:
            pass
        assert step.episode.level == env.level
        played.append(env.level)
    assert set(played) == {"1-1", "1-2"}
    assert len(built) == 1  # the level not drawn first; the first was built with the env
    assert not np.array_equal(starts["1-1"], starts["1-2"])  # 1-2 starts underground
    env.close()


def test_an_env_builds_only_the_level_of_its_first_episode():
    """Real emulators: the emulator built with an env is the one its first episode plays, drawn
    from the set, so a set costs no emulator it does not play (not the set's first level)."""
    from common.env import FrameEnv
    from common.env_spec import EnvSpec

    spec = EnvSpec(level="1-1,1-2,1-3,1-4", no_progress_steps=3)
    first = []
    for seed in range(4):
        built: list[float] = []
        env = FrameEnv(spec, seed=(seed, 0), on_level_built=built.append)
        level = env.level
        env.reset()
        assert env.level == level
        assert built == []
        first.append(level)
        env.close()
    assert set(first) != {"1-1"}  # the draws reach past the set's first level


def test_spread_envs_of_an_actor_play_every_level_of_a_small_set_at_once():
    """Real emulators: four envs built for World 1 with `spread` play its four levels, one
    each, through many episodes; without it their levels are drawn apart."""
    from common.env import build_envs
    from common.env_spec import EnvSpec

    spec = EnvSpec(level="world:1", no_progress_steps=3)
    envs = build_envs(spec, 4, seed=5, spread=True)
    episodes = collections.Counter()
    for _ in range(40):
        assert sorted(e.level for e in envs) == ["1-1", "1-2", "1-3", "1-4"]
        for e in envs:
            while (step := e.step(0)).episode is None:
                pass
            episodes[step.episode.level] += 1
            e.reset()
    assert set(episodes.values()) == {40}
    for e in envs:
        e.close()
    apart = build_envs(spec, 4, seed=5)
    assert len({e.level for e in apart}) < 4  # this seed's independent draws share a level
    for e in apart:
        e.close()


def test_a_bad_set_is_refused_by_the_env_spec_with_every_problem():
    from common.env_spec import EnvSpec

    problems = EnvSpec(level="1-1,world:0,9-9").problems()
    assert len(problems) == 1 and "'world:0'" in problems[0] and "'9-9'" in problems[0]
    assert EnvSpec(level="world:1").is_mario and EnvSpec(level="all").levels[-1] == "8-4"
    assert not EnvSpec(level="tests.fakes:Corridor-v0").is_mario
