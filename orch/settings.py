"""The config file, ``$ORCH_CONFIG`` or ``$ORCH_HOME/config.yaml``, and where each value
comes from.

A module of its own rather than part of :mod:`orch.config`: that module holds the paths
and constants everything imports (cheaply, before any YAML or catalog is read); this one
is the file's schema, its loader and error reporting, and the overlay of environment
variables, which together would double ``orch.config`` and tie every import of
``orch_home()`` to the catalog.

Precedence is env > file > default, per value; :class:`Loaded` keeps the source of each
one for ``orch config show``. A missing ``$ORCH_HOME/config.yaml`` means the defaults; an
``$ORCH_CONFIG`` naming a file that does not exist is an error (the user named it). Any
broken file (not UTF-8, not YAML, an unknown key, a wrong type, a directory) is a
:class:`ConfigError`: a :class:`orch.spec.SpecError`, so the CLI reports it the way it
reports task specs (file, field path, close matches; exit code 2).

The file is read where a value is used, each time (it is small): the CLI reads it for
checks made before anything is submitted, the worker's activities read it at each use
(so an edit takes effect at the next launch), and the worker reads the semaphore limits
and the Temporal connection once, at start. Workflows never read it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orch.catalog import CATALOG_CLOUDS, load_catalog
from orch.config import TemporalSettings, orch_home
from orch.lifecycle import Autostop
from orch.semaphore import PermitLimits
from orch.spec import SpecError, describe_error, suggest
from orch.spec_storage import parse_bucket_uri
from orch.spec_yaml import decode, load_documents

CLOUDS = ("local", *CATALOG_CLOUDS)
_DEFAULT_PERMITS = PermitLimits()
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")

# Environment variables that override a value of the file (dotted path -> variable).
ENV_VARS = {
    "cloud_identity": "ORCH_CLOUD_IDENTITY",
    "launch_permits": "ORCH_LAUNCH_PERMITS",
    "job_slots": "ORCH_JOB_SLOTS",
    "staging": "ORCH_STAGING",
    "server_sync": "ORCH_SERVER_SYNC",
    "temporal.address": "TEMPORAL_ADDRESS",
    "temporal.namespace": "TEMPORAL_NAMESPACE",
    "temporal.tls.cert": "TEMPORAL_TLS_CERT",
    "temporal.tls.key": "TEMPORAL_TLS_KEY",
    "temporal.tls.ca": "TEMPORAL_TLS_CA",
    "temporal.tls.enabled": "TEMPORAL_TLS",
}


class ConfigError(SpecError):
    """A config file (or an overriding variable) that cannot be used."""

    what = "config"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CloudSection(_Section):
    """Per-cloud settings (SkyPilot's ``aws:``/``gcp:``/``azure:`` sections)."""

    default_region: str | None = None


class TLSSection(_Section):
    enabled: bool | None = None  # None: on when a cert, a CA or an API key is given
    cert: str | None = None
    key: str | None = None
    ca: str | None = None


class TemporalSection(_Section):
    """An external Temporal server; no address means the embedded dev server."""

    address: str | None = None
    namespace: str = "default"
    tls: TLSSection = Field(default_factory=TLSSection)
    api_key_env: str = "TEMPORAL_API_KEY"  # the variable holding the key, read at connect


class AutostopSection(_Section):
    """SkyPilot's ``autostop: {idle_minutes, down}``."""

    idle_minutes: int = Field(ge=0)
    down: bool = False


class Settings(_Section):
    """The whole file; every field is optional."""

    allowed_clouds: list[str] | None = Field(default=None, min_length=1)  # None: all
    # Use the instance's own identity (AWS instance role, GCP metadata server, Azure managed
    # identity). Off: no metadata endpoint is ever asked, as from a laptop it only hangs.
    cloud_identity: bool = False
    aws: CloudSection = Field(default_factory=CloudSection)
    gcp: CloudSection = Field(default_factory=CloudSection)
    azure: CloudSection = Field(default_factory=CloudSection)
    launch_permits: int = Field(default=_DEFAULT_PERMITS.launch, ge=1)
    job_slots: int = Field(default=_DEFAULT_PERMITS.job, ge=1)
    temporal: TemporalSection = Field(default_factory=TemporalSection)
    autostop: AutostopSection | None = None  # None: no autostop unless asked for
    ssh_user: dict[str, str] = Field(default_factory=dict)  # image id or glob -> login user
    # Where workdirs and file mounts are staged for the workers (orch.staging): a bucket
    # URI every worker can read; None: the local store, shared with the embedded worker.
    staging: str | None = None
    # How the embedded server's SQLite syncs each commit (orch.server): "full" survives a
    # power loss or an OS crash too; "normal" survives a crash of the server, the worker or
    # the CLI, and may lose the last commits to a power loss (SQLite's WAL mode).
    server_sync: Literal["full", "normal"] = "full"

    @field_validator("allowed_clouds", mode="before")
    @classmethod
    def _clouds(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        names = [str(v).lower() for v in value]
        for name in names:
            if name not in CLOUDS:
                raise ValueError(f"unknown cloud {name!r}" + suggest(name, list(CLOUDS))
                                 + f" (clouds: {', '.join(CLOUDS)})")
        return names

    @field_validator("staging")
    @classmethod
    def _staging(cls, value: str | None) -> str | None:
        if value is not None:
            parse_bucket_uri(value)  # its ValueError says what is wrong
        return value

    @field_validator("ssh_user")
    @classmethod
    def _users(cls, value: dict[str, str]) -> dict[str, str]:
        for image, user in value.items():
            if not _USER.fullmatch(user):
                raise ValueError(f"{image}: {user!r} is not a login user name")
        return value

    # -- what the rest of orch asks ------------------------------------------------------
    def allows(self, cloud: str) -> bool:
        return self.allowed_clouds is None or cloud in self.allowed_clouds

    def default_regions(self) -> dict[str, str]:
        """Cloud -> its default region, for the clouds that have one."""
        sections = {"aws": self.aws, "gcp": self.gcp, "azure": self.azure}
        return {c: s.default_region for c, s in sections.items() if s.default_region}

    def launch_autostop(self, given: Autostop | None) -> Autostop | None:
        """The autostop of a launch: the flags' when given, else the file's default."""
        if given is not None or self.autostop is None:
            return given
        return Autostop(idle_minutes=self.autostop.idle_minutes, down=self.autostop.down)

    def permit_limits(self) -> PermitLimits:
        return PermitLimits(launch=self.launch_permits, job=self.job_slots)

    def temporal_settings(self) -> TemporalSettings:
        t = self.temporal
        return TemporalSettings(address=t.address, namespace=t.namespace, tls=t.tls.enabled,
                                tls_cert=t.tls.cert, tls_key=t.tls.key, tls_ca=t.tls.ca,
                                api_key_env=t.api_key_env)


class Loaded(BaseModel):
    """The effective settings, the file they were read from, and each value's source."""

    settings: Settings
    path: Path
    file_exists: bool
    sources: dict[str, str]  # dotted key -> "file PATH" / "env VAR" / "default"

    def values(self) -> dict[str, Any]:
        return _leaves(self.settings)


def configured_user(users: Mapping[str, str], *names: str | None) -> str | None:
    """The login user ``users`` (the config's ``ssh_user``) give an image known by any of
    ``names`` (its id, its name): an exact key first, then the first glob that matches, in
    file order."""
    given = [n for n in names if n]
    for name in given:
        if name in users:
            return users[name]
    for pattern, user in users.items():
        if any(fnmatch.fnmatchcase(name, pattern) for name in given):
            return user
    return None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    named = env.get("ORCH_CONFIG")
    return Path(named).expanduser() if named else orch_home(env) / "config.yaml"


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    return load(env).settings


def load(env: Mapping[str, str] | None = None) -> Loaded:
    """Read the file, overlay the environment, validate; raise :class:`ConfigError`."""
    env = os.environ if env is None else env
    path = config_path(env)
    source = str(path)
    exists = path.exists()
    if not exists and env.get("ORCH_CONFIG"):
        raise ConfigError(source, [("", "no such file (named by ORCH_CONFIG)")])
    data = _read(path) if exists else {}
    _validate(data, source)
    overrides = {key: env[var] for key, var in ENV_VARS.items() if env.get(var)}
    merged = _with_overrides(data, overrides)
    settings = _validate(merged, "environment", names=ENV_VARS)
    _check_regions(settings, source)
    sources = {key: (f"env {ENV_VARS[key]}" if key in overrides
                     else f"file {source}" if _present(data, key) else "default")
               for key in _leaves(settings)}
    return Loaded(settings=settings, path=path, file_exists=exists, sources=sources)


def _read(path: Path) -> dict[str, Any]:
    source = str(path)
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise ConfigError(source, [("", "is a directory, not a file")]) from None
    except OSError as exc:
        raise ConfigError(source, [("", f"cannot be read: {exc.strerror or exc}")]) from None
    try:  # the task YAML's reader: encodings, limits, duplicate keys (see spec_yaml)
        documents = load_documents(decode(raw, source), source)
    except SpecError as err:
        raise ConfigError(source, err.problems) from None
    if len(documents) > 1:
        raise ConfigError(source, [("", f"expected one YAML document, found {len(documents)}")])
    data = documents[0] if documents else None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(source, [("", f"expected a mapping of settings, got "
                                        f"{type(data).__name__}")])
    return data


def _validate(data: dict[str, Any], source: str,
              names: Mapping[str, str] | None = None) -> Settings:
    """``names``: dotted key -> what to call it in a message (the variable that set it)."""
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = [_with_fields(describe_error(dict(e), _fields_at)) for e in exc.errors()]
        if names:
            problems = [(names.get(field, field), message) for field, message in problems]
        raise ConfigError(source, problems) from None


def _with_fields(problem: tuple[str, str]) -> tuple[str, str]:
    """An unknown key without a close match lists the keys its section has."""
    field, message = problem
    options = _fields_at(field.split("."))
    if message == "unknown field" and options:
        message += f" (known here: {', '.join(options)})"
    return field, message


def _fields_at(loc: list[str]) -> list[str]:
    """The field names allowed next to the last part of ``loc``."""
    model: type[BaseModel] = Settings
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        inner = field.annotation if field else None
        candidates = [a for a in (inner, *getattr(inner, "__args__", ()))
                      if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return []
        model = candidates[0]
    return sorted(model.model_fields)


def _with_overrides(data: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    merged: dict[str, Any] = dict(data)
    for key, value in overrides.items():
        node = merged
        *parents, last = key.split(".")
        for part in parents:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, dict) else {}
            node = node[part]
        node[last] = value
    return merged


def _present(data: Any, key: str) -> bool:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def _leaves(model: BaseModel, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value, descending into sections (a mapping or list is one value)."""
    leaves: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            leaves.update(_leaves(value, f"{prefix}{name}."))
        else:
            leaves[prefix + name] = value
    return leaves


def _check_regions(settings: Settings, source: str) -> None:
    problems = []
    for cloud, region in settings.default_regions().items():
        regions = sorted(load_catalog(cloud).zones_by_region)
        if region not in regions:
            problems.append((f"{cloud}.default_region", f"unknown region {region!r} of {cloud}"
                             + suggest(region, regions)))
    if problems:
        raise ConfigError(source, problems)
