"""CURVE over real sockets on 127.0.0.1: the learner's sockets admit only authorised actor keys;
key generation is idempotent and keeps secrets private; config refuses an open non-loopback bind."""

from __future__ import annotations

import contextlib
import shutil
import stat
import time

import pytest
import zmq

from actor.config import ActorConfig
from common import curve
from learner.config import LearnerConfig


@pytest.fixture
def keys(tmp_path):
    """(learner dir, authorised actor dir, unknown actor dir): the unknown actor has its own
    key pair and the learner's real public key, but is not in the allow-list."""
    curve.make_keys(tmp_path / "keys", range(1))
    curve.make_keys(tmp_path / "other", range(1))
    rogue = tmp_path / "other" / "actor-0"
    shutil.copyfile(tmp_path / "keys/learner/learner.key", rogue / "learner.key")
    return tmp_path / "keys/learner", tmp_path / "keys/actor-0", rogue


@pytest.fixture
def server(keys):
    """A CURVE ROUTER and PUB as the learner sets them up; yields (router, pub, ports)."""
    ctx = zmq.Context()
    srv = curve.CurveServer.start(keys[0], ctx)
    router, pub = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB)
    for s in (router, pub):
        s.linger = 0
        srv.socket_options(s)
    ports = (
        router.bind_to_random_port("tcp://127.0.0.1"),
        pub.bind_to_random_port("tcp://127.0.0.1"),
    )
    yield router, pub, ports
    router.close()
    pub.close()
    srv.stop()
    ctx.destroy(linger=0)


def _client(ctx, kind, port, options=None):
    s = ctx.socket(kind)
    s.linger = 0
    if options:
        options(s)
    if kind == zmq.SUB:
        s.subscribe(b"")
    s.connect(f"tcp://127.0.0.1:{port}")
    return s


def _router_hears(router, dealer, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # Never a blocking send: a refused handshake drops the DEALER's only pipe, and a send
        # with no pipe waits for one for ever (POLLOUT checked first can go stale before the send).
        with contextlib.suppress(zmq.Again):
            dealer.send(b"chunk", zmq.NOBLOCK)
        if router.poll(100):
            return router.recv_multipart()[-1]
    return None


def _sub_hears(pub, sub, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pub.send(b"weights")
        if sub.poll(100):
            return sub.recv()
    return None


def test_only_authorised_keys_reach_the_learner_sockets(keys, server):
    router, pub, (router_port, pub_port) = server
    ctx = zmq.Context()
    try:
        # The unknown key and a client without CURVE first: nothing arrives, nothing leaves.
        rogue = curve.client_options(keys[2])
        for options in (rogue, None):
            dealer = _client(ctx, zmq.DEALER, router_port, options)
            sub = _client(ctx, zmq.SUB, pub_port, options)
            assert _router_hears(router, dealer, 1.5) is None
            assert _sub_hears(pub, sub, 1.5) is None
            dealer.close()
            sub.close()
        authorised = curve.client_options(keys[1])
        dealer = _client(ctx, zmq.DEALER, router_port, authorised)
        sub = _client(ctx, zmq.SUB, pub_port, authorised)
        assert _router_hears(router, dealer, 5) == b"chunk"
        assert _sub_hears(pub, sub, 5) == b"weights"
        dealer.close()
        sub.close()
    finally:
        ctx.destroy(linger=0)


def test_make_keys_is_idempotent_and_keeps_secrets_private(tmp_path):
    root = tmp_path / "keys"
    created = curve.make_keys(root, range(2))
    assert len(created) == 3  # the learner and two actors
    secret = (root / "actor-1/actor.key_secret").read_text()
    assert curve.make_keys(root, range(3)) == [str(root / "actor-2/actor.key_secret")]
    assert (root / "actor-1/actor.key_secret").read_text() == secret
    for d in ("learner", "actor-0", "actor-1", "actor-2"):
        name = "learner" if d == "learner" else "actor"
        assert stat.S_IMODE((root / d / f"{name}.key_secret").stat().st_mode) == 0o600
    allowed = sorted(p.name for p in (root / "learner/authorized").glob("*.key"))
    assert allowed == ["actor-0.key", "actor-1.key", "actor-2.key"]
    learner_public = (root / "learner/learner.key").read_text()
    assert all((root / f"actor-{i}/learner.key").read_text() == learner_public for i in range(3))
    assert curve.make_keys(root, range(1), force=True) == [
        str(root / "learner/learner.key_secret"),
        str(root / "actor-0/actor.key_secret"),
    ]
    assert (root / "actor-0/learner.key").read_text() != learner_public  # the new learner key


@pytest.mark.parametrize("host", ["0.0.0.0", "*", "10.1.2.3", "gpu-box", "::"])
def test_learner_refuses_an_open_non_loopback_bind(host):
    problems = LearnerConfig(host=host).problems()
    assert any(p.startswith(f"host {host} is not loopback: set --curve-dir") for p in problems)
    assert LearnerConfig(host=host, insecure=True).problems() == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_learner_binds_loopback_without_keys(host):
    assert LearnerConfig(host=host).problems() == []


def test_curve_dirs_are_checked_at_startup(keys, tmp_path):
    assert LearnerConfig(host="0.0.0.0", curve_dir=str(keys[0])).problems() == []
    assert ActorConfig(curve_dir=str(keys[1])).problems() == []
    empty = tmp_path / "empty"
    empty.mkdir()
    learner = LearnerConfig(curve_dir=str(empty)).problems()
    assert len(learner) == 2 and all("make keys" in p for p in learner)
    actor = ActorConfig(curve_dir=str(empty)).problems()
    assert len(actor) == 2 and all("make keys" in p for p in actor)
