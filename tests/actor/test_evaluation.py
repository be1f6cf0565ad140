"""Evaluation steps through the training actor's path: the same stacks, previous actions and core
resets for the same env steps; greedy is the argmax; screens and episode ends; the eval actor's
own command."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from actor import evaluation
from actor.config import ActorConfig, EvalConfig
from actor.rollout import infer_and_act, split_lanes
from common import config as config_io
from common.env import FrameEnv
from common.env_spec import EnvSpec
from common.model import ActorCritic, ModelSpec
from scripts.checkout import ROOT
from tests.fakes import scripted_policy
from tests.procs import free_port

CORRIDOR = "tests.fakes:Corridor-v0"


@pytest.fixture(autouse=True)
def one_thread():
    """Batch-of-one inference on one thread, as the actors run it (more threads only contend)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Recorder(torch.nn.Module):
    """The network, with every input it is given: (stacks, previous actions, core states)."""

    def __init__(self, model: ActorCritic):
        super().__init__()
        self.model = model
        self.seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def forward(self, frames, last_action, state):
        self.seen.append((frames.clone(), last_action.clone(), state.clone()))
        return self.model(frames, last_action, state)


def test_eval_and_training_feed_the_policy_the_same_inputs_for_the_same_env_steps():
    """An LSTM policy sampled from one seed plays two episodes of Mario 1-1 through the eval's
    player, and as many steps through a training actor's lane (its chunks of 16 steps cross the
    episodes): step for step, the same stacks, previous actions and core states reach the network,
    the state zeroed exactly where an episode starts, and the same episodes come out."""
    torch.manual_seed(0)
    model = ActorCritic(ModelSpec(num_actions=7, core="lstm")).eval()
    spec = EnvSpec(level="1-1", no_progress_steps=12)
    C = model.spec.state_size

    env = FrameEnv(spec, seed=(3, 1))
    evaluator = Recorder(model)
    player = evaluation.EpisodePlayer(env, C, record=False)
    policy = evaluation.model_policy(evaluator, greedy=False, rng=np.random.default_rng(5))
    eval_episodes = [player.play(policy).summary for _ in range(2)]
    env.close()

    env = FrameEnv(spec, seed=(3, 1))
    trainer = Recorder(model)
    (lane,) = split_lanes([env], 1, unroll_length=16, num_actions=7, state_size=C)
    rng = np.random.default_rng(5)
    train_episodes = []
    for _ in evaluator.seen:
        infer_and_act(trainer, lane, rng, policy_version=0)
        lane.step()
        train_episodes += [e for c in lane.take_finished() for e in c.episodes]
    env.close()
    train_episodes += lane.episodes

    assert len(trainer.seen) == len(evaluator.seen)
    starts = 0
    for t, (e, tr) in enumerate(zip(evaluator.seen, trainer.seen, strict=True)):
        for name, a, b in zip(("stack", "previous action", "core state"), e, tr, strict=True):
            assert torch.equal(a, b), f"step {t}: the {name} differs"
        frames, last, state = e
        if int(last) == 7:  # an episode's first step: only its reset frame, and no state
            starts += 1
            assert not frames[0, :3].any() and frames[0, 3].any(), t
            assert not state.any(), t
        else:
            assert state.any(), t  # carried from the step before
    assert starts == 2  # one per episode: each reset seen
    assert train_episodes == eval_episodes


def test_greedy_takes_the_argmax_and_sampled_repeats_with_its_seed():
    torch.manual_seed(0)
    model = ActorCritic(ModelSpec(num_actions=7)).eval()

    def play(greedy: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
        env = FrameEnv(EnvSpec(level=CORRIDOR, frame_skip=1))
        player = evaluation.EpisodePlayer(env, record=False)
        policy = evaluation.model_policy(model, greedy=greedy, rng=np.random.default_rng(seed))
        for _ in range(6):
            policy(player.lane)
            player.lane.step()
        env.close()
        a = player.lane.arrays
        return a["actions"][:6, 0], a["behaviour_logits"][:6, 0]  # [6], [6, A]

    actions, logits = play(greedy=True, seed=0)
    assert (actions == logits.argmax(axis=-1)).all()
    assert (play(False, 1)[0] == play(False, 1)[0]).all()
    assert any((play(False, s)[0] != play(False, 1)[0]).any() for s in (2, 3, 4))


def test_an_episode_shows_length_plus_one_screens_and_its_previous_actions():
    env = FrameEnv(EnvSpec(level=CORRIDOR))
    seen: list[torch.Tensor] = []
    lasts: list[int] = []

    def alternate(stack: torch.Tensor, last: int) -> int:
        seen.append(stack.clone())
        lasts.append(last)
        return len(seen) % 2  # alternate, so each step's previous action is known

    player = evaluation.EpisodePlayer(env)
    first = player.play(scripted_policy(alternate))
    second = player.play(scripted_policy(alternate))
    env.close()
    for ep in (first, second):
        assert len(ep.screens) == ep.summary.length + 1
        assert ep.screens[0].shape == (84, 84, 3) and ep.screens[0].dtype == np.uint8
    n = first.summary.length
    assert len(seen) == n + second.summary.length
    assert not seen[0][:3].any() and seen[0][3].any()  # only the reset frame
    assert not seen[n][:3].any() and seen[n][3].any()  # the second episode's, alone again
    # the previous action: none (= num_actions) at the first step, then what the policy chose
    assert lasts[:n] == [env.num_actions] + [i % 2 for i in range(1, n)]
    assert lasts[n] == env.num_actions


def test_evaluation_never_starts_from_a_frontier_snapshot():
    """The eval actor and `make eval` play `perturbed` specs: from the level's start, always; a
    player refuses an env that could start elsewhere."""
    trained = EnvSpec(frontier_starts=0.5, no_progress_steps=20)
    with pytest.raises(ValueError, match="level's start"):
        evaluation.EpisodePlayer(FrameEnv(trained))
    env = FrameEnv(evaluation.perturbed(trained))
    assert env.spec.frontier_starts == 0 and env.archive is None
    player = evaluation.EpisodePlayer(env, record=False)
    episodes = [player.play(scripted_policy(lambda stack, last: 1)) for _ in range(2)]
    assert [e.summary.start_x for e in episodes] == [-1, -1]
    env.close()


def test_the_eval_actor_is_its_own_command_and_each_offers_only_the_flags_it_uses(capsys):
    cfg = config_io.load(
        EvalConfig,
        ["--seed", "2", "--eval-interval-s", "5", "--eval-sampled-episodes", "0"],
        prog="actor.eval",
        description="",
    )  # the link's flags, as the training actor's, and its own
    assert (cfg.seed, cfg.eval_interval_s, cfg.eval_sampled_episodes) == (2, 5.0, 0)
    assert not any(name.startswith("eval") for name in ActorConfig.__dataclass_fields__)
    with pytest.raises(SystemExit):
        config_io.load(ActorConfig, ["--eval"], prog="actor", description="")
    assert "python -m actor.eval" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # it plays one env at a time, in one thread
        config_io.load(EvalConfig, ["--num-envs", "2", "--lanes", "1"], prog="actor.eval",
                       description="")  # fmt: skip
    err = capsys.readouterr().err
    assert "--num-envs: the eval actor plays one env at a time" in err and "--lanes: " in err
    assert "ACTOR_ARGS" in err
    with pytest.raises(SystemExit) as exc:
        config_io.load(EvalConfig, ["--help"], prog="actor.eval", description="")
    assert exc.value.code == 0
    shown = capsys.readouterr().out
    assert "--eval-interval-s" in shown and "--seed" in shown
    assert "--num-envs" not in shown and "--lanes" not in shown
    with pytest.raises(SystemExit):  # meant for the eval actor: said where it goes
        config_io.load(ActorConfig, ["--eval-interval-s", "20"], prog="actor", description="")
    err = capsys.readouterr().err
    assert "--eval-interval-s is the eval actor's" in err and "EVAL_ACTOR_ARGS" in err
    with pytest.raises(SystemExit):
        config_io.load(EvalConfig, ["--eval-sampled-episodes", "-1"], prog="actor.eval",
                       description="")  # fmt: skip
    assert "--eval-sampled-episodes: must be >= 0, got -1" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # its envs are the learner's, as the training actor's
        config_io.load(EvalConfig, ["--frame-skip", "2"], prog="actor.eval", description="")
    assert "set --frame-skip on the learner" in capsys.readouterr().err


def test_an_eval_dir_that_cannot_be_made_is_refused_before_it_registers(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("a file where the eval dir would go\n")
    for eval_dir in ("/proc/nope", str(taken)):
        argv = [sys.executable, "-m", "actor.eval", "--eval-dir", eval_dir]
        argv += ["--learner", f"127.0.0.1:{free_port(2)}"]  # nothing listens: it never gets there
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        assert f"--eval-dir {eval_dir}: cannot make the directory {eval_dir}" in out.stderr
        assert "pass an --eval-dir that can be made and written" in out.stderr
        assert "Traceback" not in out.stderr


def test_screens_hold_copies_in_blocks_and_index_as_a_list_does(monkeypatch):
    monkeypatch.setattr(evaluation, "SCREEN_BLOCK_BYTES", 1000)  # 6 screens of 8x8x3 a block
    rng = np.random.default_rng(0)
    source = np.zeros((8, 8, 3), np.uint8)
    screens, reference = evaluation.Screens(), []
    for _ in range(20):
        source[:] = rng.integers(0, 256, source.shape)  # one buffer, overwritten as a NES screen is
        screens.append(source)
        reference.append(source.copy())
    assert len(screens) == 20 and len(screens._blocks) == 4
    for i in [*range(20), -1, -20]:
        assert (screens[i] == reference[i]).all()
    assert all((a == b).all() for a, b in zip(screens, reference, strict=True))
    for i in (20, -21):
        with pytest.raises(IndexError):
            screens[i]
    assert len(evaluation.Screens()) == 0 and list(evaluation.Screens()) == []


def test_an_episodes_screens_go_back_to_the_system_when_it_is_dropped():
    # in a fresh interpreter: small objects made while recording and kept (a run's logs, windows,
    # metrics) pin the heap, which then keeps one array per screen for good
    code = """
import numpy as np
from actor.evaluation import Screens
def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 // 2**20
screen, pins = np.ones((240, 256, 3), np.uint8), []
base = rss()
for _ in range(3):
    screens = Screens()
    for t in range(1200):  # 210 MiB
        screens.append(screen)
        pins.append(bytearray(64))
    assert len(screens) == 1200 and (screens[-1] == 1).all()
    peak = rss() - base
    del screens
print(peak, rss() - base)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    peak, after = map(int, out.stdout.split())
    assert peak > 150, out.stdout  # the screens were there
    assert after < 16, out.stdout  # and went back
