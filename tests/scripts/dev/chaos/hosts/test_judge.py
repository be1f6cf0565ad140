"""The rehearsal's verdict on summaries made up to pass, and then to fail one target each."""

from __future__ import annotations

import copy
import math

import pytest

from scripts.dev.chaos.hosts.judge import judge


def cut(kind: str, held: float, again: dict[str, float]) -> dict:
    return {"kind": kind, "host": "actors-a", "at_s": 10.0, "updates_during": 3,
            "most_chunks_held": held, "streaming_again_s": again}  # fmt: skip


PASSING = {
    "duration_s": 1200.0, "lanes": 1, "actor_timeout_s": 15.0, "heartbeat_interval_s": 1.0,
    "faults": [
        cut("partition", 0.9, {"actor-0": 0.8, "actor-1": 1.1}),
        cut("learner_link", 0.5, {f"actor-{i}": 0.9 for i in range(4)}),
        {"kind": "host_death", "at_s": 80.0, "updates_during": 5, "forgotten_after_s": 15.8},
        {"kind": "broadcast_block", "at_s": 150.0, "updates_during": 6,
         "within_lag_limit_after_s": {"actor-0": 0.0}},
        {"kind": "learner_kill", "at_s": 200.0, "updates_during": 0,
         "streaming_again_s": {"actor-0": 0.3}},
    ],
    "chunks": {"duplicate_chunks": 0}, "hangs": 0, "crashes": [],
    "memory_slope_mib_per_min": {"learner": 0.2, "actor": -0.1},
    "memory_slope_se_mib_per_min": {"learner": 0.1, "actor": 0.05},
    "prometheus": {"targets_ever_up": {"mario-learner 10.0.0.2:9000": 1.0},
                   "partitions_seen": [{"host": "actors-a", "up_min": {"10.0.0.3:9100": 0.0}}]},
}  # fmt: skip


def verdict(summary: dict) -> dict[str, bool | None]:
    return {c["check"]: c["ok"] for c in judge(summary)}


def test_a_summary_within_every_target_passes():
    assert all(ok is not False for ok in verdict(PASSING).values())


@pytest.mark.parametrize(
    "change, failing",
    [
        (lambda s: s["faults"][0].update(most_chunks_held=1.3), "chunks a cut-off actor made"),
        (lambda s: s["faults"][1]["streaming_again_s"].update({"actor-2": 6.0}), "link returns"),
        (
            lambda s: s["faults"][0]["streaming_again_s"].update({"actor-0": math.inf}),
            "link returns",
        ),
        (lambda s: s["faults"][2].update(forgotten_after_s=18.0), "a dead host's actors"),
        (lambda s: s["faults"][2].update(updates_during=0), "learner updates during"),
        (lambda s: s["faults"][3]["within_lag_limit_after_s"].update({"a": 7.0}), "lag limit"),
        (lambda s: s["faults"][4]["streaming_again_s"].update({"a": 5.5}), "learner restart"),
        (lambda s: s["chunks"].update(duplicate_chunks=1), "arrived twice"),
        (lambda s: s["memory_slope_mib_per_min"].update(actor=1.5), "actor resident memory"),
        (lambda s: s["crashes"].append("eval exited 1"), "exits not caused"),
        (lambda s: s["prometheus"]["targets_ever_up"].update({"x": 0.0}), "never scraped"),
        (
            lambda s: s["prometheus"]["partitions_seen"][0]["up_min"].update({"y": 1.0}),
            "did not see",
        ),
    ],
)
def test_each_target_missed_fails_its_own_check(change, failing):
    summary = copy.deepcopy(PASSING)
    change(summary)
    failed = [name for name, ok in verdict(summary).items() if ok is False]
    assert len(failed) == 1 and failing in failed[0], failed


def test_a_kind_of_fault_that_never_struck_fails_and_so_does_its_unmeasured_target():
    summary = copy.deepcopy(PASSING)
    summary["faults"].pop(3)  # no broadcast block
    failed = [name for name, ok in verdict(summary).items() if ok is False]
    assert sorted(failed) == [
        "actors within the lag limit after the broadcast path returns, slowest, s",
        "every kind of fault struck at least once",
    ]


def test_memory_is_reported_not_judged_in_a_short_run():
    summary = copy.deepcopy(PASSING) | {"duration_s": 120.0}
    summary["memory_slope_mib_per_min"] = {"learner": 9.0}
    assert verdict(summary)["learner resident memory slope (± 2 SE) after warm-up, MiB/min"] is None


def test_an_actor_a_fault_struck_but_never_measured_fails_its_check():
    summary = copy.deepcopy(PASSING)
    summary["faults"][0]["actors"] = ["actor-0", "actor-1", "actor-2"]  # actor-2: no figure
    failed = [name for name, ok in verdict(summary).items() if ok is False]
    assert failed == ["cut-off actors streaming again after the link returns, slowest, s"]


def test_a_short_rehearsal_judges_that_a_dead_host_is_forgotten_not_how_soon():
    short = copy.deepcopy(PASSING) | {"duration_s": 120.0, "actor_timeout_s": 4.0}
    short["faults"][2]["forgotten_after_s"] = 7.1  # over 4 + 1 + 1 s, on a loaded box
    assert verdict(short)["a dead host's actors and credits forgotten by the learner, slowest, s"]
    short["faults"][2]["forgotten_after_s"] = math.inf  # never forgotten
    failed = [name for name, ok in verdict(short).items() if ok is False]
    assert failed == ["a dead host's actors and credits forgotten by the learner, slowest, s"]
    short["faults"][2]["forgotten_after_s"] = None  # never measured
    assert not verdict(short)[
        "a dead host's actors and credits forgotten by the learner, slowest, s"
    ]
