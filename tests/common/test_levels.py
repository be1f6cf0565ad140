"""Level sets: what a user may write and what each form means."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from common.levels import (
    ALL_STAGES,
    END_X_BIN,
    LevelSchedule,
    LevelSetError,
    end_x,
    level_lengths,
    parse_levels,
    progress,
    unmeasured,
    unregistered,
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


@pytest.mark.parametrize("text", ["1-5", "9-9", "0-1", "10-1", "1-1,1-5"])
def test_a_name_shaped_like_a_stage_that_is_none_is_refused_not_taken_for_a_gym_id(text):
    with pytest.raises(LevelSetError, match=r"not a stage W-S \(1-1 to 8-4\)"):
        parse_levels(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Nope-v0", "'Nope-v0' is neither a stage nor a registered Gymnasium id"),
        ("tests.fakes:Nope-v0", "nor a Gymnasium id that module 'tests.fakes' registers"),
        ("no_such_env_module:Nope-v0", "module 'no_such_env_module' cannot be imported"),
    ],
)
def test_a_gym_id_gymnasium_cannot_make_is_named_with_what_levels_takes(text, problem):
    (found,) = unregistered(text)
    assert problem in found and "LEVELS (the learner's --level) takes stages 1-1 to 8-4" in found


@pytest.mark.parametrize(
    "text", ["1-1", "world:1,4-1", "all", "tests.fakes:Corridor-v0", "CartPole-v1", "CartPole"]
)
def test_stages_and_registered_gym_ids_are_known(text):
    assert unregistered(text) == []  # an unversioned id: gymnasium makes its newest


def test_uniform_draws_every_level_about_equally_and_repeats_with_its_seed():
    levels = parse_levels("world:1")
    a, b = LevelSchedule(levels, seed=3), LevelSchedule(levels, seed=3)
    draws = [a.next_level() for _ in range(4000)]
    assert draws == [b.next_level() for _ in range(4000)]
    counts = collections.Counter(draws)
    assert set(counts) == set(levels)
    assert all(800 <= n <= 1200 for n in counts.values()), counts  # 1000 +- 6 sigma
    assert [LevelSchedule(("1-1",), seed=s).next_level() for s in range(3)] == ["1-1"] * 3


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


def test_a_bad_set_is_refused_by_the_env_spec_with_every_problem():
    from common.env_spec import EnvSpec

    problems = EnvSpec(level="1-1,world:0,9-9").problems()
    assert len(problems) == 1 and "'world:0'" in problems[0] and "'9-9'" in problems[0]
    assert EnvSpec(level="world:1").is_mario and EnvSpec(level="all").levels[-1] == "8-4"
    assert not EnvSpec(level="tests.fakes:Corridor-v0").is_mario


def test_end_x_is_the_median_of_the_bin_where_most_episodes_end():
    assert end_x([]) is None
    assert end_x([975, 981, 990, 400, 1510]) == 981  # three in 900-999
    assert end_x([120, 130, 990]) == 125
    assert end_x([150, 950]) == 150  # a tie: the lower bin
    # the slow reference: count each bin, take the fullest (lowest on a tie), its median
    rng = np.random.default_rng(0)
    xs = [int(x) for x in rng.integers(40, 3000, 200)]
    counts = {}
    for x in xs:
        counts.setdefault(x // END_X_BIN, []).append(x)
    fullest = min(counts, key=lambda b: (-len(counts[b]), b))
    assert end_x(xs) == float(np.median(counts[fullest]))
