"""deploy/systemd and deploy/supervisord: the files load cleanly in their own tools, and each
process is started by scripts/service (tests/scripts/service/test_commands.py renders what it
starts them with)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from supervisor.options import ServerOptions

from scripts.checkout import ROOT
from scripts.service.host import Host, argv_for
from scripts.service.supervisor import Supervisor

SYSTEMD = ROOT / "deploy/systemd"
SUPERVISORD_CONF = ROOT / "deploy/supervisord/mario-impala.conf"
UNITS = [
    "mario-learner.service",
    "mario-actor@.service",
    "mario-eval.service",
    "mario-relay.service",
    "mario-impala.target",
]
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


def _supervisor_programs(monkeypatch, tmp_path: Path, **settings: object) -> dict:
    """supervisord's view of its programs, started as scripts/service starts it."""
    host = Host(run=str(tmp_path / "run"), **settings).resolved()
    (tmp_path / "run" / "logs").mkdir(parents=True, exist_ok=True)
    for k, v in Supervisor(host).env.items():
        monkeypatch.setenv(k, v)
    options = ServerOptions()  # reads the environment for %(ENV_X)s here
    options.realize(args=["-c", str(SUPERVISORD_CONF)])
    (group,) = options.process_group_configs
    assert group.name == "mario"
    return {p.name: p for p in group.process_configs}


def test_supervisord_config_runs_the_learner_n_actors_and_the_eval_actor(tmp_path, monkeypatch):
    programs = _supervisor_programs(monkeypatch, tmp_path, first_actor=16, n=2)
    assert sorted(programs) == ["actor-16", "actor-17", "eval", "learner", "relay"]
    assert not programs["relay"].autostart  # the learner is here: no relay
    for p in programs.values():
        assert p.autostart or p.name == "relay"
        assert p.stopasgroup and p.killasgroup and p.redirect_stderr
        assert p.autorestart and p.exitcodes == [0, 2]  # crashes restart, config errors do not
        assert Path(p.stdout_logfile).parent == tmp_path / "run/logs"
        assert p.stdout_logfile_maxbytes > 0 and p.stdout_logfile_backups > 0
        assert Path(p.directory).resolve() == ROOT
    learner = programs["learner"]
    assert learner.stopwaitsecs >= 60  # room for the final checkpoint
    relay = programs["relay"]
    assert (
        learner.priority
        < relay.priority
        < programs["actor-16"].priority
        < programs["eval"].priority
    )
    for name, p in programs.items():  # each runs the one command line of scripts/service
        role, _, actor_id = name.partition("-")
        assert p.command == f"{sys.executable} -m scripts.service exec {role} {actor_id}".strip()


def test_supervisord_without_the_learner_and_the_eval_actor(tmp_path, monkeypatch):
    programs = _supervisor_programs(monkeypatch, tmp_path, n=3, learner_autostart=False, eval=False)
    assert [name for name, p in programs.items() if p.autostart] == [
        "actor-0",
        "actor-1",
        "actor-2",
    ]


def test_an_actor_host_of_a_remote_learner_runs_a_relay_its_actors_subscribe_to(
    tmp_path, monkeypatch
):
    settings = dict(n=3, learner_autostart=False, eval=False, learner="10.0.0.5:5555", port=5555)
    programs = _supervisor_programs(monkeypatch, tmp_path, **settings)
    assert [name for name, p in programs.items() if p.autostart] == [
        "relay",
        "actor-0",
        "actor-1",
        "actor-2",
    ]
    h = Host(run=str(tmp_path / "run"), **settings).resolved()
    relay = argv_for(h, "relay")
    assert relay[relay.index("--learner") + 1] == "10.0.0.5:5555"
    assert relay[relay.index("--bind") + 1] == "127.0.0.1:5557"
    actor = argv_for(h, "actor", 1)
    assert actor[actor.index("--weights-from") + 1] == "127.0.0.1:5557"
    # one actor, or a learner on this host, needs no relay; MARIO_RELAY decides when set
    assert not Host(**{**settings, "n": 1}).resolved().relay
    assert not Host(**{**settings, "learner": "127.0.0.1:5555"}).resolved().relay
    assert Host(**{**settings, "learner": "127.0.0.1:5555", "relay": True}).resolved().relay
    assert "--weights-from" not in argv_for(
        Host(**{**settings, "relay": False}).resolved(), "actor", 0
    )


def _env_file() -> dict[str, str]:
    lines = (SYSTEMD / "mario-impala.env").read_text().splitlines()
    return dict(ln.split("=", 1) for ln in lines if "=" in ln and not ln.startswith("#"))


def test_the_env_file_repeats_no_default_but_the_paths_systemd_needs():
    """One value per setting, written once (scripts/service/host.py): a setting the env file
    gives is the default itself or one of the paths the units' sandbox needs."""
    paths = {"MARIO_RUN", "MARIO_TARGETS"}  # under /var/lib/mario-impala
    for cores in (1, 64):  # a default that depends on the host (N) must be left empty
        defaults = Host(cores=cores).resolved().environ()
        given = {k: v for k, v in _env_file().items() if v and k not in paths}
        assert {k: v for k, v in given.items() if defaults[k] != v} == {}, f"{cores} cores"


def test_the_actor_unit_writes_the_prometheus_targets_where_it_may(tmp_path):
    """Under systemd nothing else writes them: each actor unit does as it starts, into the env
    file's MARIO_TARGETS, the one directory its sandbox lets it write."""
    unit = _settings((SYSTEMD / "mario-actor@.service").read_text())
    assert "ExecStartPre" in unit, "the actor unit writes no Prometheus targets"
    env_file = _env_file()
    assert Path(env_file["MARIO_TARGETS"]) == Path("/var/lib") / unit["StateDirectory"]
    command = unit["ExecStartPre"].replace(f"{INSTALLED}/.venv/bin/python", sys.executable)
    written = tmp_path / "targets"
    env = {"PATH": "/usr/bin:/bin", **env_file, "MARIO_N": "3", "MARIO_FIRST_ACTOR": "16"}
    env |= {"MARIO_TARGETS": str(written), "MARIO_RUN": str(tmp_path / "run")}
    subprocess.run(shlex.split(command), cwd=ROOT, env=env, check=True, timeout=120)
    lists = {p.name.split("-")[0]: json.loads(p.read_text()) for p in written.iterdir()}
    assert sorted(lists) == ["actors", "eval", "learner"]  # the learner runs on this host
    assert [(t["targets"], t["labels"]["actor_id"]) for t in lists["actors"]] == [
        ([f"127.0.0.1:{9100 + i}"], str(i)) for i in (16, 17, 18)
    ]
    (evaluator,) = lists["eval"]
    assert evaluator["targets"] == ["127.0.0.1:9119"]  # the port after the last actor's
    assert [t["targets"] for t in lists["learner"]] == [["127.0.0.1:9000"]]
