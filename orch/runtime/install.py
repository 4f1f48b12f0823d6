"""Make a node able to run orch's node-side modules (``python -m orch.runtime.ray_node``,
``jobs``, ``driver``) with Ray at the version the running orch uses.

What SkyPilot does at launch in ``sky/provision/instance_setup.py`` and its runtime setup
commands, as one idempotent and crash-safe call, :func:`ensure_runtime`:

* A local-cloud node runs on this machine, with the interpreter its record names: that
  interpreter must import Ray and orch, and nothing is installed.
* An SSH node gets a venv, created with ``--system-site-packages`` from the node's
  ``python3``, so that an image with Ray preinstalled (SkyPilot's images have it) is reused
  as it is. Ray is pip installed at the pinned version only when that version is not
  importable; orch's other node-side dependencies (:data:`NODE_DEPENDENCIES`) likewise.
  orch itself is shipped as a wheel of the running orch (:mod:`orch.runtime.wheel`),
  uploaded over the runner and installed with ``--no-deps``.

Built beside, switched to when complete. A venv in use is never changed. Each install
builds a new one beside it, ``~/.orch/runtime/venvs/<time>-<random>/``; once everything
is installed and checked, it writes the build's record ``installed.json`` (the Ray version
and orch build) inside it, last, and then points the symbolic link ``~/.orch/runtime/venv``
at it (a new link renamed over the old one, which is atomic). The record is the completion
marker: the probe trusts a venv only when its record is there and names what is wanted, so
a directory at ``~/.orch/runtime/venv`` without one (made by an orch before this scheme, or
by hand) is never trusted but replaced, as is an older build. A venv is not moved once
made, because it is not relocatable: pip writes the venv's path into the scripts it
installs, ``ray`` among them.

A build cut short (a worker killed mid-venv or mid-pip, a step that failed) is never
pointed at, and is removed by the next install, which first removes every build but the
one in use and the one before it (``~/.orch/runtime/venv.previous``: a Ray started from it
may still run); so is any build left after a switch. Builds of two attempts never share a
directory. The interpreter returned is the build's own (``…/venvs/<id>/bin/python``), so a
process started with it keeps its venv when a later install switches the link.

A first command probes the venv in use (versions found, its record, the interpreter's
path); when it is complete for what is wanted, that one command is the whole call. Install
steps stream their output to the log line by line, so a long download shows progress.
"""

from __future__ import annotations

import importlib.metadata
import logging
import posixpath
import shlex
import time
import uuid
from enum import Enum

from packaging.requirements import Requirement
from pydantic import BaseModel, Field

from orch.clouds.base import NodeInfo
from orch.clouds.errors import SetupError
from orch.runtime.commands import CommandResult, CommandRunner
from orch.runtime.wheel import DISTRIBUTION, OrchWheel, orch_wheel

log = logging.getLogger(__name__)

RUNTIME_DIR = ".orch/runtime"  # on the node, relative to the login user's home
VENV_DIR = f"{RUNTIME_DIR}/venv"  # a symbolic link to the build in use
BUILDS_DIR = f"{RUNTIME_DIR}/venvs"
RECORD_NAME = "installed.json"  # in a build, written once it is complete
RECORD_FILE = f"{VENV_DIR}/{RECORD_NAME}"
# What orch's node-side modules import besides Ray and the standard library.
NODE_DEPENDENCIES = ("pydantic",)

PROBE_TIMEOUT_S = 120.0
VENV_TIMEOUT_S = 900.0  # may install the distribution's venv package first
PIP_TIMEOUT_S = 1800.0  # Ray and its dependencies are hundreds of megabytes
_PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
            "PIP_PROGRESS_BAR": "off"}


def _home(path: str) -> str:
    """``path`` (relative to the home) as a shell word that bash expands on the node."""
    return f'"$HOME"/{shlex.quote(path)}'


# --- what a venv has and lacks --------------------------------------------------------------

# Printed as one JSON line by the venv's interpreter. find_spec locates without importing,
# so the probe takes a fraction of a second even with Ray installed. Paths are the venv's
# real ones (not through the link), and orch counts only when it is the venv's own.
_PROBE = """\
import importlib.metadata, importlib.util, json, os, sys

prefix = os.path.realpath(sys.prefix)

def version(name):
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None

def spec(module):
    try:
        return importlib.util.find_spec(module)
    except ImportError:
        return None

def ours(module):
    found = spec(module)
    origin = found and found.origin and os.path.realpath(found.origin)
    return bool(origin and origin.startswith(prefix + os.sep))

try:
    with open(os.path.join(prefix, {record!r})) as handle:
        record = json.load(handle)
except (OSError, ValueError):
    record = None
print(json.dumps({{
    "python": os.path.join(prefix, "bin", "python"),
    "ray": version("ray"),
    "ray_cli": os.path.exists(os.path.join(prefix, "bin", "ray")),
    "orch": ours("orch.runtime.jobs"),
    "missing": [name for name in {dependencies!r} if spec(name) is None],
    "record": record,
}}))
"""


def _probe_command(venv: str) -> str:
    """Probe the venv at ``venv`` (relative to the home): its interpreter must exist and
    run the probe; anything else means "no venv"."""
    code = _PROBE.format(record=RECORD_NAME, dependencies=list(NODE_DEPENDENCIES))
    return f"{_home(venv + '/bin/python')} -c {shlex.quote(code)} 2>/dev/null || echo '{{}}'"


class RuntimeRecord(BaseModel):
    """What a build's ``installed.json`` holds: the Ray version and the orch build."""

    ray: str
    orch: str  # OrchWheel.build


class NodeState(BaseModel):
    """What the probe found in a venv (all empty when its interpreter does not run)."""

    python: str | None = None  # the venv's interpreter, an absolute path
    ray: str | None = None  # the version of the importable Ray
    ray_cli: bool = False  # the venv's bin/ has the ray command
    orch: bool = False  # orch's node-side modules are importable from the venv itself
    missing: list[str] = Field(default_factory=list)  # NODE_DEPENDENCIES not importable
    record: RuntimeRecord | None = None  # present once the venv is complete


class Step(Enum):
    VENV = "create the venv"
    RAY = "install Ray"
    DEPENDENCIES = "install orch's node-side dependencies"
    RAY_CLI = "write the ray command"
    ORCH = "install orch"
    SWITCH = "record what is installed and switch to it"


def plan(state: NodeState, wanted: RuntimeRecord) -> list[Step]:
    """What is left to install, in order, in a venv whose interpreter runs (``state``) for
    it to run ``wanted``; then it can be recorded and switched to."""
    steps = []
    if state.ray != wanted.ray:
        steps.append(Step.RAY)
    if state.missing:
        steps.append(Step.DEPENDENCIES)
    if state.ray != wanted.ray or not state.ray_cli:
        steps.append(Step.RAY_CLI)
    if not state.orch:
        steps.append(Step.ORCH)
    return steps


def trusted(state: NodeState, wanted: RuntimeRecord) -> bool:
    """Whether the venv in use serves as it is: complete (its record is there) for what is
    wanted, and nothing gone from it since."""
    return state.python is not None and state.record == wanted and not plan(state, wanted)


def _why_not(state: NodeState, wanted: RuntimeRecord) -> str:
    if state.python is None:
        return "no runtime venv runs"
    if state.record is None:
        return "the runtime venv has no record of a complete install"
    if state.record != wanted:
        return f"the runtime venv has Ray {state.record.ray} and orch {state.record.orch}"
    return "the runtime venv needs to " + ", ".join(s.value for s in plan(state, wanted))


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

# Every build but the one in use and the one before it: what an install cut short left.
# (rm may race with a step of an attempt whose worker died; what it leaves goes next time.)
_REMOVE_UNUSED = f"""\
runtime={_home(RUNTIME_DIR)}
mkdir -p "$runtime/venvs"
for build in "$runtime"/venvs/*; do
    [ -e "$build" ] || continue
    name=venvs/$(basename "$build")
    [ "$(readlink "$runtime/venv")" = "$name" ] \\
        || [ "$(readlink "$runtime/venv.previous")" = "$name" ] || rm -rf "$build" || true
done
"""

# Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in a package of its own,
# python3-venv, which their stock cloud images lack; their login user has passwordless sudo.
_CREATE_VENV = """\
venv={venv}
create() {{ python3 -m venv --clear --system-site-packages "$venv"; }}
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

# The record last, then the link (``mv -T`` renames the new link over the old one). A
# directory at the link's place, from an orch before builds, is moved aside as the previous.
_SWITCH = """\
set -e
cd {runtime}
printf '%s\\n' {record} > {build}/{record_name}.partial
mv {build}/{record_name}.partial {build}/{record_name}
old=$(readlink venv || true)
if [ -z "$old" ] && [ -d venv ]; then old={build}-before; mv venv "$old"; fi
ln -sfn {build} venv.new && mv -T venv.new venv
if [ -n "$old" ] && [ "$old" != {build} ]; then
    ln -sfn "$old" venv.previous.new && mv -T venv.previous.new venv.previous
fi
rm -rf installed.json wheels
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

    def probe(self, venv: str) -> NodeState:
        result = self.runner.run(_probe_command(venv), timeout=PROBE_TIMEOUT_S)
        lines = result.tail.splitlines()
        if not result.ok or not lines:
            raise SetupError(f"node {self.node.instance_id} did not answer the runtime probe "
                             f"(exit code {result.returncode})", result.tail)
        return NodeState.model_validate_json(lines[-1])

    def install(self, step: Step, python: str, state: NodeState, wanted: RuntimeRecord,
                wheel: OrchWheel) -> None:
        """One step of :func:`plan` in the venv of ``python``."""
        py = shlex.quote(python)
        if step is Step.RAY:
            self.pip_install(step, python, [ray_requirement(wanted.ray)])
        elif step is Step.DEPENDENCIES:
            self.pip_install(step, python, dependency_requirements(state.missing))
        elif step is Step.RAY_CLI:  # pip has written it when it installed Ray
            ray_cli = shlex.quote(posixpath.join(posixpath.dirname(python), "ray"))
            self.run(step, f"test -e {ray_cli} || {py} -c {shlex.quote(_RAY_CLI)}",
                     PROBE_TIMEOUT_S)
        elif step is Step.ORCH:
            # Into the build itself (an absolute path: SFTP's home may not be $HOME).
            wheels = posixpath.join(posixpath.dirname(posixpath.dirname(python)), "wheels")
            remote = f"{wheels}/{wheel.digest}/{wheel.path.name}"
            self.runner.upload(str(wheel.path), remote)
            self.run(step, f"{py} -m pip install --no-deps --force-reinstall "
                           f"{shlex.quote(remote)} && rm -rf {shlex.quote(wheels)}",
                     PIP_TIMEOUT_S)

    def pip_install(self, step: Step, python: str, requirements: list[str]) -> None:
        words = " ".join(shlex.quote(r) for r in requirements)
        self.run(step, f"{shlex.quote(python)} -m pip install {words}", PIP_TIMEOUT_S)

    def build(self, wanted: RuntimeRecord, wheel: OrchWheel) -> str:
        """A new venv beside the one in use, complete for ``wanted``, recorded and switched
        to; returns its interpreter."""
        name = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        path = f"{BUILDS_DIR}/{name}"
        self.run(Step.VENV, _REMOVE_UNUSED + _CREATE_VENV.format(venv=_home(path)),
                 VENV_TIMEOUT_S)
        state = self.probe(path)
        python = state.python
        if python is None:
            raise SetupError(f"node {self.node.instance_id}: the venv at ~/{path} was "
                             "created but its interpreter does not run")
        steps = plan(state, wanted)
        log.info("node %s: runtime setup will %s", self.node.instance_id,
                 ", ".join(step.value for step in [*steps, Step.SWITCH]))
        for step in steps:
            self.install(step, python, state, wanted, wheel)
        if left := plan(self.probe(path), wanted):
            raise SetupError(f"node {self.node.instance_id}: after runtime setup the venv "
                             "still needs to " + ", ".join(step.value for step in left))
        self.run(Step.SWITCH, _SWITCH.format(
            runtime=_home(RUNTIME_DIR), build=shlex.quote(f"venvs/{name}"),
            record=shlex.quote(wanted.model_dump_json()), record_name=RECORD_NAME,
        ) + _REMOVE_UNUSED, PROBE_TIMEOUT_S)
        return python


def _check_local(runner: CommandRunner, node: NodeInfo) -> str:
    result = runner.run(f"{shlex.quote(node.python)} -c 'import ray, orch.runtime.jobs'",
                        timeout=PROBE_TIMEOUT_S)
    if not result.ok:
        raise SetupError(f"node {node.instance_id}: {node.python} cannot import Ray and "
                         "orch's node package", result.tail)
    return node.python


def ensure_runtime(runner: CommandRunner, node: NodeInfo) -> str:
    """Make ``node`` able to run orch's node-side modules with the pinned Ray, and return
    the interpreter to run them with there. Idempotent and crash-safe; see the module
    docstring."""
    if node.runner == "local":
        return _check_local(runner, node)
    installer = _Installer(runner, node)
    wheel = orch_wheel()
    wanted = RuntimeRecord(ray=pinned_ray_version(), orch=wheel.build)
    state = installer.probe(VENV_DIR)
    if trusted(state, wanted) and state.python is not None:
        return state.python
    log.info("node %s: %s; building a new one beside it", node.instance_id,
             _why_not(state, wanted))
    return installer.build(wanted, wheel)
