"""A real two-node Slurm cluster on one machine, for the Slurm tests.

slurmctld and one slurmd run on this machine (node `<hostname>`, at the bridge's address); a
second slurmd runs in a network namespace with its own UTS hostname (node `node2`), so a
heterogeneous job's components land on two nodes with two addresses, as on a cluster: Slurm
never puts two components of one job on one node. Both slurmds see the same file system, as
cluster nodes see a shared one. Needs root, munge, Debian's slurm-wlm and network namespaces;
`unavailable()` says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from scripts.dev.chaos import netns
from scripts.ports import free_ports

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "nsenter", "unshare")


def unavailable() -> str | None:
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge util-linux)"
    return netns.unavailable()


def _munge_running() -> bool:
    encode = subprocess.run(["munge", "-n"], capture_output=True)
    if encode.returncode != 0:
        return False
    return subprocess.run(["unmunge"], input=encode.stdout, capture_output=True).returncode == 0


class Cluster:
    """Start with `with Cluster(tmp_path) as c:`; `c.run(["sbatch", ...])` talks to it."""

    def __init__(self, root: Path, cpus: int = 4, memory_mb: int = 4000):
        self.root, self.cpus, self.memory_mb = root, cpus, memory_mb
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.net: netns.Network | None = None
        self.nodes = [socket.gethostname().split(".")[0], "node2"]  # slurmd: the short name

    def __enter__(self) -> Cluster:
        if not _munge_running():
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(["munged", "--force"], check=True, capture_output=True)
        self.net = netns.Network().__enter__()
        try:
            node2 = self.net.add_host("node2")
            self._write_conf(node2.address)
            self.run(["slurmctld", "-f", str(self.conf)])
            self.run(["slurmd", "-f", str(self.conf)])
            self.run(["nsenter", f"--net=/run/netns/{node2.name}", "unshare", "--uts", "sh", "-c",
                      f"hostname node2 && slurmd -f {self.conf}"])  # fmt: skip
            self.wait(lambda: self.idle_nodes() == len(self.nodes), "both nodes idle", 60)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write_conf(self, node2_address: str) -> None:
        r = self.root
        for d in ("state", "log", *(f"spool-{n}" for n in self.nodes)):
            (r / d).mkdir(parents=True, exist_ok=True)
        ctld, slurmd = free_ports(), free_ports()
        gateway = self.net.gateway
        node = f"CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN"
        self.conf.write_text(
            f"ClusterName=mario\nSlurmctldHost={self.nodes[0]}({gateway})\n"
            "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n"
            f"StateSaveLocation={r}/state\nSlurmdSpoolDir={r}/spool-%n\n"
            f"SlurmctldPidFile={r}/slurmctld.pid\nSlurmdPidFile={r}/slurmd-%n.pid\n"
            f"SlurmctldLogFile={r}/log/slurmctld.log\nSlurmdLogFile={r}/log/slurmd-%n.log\n"
            f"SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n"
            # no cgroups: the test machine's processes are tracked by parentage
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "JobAcctGatherType=jobacct_gather/none\nMpiDefault=none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
            # the node sizes below, whatever this machine has; het jobs start by backfill only
            "SlurmdParameters=config_overrides\nSchedulerParameters=bf_interval=1\n"
            "ReturnToService=2\nKillWait=60\n"
            f"NodeName={self.nodes[0]} NodeAddr={gateway} {node}\n"
            f"NodeName=node2 NodeAddr={node2_address} {node}\n"
            "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        )

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr.strip()}\n{self.logs()}")
        return out

    def idle_nodes(self) -> int:
        out = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False).stdout.split()
        return sum(state == "idle" for state in out)

    def job_done(self, job: str) -> bool:
        return not self.run(["squeue", "-h", "-j", job], check=False).stdout.strip()

    def wait(self, check, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(1)

    def logs(self) -> str:
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def close(self) -> None:
        subprocess.run(["scontrol", "shutdown"], env=self.env, capture_output=True, timeout=60)
        for pidfile in self.root.glob("slurm*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pidfile.read_text()), 15)
        if self.net is not None:
            self.net.close()
