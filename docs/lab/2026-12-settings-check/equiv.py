"""The settings check's harness: one part of the defaults' computation, dumped to an .npz.

Run it from a checkout's root with that checkout's venv (it imports the checkout's code):

    cd CHECKOUT && .venv/bin/python $H/equiv.py PART --out FILE.npz [--weights W.pt] [--chunks C.npz]

PART: env | model | rollout | update. Side-agnostic: detects old (0841182) vs new (17899f0) API.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.getcwd())  # the tree whose root is the cwd

import numpy as np
import torch

torch.set_num_threads(1)

from actor.config import ActorConfig  # noqa: E402
from learner.config import LearnerConfig  # noqa: E402

NEW = hasattr(LearnerConfig, "env_spec")
SIDE = "new" if NEW else "old"


def default_env_spec():
    """The env spec the actor builds its envs from at default settings."""
    from common.env_spec import EnvSpec

    if NEW:  # the learner's, through the Welcome's wire form
        return EnvSpec.from_wire(LearnerConfig().env_spec().to_wire())
    return ActorConfig().env_spec()


def default_model_spec():
    """The model spec the actor builds from the learner's Welcome."""
    from common.model import ModelSpec

    wire_spec = LearnerConfig().model_spec().to_wire()
    return ModelSpec(**wire_spec)


def log(*a):
    print(f"[{SIDE}]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
def part_env(args):
    from common.env import build_envs

    spec = default_env_spec()
    log("env spec", spec)
    env = build_envs(spec, 1, seed=(0, 0))[0]
    n = args.steps
    A = env.num_actions
    rng = np.random.default_rng(12345)
    # biased toward the right-moving actions so episodes get somewhere (deaths, progress)
    p = np.array([0.05, 0.25, 0.25, 0.15, 0.2, 0.05, 0.05])[:A]
    p = p / p.sum()
    actions = rng.choice(A, size=n, p=p)
    first = env.reset().copy()
    frames = np.zeros((n, *first.shape), np.uint8)
    reset_frames = []
    rewards = np.zeros(n, np.float64)
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    xpos = np.zeros(n, np.int64)
    flag = np.zeros(n, bool)
    eps = []
    t0 = time.time()
    for i in range(n):
        s = env.step(int(actions[i]))
        frames[i] = s.frame
        rewards[i] = s.reward
        term[i] = s.terminated
        trunc[i] = s.truncated
        xpos[i] = int(env._env._x_position)
        flag[i] = bool(env._env._flag_get)
        if s.episode is not None:
            e = s.episode
            eps.append(
                [
                    i,
                    e.episode_return,
                    e.length,
                    e.max_x,
                    int(e.flag),
                    ["flag", "death", "no_progress", "other"].index(e.outcome),
                ]
            )
            reset_frames.append(env.reset().copy())
    log(f"{n} steps in {time.time() - t0:.1f}s, {len(eps)} episodes")
    np.savez_compressed(
        args.out,
        first=first,
        frames=frames,
        rewards=rewards,
        terminated=term,
        truncated=trunc,
        x_pos=xpos,
        flag_get=flag,
        actions=actions,
        episodes=np.array(eps, np.float64),
        reset_frames=np.array(reset_frames),
        spec=np.array(repr(spec)),
    )


# ---------------------------------------------------------------------------------------------
def make_weights(model, frames_src):
    """Non-trivial weights for the inference checks: the init plus a non-zero previous-action
    embedding and input moments from real frames (the old side writes them; both sides load)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.last_action.weight.copy_(
            torch.randn(model.last_action.weight.shape, generator=g) * 0.1
        )
        model.value.weight.mul_(5.0)
    frames = torch.from_numpy(np.load(frames_src)["frames"][:400])
    model.observe_frames(frames)


def part_model(args):
    from common.model import ActorCritic

    spec = default_model_spec()
    log("model spec", spec)
    torch.manual_seed(0)
    model = ActorCritic(spec)
    init = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if args.write_weights:
        make_weights(model, args.env_npz)
        torch.save(model.state_dict(), args.write_weights)
    # the weights every side uses below: the old side's, loaded the way the actor loads weights
    sd = torch.load(args.weights)
    from actor.link import load_weights
    from common import wire

    msg = wire.Weights(
        policy_version=3, tensors={k: v.numpy() for k, v in sd.items()}, model_spec=spec.to_wire()
    )
    msg = wire.decode(wire.encode(msg))
    actor_model = ActorCritic(spec).eval()
    load_weights(actor_model, msg)
    # an observation batch: real frames, stacked with episode starts, and previous actions
    from common.stacking import stack_frames, stack_newest

    envd = np.load(args.env_npz)
    fr = torch.from_numpy(envd["frames"][:67])  # [67, H, W]
    frames = fr.view(67, 1, *fr.shape[1:]).repeat(1, 3, 1, 1)  # [67, 3, H, W]
    first = torch.zeros(67, 3, dtype=torch.bool)
    first[0] = True
    first[10, 1] = True
    first[21, 2] = True
    first[22, 0] = True
    stacks = stack_frames(frames, first)  # [64, 3, 4, H, W]
    obs = stacks.reshape(-1, *stacks.shape[2:])  # [192, 4, H, W]
    newest = stack_newest(frames[-4:].numpy(), first[-4:].numpy())
    A = spec.num_actions
    last = torch.from_numpy(np.random.default_rng(7).integers(0, A + 1, obs.shape[0]))
    with torch.inference_mode():
        out = actor_model(obs, last, None)
        out_none = actor_model(obs[:8], None, None)
    np.savez_compressed(
        args.out,
        **{f"init/{k}": v for k, v in init.items()},
        logits=out.logits.numpy(),
        values=out.value.numpy(),
        state=out.state.numpy(),
        logits_none=out_none.logits.numpy(),
        stacks=stacks.numpy(),
        newest=newest,
        spec=np.array(repr(spec)),
        **{f"loaded/{k}": v.numpy() for k, v in actor_model.state_dict().items()},
    )


# ---------------------------------------------------------------------------------------------
def part_rollout(args):
    """The actor's loop, single-threaded in its lane order: infer lane j, step lane j."""
    from actor.rollout import infer_and_act, split_lanes
    from common.env import build_envs
    from common.model import ActorCritic

    acfg = ActorConfig()
    spec = default_env_spec()
    mspec = default_model_spec()
    lcfg = LearnerConfig()
    envs = build_envs(spec, acfg.num_envs, seed=(acfg.seed, acfg.actor_id))
    model = ActorCritic(mspec).eval()
    model.load_state_dict(torch.load(args.weights))
    rng = np.random.default_rng([acfg.seed, acfg.actor_id])  # as Actor.__init__
    lanes = split_lanes(envs, acfg.lanes, lcfg.unroll_length, envs[0].num_actions, mspec.state_size)
    chunks = []
    per_lane = args.chunks_per_lane
    i = 0
    t0 = time.time()
    while sum(1 for c in chunks) < per_lane * len(lanes):
        j = i % len(lanes)
        lane = lanes[j]
        i += 1
        for f in lane.take_finished():
            chunks.append((j, f))
        if len([c for c in chunks if c[0] == j]) >= per_lane:
            continue
        infer_and_act(model, lane, rng, 0)
        lane.step()
    log(
        f"{len(chunks)} chunks in {time.time() - t0:.1f}s, T={lcfg.unroll_length}, "
        f"lanes={len(lanes)}, envs={acfg.num_envs}"
    )
    out = {}
    for n, (j, f) in enumerate(chunks):
        out[f"c{n}/lane"] = np.array(j)
        for k, v in f.arrays.items():
            out[f"c{n}/{k}"] = v
        out[f"c{n}/episodes"] = np.array(
            [[e.episode_return, e.length, e.max_x, int(e.flag)] for e in f.episodes], np.float64
        )
    np.savez_compressed(args.out, n=np.array(len(chunks)), **out)


# ---------------------------------------------------------------------------------------------
def part_update(args):
    from common import chunk as chunk_mod
    from common import wire
    from learner import lr_schedule
    from learner.batching import collate, to_host
    from learner.loop import build_training

    cfg = LearnerConfig()
    torch.manual_seed(cfg.seed)  # as TrainLoop._build_training
    learner, mixer = build_training(cfg, torch.device("cpu"))
    log("mixer", mixer, "hyper", learner.hyper)
    init = {k: v.detach().clone().numpy() for k, v in learner.model.state_dict().items()}
    learner.model.load_state_dict(torch.load(args.weights))
    src = np.load(args.chunks)
    names = [a.name for a in chunk_mod.LAYOUT]
    spec = default_env_spec()

    def host(n):
        arrays = {k: src[f"c{n}/{k}"] for k in names}
        c = wire.Chunk(
            actor_id=0,
            instance_id="x" * 32,
            seq=n,
            level=spec.level,
            policy_version=0,
            send_time=0.0,
            episodes=(),
            arrays=arrays,
            layout=chunk_mod.LAYOUT,
        )
        c = wire.decode(wire.encode(c))
        return to_host(c, spec.frame_skip, False)

    out = {f"init/{k}": v for k, v in init.items()}
    nchunks = int(src["n"])
    groups = [list(range(i, i + 4)) for i in range(0, nchunks - 3, 4)][: args.updates]
    frames_total = 0
    for u, idx in enumerate(groups):
        chunks = [host(n) for n in idx]
        batch = collate(chunks, torch.device("cpu"))
        learner.observe_fresh(batch)
        learner.set_learning_rate(
            lr_schedule.learning_rate(
                cfg.learning_rate, frames_total, cfg.lr_anneal_frames, cfg.lr_final_fraction
            )
        )
        stats = learner.step(batch, epochs=cfg.epochs)
        frames_total += sum(c.env_frames for c in chunks)
        for k, v in stats._asdict().items():
            out[f"u{u}/stats/{k}"] = v.detach().numpy() if torch.is_tensor(v) else np.array(v)
        for k, v in learner.model.state_dict().items():
            out[f"u{u}/param/{k}"] = v.detach().numpy().copy()
        pop = learner.popart if NEW else learner.value_norm
        st = pop.stats if hasattr(pop, "stats") else None
        if st is not None:
            out[f"u{u}/popart/mean"] = st.mean.numpy().copy()
            out[f"u{u}/popart/mean_sq"] = st.mean_sq.numpy().copy()
        for pi, (_p, s) in enumerate(learner.optimizer.state.items()):
            out[f"u{u}/adam/{pi}/exp_avg"] = s["exp_avg"].numpy().copy()
            out[f"u{u}/adam/{pi}/exp_avg_sq"] = s["exp_avg_sq"].numpy().copy()
        log(
            f"update {u}: total {stats.total_loss.item():.6f} pg {stats.pg_loss.item():.6f} "
            f"v {stats.baseline_loss.item():.6f} ent {stats.entropy.item():.6f} "
            f"steps {stats.sgd_steps} epochs {stats.epochs}"
        )
    out["optimizer_defaults"] = np.array(repr(learner.optimizer.defaults))
    out["hyper"] = np.array(repr(learner.hyper))
    np.savez_compressed(args.out, **out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("part")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--weights", default="/tmp/settings-check/weights.pt")
    p.add_argument("--write-weights", default="")
    p.add_argument("--env-npz", default="/tmp/settings-check/old_env.npz")
    p.add_argument("--chunks", default="/tmp/settings-check/old_rollout.npz")
    p.add_argument("--chunks-per-lane", type=int, default=4)
    p.add_argument("--updates", type=int, default=2)
    args = p.parse_args()
    import learner

    log("learner from", learner.__file__)
    {"env": part_env, "model": part_model, "rollout": part_rollout, "update": part_update}[
        args.part
    ](args)


if __name__ == "__main__":
    main()
