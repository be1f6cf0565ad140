"""common.metrics: every metric is exposed under its documented name and type, the exposition
passes `promtool check metrics`, the exporter serves over HTTP, and RateWindow's arithmetic holds."""

import os
import shutil
import subprocess
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from common import status
from common.metrics import (
    ActorMetrics,
    EvalMetrics,
    LearnerMetrics,
    RelayMetrics,
    add_process_metrics,
    serve,
)
from common.rates import RateWindow

LEARNER = {
    "mario_learner_updates_total": "counter",
    "mario_learner_env_frames_total": "counter",
    "mario_learner_run_env_frames": "gauge",
    "mario_learner_agent_steps_total": "counter",
    "mario_learner_samples_total": "counter",
    "mario_learner_agent_steps_per_second": "gauge",
    "mario_learner_samples_per_second": "gauge",
    "mario_policy_version": "gauge",
    "mario_policy_lag_updates": "histogram",
    "mario_learner_chunks_total": "counter",
    "mario_learner_messages_rejected_total": "counter",
    "mario_learner_ingest_queue_depth": "gauge",
    "mario_learner_ingest_queue_capacity": "gauge",
    "mario_chunk_latency_seconds": "histogram",
    "mario_learner_update_seconds": "histogram",
    "mario_learner_batch_chunks": "histogram",
    "mario_learner_wait_seconds_total": "counter",
    "mario_learner_compute_seconds_total": "counter",
    "mario_learner_loss": "gauge",
    "mario_learner_grad_norm": "gauge",
    "mario_learner_entropy": "gauge",
    "mario_episode_return": "histogram",
    "mario_episode_max_x": "histogram",
    "mario_episode_length_steps": "histogram",
    "mario_episodes_total": "counter",
    "mario_actors_connected": "gauge",
    "mario_weights_broadcast_bytes_total": "counter",
    "mario_weights_broadcasts_total": "counter",
    "mario_weights_publish_cpu_seconds_total": "counter",
    "mario_learner_ingest_bytes_total": "counter",
    "mario_replay_size_sequences": "gauge",
    "mario_replay_capacity_sequences": "gauge",
    "mario_replay_sample_insert_ratio": "gauge",
    "mario_replay_priority": "gauge",
    "mario_replay_sample_seconds": "histogram",
    "mario_replay_skipped_total": "counter",
    "mario_learner_checkpoints_total": "counter",
    "mario_learner_last_checkpoint_timestamp_seconds": "gauge",
    "mario_learner_start_time_seconds": "gauge",
    "mario_build_info": "gauge",
}
ACTOR = {
    "mario_actor_env_frames_total": "counter",
    "mario_actor_agent_steps_total": "counter",
    "mario_actor_agent_steps_per_second": "gauge",
    "mario_actor_env_build_seconds": "histogram",
    "mario_actor_env_build_failures_total": "counter",
    "mario_actor_inference_seconds_total": "counter",
    "mario_actor_step_seconds_total": "counter",
    "mario_actor_flow_control_wait_seconds_total": "counter",
    "mario_actor_policy_version": "gauge",
    "mario_actor_episodes_total": "counter",
    "mario_actor_chunks_sent_total": "counter",
    "mario_actor_reconnects_total": "counter",
    "mario_actor_credits": "gauge",
    "mario_actor_connected": "gauge",
}
EVAL = {
    "mario_eval_max_x": "gauge",
    "mario_eval_median_max_x": "gauge",
    "mario_eval_flag_rate": "gauge",
    "mario_eval_return": "gauge",
    "mario_eval_episodes_total": "counter",
    "mario_eval_policy_version": "gauge",
    "mario_eval_best_max_x": "gauge",
    "mario_eval_progress": "gauge",
    "mario_eval_score": "gauge",
    "mario_eval_best_score": "gauge",
    "mario_eval_best_policy_version": "gauge",
    "mario_eval_bests_total": "counter",
}
RELAY = {
    "mario_relay_weights_total": "counter",
    "mario_relay_weights_bytes_total": "counter",
    "mario_relay_dropped_total": "counter",
    "mario_relay_policy_version": "gauge",
    "mario_relay_last_weights_timestamp_seconds": "gauge",
}

PROCESSES: list[tuple[str, Callable[[], CollectorRegistry], dict[str, str]]] = [
    ("learner", lambda: LearnerMetrics(levels=["1-1"]).registry, LEARNER),
    ("actor", lambda: ActorMetrics(levels=["1-1"]).registry, ACTOR),
    ("eval", lambda: EvalMetrics(levels=["1-1"]).registry, EVAL),
    ("relay", lambda: RelayMetrics().registry, RELAY),
]


def exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def exposed_types(text: str) -> dict[str, str]:
    """{sample or family name: family type}; a counter's samples carry the `_total` suffix."""
    out = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = family.type
        for sample in family.samples:
            out.setdefault(sample.name, family.type)
    return out


# ---------------------------------------------------------------------------------------------
# Names and types
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("process", "make", "required"), PROCESSES, ids=[p[0] for p in PROCESSES])
def test_every_required_metric_is_exposed_with_its_type(process, make, required):
    exposed = exposed_types(exposition(make()))
    missing = sorted(set(required) - set(exposed))
    assert not missing, f"{process} does not expose {missing}"
    wrong = {n: (exposed[n], t) for n, t in required.items() if exposed[n] != t}
    assert not wrong, f"{process}: (exposed, expected) types differ: {wrong}"


@pytest.mark.parametrize(("process", "make", "required"), PROCESSES, ids=[p[0] for p in PROCESSES])
def test_names_follow_the_conventions(process, make, required):
    for family in text_string_to_metric_families(exposition(make())):
        assert family.name.startswith("mario_"), family.name
        assert family.documentation, f"{family.name} has no help text"
        if family.type == "counter":
            for sample in family.samples:
                assert sample.name.endswith("_total"), sample.name


def test_several_registries_live_in_one_process():
    a, b = LearnerMetrics(), LearnerMetrics()
    a.updates.inc(3)
    assert b.registry.get_sample_value("mario_learner_updates_total") == 0
    assert a.registry.get_sample_value("mario_learner_updates_total") == 3


def test_known_label_values_exist_before_their_first_increment():
    r = LearnerMetrics(levels=["1-2"]).registry
    for result in ("accepted", "stale", "rejected"):
        assert r.get_sample_value("mario_learner_chunks_total", {"result": result}) == 0
    for reason in ("decode", "spec", "unknown_actor", "auth", "other"):
        assert r.get_sample_value("mario_learner_messages_rejected_total", {"reason": reason}) == 0
    labels = {"level": "1-2", "outcome": "no_progress"}
    assert r.get_sample_value("mario_episodes_total", labels) == 0
    assert r.get_sample_value("mario_episode_max_x_count", {"level": "1-2"}) == 0
    e = EvalMetrics(levels=["1-2"]).registry
    for policy in ("greedy", "sampled"):
        labels = {"level": "1-2", "policy": policy}
        assert e.get_sample_value("mario_eval_episodes_total", labels) == 0
        assert e.get_sample_value("mario_eval_median_max_x", labels) == 0


def test_helpers_keep_label_values_in_their_closed_sets():
    m = LearnerMetrics()
    m.reject("decode")
    m.reject("some new failure")
    m.observe_episode("1-1", "flag", episode_return=3010.0, max_x=3161, length_steps=700)
    m.observe_episode("1-1", "eaten by a goomba", episode_return=-15.0, max_x=320, length_steps=90)
    r = m.registry
    assert r.get_sample_value("mario_learner_messages_rejected_total", {"reason": "decode"}) == 1
    assert r.get_sample_value("mario_learner_messages_rejected_total", {"reason": "other"}) == 1
    assert r.get_sample_value("mario_episodes_total", {"level": "1-1", "outcome": "flag"}) == 1
    assert r.get_sample_value("mario_episodes_total", {"level": "1-1", "outcome": "other"}) == 1
    # 3161 is past the 3100 bucket: that bucket counts only the episode that fell short.
    assert r.get_sample_value("mario_episode_max_x_bucket", {"level": "1-1", "le": "3100.0"}) == 1
    assert r.get_sample_value("mario_episode_max_x_bucket", {"level": "1-1", "le": "3300.0"}) == 2

    a = ActorMetrics()
    a.count_episode("1-1", "death")
    a.count_episode("1-1", "???")
    assert a.registry.get_sample_value(
        "mario_actor_episodes_total", {"level": "1-1", "outcome": "other"}
    )


# ---------------------------------------------------------------------------------------------
# promtool
# ---------------------------------------------------------------------------------------------


def promtool_check(text: str) -> None:
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    output = (result.stdout + result.stderr).decode()
    print(output)
    assert result.returncode == 0, output


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not on PATH (Debian/Ubuntu: apt-get install prometheus)",
)
@pytest.mark.parametrize("process", ["learner", "actor", "eval", "process"])
def test_exposition_passes_promtool(process):
    if process == "process":
        registry = ActorMetrics().registry
        add_process_metrics(registry, "actor", run_id="default")
    else:
        registry = {p: make for p, make, _ in PROCESSES}[process]()
    promtool_check(exposition(registry))


# ---------------------------------------------------------------------------------------------
# Exporter
# ---------------------------------------------------------------------------------------------


def test_every_page_says_whose_it_is_and_a_reader_finds_its_owner():
    metrics = ActorMetrics()
    add_process_metrics(metrics.registry, "learner", run_id="r1", run_dir="/runs/a,b")
    server = serve(metrics.registry, "127.0.0.1", 0)
    try:
        page = status.read_page(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
    assert page is not None
    assert page.owner == status.Owner("learner", os.getpid(), "r1", "/runs/a,b")
    assert "mario_actor_chunks_sent_total" in page.samples
    assert status.read_page(f"http://127.0.0.1:{server.port}/metrics", timeout_s=0.5) is None
    bare = ActorMetrics()  # a page without the info: no owner
    server = serve(bare.registry, "127.0.0.1", 0)
    try:
        assert status.read_page(f"http://127.0.0.1:{server.port}/metrics").owner is None
    finally:
        server.close()


def test_serve_on_port_0_exposes_the_registry_over_http():
    metrics = ActorMetrics()
    metrics.chunks_sent.inc(7)
    server = serve(metrics.registry, "127.0.0.1", 0)
    try:
        assert server.port > 0
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
        assert "mario_actor_chunks_sent_total 7.0" in body
    finally:
        server.close()
    assert not server.thread.is_alive()


# ---------------------------------------------------------------------------------------------
# RateWindow
# ---------------------------------------------------------------------------------------------


def test_rate_window_divides_by_the_elapsed_time_until_the_window_is_full():
    w = RateWindow(10.0, now=100.0)
    assert w.rate(now=100.0) == 0.0
    w.add(50, now=105.0)
    assert w.rate(now=105.0) == pytest.approx(10.0)  # 50 events in 5 s
    w.add(50, now=110.0)
    assert w.rate(now=110.0) == pytest.approx(10.0)  # 100 in 10 s
    assert w.rate(now=114.0) == pytest.approx(10.0)  # window (104, 114]
    assert w.rate(now=115.0) == pytest.approx(5.0)  # the count at 105 has left the window
    assert w.rate(now=120.0) == 0.0


def test_rate_window_memory_is_bounded_and_the_rate_exact_at_a_steady_rate():
    w = RateWindow(5.0, now=0.0)
    for i in range(1, 20_001):  # 1,000 events/s for 20 s, one add per millisecond
        w.add(1, now=i / 1000)
    assert len(w._slots) <= 101
    assert w.rate(now=20.0) == pytest.approx(1000.0, rel=0.02)


def test_rate_window_uses_the_monotonic_clock_by_default():
    w = RateWindow(30.0)
    w.add(10)
    assert w.rate() > 0


def test_rate_window_rejects_an_empty_window():
    with pytest.raises(ValueError, match="window_s"):
        RateWindow(0)
