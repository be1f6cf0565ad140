"""What several benchmarks share: their argument parser, device synchronisation, the raw
emulator's rate, rates summed over processes, and a synthetic chunk streamed to a learner under
the credit protocol."""

from __future__ import annotations

import multiprocessing as mp
import time
from argparse import ArgumentParser, RawDescriptionHelpFormatter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch
import zmq

from common import chunk, wire


def arg_parser(doc: str) -> ArgumentParser:
    """A benchmark's argument parser; --help shows its module docstring as written."""
    return ArgumentParser(description=doc, formatter_class=RawDescriptionHelpFormatter)


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously) before a clock is read."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_frames_per_s(seconds: float, emulators: int = 1) -> float:
    """Bare nes-py `NESEnv.step` frames/s (no game logic) in this process, each emulator playing
    from World 1-1's first frame as the env factory does. Several emulators take turns, 4 frames
    each, the way an actor's lane steps its envs (their state no longer fits one core's L2)."""
    from gym_super_mario_bros import SuperMarioBrosEnv
    from gym_super_mario_bros._roms import smb1_rom_path
    from nes_py import NESEnv

    source = SuperMarioBrosEnv(target=(1, 1))  # kept alive: its snapshot refers to its memory
    start_state = source.dump_state()
    envs = [NESEnv(smb1_rom_path()) for _ in range(emulators)]
    for env in envs:
        env.reset()
    buttons = np.random.default_rng(0).choice([0, 0x80, 0x81, 0x82, 0x83, 0x01, 0x40], 256)
    frames, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for env in envs:
            env.load_state(start_state)
        for b in buttons:
            for env in envs:
                for _ in range(4):  # an agent step's worth of the same buttons
                    env.step(int(b))
        frames += 4 * len(buttons) * emulators
    return frames / (time.perf_counter() - t0)


def summed_rate(rate: Callable[..., float], args: tuple, procs: int) -> float:
    """Run `rate(*args)` (a module-level function) in `procs` spawned processes at once; the sum
    of what they return."""
    with ProcessPoolExecutor(procs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(rate, *args) for _ in range(procs)]
        return sum(f.result() for f in futures)


def synthetic_chunk(
    rng: np.random.Generator, unroll: int, num_envs: int, actor_id: int = 0, state_size: int = 0
) -> wire.Chunk:
    """A chunk shaped like an actor's (episode starts and ends sprinkled in, no truncations, a
    core state of `state_size` floats per env), validated by the wire format."""
    T, K, A = unroll, num_envs, 7  # the simple action set's 7 actions
    arrays = chunk.new_arrays({"T": T, "K": K, "H": 84, "W": 84, "A": A, "C": state_size})
    first = arrays["first"]  # [T+4, K]
    first[:] = rng.random((T + 4, K)) < 0.01
    arrays["terminated"][:] = first[4:]  # an episode ends where the next one starts
    arrays["frames"][:] = rng.integers(0, 256, arrays["frames"].shape, dtype=np.uint8)
    arrays["actions"][:] = rng.integers(0, A, (T, K))
    arrays["rewards"][:] = rng.normal(0, 1, (T, K))
    arrays["behaviour_logits"][:] = rng.normal(0, 1, (T, K, A))
    arrays["last_actions"][:] = np.where(first[3], A, rng.integers(0, A, K))
    arrays["core_state"][:] = np.where(first[3, :, None], 0.0, rng.normal(0, 0.5, (K, state_size)))
    return wire.Chunk(
        actor_id=actor_id, instance_id=f"bench{actor_id}", seq=0, level="1-1", policy_version=0,
        send_time=time.time(), episodes=(), arrays=arrays,
    )  # fmt: skip


def send_chunks(
    port: int, actor_id: int, unroll: int, num_envs: int, seconds: float, state_size: int = 0
) -> None:
    """Register with a learner at `port`, then stream one synthetic chunk over and over for
    `seconds`, spending credits as an actor does."""
    rng = np.random.default_rng(actor_id)
    message = synthetic_chunk(rng, unroll, num_envs, actor_id, state_size)
    frames = wire.encode(message)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(f"tcp://127.0.0.1:{port}")
    sock.send_multipart(wire.encode(wire.Register(
        run_id="default", actor_id=actor_id, instance_id=f"bench{actor_id}", num_envs=num_envs)))  # fmt: skip
    credits, seq, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        while credits == 0 or sock.poll(0):
            msg = wire.decode(sock.recv_multipart())
            if isinstance(msg, wire.Welcome | wire.Credit):
                credits += msg.credits
        sock.send_multipart(wire.with_seq(frames, seq), copy=False)  # each seq once, as an actor
        seq += 1
        credits -= 1
    sock.close(linger=0)
