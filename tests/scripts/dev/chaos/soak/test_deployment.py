"""The deployment's exit records: supervisord's log read back, rotated files too."""

from __future__ import annotations

from scripts.dev.chaos.soak.deployment import Deployment
from scripts.service.supervisor import Exit


def test_every_exit_supervisord_logged_is_read_back(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "supervisord.log.1").write_text(
        "2026-11-26 12:45:51,213 WARN exited: actor-1 (terminated by SIGKILL; not expected)\n"
    )
    (logs / "supervisord.log").write_text(
        "2026-11-26 12:46:13,256 WARN exited: learner (terminated by SIGKILL; not expected)\n"
        "2026-11-26 12:46:14,000 INFO exited: actor-0 (exit status 0; expected)\n"
        "2026-11-26 12:46:15,000 WARN exited: actor-0 (exit status 3; not expected)\n"
        "2026-11-26 12:46:16,000 WARN exited: eval (terminated by SIGSEGV (core dumped); not "
        "expected)\n"
        "2026-11-26 12:46:17,000 INFO gave up: actor-0 entered FATAL state, too many start retries\n"
        "2026-11-26 12:46:18,000 INFO spawned: 'actor-0' with pid 4242\n"
    )
    exits = Deployment(tmp_path, 2).supervisor.exits()
    assert sorted(exits) == sorted([
        Exit("actor-1", "terminated by SIGKILL", False),
        Exit("learner", "terminated by SIGKILL", False),
        Exit("actor-0", "exit status 0", True),
        Exit("actor-0", "exit status 3", False),
        Exit("eval", "terminated by SIGSEGV (core dumped)", False),
        Exit("actor-0", "gave up", False),
    ])  # fmt: skip
