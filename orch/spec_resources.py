"""The ``resources`` of a task: SkyPilot's resource fields as one pydantic model, its
``any_of``/``ordered`` choices, and the checks that need those choices.

Split from ``orch.spec`` (which re-exports ``Resources`` and ``JobRecovery``): the task
and its loading live there, what one node needs lives here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orch.clouds.tiers import DiskTier, NetworkTier
from orch.lifecycle import Autostop
from orch.spec_envs import parse_env_file as parse_env_file  # re-exported for the CLI
from orch.spec_envs import parse_env_flags as parse_env_flags
from orch.spec_infra import conflicts, parse_infra
from orch.spec_labels import RULES as LABEL_RULES
from orch.spec_labels import label_problem, parse_labels
from orch.spec_resource_fields import (
    autostop_setting,
    disk_size_gb,
    image_ids,
    max_hourly_cost,
    memory_with_units,
)
from orch.spec_unsupported import (
    IMAGE_DOCKER,
    UNSUPPORTED,
)
from orch.spec_values import MAX_DISK_GB, number_or_plus, parse_ports
from orch.spec_values import parse_accelerators as parse_accelerators


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecoveryStrategy(StrEnum):
    FAILOVER = "FAILOVER"
    EAGER_NEXT_REGION = "EAGER_NEXT_REGION"


class JobRecovery(StrictModel):
    strategy: RecoveryStrategy = RecoveryStrategy.EAGER_NEXT_REGION
    max_restarts_on_errors: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _string_form(cls, value: Any) -> Any:
        # SkyPilot accepts `job_recovery: failover` as well as the mapping form; `none`
        # (its docs' example) and a null strategy mean the default strategy.
        if isinstance(value, str):
            value = {"strategy": value}
        if isinstance(value, dict) and "strategy" in value:
            strategy = value["strategy"]
            rest = {k: v for k, v in value.items() if k != "strategy"}
            if strategy is None or (isinstance(strategy, str) and strategy.upper() == "NONE"):
                return rest
            if isinstance(strategy, str):
                return {**rest, "strategy": strategy.upper()}
        return value


class Resources(StrictModel):
    """One set of resource requirements; ``any_of`` / ``ordered`` list alternatives."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    # Input only: another way of writing cloud/region/zone (see _infra_location).
    infra: None = Field(default=None, exclude=True)
    instance_type: str | None = None
    cpus: str | None = None
    memory: str | None = None
    accelerators: dict[str, int] | None = None
    use_spot: StrictBool = False  # "yes" or 1 is a mistake, not true (SkyPilot's schema)
    disk_size: int = Field(default=256, ge=1, le=MAX_DISK_GB, strict=True)
    disk_tier: DiskTier | None = None  # None: the cloud's default, SkyPilot's medium
    network_tier: NetworkTier | None = None
    ports: list[str] = Field(default_factory=list)
    image_id: str | dict[str, str] | None = None  # a mapping: region → image
    labels: dict[str, str] = Field(default_factory=dict)
    max_hourly_cost: float | None = None  # US dollars per node and hour
    autostop: Autostop | None = None
    job_recovery: JobRecovery | None = None
    any_of: list[Resources] | None = None
    ordered: list[Resources] | None = None

    @model_validator(mode="before")
    @classmethod
    def _infra_location(cls, data: Any) -> Any:
        """``infra`` fills the cloud/region/zone not given beside it (a wildcard or a
        missing part as None, so an ``any_of`` entry's ``infra`` replaces the place it
        would inherit); the ``infra`` field's validator reports a malformed one."""
        if not isinstance(data, dict) or data.get("infra") is None:
            return data
        try:
            location = parse_infra(data["infra"])
        except ValueError:
            return data
        filled = {k: v for k, v in location.parts().items() if data.get(k) is None}
        return {**data, **filled}

    @model_validator(mode="before")
    @classmethod
    def _expand_accelerator_choices(cls, data: Any) -> Any:
        """A list of accelerators is an ordered preference, a set (YAML ``{A, B}``) any of."""
        if not isinstance(data, dict) or "accelerators" not in data:
            return data
        raw = data["accelerators"]
        try:
            parsed = None if isinstance(raw, list) else parse_accelerators(raw)
            choices = [parse_accelerators(item) for item in raw] if isinstance(raw, list) else []
        except ValueError:
            return data  # the field's own validator reports it, with its location
        if isinstance(raw, list):
            key = "ordered"
        else:
            if parsed is None or len(parsed) <= 1:
                single = {k: (v or 1) for k, v in (parsed or {}).items()} or None
                return {**data, "accelerators": single}
            choices = [{name: count or 1} for name, count in parsed.items()]
            key = "any_of"
        base = {k: v for k, v in data.items() if k != "accelerators"}
        entries = base.get("any_of") or base.get("ordered")
        if isinstance(entries, list):
            return _cross_product(base, entries, choices, key)
        alternatives = [{**base, "accelerators": choice} for choice in choices]
        return {**base, key: alternatives}

    @field_validator("accelerators", mode="before")
    @classmethod
    def _accelerators(cls, value: Any) -> dict[str, int | None] | None:
        if isinstance(value, list):
            raise ValueError("a list of accelerators is only allowed at the top of resources")
        return parse_accelerators(value)

    @field_validator("cloud")
    @classmethod
    def _cloud_lower(cls, value: str | None) -> str | None:
        return value.lower() if value else value

    @field_validator("infra", mode="before")
    @classmethod
    def _infra(cls, value: Any, info: ValidationInfo) -> None:
        """Checks ``infra`` (already copied into cloud/region/zone) and keeps None, so a
        task equals the same task written with cloud/region/zone."""
        if value is None:
            return None
        clash = conflicts(parse_infra(value), info.data)
        if clash:
            given = " and ".join(f"{field} {info.data[field]!r}" for field in clash)
            raise ValueError(f"infra {value!r} disagrees with {given}; say where once, in "
                             "infra or in cloud/region/zone")
        return None

    @field_validator("image_id", mode="before")
    @classmethod
    def _image_id(cls, value: Any) -> Any:
        images = value.values() if isinstance(value, dict) else [value]
        if any(isinstance(i, str) and i.strip().lower().startswith("docker:") for i in images):
            raise ValueError(UNSUPPORTED[IMAGE_DOCKER])
        return image_ids(value)

    # The field parsers of spec_resource_fields / spec_labels, one line each.
    _disk_size = field_validator("disk_size", mode="before")(
        lambda v: disk_size_gb(v) if v is not None else 256)
    _labels = field_validator("labels", mode="before")(parse_labels)
    _max_hourly_cost = field_validator("max_hourly_cost", mode="before")(
        lambda v: None if v is None else max_hourly_cost(v))
    _autostop = field_validator("autostop", mode="before")(autostop_setting)

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpus(cls, value: Any) -> str | None:
        return number_or_plus(value, "cpus")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str | None:
        return number_or_plus(memory_with_units(value), "memory")

    @field_validator("ports", mode="before")
    @classmethod
    def _ports(cls, value: Any) -> list[str]:
        return parse_ports(value)

    @field_validator("any_of", "ordered", mode="before")
    @classmethod
    def _alternatives(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("an empty list: give at least one alternative, or leave it out")
        return value

    @model_validator(mode="after")
    def _alternatives_are_exclusive(self) -> Resources:
        if self.any_of and self.ordered:
            raise ValueError("use either any_of or ordered, not both")
        return self

    def alternatives(self) -> list[Resources]:
        """The concrete choices: each ``any_of``/``ordered`` entry inherits unset fields; a
        per-region ``image_id`` makes one choice per region it names (SkyPilot: failover
        goes only through those regions)."""
        options = self.any_of or self.ordered
        if not options:
            return self._per_image_region()
        base = self.model_dump(exclude={"any_of", "ordered"}, exclude_unset=True)
        merged = [Resources.model_validate({**base, **o.model_dump(exclude_unset=True)})
                  for o in options]
        return [choice for option in merged for choice in option._per_image_region()]

    def _per_image_region(self) -> list[Resources]:
        if not isinstance(self.image_id, dict):
            return [self]
        if self.region is not None:
            image = self.image_id.get(self.region)
            if image is None:
                raise ValueError(f"image_id names no image for region {self.region!r} "
                                 f"(it has {', '.join(self.image_id)})")
            return [self.model_copy(update={"image_id": image})]
        return [self.model_copy(update={"region": region, "image_id": image})
                for region, image in self.image_id.items()]

    @property
    def is_ordered(self) -> bool:
        return bool(self.ordered)

    def min_cpus(self) -> float:
        return float(self.cpus.rstrip("+")) if self.cpus else 0.0

    def min_memory_gb(self, vcpus: float | None = None) -> float:
        """The GiB asked for; a ratio (``8x``) is per vCPU of ``vcpus`` (default: the
        cpus asked for)."""
        if not self.memory:
            return 0.0
        if self.memory.endswith("x"):
            return float(self.memory[:-1]) * (self.min_cpus() if vcpus is None else vcpus)
        return float(self.memory.rstrip("+"))


def _cross_product(base: dict[str, Any], entries: list[Any], choices: list[Any],
                   accelerators_kind: str) -> dict[str, Any]:
    """Accelerator choices beside ``any_of``/``ordered`` entries: every entry with every
    accelerator (an entry naming its own accelerators keeps them), as SkyPilot does. The
    result is ordered only when both lists are (entry by entry, accelerators in order);
    any set in the mix makes it ``any_of``."""
    outer = "ordered" if base.get("ordered") else "any_of"
    kind = "ordered" if outer == "ordered" and accelerators_kind == "ordered" else "any_of"
    product = []
    for entry in entries:
        if isinstance(entry, dict) and "accelerators" in entry:
            product.append(entry)
            continue
        product += [{**(entry if isinstance(entry, dict) else {}), "accelerators": choice}
                    for choice in choices]
    rest = {k: v for k, v in base.items() if k not in ("any_of", "ordered")}
    return {**rest, kind: product}


def choice_problems(resources: Resources) -> list[tuple[str, str]]:
    """Checks that need the resources' final choices: per-region images, and labels
    against each cloud a choice may land on (orch.spec_labels)."""
    try:
        choices = resources.alternatives()
    except ValueError as exc:
        return [("resources.image_id", str(exc))]
    for choice in choices:
        problem = label_problem(choice.labels, [choice.cloud] if choice.cloud
                                else sorted(LABEL_RULES))
        if problem:
            where = "" if choice.cloud else " (with no cloud named, it may land there)"
            return [("resources.labels", problem + where)]
    return []


