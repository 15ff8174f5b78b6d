"""A real single-node SLURM cluster for the tests: :func:`slurm_cluster`, a session fixture.

It writes a minimal ``slurm.conf`` into a temporary directory (this machine as the one node,
with its CPUs and memory, one partition, ``proctrack/linuxproc``, ``task/none``,
``select/cons_tres`` with ``CR_Core_Memory``, :data:`MAX_ARRAY_SIZE`, no accounting), a munge
key of its own, then starts ``munged``, ``slurmctld`` and ``slurmd`` in the foreground as child
processes on free ports, with ``SLURM_CONF`` set in ``os.environ`` for the session. It yields
once ``sinfo`` shows the node idle and at the end stops the processes it started, by PID.

Debian's packages (``apt-get install slurmctld slurmd slurm-client munge``; ``.ci/run`` installs
them) and root are needed: without them every test using the fixture is skipped with a one-line
reason. With them, a cluster that does not come up fails the test, with its daemons' log ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest

__all__ = ["MAX_ARRAY_SIZE", "SlurmCluster", "slurm_cluster"]

#: the cluster's ``MaxArraySize``: small, so that a sweep of a few runs needs several arrays
MAX_ARRAY_SIZE = 5
#: the daemons and clients the cluster needs
BINARIES = (
    "munged",
    "slurmctld",
    "slurmd",
    "sinfo",
    "sbatch",
    "srun",
    "scontrol",
    "scancel",
    "squeue",
)
#: where Debian puts the daemons, searched after ``PATH`` (a non-login shell may lack them)
SBIN = "/usr/sbin:/sbin"
#: seconds to wait for the node to become idle
START_TIMEOUT = 60.0


@dataclasses.dataclass
class SlurmCluster:
    """A running cluster: its directory, ``slurm.conf``, node and partition names, and the
    daemons it started."""

    root: pathlib.Path
    conf: pathlib.Path
    node: str
    partition: str
    cpus: int
    processes: dict[str, subprocess.Popen] = dataclasses.field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """What a SLURM client needs: ``SLURM_CONF``."""
        return {"SLURM_CONF": str(self.conf)}

    def logs(self) -> str:
        """The end of each daemon's log (for a failure's message)."""
        parts = []
        for name in ("munged", "slurmctld", "slurmd"):
            path = self.root / "log" / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            parts.append(f"--- {name} ---\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(parts)

    def cancel_jobs(self, timeout: float = 15.0) -> None:
        """Cancel every job still queued or running (the cluster is this session's alone) and
        wait up to ``timeout`` seconds until ``squeue`` lists none."""
        env = {**os.environ, **self.env()}
        deadline = time.monotonic() + timeout
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", "--partition", self.partition], env=env, timeout=timeout)
            while time.monotonic() < deadline:
                listed = subprocess.run(
                    ["squeue", "-h", "-o", "%i"], env=env, capture_output=True, timeout=timeout
                )
                if not listed.stdout.strip():
                    return
                time.sleep(0.5)

    def stop(self) -> None:
        """Cancel the jobs left (:meth:`cancel_jobs`), then stop the daemons this cluster
        started (SIGTERM by PID, then SIGKILL), slurmd first."""
        if self.processes.get("slurmctld") is not None:
            self.cancel_jobs()
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


def _binary(name: str) -> str:
    """The path of ``name`` on ``PATH``, else in :data:`SBIN` (empty when neither has it)."""
    return shutil.which(name) or shutil.which(name, path=SBIN) or ""


def _free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on 127.0.0.1 now (bound to port 0, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for item in sockets:
            item.bind(("127.0.0.1", 0))
        return [item.getsockname()[1] for item in sockets]
    finally:
        for item in sockets:
            item.close()


def _node_hardware() -> tuple[int, int]:
    """This machine's ``(CPUs, RealMemory MB)`` as ``slurmd -C`` reports them (``os`` when it
    reports nothing)."""
    cpus = os.cpu_count() or 1
    memory = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20)
    try:
        command = [_binary("slurmd"), "-C"]
        text = subprocess.run(command, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
    return int(fields.get("CPUs", cpus)), int(fields.get("RealMemory", memory))


def write_conf(root: pathlib.Path, node: str, cpus: int, memory_mb: int) -> pathlib.Path:
    """``root/slurm.conf``: one node (``node`` at 127.0.0.1, ``cpus`` CPUs, ``memory_mb`` MB,
    1 GB a CPU by default so that jobs without ``--mem`` share the node), one partition
    ``debug``, state, spool and logs under ``root``, the munge socket ``root/munge.socket``."""
    ctld_port, slurmd_port = _free_ports(2)
    for name in ("state", "spool", "log"):
        (root / name).mkdir(parents=True, exist_ok=True)
    lines = [
        "ClusterName=llometest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"AuthInfo=socket={root / 'munge.socket'}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=1024",
        f"MaxArraySize={MAX_ARRAY_SIZE}",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1",
        "MinJobAge=600",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "Waittime=0",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _node_state(env: dict[str, str], node: str) -> str:
    """The node's state as ``sinfo`` prints it (``idle``, ``down*``, ...; empty when unknown)."""
    try:
        found = subprocess.run(
            ["sinfo", "-h", "-n", node, "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return found.stdout.strip() if found.returncode == 0 else ""


def start(root: pathlib.Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd under ``root`` and wait for the node to be idle.

    Raises:
      RuntimeError: a daemon exited or the node was not idle within :data:`START_TIMEOUT`
        seconds (the daemons started are stopped first; the message holds their logs' ends).
    """
    node = socket.gethostname().split(".")[0]
    cpus, memory = _node_hardware()
    conf = write_conf(root, node, cpus, memory)
    cluster = SlurmCluster(root, conf, node, "debug", cpus)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    env = {**os.environ, **cluster.env()}
    log = root / "log"
    commands = {
        "munged": [
            _binary("munged"),
            "--foreground",
            "--force",
            f"--socket={root / 'munge.socket'}",
            f"--key-file={key}",
            f"--pid-file={root / 'munged.pid'}",
            f"--log-file={log / 'munged.log'}",
            f"--seed-file={root / 'munged.seed'}",
        ],
        "slurmctld": [_binary("slurmctld"), "-D", "-i", "-f", str(conf)],
        "slurmd": [_binary("slurmd"), "-D", "-N", node, "-f", str(conf)],
    }
    try:
        for name, command in commands.items():
            with open(log / f"{name}.out", "ab") as output:
                cluster.processes[name] = subprocess.Popen(
                    command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=root
                )
            if name == "munged":
                _wait_for(lambda: (root / "munge.socket").exists(), cluster, name)
        _wait_for(lambda: _node_state(env, node) == "idle", cluster, "the node")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_for(ready: Callable[[], bool], cluster: SlurmCluster, what: str) -> None:
    """Poll ``ready()`` until it holds; raise when a daemon exits or time runs out."""
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        for name, process in cluster.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with status {process.returncode}\n{cluster.logs()}"
                )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready in {START_TIMEOUT:.0f} s\n{cluster.logs()}")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running single-node SLURM cluster (module docstring), ``SLURM_CONF`` set in
    ``os.environ`` while it runs; skipped when the packages or root are missing."""
    missing = [name for name in BINARIES if not _binary(name)]
    if missing:
        pytest.skip(
            f"no SLURM here ({', '.join(missing)} missing: apt-get install "
            "slurmctld slurmd slurm-client munge)"
        )
    if os.geteuid() != 0:
        pytest.skip("the test SLURM cluster runs its daemons as root (SlurmUser=root)")
    root = pathlib.Path(tmp_path_factory.mktemp("slurm", numbered=True))
    if len(str(root / "munge.socket")) > 100:  # a socket path must fit in 108 bytes
        root = pathlib.Path(tempfile.mkdtemp(prefix="llome-slurm-"))
    cluster = start(root)  # with the packages here, a cluster that does not start fails
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        cluster.stop()
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
