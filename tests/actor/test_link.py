"""The actor's link against a real ROUTER on loopback standing in for a restarted learner."""

from __future__ import annotations

import time

import zmq

from actor.link import LearnerLink
from common import wire
from tests import procs


def register_msg() -> wire.Register:
    return wire.Register(actor_id=3, instance_id="inst", run_id="default", num_envs=1)


def welcome(credits: int = 2, policy_version: int = 0, **spec) -> list[bytes]:
    model_spec = {"arch": "small", **spec}
    msg = wire.Welcome(
        credits=credits,
        policy_version=policy_version,
        unroll_length=8,
        model_spec=model_spec,
        env_spec={"level": "1-1"},
        heartbeat_interval_s=6.0,  # silence for 30 s before a new session: none in these tests
    )
    return wire.encode(msg)


def pump(link: LearnerLink, router: zmq.Socket, until, timeout_s: float = 10.0) -> list:
    """Poll the link and collect what reaches the router until `until(received)` holds."""
    received: list = []
    deadline = time.monotonic() + timeout_s
    while not until(received):
        assert time.monotonic() < deadline, (
            f"gave up; got {[type(m).__name__ for _, m in received]}"
        )
        link.poll(20)
        while router.poll(0):
            identity, *frames = router.recv_multipart()
            received.append((identity, wire.decode(frames)))
    return received


def test_a_learner_that_forgot_the_actor_counts_as_a_reconnect():
    """The DEALER reconnects underneath when a learner restarts within the link's timeout; the
    new learner refuses the unknown actor. That re-registration is a new session: it must count
    as a reconnect whatever the timing, and the actor must register again."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = procs.free_port(2)
    router.bind(f"tcp://127.0.0.1:{port}")
    events: list[str] = []
    link = LearnerLink(
        f"127.0.0.1:{port}", register_msg(), register_timeout_s=30, on_event=events.append
    )
    try:
        got = pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        identity = next(i for i, m in got if isinstance(m, wire.Register))
        router.send_multipart([identity, *welcome()])
        pump(link, router, lambda r: link.registered)
        assert events == ["registered"]
        refuse = wire.encode(wire.Refuse(reason="unknown actor: register first", fatal=False))
        router.send_multipart([identity, *refuse])  # as a restarted learner answers a heartbeat
        again = pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        assert events == ["registered", "reconnect"] and not link.registered
        assert link.credits == 0
        # a second refusal before the new registration is answered is the same session
        router.send_multipart([identity, *refuse])
        pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        assert events == ["registered", "reconnect"]
        router.send_multipart([identity, *welcome(policy_version=5)])
        pump(link, router, lambda r: link.registered)
        assert events == ["registered", "reconnect", "registered"]
        assert again  # it asked to register again
    finally:
        link.close()
        router.close(linger=0)


def test_weights_from_a_learner_that_went_back_to_an_older_checkpoint_are_taken():
    """A learner killed after version 9 and resumed from its checkpoint of version 5 welcomes the
    actor at 5: its weights of versions 6, 7, ... are the policy now, though this actor has
    applied 9. Ignoring them (as not newer) would keep the dead timeline's policy acting until
    the learner passed 9 again."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = procs.free_port(2)
    router.bind(f"tcp://127.0.0.1:{port}")
    applied: list[int] = []
    link = LearnerLink(f"127.0.0.1:{port}", register_msg(), register_timeout_s=30,
                       on_weights=lambda w: applied.append(w.policy_version))  # fmt: skip

    def weights(version: int) -> list[bytes]:
        spec = {"arch": "small"}
        return wire.encode(
            wire.Weights(policy_version=version, env_frames=0, tensors={}, model_spec=spec)
        )

    try:
        got = pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        identity = next(i for i, m in got if isinstance(m, wire.Register))
        router.send_multipart([identity, *welcome(policy_version=8)])
        router.send_multipart([identity, *weights(9)])
        pump(link, router, lambda r: link.policy_version == 9)
        refuse = wire.encode(wire.Refuse(reason="unknown actor: register first", fatal=False))
        router.send_multipart([identity, *refuse])  # the restarted learner does not know it
        pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        router.send_multipart([identity, *welcome(policy_version=5)])
        router.send_multipart([identity, *weights(6)])
        pump(link, router, lambda r: link.policy_version == 6)
        assert applied == [9, 6]
        router.send_multipart([identity, *weights(6)])  # the same version again: applied once
        router.send_multipart([identity, *weights(7)])
        pump(link, router, lambda r: link.policy_version == 7)
        assert applied == [9, 6, 7]
    finally:
        link.close()
        router.close(linger=0)


def test_the_learners_heartbeat_interval_sets_the_actors_beat_and_its_patience():
    """A learner with --heartbeat-interval-s 6 says so in its Welcome: the actor beats every 6 s
    and keeps its session through the 6 s between the learner's beats (an actor that gave up
    after 5 s of its own would register again every few seconds)."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = procs.free_port(2)
    router.bind(f"tcp://127.0.0.1:{port}")
    link = LearnerLink(f"127.0.0.1:{port}", register_msg())
    beat = wire.encode(wire.Heartbeat(sent_time=time.time(), policy_version=0))
    try:
        got = pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        identity = next(i for i, m in got if isinstance(m, wire.Register))
        router.send_multipart([identity, *welcome()])  # heartbeats every 6 s
        welcomed = time.monotonic()
        pump(link, router, lambda r: link.registered)
        seen: list = []

        def beat_and_heard(received: list) -> bool:
            """The learner beats 6 s after its Welcome; done once the actor beats after that."""
            seen.extend(received[len(seen) :])
            if beat_and_heard.sent is None and time.monotonic() - welcomed >= 6.0:
                router.send_multipart([identity, *beat])
                beat_and_heard.sent = len(seen)
            later = seen[beat_and_heard.sent :] if beat_and_heard.sent is not None else []
            return any(isinstance(m, wire.Heartbeat) for _, m in later)

        beat_and_heard.sent = None
        pump(link, router, beat_and_heard, timeout_s=30)
        assert not any(isinstance(m, wire.Register) for _, m in seen), "a new session"
        assert {i for i, _ in seen} == {identity}
        beats = sum(isinstance(m, wire.Heartbeat) for _, m in seen)
        assert beats <= 1 + (time.monotonic() - welcomed) / 6.0  # one at once, then every 6 s
    finally:
        link.close()
        router.close(linger=0)


def test_an_actor_keeps_its_session_until_the_learner_can_be_reached():
    """While no connection is up the socket connects again on its own, about every second; a new
    session meanwhile would only pause first. An actor that comes up before its learner
    registers over its first connection, whenever the learner binds."""
    ctx = zmq.Context.instance()
    port = procs.free_port(2)
    events: list[str] = []
    link = LearnerLink(f"127.0.0.1:{port}", register_msg(), register_timeout_s=0.3,
                       backoff_max_s=0.3, on_event=events.append)  # fmt: skip
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    try:
        start = time.monotonic()
        while time.monotonic() - start < 2.0:  # a learner that binds 2 s after the actor starts
            link.poll(20)
        router.bind(f"tcp://127.0.0.1:{port}")
        got = pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        identity = next(i for i, m in got if isinstance(m, wire.Register))
        router.send_multipart([identity, *welcome()])
        pump(link, router, lambda r: link.registered)
        assert events == ["registered"]  # no session given up while the learner was away
    finally:
        link.close()
        router.close(linger=0)


def test_a_connection_that_falls_silent_is_given_up_for_a_new_session():
    """A link cut without a FIN leaves the connection up but silent: after the learner's
    heartbeat intervals of silence the actor starts a new session over a new connection."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = procs.free_port(2)
    router.bind(f"tcp://127.0.0.1:{port}")
    events: list[str] = []
    link = LearnerLink(f"127.0.0.1:{port}", register_msg(), register_timeout_s=30,
                       backoff_max_s=0.1, on_event=events.append)  # fmt: skip
    fast = wire.Welcome(credits=2, policy_version=0, unroll_length=8, model_spec={"arch": "small"},
                        env_spec={"level": "1-1"}, heartbeat_interval_s=0.1)  # fmt: skip
    try:
        got = pump(link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r))
        first = next(i for i, m in got if isinstance(m, wire.Register))
        router.send_multipart([first, *wire.encode(fast)])
        pump(link, router, lambda r: link.registered)
        assert link.timeout_s == wire.SILENT_HEARTBEATS * 0.1
        again = pump(  # the learner says nothing more: the actor registers anew
            link, router, lambda r: any(isinstance(m, wire.Register) for _, m in r)
        )
        assert events == ["registered", "reconnect"]
        assert {i for i, m in again if isinstance(m, wire.Register)} != {first}
    finally:
        link.close()
        router.close(linger=0)
