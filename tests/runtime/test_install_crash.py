"""Runtime setup over real SSH when the worker doing it is killed mid ``python -m venv``
(orch/runtime/install.py): the retry converges to a working venv.

The node is a real sshd on loopback (tests/fakes/sshd.py) whose sessions get a home of
their own (``SetEnv HOME``, so the test never touches the real user's ``~/.orch``), with an
image (tests/fakes/twin_hosts.Image: Ray preinstalled, no orch). The worker is a real
process running :func:`ensure_runtime`; it is SIGKILLed once the node runs its ``python -m
venv``, which drops its SSH connection and so the remote command (the SSH runner's wrapper
kills a command whose connection is gone).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orch.clouds.base import NodeInfo
from orch.runtime.install import BUILDS_DIR, RECORD_FILE, VENV_DIR, ensure_runtime
from orch.runtime.procfs import command_line, process_table
from orch.runtime.runner import runner_for
from orch.runtime.wheel import orch_wheel
from tests.e2e.conftest import wait_for
from tests.fakes.sshd import Sshd
from tests.fakes.twin_hosts import Image

WORKER = """\
import sys
from orch.clouds.base import NodeInfo
from orch.runtime.install import ensure_runtime
from orch.runtime.runner import runner_for
node = NodeInfo.model_validate_json(sys.argv[1])
with runner_for(node) as runner:
    print(ensure_runtime(runner, node))
"""


@pytest.fixture
def node_home(tmp_path: Path) -> Path:
    home = tmp_path / "node-home"
    home.mkdir()
    Image.of_this_venv().install(home)
    return home


@pytest.fixture
def node(sshd_factory: Callable[..., Sshd], ssh_node: Callable[[Sshd], NodeInfo],
         ssh_isolated: Path, wheel_home: Path, node_home: Path) -> NodeInfo:
    server = sshd_factory()
    with open(server.config, "a") as config:
        config.write(f"SetEnv HOME={node_home}\n")
    server.start()
    ssh_isolated.mkdir(parents=True, exist_ok=True)
    (wheel_home / "wheels").mkdir(exist_ok=True)
    (ssh_isolated / "wheels").symlink_to(wheel_home / "wheels")  # built once a session
    return ssh_node(server)


def half_made(home: Path) -> list[Path]:
    """Builds whose interpreter is there (``python -m venv`` makes it before pip)."""
    return [b for b in (home / BUILDS_DIR).glob("*") if (b / "bin" / "python").exists()]


def venv_processes(home: Path) -> list[int]:
    """This node's ``python -m venv`` processes (the node is this machine)."""
    return [pid for pid in process_table()
            if (args := command_line(pid))[1:3] == ["-m", "venv"] and str(home) in args[-1]]


def test_a_worker_killed_mid_venv_leaves_nothing_a_retry_trusts(
    node: NodeInfo, node_home: Path
) -> None:
    orch_wheel()  # before the worker starts: it must die in the venv, not in a wheel build
    worker = subprocess.Popen([sys.executable, "-c", WORKER, node.model_dump_json()],
                              env=os.environ.copy(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: (venv_processes(node_home) and half_made(node_home))
                 or worker.poll() is not None, timeout=300, what="the node's python -m venv")
        assert worker.poll() is None, worker.communicate()[0]
    finally:
        worker.kill()  # SIGKILL
        worker.wait()
    wait_for(lambda: not venv_processes(node_home), timeout=60,
             what="the remote python -m venv to be killed with its connection")
    assert not (node_home / VENV_DIR).exists()  # the cut-short build is not pointed at
    [cut_short] = half_made(node_home)
    assert not (cut_short / "installed.json").exists()

    with runner_for(node) as runner:
        python = ensure_runtime(runner, node)

    build = (node_home / VENV_DIR).resolve()
    assert python == str(build / "bin" / "python")
    assert list((node_home / BUILDS_DIR).iterdir()) == [build]  # the cut-short one removed
    assert json.loads((node_home / RECORD_FILE).read_text())["orch"] == orch_wheel().build
    with runner_for(node) as runner:
        works = runner.check(f"{python} -m pip --version && {python} -c "
                             "'import orch.runtime.jobs, ray; print(ray.__version__)'")
        assert ensure_runtime(runner, node) == python  # now trusted as it is
    assert works.tail.splitlines()[-1] == importlib.metadata.version("ray")
