"""GPU telemetry for the learner's Prometheus registry, read from NVML (never by spawning nvidia-smi).

Training-loop numbers are set by the loops as they run; GPU numbers are instead read from NVML at
scrape time, inside `GpuCollector.collect()`. An NVML query is a driver call of a few
microseconds, so reading on each scrape costs nothing and the values are never stale.

    mario_gpu_utilization_ratio{gpu}    share of the last sample period a kernel ran, 0-1
    mario_gpu_memory_used_bytes{gpu}    device memory in use, by any process
    mario_gpu_memory_total_bytes{gpu}   device memory installed
    mario_gpu_power_watts{gpu}          board power draw

The `gpu` label is the NVML index, which ignores CUDA_VISIBLE_DEVICES: use
`nvml_indices_for_visible_devices()` to report only the GPUs this process can use.

    gpu = GpuCollector.create(nvml_indices_for_visible_devices())
    if gpu is not None:
        registry.register(gpu)

Nothing here raises for lack of a GPU: `create` returns None after one log line, and a read that
fails during a scrape (a GPU fallen off the bus) drops that series and is logged once.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_log = logging.getLogger(__name__)

# name -> (help, read(nvml, handle) -> float)
_READS: dict[str, tuple[str, Callable[[Any, Any], float]]] = {
    "mario_gpu_utilization_ratio": (
        "Share of the last NVML sample period during which a kernel ran on the GPU (0-1).",
        lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0,
    ),
    "mario_gpu_memory_used_bytes": (
        "GPU memory in use, by any process.",
        lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).used),
    ),
    "mario_gpu_memory_total_bytes": (
        "GPU memory installed.",
        lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).total),
    ),
    "mario_gpu_power_watts": (
        "GPU board power draw.",
        lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,  # NVML reports milliwatts
    ),
}


class GpuCollector(Collector):
    """A custom collector that reads utilization, memory and power per GPU on every scrape."""

    def __init__(self, nvml: ModuleType, handles: Mapping[int, Any], log: logging.Logger = _log):
        self._nvml = nvml
        self._handles = dict(handles)  # NVML index -> device handle
        self._log = log
        self._failed: set[tuple[int, str]] = set()  # (index, metric) already logged

    @classmethod
    def create(
        cls, indices: Sequence[int] | None = None, log: logging.Logger = _log
    ) -> GpuCollector | None:
        """Initialise NVML and get a handle per GPU (`indices` are NVML indices; None: all).

        Returns None, after logging one line, when pynvml or the driver is missing, an index is
        out of range, or NVML fails in any other way: missing telemetry must never stop training.
        """
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
            if indices is None:
                indices = range(pynvml.nvmlDeviceGetCount())
            handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
        except Exception as e:
            log.warning("GPU metrics disabled: %s", _reason(e))
            _shutdown(pynvml)
            return None
        log.info("GPU metrics enabled for NVML indices %s", sorted(handles))
        return cls(pynvml, handles, log)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Lets the registry check for name clashes without querying NVML.
        for name, (help_text, _) in _READS.items():
            yield GaugeMetricFamily(name, help_text, labels=["gpu"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, (help_text, read) in _READS.items():
            family = GaugeMetricFamily(name, help_text, labels=["gpu"])
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


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception as e:
        _log.debug("nvmlShutdown failed: %s", e)


# ---------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES -> NVML indices
# ---------------------------------------------------------------------------------------------

_INT = re.compile(r"^\d+$")


def parse_visible_devices(value: str | None) -> list[str] | None:
    """The entries of a CUDA_VISIBLE_DEVICES value; None when it is unset (every GPU visible)."""
    if value is None:
        return None
    return [e.strip() for e in value.split(",") if e.strip()]


def map_visible_devices(entries: Sequence[str], devices: Sequence[tuple[int, str]]) -> list[int]:
    """NVML indices of CUDA_VISIBLE_DEVICES `entries`, given `devices` as (NVML index, UUID) pairs.

    Entries are integers or GPU UUIDs ("GPU-8f6c...", a unique prefix is enough), as CUDA accepts.
    Like CUDA, the list ends at the first entry that names no device ("-1" hides every GPU).
    MIG instances ("MIG-...") end it too: NVML reports their parent GPU differently.
    Integers map to NVML indices directly, which holds when CUDA_DEVICE_ORDER=PCI_BUS_ID or the
    GPUs are all the same model (CUDA's default order is fastest first, NVML's is PCI bus order).
    """
    known = {index for index, _ in devices}
    out: list[int] = []
    for entry in entries:
        if _INT.match(entry):
            index = int(entry)
            if index not in known:
                break
        else:
            matches = [
                i for i, uuid in devices if entry.startswith("GPU-") and uuid.startswith(entry)
            ]
            if len(matches) != 1:
                break
            index = matches[0]
        if index in out:
            break  # CUDA rejects a repeated device the same way
        out.append(index)
    return out


def nvml_indices_for_visible_devices(environ: Mapping[str, str] | None = None) -> list[int] | None:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES leaves visible; None (all) when it is unset.

    Only UUID entries need NVML to resolve; if it is unavailable the answer is None (all), and
    `GpuCollector.create` will then report why GPU metrics are off.
    """
    env = os.environ if environ is None else environ
    entries = parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if entries is None:
        return None
    if not any(e.startswith("GPU-") for e in entries):
        # Integers only: no NVML needed (an index past the last GPU is caught by `create`).
        return map_visible_devices(entries, [(int(e), "") for e in entries if _INT.match(e)])
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:
        _log.debug("cannot resolve CUDA_VISIBLE_DEVICES without NVML: %s", e)
        return None
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            devices.append((i, uuid.decode() if isinstance(uuid, bytes) else uuid))
    except pynvml.NVMLError as e:
        _log.debug("cannot list GPUs: %s", e)
        return None
    finally:
        _shutdown(pynvml)
    return map_visible_devices(entries, devices)
