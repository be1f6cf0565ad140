"""Every way of starting the processes gives each one the same command line: `make train`,
`make up` and `make actors` (through supervisord's config) and the systemd units, rendered from
the same settings all the way down to the argv that would be exec'd."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from supervisor.options import ServerOptions

from actor.config import ActorConfig, EvalConfig
from actor.relay import RelayConfig
from common import config as config_io
from common.curve import make_keys
from learner.config import LearnerConfig
from scripts.checkout import ROOT
from scripts.service import host as hosts
from scripts.service.supervisor import CONF, Supervisor

SYSTEMD = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/mario-impala"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def make(*argv: str, variables: dict[str, object]) -> str:
    """What `make ARGV VARIABLES` prints, with this venv (never reinstalling it)."""
    venv = Path(sys.executable).parent.parent
    argv = ["make", "--no-print-directory", "-o", f"{venv}/.installed", *argv, f"VENV={venv}"]
    argv += [f"{k}={v}" for k, v in variables.items()]
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout


def make_env(target: str, variables: dict[str, object]) -> dict[str, str]:
    """The MARIO_* variables `make TARGET` hands scripts/service, as `make -n` prints them."""
    out = make("-n", target, variables=variables)
    (line,) = [ln for ln in out.splitlines() if "-m scripts.service" in ln]
    words = shlex.split(line)
    return dict(
        w.split("=", 1) for w in words[: next(i for i, w in enumerate(words) if "=" not in w)]
    )


def printed(command: list[str], env: dict[str, str]) -> list[str]:
    """The argv that `command` (a `python -m scripts.service exec ...`) would exec."""
    out = subprocess.run(
        [*command, "--print"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return shlex.split(out.stdout)


def supervisord_commands(target: str, variables: dict, monkeypatch) -> dict[str, list[str]]:
    """What supervisord, started by `make TARGET`, would exec for each program it starts."""
    host = hosts.host_for(target, make_env(target, variables))
    (Path(host.run) / "logs").mkdir(parents=True, exist_ok=True)  # supervisord insists on it
    env = Supervisor(host).env
    with monkeypatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        options = ServerOptions()  # expands %(ENV_X)s from the environment
        options.realize(args=["-c", str(CONF)])
    (group,) = options.process_group_configs
    started = [p for p in group.process_configs if p.autostart]
    return {p.name: printed(shlex.split(p.command), env) for p in started}


def systemd_commands(
    env_file: dict[str, str], ids: range, eval_: bool, learner: bool = True, relay: bool = False
) -> dict[str, list[str]]:
    """What each systemd unit would exec, with /etc/mario-impala/env holding `env_file`."""
    units = {"learner": ("mario-learner.service", "")} if learner else {}
    units |= {"relay": ("mario-relay.service", "")} if relay else {}
    units |= {f"actor-{i}": ("mario-actor@.service", str(i)) for i in ids}
    units |= {"eval": ("mario-eval.service", "")} if eval_ else {}
    env = {"PATH": "/usr/bin:/bin", **env_file}
    out = {}
    for name, (unit, instance) in units.items():
        (exec_start,) = [
            line.split("=", 1)[1]
            for line in (SYSTEMD / unit).read_text().splitlines()
            if line.startswith("ExecStart=")
        ]
        exec_start = exec_start.replace("%i", instance)
        command = shlex.split(exec_start.replace(f"{INSTALLED}/.venv/bin/python", sys.executable))
        out[name] = printed(command, env)
    return out


def test_make_train_up_actors_and_systemd_give_the_same_command_lines(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    make_keys(keys, [*range(16, 19), hosts.EVAL_ACTOR_ID])
    variables = {
        "RUN": tmp_path / "run",
        "N": 3,
        "FIRST_ACTOR": 16,
        "PORT": 6000,
        "KEYS": keys,
        "LEVELS": "1-2,world:4",
        "FRAMES": 5_000_000,
        "LEARNER_ARGS": "--batch-chunks 2 --seed 3",
        "ACTOR_ARGS": "--num-envs 1 --lanes=1 --seed 5",
        "EVAL_ACTOR_ARGS": "--eval-interval-s 20 --log-level DEBUG",
    }
    train = supervisord_commands("train", variables, monkeypatch)
    up = supervisord_commands("up", variables, monkeypatch)
    assert sorted(train) == ["actor-16", "actor-17", "actor-18", "eval", "learner"]
    assert train == up

    alone = {**variables, "LEARNER_AUTOSTART": "false", "EVAL": "false"}
    actors = supervisord_commands("actors", variables, monkeypatch)
    assert actors == supervisord_commands("up", alone, monkeypatch)
    assert sorted(actors) == ["actor-16", "actor-17", "actor-18"]

    env_file = {k: str(v) for k, v in make_env("up", variables).items()}
    assert systemd_commands(env_file, range(16, 19), eval_=True) == train

    # and each is a command line its process accepts, with what the settings say
    learner = config_io.load(LearnerConfig, train["learner"][3:], prog="learner", description="")
    assert (learner.port, learner.batch_chunks, learner.seed) == (6000, "2", 3)
    assert learner.level == "1-2,world:4"
    assert (learner.train_frames, learner.lr_anneal_frames) == (5_000_000, 5_000_000)
    assert learner.curve_dir == f"{keys}/learner"
    assert learner.run_dir == str(tmp_path / "run")
    actor = config_io.load(ActorConfig, train["actor-17"][3:], prog="actor", description="")
    assert (actor.actor_id, actor.learner, actor.num_envs) == (17, "127.0.0.1:6000", 1)
    assert (actor.lanes, actor.seed, actor.log_level) == (1, 5, "INFO")
    assert (actor.metrics_port, actor.curve_dir) == (9117, f"{keys}/actor-17")
    assert train["eval"][1:3] == ["-m", "actor.eval"]
    evaluator = config_io.load(EvalConfig, train["eval"][3:], prog="actor.eval", description="")
    # its id is outside every actor range; its port the one after the last actor's
    assert (evaluator.actor_id, evaluator.metrics_port) == (hosts.EVAL_ACTOR_ID, 9119)
    assert evaluator.curve_dir == f"{keys}/actor-{hosts.EVAL_ACTOR_ID}"
    assert evaluator.eval_dir == str(tmp_path / "run" / "eval")
    # ACTOR_ARGS's flags it shares (not the training actors' own), then EVAL_ACTOR_ARGS
    assert "--num-envs" not in train["eval"] and "--lanes=1" not in train["eval"]
    assert (evaluator.seed, evaluator.eval_interval_s, evaluator.log_level) == (5, 20.0, "DEBUG")

    # actors on another host than the learner's: a relay, which each actor takes weights from
    remote = {**variables, "LEARNER": "10.0.0.5:6000"}
    far = supervisord_commands("actors", remote, monkeypatch)
    assert sorted(far) == ["actor-16", "actor-17", "actor-18", "relay"]
    env_file = {k: str(v) for k, v in make_env("actors", remote).items()}
    env_file |= {"MARIO_LEARNER_AUTOSTART": "false", "MARIO_EVAL": "false"}
    assert systemd_commands(env_file, range(16, 19), False, learner=False, relay=True) == far
    relay = config_io.load(RelayConfig, far["relay"][3:], prog="actor.relay", description="")
    assert (relay.learner, relay.bind, relay.curve_dir) == (
        "10.0.0.5:6000",
        "127.0.0.1:6002",
        f"{keys}/actor-16",
    )
    actor = config_io.load(ActorConfig, far["actor-17"][3:], prog="actor", description="")
    assert (actor.learner, actor.weights_from) == ("10.0.0.5:6000", "127.0.0.1:6002")


@pytest.mark.parametrize(
    ("actor_args", "shared"),
    [
        ("--num-envs 2 --seed 3", ["--seed", "3"]),
        ("--lanes=1 --config run.toml --num-envs 8", ["--config", "run.toml"]),
        ("--seed 1 --lanes 1", ["--seed", "1"]),
        ("", []),
    ],
)
def test_the_eval_actor_takes_the_actor_args_it_shares(actor_args, shared):
    assert hosts.shared_with_eval(actor_args) == shared
    h = hosts.Host(actor_args=actor_args, eval_actor_args="--seed 9").resolved()
    assert hosts.eval_argv(h)[-len(shared) - 2 :] == [*shared, "--seed", "9"]  # its own win


def test_make_commands_prints_what_make_train_starts(tmp_path, monkeypatch):
    variables = {"RUN": tmp_path / "run", "N": 2, "ACTOR_ARGS": "--num-envs 1"}
    out = make("commands", variables=variables)
    listed = {
        name: shlex.split(line) for name, _, line in (ln.partition(": ") for ln in out.splitlines())
    }
    assert listed == supervisord_commands("train", variables, monkeypatch)


def test_level_stays_a_set_of_one_goes_to_the_learner_alone_and_bad_sets_are_refused(tmp_path):
    out = make("commands", variables={"RUN": tmp_path / "run", "N": 1, "LEVEL": "1-2"})
    for line in out.splitlines():  # the learner's; actors and the eval actor are told it
        name, _, command = line.partition(": ")
        assert ("--level 1-2" in command) == (name == "learner"), line
    problems = hosts.Host(levels="1-5,world:9").resolved().problems()
    assert len(problems) == 1 and "'1-5'" in problems[0] and "'world:9'" in problems[0]
    with pytest.raises(ValueError, match="MARIO_LEVEL='1-1': renamed MARIO_LEVELS"):
        hosts.Host.from_env({"MARIO_LEVEL": "1-1"})
    with pytest.raises(ValueError, match="MARIO_SCHEDULE='progress': removed, actors draw"):
        hosts.Host.from_env({"MARIO_SCHEDULE": "progress"})
    assert hosts.Host.from_env({"MARIO_SCHEDULE": ""}).levels == "1-1"  # an old env file's line


def test_every_setting_a_make_variable_reaches_the_processes(tmp_path):
    """Each Host field is a make variable (docs/DEPLOY.md's table): `make up NAME=value` hands
    scripts/service MARIO_NAME, so no documented variable is silently ignored."""
    kinds = {"bool": "true", "bool | None": "true", "int": "7"}
    given = {f.name.upper(): kinds.get(str(f.type), "x") for f in dataclasses.fields(hosts.Host)}
    del given["CORES"]  # counted on the host, not a setting
    env = make_env("up", {**given, "RUN": tmp_path / "run"})
    lost = [
        name for name, value in given.items() if name != "RUN" and env.get(f"MARIO_{name}") != value
    ]
    assert not lost, f"make up ignores {lost}"


def test_make_up_relay_true_starts_a_relay_its_actors_subscribe_to(tmp_path):
    variables = {"RUN": tmp_path / "run", "N": 2, "RELAY": "true"}
    out = make("commands", variables=variables)
    listed = {name: line for name, _, line in (ln.partition(": ") for ln in out.splitlines())}
    assert "-m actor.relay" in listed.get("relay", ""), out
    assert "--weights-from 127.0.0.1:5557" in listed["actor-0"]
