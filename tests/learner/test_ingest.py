"""The learner's ingest over real sockets: admission, credits, validation, staleness, weights."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from actor.link import FatalRefusal, LearnerLink
from common import wire
from common.env_spec import EnvSpec
from common.levels import level_lengths
from common.metrics import LearnerMetrics
from common.model import ModelSpec
from learner.ingest import Ingest, IngestSettings
from tests.fakes import make_chunk
from tests.procs import free_port

T, K, A, S = 4, 2, 7, 84
MODEL = ModelSpec(arch="nature", num_actions=A, frame_size=S).to_wire()
ENV = EnvSpec(level="1-1,1-2", frame_size=S, frame_skip=4, no_progress_steps=0)
WELCOME = wire.Welcome(
    credits=2, policy_version=0, unroll_length=T, model_spec=MODEL, env_spec=ENV.to_wire(),
    heartbeat_interval_s=0.5,  # the learner's (ingest_settings below): actors beat at it
)  # fmt: skip


def register(**kw) -> wire.Register:
    fields = dict(run_id="r", actor_id=0, instance_id="i0", num_envs=K)
    return wire.Register(**{**fields, **kw})


def chunk(version: int = 0, seq: int = 0, **kw) -> wire.Chunk:
    """A chunk of the learner's T, frame size and actions, from actor 0 unless `kw` says."""
    fields = dict(
        actor_id=0, instance_id="i0", seq=seq, policy_version=version, episodes=(), level=ENV.level
    )
    return make_chunk(T=T, K=K, H=S, W=S, A=A, **{**fields, **kw})


class Client:
    def __init__(self, port: int, source: str = ""):
        """A DEALER to the learner on 127.0.0.1; `source` (e.g. 127.0.0.2, loopback too) is the
        address it connects from: another host, as the learner sees it."""
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://{source + ':0;' if source else ''}127.0.0.1:{port}")
        self.acks = 0  # Credits of 0: a chunk received, its credit owed

    def send(self, msg) -> None:
        self.sock.send_multipart(msg if isinstance(msg, list) else wire.encode(msg))

    def recv(self, timeout_s: float = 5.0, skip=(wire.Heartbeat,)):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.sock.poll(50):
                msg = wire.decode(self.sock.recv_multipart())
                if not isinstance(msg, skip):
                    return msg
        raise AssertionError("nothing received")

    def credits_within(self, timeout_s: float) -> int:
        total, deadline = 0, time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.sock.poll(50):
                msg = wire.decode(self.sock.recv_multipart())
                if isinstance(msg, wire.Credit):
                    total += msg.credits
                    self.acks += msg.credits == 0
        return total


def ingest_settings(**kw) -> IngestSettings:
    fields = dict(
        run_id="r",
        env_spec=ENV,
        model_spec=MODEL,
        unroll_length=T,
        credits_per_actor=2,
        queue_chunks=3,
        max_policy_lag=5,
        heartbeat_interval_s=0.5,
        actor_timeout_s=3,
    )
    return IngestSettings(**{**fields, **kw})


@pytest.fixture
def ingest():
    version = {"v": 0}
    settings = ingest_settings()
    port = free_port(2)
    ing = Ingest(settings, LearnerMetrics(), lambda: version["v"], host="127.0.0.1", port=port)
    ing.start()
    ing.port, ing.version = port, version
    yield ing
    ing.stop()


def counter(ing: Ingest, name: str, **labels) -> float:
    return ing.metrics.registry.get_sample_value(name, labels or None) or 0.0


def wait_for(check, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met")


def test_registration_grants_credits_and_chunks_are_queued(ingest):
    c = Client(ingest.port)
    c.send(register())
    assert c.recv() == WELCOME  # what to build: the network and T, with the first credits
    c.send(
        chunk(
            episodes=(
                wire.EpisodeStats(
                    level="1-1",
                    episode_return=5.0,
                    length=3,
                    max_x=300,
                    flag=False,
                    outcome="death",
                ),
            )
        )
    )
    assert isinstance(c.recv(), wire.Credit)  # the accepted chunk earns its credit back
    (got,) = ingest.take(1, timeout_s=2)
    assert got.arrays["frames"].shape == (T + 4, K, S, S) and got.env_frames == T * K * 4
    assert counter(ingest, "mario_learner_chunks_total", result="accepted") == 1
    assert counter(ingest, "mario_episodes_total", level="1-1", outcome="death") == 1


def test_malformed_messages_are_rejected_and_counted_and_ingest_survives(ingest):
    c = Client(ingest.port)
    c.send(register())
    c.recv()
    good = wire.encode(chunk())
    bad = [b"\x00garbage", bytes(good[0])[:-3], *[bytes(memoryview(f)) for f in good[1:]]]
    c.send([b"not msgpack"])
    c.send(bad[1:])  # truncated header
    c.send([bytes(memoryview(f)) for f in good[:-1]])  # a missing array frame
    wait_for(lambda: counter(ingest, "mario_learner_messages_rejected_total", reason="decode") == 3)
    assert counter(ingest, "mario_learner_chunks_total", result="rejected") == 3
    c.send(chunk())  # still ingesting
    wait_for(lambda: counter(ingest, "mario_learner_chunks_total", result="accepted") == 1)


def test_a_chunk_whose_core_state_is_not_the_networks_is_rejected_and_counted(ingest, caplog):
    c = Client(ingest.port)
    c.send(register())
    c.recv()
    c.send(chunk(C=16))  # a recurrent actor's chunk; this learner's network has no core
    wait_for(lambda: counter(ingest, "mario_learner_messages_rejected_total", reason="spec") == 1)
    assert "(T, frame, A, core state)" in caplog.text and ", 16)" in caplog.text
    assert isinstance(c.recv(), wire.Credit)  # its credit comes back: nothing is stuck
    c.send(chunk())
    wait_for(lambda: counter(ingest, "mario_learner_chunks_total", result="accepted") == 1)


def test_unknown_actor_is_refused_and_another_run_is_fatal(ingest):
    c = Client(ingest.port)
    c.send(chunk())
    refusal = c.recv()
    assert isinstance(refusal, wire.Refuse) and not refusal.fatal and "register" in refusal.reason
    assert len(ingest.queue) == 0
    c.send(register(run_id="other"))
    refusal = c.recv()
    assert isinstance(refusal, wire.Refuse) and refusal.fatal
    assert "--run-id is 'other' on the actor but 'r' on the learner" in refusal.reason


def test_a_second_process_with_a_connected_id_from_another_host_is_refused_naming_both(ingest):
    here = Client(ingest.port)
    here.send(register(actor_id=16, instance_id="aaaa1111"))
    assert isinstance(here.recv(), wire.Welcome)
    there = Client(ingest.port, source="127.0.0.2")
    there.send(register(actor_id=16, instance_id="bbbb2222"))
    refusal = there.recv()
    assert isinstance(refusal, wire.Refuse) and refusal.fatal  # the actor exits 2, no retry loop
    for named in ("actor id 16", "127.0.0.1 (instance aaaa1111)", "127.0.0.2 (instance bbbb2222)"):
        assert named in refusal.reason, refusal.reason
    assert "FIRST_ACTOR" in refusal.reason and "--actor-id" in refusal.reason
    here.send(chunk(actor_id=16, instance_id="aaaa1111"))  # the first keeps its connection
    assert isinstance(here.recv(), wire.Credit)
    assert [a.instance_id for a in ingest.actors.values()] == ["aaaa1111"]


def test_a_restart_from_the_same_host_replaces_its_old_connection(ingest):
    old = Client(ingest.port, source="127.0.0.2")
    old.send(register(actor_id=3, instance_id="old00000"))
    assert isinstance(old.recv(), wire.Welcome)
    restarted = Client(ingest.port, source="127.0.0.2")  # a new process, same place
    restarted.send(register(actor_id=3, instance_id="new00000"))
    assert isinstance(restarted.recv(), wire.Welcome)
    again = Client(ingest.port, source="127.0.0.3")  # a new session of that process, elsewhere
    again.send(register(actor_id=3, instance_id="new00000"))
    assert isinstance(again.recv(), wire.Welcome)
    assert [a.instance_id for a in ingest.actors.values()] == ["new00000"]


def test_a_replaced_process_that_was_alive_all_along_is_refused_when_it_comes_back(ingest):
    first = Client(ingest.port)
    first.send(register(actor_id=3, instance_id="first000"))
    assert isinstance(first.recv(), wire.Welcome)
    second = Client(ingest.port)  # same host, same id: taken for a restart
    second.send(register(actor_id=3, instance_id="second00"))
    assert isinstance(second.recv(), wire.Welcome)
    first.send(chunk(actor_id=3, instance_id="first000"))  # ... but the first is still alive
    assert isinstance(first.recv(), wire.Refuse)  # unknown now: it registers again
    first.send(register(actor_id=3, instance_id="first000"))
    refusal = first.recv()
    assert isinstance(refusal, wire.Refuse) and refusal.fatal
    assert "instance second0" in refusal.reason and "instance first000" in refusal.reason
    assert [a.instance_id for a in ingest.actors.values()] == ["second00"]


def test_an_actor_refused_for_a_duplicate_id_raises_with_the_learners_reason(ingest):
    here = Client(ingest.port)
    here.send(register(actor_id=16, instance_id="aaaa1111"))
    here.recv()
    link = LearnerLink(  # an actor on another host: its connections come from 127.0.0.2
        f"127.0.0.2:0;127.0.0.1:{ingest.port}", register(actor_id=16, instance_id="bbbb2222")
    )
    try:
        with pytest.raises(
            FatalRefusal, match=r"actor id 16 is already connected from 127\.0\.0\.1"
        ):
            deadline = time.monotonic() + 10
            link.wait_for_credit(stop=lambda: time.monotonic() > deadline)
    finally:
        link.close()


def test_stale_chunks_are_dropped_but_return_credit(ingest):
    c = Client(ingest.port)
    c.send(register())
    c.recv()
    ingest.version["v"] = 20
    c.send(chunk(version=10))  # lag 10 > max 5
    assert isinstance(c.recv(), wire.Credit)
    assert counter(ingest, "mario_learner_chunks_total", result="stale") == 1
    assert len(ingest.queue) == 0


def test_full_queue_stops_granting_credits_until_drained(ingest):
    actors = [Client(ingest.port) for _ in range(3)]
    for i, c in enumerate(actors):
        c.send(register(actor_id=i, instance_id=f"i{i}"))
        assert c.recv().credits == 2  # the Welcome's
    for i, c in enumerate(actors):  # 6 chunks for a queue of 3
        for s in range(2):
            c.send(chunk(seq=s, actor_id=i, instance_id=f"i{i}"))
    wait_for(lambda: counter(ingest, "mario_learner_chunks_total", result="accepted") == 6)
    granted = sum(c.credits_within(0.5) for c in actors)
    assert granted == 2  # the chunks that found the queue with room; the other 4 are owed
    assert sum(c.acks for c in actors) == 4  # but acknowledged at once: the actors know they came
    assert len(ingest.queue) == 6  # bounded by queue capacity + credits in flight, nothing lost
    ingest.take(6, timeout_s=1)
    assert sum(c.credits_within(1.0) for c in actors) == 4  # paid once the train loop drained it


def test_weights_request_gets_the_newest_weights(ingest):
    c = Client(ingest.port)
    c.send(register())
    c.recv()
    tensors = {"w": np.ones((2, 2), np.float32)}
    w = wire.Weights(policy_version=3, env_frames=512, tensors=tensors, model_spec=MODEL)
    ingest.publish(wire.encode(w))
    time.sleep(0.2)
    c.send(wire.WeightsRequest(have_version=-1))
    assert c.recv(skip=(wire.Heartbeat, wire.Credit)) == w


def test_silent_actor_is_forgotten(ingest):
    c = Client(ingest.port)
    c.send(register())
    c.recv()
    wait_for(lambda: counter(ingest, "mario_actors_connected") == 1)
    wait_for(lambda: counter(ingest, "mario_actors_connected") == 0, timeout_s=8)
    assert not ingest.actors


def test_episodes_reach_the_level_statistics():
    seen = []
    port = free_port(2)
    ing = Ingest(
        ingest_settings(), LearnerMetrics(), lambda: 0, host="127.0.0.1", port=port,
        on_episode=seen.append,
    )  # fmt: skip
    ing.start()
    try:
        c = Client(port)
        c.send(register())
        assert c.recv() == WELCOME
        episode = wire.EpisodeStats(
            level="1-2", episode_return=1.0, length=3, max_x=1000, flag=False, outcome="death"
        )
        c.send(chunk(episodes=(episode,)))
        assert isinstance(c.recv(), wire.Credit)
        assert seen == [episode]
        progress = ing.metrics.registry.get_sample_value(
            "mario_episode_progress_sum", {"level": "1-2"}
        )
        assert progress == pytest.approx(1000 / level_lengths()["1-2"])
    finally:
        ing.stop()


def test_each_steps_level_is_its_index_in_the_runs_set(ingest):
    c = Client(ingest.port)
    c.send(register())
    assert c.recv() == WELCOME
    sent = chunk(levels=2)
    assert set(np.unique(sent.arrays["level"])) == {0, 1}
    c.send(sent)
    assert isinstance(c.recv(), wire.Credit)
    (got,) = ingest.take(1, timeout_s=2)
    assert got.arrays["level"].numpy().tolist() == sent.arrays["level"].tolist()


def test_a_chunk_that_arrives_again_is_dropped_and_counted_once(ingest):
    c = Client(ingest.port)
    c.send(register())
    c.recv()
    episode = wire.EpisodeStats(
        level="1-1", episode_return=5.0, length=3, max_x=300, flag=False, outcome="death"
    )
    c.send(chunk(seq=0, episodes=(episode,)))
    c.send(chunk(seq=0, episodes=(episode,)))  # the same chunk again
    assert isinstance(c.recv(), wire.Credit) and isinstance(c.recv(), wire.Credit)
    assert counter(ingest, "mario_learner_chunks_total", result="accepted") == 1
    assert counter(ingest, "mario_learner_chunks_total", result="duplicate") == 1
    assert counter(ingest, "mario_episodes_total", level="1-1", outcome="death") == 1
    # a later seq is new; another process of the same actor id counts its own seqs
    c.send(chunk(seq=1))
    c.send(register(instance_id="i1"))
    c.send(chunk(seq=0, instance_id="i1"))
    wait_for(lambda: counter(ingest, "mario_learner_chunks_total", result="accepted") == 3)
    assert counter(ingest, "mario_learner_chunks_total", result="duplicate") == 1


def test_credits_outstanding_count_grants_less_spends_and_leave_with_a_silent_actor(ingest):
    outstanding = lambda: counter(ingest, "mario_learner_credits_outstanding")  # noqa: E731
    a, b = Client(ingest.port), Client(ingest.port)
    a.send(register())
    b.send(register(actor_id=1, instance_id="i1"))
    a.recv(), b.recv()
    wait_for(lambda: outstanding() == 4)  # the Welcomes' 2 each
    a.send(chunk(seq=0))
    assert isinstance(a.recv(), wire.Credit)
    ingest.take(1, timeout_s=1)
    for s in range(2):  # b spends both, and earns them back
        b.send(chunk(seq=s, actor_id=1, instance_id="i1"))
    ingest.take(2, timeout_s=2)
    wait_for(lambda: outstanding() == 4)
    # b falls silent: its credits leave the count with it; a keeps heartbeating
    deadline = time.monotonic() + 8
    while ingest.actors and len(ingest.actors) > 1 and time.monotonic() < deadline:
        a.send(wire.Heartbeat(sent_time=time.time(), policy_version=0))
        time.sleep(0.2)
    wait_for(lambda: outstanding() == 2)


def registered_ingest() -> tuple[Ingest, list, Client, int]:
    """A started Ingest whose level-start episodes land in a list, and a registered client; the
    ingest's port."""
    seen: list = []
    port = free_port(2)
    ing = Ingest(
        ingest_settings(), LearnerMetrics(levels=ENV.levels), lambda: 0, host="127.0.0.1",
        port=port, on_episode=seen.append,
    )  # fmt: skip
    ing.start()
    c = Client(port)
    c.send(register())
    assert c.recv() == WELCOME
    return ing, seen, c, port


REFUSALS = ["malformed", "unknown_actor", "duplicate", "shape", "level_set", "level_index"]


def _refused(reason: str, c: Client, port: int, episode: wire.EpisodeStats) -> Client:
    """Send a chunk carrying `episode` that the learner refuses for `reason`; the client sent."""
    if reason == "unknown_actor":
        stranger = Client(port)
        stranger.send(chunk(episodes=(episode,)))
        return stranger
    if reason == "malformed":
        frames = wire.encode(chunk(episodes=(episode,)))
        c.send([bytes(memoryview(f)) for f in frames[:-1]])  # an array frame missing
    elif reason == "duplicate":
        c.send(chunk(seq=0))
        assert isinstance(c.recv(), wire.Credit)
        c.send(chunk(seq=0, episodes=(episode,)))
    elif reason == "shape":
        c.send(chunk(C=16, episodes=(episode,)))  # a core state this network does not have
    elif reason == "level_set":  # an actor of the learner's previous run
        c.send(chunk(level="1-1", episodes=(episode,)))
    elif reason == "level_index":
        c.send(chunk(levels=3, episodes=(episode,)))  # indices past the run's two levels
    return c


@pytest.mark.parametrize("reason", REFUSALS)
def test_a_refused_chunk_contributes_no_episode(reason):
    """Its episodes reach neither the metrics, nor the curves (metrics.jsonl reads `episodes`,
    episodes.jsonl `drain_episodes`), nor the level statistics (`on_episode`)."""
    ing, seen, c, port = registered_ingest()
    try:
        refused = wire.EpisodeStats(
            level="1-2", episode_return=7.0, length=9, max_x=900, flag=False, outcome="death"
        )
        sender = _refused(reason, c, port, refused)
        answer = sender.recv()  # the refusal's credit back, or a Refuse to an unknown sender
        assert isinstance(answer, wire.Refuse if reason == "unknown_actor" else wire.Credit)
        accepted = wire.EpisodeStats(
            level="1-1", episode_return=1.0, length=3, max_x=100, flag=False, outcome="death"
        )
        c.send(chunk(seq=5, episodes=(accepted,)))  # after the refused one on the same socket
        accepted_before = 1 if reason == "duplicate" else 0  # the duplicate's first copy
        wait_for(
            lambda: (
                counter(ing, "mario_learner_chunks_total", result="accepted") >= accepted_before + 1
            )
        )
        assert (
            counter(ing, "mario_learner_chunks_total", result="rejected")
            + counter(ing, "mario_learner_chunks_total", result="duplicate")
            == 1
        )
        assert seen == [accepted]
        assert list(ing.episodes) == [accepted]
        assert [e for _, _, e in ing.drain_episodes()] == [accepted]
        assert counter(ing, "mario_episodes_total", level="1-2", outcome="death") == 0
        assert counter(ing, "mario_episode_return_count", level="1-2") == 0
        assert counter(ing, "mario_episodes_total", level="1-1", outcome="death") == 1
    finally:
        ing.stop()
