"""Make a node able to run orch's node-side modules (``python -m orch.runtime.ray_node``,
``jobs``, ``driver``) with Ray at the version the running orch uses.

What SkyPilot does at launch in ``sky/provision/instance_setup.py`` and its runtime setup
commands, as one idempotent call, :func:`ensure_runtime`:

* A local-cloud node runs on this machine, with the interpreter its record names: that
  interpreter must import Ray and orch, and nothing is installed.
* An SSH node gets a venv at ``~/.orch/runtime/venv``, created with
  ``--system-site-packages`` from the node's ``python3``, so that an image with Ray
  preinstalled (SkyPilot's images have it) is reused as it is. Ray is pip installed at the
  pinned version only when that version is not importable; orch's other node-side
  dependencies (:data:`NODE_DEPENDENCIES`) likewise. orch itself is shipped as a wheel of
  the running orch (:func:`orch_wheel`), uploaded over the runner and installed with
  ``--no-deps``. What is installed is recorded in ``~/.orch/runtime/installed.json``.

A first command probes the node (versions found, the record, the venv interpreter's
path); when everything matches, that one command is the whole call. Install steps stream
their output to the log line by line, so a long download shows progress as it goes.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import logging
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from enum import Enum
from pathlib import Path

from packaging.requirements import Requirement
from pydantic import BaseModel, Field

from orch.clouds.base import NodeInfo
from orch.clouds.errors import SetupError
from orch.config import orch_home
from orch.runtime.runner import CommandResult, CommandRunner

log = logging.getLogger(__name__)

DISTRIBUTION = "orch"
RUNTIME_DIR = ".orch/runtime"  # on the node, relative to the login user's home
VENV_DIR = f"{RUNTIME_DIR}/venv"
RECORD_FILE = f"{RUNTIME_DIR}/installed.json"
WHEELS_DIR = f"{RUNTIME_DIR}/wheels"  # where wheels are uploaded; removed once installed
# What orch's node-side modules import besides Ray and the standard library.
NODE_DEPENDENCIES = ("pydantic",)

PROBE_TIMEOUT_S = 120.0
VENV_TIMEOUT_S = 900.0  # may install the distribution's venv package first
PIP_TIMEOUT_S = 1800.0  # Ray and its dependencies are hundreds of megabytes
BUILD_TIMEOUT_S = 600.0
# The project's own files that a setuptools build reads, besides its packages.
_BUILD_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in")
_BUILD_PREFIXES = ("README", "LICENSE", "COPYING")
_PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
            "PIP_PROGRESS_BAR": "off"}


class WheelBuildError(Exception):
    """Building the wheel of the running orch failed (retryable: the build fetches its
    build backend from the package index)."""


# --- the wheel of the running orch ----------------------------------------------------------


class OrchWheel(BaseModel):
    path: Path
    version: str
    digest: str  # of the sources it was built from

    @property
    def build(self) -> str:
        """Names this build: the version alone does not change with every edit."""
        return f"{self.version}+{self.digest}"


def source_tree() -> Path:
    """The source tree the running orch is imported from (an editable install, or a
    checkout on the path): the directory above the ``orch`` package, with pyproject.toml."""
    tree = Path(__file__).resolve().parents[2]
    if not (tree / "pyproject.toml").is_file():
        raise SetupError(
            f"orch runs from {tree}, not from a source tree (pip install -e <dir>), so the "
            "worker cannot build the wheel of orch that nodes install")
    return tree


def wheel_sources(tree: Path) -> list[Path]:
    """What the wheel is built from: the project files a build reads (pyproject.toml, the
    readme...) and the files of its top-level packages, without caches."""
    packages = (importlib.metadata.distribution(DISTRIBUTION).read_text("top_level.txt")
                or "").split()
    if not packages:
        raise SetupError(f"the {DISTRIBUTION} distribution does not list its packages "
                         "(top_level.txt)")
    files = [p for p in tree.iterdir()
             if p.is_file() and (p.name in _BUILD_FILES or p.name.startswith(_BUILD_PREFIXES))]
    for package in packages:
        files += [p for p in (tree / package).rglob("*")
                  if p.is_file() and "__pycache__" not in p.relative_to(tree).parts]
    return sorted(files)


def content_digest(tree: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(tree)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _stage(tree: Path, files: list[Path], stage: Path) -> list[Path]:
    """Copy ``files`` to ``stage``: the wheel is built from, and named by, a snapshot (the
    tree may be edited meanwhile, and building in it would leave build/ and *.egg-info)."""
    staged = []
    for path in files:
        target = stage / path.relative_to(tree)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        staged.append(target)
    return staged


def _pip_wheel(stage: Path, into: Path) -> Path:
    """``pip wheel --no-deps`` of the project at ``stage``, into the new directory ``into``."""
    out = stage.parent / "out"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "--no-input", "--progress-bar", "off", "--wheel-dir", str(out), str(stage)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
    built = sorted(out.glob("*.whl"))
    if result.returncode != 0 or len(built) != 1:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise WheelBuildError(f"pip wheel of orch failed (exit code {result.returncode}):\n"
                              f"{tail}")
    into.mkdir(parents=True)
    return Path(shutil.move(built[0], into / built[0].name))


@functools.cache
def _wheel_in(home: Path) -> OrchWheel:
    tree = source_tree()
    version = importlib.metadata.version(DISTRIBUTION)
    cache = home / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="orch-wheel-") as scratch:
        stage = Path(scratch) / "src"
        digest = content_digest(stage, _stage(tree, wheel_sources(tree), stage))
        directory = cache / f"{version}-{digest}"
        with open(cache / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # other workers on this machine share the cache
            found = sorted(directory.glob("*.whl"))
            if not found:
                log.info("building the wheel of orch %s from %s", version, tree)
                partial = cache / f".{directory.name}.partial"
                shutil.rmtree(partial, ignore_errors=True)
                found = [directory / _pip_wheel(stage, partial).name]
                partial.rename(directory)
    return OrchWheel(path=found[0], version=version, digest=digest)


_wheel_lock = threading.Lock()


def orch_wheel() -> OrchWheel:
    """The wheel of the running orch: built once per process (the first call hashes the
    sources and builds when ``$ORCH_HOME/wheels`` has no wheel of that version and
    content), then reused."""
    with _wheel_lock:  # the nodes of one launch are set up in parallel threads
        return _wheel_in(orch_home())


# --- what a node has and lacks --------------------------------------------------------------


def _home(path: str) -> str:
    """``path`` (relative to the home) as a shell word that bash expands on the node."""
    return f'"$HOME"/{shlex.quote(path)}'


# Printed as one JSON line by the venv's interpreter. find_spec locates without importing,
# so the probe takes a fraction of a second even with Ray installed.
_PROBE = """\
import importlib.metadata, importlib.util, json, os, sys

def version(name):
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None

def importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False

try:
    with open(os.path.expanduser("~/{record}")) as handle:
        record = json.load(handle)
except (OSError, ValueError):
    record = None
print(json.dumps({{
    "python": sys.executable,
    "ray": version("ray"),
    "ray_cli": os.path.exists(os.path.join(os.path.dirname(sys.executable), "ray")),
    "orch": importable("orch.runtime.jobs"),
    "missing": [name for name in {dependencies!r} if not importable(name)],
    "record": record,
}}))
"""

# The venv's interpreter must exist and run the probe; anything else means "no venv".
_PROBE_COMMAND = (
    f"{_home(VENV_DIR + '/bin/python')} -c "
    f"{shlex.quote(_PROBE.format(record=RECORD_FILE, dependencies=list(NODE_DEPENDENCIES)))}"
    " 2>/dev/null || echo '{}'"
)


class RuntimeRecord(BaseModel):
    """What ``installed.json`` holds: the Ray version and the orch build installed."""

    ray: str
    orch: str  # OrchWheel.build


class NodeState(BaseModel):
    """What the probe found on a node (all empty when the venv does not run)."""

    python: str | None = None  # the venv's interpreter, an absolute path
    ray: str | None = None  # the version of the importable Ray
    ray_cli: bool = False  # the venv's bin/ has the ray command
    orch: bool = False  # orch's node-side modules are importable
    missing: list[str] = Field(default_factory=list)  # NODE_DEPENDENCIES not importable
    record: RuntimeRecord | None = None


class Step(Enum):
    VENV = "create the venv"
    RAY = "install Ray"
    DEPENDENCIES = "install orch's node-side dependencies"
    RAY_CLI = "write the ray command"
    ORCH = "install orch"
    RECORD = "record what is installed"


def plan(state: NodeState, wanted: RuntimeRecord) -> list[Step]:
    """What is left to do, in order, on a node in ``state`` for it to run ``wanted``.
    Without a venv that runs, only the venv: what else is missing is known once it runs."""
    if state.python is None:
        return [Step.VENV]
    steps = []
    if state.ray != wanted.ray:
        steps.append(Step.RAY)
    if state.missing:
        steps.append(Step.DEPENDENCIES)
    if state.ray != wanted.ray or not state.ray_cli:
        steps.append(Step.RAY_CLI)
    if not state.orch or state.record is None or state.record.orch != wanted.orch:
        steps.append(Step.ORCH)
    if steps or state.record != wanted:
        steps.append(Step.RECORD)
    return steps


def pinned_ray_version() -> str:
    """The Ray this orch runs with: nodes run the same version."""
    return importlib.metadata.version("ray")


def _orch_requirements() -> dict[str, Requirement]:
    """orch's own requirements (not those of its extras), by project name."""
    found = {}
    for line in importlib.metadata.requires(DISTRIBUTION) or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found[requirement.name.lower()] = requirement
    return found


def ray_requirement(version: str) -> str:
    """``ray[<extras orch asks for>]==version``."""
    extras = sorted(_orch_requirements()["ray"].extras)
    return f"ray[{','.join(extras)}]=={version}" if extras else f"ray=={version}"


def dependency_requirements(names: list[str]) -> list[str]:
    """orch's requirement specifiers for the dependencies ``names`` (pydantic<3,>=2.7)."""
    requirements = _orch_requirements()
    return [str(requirements[name.lower()]) for name in names]


# --- doing it ---------------------------------------------------------------------------------

# Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in a package of its own,
# python3-venv, which their stock cloud images lack; their login user has passwordless sudo.
_CREATE_VENV = f"""\
venv={_home(VENV_DIR)}
create() {{ python3 -m venv --clear --system-site-packages "$venv"; }}
mkdir -p "$(dirname "$venv")"
if ! create; then
    command -v apt-get >/dev/null && sudo -n true 2>/dev/null || exit 1
    echo "installing python3-venv with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    sudo -nE apt-get install -y -q python3-venv \\
        || {{ sudo -nE apt-get update -q && sudo -nE apt-get install -y -q python3-venv; }} \\
        || exit 1
    create
fi
"""

# Ray inherited from the image has its ``ray`` command next to the image's interpreter,
# not in the venv's bin/ where orch.runtime.ray_node looks for it: write it there as pip
# writes console scripts.
_RAY_CLI = """\
import importlib.metadata, os, sys
entry = next(e for e in importlib.metadata.distribution("ray").entry_points
             if e.group == "console_scripts" and e.name == "ray")
module, _, function = entry.value.partition(":")
path = os.path.join(os.path.dirname(sys.executable), "ray")
with open(path + ".tmp", "w") as script:
    script.write(f"#!{sys.executable}\\nimport sys\\nfrom {module} import {function}\\n"
                 f"sys.exit({function}())\\n")
os.chmod(path + ".tmp", 0o755)
os.replace(path + ".tmp", path)
"""


class _Installer:
    """Runs the steps on one node, naming the node and the step in every failure."""

    def __init__(self, runner: CommandRunner, node: NodeInfo):
        self.runner = runner
        self.node = node

    def _log_line(self, line: str) -> None:
        log.info("[%s] %s", self.node.instance_id, line)

    def run(self, step: Step, command: str, timeout: float) -> CommandResult:
        log.info("node %s: %s", self.node.instance_id, step.value)
        result = self.runner.run(command, env=_PIP_ENV, on_line=self._log_line,
                                 timeout=timeout)
        if not result.ok:
            raise SetupError(f"runtime setup on node {self.node.instance_id} failed to "
                             f"{step.value} (exit code {result.returncode})", result.tail)
        return result

    def probe(self) -> NodeState:
        result = self.runner.run(_PROBE_COMMAND, timeout=PROBE_TIMEOUT_S)
        lines = result.tail.splitlines()
        if not result.ok or not lines:
            raise SetupError(f"node {self.node.instance_id} did not answer the runtime probe "
                             f"(exit code {result.returncode})", result.tail)
        return NodeState.model_validate_json(lines[-1])

    def pip_install(self, step: Step, python: str, requirements: list[str]) -> None:
        words = " ".join(shlex.quote(r) for r in requirements)
        self.run(step, f"{shlex.quote(python)} -m pip install {words}", PIP_TIMEOUT_S)

    def install_orch(self, python: str, wheel: OrchWheel) -> None:
        remote = f"{WHEELS_DIR}/{wheel.digest}/{wheel.path.name}"
        self.runner.upload(str(wheel.path), remote)
        self.run(Step.ORCH, f"{shlex.quote(python)} -m pip install --no-deps --force-reinstall "
                            f"{_home(remote)} && rm -rf {_home(WHEELS_DIR)}", PIP_TIMEOUT_S)

    def record(self, wanted: RuntimeRecord) -> None:
        partial = _home(RECORD_FILE + ".partial")
        self.run(Step.RECORD, f"printf '%s\\n' {shlex.quote(wanted.model_dump_json())} > "
                              f"{partial} && mv {partial} {_home(RECORD_FILE)}", PROBE_TIMEOUT_S)


def _check_local(runner: CommandRunner, node: NodeInfo) -> str:
    result = runner.run(f"{shlex.quote(node.python)} -c 'import ray, orch.runtime.jobs'",
                        timeout=PROBE_TIMEOUT_S)
    if not result.ok:
        raise SetupError(f"node {node.instance_id}: {node.python} cannot import Ray and "
                         "orch's node package", result.tail)
    return node.python


def ensure_runtime(runner: CommandRunner, node: NodeInfo) -> str:
    """Make ``node`` able to run orch's node-side modules with the pinned Ray, and return
    the interpreter to run them with there. Idempotent; see the module docstring."""
    if node.runner == "local":
        return _check_local(runner, node)
    installer = _Installer(runner, node)
    wheel = orch_wheel()
    wanted = RuntimeRecord(ray=pinned_ray_version(), orch=wheel.build)
    state = installer.probe()
    if state.python is None:
        installer.run(Step.VENV, _CREATE_VENV, VENV_TIMEOUT_S)
        state = installer.probe()
    python = state.python
    if python is None:
        raise SetupError(f"node {node.instance_id}: the venv at ~/{VENV_DIR} was created "
                         "but its interpreter does not run")
    steps = plan(state, wanted)
    if steps:
        log.info("node %s: runtime setup will %s", node.instance_id,
                 ", ".join(step.value for step in steps))
    for step in steps:
        if step is Step.RAY:
            installer.pip_install(step, python, [ray_requirement(wanted.ray)])
        elif step is Step.DEPENDENCIES:
            installer.pip_install(step, python, dependency_requirements(state.missing))
        elif step is Step.RAY_CLI:  # pip has written it when it installed Ray
            ray_cli = shlex.quote(str(Path(python).parent / "ray"))
            installer.run(step, f"test -e {ray_cli} || {shlex.quote(python)} -c "
                                f"{shlex.quote(_RAY_CLI)}", PROBE_TIMEOUT_S)
        elif step is Step.ORCH:
            installer.install_orch(python, wheel)
        elif step is Step.RECORD:
            installer.record(wanted)
    if steps and (left := plan(installer.probe(), wanted)):
        raise SetupError(f"node {node.instance_id}: after runtime setup the node still "
                         "needs to " + ", ".join(step.value for step in left))
    return python
