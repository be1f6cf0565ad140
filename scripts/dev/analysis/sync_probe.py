"""Learning per frame, without the system around it: one process, actor lanes and learner in turn.

    python -m scripts.dev.analysis.sync_probe --frames 400000 --out runs/probe-a.jsonl -- [learner flags]

The actor's own lane and inference code (`actor.rollout`) plays K envs; every finished chunk goes
through the wire format and the learner's host conversion and batching, exactly as in a run; the
learner's `Learner.step` trains on each batch of `--batch-chunks` chunks (N, or MIN-MAX's MAX:
there is no queue here), then the acting model takes the new weights. So the policy lag is zero and the only clock
is env frames: the curve says what an algorithm setting learns per frame, apart from throughput
and lag. `--policy-lag N` acts with the weights of N updates ago instead, to measure what a
running system's lag costs.

Batches are counted in chunks, and a chunk here holds all K envs (one lane): the default 8 chunks
of 4 envs are 1,024 agent steps an update. `make train`'s actor splits its 4 envs into 2 lanes, so
its chunks hold 2 envs and its batches of 4 to 8 chunks are 256 to 512 agent steps
(`--batch-chunks 2` and `4` here).

Each finished episode is one JSON line of OUT (env frames, max x, flag, outcome); each update one
line of its `.updates.jsonl` sibling (grad norm before clipping, losses, entropy, clip fraction);
a table of mean max x per `--window-frames` window is printed at the end.

Learner flags (after `--`) are those of `python -m learner` (defaults included), so a setting that
wins here is one flag away from `make train`. One torch thread, so two probes can run side by side
on two cores and be compared on the frame axis.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from actor.config import ActorConfig
from actor.main import to_wire_chunk
from actor.rollout import Lane, infer_and_act
from common import config as config_io
from common import wire
from common.env import build_envs
from common.env_spec import EnvSpec
from common.model import ActorCritic
from learner.batching import collate, to_host
from learner.config import LearnerConfig
from learner.loop import build_training


def probe(
    cfg: LearnerConfig,
    level: str,
    envs: int,
    frames: int,
    out: Path,
    seed: int,
    policy_lag: int = 0,
) -> list[dict]:
    torch.manual_seed(seed)
    device = torch.device("cpu")
    learner, mixer = build_training(cfg, device)
    if mixer is not None:
        raise SystemExit("sync_probe: replay is not probed here; pass --replay-fraction 0")
    acting = ActorCritic(cfg.model_spec()).eval()
    lagged = Lagged(learner.model.state_dict(), policy_lag)
    acting.load_state_dict(lagged.state)
    actor_cfg = ActorConfig()
    spec: EnvSpec = dataclasses.replace(cfg.env_spec(), level=level)
    lane = Lane(
        build_envs(spec, envs),
        cfg.unroll_length,
        cfg.num_actions,
        state_size=acting.spec.state_size,
    )
    rng = np.random.default_rng(seed)
    episodes: list[dict] = []
    pending = []
    done = 0
    start = time.perf_counter()
    with open(out, "w") as log, open(updates_path(out), "w") as ulog:
        while done < frames:
            infer_and_act(acting, lane, rng, lagged.version)
            done += lane.step() * spec.frame_skip
            for chunk in lane.take_finished():
                for e in chunk.episodes:
                    row = {"env_frames": done, "max_x": e.max_x, "flag": e.flag}
                    row |= {"outcome": e.outcome, "time_s": time.perf_counter() - start}
                    episodes.append(row)
                    log.write(json.dumps(row) + "\n")
                wired = to_wire_chunk(actor_cfg, "probe", 0, chunk, level=level)
                msg = wire.decode(wire.encode(wired))
                pending.append(to_host(msg, spec.frame_skip, pin=False))
                if len(pending) == cfg.batch_size().max_chunks:  # no queue here: a full batch
                    batch = collate(pending, device)
                    learner.observe_fresh(batch)
                    stats = learner.step(batch)
                    ulog.write(json.dumps(update_row(learner.updates, done, stats)) + "\n")
                    lagged.push(learner.updates, learner.model.state_dict())
                    acting.load_state_dict(lagged.state)
                    pending = []
            log.flush()
            ulog.flush()
    return episodes


class Lagged:
    """The learner's weights as a system with a policy lag of `lag` updates acts with them: the
    newest `lag` + 1 versions are kept, and the oldest is the acting one (lag 0: the newest)."""

    def __init__(self, initial: dict[str, torch.Tensor], lag: int):
        if lag < 0:
            raise ValueError(f"lag must be >= 0, got {lag}")
        self._kept = collections.deque([(0, _copy(initial))], maxlen=lag + 1)

    def push(self, version: int, state: dict[str, torch.Tensor]) -> None:
        self._kept.append((version, _copy(state)))

    @property
    def version(self) -> int:
        return self._kept[0][0]

    @property
    def state(self) -> dict[str, torch.Tensor]:
        return self._kept[0][1]


def _copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.items()}


def updates_path(out: Path) -> Path:
    """runs/probe-a.jsonl -> runs/probe-a.updates.jsonl"""
    return out.with_suffix(".updates.jsonl")


def update_row(updates: int, env_frames: int, stats) -> dict:
    """One update's statistics (learner.update.UpdateStats) as a JSON-ready row."""
    names = ("total_loss", "pg_loss", "baseline_loss", "entropy", "grad_norm", "clip_fraction")
    return {"update": updates, "env_frames": env_frames} | {
        n: round(float(getattr(stats, n)), 6) for n in names
    }


def windows(episodes: list[dict], window_frames: int) -> list[tuple[int, int, float, float]]:
    """(window end, episodes, mean max x, flag rate) per full window of env frames."""
    out = []
    end = window_frames
    last = max((e["env_frames"] for e in episodes), default=0)
    while end <= last:
        sel = [e for e in episodes if end - window_frames < e["env_frames"] <= end]
        if sel:
            mean = float(np.mean([e["max_x"] for e in sel]))
            out.append((end, len(sel), mean, float(np.mean([e["flag"] for e in sel]))))
        end += window_frames
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, learner_argv = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--frames", type=int, default=400_000, help="env frames to play")
    p.add_argument("--envs", type=int, default=4, help="envs in the lane (K)")
    p.add_argument("--level", default="1-1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--policy-lag",
        type=int,
        default=0,
        help="act with the weights of this many updates ago (a running system's lag)",
    )
    p.add_argument("--window-frames", type=int, default=50_000)
    p.add_argument("--out", type=Path, required=True, help="episodes, one JSON line each")
    args = p.parse_args(ours)
    cfg = config_io.load(
        LearnerConfig, learner_argv, prog="sync_probe (learner flags)", description=""
    )
    torch.set_num_threads(1)
    if args.policy_lag < 0:
        raise SystemExit(f"sync_probe: --policy-lag must be >= 0, got {args.policy_lag}")
    episodes = probe(cfg, args.level, args.envs, args.frames, args.out, args.seed, args.policy_lag)
    print("| env frames | episodes | mean max x | flag rate |\n|---|---|---|---|")
    for end, n, mean, flags in windows(episodes, args.window_frames):
        print(f"| {end:,} | {n} | {mean:,.0f} | {flags:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
