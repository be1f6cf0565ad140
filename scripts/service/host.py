"""One host's settings and the command line of every process it runs.

The settings travel as MARIO_* environment variables, one per `Host` field (`MARIO_N`,
`MARIO_PORT`, ...): `make` sets them from its variables of the same names, supervisord passes
them on to its programs, and systemd reads them from /etc/mario-impala/env. `learner_argv`,
`actor_argv` and `eval_argv` are the only place the processes' flags are written; the rules
that depend on what else runs on the host (`one_lane`, `learner_threads`) are applied there.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from actor.config import TRAINING_ACTORS_ONLY
from common.levels import LevelSetError, parse_levels, unregistered
from common.rundir import RunDir
from scripts.checkout import ROOT

SOCKET_PATH_MAX = 107  # bytes in a Unix socket's path (sun_path holds 108 with its NUL)

PREFIX = "MARIO_"

# The eval actor's id: outside any range of training actors, so that hosts laid out one after
# another (FIRST_ACTOR = the actors before them) never give two processes one id. One eval actor
# per run; a second would be refused by the learner, naming both.
EVAL_ACTOR_ID = 1_000_000


def _cores() -> int:
    """The cores this process may run on (os.process_cpu_count from Python 3.13)."""
    count = getattr(os, "process_cpu_count", None)
    return (count() if count else len(os.sched_getaffinity(0))) or 1


# Variables that were renamed: old -> (new, what it now takes)
RENAMED = {"LEVEL": ("LEVELS", "a set: 1-1 | 1-1,1-2 | world:1 | all")}
# Variables that were removed: name -> why
REMOVED = {"SCHEDULE": "actors draw the run's levels uniformly (docs/LEARNING.md, section 6)"}


@dataclass(frozen=True)
class Host:
    """What runs on this host and how; each field is the variable MARIO_<FIELD>."""

    run: str = "runs/default"  # run directory: checkpoints, logs/, supervisord's socket
    host: str = "127.0.0.1"  # the learner's bind address (it uses PORT and PORT+1)
    port: int = 5555
    device: str = "auto"  # the learner's: auto = the GPU if there is one
    metrics_host: str = "127.0.0.1"  # where every /metrics server binds
    learner_metrics_port: int = 9000
    learner_autostart: bool = True  # the learner runs on this host
    learner_args: str = ""  # more learner flags
    n: int = 0  # actors on this host; 0 = one per core but one (at least 1)
    first_actor: int = 0  # ids first_actor .. first_actor + n - 1
    learner: str = ""  # HOST:PORT the actors connect to; empty = 127.0.0.1:PORT
    actor_metrics_base: int = 9100  # actor i serves /metrics on BASE + i (0 = off)
    levels: str = "1-1"  # the run's level set (the learner's --level; actors are told it)
    frames: int = 0  # the run's length in env frames (the learner's --train-frames); 0 = endless
    actor_args: str = ""  # more actor flags; the eval actor takes those it shares with them
    eval_actor_args: str = ""  # more eval actor flags, after those of ACTOR_ARGS
    keys: str = ""  # CURVE keys made by `make keys` (empty = off)
    eval: bool | None = None  # the eval actor (EVAL_ACTOR_ID) runs here; None: as the learner
    # a weight relay (actor/relay.py) on 127.0.0.1:PORT+2 that this host's actors subscribe to;
    # None: when they reach a learner on another host and there are two or more of them
    relay: bool | None = None
    targets: str = "runs/targets"  # the directory of the Prometheus file_sd lists (targets.py)
    cores: int = dataclasses.field(default_factory=_cores)  # CPUs this host gives its processes

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: object) -> Host:
        """The settings in `environ` (unset or empty variables keep their defaults), then
        `overrides`; ValueError naming every variable that does not parse."""
        values: dict[str, object] = {}
        problems = [
            f"{PREFIX}{old}={environ[PREFIX + old]!r}: renamed {PREFIX}{new} ({why})"
            for old, (new, why) in RENAMED.items()
            if environ.get(PREFIX + old)
        ]
        problems += [
            f"{PREFIX}{name}={environ[PREFIX + name]!r}: removed, {why}; unset it"
            for name, why in REMOVED.items()
            if environ.get(PREFIX + name)
        ]
        for f in dataclasses.fields(cls):
            raw = environ.get(PREFIX + f.name.upper(), "")
            if raw == "":
                continue
            try:
                values[f.name] = _parse(raw, f.type)
            except ValueError:
                problems.append(f"{PREFIX}{f.name.upper()}={raw!r}: expected {_noun(f.type)}")
        if problems:
            raise ValueError("; ".join(problems))
        return cls(**{**values, **overrides}).resolved()

    def resolved(self) -> Host:
        """Defaults that depend on others filled in, the run directory made absolute."""
        return dataclasses.replace(
            self,
            run=str(Path(self.run).absolute()),
            n=self.n or max(1, self.cores - 1),
            learner=self.learner or f"127.0.0.1:{self.port}",
            eval=self.learner_autostart if self.eval is None else self.eval,
        )._with_relay()

    def _with_relay(self) -> Host:
        if self.relay is not None:
            return self
        remote = self.learner.rpartition(":")[0] not in ("127.0.0.1", "localhost", "::1", "[::1]")
        return dataclasses.replace(self, relay=remote and not self.learner_autostart and self.n > 1)

    def problems(self) -> list[str]:
        out = []
        if self.frames < 0:
            out.append(f"FRAMES must be >= 0 (0 = train until stopped), got {self.frames}")
        if self.n < 1 or self.first_actor < 0:
            out.append(f"N must be >= 1 and FIRST_ACTOR >= 0, got {self.n} and {self.first_actor}")
        if not 0 < self.port < 65535:
            out.append(f"PORT must be in [1, 65534] (PORT+1 is used too), got {self.port}")
        if self.targets.endswith(".json"):
            out.append(
                f"TARGETS={self.targets!r} names a file: TARGETS is the directory each run writes "
                "its Prometheus targets files into (learner-, actors-, eval-, relay-RUN.json); "
                f"pass TARGETS={str(Path(self.targets).parent)!r}"
            )
        if "'" in self.learner_args + self.actor_args + self.eval_actor_args:
            out.append("LEARNER_ARGS, ACTOR_ARGS and EVAL_ACTOR_ARGS take no single quotes")
        try:
            parse_levels(self.levels)
        except LevelSetError as exc:
            out.append(f"LEVELS: {exc}")
        if self.learner_autostart:  # the learner would refuse it, after supervisord started
            out += [f"LEVELS: {problem}" for problem in unregistered(self.levels)]
        root = os.fsencode(os.path.abspath(ROOT / self.run))
        sock = os.fsencode(os.path.abspath(ROOT / RunDir(self.run).supervisor_socket))
        if len(sock) > SOCKET_PATH_MAX:
            room = len(root) - (len(sock) - SOCKET_PATH_MAX)
            out.append(
                f"RUN={self.run!r} is too long: supervisord's socket in it would be a path of "
                f"{len(sock)} bytes, over the {SOCKET_PATH_MAX} a Unix socket allows; pass a RUN "
                f"whose absolute path is at most {room} bytes"
            )
        return out

    @property
    def eval_id(self) -> int:
        return EVAL_ACTOR_ID

    @property
    def eval_metrics_port(self) -> int:
        """The eval actor's /metrics port: the one after the last actor's (0: off)."""
        return self.actor_metrics_base + self.first_actor + self.n if self.actor_metrics_base else 0

    @property
    def relay_address(self) -> str:
        """Where this host's relay publishes (its actors' --weights-from)."""
        return f"127.0.0.1:{self.port + 2}"

    @property
    def relay_metrics_port(self) -> int:
        """The relay's /metrics port: after the actors' and the eval actor's (0: off)."""
        return self.eval_metrics_port + 1 if self.actor_metrics_base else 0

    @property
    def actor_ids(self) -> range:
        return range(self.first_actor, self.first_actor + self.n)

    def environ(self) -> dict[str, str]:
        """These settings as MARIO_* variables: what `from_env` reads back."""
        return {
            PREFIX + f.name.upper(): _text(getattr(self, f.name)) for f in dataclasses.fields(self)
        }


def host_for(command: str, environ: Mapping[str, str] = os.environ) -> Host:
    """The host as `python -m scripts.service COMMAND` sees it: `actors` (make actors) runs this
    host's actors alone, without the learner and the eval actor."""
    only_actors = {"learner_autostart": False, "eval": False} if command == "actors" else {}
    return Host.from_env(environ, **only_actors)


def _parse(raw: str, kind: str) -> object:
    if kind.startswith("bool"):
        if raw not in ("true", "false"):
            raise ValueError(raw)
        return raw == "true"
    return int(raw) if kind == "int" else raw


def _noun(kind: str) -> str:
    return {"bool": "true or false", "int": "an integer"}.get(kind.split(" ")[0], "a string")


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# ---- the rules -----------------------------------------------------------------------------


def local_processes(h: Host) -> int:
    """Processes this host runs: its actors, plus the learner and the eval actor if they run here."""
    return h.n + int(h.learner_autostart) + int(h.eval)


def one_lane(actors: int, processes: int, cores: int) -> bool:
    """Whether actors should step one lane rather than two.

    Two lanes pay off only where a core is spare: the second lane's thread overlaps inference
    with emulation on a core nothing else wants. Once the host's processes fill every core,
    threads add no CPU and one lane batches inference twice as wide. Measured on a 16-core box
    with 15 actors: one lane streamed 0.97 of raw emulator speed, two lanes 0.89
    (docs/PERFORMANCE.md).

    A lone actor keeps two lanes: it is then the run's only producer, and the learner beside it
    waits for its chunks, leaving CPU that the second lane uses. Measured with `make train` on
    the 2-core machine (1 actor, learner, eval actor): two lanes 1.22x the env frames/s of one.
    """
    return actors > 1 and processes >= cores


def learner_threads(h: Host) -> int | None:
    """Torch threads for a learner that shares the host: the cores its neighbours leave, at least
    one; None (torch's default, a thread per core) for a learner alone on its host.

    Beside busy processes a second OpenMP thread mostly waits at barriers for a descheduled
    peer: on 2 cores beside an actor an update took 1.5x longer with 2 threads than with 1
    (docs/PERFORMANCE.md)."""
    neighbours = local_processes(h) - int(h.learner_autostart)
    return max(1, h.cores - neighbours) if neighbours else None


def planned_length(frames: int) -> list[str]:
    """The learner flags of a run planned to last `frames` env frames: it stops there, and its
    learning rate falls linearly to 0 on the way (IMPALA's schedule), where an open-ended run's
    falls to a tenth over its first 1.5 M frames and holds (the learner's defaults). These come
    before LEARNER_ARGS on the learner's command line (`learner_argv`), so LEARNER_ARGS override
    them: --lr-anneal-frames 0 for a flat rate, --lr-final-fraction 0.1 to end at a tenth.

    On World 1 over an hour (two seeds, 1.8-1.9 M frames, the rate at 0 by 2 M) the annealed
    rate beat the flat one in eval on both seeds, on the mean and on the weakest level, and
    kept every level's progress through the last half-hour (docs/lab/2026-11-lr-annealing.md)."""
    rate = ["--lr-anneal-frames", str(frames), "--lr-final-fraction", "0"]  # to 0 at the end
    return ["--train-frames", str(frames), *rate]


# ---- the command lines ---------------------------------------------------------------------


def learner_argv(h: Host) -> list[str]:
    argv = [sys.executable, "-m", "learner", "--run-dir", h.run, "--host", h.host]
    argv += ["--port", str(h.port), "--device", h.device]
    argv += ["--metrics-host", h.metrics_host, "--metrics-port", str(h.learner_metrics_port)]
    argv += ["--level", h.levels]
    if h.frames:
        argv += planned_length(h.frames)
    if h.keys:
        argv += ["--curve-dir", f"{h.keys}/learner"]
    if (threads := learner_threads(h)) is not None:
        argv += ["--torch-threads", str(threads)]
    return argv + shlex.split(h.learner_args)  # last: they override


def _actor_common(
    h: Host, actor_id: int, module: str = "actor", metrics_port: int = -1
) -> list[str]:
    if metrics_port < 0:
        metrics_port = h.actor_metrics_base + actor_id if h.actor_metrics_base else 0
    argv = [sys.executable, "-m", module, "--actor-id", str(actor_id), "--learner", h.learner]
    argv += ["--metrics-host", h.metrics_host, "--metrics-port", str(metrics_port)]
    if h.keys:
        argv += ["--curve-dir", f"{h.keys}/actor-{actor_id}"]
    if h.relay:
        argv += ["--weights-from", h.relay_address]
    return argv  # the run's settings (LEVELS too) come from the learner's Welcome


def actor_argv(h: Host, actor_id: int) -> list[str]:
    lanes = ["--lanes", "1"] if one_lane(h.n, local_processes(h), h.cores) else []
    return _actor_common(h, actor_id) + lanes + shlex.split(h.actor_args)


def eval_argv(h: Host) -> list[str]:
    argv = _actor_common(h, h.eval_id, "actor.eval", h.eval_metrics_port)
    argv += ["--eval-dir", str(RunDir(h.run).eval)]
    return argv + shared_with_eval(h.actor_args) + shlex.split(h.eval_actor_args)  # they win


def shared_with_eval(actor_args: str) -> list[str]:
    """The flags of ACTOR_ARGS that the eval actor takes too, each with its value: all but the
    training actors' own (--num-envs, --lanes), so that one ACTOR_ARGS (--seed, --config, ...)
    serves both, as it always did."""
    own = {"--" + name.replace("_", "-") for name in TRAINING_ACTORS_ONLY}
    out, dropping = [], False
    for word in shlex.split(actor_args):
        if word.startswith("--"):  # a flag; the words up to the next one are its value
            dropping = word.partition("=")[0] in own
        if not dropping:
            out.append(word)
    return out


def relay_argv(h: Host) -> list[str]:
    """The host's weight relay; it reaches the learner with the first actor's CURVE keys."""
    argv = [sys.executable, "-m", "actor.relay", "--learner", h.learner, "--bind", h.relay_address]
    argv += ["--metrics-host", h.metrics_host, "--metrics-port", str(h.relay_metrics_port)]
    return argv + (["--curve-dir", f"{h.keys}/actor-{h.first_actor}"] if h.keys else [])


def commands(h: Host) -> dict[str, list[str]]:
    """Every process this host runs, by its supervisord program name."""
    out = {"learner": learner_argv(h)} if h.learner_autostart else {}
    out |= {"relay": relay_argv(h)} if h.relay else {}
    out |= {f"actor-{i}": actor_argv(h, i) for i in h.actor_ids}
    return out | ({"eval": eval_argv(h)} if h.eval else {})


def argv_for(h: Host, role: str, actor_id: int | None = None) -> list[str]:
    """The command line of `role` (learner, relay, actor, eval) on this host."""
    if role == "learner":
        return learner_argv(h)
    if role == "relay":
        return relay_argv(h)
    if role == "eval":
        return eval_argv(h)
    if role == "actor" and actor_id is not None and actor_id >= 0:
        return actor_argv(h, actor_id)
    raise ValueError(f"expected learner, relay, eval or actor ID, got {role} {actor_id}")
