"""The watcher's judgement of supervisord's process states, fed the states in the order
supervisord reports them (its log written as supervisord writes it); and its status line, read
only from pages its own processes serve."""

from __future__ import annotations

import os

import pytest

from common.metrics import ActorMetrics, add_process_metrics, serve
from common.rundir import RunDir
from scripts.service import watch
from scripts.service.host import Host
from scripts.service.supervisor import Supervisor
from tests import procs


def info(state: str, pid: int, stop: int, exitstatus: int = 0, name: str = "learner") -> dict:
    return {
        "name": name,
        "group": name,
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


# ---- the status line reads only this run's processes ----------------------------------------


def test_the_actors_line_reads_only_the_page_of_the_pid_supervisord_started(tmp_path, capsys):
    metrics = ActorMetrics()  # a real /metrics page on 127.0.0.1, served by this process
    add_process_metrics(metrics.registry, "actor", run_id="default")
    metrics.connected.set(1)
    metrics.chunks_sent.inc(7)
    server = serve(metrics.registry, "127.0.0.1", 0)
    try:
        host = Host(run=str(tmp_path / "run"), actor_metrics_base=server.port, n=1, cores=2,
                    learner_autostart=False, eval=False)  # fmt: skip
        w = watch.Watcher(host.resolved(), Supervisor(host))
        # supervisord's actor-0 is another process: the page on its port is not its own
        w.observe({"actor-0": info("RUNNING", os.getppid(), 0, name="actor-0")})
        assert w.actors_line().startswith("actors 0/1 connected")
        assert "chunks sent 0 " in w.actors_line()
        err = capsys.readouterr().err
        assert err.count("answers for") == 1  # said once, for two lines
        assert (
            f"127.0.0.1:{server.port}/metrics answers for actor pid {os.getpid()}, run id default, "
            f"not for this run's actor-0 (pid {os.getppid()})"
        ) in err
        # once the page is that of the pid supervisord started, it is read
        w.observe({"actor-0": info("RUNNING", os.getpid(), 0, name="actor-0")})
        assert "actors 1/1 connected" in w.actors_line() and "chunks sent 7 " in w.actors_line()
        assert capsys.readouterr().err == ""
    finally:
        server.close()


@pytest.mark.slow
@pytest.mark.integration
def test_the_status_line_leaves_out_another_runs_learner_on_its_metrics_port(tmp_path, capsys):
    port, lport = procs.free_port(2), procs.free_port()
    other = procs.learner(tmp_path / "a", port, lport)  # run a, a real learner
    try:
        procs.wait_until("run a's /metrics", lambda: procs.scrape(lport), 240, [other])
        host = Host(run=str(tmp_path / "b"), learner_metrics_port=lport, actor_metrics_base=0)
        w = watch.Watcher(host.resolved(), Supervisor(host))
        # run b's learner, restarted again and again as it cannot bind the port
        w.observe({"learner": info("STARTING", os.getppid(), 0)})
        assert w.learner_line() is None and w.learner_line() is None
        err = capsys.readouterr().err
        assert err.count("answers for") == 1
        assert (
            f"answers for learner pid {other.popen.pid}, run dir {tmp_path / 'a'}, not for this "
            f"run's learner (pid {os.getppid()})"
        ) in err
        # the same page, were it this run's learner, would make the line
        w.observe({"learner": info("RUNNING", other.popen.pid, 0)})
        assert "updates       0 | policy v0 | actors 0" in (w.learner_line() or "")
    finally:
        other.stop()


def test_the_status_line_shows_the_eval_actors_score_against_the_best_kept(tmp_path):
    """make train's line: the learner's /metrics, with the eval actor's score and best merged in
    from its own, as they are served."""
    from common.metrics import EvalMetrics, LearnerMetrics

    learner, evaluator = LearnerMetrics(), EvalMetrics(levels=["1-1"])
    add_process_metrics(learner.registry, "learner", run_id="default")
    add_process_metrics(evaluator.registry, "eval", run_id="default")
    evaluator.score.set(0.41)
    evaluator.best_score.set(0.88)
    evaluator.best_policy_version.set(12)
    servers = [serve(m.registry, "127.0.0.1", 0) for m in (learner, evaluator)]
    mine = {name: info("RUNNING", os.getpid(), 0, name=name) for name in ("learner", "eval")}
    try:
        host = Host(
            run=str(tmp_path / "run"), learner_metrics_port=servers[0].port, n=1,
            actor_metrics_base=servers[1].port - 1, eval=True,  # its port follows actor 0's
        ).resolved()  # fmt: skip
        w = watch.Watcher(host, Supervisor(host))
        w.observe(mine)
        line = w.learner_line()
        assert line is not None and "| eval below best: 41% vs 88% v12 |" in line
        evaluator.score.set(0.8)
        assert "| eval 80% best 88% v12 |" in w.learner_line()
        off = Host(run=host.run, learner_metrics_port=servers[0].port, eval=False).resolved()
        w_off = watch.Watcher(off, Supervisor(off))
        w_off.observe(mine)
        assert "eval" not in w_off.learner_line()
    finally:
        for server in servers:
            server.close()
