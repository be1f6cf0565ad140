"""deploy/systemd and deploy/supervisord: the files load cleanly in their own tools, and the
one-line sh in each command hands the processes flags their configs accept (actor id, metrics
port BASE+id, --curve-dir only with keys)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from supervisor.options import ServerOptions

from actor.config import ActorConfig
from common import config as config_io
from common.curve import make_keys
from learner.config import LearnerConfig

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy/systemd"
SUPERVISORD_CONF = ROOT / "deploy/supervisord/mario-impala.conf"
UNITS = ["mario-learner.service", "mario-actor@.service", "mario-impala.target"]
INSTALLED = "/opt/mario-impala"  # where the units expect the repository


def _installed_copy(tmp_path: Path) -> Path:
    """The unit files as installed from this checkout: its venv's python, its directory."""
    units = tmp_path / "units"
    units.mkdir()
    for name in UNITS:
        text = (SYSTEMD / name).read_text()
        text = text.replace(f"{INSTALLED}/.venv/bin/python", sys.executable)
        (units / name).write_text(text.replace(INSTALLED, str(ROOT)))
    shutil.copyfile(units / "mario-actor@.service", units / "mario-actor@3.service")
    return units


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze not installed (Debian: apt-get install systemd; .ci/run installs it)",
)
@pytest.mark.parametrize("name", [*UNITS, "mario-actor@3.service"])
def test_unit_file_verifies_without_a_word(tmp_path, name):
    units = _installed_copy(tmp_path)
    out = subprocess.run(
        ["systemd-analyze", "verify", str(units / name)],
        cwd=units,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # verify exits 0 on unknown keys and bad values, so anything it says is a failure
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_no_unit_hides_the_gpu_from_the_learner():
    learner = _settings((SYSTEMD / "mario-learner.service").read_text())
    for key in ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock"):
        assert key not in learner, f"{key} would keep the learner off /dev/nvidia*"
    assert learner["KillMode"] == "mixed" and int(learner["TimeoutStopSec"]) >= 60
    assert learner["ReadWritePaths"] == "/var/lib/mario-impala"
    assert learner["Restart"] == "on-failure" and learner["RestartPreventExitStatus"] == "2"


def _settings(unit_text: str) -> dict[str, str]:
    out = {}
    for line in unit_text.splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def _env_file() -> dict[str, str]:
    return _settings((SYSTEMD / "mario-impala.env").read_text())


@pytest.fixture
def argv_stub(tmp_path):
    """An executable standing in for python: prints its arguments, one per line."""
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    return stub


def _run(command: list[str], env: dict[str, str]) -> list[str]:
    """What `command` (sh -c '... exec PYTHON ...') passes to python."""
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.splitlines()


def _config(cls, argv: list[str], prog: str):
    assert argv[:2] == ["-m", prog], argv
    return config_io.load(cls, argv[2:], prog=prog, description="")


def _unit_command(name: str, instance: str, python: Path) -> list[str]:
    """ExecStart of a unit, with systemd's own substitutions done: %i, %%, $$."""
    exec_start = _settings((SYSTEMD / name).read_text())["ExecStart"]
    exec_start = exec_start.replace("%i", instance).replace("%%", "%").replace("$$", "$")
    return shlex.split(exec_start.replace(f"{INSTALLED}/.venv/bin/python", str(python)))


@pytest.mark.parametrize("with_keys", [True, False])
def test_systemd_commands_give_valid_flags(tmp_path, argv_stub, with_keys):
    keys = tmp_path / "keys"
    make_keys(keys, range(4))
    env = {**_env_file(), "PATH": os.environ["PATH"], "MARIO_KEYS": str(keys) if with_keys else ""}
    if not with_keys:
        env["MARIO_ACTOR_METRICS_BASE"] = "0"

    learner = _config(
        LearnerConfig, _run(_unit_command("mario-learner.service", "", argv_stub), env), "learner"
    )
    assert (learner.run_dir, learner.port, learner.metrics_port) == (env["MARIO_RUN"], 5555, 9000)
    assert learner.curve_dir == (str(keys / "learner") if with_keys else "")

    actor = _config(
        ActorConfig, _run(_unit_command("mario-actor@.service", "3", argv_stub), env), "actor"
    )
    assert (actor.actor_id, actor.learner, actor.level) == (3, "127.0.0.1:5555", "1-1")
    assert actor.metrics_port == (9103 if with_keys else 0)
    assert actor.curve_dir == (str(keys / "actor-3") if with_keys else "")


def _supervisor_env(tmp_path: Path, python: Path, **overrides: str) -> dict[str, str]:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True, exist_ok=True)
    env = {
        "MARIO_PYTHON": str(python),
        "MARIO_RUN": str(run),
        "MARIO_HOST": "127.0.0.1",
        "MARIO_PORT": "5555",
        "MARIO_DEVICE": "auto",
        "MARIO_METRICS_HOST": "127.0.0.1",
        "MARIO_LEARNER_METRICS_PORT": "9000",
        "MARIO_LEARNER_AUTOSTART": "true",
        "MARIO_LEARNER_ARGS": "--batch-chunks 2",
        "MARIO_N": "4",
        "MARIO_FIRST_ACTOR": "0",
        "MARIO_LEARNER": "127.0.0.1:5555",
        "MARIO_ACTOR_METRICS_BASE": "9100",
        "MARIO_ACTOR_ARGS": "--level 1-2 --num-envs 1",
        "MARIO_KEYS": "",
        "MARIO_EVAL_AUTOSTART": "true",
        "MARIO_EVAL_ID": "4",
    }
    return {**env, **overrides}


def _supervisor_programs(monkeypatch, env: dict[str, str]) -> dict:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    options = ServerOptions()  # reads the environment for %(ENV_X)s here
    options.realize(args=["-c", str(SUPERVISORD_CONF)])
    (group,) = options.process_group_configs
    assert group.name == "mario"
    return {p.name: p for p in group.process_configs}


def test_supervisord_config_runs_the_learner_and_n_actors(tmp_path, monkeypatch, argv_stub):
    keys = tmp_path / "keys"
    make_keys(keys, range(16, 19))
    env = _supervisor_env(
        tmp_path, argv_stub, MARIO_FIRST_ACTOR="16", MARIO_N="2", MARIO_EVAL_ID="18"
    )
    env["MARIO_KEYS"] = str(keys)
    programs = _supervisor_programs(monkeypatch, env)
    assert sorted(programs) == ["actor-16", "actor-17", "eval", "learner"]
    for p in programs.values():
        assert p.stopasgroup and p.killasgroup and p.redirect_stderr
        assert p.autorestart and p.exitcodes == [0, 2]  # crashes restart, config errors do not
        assert Path(p.stdout_logfile).parent == tmp_path / "run/logs"
        assert p.stdout_logfile_maxbytes > 0 and p.stdout_logfile_backups > 0
    learner = programs["learner"]
    assert learner.stopwaitsecs >= 60  # room for the final checkpoint
    assert learner.priority < programs["actor-16"].priority
    assert Path(learner.directory).resolve() == ROOT

    run_env = {**env, "PATH": os.environ["PATH"]}
    cfg = _config(LearnerConfig, _run(shlex.split(learner.command), run_env), "learner")
    assert (cfg.run_dir, cfg.batch_chunks, cfg.curve_dir) == (
        env["MARIO_RUN"],
        2,
        f"{keys}/learner",
    )
    cfg = _config(ActorConfig, _run(shlex.split(programs["actor-17"].command), run_env), "actor")
    assert (cfg.actor_id, cfg.metrics_port, cfg.level) == (17, 9117, "1-2")
    assert cfg.curve_dir == f"{keys}/actor-17"
    evaluator = programs["eval"]
    assert evaluator.autostart and evaluator.priority > programs["actor-16"].priority
    cfg = _config(ActorConfig, _run(shlex.split(evaluator.command), run_env), "actor")
    assert (cfg.eval, cfg.actor_id, cfg.metrics_port, cfg.level) == (True, 18, 9118, "1-2")
    assert (cfg.eval_dir, cfg.curve_dir) == (f"{env['MARIO_RUN']}/eval", f"{keys}/actor-18")


def test_supervisord_actors_without_keys_or_metrics(tmp_path, monkeypatch, argv_stub):
    env = _supervisor_env(tmp_path, argv_stub, MARIO_ACTOR_METRICS_BASE="0")
    programs = _supervisor_programs(monkeypatch, env)
    assert sorted(programs) == ["actor-0", "actor-1", "actor-2", "actor-3", "eval", "learner"]
    run_env = {**env, "PATH": os.environ["PATH"]}
    cfg = _config(ActorConfig, _run(shlex.split(programs["actor-2"].command), run_env), "actor")
    assert (cfg.actor_id, cfg.metrics_port, cfg.curve_dir) == (2, 0, "")
    cfg = _config(LearnerConfig, _run(shlex.split(programs["learner"].command), run_env), "learner")
    assert cfg.curve_dir == ""


def _up_actor_args(**settings: object) -> list[str]:
    """The actor flags `make up` hands supervisord, as `make -n` prints them (nothing runs)."""
    venv = Path(sys.executable).parent.parent
    out = subprocess.run(
        ["make", "-n", "up", f"VENV={venv}", *(f"{k}={v}" for k, v in settings.items())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (args,) = re.findall(r"MARIO_ACTOR_ARGS='([^']*)'", out)
    return args.split()


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_up_gives_one_lane_once_actors_learner_and_eval_fill_the_cores(tmp_path):
    cores = os.process_cpu_count() or 1
    run = tmp_path / "run"
    # N = cores - 1 (the default) beside the learner fills every core: the launcher's rule
    assert "--lanes" in _up_actor_args(N=max(2, cores - 1), RUN=run)
    assert "--lanes" not in _up_actor_args(N=1, RUN=run)  # a lone actor keeps two lanes
    if cores > 1:  # the same actors without a learner (nor eval) on this host leave a core spare
        assert "--lanes" not in _up_actor_args(N=cores - 1, RUN=run, LEARNER_AUTOSTART="false")
    if cores > 3:  # the learner and the eval actor take the two cores the actors leave
        assert "--lanes" in _up_actor_args(N=cores - 2, RUN=run)
        assert "--lanes" not in _up_actor_args(N=cores - 2, RUN=run, EVAL="false")
    assert _up_actor_args(N=cores, RUN=run, ACTOR_ARGS="--lanes 2")[-2:] == ["--lanes", "2"]
