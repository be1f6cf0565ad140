"""common.metrics and common.gpu: every metric is exposed under its documented name and type, the
exposition passes `promtool check metrics`, the exporter serves over HTTP, GPU telemetry degrades
to a single log line without NVML, and RateWindow's arithmetic holds."""

import logging
import shutil
import subprocess
import sys
import types
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from common.gpu import (
    GpuCollector,
    map_visible_devices,
    nvml_indices_for_visible_devices,
    parse_visible_devices,
)
from common.metrics import (
    ActorMetrics,
    EvalMetrics,
    LearnerMetrics,
    RateWindow,
    add_process_metrics,
    serve,
)

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
}
GPU = ("mario_gpu_utilization_ratio", "mario_gpu_memory_used_bytes")
GPU += ("mario_gpu_memory_total_bytes", "mario_gpu_power_watts")

PROCESSES: list[tuple[str, Callable[[], CollectorRegistry], dict[str, str]]] = [
    ("learner", lambda: LearnerMetrics(levels=["1-1"]).registry, LEARNER),
    ("actor", lambda: ActorMetrics(levels=["1-1"]).registry, ACTOR),
    ("eval", lambda: EvalMetrics(levels=["1-1"]).registry, EVAL),
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
@pytest.mark.parametrize("process", ["learner", "actor", "eval", "gpu", "process"])
def test_exposition_passes_promtool(process, monkeypatch):
    if process == "gpu":
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
        registry = LearnerMetrics(levels=["1-1"]).registry
        registry.register(GpuCollector.create())
    elif process == "process":
        registry = ActorMetrics().registry
        add_process_metrics(registry)
    else:
        registry = {p: make for p, make, _ in PROCESSES}[process]()
    promtool_check(exposition(registry))


# ---------------------------------------------------------------------------------------------
# GPU telemetry
# ---------------------------------------------------------------------------------------------


class FakeNvml(types.ModuleType):
    """Enough of pynvml for GpuCollector: `devices` are (uuid, util %, used, total, milliwatts)."""

    class NVMLError(Exception):
        pass

    def __init__(self, devices=None, init_error=None, broken=()):
        super().__init__("pynvml")
        self.devices = devices or [
            ("GPU-aaaa-1111", 37, 2 * 2**30, 80 * 2**30, 312_500),
            ("GPU-bbbb-2222", 100, 70 * 2**30, 80 * 2**30, 700_000),
        ]
        self.init_error = init_error
        self.broken = set(broken)  # (index, nvml function name) that raise
        self.shutdowns = 0

    def _check(self, index, fn):
        if (index, fn) in self.broken:
            raise self.NVMLError("GPU is lost")

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < len(self.devices):
            raise self.NVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetUUID(self, h):
        return self.devices[h][0]

    def nvmlDeviceGetUtilizationRates(self, h):
        self._check(h, "util")
        return types.SimpleNamespace(gpu=self.devices[h][1], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h):
        self._check(h, "memory")
        return types.SimpleNamespace(used=self.devices[h][2], total=self.devices[h][3])

    def nvmlDeviceGetPowerUsage(self, h):
        self._check(h, "power")
        return self.devices[h][4]


def gpu_samples(registry) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels["gpu"]): s.value
        for f in text_string_to_metric_families(exposition(registry))
        if f.name.startswith("mario_gpu_")
        for s in f.samples
    }


def disabled_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_without_nvml_gpu_metrics_are_off_after_one_log_line(caplog):
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML; the fake-NVML tests cover the failure path")
    caplog.set_level(logging.DEBUG)
    metrics = LearnerMetrics()
    assert GpuCollector.create() is None
    lines = disabled_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("GPU metrics disabled: "), lines
    assert "mario_gpu_" not in exposition(metrics.registry)


@pytest.mark.parametrize("failure", ["init", "import", "bad index"])
def test_any_nvml_failure_at_creation_returns_none_after_one_line(failure, monkeypatch, caplog):
    fake = FakeNvml(init_error=FakeNvml.NVMLError("NVML Shared Library Not Found"))
    if failure == "import":
        fake = None  # `import pynvml` raises ImportError
    elif failure == "bad index":
        fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    caplog.set_level(logging.DEBUG)
    assert GpuCollector.create(indices=[0, 5] if failure == "bad index" else None) is None
    lines = disabled_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("GPU metrics disabled: "), lines
    if failure == "bad index":
        assert fake.shutdowns == 1  # NVML was initialised, so it is released


def test_gpu_metrics_are_read_at_scrape_time_in_base_units(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    registry = CollectorRegistry()
    registry.register(GpuCollector.create())
    got = gpu_samples(registry)
    assert got[("mario_gpu_utilization_ratio", "0")] == pytest.approx(0.37)
    assert got[("mario_gpu_utilization_ratio", "1")] == 1.0
    assert got[("mario_gpu_memory_used_bytes", "1")] == 70 * 2**30
    assert got[("mario_gpu_memory_total_bytes", "0")] == 80 * 2**30
    assert got[("mario_gpu_power_watts", "0")] == pytest.approx(312.5)

    fake.devices[0] = ("GPU-aaaa-1111", 5, 0, 80 * 2**30, 60_000)
    assert gpu_samples(registry)[("mario_gpu_utilization_ratio", "0")] == pytest.approx(0.05)


def test_only_the_requested_gpus_are_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    registry = CollectorRegistry()
    registry.register(GpuCollector.create(indices=[1]))
    assert {gpu for _, gpu in gpu_samples(registry)} == {"1"}


def test_a_failing_read_drops_that_series_and_is_logged_once(monkeypatch, caplog):
    fake = FakeNvml(broken={(1, "power")})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    registry = CollectorRegistry()
    registry.register(GpuCollector.create())
    caplog.clear()
    for _ in range(3):
        got = gpu_samples(registry)
    assert ("mario_gpu_power_watts", "1") not in got
    assert ("mario_gpu_power_watts", "0") in got
    assert ("mario_gpu_memory_used_bytes", "1") in got
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "mario_gpu_power_watts" in warnings[0].getMessage()


# ---------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES -> NVML indices
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),  # unset: every GPU
        ("", []),
        ("0", [0]),
        ("2,0", [2, 0]),
        (" 1 , 3 ", [1, 3]),
        ("-1", []),
        ("0,-1,1", [0]),  # CUDA stops at the first invalid entry
        ("1,1", [1]),
    ],
)
def test_integer_visible_devices_need_no_nvml(value, expected, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # would raise if NVML were needed
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert nvml_indices_for_visible_devices() == expected


DEVICES = [(0, "GPU-aaaa-1111"), (1, "GPU-bbbb-2222"), (2, "GPU-bbbc-3333")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("GPU-bbbb-2222", [1]),
        ("GPU-bbbc,GPU-a", [2, 0]),  # a unique prefix is enough
        ("GPU-bbb", []),  # ambiguous prefix
        ("GPU-bbbb-2222,0", [1, 0]),
        ("0,GPU-ffff,1", [0]),  # unknown UUID ends the list
        ("MIG-aaaa-1111", []),
        ("1,7", [1]),  # no such index
    ],
)
def test_uuid_visible_devices_map_to_nvml_indices(value, expected):
    assert map_visible_devices(parse_visible_devices(value), DEVICES) == expected


def test_uuid_visible_devices_are_resolved_through_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")
    assert nvml_indices_for_visible_devices() == [1]
    assert fake.shutdowns == 1
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_error=FakeNvml.NVMLError("no")))
    assert nvml_indices_for_visible_devices() is None  # unknown: report whatever NVML can


# ---------------------------------------------------------------------------------------------
# Exporter
# ---------------------------------------------------------------------------------------------


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
