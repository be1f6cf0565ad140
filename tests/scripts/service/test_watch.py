"""The watcher's judgement of supervisord's process states, fed the states in the order
supervisord reports them (its log written as supervisord writes it)."""

from __future__ import annotations

from common.rundir import RunDir
from scripts.service import watch
from scripts.service.host import Host
from scripts.service.supervisor import Supervisor


def info(state: str, pid: int, stop: int, exitstatus: int = 0) -> dict:
    return {
        "name": "learner",
        "group": "learner",
        "statename": state,
        "pid": pid,
        "start": 1,
        "stop": stop,
        "exitstatus": exitstatus,
        "stdout_logfile": "learner.log",
    }


def watcher(tmp_path) -> watch.Watcher:
    host = Host(run=str(tmp_path / "run"))
    run = RunDir(host.run)
    run.logs.mkdir(parents=True)
    (run.logs / "supervisord.log").write_text(
        "2026-11-27 02:41:03,604 WARN exited: learner (terminated by SIGKILL; not expected)\n"
    )
    return watch.Watcher(host, Supervisor(host))


def test_the_moment_between_an_exit_and_its_restart_is_not_the_end_of_the_run(tmp_path, capsys):
    w = watcher(tmp_path)
    assert w.observe({"learner": info("RUNNING", 10, 0)}) is None
    # supervisord shows EXITED until its next tick restarts the process: not final yet
    assert w.observe({"learner": info("EXITED", 0, 5, -9)}) is None
    assert capsys.readouterr().err == ""
    assert w.observe({"learner": info("STARTING", 11, 5)}) is None
    err = capsys.readouterr().err
    assert "learner exited (terminated by SIGKILL; not expected); supervisord restarted it" in err
    assert w.restarts == {"learner": 1}
    assert w.observe({"learner": info("RUNNING", 11, 5)}) is None
    assert capsys.readouterr().err == ""  # one exit, reported once


def test_an_exit_that_stays_exited_ends_the_run_with_its_status(tmp_path, capsys, monkeypatch):
    w = watcher(tmp_path)
    assert w.observe({"learner": info("RUNNING", 10, 0)}) is None
    assert w.observe({"learner": info("EXITED", 0, 5, 3)}) is None  # not settled yet
    monkeypatch.setattr(watch, "SETTLE_S", 0.0)
    assert w.observe({"learner": info("EXITED", 0, 5, 3)}) == 3
    assert "learner exited (terminated by SIGKILL; not expected); not restarted" in (
        capsys.readouterr().err
    )


def test_a_learner_that_finishes_the_run_ends_it_with_status_0(tmp_path, capsys, monkeypatch):
    w = watcher(tmp_path)
    (RunDir(w.host.run).logs / "supervisord.log").write_text(
        "2026-11-27 02:41:03,604 INFO exited: learner (exit status 0; expected)\n"
    )
    monkeypatch.setattr(watch, "SETTLE_S", 0.0)
    assert w.observe({"learner": info("RUNNING", 10, 0)}) is None
    assert w.observe({"learner": info("EXITED", 0, 5, 0)}) == 0
    err = capsys.readouterr().err
    assert "learner exited (exit status 0; expected); not restarted" in err
    assert "the learner has finished the run" in err


def test_a_learner_that_gave_up_after_quick_exits_ends_the_run_with_a_failure(
    tmp_path, monkeypatch
):
    w = watcher(tmp_path)
    monkeypatch.setattr(watch, "SETTLE_S", 0.0)
    assert w.observe({"learner": info("RUNNING", 10, 0)}) is None
    # supervisord's FATAL after exits within startsecs keeps no exit status (0)
    assert w.observe({"learner": info("FATAL", 0, 5, 0)}) == 1


def test_a_learner_that_finishes_within_startsecs_ends_the_run_and_is_not_retried(tmp_path, capsys):
    w = watcher(tmp_path)
    # an exit within startsecs is a failed start to supervisord, whatever its status: BACKOFF
    (RunDir(w.host.run).logs / "supervisord.log").write_text(
        "2026-11-30 05:39:13,900 WARN exited: learner (exit status 0; not expected)\n"
    )
    assert w.observe({"learner": info("STARTING", 10, 0)}) is None
    assert w.observe({"learner": info("BACKOFF", 0, 5, 0)}) == 0
    err = capsys.readouterr().err
    assert "learner exited (exit status 0; not expected); not restarted" in err
    assert "the learner has finished the run" in err
    # a retry that supervisord began before the stop reached it is not the run's verdict
    assert w.observe({"learner": info("STARTING", 11, 5)}) == 0
    assert w.observe({"learner": info("EXITED", 0, 6, 2)}) == 0
    assert "refused" not in capsys.readouterr().err


def test_the_status_line_shows_the_eval_actors_score_against_the_best_kept(tmp_path):
    """make train's line: the learner's /metrics, with the eval actor's score and best merged in
    from its own, as they are served."""
    from common.metrics import EvalMetrics, LearnerMetrics, serve

    learner, evaluator = LearnerMetrics(), EvalMetrics(levels=["1-1"])
    evaluator.score.set(0.41)
    evaluator.best_score.set(0.88)
    evaluator.best_policy_version.set(12)
    servers = [serve(m.registry, "127.0.0.1", 0) for m in (learner, evaluator)]
    try:
        host = Host(
            run=str(tmp_path / "run"), learner_metrics_port=servers[0].port, n=1,
            actor_metrics_base=servers[1].port - 1, eval=True,  # the eval actor is id n
        )  # fmt: skip
        line = watch.Watcher(host, Supervisor(host)).learner_line()
        assert line is not None and "| eval below best: 41% vs 88% v12 |" in line
        evaluator.score.set(0.8)
        assert "| eval 80% best 88% v12 |" in watch.Watcher(host, Supervisor(host)).learner_line()
        off = Host(run=host.run, learner_metrics_port=servers[0].port, eval=False)
        assert "eval" not in watch.Watcher(off, Supervisor(off)).learner_line()
    finally:
        for server in servers:
            server.close()
