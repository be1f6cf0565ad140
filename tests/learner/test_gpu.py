"""learner.gpu: GPU telemetry read from NVML at scrape time, in base units, degrading to a single
log line without NVML (the path every CPU machine takes), and the learner's own GPU found by its
UUID whatever number CUDA_VISIBLE_DEVICES gives it."""

import logging
import shutil
import sys
import types

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from common.metrics import LearnerMetrics
from learner.gpu import GpuCollector, device_uuid
from tests.common.test_metrics import exposition, promtool_check


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

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for i, device in enumerate(self.devices):
            if device[0] == uuid:
                return i
        raise self.NVMLError("Not Found")

    def nvmlDeviceGetIndex(self, h):
        return h

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


@pytest.mark.parametrize("failure", ["init", "import", "count"])
def test_any_nvml_failure_at_creation_returns_none_after_one_line(failure, monkeypatch, caplog):
    fake = FakeNvml(init_error=FakeNvml.NVMLError("NVML Shared Library Not Found"))
    if failure == "import":
        fake = None  # `import pynvml` raises ImportError
    elif failure == "count":
        fake = FakeNvml()
        fake.nvmlDeviceGetCount = lambda: 1 / 0  # a driver that fails after NVML started
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    caplog.set_level(logging.DEBUG)
    assert GpuCollector.create() is None
    lines = disabled_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("GPU metrics disabled: "), lines
    if failure == "count":
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


def test_the_learners_gpu_is_found_by_its_uuid_whatever_cuda_calls_it(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    registry = CollectorRegistry()
    registry.register(GpuCollector.create("GPU-bbbb-2222"))
    assert {gpu for _, gpu in gpu_samples(registry)} == {"1"}  # NVML's index, not CUDA's 0
    caplog.set_level(logging.WARNING)
    registry = CollectorRegistry()
    registry.register(GpuCollector.create("MIG-aaaa-1111"))  # unknown to NVML: every GPU
    assert {gpu for _, gpu in gpu_samples(registry)} == {"0", "1"}
    assert "reporting every GPU" in caplog.records[0].getMessage()


def test_without_cuda_torch_names_no_gpu():
    assert device_uuid("cpu") is None


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not on PATH (Debian/Ubuntu: apt-get install prometheus)",
)
def test_the_learners_exposition_with_gpu_metrics_passes_promtool(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    registry = LearnerMetrics(levels=["1-1"]).registry
    registry.register(GpuCollector.create())
    promtool_check(exposition(registry))
