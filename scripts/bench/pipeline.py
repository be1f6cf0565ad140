"""Pipeline benchmarks, side by side in one run (`make bench`):

- actor efficiency: env frames/s of N actor processes (streaming real chunks to a learner-side
  sink over loopback) / raw nes-py frames/s of N processes, N = 1 and 2. Target >= 0.90.
- learner ingest: chunk payload MB/s that the learner's real ingest (decode, validate, copy to
  host tensors, queue) accepts from 2 sender processes over loopback. Target >= 400 MB/s.
Raw and actor runs alternate round by round so machine noise hits both alike. Each round also
times raw processes that each hold as many emulators as an actor has envs: the part of the gap
that holding K emulators costs by itself, before any policy or IO.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import wire
from common.metrics import LearnerMetrics
from common.model import ActorCritic, ModelSpec
from learner.ingest import Ingest, IngestSettings
from scripts.bench.shared import raw_frames_per_s, send_chunks, summed_rate
from scripts.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]


# ---- learner-side sink -------------------------------------------------------------------


class Sink:
    """The learner's real Ingest, drained by a thread that counts and drops what it takes."""

    def __init__(self, unroll_length: int, queue_chunks: int = 64):
        self.port = free_ports(2)
        spec = ModelSpec()
        settings = IngestSettings(
            run_id="default",
            env_spec={"action_set": "simple", "frame_size": 84},
            model_spec=spec.to_wire(),
            unroll_length=unroll_length,
            credits_per_actor=4,
            queue_chunks=queue_chunks,
            max_policy_lag=10**9,
            heartbeat_interval_s=1.0,
            actor_timeout_s=30.0,
        )
        self.ingest = Ingest(
            settings, LearnerMetrics(), lambda: 0, host="127.0.0.1", port=self.port
        )
        model = ActorCritic(spec)
        tensors = {k: v.numpy() for k, v in model.state_dict().items()}
        self.ingest.publish(
            wire.encode(wire.Weights(policy_version=0, tensors=tensors, model_spec=spec.to_wire()))
        )
        self.frames = 0
        self.bytes = 0
        self._stop = threading.Event()
        self.ingest.start()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            for c in self.ingest.take(64, timeout_s=0.05):
                self.frames += c.env_frames
                self.bytes += c.payload_bytes

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.ingest.stop()


def actor_frames_per_s(procs: int, seconds: float, num_envs: int, unroll: int, lanes: int) -> float:
    sink = Sink(unroll)
    argv = [sys.executable, "-m", "actor", "--learner", f"127.0.0.1:{sink.port}",
            "--num-envs", str(num_envs), "--lanes", str(lanes),
            "--log-level", "WARNING"]  # fmt: skip
    actors = [subprocess.Popen([*argv, "--actor-id", str(i)], cwd=ROOT) for i in range(procs)]
    try:
        deadline = time.monotonic() + 120
        while sink.frames < procs * unroll * num_envs * 4 * 2:  # warm: every actor streaming
            if time.monotonic() > deadline or any(a.poll() is not None for a in actors):
                raise RuntimeError("actors did not start streaming")
            time.sleep(0.1)
        f0, t0 = sink.frames, time.perf_counter()
        time.sleep(seconds)
        return (sink.frames - f0) / (time.perf_counter() - t0)
    finally:
        for a in actors:
            a.terminate()
        for a in actors:
            a.wait(10)
        sink.close()


# ---- ingest throughput -------------------------------------------------------------------


def ingest_mb_per_s(seconds: float, unroll: int, num_envs: int, senders: int = 2) -> float:
    sink = Sink(unroll)
    ctx = mp.get_context("spawn")
    ps = [
        ctx.Process(target=send_chunks, args=(sink.port, i, unroll, num_envs, seconds + 3))
        for i in range(senders)
    ]
    for p in ps:
        p.start()
    try:
        deadline = time.monotonic() + 60
        while sink.bytes == 0:  # the senders import, register and stream
            if time.monotonic() > deadline or not any(p.is_alive() for p in ps):
                raise RuntimeError("no sender streamed chunks to the ingest within 60 s")
            time.sleep(0.05)
        time.sleep(1.0)  # warm up
        b0, t0 = sink.bytes, time.perf_counter()
        time.sleep(seconds)
        return (sink.bytes - b0) / (time.perf_counter() - t0) / 1e6
    finally:
        for p in ps:
            p.join(30)
        sink.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating raw/actor rounds")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per run")
    parser.add_argument("--procs", default="1,2", help="process counts to compare")
    parser.add_argument("--num-envs", type=int, default=4, help="envs per actor")
    parser.add_argument("--lanes", default="1,2", help="actor --lanes settings to compare")
    parser.add_argument("--unroll-length", type=int, default=32, help="T")
    args = parser.parse_args(argv)
    results = {}
    lane_counts = [int(x) for x in args.lanes.split(",")]
    for n in [int(x) for x in args.procs.split(",")]:
        rounds = []  # per round: raw, raw with K emulators, each lanes setting's actor frames/s
        for _ in range(args.rounds):
            raw = summed_rate(raw_frames_per_s, (args.seconds,), n)
            raw_k = summed_rate(raw_frames_per_s, (args.seconds, args.num_envs), n)
            act = [
                actor_frames_per_s(n, args.seconds, args.num_envs, args.unroll_length, k)
                for k in lane_counts
            ]
            rounds.append((raw, act, raw_k))
        r = statistics.median(x[0] for x in rounds)
        r_k = statistics.median(x[2] for x in rounds)
        k_ratio = statistics.median(x[2] / x[0] for x in rounds)
        results[f"procs_{n}"] = {
            "raw_frames_per_s": r,
            "raw_k_emulators_frames_per_s": r_k,
            "raw_k_over_raw": k_ratio,
        }
        print(
            f"{n} process(es): raw with {args.num_envs} emulators per process (as an actor holds "
            f"them) {r_k:7.0f} frames/s = {k_ratio:.3f} of raw with one",
            flush=True,
        )
        for i, lanes in enumerate(lane_counts):
            a = statistics.median(x[1][i] for x in rounds)
            eff = statistics.median(x[1][i] / x[0] for x in rounds)  # ratio within each round
            results[f"procs_{n}"][f"lanes_{lanes}"] = {"actor_frames_per_s": a, "efficiency": eff}
            print(
                f"{n} process(es), {lanes} lane(s): raw {r:7.0f} frames/s | actors {a:7.0f} frames/s"
                f" | efficiency {eff:.3f} (median of {args.rounds} paired rounds; target >= 0.90)",
                flush=True,
            )
    mbps = ingest_mb_per_s(args.seconds, args.unroll_length, args.num_envs)
    payload = (args.unroll_length + 5) * args.num_envs * 84 * 84 / 1e6  # frames and finals
    print(
        f"learner ingest: {mbps:7.0f} MB/s of chunk payload (~{payload:.2f} MB chunks, 2 senders) "
        f"(target >= 400)"
    )
    results["ingest_mb_per_s"] = mbps
    print(json.dumps({"bench": "pipeline", **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
