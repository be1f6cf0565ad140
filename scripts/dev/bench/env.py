"""Benchmarks, printed side by side as ratios from one run (`make bench`).

- env: raw nes-py emulator frames/s vs the env factory's frames/s (target ratio >= 0.95).
- model: default model CPU inference per observation (batch 4, one torch thread) as a share of one
  agent step's emulation time, 4 frames (target <= 0.10); and against the same CNN without its
  input normalisation and previous-action input, and the small CNN with an LSTM core (its state
  carried from step to step, as an actor does), in the same rounds.
Each pair is measured in alternating rounds so that machine noise hits both sides alike.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time

import numpy as np
import torch

from common.env import FrameEnv
from common.env_spec import EnvSpec
from common.model import ActorCritic, ModelSpec
from scripts.dev.bench.shared import arg_parser, raw_frames_per_s


def factory_frames_per_s(seconds: float) -> float:
    """Frames/s of the env factory's env (skip 4, 84x84 grey), random actions."""
    env = FrameEnv(EnvSpec(no_progress_steps=0))
    env.reset()
    actions = np.random.default_rng(1).integers(0, env.num_actions, size=64)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions:
            if env.step(int(a)).episode is not None:
                env.reset()
        steps += len(actions)
    rate = steps * env.spec.frame_skip / (time.perf_counter() - start)
    env.close()
    return rate


def inference_s_per_obs(spec: ModelSpec, batch: int, seconds: float) -> float:
    """Seconds per observation of `spec`'s forward pass on [batch, S, H, W] uint8 frames and
    the previous action."""
    model = ActorCritic(spec).eval()
    size = spec.frame_size
    x = torch.randint(0, 256, (batch, spec.stack, size, size), dtype=torch.uint8)
    last = torch.randint(0, spec.num_actions, (batch,))
    state = model.initial_state(batch)  # [batch, C], carried as the actor carries it
    with torch.inference_mode():
        for _ in range(3):
            state = model(x, last, state).state
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            state = model(x, last, state).state
            n += 1
    return (time.perf_counter() - start) / (n * batch)


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="alternating measurement rounds")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lstm_spec = ModelSpec(core="lstm")
    raw, fac, inf, lstm = [], [], [], []
    for _ in range(args.rounds):
        raw.append(raw_frames_per_s(args.seconds))
        fac.append(factory_frames_per_s(args.seconds))
        inf.append(inference_s_per_obs(ModelSpec(), 4, args.seconds / 2))
        lstm.append(inference_s_per_obs(lstm_spec, 4, args.seconds / 2))
    raw_fps, fac_fps, inf_s = statistics.median(raw), statistics.median(fac), statistics.median(inf)
    step_s = 4 / raw_fps  # emulation time of one agent step (4 frames)
    r = {
        "raw_frames_per_s": raw_fps,
        "factory_frames_per_s": fac_fps,
        "factory_over_raw": fac_fps / raw_fps,
        "inference_ms_per_obs": inf_s * 1e3,
        "agent_step_emulation_ms": step_s * 1e3,
        "inference_over_agent_step": inf_s / step_s,
        "lstm_inference_ms_per_obs": statistics.median(lstm) * 1e3,
        "lstm_inference_over_agent_step": statistics.median(lstm) / step_s,
        "lstm_over_default": statistics.median(a / b for a, b in zip(lstm, inf, strict=True)),
    }
    for arch in ("nature", "resnet"):
        s_per_obs = inference_s_per_obs(ModelSpec(arch=arch), 4, args.seconds / 2)
        r[f"{arch}_inference_ms_per_obs"] = s_per_obs * 1e3
    machine = f"{platform.node()} {platform.processor() or platform.machine()}"
    print(
        f"machine: {machine}, torch {torch.__version__}\n"
        f"raw nes-py emulator        {r['raw_frames_per_s']:8.0f} frames/s\n"
        f"env factory (skip 4, 84²)  {r['factory_frames_per_s']:8.0f} frames/s   "
        f"ratio {r['factory_over_raw']:.3f}  (target >= 0.95)\n"
        f"default (small) CNN, batch 4 {r['inference_ms_per_obs']:8.3f} ms/obs     "
        f"= {r['inference_over_agent_step']:.3f} of one agent step's emulation "
        f"({r['agent_step_emulation_ms']:.2f} ms)  (target <= 0.10)\n"
        f"  with an LSTM core (256)   {r['lstm_inference_ms_per_obs']:8.3f} ms/obs     "
        f"= {r['lstm_inference_over_agent_step']:.3f} of an agent step "
        f"({r['lstm_over_default']:.3f}x the default, paired rounds)\n"
        f"nature CNN, batch 4          {r['nature_inference_ms_per_obs']:8.3f} ms/obs\n"
        f"IMPALA resnet, batch 4       {r['resnet_inference_ms_per_obs']:8.3f} ms/obs"
    )
    print(json.dumps({"bench": "env_model", **r}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
