"""A real OpenSSH server on loopback for the SSH runner's tests.

Nothing is installed here: it needs /usr/sbin/sshd (Debian package openssh-server) and
ssh-keygen, and root, because sshd serves the login of the user running the tests.
Everything it uses lives in its own directory: config, host key, authorized_keys, pid
file and log.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; normally made by systemd
START_TIMEOUT = 15.0


def unavailable_reason() -> str | None:
    """Why a real sshd cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the sshd tests run their own sshd and need root"
    if not SSHD.exists():
        return f"{SSHD} is missing: apt-get install -y openssh-server"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing: apt-get install -y openssh-client"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keygen(path: Path) -> Path:
    """A new passwordless ed25519 key pair at ``path`` (and ``path.pub``)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "orch-test", "-f", str(path)],
        check=True,
    )
    return path


class Sshd:
    """One sshd on 127.0.0.1:``port`` with its own host key, accepting ``client_key``."""

    def __init__(self, directory: Path, client_public_key: Path, port: int | None = None,
                 *, listen: str = "127.0.0.1", extra_config: str = ""):
        """``listen`` and ``extra_config`` (sshd_config lines) are for the simulated cloud
        (bench/sim_cloud.py), which serves every 127.x address from one sshd."""
        self.directory = directory
        self.port = port or free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.host_key = keygen(directory / "ssh_host_ed25519_key")
        authorized = directory / "authorized_keys"
        authorized.write_text(client_public_key.read_text())
        self.config = directory / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\n"
            f"ListenAddress {listen}\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {directory / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}\n"
            "UsePAM no\n"
            "StrictModes no\n"  # the temp directory's parents are world-writable
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "Subsystem sftp internal-sftp\n"
            "LogLevel ERROR\n"
            + extra_config
        )
        self.log = directory / "sshd.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def public_host_key(self) -> str:
        """``<type> <base64>`` of the host key, as known_hosts records it."""
        kind, blob = (self.directory / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"{kind} {blob}"

    def start(self) -> None:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        with open(self.log, "ab") as log:
            # -D: stay in the foreground as our child; -e: log to stderr (the log file).
            self.process = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(self.config)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self._listening():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sshd did not start: {self.log.read_text()}")
            time.sleep(0.05)

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the listener. Sessions already open (each its own sshd process) live on
        until their clients close them, as with any sshd restart."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
