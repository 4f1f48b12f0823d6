"""End to end: the `orch` CLI, the embedded Temporal dev server, a worker and real Ray on
the local cloud, all in a throwaway ORCH_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from orch.names import control_plane_hash, name_on_cloud
from orch.server import ControlPlane

ORCH = str(Path(sys.executable).parent / "orch")
REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 60, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something true, and return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


class Orch:
    """Runs the CLI as a user would, in the test's ORCH_HOME."""

    def __init__(self, home: Path):
        self.home = home
        self.env = {**os.environ, "ORCH_HOME": str(home), "COLUMNS": "200"}
        self.env.pop("TEMPORAL_ADDRESS", None)

    def __call__(self, *args: str, check: bool = True, timeout: float = 300
                 ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([ORCH, *args], env=self.env, cwd=REPO, capture_output=True,
                                text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise AssertionError(f"orch {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([ORCH, *args], env=self.env, cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def json(self, *args: str) -> list[dict]:
        return list(json.loads(self(*args, "--json").stdout))

    def plane(self) -> ControlPlane:
        return ControlPlane(self.home)

    def cloud_name(self, cluster: str) -> str:
        """The cluster's name on the local cloud (see orch.names): the embedded server's."""
        return name_on_cloud(cluster, control_plane_hash(self.home, "embedded", self.env))

    def node_homes(self, cluster: str) -> list[str]:
        """The sandbox of each node of a local-cloud cluster (none once it is gone)."""
        return sorted(str(p) for p in (self.home / "local" / self.cloud_name(cluster)).glob("*")
                      if p.is_dir())


@pytest.fixture(scope="session")
def orch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Orch]:
    home = tmp_path_factory.mktemp("orch-home")
    cli = Orch(home)
    cli("server", "start")
    try:
        yield cli
    finally:
        for cluster in cli.json("status"):
            cli("down", "-y", cluster["name"], check=False)
        cli("server", "stop", check=False)
