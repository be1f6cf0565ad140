"""Time PrioritizedReplay add / sample / update_priorities against capacity.

Each stored sequence is a reduced rollout of T steps: frames uint8 [T+4, H, W] (--frames-shape;
the learner stores [T+4, 84, 84]) and T actions, rewards, dones and behaviour logits (`make_batch`).
The default 24,12,12 is about 4.3 KB per sequence, so 1M sequences fit in ~4.3 GB of RAM.
The buffer is filled to capacity before timing, so sample() draws over every slot and add()
overwrites, as in steady state. add() is timed from a host batch (rollouts arrive over the
network on the host); on CUDA that includes the host-to-device copy. --device auto times the
CPU, and CUDA too when there is one.

    python -m scripts.dev.bench.replay --capacities 1000,100000 --device cuda
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import timeit
from collections.abc import Callable

import torch

from learner.replay import PrioritizedReplay, ReplayCapacityError, check_fits, estimate_bytes
from scripts.dev.bench.shared import arg_parser, sync

NUM_ACTIONS = 7  # SIMPLE_MOVEMENT
FRAME_STACK = 4


def int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arg_parser(__doc__)
    parser.add_argument("--frames-shape", type=int_list, default=[24, 12, 12], help="T+4,H,W")
    parser.add_argument("--batch", type=int, default=32, help="sequences per sample() call")
    parser.add_argument("--add-batch", type=int, default=16, help="sequences per add() call")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--capacities", type=int_list, default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--iters", type=int, default=50, help="timed calls per operation")
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--beta", type=float, default=0.4)
    args = parser.parse_args(argv)
    if len(args.frames_shape) != 3 or args.frames_shape[0] <= FRAME_STACK:
        parser.error(f"--frames-shape must be T+4,H,W with T >= 1, got {args.frames_shape}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available; use --device cpu")
    return args


def make_batch(n: int, frames_shape: list[int]) -> dict[str, torch.Tensor]:
    steps = frames_shape[0] - FRAME_STACK
    return {
        "frames": torch.randint(0, 256, (n, *frames_shape), dtype=torch.uint8),  # [N, T+4, H, W]
        "action": torch.randint(0, NUM_ACTIONS, (n, steps)),  # [N, T]
        "reward": torch.randn(n, steps),  # [N, T]
        "done": torch.rand(n, steps) < 0.01,  # [N, T]
        "behaviour_logits": torch.randn(n, steps, NUM_ACTIONS),  # [N, T, A]
    }


def timed(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 3) -> float:
    """Median seconds per call, the device synchronised after every call (so before each too)."""

    def call() -> None:
        fn()
        sync(device)

    for _ in range(warmup):
        call()
    return statistics.median(timeit.repeat(call, number=1, repeat=iters))


def bench_one(args: argparse.Namespace, capacity: int, device: torch.device) -> dict:
    """Fill a buffer of `capacity` to the brim, then time add(), sample() and
    update_priorities() on it; skipped when it does not fit in free memory."""
    gc.collect()  # the previous buffer's memory back to the device before check_fits reads it
    if device.type == "cuda":
        torch.cuda.empty_cache()
    fill_batch = make_batch(min(capacity, 4096), args.frames_shape)
    storage_bytes = estimate_bytes({k: v[0] for k, v in fill_batch.items()}, capacity)
    row = {"capacity": capacity, "device": str(device), "storage_bytes": storage_bytes}
    try:
        check_fits(storage_bytes, device, capacity=capacity)
    except ReplayCapacityError as error:
        return row | {"skipped": str(error)}
    replay = PrioritizedReplay(capacity, alpha=args.alpha, beta=args.beta, device=device)
    fill_batch = {key: value.to(device) for key, value in fill_batch.items()}
    start = time.perf_counter()
    while replay.size < capacity:
        replay.add(fill_batch, priorities=torch.rand(len(fill_batch["frames"]), device=device))
    sync(device)
    fill_s = time.perf_counter() - start
    add_batch = make_batch(args.add_batch, args.frames_shape)  # on the host
    add_s = timed(lambda: replay.add(add_batch), device, args.iters)
    sample = replay.sample(args.batch)
    sample_s = timed(lambda: replay.sample(args.batch), device, args.iters)
    priorities = torch.rand(args.batch, device=device)
    update_s = timed(
        lambda: replay.update_priorities(sample.indices, priorities), device, args.iters
    )
    return row | {
        "fill_s": round(fill_s, 3),
        "add_us_per_seq": round(add_s / args.add_batch * 1e6, 2),
        "sample_ms_per_batch": round(sample_s * 1e3, 3),
        "update_ms_per_batch": round(update_s * 1e3, 3),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    devices = [torch.device("cpu" if args.device == "auto" else args.device)]
    if args.device == "auto" and torch.cuda.is_available():
        devices.append(torch.device("cuda", torch.cuda.current_device()))
    print(
        f"frames {args.frames_shape} uint8, sample batch {args.batch}, add batch {args.add_batch}"
    )
    print(
        f"{'capacity':>10} {'device':>7} {'GiB':>6} {'add us/seq':>11} {'sample ms':>10} {'update ms':>10}"
    )
    results = []
    for device in devices:
        for capacity in args.capacities:
            row = bench_one(args, capacity, device)
            results.append(row)
            print(f"{capacity:>10} {device.type:>7} {row['storage_bytes'] / 2**30:>6.2f}", end=" ")
            if "skipped" in row:
                print(" skipped: does not fit in free memory")
                continue
            print(
                f"{row['add_us_per_seq']:>11.2f} {row['sample_ms_per_batch']:>10.3f} {row['update_ms_per_batch']:>10.3f}"
            )
    summary = {"bench": "replay", "torch": torch.__version__, "frames_shape": args.frames_shape}
    summary |= {"batch": args.batch, "add_batch": args.add_batch, "alpha": args.alpha}
    print(json.dumps(summary | {"results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
