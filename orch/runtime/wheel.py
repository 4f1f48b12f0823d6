"""The wheel of the running orch, which SSH nodes install (orch.runtime.install): built
with ``pip wheel --no-deps`` from a snapshot of the source tree, named by a digest of its
content, and cached in ``$ORCH_HOME/wheels`` (built beside, in a ``.partial`` directory,
and renamed into place, under a lock shared by the workers of this machine).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import logging
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from pydantic import BaseModel

from orch.clouds.errors import SetupError
from orch.config import orch_home

log = logging.getLogger(__name__)

DISTRIBUTION = "orch"
BUILD_TIMEOUT_S = 600.0
# The project's own files that a setuptools build reads, besides its packages.
_BUILD_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in")
_BUILD_PREFIXES = ("README", "LICENSE", "COPYING")


class WheelBuildError(Exception):
    """Building the wheel of the running orch failed (retryable: the build fetches its
    build backend from the package index)."""


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
