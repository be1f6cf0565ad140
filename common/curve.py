"""ZeroMQ CURVE for the learner link: key files, the learner's allow-list, socket options.

With CURVE on, every byte between learner and actors is encrypted, and the learner accepts only
actors whose public key sits in its allow-list (`authorized/*.key`, read when it starts), on both
of its sockets. The key layout `make keys` writes: docs/DEPLOY.md.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

LEARNER = "learner"  # key pair name of the learner
ACTOR = "actor"  # key pair name of an actor, inside its own directory
AUTHORIZED = "authorized"  # the learner's allow-list directory

SocketOptions = Callable[[zmq.Socket], None]


def learner_problems(curve_dir: str) -> list[str]:
    """What is missing from a learner's --curve-dir (empty: nothing, or CURVE is off)."""
    if not curve_dir:
        return []
    d = Path(curve_dir)
    out = []
    if not (d / f"{LEARNER}.key_secret").is_file():
        out.append(f"curve_dir {d} has no {LEARNER}.key_secret; create the keys with make keys")
    if not (d / AUTHORIZED).is_dir():
        out.append(
            f"curve_dir {d} has no {AUTHORIZED}/ directory of actor public keys; "
            "create the keys with make keys"
        )
    return out


def actor_problems(curve_dir: str) -> list[str]:
    """What is missing from an actor's --curve-dir (empty: nothing, or CURVE is off)."""
    if not curve_dir:
        return []
    d = Path(curve_dir)
    return [
        f"curve_dir {d} has no {name}; copy this actor's directory made by make keys"
        for name in (f"{ACTOR}.key_secret", f"{LEARNER}.key")
        if not (d / name).is_file()
    ]


class CurveServer(NamedTuple):
    """The learner's side: a running ZAP authenticator and the options for its sockets."""

    authenticator: ThreadAuthenticator
    socket_options: SocketOptions
    authorized_keys: int

    @classmethod
    def start(cls, curve_dir: str | os.PathLike, context: zmq.Context) -> CurveServer:
        """Start the ZAP handler on `context`; sockets of `context` given `socket_options` before
        they bind accept only the public keys in curve_dir/authorized/*.key."""
        d = Path(curve_dir)
        public, secret = zmq.auth.load_certificate(d / f"{LEARNER}.key_secret")
        authorized = d / AUTHORIZED
        auth = ThreadAuthenticator(context)
        auth.start()
        auth.configure_curve(domain="*", location=str(authorized))

        def options(sock: zmq.Socket) -> None:
            sock.curve_secretkey = secret
            sock.curve_publickey = public
            sock.curve_server = True

        return cls(auth, options, len(list(authorized.glob("*.key"))))

    def stop(self) -> None:
        self.authenticator.stop()


def client_options(curve_dir: str | os.PathLike) -> SocketOptions:
    """The actor's side: options that make a socket present this actor's key pair and accept
    only the learner whose public key is curve_dir/learner.key."""
    d = Path(curve_dir)
    public, secret = zmq.auth.load_certificate(d / f"{ACTOR}.key_secret")
    server, _ = zmq.auth.load_certificate(d / f"{LEARNER}.key")

    def options(sock: zmq.Socket) -> None:
        sock.curve_secretkey = secret
        sock.curve_publickey = public
        sock.curve_serverkey = server

    return options


# ---- key generation (make keys) -----------------------------------------------------------


def _key_pair(directory: Path, name: str, force: bool) -> bool:
    """Create directory/name.key{,_secret} unless present (or `force`); True if created."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    secret = directory / f"{name}.key_secret"
    if secret.exists() and (directory / f"{name}.key").exists() and not force:
        return False
    old = os.umask(0o077)  # the secret file never exists with looser permissions
    try:
        zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(secret, 0o600)
    os.chmod(directory / f"{name}.key", 0o644)
    return True


def make_keys(root: str | os.PathLike, actor_ids: range, *, force: bool = False) -> list[str]:
    """Write the layout in this module's docstring under `root` for the learner and `actor_ids`,
    keeping existing key pairs unless `force`. Public keys are (re)copied every time, so running
    it again repairs the allow-list and each actor's copy of the learner's key. Returns what it
    created."""
    root = Path(root)
    created = []
    learner_dir = root / LEARNER
    if _key_pair(learner_dir, LEARNER, force):
        created.append(str(learner_dir / f"{LEARNER}.key_secret"))
    (learner_dir / AUTHORIZED).mkdir(exist_ok=True)
    for i in actor_ids:
        actor_dir = root / f"actor-{i}"
        if _key_pair(actor_dir, ACTOR, force):
            created.append(str(actor_dir / f"{ACTOR}.key_secret"))
        shutil.copyfile(actor_dir / f"{ACTOR}.key", learner_dir / AUTHORIZED / f"actor-{i}.key")
        shutil.copyfile(learner_dir / f"{LEARNER}.key", actor_dir / f"{LEARNER}.key")
    return created
