"""Runtime setup (orch/runtime/install.py) on sandbox nodes reached with a LocalRunner.

An SSH node is played by a sandbox home directory whose ``python3`` is an "image"
interpreter (tests/fakes/twin_hosts.Image): this Python with this venv's packages in its
user site-packages (Ray preinstalled, orch not), or with nothing at all. The commands,
the venv, pip and the wheel are all real.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from orch.clouds.base import NodeInfo
from orch.clouds.errors import SetupError
from orch.runtime import wheel as wheel_module
from orch.runtime.commands import CommandResult
from orch.runtime.install import (
    NodeState,
    RuntimeRecord,
    Step,
    ensure_runtime,
    plan,
    ray_requirement,
    trusted,
)
from orch.runtime.runner import LocalRunner
from orch.runtime.wheel import content_digest, orch_wheel
from tests.fakes.twin_hosts import Image

PINNED_RAY = importlib.metadata.version("ray")
WANTED = RuntimeRecord(ray=PINNED_RAY, orch="0.1.0+abc")
VENV = ".orch/runtime/venv"
BUILDS = ".orch/runtime/venvs"


class RecordingRunner(LocalRunner):
    """A LocalRunner that remembers what it was asked to do."""

    def __init__(self, node: NodeInfo):
        super().__init__(node)
        self.commands: list[str] = []
        self.uploads: list[str] = []

    def run(self, command: str, **kwargs) -> CommandResult:  # type: ignore[no-untyped-def]
        self.commands.append(command)
        return super().run(command, **kwargs)

    def upload(self, local: str, remote: str) -> None:
        self.uploads.append(remote)
        super().upload(local, remote)


@pytest.fixture
def sandbox(tmp_path: Path, wheel_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node's home whose login ``python3`` is this Python, and nothing else of this run
    leaking into the node's environment."""
    monkeypatch.setenv("ORCH_HOME", str(wheel_home))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("PYTHONNOUSERSITE", raising=False)
    home = tmp_path / "node"
    home.mkdir()
    python = Image.of_this_venv().python
    bin_dir = tmp_path / "image-bin"  # LocalRunner runs bash -c, not a login shell
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(python)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return home


def ssh_node(home: Path) -> NodeInfo:
    return NodeInfo(instance_id="node-1", internal_ip="127.0.0.1", runner="ssh",
                    home=str(home))


def venv_python(home: Path) -> str:
    """The interpreter of the build the venv link points at, by its own path."""
    return str((home / VENV).resolve() / "bin" / "python")


def run_in_node(home: Path, python: str, code: str) -> str:
    result = LocalRunner(ssh_node(home)).check(f"{python} -c '{code}'")
    return result.tail.splitlines()[-1]


# --- what to do -------------------------------------------------------------------------------


def test_without_a_venv_that_runs_nothing_is_trusted() -> None:
    assert not trusted(NodeState(), WANTED)


def test_a_fresh_venv_over_an_image_with_ray_needs_the_ray_command_and_orch() -> None:
    state = NodeState(python="/h/venv/bin/python", ray=PINNED_RAY)
    assert plan(state, WANTED) == [Step.RAY_CLI, Step.ORCH]


def test_a_bare_image_needs_everything_in_order() -> None:
    state = NodeState(python="/h/venv/bin/python", missing=["pydantic"])
    assert plan(state, WANTED) == [Step.RAY, Step.DEPENDENCIES, Step.RAY_CLI, Step.ORCH]


def test_a_complete_venv_with_its_record_is_trusted() -> None:
    state = NodeState(python="/h/venv/bin/python", ray=PINNED_RAY, ray_cli=True, orch=True,
                      record=WANTED)
    assert plan(state, WANTED) == [] and trusted(state, WANTED)


def test_a_venv_without_its_record_is_not_trusted_however_complete_it_looks() -> None:
    state = NodeState(python="/h/venv/bin/python", ray=PINNED_RAY, ray_cli=True, orch=True)
    assert plan(state, WANTED) == [] and not trusted(state, WANTED)


def test_another_orch_build_or_ray_version_is_not_trusted() -> None:
    complete = NodeState(python="/h/venv/bin/python", ray=PINNED_RAY, ray_cli=True, orch=True)
    older_orch = complete.model_copy(update={
        "record": RuntimeRecord(ray=PINNED_RAY, orch="0.1.0+old")})
    assert not trusted(older_orch, WANTED)
    other_ray = complete.model_copy(update={"ray": "2.0.0", "record": WANTED})
    assert not trusted(other_ray, WANTED)
    assert plan(other_ray, WANTED) == [Step.RAY, Step.RAY_CLI]


def test_ray_is_pinned_with_the_extras_orch_asks_for() -> None:
    ours = next(Requirement(r) for r in importlib.metadata.requires("orch") or []
                if Requirement(r).name == "ray")
    pinned = Requirement(ray_requirement(PINNED_RAY))
    assert (pinned.name, str(pinned.specifier), pinned.extras) == (
        "ray", f"=={PINNED_RAY}", ours.extras)


# --- the wheel --------------------------------------------------------------------------------


def test_the_digest_follows_the_content(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    source = tmp_path / "pkg" / "a.py"
    source.write_text("x = 1\n")
    before = content_digest(tmp_path, [source])
    assert content_digest(tmp_path, [source]) == before
    source.write_text("x = 2\n")
    assert content_digest(tmp_path, [source]) != before


def test_the_wheel_holds_the_sources_and_is_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A snapshot of the sources: the working tree may be edited while the test runs.
    tree = wheel_module.source_tree()
    snapshot = tmp_path / "src"
    for path in wheel_module.wheel_sources(tree):
        (snapshot / path.relative_to(tree)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, snapshot / path.relative_to(tree))
    monkeypatch.setattr(wheel_module, "source_tree", lambda: snapshot)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "orch-home"))

    wheel = orch_wheel()

    assert wheel.path.parent.parent == tmp_path / "orch-home" / "wheels"
    assert wheel.build == f"{importlib.metadata.version('orch')}+{wheel.digest}"
    with zipfile.ZipFile(wheel.path) as archive:
        assert archive.read("orch/runtime/jobs.py") == (
            snapshot / "orch" / "runtime" / "jobs.py").read_bytes()
    built_at = wheel.path.stat().st_mtime_ns
    wheel_module._wheel_in.cache_clear()  # as a new worker process would
    again = orch_wheel()
    assert (again.path, again.path.stat().st_mtime_ns) == (wheel.path, built_at)


# --- on a node --------------------------------------------------------------------------------


def test_a_local_node_is_only_checked(tmp_path: Path) -> None:
    node = NodeInfo(instance_id="local-1", internal_ip="127.0.0.2", runner="local",
                    home=str(tmp_path), python=sys.executable)
    runner = RecordingRunner(node)
    assert ensure_runtime(runner, node) == sys.executable
    assert len(runner.commands) == 1 and runner.uploads == []

    without_site = tmp_path / "python-without-site"
    without_site.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    without_site.chmod(0o755)
    bare = node.model_copy(update={"python": str(without_site)})
    with pytest.raises(SetupError, match="cannot import Ray"):
        ensure_runtime(LocalRunner(bare), bare)


def test_an_image_with_ray_gets_orch_once_and_then_only_a_probe(sandbox: Path) -> None:
    Image.of_this_venv().install(sandbox)  # Ray in the user's site-packages
    node = ssh_node(sandbox)
    runner = RecordingRunner(node)

    python = ensure_runtime(runner, node)

    assert python == venv_python(sandbox)
    build = (sandbox / VENV).resolve()
    assert build.parent == sandbox / BUILDS  # the link points at the build
    found = json.loads(run_in_node(sandbox, python, (
        "import json, orch.runtime.jobs, ray; "
        "print(json.dumps([orch.runtime.jobs.__file__, ray.__file__, ray.__version__]))")))
    assert found[0].startswith(str(build))  # orch from the wheel, in the venv
    assert found[1].startswith(str(sandbox / ".local"))  # the image's Ray
    assert found[2] == PINNED_RAY
    ray_cli = LocalRunner(node).check(f"{sandbox / VENV / 'bin' / 'ray'} --version")
    assert PINNED_RAY in ray_cli.tail
    record = json.loads((build / "installed.json").read_text())
    assert record == {"ray": PINNED_RAY, "orch": orch_wheel().build}
    assert runner.uploads and not (build / "wheels").exists()

    again = RecordingRunner(node)
    assert ensure_runtime(again, node) == python
    assert (len(again.commands), again.uploads) == (1, [])

    # Another build of orch recorded (as after an upgrade of the worker): a new venv is
    # built beside, and the one it replaces is kept as the previous one.
    (build / "installed.json").write_text(json.dumps({"ray": PINNED_RAY, "orch": "0.0.1+0000"}))
    upgrade = RecordingRunner(node)
    upgraded = ensure_runtime(upgrade, node)
    assert upgraded == venv_python(sandbox) != python
    assert len(upgrade.uploads) == 1
    assert json.loads((sandbox / VENV / "installed.json").read_text()) == record
    assert (sandbox / ".orch/runtime/venv.previous").resolve() == build
    assert sorted((sandbox / BUILDS).iterdir()) == sorted([build, (sandbox / VENV).resolve()])


def test_a_half_made_venv_at_the_final_path_is_not_trusted(sandbox: Path) -> None:
    """The venv a worker killed mid ``python -m venv`` left under an orch before builds:
    an interpreter that runs, no pip, no record. It is replaced, not repaired."""
    Image.of_this_venv().install(sandbox)
    half_made = sandbox / VENV
    subprocess.run([str(Image.of_this_venv().python), "-m", "venv", "--without-pip",
                    "--system-site-packages", str(half_made)], check=True)
    node = ssh_node(sandbox)

    python = ensure_runtime(LocalRunner(node), node)

    assert (sandbox / VENV).is_symlink() and python == venv_python(sandbox)
    assert not python.startswith(str(half_made) + "/")
    assert run_in_node(sandbox, python, "import pip, orch.runtime.jobs; print(1)") == "1"
    assert json.loads((sandbox / VENV / "installed.json").read_text())["ray"] == PINNED_RAY


def _fake_wheel(directory: Path, name: str, version: str, files: dict[str, str],
                entry_points: str = "") -> None:
    """A minimal but valid wheel, standing in for the index's (hundreds of MB for Ray)."""
    dist_info = f"{name}-{version}.dist-info"
    members = {
        **files,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n",
    }
    if entry_points:
        members[f"{dist_info}/entry_points.txt"] = entry_points
    members[f"{dist_info}/RECORD"] = "".join(f"{path},,\n" for path in members) + \
        f"{dist_info}/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in members.items():
            archive.writestr(path, text)


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """pip on the node finds packages only in a local directory."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    yield wheels


def test_a_bare_image_gets_the_pinned_ray_from_the_index(
    sandbox: Path, local_index: Path
) -> None:
    image_python = Image.of_this_venv().python
    probe = subprocess.run([str(image_python), "-c", "import ray"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{image_python} has Ray of its own: it is not a bare image")
    _fake_wheel(local_index, "ray", PINNED_RAY, {
        "ray/__init__.py": f"__version__ = {PINNED_RAY!r}\n",
        "ray/scripts/__init__.py": "",
        "ray/scripts/scripts.py": "def main():\n    print('ray, version', "
                                  f"{PINNED_RAY!r})\n",
    }, entry_points="[console_scripts]\nray = ray.scripts.scripts:main\n")
    pydantic = importlib.metadata.version("pydantic")  # only installed if the image lacks it
    _fake_wheel(local_index, "pydantic", pydantic, {"pydantic/__init__.py": ""})
    node = ssh_node(sandbox)
    runner = RecordingRunner(node)

    python = ensure_runtime(runner, node)

    installs = [c for c in runner.commands if " -m pip install " in c and "ray" in c]
    assert len(installs) == 1 and ray_requirement(PINNED_RAY) in installs[0]
    site_packages = sandbox / VENV / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert (site_packages / "site-packages" / f"ray-{PINNED_RAY}.dist-info").is_dir()
    assert run_in_node(sandbox, python, "import pydantic, orch.runtime.jobs; print(1)") == "1"
    assert PINNED_RAY in LocalRunner(node).check(f"{sandbox / VENV / 'bin' / 'ray'}").tail
