"""A throwaway Slurm cluster on this machine, for the recipes' tests (tests/slurm/).

One ``slurmctld`` and ``slurmd -N n1``, ``-N n2``, ... on 127.0.0.1, each slurmd on a port
of its own, authenticated by a private ``munged``; every file lives in one temporary
folder and every daemon is stopped by its own pid. Debian's ``slurmctld slurmd
slurm-client munge`` packages are installed where they are missing and this runs as root:
by ``make slurm-test`` before pytest starts (``python tests/slurm_cluster.py``), else by the
first cluster a session starts, never when a test module is imported.

    with SlurmCluster(nodes=4, slow_nodes=("n3",)) as cluster:
        cluster.sbatch("--wrap", "hostname")    # sbatch --wait; SLURM_CONF points at the cluster

Every node shares this host's cores, so jobs that measure must not overlap. A node in
``slow_nodes`` is made slow on purpose: the cluster's Prolog throttles each job there to a
third of the time, its Epilog ends that.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from suite_files import free_ports

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "scancel", "munged")
INSTALL_TIMEOUT_S = 300
# One install at a time: pytest-xdist's workers would otherwise race for dpkg's lock, and the
# loser would report Slurm as missing while the winner installs it.
INSTALL_LOCK = Path(tempfile.gettempdir(), "perfsuite-slurm-install.lock")
READY_TIMEOUT_S = 20
STOP_TIMEOUT_S = 10
LOG_TAIL_LINES = 20
# The cluster's own Prolog and Epilog, run by slurmd as root on the job's node. On a slow
# node the Prolog starts a throttler in a session of its own and waits until it is there
# (slurmd ends the Prolog's process group as the Prolog exits); the throttler writes its
# pid where the Epilog, or the cluster's stop, kills it by. It lets the job's processes run
# for THROTTLE_SHARE of every THROTTLE_PERIOD_S and stops them for the rest, as cpulimit
# does: whatever else loads this machine, the job gets a third of the time it would get on
# its peers, like a node held back by a CPU quota or by its clocks. It holds back a process
# that sleeps as much as one that computes (a sleep that ends while it stands stopped waits
# for the next run), so a model whose step is a sleep, which runs as fast on a busy machine
# as on an idle one, is slower there than on its peers by about two thirds.
THROTTLE_PERIOD_S = 0.3
THROTTLE_SHARE = 1 / 3
PROLOG = """#!/bin/sh
# Slow nodes made on purpose: the job's processes throttled to a share of the time.
case " $(cat {slow_file}) " in *" $SLURMD_NODENAME "*) ;; *) exit 0 ;; esac
pid={pid_dir}/job-$SLURM_JOB_ID.pid
setsid {throttle} "$SLURM_JOB_ID" "$SLURMD_NODENAME" </dev/null >/dev/null 2>&1 &
for _ in $(seq 200); do
    [ -s "$pid" ] && exit 0
    sleep 0.05
done
echo "prolog: the throttler of job $SLURM_JOB_ID did not start" >&2
exit 0
"""
THROTTLE = """#!/bin/sh
# Let job $1's processes on node $2 run {run} s of every {period} s, until killed. They are
# listed while the ones listed before stand stopped: the listing takes none of their time.
echo $$ > {pid_dir}/job-$1.pid
pids=
while :; do
    [ -z "$pids" ] || kill -STOP $pids 2>/dev/null
    pids=$(SLURM_CONF={conf} {scontrol} listpids "$1" "$2" 2>/dev/null | awk 'NR > 1 {{ print $1 }}')
    [ -z "$pids" ] || kill -STOP $pids 2>/dev/null
    sleep {stop}
    [ -z "$pids" ] || kill -CONT $pids 2>/dev/null
    sleep {run}
done
"""
EPILOG = """#!/bin/sh
pid={pid_dir}/job-$SLURM_JOB_ID.pid
[ -f "$pid" ] || exit 0
kill $(cat "$pid") 2>/dev/null
rm -f "$pid"
exit 0
"""


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here: the reason, in one line."""


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def ensure_installed() -> None:
    """Install Debian's Slurm and MUNGE packages where they are missing; raise SlurmUnavailable
    where that cannot be done (not root, no apt-get, no package)."""
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"Slurm's daemons run as root here, and this runs as uid {os.geteuid()}")
    if not missing_binaries():
        return
    if shutil.which("apt-get") is None:
        missing = ", ".join(missing_binaries())
        raise SlurmUnavailable(f"Slurm is not installed ({missing} missing) and there is no apt-get")
    with INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if missing_binaries():  # not installed meanwhile by whoever held the lock
            _install()


def _install() -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if result.returncode != 0:  # a fresh machine's package lists may not know them yet
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=INSTALL_TIMEOUT_S)
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if result.returncode != 0 or missing_binaries():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SlurmUnavailable(f"could not install Debian's {' '.join(PACKAGES)} packages: {last}")


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no {path.name})"
    return "\n".join(lines[-LOG_TAIL_LINES:])


class SlurmCluster:
    """A Slurm cluster of ``nodes`` slurmd nodes (n1, n2, ...) in one partition, ``debug``."""

    def __init__(self, nodes: int = 2, slow_nodes: tuple[str, ...] = (), root: Path | None = None):
        self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
        unknown = set(slow_nodes) - set(self.node_names)
        if unknown:
            raise ValueError(f"slow nodes {sorted(unknown)} are not among {self.node_names}")
        self.slow_nodes = tuple(slow_nodes)
        self.partition = "debug"
        self._root_given = root
        self.root = Path()
        self.conf = Path()
        self.ctld_port = 0
        self._procs: dict[str, subprocess.Popen] = {}

    # -- the environment a client command needs ---------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """This process's environment, its Slurm client commands pointed at this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_"))}
        env["SLURM_CONF"] = str(self.conf)
        # Each node is a machine of its own: its jobs' bursts start there, inside the job (its
        # Prolog's throttle, its cleanup), never forked from a warm start the tests' process
        # shares (perfsuite.plugin.warm).
        env.pop("PERFSUITE_WARM_SHARE", None)
        return env

    def run(self, *cmd: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """A client command (sinfo, scontrol, ...) against this cluster; output captured as text."""
        kwargs.setdefault("env", self.env)
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False, **kwargs)

    def sbatch(self, *args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
        """``sbatch --wait ARGS``: returns when the job has ended, with the job's exit code."""
        return self.run("sbatch", "--wait", *args, timeout=timeout, **kwargs)

    # -- start and stop --------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        ensure_installed()
        # Not pytest's tmp_path: slurmd and munged check the folders above their files.
        self.root = Path(self._root_given or tempfile.mkdtemp(prefix="slurm-cluster-"))
        self.root.chmod(0o755)
        try:
            self._write_files()
            self._spawn("munged", [_binary("munged"), "--foreground", "--force", *self._munge_args()])
            self._wait_for(lambda: (self.root / "munge" / "munge.socket").exists(), "munged's socket")
            self._spawn("slurmctld", [_binary("slurmctld"), "-D", "-f", str(self.conf)])
            # A client that finds the controller closed waits a second before it tries again.
            self._wait_for(lambda: _listening(self.ctld_port), "slurmctld's port")
            for name in self.node_names:
                self._spawn(f"slurmd-{name}", [_binary("slurmd"), "-D", "-f", str(self.conf), "-N", name])
            self._wait_for(self._nodes_idle, f"{len(self.node_names)} idle nodes")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Cancel what still runs, stop every daemon by its pid, remove the folder."""
        if not self._procs:
            return
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.run("scancel", "--full", "--partition", self.partition, timeout=10)
                deadline = time.monotonic() + STOP_TIMEOUT_S
                while self.run("squeue", "-h", timeout=10).stdout.strip() and time.monotonic() < deadline:
                    time.sleep(0.1)
        for name in reversed(list(self._procs)):  # slurmds, slurmctld, then munged
            proc = self._procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs.values():
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._kill_throttlers()
        self._procs.clear()
        if self._root_given is None:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- inside ------------------------------------------------------------------------------

    def _munge_args(self) -> list[str]:
        munge = self.root / "munge"
        return [
            f"--key-file={self.root / 'munge.key'}",
            f"--socket={munge / 'munge.socket'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--seed-file={munge / 'munged.seed'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
        ]

    def _write_files(self) -> None:
        root = self.root
        for folder in ("munge", "state", "log", "spool", "throttlers"):
            (root / folder).mkdir(mode=0o755, exist_ok=True)
        (root / "munge").chmod(0o755)  # munged refuses a socket folder others may write to, clients need to enter it
        for name in self.node_names:
            (root / "spool" / name).mkdir(exist_ok=True)
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (root / "slow-nodes").write_text(" ".join(self.slow_nodes) + "\n")
        values = {
            "slow_file": root / "slow-nodes",
            "pid_dir": root / "throttlers",
            "throttle": root / "throttle.sh",
            "conf": root / "slurm.conf",
            "scontrol": _binary("scontrol"),
            "period": THROTTLE_PERIOD_S,
            "run": round(THROTTLE_PERIOD_S * THROTTLE_SHARE, 3),
            "stop": round(THROTTLE_PERIOD_S * (1 - THROTTLE_SHARE), 3),
        }
        for name, text in {"prolog.sh": PROLOG, "epilog.sh": EPILOG, "throttle.sh": THROTTLE}.items():
            path = root / name
            path.write_text(text.format(**values))
            path.chmod(0o755)
        self.conf = root / "slurm.conf"
        self.conf.write_text(self._config())

    def _config(self) -> str:
        root = self.root
        self.ctld_port, *node_ports = free_ports(1 + len(self.node_names))
        cpus = os.cpu_count() or 1
        host = socket.gethostname().split(".")[0]
        lines = [
            "ClusterName=perfsuite-test",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdSpoolDir={root / 'spool' / '%n'}",
            f"SlurmdPidFile={root / 'spool' / '%n' / 'slurmd.pid'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
            # No cgroups: processes tracked through /proc, tasks not bound.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SelectType=select/linear",
            "SchedulerType=sched/builtin",
            # Jobs start, and leave the queue, in seconds: sbatch --wait returns quickly.
            "SchedulerParameters=batch_sched_delay=0",
            "MinJobAge=5",
            "ReturnToService=2",
            "KillWait=5",
            f"Prolog={root / 'prolog.sh'}",
            f"Epilog={root / 'epilog.sh'}",
        ]
        for name, port in zip(self.node_names, node_ports):
            lines.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={cpus} State=UNKNOWN"
            )
        lines.append(
            f"PartitionName={self.partition} Nodes={','.join(self.node_names)} Default=YES MaxTime=INFINITE State=UP"
        )
        return "\n".join(lines) + "\n"

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("ab")
        with log:
            self._procs[name] = subprocess.Popen(
                cmd, cwd=self.root, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def _nodes_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", timeout=10).stdout.split()
        states = dict(zip(out[::2], out[1::2]))
        return all(states.get(name) == "idle" for name in self.node_names)

    def _wait_for(self, ready, what: str, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [name for name, proc in self._procs.items() if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"not ready after {timeout:.0f} s"
                raise RuntimeError(f"Slurm test cluster: waiting for {what}: {why}\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        """The tails of the daemons' logs, for a failure's message."""
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            parts.append(f"--- {path.name} ---\n{_tail(path)}")
        return "\n".join(parts)

    def _kill_throttlers(self) -> None:
        for pid_file in (self.root / "throttlers").glob("*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            pid_file.unlink()


if __name__ == "__main__":  # make slurm-test's first step
    try:
        ensure_installed()
    except SlurmUnavailable as exc:  # the tests then skip, saying the same
        print(f"warning: Slurm cannot run here: {exc}", file=sys.stderr)
