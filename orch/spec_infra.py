"""SkyPilot's ``infra:`` field (``resources.infra`` and ``--infra``): one string that says
where to run, ``CLOUD[/REGION[/ZONE]]`` with ``*`` for "any".

orch keeps its placement in the ``cloud``/``region``/``zone`` fields of
:class:`orch.spec.Resources` (what the optimizer, the workflows and their stored histories
read), so ``infra`` is only a way of writing those three: it is parsed here into a
:class:`Location`, a wildcard becomes ``None``. Kubernetes and the other SkyPilot clouds
orch has no driver for are refused by name rather than reported as unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orch.catalog import CATALOG_CLOUDS
from orch.suggest import suggest

ORCH_CLOUDS = ("local", *CATALOG_CLOUDS)

# Clouds SkyPilot knows that orch has no driver for (SkyPilot 0.10's ALL_CLOUDS, less ours).
_SKYPILOT_ONLY_CLOUDS = (
    "kubernetes", "k8s", "ssh", "slurm", "lambda", "runpod", "vast", "oci", "ibm", "scp",
    "vsphere", "cudo", "fluidstack", "paperspace", "do", "nebius", "hyperbolic", "seeweb",
    "shadeform", "primeintellect", "coreweave",
)

FORMS = ("CLOUD, CLOUD/REGION or CLOUD/REGION/ZONE, with * for any part (for example aws, "
         "gcp/us-central1, aws/us-east-1/us-east-1a, */us-east-1, aws/*/us-east-1a)")


@dataclass(frozen=True)
class Location:
    """What an ``infra`` string says; ``None`` = any (a wildcard or a part left out)."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None

    def parts(self) -> dict[str, str | None]:
        return {"cloud": self.cloud, "region": self.region, "zone": self.zone}


def parse_infra(value: object) -> Location:
    """``"aws/us-east-1"`` → ``Location("aws", "us-east-1")``; ``ValueError`` (the message
    says which forms are valid, or why the cloud is refused) otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"expected {FORMS}; got {value!r}")
    text = value.strip()
    head = text.split("/", 1)[0].lower()
    if head in ("k8s", "kubernetes"):
        raise ValueError(f"Kubernetes (infra {value!r}) is not supported by orch; "
                         f"orch runs on {', '.join(ORCH_CLOUDS)}")
    parts = text.split("/")
    if not text or len(parts) > 3 or any(not p.strip() for p in parts):
        raise ValueError(f"expected {FORMS}; got {value!r}")
    cloud, region, zone = ([p.strip() for p in parts] + [None, None])[:3]
    return Location(cloud=_cloud(cloud, value), region=_any(region), zone=_any(zone))


def _any(part: str | None) -> str | None:
    return None if part in (None, "*") else part


def _cloud(name: str | None, value: str) -> str | None:
    cloud = _any(name)
    if cloud is None:
        return None
    cloud = cloud.lower()
    if cloud in ORCH_CLOUDS:
        return cloud
    if cloud in _SKYPILOT_ONLY_CLOUDS:
        raise ValueError(f"cloud {cloud!r} (infra {value!r}) is not supported by orch; "
                         f"orch runs on {', '.join(ORCH_CLOUDS)}")
    hint = suggest(cloud, ORCH_CLOUDS) or f"; orch's clouds are {', '.join(ORCH_CLOUDS)}"
    raise ValueError(f"unknown cloud {cloud!r} in infra {value!r}{hint}")


def conflicts(location: Location, given: Mapping[str, object]) -> list[str]:
    """The fields of ``given`` (cloud/region/zone set beside ``infra``) that say something
    else than ``infra``; a wildcard in ``infra`` agrees with anything."""
    found = []
    for field, said in location.parts().items():
        other = given.get(field)
        if said is None or other is None:
            continue
        if (str(other).lower() if field == "cloud" else str(other)) != said:
            found.append(field)
    return found
