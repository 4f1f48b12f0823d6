"""What the benchmarks on the simulated cloud share: the cloud itself (its directory, its
one sshd serving every node, see ``orch.clouds.simulated``), an embedded control plane
(dev server + ``python -m workers``) whose worker uses it, and CPU figures of processes.

Needs root and OpenSSH's sshd (``tests/fakes/sshd.py`` says what is missing).
"""

from __future__ import annotations

import getpass
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orch.clouds.simulated import ENV, SimConfig, SimRegion, SimulatedProvider, SimZone
from orch.clouds.simulated_node import end_job, write_head_files
from orch.server import ControlPlane, ServerState
from orch.status import JobStatus
from tests.fakes.sshd import Sshd, keygen, unavailable_reason

# sshd takes at most this many connections being set up at once (the default 10:30:100
# refuses a ramp of watches reconnecting together).
MAX_STARTUPS = "200:30:400"
# sshd runs the ForceCommand with the user's shell, and bash run by sshd as a top-level
# shell reads ~/.bashrc, this machine's user's: here root's, whose `pyenv init` runs
# pyenv-rehash, tens of milliseconds of CPU and a lock, for every command of every
# simulated head (with 2,000 watches, more than the machine's two cores). A cloud image's
# .bashrc returns at once for non-interactive shells; a shell level of 2 makes bash skip
# it here, so a head's command costs what it would on a head.
NOT_TOP_LEVEL = "SHLVL=1"


def regions(count: int, zones: int = 1, capacity: int = 100_000) -> dict[str, SimRegion]:
    """``count`` regions ``sim-<i>`` of ``zones`` zones ``sim-<i><letter>`` each."""
    return {
        f"sim-{r}": SimRegion(zones={f"sim-{r}{chr(97 + z)}": SimZone(capacity=capacity)
                                     for z in range(zones)})
        for r in range(count)
    }


class SimCloud:
    """One simulated cloud under ``directory``; enabled for this process and the
    processes it starts (``ORCH_SIMULATED_CLOUD``) while entered."""

    def __init__(self, directory: Path, regions: dict[str, SimRegion], *,
                 latency_s: dict[str, float] | None = None, boot_s: float = 0.0,
                 boot_spread_s: float = 0.0) -> None:
        if reason := unavailable_reason():
            raise SystemExit(f"the simulated cloud needs a local sshd: {reason}")
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        key = keygen(directory / "id_ed25519")
        shell, python = write_head_files(directory)
        user = getpass.getuser()
        self.sshd = Sshd(directory / "sshd", key.with_suffix(".pub"), listen="0.0.0.0",
                         extra_config=(f"AllowUsers {user}@127.0.0.0/8\n"
                                       f"ForceCommand {shell}\n"
                                       f"MaxStartups {MAX_STARTUPS}\n"
                                       f"SetEnv {NOT_TOP_LEVEL}\n"))
        self.config = SimConfig(regions=regions, latency_s=latency_s or {}, boot_s=boot_s,
                                boot_spread_s=boot_spread_s,
                                ssh_port=self.sshd.port, ssh_user=user,
                                ssh_key_path=str(key), python=str(python))
        self.configure(regions)

    def configure(self, regions: dict[str, SimRegion]) -> None:
        """Change the regions (capacities, quotas); every later call sees the change."""
        self.config = self.config.model_copy(update={"regions": regions})
        partial = self.directory / "config.json.new"
        partial.write_text(self.config.model_dump_json())
        partial.replace(self.directory / "config.json")

    def __enter__(self) -> SimCloud:
        self.sshd.start()
        os.environ[ENV] = str(self.directory)
        return self

    def __exit__(self, *exc: object) -> None:
        os.environ.pop(ENV, None)
        self.sshd.stop()

    def provider(self) -> SimulatedProvider:
        return SimulatedProvider(self.directory)

    def sshd_pid(self) -> int:
        """The listening sshd's process id (every head's sessions are its descendants)."""
        assert self.sshd.process is not None, "the cloud is not entered"
        return self.sshd.process.pid

    def end_jobs(self, status: JobStatus = JobStatus.SUCCEEDED, job_id: int = 1) -> int:
        """End job ``job_id`` on every cluster's head; returns how many ended."""
        provider = self.provider()
        ended = 0
        for _, _, ip in provider.clusters():
            record = end_job(provider.node_home(ip), job_id, status)
            ended += record is not None and record.status == status
        return ended


@contextmanager
def control_plane(home: Path, **env: str) -> Iterator[ServerState]:
    """The embedded control plane of ``home`` (dev server + worker), with ``env`` (e.g.
    ``ORCH_LAUNCH_PERMITS``) in the environment it starts with; stopped at the end."""
    os.environ.update(ORCH_HOME=str(home), **env)
    plane = ControlPlane(home)
    try:
        yield plane.ensure()
    finally:
        plane.stop()


def exit_on_sigterm() -> None:
    """SIGTERM ends the benchmark as Ctrl-C does: its control plane, sshd and temporary
    directories are cleaned up (Python's default would leave them running)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class CpuWindow:
    """CPU seconds of some processes over a window of wall time."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.started = time.monotonic()
        self.start = {name: cpu_seconds(pid) for name, pid in pids.items()}

    def fractions(self) -> dict[str, float]:
        """Each process's CPU over the window, as a fraction of one core."""
        wall = time.monotonic() - self.started
        return {name: (cpu_seconds(pid) - self.start[name]) / wall
                for name, pid in self.pids.items()}


def _stat_fields(pid: str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants, each with its reaped children's (a
    command or session that ended counts once its parent has waited for it)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(entry.name)
        except OSError:  # ended meanwhile
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(f) for f in fields[11:15]) / tick
    total = 0.0
    for pid, spent in times.items():
        ancestor = parents.get(pid)
        while ancestor and ancestor != root:
            ancestor = parents.get(ancestor)
        total += spent if ancestor == root or pid == root else 0.0
    return total


class MachineCpu:
    """How busy the machine's cores were over a window of wall time, from ``/proc/stat``:
    a fraction of all of them (every process, the benchmark's own and others')."""

    def __init__(self) -> None:
        self.start = self._times()

    @staticmethod
    def _times() -> tuple[int, int]:
        """(busy, total) jiffies over all cores."""
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def fraction(self) -> float:
        busy, total = self._times()
        return (busy - self.start[0]) / max(total - self.start[1], 1)


class HeadsCpu:
    """CPU of the simulated heads (the sshd's sessions and what they run) over a window of
    wall time, as a fraction of one core: what a real cloud's nodes would spend."""

    def __init__(self, sshd_pid: int) -> None:
        self.sshd_pid = sshd_pid
        self.started = time.monotonic()
        self.start = tree_cpu_seconds(sshd_pid)

    def fraction(self) -> float:
        wall = time.monotonic() - self.started
        return (tree_cpu_seconds(self.sshd_pid) - self.start) / wall
