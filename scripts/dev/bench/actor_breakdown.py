"""Where an actor's time goes when every core is busy: env stepping alone vs stepping + policy.

Runs P processes at once (default 2, one per core here), each stepping one lane of 4 Mario envs
in its own loop without sockets, choosing actions either uniformly at random or with the default
policy network (batch 4, one torch thread), then P raw nes-py processes at once. Prints frames/s
per process and the ratios to raw. Compare with scripts.dev.bench.pipeline's full actor processes
to attribute the remainder to the actor's IO (weights, credits, chunk encoding and sending).

    python -m scripts.dev.bench.actor_breakdown --procs 2 --seconds 12

`--phases` instead times each phase of one process's actor loop (observe, forward, sample, step)
in place, next to the same forward pass repeated with warm caches: after an agent step's
emulation the policy's code and weights have been pushed out of the caches, so the in-loop
forward costs a multiple of what a microbenchmark reports.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import timeit

import numpy as np
import torch

from actor.rollout import Lane, infer_and_act, sample_from_logits, split_lanes
from common.env import build_envs
from common.env_spec import EnvSpec
from common.model import ActorCritic, ModelSpec
from scripts.dev.bench.shared import arg_parser, raw_frames_per_s, summed_rate


def lane_and_policy(num_envs: int) -> tuple[Lane, ActorCritic]:
    """One lane of `num_envs` Mario envs and the default policy on one torch thread."""
    torch.set_num_threads(1)
    envs = build_envs(EnvSpec(), num_envs)
    return split_lanes(envs, 1, 32, envs[0].num_actions)[0], ActorCritic(ModelSpec()).eval()


def lane_frames_per_s(mode: str, seconds: float) -> float:
    """Env frames/s of one lane of 4 envs in this process, actions `random` or from the `policy`."""
    lane, model = lane_and_policy(4)
    rng = np.random.default_rng(0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if mode == "policy":
            infer_and_act(model, lane, rng, 0)  # the actor's own turn
        else:
            lane.act(rng.integers(0, lane.A, lane.K), np.zeros((lane.K, lane.A), np.float32), 0)
        steps += lane.step()
        lane.take_finished()
    return steps * 4 / (time.perf_counter() - t0)


def phases(seconds: float, num_envs: int) -> dict[str, float]:
    """ms per lane step of each phase of the actor's loop, one process, one lane."""
    lane, model = lane_and_policy(num_envs)
    rng = np.random.default_rng(0)
    total = dict.fromkeys(("observe", "forward", "sample", "step"), 0.0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = time.perf_counter()
        obs = lane.observe()
        b = time.perf_counter()
        with torch.inference_mode():
            logits = model(obs, lane.last_action(), lane.core_state()).logits.numpy()
        c = time.perf_counter()
        lane.act(sample_from_logits(logits, rng), logits, 0)
        d = time.perf_counter()
        lane.step()
        lane.take_finished()
        e = time.perf_counter()
        for key, dt in zip(total, (b - a, c - b, d - c, e - d), strict=True):
            total[key] += dt
        n += 1
    out = {key: v / n * 1e3 for key, v in total.items()}
    last = lane.last_action()
    with torch.inference_mode():
        timeit.timeit(lambda: model(obs, last), number=20)  # warms the caches
        out["forward_warm"] = timeit.timeit(lambda: model(obs, last), number=200) / 200 * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__)
    parser.add_argument("--procs", type=int, default=2, help="processes running at once")
    parser.add_argument("--seconds", type=float, default=12.0, help="measurement window")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    parser.add_argument("--phases", action="store_true", help="time the loop's phases instead")
    parser.add_argument("--num-envs", type=int, default=4, help="--phases: envs in the lane")
    args = parser.parse_args(argv)
    if args.phases:
        ms = phases(args.seconds, args.num_envs)
        policy = ms["observe"] + ms["forward"] + ms["sample"]
        print(
            f"ms per lane step of {args.num_envs} envs: "
            + ", ".join(f"{k} {v:.3f}" for k, v in ms.items())
            + f"; policy share of the loop {policy / (policy + ms['step']):.3f}"
        )
        print(json.dumps({"bench": "actor_phases", "num_envs": args.num_envs, **ms}))
        return 0
    ratios: dict[str, list[float]] = {"random": [], "policy": []}
    for _ in range(args.rounds):
        raw = summed_rate(raw_frames_per_s, (args.seconds,), args.procs)
        for mode in ratios:
            rate = summed_rate(lane_frames_per_s, (mode, args.seconds), args.procs)
            ratios[mode].append(rate / raw)
    result = {mode: statistics.median(r) for mode, r in ratios.items()}
    print(
        f"{args.procs} processes: env stepping with random actions {result['random']:.3f} of raw; "
        f"with the default policy {result['policy']:.3f} of raw (median of {args.rounds} rounds)"
    )
    print(json.dumps({"bench": "actor_breakdown", "procs": args.procs, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
