"""GPU telemetry for the learner's Prometheus registry, read from NVML (never by spawning nvidia-smi).

The metrics (common/metrics.py's GPU_TABLE) are read at scrape time, inside
`GpuCollector.collect()`: an NVML query is a driver call of a few microseconds, so the values
are never stale. The `gpu` label is the NVML index, which ignores CUDA_VISIBLE_DEVICES; the
learner reports the GPU it trains on, found by its UUID (`GpuCollector.create(device_uuid(d))`).

Nothing here raises for lack of a GPU: `create` returns None after one log line, and a read that
fails during a scrape (a GPU fallen off the bus) drops that series and is logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from common.metrics import GPU_TABLE

_log = logging.getLogger(__name__)

# metric name (common/metrics.py's GPU_TABLE) -> read(nvml, handle) -> float
_READS: dict[str, Callable[[Any, Any], float]] = {
    "mario_gpu_utilization_ratio": lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100,
    "mario_gpu_memory_used_bytes": lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).used),
    "mario_gpu_memory_total_bytes": lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).total),
    "mario_gpu_power_watts": lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,  # from mW
}


class GpuCollector(Collector):
    """A custom collector that reads utilization, memory and power per GPU on every scrape."""

    def __init__(self, nvml: ModuleType, handles: Mapping[int, Any], log: logging.Logger = _log):
        self._nvml = nvml
        self._handles = dict(handles)  # NVML index -> device handle
        self._log = log
        self._failed: set[tuple[int, str]] = set()  # (index, metric) already logged

    @classmethod
    def create(cls, uuid: str | None = None, log: logging.Logger = _log) -> GpuCollector | None:
        """Initialise NVML and get a handle for the GPU named `uuid`; every GPU when it is None
        or NVML does not know it (a MIG instance). None, after logging one line, when pynvml or
        the driver is missing or NVML fails in any other way: telemetry never stops training."""
        try:
            import pynvml
        except ImportError as e:
            log.warning("GPU metrics disabled: %s", e)
            return None
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound without a driver, among others
            log.warning("GPU metrics disabled: %s", _reason(e))
            return None
        try:
            handles = _handles(pynvml, uuid, log)
        except Exception as e:
            log.warning("GPU metrics disabled: %s", _reason(e))
            _shutdown(pynvml)
            return None
        log.info("GPU metrics enabled for NVML indices %s", sorted(handles))
        return cls(pynvml, handles, log)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Lets the registry check for name clashes without querying NVML.
        for m in GPU_TABLE:
            yield GaugeMetricFamily(m.name, m.help, labels=list(m.labels))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for m in GPU_TABLE:
            name, read = m.name, _READS[m.name]
            family = GaugeMetricFamily(name, m.help, labels=list(m.labels))
            for index, handle in sorted(self._handles.items()):
                try:
                    value = read(self._nvml, handle)
                except Exception as e:  # a scrape must never fail because of telemetry
                    if (index, name) not in self._failed:
                        self._failed.add((index, name))
                        self._log.warning("%s unavailable for GPU %d: %s", name, index, _reason(e))
                    continue
                family.add_metric([str(index)], value)
            yield family


def _handles(nvml: Any, uuid: str | None, log: logging.Logger) -> dict[int, Any]:
    """{NVML index: handle} of the GPU named `uuid`, else of every GPU."""
    if uuid is not None:
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            return {nvml.nvmlDeviceGetIndex(handle): handle}
        except nvml.NVMLError as e:
            log.warning(
                "NVML does not know the learner's GPU %s (%s); reporting every GPU",
                uuid,
                _reason(e),
            )
    return {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())}


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception as e:
        _log.debug("nvmlShutdown failed: %s", e)


def device_uuid(device: object) -> str | None:
    """NVML's name for the GPU torch calls `device` ("GPU-" + the UUID CUDA reports, whatever
    CUDA_VISIBLE_DEVICES renumbered), or None when torch cannot say."""
    import torch

    try:
        return f"GPU-{torch.cuda.get_device_properties(device).uuid}"
    except (AttributeError, RuntimeError, AssertionError):
        return None
