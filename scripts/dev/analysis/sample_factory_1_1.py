"""Sample Factory's APPO on the project's env, for the reference curve of docs/LEARNING.md.

    python -m scripts.dev.analysis.sample_factory_1_1 --run RUN [--seed S] [--frames 1050000]
        [--minutes 40] [-- SAMPLE_FACTORY_FLAGS]
    python -m scripts.learning_curve RUN --window-frames 200000

Trains Sample Factory 2.1.1 (APPO, asynchronous, CPU learner) on 1-1 with the env that `make
train`'s actors step (`common.env.FrameEnv`: skip 4 with the max of the last two frames, gray
84x84, the 100-step no-progress cutoff), stacked 4 frames deep as the project's network sees
them (an episode's first frame repeated where `common.stacking` puts zeros), with the recipe of the project's facts: 2 workers x 2 envs, rollout 128, batch 256, 4 epochs of
PPO-clip 0.1, learning rate 2.5e-4, entropy 0.01, γ 0.9, rewards x 0.1, returns and inputs
normalised, V-trace off, the Nature-style CNN; every other setting Sample Factory's default (a
GRU core of 512 among them). Flags after `--` override any of it (e.g. `--use_rnn False`).

Training stops after `--frames` env frames (Sample Factory's count, at 4 frames per agent step),
or at `--minutes` of wall time (it is interrupted), whichever comes first. Each env appends its
finished episodes to RUN/episodes-PID.jsonl with its own frame count; when training stops, they are merged into RUN/episodes.jsonl in the project's format (a `start` line,
then one line per episode with the run's total env frames when it ended: each process's count at
that moment, summed), so that `scripts.learning_curve` reads it like a `make train` run.

Sample Factory is not a dependency of the project. It installs beside it without its pins
(its numpy < 2 and gymnasium < 1.0 pins are older than the project's; 2.1.1 runs on these):

    python3.13 -m venv /tmp/sf && echo "$(.venv/bin/python -c 'import site; print(site.getsitepackages()[0])')" \
        > /tmp/sf/lib/python3.13/site-packages/project.pth
    /tmp/sf/bin/pip install --no-deps sample-factory==2.1.1 signal-slot-mp colorlog filelock \
        psutil threadpoolctl tensorboardX protobuf faster-fifo
    /tmp/sf/bin/python -m scripts.dev.analysis.sample_factory_1_1 --run /tmp/runs/sf_s1 --seed 1
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from common.env import FrameEnv
from common.env_spec import EnvSpec
from common.rundir import RunDir
from common.stacking import STACK

ENV_NAME = "mario_1_1"
FRAME_SKIP = 4

# The recipe of the reference curve; the rest is Sample Factory 2.1.1's defaults.
RECIPE = (
    "--num_workers=2",
    "--num_envs_per_worker=2",
    "--rollout=128",
    "--batch_size=256",
    "--num_epochs=4",
    "--ppo_clip_ratio=0.1",
    "--learning_rate=0.00025",
    "--exploration_loss_coeff=0.01",
    "--gamma=0.9",
    "--reward_scale=0.1",
    "--normalize_returns=True",
    "--normalize_input=True",
    "--with_vtrace=False",
    "--encoder_conv_architecture=convnet_simple",
    f"--env_frameskip={FRAME_SKIP}",
    "--device=cpu",
)


class StackedMario(gym.Env):
    """FrameEnv with the last 4 frames as its observation [4, 84, 84] uint8 (before an episode
    has 4 frames, its first frame fills the older planes; `common.stacking` zeroes them), and each
    finished episode logged with this process's env frames."""

    def __init__(self, log_dir: Path, seed: int):
        self.env = FrameEnv(EnvSpec(level="1-1"), seed=seed)
        size = self.env.spec.frame_size
        self.observation_space = gym.spaces.Box(0, 255, (STACK, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(self.env.num_actions)
        self._stack = np.zeros((STACK, size, size), np.uint8)
        # open for the env's life, closed in close(); line-buffered so a killed run keeps its lines
        self._log = open(log_dir / f"episodes-{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115

    def reset(self, *, seed=None, options=None):
        frame = self.env.reset()
        self._stack[:] = frame[None]
        return self._stack.copy(), {}

    def step(self, action):
        step = self.env.step(int(action))
        _process_frames[0] += FRAME_SKIP
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = step.frame
        if step.episode is not None:
            e = step.episode
            record = {
                "time": time.time(),
                "process_frames": _process_frames[0],
                "max_x": e.max_x,
                "flag": e.flag,
                "return": e.episode_return,
                "length": e.length,
                "outcome": e.outcome,
            }
            self._log.write(json.dumps(record) + "\n")
        return self._stack.copy(), step.reward, step.terminated, step.truncated, {}

    def close(self):
        self.env.close()
        self._log.close()


def _numpy2_compatible() -> None:
    """Sample Factory 2.1.1 (pinned to NumPy < 2) stores size-1 arrays into scalar slots of its
    trajectory buffers, which NumPy 2 refuses; store them as the slot's shape. Applied where this
    module is imported: the main process and each worker that unpickles `make_env`."""
    try:
        from sample_factory.algo.utils.tensor_dict import TensorDict
    except ImportError:
        return
    original = TensorDict._set_data_func

    def set_data(self, x, index, new_data):
        if isinstance(x, np.ndarray) and isinstance(new_data, np.ndarray):
            slot = x[index]
            if np.shape(slot) != new_data.shape and np.size(slot) == new_data.size:
                new_data = new_data.reshape(np.shape(slot))
        return original(self, x, index, new_data)

    TensorDict._set_data_func = set_data


_numpy2_compatible()
_process_frames = [0]  # env frames stepped by this process's envs, for the episode log
LOG_DIR_VAR = "MARIO_SF_RUN"


def make_env(full_env_name, cfg, env_config, render_mode=None):
    """Sample Factory's env factory (module-level: its worker processes import it)."""
    worker = env_config.worker_index if env_config else 0
    index = env_config.vector_index if env_config else 0
    seed = (cfg.seed or 0) * 1000 + worker * 10 + index
    return StackedMario(Path(os.environ[LOG_DIR_VAR]), seed=seed)


def merge_episodes(run: Path, start: float) -> int:
    """RUN/episodes-*.jsonl into the run's episode log (`RunDir.episodes`): each episode with the run's env frames when
    it ended (every process's last logged count at or before then, plus its own). Returns the
    number of episodes."""
    streams = []
    for path in sorted(run.glob("episodes-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        streams.append(rows)
    times = [[r["time"] for r in rows] for rows in streams]
    episodes = []
    for i, rows in enumerate(streams):
        for r in rows:
            total = r["process_frames"]
            for j, other in enumerate(streams):
                if j != i:
                    k = bisect.bisect_right(times[j], r["time"])
                    total += other[k - 1]["process_frames"] if k else 0
            episodes.append((r["time"], total, r))
    episodes.sort(key=lambda e: e[0])
    with open(RunDir(run).episodes, "w") as out:
        out.write(json.dumps({"event": "start", "time": start, "env_frames": 0}) + "\n")
        for t, frames, r in episodes:
            line = {
                "time": t,
                "env_frames": frames,
                "actor_id": 0,
                "level": "1-1",
                "max_x": r["max_x"],
                "flag": r["flag"],
                "return": r["return"],
                "length": r["length"],
                "outcome": r["outcome"],
            }
            out.write(json.dumps(line) + "\n")
    return len(episodes)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, type=Path, help="run directory (created)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frames", type=int, default=1_050_000, help="env frames to train for")
    p.add_argument("--minutes", type=float, default=40.0, help="most wall-clock training time")
    p.add_argument(
        "--merge-only", action="store_true", help="only merge RUN's episode logs (after a crash)"
    )
    args = p.parse_args(argv)
    if args.merge_only:
        start = json.loads((args.run / "start.json").read_text())["time"]
        print(f"{merge_episodes(args.run, start)} episodes in {RunDir(args.run).episodes}")
        return 0
    try:
        from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
        from sample_factory.envs.env_utils import register_env
        from sample_factory.train import run_rl
    except ImportError as exc:
        sys.exit(f"Sample Factory is not installed ({exc}); see this module's docstring")
    args.run.mkdir(parents=True, exist_ok=True)
    log_dir = args.run.resolve()

    os.environ[LOG_DIR_VAR] = str(log_dir)  # read by make_env in Sample Factory's workers
    register_env(ENV_NAME, make_env)
    sf_argv = [
        f"--env={ENV_NAME}",
        "--experiment=sf",
        f"--train_dir={log_dir}",
        f"--seed={args.seed}",
        f"--train_for_env_steps={args.frames}",
        *RECIPE,
        *extra,
    ]
    parser, _ = parse_sf_args(argv=sf_argv)
    cfg = parse_full_cfg(parser, argv=sf_argv)
    start = time.time()
    (args.run / "start.json").write_text(json.dumps({"time": start, "argv": sf_argv}))
    # Sample Factory 2.1.1 never advances the clock behind its --train_for_seconds: interrupt it.
    timer = threading.Timer(args.minutes * 60, os.kill, (os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()
    try:
        status = run_rl(cfg)
    except KeyboardInterrupt:
        status = 0
    finally:
        timer.cancel()
        n = merge_episodes(args.run, start)
        print(f"{n} episodes in {RunDir(args.run).episodes}")
    return int(status) if isinstance(status, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
