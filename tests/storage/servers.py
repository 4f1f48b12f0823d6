"""The storage services the tests talk to, each a real server on a free loopback port:
moto's S3 server, gcp-storage-emulator for GCS, Azurite for Azure Blob; the local store's
"server" is a directory.

Each server has ``env``: the variables that point a store built by
``orch.storage.get_store(kind)`` (and a worker process started with them) at it, and
nothing else. They run as child processes in their own process group, so a worker or a
test may share one; ``stop`` ends the group. The fixtures in ``tests/storage/conftest.py``
start them once per session. How each is started, by hand::

    .venv/bin/python -m moto.server -H 127.0.0.1 -p PORT
    .venv/bin/gcp-storage-emulator start --host 127.0.0.1 --port PORT --in-memory -q
    .tools/node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort PORT \\
        --inMemoryPersistence --disableTelemetry --silent --skipApiVersionCheck

(``--skipApiVersionCheck``: azure-storage-blob asks for a newer REST API version than the
newest Azurite knows; the calls orch makes are the same in both.)
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orch.storage.base import StoreKind

REPO = Path(__file__).resolve().parents[2]
AZURITE = REPO / ".tools/node_modules/.bin/azurite-blob"
START_TIMEOUT = 60.0  # seconds; a loaded 2-core machine imports moto slowly

# Azurite's well-known development account (its docs), and a second one for the tests
# that need another owner.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
OTHER_ACCOUNT = "orchother"
OTHER_KEY = "b3JjaC1vdGhlci1hY2NvdW50LWtleS1mb3ItdGVzdHM="


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, even by SIGKILL, so no
    server outlives its run (Linux's PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


class ServerProcess:
    """A server started as a child in its own process group (stopped as a group), its
    output in ``log``."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path,
                 env: dict[str, str] | None = None):
        self.name, self.port, self.log = name, port, log
        self.url = f"http://127.0.0.1:{port}"
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})}, start_new_session=True, cwd=log.parent,
                preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} did not start on port {port}:\n{tail}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@dataclass
class LocalHome:
    """The local store needs no server: its buckets live under ``$ORCH_HOME/storage``."""

    root: Path
    kind: StoreKind = StoreKind.LOCAL
    env: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.env = {"ORCH_HOME": str(self.root)}

    def stop(self) -> None:
        """Nothing runs: the directory goes with pytest's temporary directories."""


class MotoS3:
    """moto's S3 server (its own process: the auth switch below is process-wide)."""

    kind = StoreKind.S3
    region = "us-west-2"  # not us-east-1, so creates carry a LocationConstraint

    def __init__(self, workdir: Path):
        port = free_port()
        self.server = ServerProcess(
            "moto S3", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            port, workdir / "moto-s3.log")
        self.url = self.server.url
        self.env = {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": self.region,
            "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @contextmanager
    def auth_enforced(self) -> Iterator[None]:
        """moto checks signatures and IAM policies (its INITIAL_NO_AUTH_ACTION_COUNT) for
        the duration; only keys moto's IAM made are then valid."""
        self._reset_auth("0")
        try:
            yield
        finally:
            self._reset_auth("inf")

    def _reset_auth(self, count: str) -> None:
        request = urllib.request.Request(  # not form-encoded: moto reads the raw body
            f"{self.url}/moto-api/reset-auth", data=count.encode(), method="POST",
            headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            json.load(answer)

    def stop(self) -> None:
        self.server.stop()


class GCSEmulator:
    """gcp-storage-emulator (PyPI): the JSON API google-cloud-storage speaks, multipart
    and resumable uploads included, with ``md5Hash``; no authentication."""

    kind = StoreKind.GCS

    def __init__(self, workdir: Path):
        port = free_port()
        self.server = ServerProcess(
            "gcp-storage-emulator",
            [str(Path(sys.executable).parent / "gcp-storage-emulator"), "start",
             "--host", "127.0.0.1", "--port", str(port), "--in-memory", "-q"],
            port, workdir / "gcs-emulator.log")
        self.url = self.server.url
        self.env = {
            "STORAGE_EMULATOR_HOST": self.url,
            "GOOGLE_CLOUD_PROJECT": "orch-test",
            "CLOUDSDK_CONFIG": str(workdir / "no-gcloud"),  # no ADC file of the machine
        }

    def stop(self) -> None:
        self.server.stop()


class Azurite:
    """Azurite's Blob service (npm, installed into .tools/ by scripts/test), in memory,
    with its development account and a second one."""

    kind = StoreKind.AZURE

    def __init__(self, workdir: Path):
        if not AZURITE.exists():
            raise RuntimeError(f"{AZURITE} is missing: run scripts/test (it installs Azurite "
                               "with npm into .tools/)")
        port = free_port()
        self.server = ServerProcess(
            "Azurite", [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                        "--inMemoryPersistence", "--disableTelemetry", "--silent",
                        "--skipApiVersionCheck"],
            port, workdir / "azurite.log",
            env={"AZURITE_ACCOUNTS": f"{AZURITE_ACCOUNT}:{AZURITE_KEY};"
                                     f"{OTHER_ACCOUNT}:{OTHER_KEY}"})
        self.url = self.server.url
        self.env = {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string(AZURITE_ACCOUNT,
                                                                              AZURITE_KEY)}

    def connection_string(self, account: str, key: str) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
                f"BlobEndpoint={self.url}/{account};")

    def stop(self) -> None:
        self.server.stop()
