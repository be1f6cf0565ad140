"""An actor on another host, cut off by a partition (its link down: no FIN, no RST, packets
vanish), or with only the weight broadcast cut, with real processes in network namespaces
(scripts/dev/chaos/netns.py).

While cut off it stops stepping once its credits are spent, holding at most the chunk it was
filling; when the link returns it streams again, and the chunks it made with weights that went
stale meanwhile are dropped as stale, never trained on, while the learner trained on another
host's chunks all along."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scripts.dev.chaos import netns
from tests import procs

WHY = netns.unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.rehearsal,
    pytest.mark.integration,
    pytest.mark.alone,  # network namespaces: the machine's, compared before and after
    pytest.mark.skipif(WHY is not None, reason=f"no network namespaces here: {WHY}"),
]

MAX_LAG = 4
UNROLL, ENVS, CREDITS = 16, 2, 2
STALE = "mario_learner_chunks_total{result=stale}"


def scrape_in(host: netns.Host, port: int) -> dict[str, float]:
    """A process's /metrics on its host's own loopback, read from inside that host."""
    code = (
        "import json, sys; from common import status; print(json.dumps(status.scrape(sys.argv[1])))"
    )
    out = subprocess.run(
        host.exec([sys.executable, "-c", code, f"http://127.0.0.1:{port}/metrics"]),
        cwd=procs.ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return json.loads(out.stdout or "{}")


def actor_argv(learner: str, actor_id: int, metrics_port: int) -> list[str]:
    return [sys.executable, "-m", "actor", "--learner", learner, "--actor-id", str(actor_id),
            "--metrics-port", str(metrics_port), "--num-envs", str(ENVS)]  # fmt: skip


def test_a_partitioned_actor_holds_one_chunk_and_its_stale_chunks_are_dropped(tmp_path):
    port, lport = procs.free_port(2), procs.free_port()
    far_metrics, near_metrics = procs.free_port(), procs.free_port()
    with netns.Network() as net:
        far = net.add_host("far")
        learner = procs.learner(
            tmp_path / "run", port, lport, "--host", net.gateway, "--insecure",
            "--unroll-length", str(UNROLL), "--batch-chunks", "1", "--credits-per-actor",
            str(CREDITS), "--max-policy-lag", str(MAX_LAG), "--heartbeat-interval-s", "0.5",
            "--actor-timeout-s", "120", "--checkpoint-interval-s", "1000",
        )  # fmt: skip
        address = f"{net.gateway}:{port}"
        cut = procs.Proc(far.exec(actor_argv(address, 1, far_metrics)), tmp_path / "far.log")
        near = procs.Proc(actor_argv(address, 0, near_metrics), tmp_path / "near.log")
        started = [learner, cut, near]
        lm = lambda: procs.scrape(lport)  # noqa: E731
        fm = lambda: scrape_in(far, far_metrics)  # noqa: E731
        try:
            procs.wait_until("both hosts streaming", lambda: fm().get(
                "mario_actor_chunks_sent_total", 0) >= 3 and procs.scrape(near_metrics).get(
                "mario_actor_chunks_sent_total", 0) >= 3, 240, started)  # fmt: skip
            stale_before, updates = lm()[STALE], lm()["mario_learner_updates_total"]

            net.link(far, up=False)  # the partition
            # counted from here on, where no credit can reach it any more: before, a credit for a
            # chunk in flight could still arrive and be spent
            before = fm()
            # the learner trains on: the near actor's chunks make its weights stale on the far host
            procs.wait_until(f"{MAX_LAG + 4} more updates without the far host", lambda: lm().get(
                "mario_learner_updates_total", 0) >= updates + MAX_LAG + 4, 120, started)  # fmt: skip
            # the far actor, credits spent, waits: once it has waited a full second more, its
            # steps must not have moved in between
            waiting = fm()
            wait_key = "mario_actor_flow_control_wait_seconds_total"
            procs.wait_until("the far actor waiting for credits", lambda: fm().get(
                wait_key, 0) >= waiting[wait_key] + 1.0, 60, started)  # fmt: skip
            still = fm()
            assert (
                still["mario_actor_agent_steps_total"] == waiting["mario_actor_agent_steps_total"]
            )
            sent = still["mario_actor_chunks_sent_total"] - before["mario_actor_chunks_sent_total"]
            assert sent <= CREDITS  # what it could send was what it had credit for
            # it stopped within one chunk (per lane) of what it sent: nothing piles up
            made = still["mario_actor_agent_steps_total"] - before["mario_actor_agent_steps_total"]
            assert made <= (sent + 2) * UNROLL * ENVS, made

            net.link(far, up=True)  # healed: it streams again, on fresh weights
            procs.wait_until("the far host streaming again", lambda: fm().get(
                "mario_actor_chunks_sent_total", 0) >= still["mario_actor_chunks_sent_total"] + 3,
                120, started)  # fmt: skip
            # the chunks it made from the stale weights arrived and were dropped, not trained on
            procs.wait_until("its stale chunks dropped", lambda: lm().get(STALE, 0) > stale_before,
                             60, started)  # fmt: skip
            assert fm()["mario_actor_policy_version"] > still["mario_actor_policy_version"]
        finally:
            for p in (cut, near, learner):
                p.stop()


@pytest.mark.skipif(
    netns.unavailable(nft=True) is not None, reason=f"{netns.unavailable(nft=True)}"
)
def test_an_actor_whose_broadcast_is_blocked_takes_the_weights_over_its_own_connection(tmp_path):
    port, lport, far_metrics = procs.free_port(2), procs.free_port(), procs.free_port()
    with netns.Network() as net:
        far = net.add_host("far")
        learner = procs.learner(
            tmp_path / "run", port, lport, "--host", net.gateway, "--insecure",
            "--unroll-length", str(UNROLL), "--batch-chunks", "1", "--heartbeat-interval-s", "0.5",
            "--checkpoint-interval-s", "1000",
        )  # fmt: skip
        actor = procs.Proc(
            far.exec(actor_argv(f"{net.gateway}:{port}", 0, far_metrics)), tmp_path / "far.log"
        )
        started = [learner, actor]
        lm = lambda: procs.scrape(lport)  # noqa: E731
        fm = lambda: scrape_in(far, far_metrics)  # noqa: E731
        via = lambda path: fm().get(f"mario_actor_weights_taken_total{{via={path}}}", 0)  # noqa: E731
        accepted = "mario_learner_chunks_total{result=accepted}"
        try:
            procs.wait_until("the far actor on broadcast weights", lambda: via("broadcast") >= 2,
                             240, started)  # fmt: skip

            net.block(far, port + 1)  # the broadcast path alone: chunks and heartbeats still pass
            # from here on, newer versions reach it over its own connection alone
            broadcast, asked, chunks = via("broadcast"), via("connection"), lm()[accepted]
            procs.wait_until("newer weights over the actor's own connection",
                             lambda: via("connection") >= asked + 3, 120, started)  # fmt: skip
            assert "no weight broadcast for 3 s; asking the learner" in actor.output()
            procs.wait_until("its chunks still accepted", lambda: lm()[accepted] >= chunks + 3, 60,
                             started)  # fmt: skip

            net.unblock(far)
            procs.wait_until("broadcast weights again", lambda: via("broadcast") >= broadcast + 3,
                             120, started)  # fmt: skip
        finally:
            for p in (actor, learner):
                p.stop()
