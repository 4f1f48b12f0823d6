"""The parts of the production compose file that run without Docker, against a real
Temporal dev server (the same server version as the pinned image): the search-attribute
job's script with the real ``temporal`` CLI, the server health check's URL, and the
worker's health check (``python -m workers --check``), healthy and not."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from temporalio.client import Client
from temporalio.worker import Worker

from orch.config import venv_binary
from tests.e2e.conftest import REPO, wait_for
from workflows.launch_semaphore import LaunchSemaphoreWorkflow

pytestmark = pytest.mark.e2e
SERVICES = yaml.safe_load((REPO / "docker-compose.temporal.yml").read_text())["services"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    address: str
    http_port: int


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A bare dev server: no orch search attributes, no worker."""
    port, http_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("dev-server") / "temporal.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(venv_binary("temporal")), "server", "start-dev", "--headless",
             "--ip", "127.0.0.1", "--port", str(port), "--http-port", str(http_port),
             "--log-level", "warn"], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
    try:
        server = DevServer(f"127.0.0.1:{port}", http_port)
        wait_for(lambda: system_info_status(server) == 200, what="the dev server")
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)


def system_info_status(server: DevServer, url: str = "http://localhost:7243/api/v1/system-info"
                       ) -> int:
    try:
        with urllib.request.urlopen(url.replace(":7243", f":{server.http_port}"), timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def interpolate(value: str, env: dict[str, str]) -> str:
    """What Compose makes of ``value``: ${VAR:-default}, ${VAR:+alternative}, $$ for $."""
    def expand(match: re.Match[str]) -> str:
        name, operator, word = match.group(1), match.group(2), match.group(3)
        current = env.get(name, "")
        if operator == ":-":
            return current or word
        if operator == ":+":
            return word if current else ""
        return current
    parts = value.split("$$")
    return "$".join(re.sub(r"\$\{(\w+)(?:(:-|:\+)([^}]*))?\}", expand, p) for p in parts)


def run_search_attribute_job(server: DevServer, namespace: str) -> subprocess.CompletedProcess[str]:
    job = SERVICES["orch-search-attributes"]
    shell_env = {"TEMPORAL_NAMESPACE": namespace}
    env = {name: interpolate(str(value), shell_env) for name, value in job["environment"].items()}
    env |= {"TEMPORAL_ADDRESS": server.address,  # the compose network's temporal:7233
            "PATH": f"{venv_binary('temporal').parent}:{os.environ['PATH']}"}
    script = interpolate(job["command"][0], shell_env)
    return subprocess.run([*job["entrypoint"], script], env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)


async def registered(server: DevServer, namespace: str) -> dict[str, str]:
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    client = await Client.connect(server.address, namespace=namespace)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace))
    return {name: IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_").title()
            .replace("_", "") for name, kind in listed.custom_attributes.items()}


def test_the_search_attribute_job_creates_the_namespace_and_registers_orchs(
    dev_server: DevServer,
) -> None:
    first = run_search_attribute_job(dev_server, "orch-compose")
    assert first.returncode == 0, first.stdout + first.stderr
    listed = dict(item.split("=") for item in  # == orch's (tests/unit/test_compose.py)
                  SERVICES["orch-search-attributes"]["environment"]["ORCH_SEARCH_ATTRIBUTES"]
                  .split())
    attributes = asyncio.run(registered(dev_server, "orch-compose"))
    assert {n: t for n, t in attributes.items() if n.startswith("Orch")} == listed
    again = run_search_attribute_job(dev_server, "orch-compose")  # every `up` runs it
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("is registered") == len(listed)


def test_the_server_health_check_asks_a_url_the_frontend_serves(dev_server: DevServer) -> None:
    test = SERVICES["temporal"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "wget"]
    assert system_info_status(dev_server, test[-1]) == 200
    assert system_info_status(dev_server, test[-1].replace("system-info", "nothing")) == 404


def check(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", "--check", "--address", address,
                           *args], capture_output=True, text=True, timeout=60, cwd=REPO,
                          stdin=subprocess.DEVNULL)


def healthy_check(address: str) -> subprocess.CompletedProcess[str] | None:
    result = check(address)
    return result if result.returncode == 0 else None


def test_the_worker_health_check_sees_this_hosts_worker(
    dev_server: DevServer, tmp_path: Path
) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "workers", "--address", dev_server.address],
        env={**os.environ, "ORCH_HOME": str(tmp_path)}, cwd=REPO, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        healthy = wait_for(lambda: healthy_check(dev_server.address), what="a healthy check")
        assert healthy is not None
        assert f"healthy: polling orch on {dev_server.address}" in healthy.stdout
        assert f"{worker.pid}@{socket.gethostname()}" in healthy.stdout
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    stopped = check(dev_server.address)  # the server still lists its pollers for minutes
    assert stopped.returncode == 1
    assert "unhealthy: no workflow poller of this host" in stopped.stdout
    assert f"{worker.pid}@{socket.gethostname()}" in stopped.stdout  # seen, but gone


def test_the_worker_health_check_fails_without_a_worker_or_a_server(
    dev_server: DevServer,
) -> None:
    idle = check(dev_server.address, "--task-queue", "nobody-polls-this")
    assert idle.returncode == 1 and "pollers seen: none" in idle.stdout
    unreachable = check(f"127.0.0.1:{free_port()}")
    assert unreachable.returncode == 1
    assert "unhealthy: cannot ask" in unreachable.stdout


async def test_a_poller_of_another_host_does_not_make_this_one_healthy(
    dev_server: DevServer,
) -> None:
    client = await Client.connect(dev_server.address)
    elsewhere = Worker(client, task_queue="elsewhere", workflows=[LaunchSemaphoreWorkflow],
                       identity="4242@another-host")
    async with elsewhere:
        result = await wait_for_seen(dev_server.address, "4242@another-host")
    assert result.returncode == 1, result.stdout


async def wait_for_seen(address: str, identity: str) -> subprocess.CompletedProcess[str]:
    for _ in range(40):
        result = await asyncio.to_thread(check, address, "--task-queue", "elsewhere")
        if identity in result.stdout:
            return result
        await asyncio.sleep(0.5)
    raise AssertionError(f"the server never listed {identity}")


def test_the_files_the_image_copies_make_an_installable_orch(tmp_path: Path) -> None:
    """What ``pip install -e .`` in the Dockerfile gets: only the COPY'd files (the same
    as .dockerignore lets in, tests/unit/test_compose.py), built into a wheel."""
    copied = [source for line in (REPO / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") for source in line.split()[1:-1]]
    stage = tmp_path / "context"
    for source in copied:
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, stage / source,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            stage.mkdir(exist_ok=True)
            shutil.copy2(REPO / source, stage / source)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir",
         str(tmp_path / "out"), str(stage)], capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "out").glob("orch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("orch", "workflows", "activities", "workers", "cli"):
        assert f"{package}/__init__.py" in names
    assert {"workers/__main__.py", "workers/health.py", "orch/catalog/data/aws.csv"} <= names
