"""Cluster and managed-job names: the user's rule, and the name a cloud sees.

The user's rule is SkyPilot's (``common_utils.check_cluster_name_is_valid``): letters,
digits, ``-``, ``_`` and ``.``, starting with a letter and ending with a letter or a digit,
at most :data:`MAX_NAME_LENGTH` characters. It is checked before anything starts, so
``orch launch -c 'bad;name'`` exits 2 instead of provisioning a cluster of that name.

The name on cloud is separate (SkyPilot's ``cluster_name_on_cloud``): the user's name made
cloud-safe (lowercase, ``_`` and ``.`` become ``-``, cut to fit) plus ``-<hash>``, a short
hash of the control plane's identity. Every provider tags, labels and names instances with
it and finds them by it, so two control planes on one cloud account never adopt, stop or
terminate each other's instances, even for clusters of the same user name (and managed-job
clusters, ``job-<id>-<n>``, stay distinct although both control planes count ids from 1).
A cluster lands on a cloud only once failover picks one, while its name must be fixed
(and recorded) before: so there is one name on cloud, valid under every cloud's rule at
once (:data:`CLOUD_NAME_RULES`: GCP's lowercase and 35 characters are the strictest).

The identity (:func:`control_plane_hash`) is a random id created once in
``$ORCH_HOME/control_plane_id``, combined with which Temporal server and namespace the
client talks to (``embedded`` for the dev server ``$ORCH_HOME`` runs). Why both: the
random part tells apart two machines that each run their own embedded server on the same
address (SkyPilot's user hash does the same with user and hostname); the server part tells
apart two control planes used from one ``$ORCH_HOME``. ``$ORCH_CONTROL_PLANE_ID`` replaces
it all, for deployments that want one fixed identity. The hash is computed by the client
when an operation starts and travels in workflow inputs (workflows stay deterministic);
a cluster's record keeps its name on cloud, so whoever later stops or tears it down uses
the name it was made with.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from orch.spec_errors import SpecError

NAME_REGEX = r"[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?"  # SkyPilot's CLUSTER_NAME_VALID_REGEX
MAX_NAME_LENGTH = 63  # a Temporal id part and a DNS label; the name on cloud is cut anyway
RULE = ("letters, digits, '-', '_' and '.', starting with a letter and ending with a letter "
        f"or digit, at most {MAX_NAME_LENGTH} characters (SkyPilot's rule: {NAME_REGEX})")
HASH_LENGTH = 6  # hex digits of the control plane's hash in a name on cloud
NAME_HASH_LENGTH = 4  # hex digits of the user's name, when the cloud-safe form lost detail
ID_FILE = "control_plane_id"
ID_ENV = "ORCH_CONTROL_PLANE_ID"

# Per cloud: the longest name on cloud and the characters allowed (SkyPilot's
# _MAX_CLUSTER_NAME_LEN_LIMIT where it has one). AWS: tags hold 256 characters and the
# security group and key pair names orch derives add a prefix within EC2's 255; local:
# a directory and instance-id part.
CLOUD_NAME_RULES: dict[str, tuple[int, str]] = {
    "gcp": (35, r"[a-z]([-a-z0-9]*[a-z0-9])?"),  # GCP resource names and label values
    "azure": (42, r"[a-z]([-a-z0-9]*[a-z0-9])?"),  # resource group orch-<name>-<region>
    "aws": (200, r"[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?"),
    "local": (100, r"[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?"),
}
CLOUD_SAFE_LENGTH = min(length for length, _ in CLOUD_NAME_RULES.values())


class InvalidNameError(SpecError):
    """A cluster or managed-job name outside the rule; the CLI exits 2 with it."""

    def __init__(self, source: str, field: str, kind: str, problem: str):
        self.what = kind
        super().__init__(source, [(field, problem)])


def name_problem(name: str) -> str | None:
    """What is wrong with ``name`` under :data:`RULE`, or None when it is valid."""
    if not name:
        return "the name is empty; use " + RULE
    shown = name if len(name) <= 80 else name[:77] + "..."
    if len(name) > MAX_NAME_LENGTH:
        return f"{shown!r} has {len(name)} characters, more than {MAX_NAME_LENGTH}"
    if re.fullmatch(NAME_REGEX, name) is None:
        bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "-_."))})
        why = (f"has {', '.join(repr(c) for c in bad)}" if bad
               else "does not start with a letter" if not name[0].isalpha()
               else "does not end with a letter or digit")
        return f"{shown!r} {why}; use {RULE}"
    return None


def check_name(name: str, source: str, field: str = "", kind: str = "cluster name") -> str:
    """``name`` when valid; else :class:`InvalidNameError` naming ``source`` (the flag or
    file) and ``field`` (the YAML field, if any)."""
    problem = name_problem(name)
    if problem is not None:
        raise InvalidNameError(source, field, kind, problem)
    return name


def name_on_cloud(name: str, plane_hash: str, max_length: int = CLOUD_SAFE_LENGTH) -> str:
    """``<cloud-safe name>-<plane_hash>``, at most ``max_length`` characters, after
    SkyPilot's ``make_cluster_name_on_cloud``. When lowercasing, replacing ``_``/``.`` or
    cutting changed the name, a short hash of the user's name is added before the plane's,
    so ``A`` and ``a`` (or two long names with one prefix) stay different clusters.

    Pure: workflows call it for managed-job clusters, with a hash from their input.
    ``plane_hash`` empty gives the user's name itself (records made before names on cloud).
    """
    if not plane_hash:
        return name
    slug = re.sub(r"[._]", "-", name).lower()
    suffix = f"-{plane_hash}"
    if slug == name and len(slug) + len(suffix) <= max_length:
        return slug + suffix
    suffix = f"-{hashlib.sha256(name.encode()).hexdigest()[:NAME_HASH_LENGTH]}{suffix}"
    cut = slug[:max_length - len(suffix)].rstrip("-")
    if not cut:
        raise ValueError(f"no room for a name in {max_length} characters")
    return cut + suffix


def valid_on(cloud: str, cloud_name: str) -> bool:
    """Whether ``cloud_name`` fits ``cloud``'s rule in :data:`CLOUD_NAME_RULES`."""
    length, pattern = CLOUD_NAME_RULES[cloud]
    return len(cloud_name) <= length and re.fullmatch(pattern, cloud_name) is not None


def control_plane_id(home: Path, env: Mapping[str, str] | None = None) -> str:
    """``$ORCH_CONTROL_PLANE_ID``, else the random id in ``home``, created on first use
    (atomically: two first launches at once agree on one id)."""
    env = os.environ if env is None else env
    if env.get(ID_ENV):
        return env[ID_ENV]
    path = home / ID_FILE
    try:
        return _read_id(path)
    except FileNotFoundError:
        pass
    home.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{ID_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    tmp.write_text(secrets.token_hex(16) + "\n")
    try:
        os.link(tmp, path)  # fails if another process made it first: then use theirs
    except FileExistsError:
        if not path.read_text().strip():
            os.replace(tmp, path)  # an empty one, left by a crash mid-write
    finally:
        tmp.unlink(missing_ok=True)
    return _read_id(path)


def _read_id(path: Path) -> str:
    text = path.read_text().strip()
    if not text:
        raise FileNotFoundError(path)  # empty: made again by the caller
    return text


def control_plane_hash(home: Path, server: str, env: Mapping[str, str] | None = None) -> str:
    """The control plane's short hash: of its id (see :func:`control_plane_id`) and
    ``server`` ("embedded", or ``address/namespace``), unless the id is given by env."""
    env = os.environ if env is None else env
    identity = env.get(ID_ENV) or f"{control_plane_id(home, env)}|{server}"
    return hashlib.sha256(identity.encode()).hexdigest()[:HASH_LENGTH]
