"""How fast the learner trains, and whether ingest keeps its device busy (`make bench`).

Two measurements, each for every combination of the --archs, --cores, --precisions,
--batch-chunks and --threads given:

- update: the learner's own per-update work, built by `learner.loop.build_training` from the
  learner config: collate B host chunks onto the device, mix in replay, the V-trace update
  (stack rebuild, forward, backward, clipping, Adam), replay priority write-back. Synthetic chunks
  of K envs x T steps at 84x84; replay filled past its minimum first, so batches are mixed as in
  steady state. Reported per update and as the env frames/s of fresh data the learner can consume
  (fresh agent steps x frame skip 4 / s): divide by one actor process's frames/s to see how many
  actor cores one learner keeps up with.
- e2e (--e2e): a real `python -m learner` process fed over loopback by sender processes that
  stream the same synthetic chunk under the credit protocol. Read from its /metrics: updates/s,
  the share of the train loop spent waiting for data, and (on a GPU) NVML utilisation. e2e ÷
  update updates/s near 1 means ingest runs beside training instead of in front of it.

--threads 1,2 times the update with each torch thread count; --beside-emulators N does so while a
second process steps N Mario emulators in threads, as the actor beside a CPU learner does in
`make train` (the thread count that wins alone can lose there).

    python -m scripts.dev.bench.learner --device cuda --archs small,nature,resnet --batch-chunks 2,8,32 --e2e
    python -m scripts.dev.bench.learner --device cuda --archs small,resnet --cores none,lstm --precisions fp32,bf16
    python -m scripts.dev.bench.learner --device cpu --batch-chunks 8 --threads 1,2 --beside-emulators 4
"""

from __future__ import annotations

import json
import multiprocessing as mp
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from itertools import product
from multiprocessing.synchronize import Event as EventType

import numpy as np
import torch

from common import status
from learner.batching import collate, to_host
from learner.config import LearnerConfig
from learner.loop import build_training, training_device
from scripts.checkout import ROOT
from scripts.dev.bench.shared import arg_parser, send_chunks, sync, synthetic_chunk
from scripts.ports import free_ports

SPAWN = mp.get_context("spawn")
FRAME_SKIP = 4


def time_updates(
    cfg: LearnerConfig, num_envs: int, device: torch.device, iters: int, repeats: int
) -> dict:
    """Median seconds per update over `repeats` timed runs of `iters` updates each."""
    torch.manual_seed(0)
    learner, mixer = build_training(cfg, device)
    rng = np.random.default_rng(0)
    b = cfg.batch_size().max_chunks
    C = cfg.model_spec().state_size
    chunks = [synthetic_chunk(rng, cfg.unroll_length, num_envs, 0, C) for _ in range(2 * b)]
    pool = [to_host(c, FRAME_SKIP, device.type == "cuda") for c in chunks]

    def one(i: int) -> int:
        """One update; the sequences it trained on."""
        batch = collate([pool[(i + j) % len(pool)] for j in range(b)], device)
        mixed = mixer.mix(batch, learner.updates) if mixer is not None else None
        batch = mixed.batch if mixed is not None else batch
        stats = learner.step(batch)
        if mixed is not None:
            mixer.after_update(mixed, stats.priorities)
        return batch.num_sequences

    fresh = b * num_envs
    warm = 5 + (mixer.min_size // fresh + 1 if mixer is not None else 0)
    for i in range(warm):  # cuDNN autotuning, allocator warm-up, replay past its minimum
        one(i)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    skipped, times = mixer.skipped if mixer is not None else 0, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(iters):
            sequences = one(i)
        sync(device)
        times.append((time.perf_counter() - t0) / iters)
    sec = statistics.median(times)
    out = {
        "ms_per_update": round(sec * 1e3, 3),
        "updates_per_s": round(1 / sec, 1),
        "sequences_per_update": sequences,  # of the last timed update
        "fresh_env_frames_per_s": round(fresh * cfg.unroll_length * FRAME_SKIP / sec),
    }  # fmt: skip
    if mixer is not None:
        out["replay_skipped_in_timed_updates"] = mixer.skipped - skipped
    if device.type == "cuda":
        out["peak_gpu_mem_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20)
    return out


def next_update(
    url: str, proc: subprocess.Popen, timeout_s: float = 60, poll_s: float = 0.02
) -> tuple[dict[str, float], float]:
    """The learner's /metrics just after its next update ends, and when they were read."""
    first = status.scrape(url).get("mario_learner_updates_total", 0)
    deadline = time.monotonic() + timeout_s
    while (now := status.scrape(url)).get("mario_learner_updates_total", 0) == first:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"the learner made no update in {timeout_s:.0f} s")
        time.sleep(poll_s)
    return now, time.perf_counter()


def e2e(cfg: LearnerConfig, num_envs: int, device: str, senders: int, seconds: float) -> dict:
    """A real learner process fed by `senders` processes; figures from its /metrics."""
    port, mport = free_ports(2), free_ports()
    url = f"http://127.0.0.1:{mport}/metrics"
    with tempfile.TemporaryDirectory() as run_dir:
        argv = [sys.executable, "-m", "learner", "--run-dir", run_dir, "--device", device,
                "--port", str(port), "--metrics-port", str(mport), "--arch", cfg.arch,
                "--core", cfg.core, "--precision", cfg.precision,
                "--batch-chunks", str(cfg.batch_chunks), "--unroll-length", str(cfg.unroll_length),
                "--max-policy-lag", str(10**9), "--checkpoint-interval-s", "100000",
                "--log-level", "WARNING"]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=ROOT)
        # what each sender streams, how long
        chunks = (cfg.unroll_length, num_envs, seconds + 60, cfg.model_spec().state_size)
        ps = [SPAWN.Process(target=send_chunks, args=(port, i, *chunks)) for i in range(senders)]
        try:
            for p in ps:
                p.start()
            # warm up for 30 updates; a loaded host only slows it: give up on no update in 120 s
            seen, last = 0.0, time.monotonic()
            while (n := status.scrape(url).get("mario_learner_updates_total", 0)) < 30:
                if n > seen:
                    seen, last = n, time.monotonic()
                if time.monotonic() - last > 120 or proc.poll() is not None:
                    raise RuntimeError(f"learner did not train ({seen:.0f} updates, then none)")
                time.sleep(0.5)
            # the window opens and closes as an update ends: the loop's wait and compute seconds
            # are counted per update, so any other window leaves part of one out
            before, t0 = next_update(url, proc)
            util = []
            while time.perf_counter() - t0 < seconds:
                time.sleep(1.0)
                util.append(status.gpu_utilization(status.scrape(url)))
            after, t1 = next_update(url, proc)
            dt = t1 - t0
        finally:
            proc.terminate()
            proc.wait(30)
            for p in ps:
                p.kill()
                p.join(10)

    def rate(name: str) -> float:
        return (after.get(name, 0.0) - before.get(name, 0.0)) / dt

    out = {
        "updates_per_s": round(rate("mario_learner_updates_total"), 1),
        "wait_share": round(rate("mario_learner_wait_seconds_total"), 3),
        "compute_share": round(rate("mario_learner_compute_seconds_total"), 3),
        "fresh_env_frames_per_s": round(rate("mario_learner_env_frames_total")),
    }
    if util := [u for u in util if u is not None]:
        out["gpu_utilization_mean"] = round(statistics.mean(util), 3)
    return out


def step_emulators(n: int, ready: EventType) -> None:
    """Step `n` Mario envs, each in its own thread (nes-py releases the GIL), until killed."""
    from common.env import FrameEnv, build_envs
    from common.env_spec import EnvSpec

    def play(env: FrameEnv, seed: int) -> None:
        rng = np.random.default_rng(seed)
        while True:
            if env.step(int(rng.integers(env.num_actions))).episode is not None:
                env.reset()

    for i, env in enumerate(build_envs(EnvSpec(), n)):
        threading.Thread(target=play, args=(env, i), daemon=True).start()
    ready.set()
    threading.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--archs", default="small", help="comma-separated: small,nature,resnet")
    parser.add_argument("--cores", default="none", help="comma-separated: none,lstm,gru")
    parser.add_argument("--precisions", default="fp32", help="comma-separated: fp32,bf16")
    parser.add_argument("--batch-chunks", default="2", help="comma-separated chunks per update")
    parser.add_argument("--num-envs", type=int, default=4, help="envs per chunk (K)")
    parser.add_argument("--unroll-length", type=int, default=32, help="T")
    parser.add_argument("--iters", type=int, default=10, help="updates per timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is kept")
    parser.add_argument("--e2e", action="store_true", help="also run a real learner process")
    parser.add_argument("--senders", type=int, default=2, help="sender processes for --e2e")
    parser.add_argument("--seconds", type=float, default=10.0, help="--e2e measurement window")
    parser.add_argument("--threads", default="0", help="comma-separated; 0: torch's default")
    parser.add_argument("--beside-emulators", type=int, default=0, help="N (see above); 0: none")
    args = parser.parse_args(argv)
    if args.beside_emulators:  # a daemon: ended when this process exits
        ready = SPAWN.Event()
        SPAWN.Process(
            target=step_emulators, args=(args.beside_emulators, ready), daemon=True
        ).start()
        if not ready.wait(120):
            raise SystemExit("bench_learner: the emulator process did not start")
    device = training_device(args.device)  # cuDNN set up as the learner sets it
    default_threads = torch.get_num_threads()
    settings = product(
        args.archs.split(","),
        args.cores.split(","),
        args.precisions.split(","),
        args.batch_chunks.split(","),
        args.threads.split(","),
    )
    # a row each: the update, the e2e learner
    for arch, core, precision, b, threads in settings:
        torch.set_num_threads(int(threads) or default_threads)
        cfg = LearnerConfig(
            arch=arch,
            core=core,
            precision=precision,
            batch_chunks=b,  # N: pinned
            unroll_length=args.unroll_length,
        )
        row = {"arch": arch, "core": core, "precision": precision}
        row |= {"batch_chunks": cfg.batch_size().max_chunks, "device": str(device)}
        row |= {"torch_threads": torch.get_num_threads(), "beside_emulators": args.beside_emulators}
        row["update"] = time_updates(cfg, args.num_envs, device, args.iters, args.repeats)
        if args.e2e:
            row["e2e"] = e2e(cfg, args.num_envs, str(device), args.senders, args.seconds)
            e2e_rate = row["e2e"]["updates_per_s"]
            row["e2e_over_update"] = round(e2e_rate / row["update"]["updates_per_s"], 3)
        print(json.dumps(row), flush=True)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    info = {"machine": platform.processor() or platform.machine(), "gpu": gpu}
    print(json.dumps(info | {"torch": torch.__version__, "threads": torch.get_num_threads()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
