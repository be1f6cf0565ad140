"""learner.gpu: GPU telemetry read from NVML at scrape time, in base units, degrading to a single
log line without NVML (the path every CPU machine takes), and CUDA_VISIBLE_DEVICES mapped to the
NVML indices of the GPUs the learner can use."""

import logging
import shutil
import sys
import types

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from common.metrics import LearnerMetrics
from learner.gpu import (
    GpuCollector,
    map_visible_devices,
    nvml_indices_for_visible_devices,
    parse_visible_devices,
)
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


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not on PATH (Debian/Ubuntu: apt-get install prometheus)",
)
def test_the_learners_exposition_with_gpu_metrics_passes_promtool(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    registry = LearnerMetrics(levels=["1-1"]).registry
    registry.register(GpuCollector.create())
    promtool_check(exposition(registry))
