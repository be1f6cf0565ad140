"""`python -m learner`: ingest chunks, train with V-trace, broadcast weights, checkpoint."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import torch

from common import config as config_io
from common.metrics import LearnerMetrics, MetricsPortError, add_process_metrics, serve
from common.model import DeviceUnavailable
from common.rundir import RunDirError
from learner.checkpoint import RunDirBusy
from learner.config import LearnerConfig
from learner.gpu import GpuCollector, device_uuid
from learner.ingest import BindError
from learner.loop import RunTrained, TrainLoop
from learner.replay import ReplayCapacityError

log = logging.getLogger("learner")


def main(argv: list[str] | None = None) -> int:
    cfg = config_io.load(LearnerConfig, argv, prog="learner", description=__doc__ or "")
    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s learner %(levelname)s %(message)s"
    )
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    metrics = LearnerMetrics(levels=cfg.levels)
    run_dir = str(Path(cfg.run_dir).absolute())
    add_process_metrics(metrics.registry, "learner", run_id=cfg.run_id, run_dir=run_dir)
    try:
        loop = TrainLoop(cfg, metrics)
    except (DeviceUnavailable, RunDirBusy, ReplayCapacityError, BindError) as exc:
        log.error("%s", exc)
        return 1
    except RunTrained as exc:  # a restart cannot change that: refused, as a bad flag is
        log.error("%s", exc)
        return 2
    except RunDirError as exc:  # likewise
        log.error("--run-dir %s: %s; pass a --run-dir that can be made and written", cfg.run_dir,
                  exc)  # fmt: skip
        return 2
    if loop.device.type == "cuda":
        gpu = GpuCollector.create(device_uuid(loop.device))
        if gpu is not None:
            metrics.registry.register(gpu)
    else:
        log.info("GPU metrics off: the learner runs on %s", loop.device)
    try:
        server = (
            serve(metrics.registry, cfg.metrics_host, cfg.metrics_port)
            if cfg.metrics_port
            else None
        )
    except MetricsPortError as exc:
        loop.close()
        log.error("%s", exc)
        return 1
    if server:
        log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, server.port)
    signal.signal(signal.SIGTERM, loop.stop)
    signal.signal(signal.SIGINT, loop.stop)
    try:
        return loop.run()
    finally:
        loop.save_checkpoint()
        loop.close()
        if server:
            server.close()
        log.info("stopped at policy version %d", loop.learner.updates)


if __name__ == "__main__":
    sys.exit(main())
