"""`make eval` (scripts/evaluate/): the best-episode video, summary.json, refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import av
import numpy as np
import pytest
import torch

from actor import evaluation
from actor.best import BestKeeper, Score
from common.env import EpisodeSummary, FrameEnv
from common.env_spec import EnvSpec
from common.model import ActorCritic, ModelSpec
from common.rundir import RunDir
from learner import checkpoint
from scripts.checkout import ROOT
from scripts.evaluate import main as evaluate
from scripts.evaluate import matrix as em
from scripts.evaluate.checkpoint import check_compatible, load_checkpoint
from tests.fakes import scripted_policy

CORRIDOR = "tests.fakes:Corridor-v0"


def make_run(
    run_dir: Path, *, action_set: str = "simple", num_actions: int = 7, core: str = "none"
) -> Path:
    """A run dir holding one checkpoint shaped like the learner's, from an untrained network."""
    torch.manual_seed(0)
    model = ActorCritic(ModelSpec(num_actions=num_actions, core=core))
    state = {
        "model": model.state_dict(),
        "optimizer": torch.optim.Adam(model.parameters()).state_dict(),
        "policy_version": 42,
        "env_frames": 4096,
        "agent_steps": 1024,
        "model_spec": model.spec.to_wire(),
        "config": {"action_set": action_set, "frame_size": 84, "arch": "nature"},
        "saved_at": 0.0,
    }
    return checkpoint.save(RunDir(run_dir), state, 42)


class Video(NamedTuple):
    frames: list[np.ndarray]  # decoded, [H, W, 3] uint8 each
    codec: str
    pix_fmt: str
    fps: float


def read_video(path: Path) -> Video:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        ctx = stream.codec_context
        return Video(frames, ctx.name, ctx.pix_fmt, float(stream.average_rate))


def episode(max_x: int, ret: float, flag: bool = False) -> EpisodeSummary:
    return EpisodeSummary("1-1", ret, 10, max_x, flag, "flag" if flag else "death")


# ---- pure parts -----------------------------------------------------------------------------


def test_best_episode_is_largest_max_x_then_return_then_earliest():
    eps = [episode(300, 5.0), episode(500, 1.0), episode(500, 7.0), episode(500, 7.0, flag=True)]
    s = em.summarise(eps)
    assert s.best_index == 2
    assert s.episodes == 4 and s.flag_rate == 0.25 and s.max_max_x == 500
    assert s.mean_max_x == pytest.approx(450.0) and s.mean_return == pytest.approx(5.0)
    assert s.median_max_x == 500.0
    assert em.summarise([episode(100, 0.0), episode(900, 0.0)]).median_max_x == 500.0


def test_best_of_both_policies_keeps_its_screens_and_names_its_policy():
    env = FrameEnv(EnvSpec(level=CORRIDOR))

    def to_goal(stack: torch.Tensor, _last: int) -> int:  # reads the cue: right (1) or left (6)
        return 1 if stack[-1, :12, 42:].any() else 6

    stay = scripted_policy(lambda _stack, _last: 0)  # never moves: cut off at max x 0
    played = em.play_policies(env, [("greedy", stay, 2), ("sampled", scripted_policy(to_goal), 2)])
    env.close()
    assert [len(played.episodes[p]) for p in ("greedy", "sampled")] == [2, 2]
    assert all(e.max_x == 0 and not e.flag for e in played.episodes["greedy"])
    sampled = played.episodes["sampled"]
    assert all(e.flag for e in sampled) and sampled[0] == sampled[1]
    assert played.best == ("sampled", 0)  # ties: the earliest
    assert len(played.best_frames) == sampled[0].length + 1


def test_action_set_mismatch_names_both_sides():
    problems = check_compatible(
        ModelSpec(num_actions=7), "simple", EnvSpec(action_set="complex"), 12
    )
    assert problems and problems[0].startswith(
        "checkpoint has 7 actions (simple), env has 12 (complex)"
    )
    assert check_compatible(ModelSpec(), "simple", EnvSpec(), 7) == []


def test_upscale_is_nearest_neighbour():
    frame = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    big = evaluation.upscale(frame, 3)
    assert big.shape == (6, 6, 3)
    assert (big[:3, :3] == frame[0, 0]).all() and (big[3:, 3:] == frame[1, 1]).all()


# ---- the script, in process (a small Gymnasium env) ---------------------------------------------


def test_main_summarises_both_policies_and_keeps_the_video_of_the_best_episode(tmp_path, capsys):
    make_run(tmp_path / "run")
    argv = ["--run-dir", str(tmp_path / "run"), "--level", CORRIDOR, "--episodes", "3"]
    assert evaluate.main([*argv, "--seed", "1"]) == 0
    summary = json.loads((tmp_path / "run/eval/summary.json").read_text())
    eps = summary["episodes"]
    assert [(e["policy"], e["index"]) for e in eps] == [
        (p, i) for p in ("greedy", "sampled") for i in range(3)
    ]
    o = summary["overall"]
    assert o["policies"] == ["greedy", "sampled"] and o["episodes_per_policy"] == 3
    assert o["policy_version"] == 42 and o["seed"] == 1
    for policy, s in summary["policies"].items():
        rows = [e for e in eps if e["policy"] == policy]
        assert s["episodes"] == 3
        assert s["flag_rate"] == pytest.approx(np.mean([e["flag"] for e in rows]))
        assert s["mean_max_x"] == pytest.approx(np.mean([e["max_x"] for e in rows]))
        assert s["median_max_x"] == pytest.approx(np.median([e["max_x"] for e in rows]))
    v = summary["video"]
    best = next(e for e in eps if (e["policy"], e["index"]) == (v["policy"], v["episode"]))
    assert best["max_x"] == max(e["max_x"] for e in eps)
    video = read_video(tmp_path / "run/eval/best.mp4")
    assert len(video.frames) == v["frames"] == best["length"] + 1
    assert video.frames[0].shape == (84, 84, 3)
    assert (video.codec, video.pix_fmt) == ("h264", "yuv420p")
    out = capsys.readouterr().out
    assert "### greedy" in out and "### sampled" in out and "| level | episodes |" in out
    for s in summary["policies"].values():  # one row per policy: a Gymnasium id's max x
        row = f"| {CORRIDOR} | 3 | - | - | {s['mean_max_x']:.0f} | {s['max_max_x']} "
        assert row + f"| {s['flag_rate']:.1%} |" in out
    assert (tmp_path / "run/eval/summary.md").read_text() in out


@pytest.mark.parametrize(
    ("flags", "policy"),
    [(["--policy", "greedy"], "greedy"), (["--no-greedy"], "sampled"), (["--greedy"], "greedy")],
)
def test_one_policy_alone(tmp_path, capsys, flags, policy):
    make_run(tmp_path / "run")
    argv = ["--run-dir", str(tmp_path / "run"), "--level", CORRIDOR, "--episodes", "2"]
    assert evaluate.main([*argv, "--no-video", *flags]) == 0
    summary = json.loads((tmp_path / "run/eval/summary.json").read_text())
    assert summary["overall"]["policies"] == [policy] and list(summary["policies"]) == [policy]
    assert [e["policy"] for e in summary["episodes"]] == [policy, policy]
    assert summary["video"] is None and not (tmp_path / "run/eval/best.mp4").exists()
    assert summary["best"] == [] and not list((tmp_path / "run/eval").glob("level-*"))
    assert f"### {policy}\n" in capsys.readouterr().out


def test_a_recurrent_checkpoint_is_evaluated_with_its_core(tmp_path, capsys):
    make_run(tmp_path / "run", core="gru")
    argv = ["--run-dir", str(tmp_path / "run"), "--level", CORRIDOR, "--episodes", "2"]
    assert evaluate.main([*argv, "--no-video", "--jobs", "2"]) == 0
    summary = json.loads((tmp_path / "run/eval/summary.json").read_text())
    assert len(summary["episodes"]) == 4  # greedy and sampled, two each
    assert "### sampled\n" in capsys.readouterr().out


def test_refuses_a_missing_run_dir_or_checkpoint(tmp_path, capsys):
    assert evaluate.main(["--run-dir", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert evaluate.main(["--run-dir", str(tmp_path / "empty")]) == 2
    assert "no checkpoints" in capsys.readouterr().err
    assert evaluate.main(["--checkpoint", str(tmp_path / "gone.pt")]) == 2
    assert "gone.pt does not exist" in capsys.readouterr().err


def test_refuses_files_that_are_not_checkpoints(tmp_path, capsys):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(np.random.default_rng(0).bytes(2048))
    assert evaluate.main(["--checkpoint", str(garbage)]) == 2
    assert "garbage.pt is not a checkpoint" in capsys.readouterr().err
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    assert evaluate.main(["--checkpoint", str(other)]) == 2
    assert "no model or model_spec" in capsys.readouterr().err


def test_refuses_a_checkpoint_of_per_level_popart_naming_the_release_to_use(tmp_path, capsys):
    """Releases with per-level PopArt wrote value_heads into every spec: one value head (every
    run without it) is this release's network and plays; a head per level is refused."""
    path = make_run(tmp_path / "run")
    state = checkpoint.load(path)
    state["model_spec"]["value_heads"] = 1
    torch.save(state, path)
    assert load_checkpoint(path).model.spec == ModelSpec(num_actions=7)
    state["model_spec"]["value_heads"] = 32
    width = state["model"]["value.weight"].shape[1]
    state["model"] |= {"value.weight": torch.zeros(32, width), "value.bias": torch.zeros(32)}
    torch.save(state, path)
    assert evaluate.main(["--checkpoint", str(path), "--level", CORRIDOR, "--no-video"]) == 2
    assert (
        f"{path} was written by an older release (its network has a value head for each of its "
        "32 levels, per-level PopArt's, which this release no longer builds) and this release "
        "cannot play it: evaluate it with the release that trained it"
    ) in capsys.readouterr().err


def test_refuses_an_action_set_the_checkpoint_was_not_trained_on(tmp_path, capsys):
    make_run(tmp_path / "run")
    argv = ["--run-dir", str(tmp_path / "run"), "--action-set", "complex", "--no-video"]
    assert evaluate.main(argv) == 2
    err = capsys.readouterr().err
    assert "checkpoint has 7 actions (simple), env has 12 (complex)" in err
    assert not (tmp_path / "run/eval").exists()


# ---- `make eval` on Super Mario Bros --------------------------------------------------------------


def keep_best(run_dir: Path, policy_version: int = 7, score: float = 0.6) -> Path:
    """The eval actor's best policy in the run dir: another network than make_run's."""
    torch.manual_seed(policy_version)
    model = ActorCritic(ModelSpec(num_actions=7))
    s = Score(score, {"1-1": score}, {"1-1": 0.0}, 10)
    judged_by = {"policy": "sampled", "sticky_actions": 0.25, "noop_max": 30}
    env = EnvSpec(level="1-1", no_progress_steps=40)
    keeper = BestKeeper(RunDir(run_dir).best_policy)
    assert keeper.settle(s, None, s, model, env, policy_version, 512 * policy_version, judged_by)
    return RunDir(run_dir).best_policy


def test_a_run_dir_plays_the_kept_best_policy_else_the_latest_checkpoint(tmp_path, capsys):
    """No checkpoint named: the best policy the eval actor kept, not the newer latest
    checkpoint; --latest the latest; and the latest, saying so, while no best is kept."""
    run = tmp_path / "run"
    latest = make_run(run)  # v42
    argv = ["--run-dir", str(run), "--level", CORRIDOR, "--episodes", "1", "--no-video"]

    def played(*flags: str) -> dict:
        assert evaluate.main([*argv, *flags]) == 0
        return json.loads((RunDir(run).eval / "summary.json").read_text())["overall"]

    o = played()
    assert (o["checkpoint"], o["policy_version"]) == (str(latest), 42)
    assert "no best policy kept yet" in o["chosen"] and o["best"] is None
    assert f"the latest checkpoint: no best policy kept yet in {RunDir(run).best_policy}" in (
        capsys.readouterr().out
    )
    best = keep_best(run)
    o = played()
    assert (o["checkpoint"], o["policy_version"], o["best"]["score"]) == (str(best), 7, 0.6)
    out = capsys.readouterr().out
    kept = "the best policy the eval actor kept: policy v7, 3,584 env frames, its score"
    assert f"Played `{best}`, {kept}" in out  # the env frames its weights message carried
    assert played("--latest")["checkpoint"] == str(latest)


@pytest.mark.slow
def test_make_eval_on_mario_plays_the_kept_best_perturbed_first_and_in_colour(tmp_path):
    make_run(tmp_path / "run")
    ckpt = keep_best(tmp_path / "run")
    cmd = [
        "make",
        "--no-print-directory",
        "-o",
        "install",  # the venv running these tests is the one to use; do not reinstall it
        "eval",
        f"PY={sys.executable}",
        f"RUN={tmp_path / 'run'}",
        "EPISODES=2",
        "LEVEL=1-1",
        "DEVICE=cpu",
        "EVAL_ARGS=--no-progress-steps 40 --scale 2",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run/eval/summary.json").read_text())
    o, eps = summary["overall"], summary["episodes"]
    assert o["policies"] == ["greedy", "sampled"] and len(eps) == 8 and o["level"] == "1-1"
    assert (o["checkpoint"], o["policy_version"]) == (str(ckpt), 7)  # the kept best, not v42
    assert summary["matrix"]["settings"] == ["perturbed", "plain"]  # the headline first
    assert list(summary["pooled"]) == ["perturbed", "plain"]
    assert summary["policies"] == summary["pooled"]["perturbed"]
    for setting, by_policy in summary["pooled"].items():
        for policy, s in by_policy.items():
            rows = [e for e in eps if (e["setting"], e["policy"]) == (setting, policy)]
            assert s["episodes"] == len(rows) == 2
            assert s["flag_rate"] == np.mean([e["flag"] for e in rows])
    assert all(e["length"] > 0 and e["max_x"] > 0 for e in eps)
    v = summary["video"]
    perturbed = [e for e in eps if e["setting"] == "perturbed"]
    best = next(e for e in perturbed if (e["policy"], e["index"]) == (v["policy"], v["episode"]))
    assert best["max_x"] == max(e["max_x"] for e in perturbed)
    video = read_video(tmp_path / "run/eval/best.mp4")
    assert len(video.frames) == summary["video"]["frames"] == best["length"] + 1
    assert video.frames[0].shape == (480, 512, 3)  # 240x256 NES screen, scale 2
    assert (video.codec, video.pix_fmt, video.fps) == ("h264", "yuv420p", 15.0)
    sky = video.frames[0][100, 20].astype(int)  # the 1-1 sky is blue, not gray
    assert sky[2] > sky[0] + 40
    assert proc.stdout.index("### greedy, perturbed") < proc.stdout.index("### greedy, plain")
    assert "\n| 1-1 | 2 | " in proc.stdout and "the best policy the eval actor kept" in proc.stdout


def test_refuses_fewer_than_one_job(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        evaluate.main(["--run-dir", str(tmp_path), "--jobs", "0"])
    assert exc.value.code == 2 and "--jobs must be >= 1, got 0" in capsys.readouterr().err


def test_make_eval_takes_a_cuda_device_by_index(tmp_path):
    """DEVICE=cuda:N, as the learner takes it: played where torch sees that GPU, else refused
    naming the device and what to pass, before anything is written."""
    make_run(tmp_path / "run")
    cmd = ["make", "--no-print-directory", "-o", "install", "eval", f"PY={sys.executable}"]
    cmd += [f"RUN={tmp_path / 'run'}", f"LEVELS={CORRIDOR}", "EPISODES=1", "POLICY=greedy"]
    cmd += ["PERTURB=0", "DEVICE=cuda:1", "EVAL_ARGS=--no-video"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if torch.cuda.device_count() > 1:
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((tmp_path / "run/eval/summary.json").read_text())
        assert summary["overall"]["device"] == "cuda:1"
        return
    assert "usage:" not in proc.stderr and "invalid choice" not in proc.stderr
    seen = "no CUDA device" if torch.cuda.device_count() == 0 else "1 CUDA device(s)"
    assert f"error: --device cuda:1 asked for, but torch sees {seen}" in proc.stderr
    assert "pass --device" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run/eval").exists()


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:-1", "cuda1"])
def test_a_device_that_is_no_device_is_refused_naming_the_choices(tmp_path, capsys, device):
    with pytest.raises(SystemExit) as exc:
        evaluate.main(["--run-dir", str(tmp_path), "--device", device])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert (
        f"--device must be auto, cpu, cuda or cuda:N (N: a GPU's index, from 0), got {device!r}"
        in err
    )


def test_an_out_dir_that_cannot_be_made_is_refused_naming_out(tmp_path, capsys):
    make_run(tmp_path / "run")
    argv = ["--run-dir", str(tmp_path / "run"), "--level", CORRIDOR, "--out", "/proc/nope"]
    assert evaluate.main([*argv, "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "error: cannot make the directory /proc/nope" in err
    assert "pass --out DIR (make's EVAL_ARGS=--out DIR)" in err
