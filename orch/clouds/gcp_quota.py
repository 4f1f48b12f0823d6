"""Which Compute Engine quotas a launch consumes, and whether they have room.

Regional quotas come from ``regions.get`` (``quotas: [{metric, limit, usage}]``: CPUS,
N2_CPUS, NVIDIA_T4_GPUS, PREEMPTIBLE_CPUS, IN_USE_ADDRESSES...); the one project-wide
GPU quota, GPUS_ALL_REGIONS, from ``projects.get``. A metric the project does not list is
not limited, so an unknown quota passes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from orch.clouds.gcp_errors import quota_error

# Accelerator types whose quota metric does not follow the NVIDIA_<MODEL>_GPUS pattern.
_GPU_METRIC_EXCEPTIONS = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
}
PREEMPTIBLE = "PREEMPTIBLE_"


class Quota(BaseModel):
    metric: str
    limit: float
    usage: float = 0.0

    @property
    def room(self) -> float:
        return self.limit - self.usage


def parse_quotas(resource: dict[str, Any]) -> dict[str, Quota]:
    """The ``quotas`` list of a Region or Project resource, by metric."""
    return {q["metric"]: Quota.model_validate(q) for q in resource.get("quotas", [])}


def gpu_metric(accelerator_type: str) -> str:
    """``nvidia-tesla-t4`` → ``NVIDIA_T4_GPUS``, ``nvidia-a100-80gb`` → ``NVIDIA_A100_80GB_GPUS``
    (the model, upper-cased), save for the few exceptions Google made."""
    if accelerator_type in _GPU_METRIC_EXCEPTIONS:
        return _GPU_METRIC_EXCEPTIONS[accelerator_type]
    model = accelerator_type.removeprefix("nvidia-").removeprefix("tesla-")
    return f"NVIDIA_{model.upper().replace('-', '_')}_GPUS"


def regional_demand(
    machine_type: dict[str, Any], nodes: int, spot: bool, regional: dict[str, Quota]
) -> Counter[str]:
    """What ``nodes`` instances of a MachineType resource take from regional quotas.

    Spot VMs draw on PREEMPTIBLE_* quotas when the project has them, and on the standard
    quotas otherwise.
    """
    cpus = int(machine_type.get("guestCpus", 0)) * nodes
    family = str(machine_type["name"]).split("-", 1)[0].upper()
    preemptible = spot and regional.get(f"{PREEMPTIBLE}CPUS", Quota(metric="", limit=0)).limit > 0
    demand: Counter[str] = Counter({"IN_USE_ADDRESSES": nodes})
    if preemptible:
        demand[f"{PREEMPTIBLE}CPUS"] += cpus
    else:
        demand["CPUS"] += cpus
        demand[f"{family}_CPUS"] += cpus
    for acc in machine_type.get("accelerators", []):
        metric = gpu_metric(acc["guestAcceleratorType"])
        demand[f"{PREEMPTIBLE}{metric}" if preemptible else metric] += (
            int(acc["guestAcceleratorCount"]) * nodes
        )
    return demand


def gpu_count(machine_type: dict[str, Any], nodes: int) -> int:
    per_node = sum(int(a["guestAcceleratorCount"]) for a in machine_type.get("accelerators", []))
    return per_node * nodes


def check(demand: Counter[str], quotas: dict[str, Quota], where: str) -> None:
    """Raise QuotaError for the first metric whose room is smaller than the demand.
    ``where`` completes Google's own message: "in region us-central1" or "globally"."""
    for metric, amount in sorted(demand.items()):
        quota = quotas.get(metric)
        if quota is not None and amount > 0 and amount > quota.room:
            raise quota_error(
                metric,
                f"Quota '{metric}' exceeded.  Limit: {quota.limit} {where} "
                f"(in use {quota.usage:g}, requested {amount:g}).",
            )
