"""The broadcast benchmark measures a real learner publishing to real SUB sockets: every socket
receives the weights, and the bytes per publish are the encoded model's."""

from __future__ import annotations

import json

import pytest

from common.model import ActorCritic
from learner.config import LearnerConfig
from scripts.dev.bench import broadcast
from scripts.dev.chaos import netns


@pytest.mark.slow
@pytest.mark.rehearsal
@pytest.mark.parametrize(
    "bridge",
    [False, pytest.param(True, marks=pytest.mark.alone)],  # the bridge: network namespaces
    ids=["loopback", "bridge"],
)
def test_every_subscriber_gets_the_weights_and_the_costs_are_counted(bridge, capsys):
    if bridge and (why := netns.unavailable()):
        pytest.skip(f"no network namespaces here: {why}")
    argv = ["--subscribers", "3", "--seconds", "3", "--rounds", "1"] + (
        ["--bridge"] if bridge else []
    )
    assert broadcast.main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line[:1] == "{"]
    assert [r["subscribers"] for r in rows] == [0, 3]
    params = sum(p.numel() for p in ActorCritic(LearnerConfig().model_spec()).state_dict().values())
    for row in rows:
        assert row["publishes_per_s"] > 0 and row["bytes_per_publish"] >= 4 * params
        assert 0 <= row["share"] < 1 and row["learner_cpu_per_s"] > 0
    three = rows[1]
    assert three["min_per_socket"] >= 1  # each socket received weights inside the window
    assert three["delivered_mb_per_s"] > 0 and three["spread_ms_p50"] is not None
