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

import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from common import wire
from common.env_spec import EnvSpec
from common.metrics import LearnerMetrics
from common.model import ActorCritic, ModelSpec
from learner.ingest import Ingest, IngestSettings
from scripts.checkout import ROOT
from scripts.dev.bench.shared import arg_parser, raw_frames_per_s, send_chunks, summed_rate
from scripts.ports import free_ports

SPAWN = mp.get_context("spawn")
Condition = Callable[[], bool]


class Sink:
    """The learner's real Ingest, drained by a thread that counts and drops what it takes."""

    def __init__(self, unroll_length: int):
        self.port = free_ports(2)
        spec = ModelSpec()
        settings = IngestSettings(
            run_id="default",
            env_spec=EnvSpec(),
            model_spec=spec.to_wire(),
            unroll_length=unroll_length,
            credits_per_actor=4,
            queue_chunks=64,
            max_policy_lag=10**9,
            heartbeat_interval_s=1.0,
            actor_timeout_s=30.0,
        )
        self.ingest = Ingest(
            settings, LearnerMetrics(), lambda: 0, host="127.0.0.1", port=self.port
        )
        tensors = {k: v.numpy() for k, v in ActorCritic(spec).state_dict().items()}
        weights = wire.Weights(
            policy_version=0, env_frames=0, tensors=tensors, model_spec=spec.to_wire()
        )
        self.ingest.publish(wire.encode(weights))
        self.frames = self.bytes = 0
        self._stop = threading.Event()
        self.ingest.start()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            for c in self.ingest.take(64, timeout_s=0.05):
                self.frames += c.env_frames
                self.bytes += c.payload_bytes

    def rates(self, seconds: float, warm: Condition, alive: Condition) -> tuple[float, float]:
        """Env frames/s and payload bytes/s taken over `seconds`, from when `warm()` holds; an
        error when the feeders die first (not `alive()`) or do not warm up within 120 s."""
        deadline = time.monotonic() + 120
        while not warm():
            if time.monotonic() > deadline or not alive():
                raise RuntimeError("nothing streamed to the ingest")
            time.sleep(0.05)
        f0, b0, t0 = self.frames, self.bytes, time.perf_counter()
        time.sleep(seconds)
        dt = time.perf_counter() - t0
        return (self.frames - f0) / dt, (self.bytes - b0) / dt

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
    warm = procs * unroll * num_envs * 4 * 2  # frames: every actor streams
    try:
        return sink.rates(
            seconds, lambda: sink.frames >= warm, lambda: all(a.poll() is None for a in actors)
        )[0]
    finally:
        for a in actors:
            a.terminate()
        for a in actors:
            a.wait(10)
        sink.close()


def ingest_mb_per_s(seconds: float, unroll: int, num_envs: int, senders: int = 2) -> float:
    sink = Sink(unroll)
    stream = (unroll, num_envs, seconds + 3)
    ps = [SPAWN.Process(target=send_chunks, args=(sink.port, i, *stream)) for i in range(senders)]
    for p in ps:
        p.start()

    def alive() -> bool:
        return any(p.is_alive() for p in ps)

    try:
        sink.rates(1.0, lambda: sink.bytes > 0, alive)  # the senders import, register, warm up
        return sink.rates(seconds, lambda: True, alive)[1] / 1e6
    finally:
        for p in ps:
            p.join(30)
        sink.close()


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__)
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
        rounds = []  # per round: raw, raw with K emulators, then each lanes setting's actor
        for _ in range(args.rounds):
            raw = summed_rate(raw_frames_per_s, (args.seconds,), n)
            raw_k = summed_rate(raw_frames_per_s, (args.seconds, args.num_envs), n)
            frames = (args.seconds, args.num_envs, args.unroll_length)
            rounds.append([raw, raw_k] + [actor_frames_per_s(n, *frames, k) for k in lane_counts])
        r, r_k = statistics.median(x[0] for x in rounds), statistics.median(x[1] for x in rounds)
        k_ratio = statistics.median(x[1] / x[0] for x in rounds)
        out = results[f"procs_{n}"] = {
            "raw_frames_per_s": r,
            "raw_k_emulators_frames_per_s": r_k,
            "raw_k_over_raw": k_ratio,
        }
        print(
            f"{n} process(es): raw with {args.num_envs} emulators per process (as an actor holds "
            f"them) {r_k:7.0f} frames/s = {k_ratio:.3f} of raw with one",
            flush=True,
        )
        for i, lanes in enumerate(lane_counts, start=2):
            a = statistics.median(x[i] for x in rounds)
            eff = statistics.median(x[i] / x[0] for x in rounds)  # ratio within each round
            out[f"lanes_{lanes}"] = {"actor_frames_per_s": a, "efficiency": eff}
            print(
                f"{n} process(es), {lanes} lane(s): raw {r:7.0f} frames/s | actors {a:7.0f} frames/s"
                f" | efficiency {eff:.3f} (median of {args.rounds} paired rounds; target >= 0.90)",
                flush=True,
            )
    mbps = ingest_mb_per_s(args.seconds, args.unroll_length, args.num_envs)
    payload = (args.unroll_length + 5) * args.num_envs * 84 * 84 / 1e6  # frames and finals
    print(
        f"learner ingest: {mbps:7.0f} MB/s of chunk payload (~{payload:.2f} MB chunks, 2 senders) (target >= 400)"
    )
    print(json.dumps({"bench": "pipeline", **results, "ingest_mb_per_s": mbps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
