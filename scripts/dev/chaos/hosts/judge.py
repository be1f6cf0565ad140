"""The rehearsal's verdict: every check against docs/RELIABILITY.md's targets ("Across hosts"),
read from the summary."""

from __future__ import annotations

import math
from typing import Any

from scripts.dev.chaos.hosts.schedule import KINDS
from scripts.dev.chaos.soak.judge import (
    MEMORY_SLOPE_MIB_PER_MIN,
    Check,
    memory_check,
)

STREAMING_AGAIN_S = 5.0  # after a link returns, or the restarted learner serves
FRESH_WEIGHTS_S = 5.0  # after the broadcast path returns
MEMORY_MIN_MINUTES_HOSTS = 10.0  # shorter rehearsals report the memory slopes without judging them
# Shorter rehearsals judge that a dead host is forgotten, not how soon: their 4 s actor timeout
# leaves no room for the second or two a loaded 2-core box's learner may take to read the dead
# actors' last messages (measured: 6.5-7.5 s against 6 on the dev VM)
FORGET_BOUND_MIN_MINUTES = 10.0


def _most(values: list[float]) -> float | None:
    return max(values) if values else None


def _shown(value: float | None) -> str:
    return "none" if value is None else ("never" if math.isinf(value) else f"{value:.2f}")


def _per_actor(fault: dict[str, Any], key: str) -> list[float]:
    """The figure of every actor the fault struck; one never measured counts as never."""
    measured = fault[key]
    return [measured.get(a, math.inf) for a in fault.get("actors", measured)]


def judge(s: dict[str, Any]) -> list[dict[str, Any]]:
    """[{check, value, target, ok}] for the summary's figures."""
    faults = s["faults"]
    by_kind = {k: [f for f in faults if f["kind"] == k] for k in KINDS}
    actor_side = [f for k in ("partition", "host_death", "broadcast_block") for f in by_kind[k]]
    cuts = by_kind["partition"] + by_kind["learner_link"]
    held = _most([f["most_chunks_held"] for f in cuts])
    again = _most([v for f in cuts for v in _per_actor(f, "streaming_again_s")])
    restarted = _most([v for f in by_kind["learner_kill"]
                       for v in _per_actor(f, "streaming_again_s")])  # fmt: skip
    fresh = _most([v for f in by_kind["broadcast_block"]
                   for v in _per_actor(f, "within_lag_limit_after_s")])  # fmt: skip
    forget_bound = s["actor_timeout_s"] + s["heartbeat_interval_s"] + 1.0  # + a scrape's delay
    forgotten = _most([f["forgotten_after_s"] for f in by_kind["host_death"]
                       if f["forgotten_after_s"] is not None])  # fmt: skip
    quiet = [f"{f['kind']} at {f['at_s']} s" for f in actor_side if not f["updates_during"]]
    chunks = s["chunks"]
    minutes = s["duration_s"] / 60
    memory_judged = minutes >= MEMORY_MIN_MINUTES_HOSTS
    bound_judged = minutes >= FORGET_BOUND_MIN_MINUTES
    prom = s["prometheus"]
    never_up = [t for t, v in prom["targets_ever_up"].items() if v < 1]
    unseen = [p["host"] for p in prom["partitions_seen"]
              if not p["up_min"] or any(v > 0 for v in p["up_min"].values())]  # fmt: skip
    missing = [k for k in KINDS if not by_kind[k]]
    checks = {
        "every kind of fault struck at least once": Check(
            ", ".join(f"{k} {len(v)}" for k, v in by_kind.items()), "each >= 1", not missing
        ),
        "learner updates during every actor-side fault": Check(
            f"{len(actor_side) - len(quiet)} of {len(actor_side)}"
            + (f" (none: {quiet})" if quiet else ""),
            "all",
            bool(actor_side) and not quiet,
        ),  # fmt: skip
        f"chunks a cut-off actor made and held, per lane ({s['lanes']} lane(s))": Check(
            None if held is None else round(held / s["lanes"], 2),
            "<= 1",
            held is not None and held <= s["lanes"],
        ),  # fmt: skip
        "cut-off actors streaming again after the link returns, slowest, s": Check(
            _shown(again),
            f"<= {STREAMING_AGAIN_S}",
            again is not None and again <= STREAMING_AGAIN_S,
        ),  # fmt: skip
        "a dead host's actors and credits forgotten by the learner, slowest, s": Check(
            _shown(forgotten),
            f"<= {forget_bound:g} (actor timeout + a heartbeat + a scrape)"
            + (
                ""
                if bound_judged
                else f"; judged from {FORGET_BOUND_MIN_MINUTES:g} min, shorter: forgotten"
            ),
            forgotten is not None
            and math.isfinite(forgotten)
            and (forgotten <= forget_bound or not bound_judged),
        ),  # fmt: skip
        "actors within the lag limit after the broadcast path returns, slowest, s": Check(
            _shown(fresh), f"<= {FRESH_WEIGHTS_S}", fresh is not None and fresh <= FRESH_WEIGHTS_S
        ),
        "actors streaming again after a learner restart, slowest, s": Check(
            _shown(restarted),
            f"<= {STREAMING_AGAIN_S}",
            restarted is not None and restarted <= STREAMING_AGAIN_S,
        ),  # fmt: skip
        "chunks that arrived twice (the learner drops and counts them)": Check(
            chunks["duplicate_chunks"], "0", chunks["duplicate_chunks"] == 0
        ),
        "hangs (no update for 60 s)": Check(s["hangs"], "0", s["hangs"] == 0),
        **{
            f"{role} resident memory slope (± 2 SE) after warm-up, MiB/min": memory_check(
                slope,
                s.get("memory_slope_se_mib_per_min", {}).get(role),
                f"< {MEMORY_SLOPE_MIB_PER_MIN}, less 2 SE"
                + ("" if memory_judged else f" (judged from {MEMORY_MIN_MINUTES_HOSTS:g} min)"),
                memory_judged,
            )  # fmt: skip
            for role, slope in s["memory_slope_mib_per_min"].items()
        },
        "exits not caused by the rehearsal": Check(len(s["crashes"]), "0", not s["crashes"]),
        "Prometheus targets never scraped": Check(
            f"{len(never_up)} of {len(prom['targets_ever_up'])}"
            + (f": {never_up}" if never_up else ""),
            "0, of every host's",
            bool(prom["targets_ever_up"]) and not never_up,
        ),  # fmt: skip
        "partitions Prometheus did not see (the host's targets down)": Check(
            f"{len(unseen)} of {len(prom['partitions_seen'])}", "0", not unseen
        ),
    }
    return [{"check": name, **check._asdict()} for name, check in checks.items()]
