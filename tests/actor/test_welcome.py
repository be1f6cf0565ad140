"""The actor builds what the learner's Welcome names, over real sockets against a ROUTER standing
in for the learner: the network, the unroll length and the envs, and all three again when a
re-registration (a learner restarted with another config) names others."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time

import pytest
import zmq

from actor.config import ActorConfig
from actor.link import FatalRefusal, check_num_actions, welcomed_specs
from actor.main import Actor
from common import wire
from common.env_spec import EnvSpec
from common.model import ActorCritic, ModelSpec
from tests import procs

SPECS = [ModelSpec(), ModelSpec(arch="nature")]  # first learner, then second
ENVS = [EnvSpec(level="tests.fakes:Corridor-v0", frame_skip=1, no_progress_steps=20)]
ENVS.append(dataclasses.replace(ENVS[0], frame_skip=2))


def weights(spec: ModelSpec) -> wire.Weights:
    tensors = {k: v.numpy() for k, v in ActorCritic(spec).state_dict().items()}
    return wire.Weights(policy_version=1, env_frames=0, tensors=tensors, model_spec=spec.to_wire())


class FakeLearner:
    """Answers as a learner does: a Welcome for `spec`, T and `env`, its weights, a credit per
    chunk."""

    def __init__(self, port: int):
        self.router = zmq.Context.instance().socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.bind(f"tcp://127.0.0.1:{port}")
        self.spec, self.T, self.env = SPECS[0], 4, ENVS[0]
        self.chunks: list[wire.Chunk] = []

    def send(self, identity: bytes, msg: wire.Message) -> None:
        self.router.send_multipart([identity, *wire.encode(msg)])

    def serve_until(self, done, timeout_s: float = 60) -> bytes:
        deadline = time.monotonic() + timeout_s
        identity = b""
        while not done():
            assert time.monotonic() < deadline, f"gave up with {len(self.chunks)} chunks"
            if not self.router.poll(50):
                continue
            identity, *frames = self.router.recv_multipart()
            msg = wire.decode(frames)
            if isinstance(msg, wire.Register):
                self.send(identity, wire.Welcome(credits=2, policy_version=1, unroll_length=self.T,
                    model_spec=self.spec.to_wire(), env_spec=self.env.to_wire(),
                    heartbeat_interval_s=1.0))  # fmt: skip
            elif isinstance(msg, wire.WeightsRequest):
                self.send(identity, weights(self.spec))
            elif isinstance(msg, wire.Chunk):
                self.chunks.append(msg)
                self.send(identity, wire.Credit(credits=1, policy_version=1))
        return identity


@contextlib.contextmanager
def playing(actor: Actor, learner: FakeLearner):
    """The actor's loop in a thread while the block runs; then the actor stopped and closed,
    the stand-in learner's socket closed, and the thread gone."""
    player = threading.Thread(target=actor.run)
    player.start()
    try:
        yield
    finally:
        actor.stop()
        player.join(10)
        actor.close()
        learner.router.close(linger=0)
    assert not player.is_alive()


def test_a_new_learner_config_rebuilds_model_envs_and_lanes(caplog):
    port = procs.free_port(2)
    learner = FakeLearner(port)
    actor = Actor(ActorConfig(learner=f"127.0.0.1:{port}", num_envs=3))
    caplog.set_level(logging.WARNING, logger="actor")
    with playing(actor, learner):
        identity = learner.serve_until(lambda: len(learner.chunks) >= 3)
        assert {c.unroll_length for c in learner.chunks} == {4}
        assert actor.model.spec == SPECS[0] and actor.envs[0].spec == ENVS[0]
        assert {c.level for c in learner.chunks} == {ENVS[0].level}
        # the learner restarts with another T, network and frame skip and no longer knows the actor
        learner.spec, learner.T, learner.env = SPECS[1], 6, ENVS[1]
        learner.send(identity, wire.Refuse(reason="unknown actor: register first", fatal=False))
        first_new = len(learner.chunks)
        learner.serve_until(lambda: sum(c.unroll_length == 6 for c in learner.chunks) >= 3)
        lengths = [c.unroll_length for c in learner.chunks[first_new:]]
        assert lengths[lengths.index(6) :] == [6] * (len(lengths) - lengths.index(6))
        assert actor.model.spec == SPECS[1]
        assert len(actor.envs) == 3 and {env.spec for env in actor.envs} == {ENVS[1]}
        assert all(c.num_envs in (1, 2) and c.num_actions == 7 for c in learner.chunks)
        assert "lanes rebuilt" in caplog.text


def test_a_network_or_envs_the_actor_cannot_build_are_fatal():
    def welcome(model_spec=None, env_spec=None) -> wire.Welcome:
        model_spec = model_spec or SPECS[0].to_wire()
        env_spec = env_spec or ENVS[0].to_wire()
        return wire.Welcome(credits=1, policy_version=0, unroll_length=8, model_spec=model_spec,
                            env_spec=env_spec, heartbeat_interval_s=1.0)  # fmt: skip

    assert welcomed_specs(welcome()) == (SPECS[0], ENVS[0])
    for bad, words in [
        (welcome(model_spec={**SPECS[0].to_wire(), "arch": "lstm"}), "arch must be one of"),
        (welcome(model_spec={**SPECS[0].to_wire(), "depth": 3}), "depth"),
        (welcome(env_spec={**ENVS[0].to_wire(), "frame_skip": 0}), "frame_skip must be >= 1"),
        (welcome(env_spec={**ENVS[0].to_wire(), "gravity": 9.8}), "unknown env spec fields"),
    ]:
        with pytest.raises(FatalRefusal, match="cannot build what the learner asks for") as info:
            welcomed_specs(bad)
        assert words in str(info.value)
    with pytest.raises(FatalRefusal, match="network has 7 actions, its envs 12"):
        check_num_actions(SPECS[0], 12)
