"""A stateful HTTP fake of the Compute Engine v1 REST API, on loopback.

It answers the paths orch's GCP provider calls, with the documented JSON payloads:
Instance resources whose status moves PROVISIONING → STAGING → RUNNING (and STOPPING →
TERMINATED, or STOPPING → gone for a delete) one step per read; zonal and global
Operation resources (PENDING → RUNNING → DONE over ``get`` polls, DONE at once on
``wait``); Region and Project resources whose quota usage is computed from the live
instances; firewalls; errors in Google's JSON shape. Inserts and starts that would
exceed a quota fail the way Google fails them, inside the operation with
``QUOTA_EXCEEDED``.

A latency profile (:meth:`GCPComputeFake.set_latency`) makes operations of chosen types
(``insert``, ``delete``, ``start``, ``stop``) take that many seconds, as Google's do (an
insert 20-60 s, a delete 30-90 s): the operation stays RUNNING until then, ``wait`` blocks
until it is DONE or for at most :data:`WAIT_CAP_S` (Google's 2 minutes, scaled), and the
instance does not move on before its operation is done; once it is DONE, so is the
instance's way (RUNNING after an insert or start, TERMINATED after a stop, gone after a
delete).

Faults are queued per method ("instances.insert") and optionally zone, in either of
Google's shapes: an HTTP error answered at once, or an operation that finishes with
``error.errors[]``; an operation can also be made to stall (never DONE).

It also serves an OAuth2 token endpoint for service-account JWTs (signatures checked
against the keys it issued), so real credential files can be tested end to end;
:meth:`GCPComputeFake.issue_token` hands tokens out to other fakes (the metadata
server's) and to user credentials (:meth:`GCPComputeFake.authorized_user`).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt

from tests.fakes.loopback import Loopback

LINK = "https://www.googleapis.com/compute/v1/"
WAIT_CAP_S = 4.0  # the longest one operations.wait blocks (Google's is 2 minutes)
API_PREFIX = "/compute/v1/"
TOKEN_PATH = "/token"
# Service-account JWTs name Google's token endpoint as audience, whatever token_uri says.
TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# The HTTP status Google reports (httpErrorStatusCode) for an operation failing with a code.
_OPERATION_HTTP_STATUS = {
    "QUOTA_EXCEEDED": 403,
    "ZONE_RESOURCE_POOL_EXHAUSTED": 503,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": 503,
    "IAM_PERMISSION_DENIED": 403,
    "RESOURCE_NOT_FOUND": 404,
    "VPC_NOT_FOUND": 404,
}
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
DISK_TYPES = ("pd-standard", "pd-balanced", "pd-ssd", "pd-extreme")
# pd-extreme is offered on N2 types of 64+ vCPUs and M1/M2/M3 only.
_EXTREME_MACHINES = re.compile(r"^(m1|m2|m3)-|^n2-\w+-(64|80|96|128)$")
_FILTER_EXPR = re.compile(r'\(\s*([A-Za-z][\w.-]*)\s*(!=|=)\s*"?([^")]*)"?\s*\)')


@dataclass(frozen=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int
    family_metric: str | None = None  # e.g. N2_CPUS; N1 draws on CPUS only
    gpu_type: str | None = None
    gpu_count: int = 0
    gpu_metric: str | None = None  # e.g. NVIDIA_A100_GPUS


MACHINE_TYPES = {
    m.name: m
    for m in (
        MachineType("n1-standard-4", 4, 15360),
        MachineType("n2-standard-2", 2, 8192, "N2_CPUS"),
        MachineType("n2-standard-8", 8, 32768, "N2_CPUS"),
        MachineType("n2-standard-64", 64, 262144, "N2_CPUS"),
        MachineType("a2-highgpu-1g", 12, 87040, "A2_CPUS", "nvidia-tesla-a100", 1,
                    "NVIDIA_A100_GPUS"),
        MachineType("g2-standard-4", 4, 16384, "G2_CPUS", "nvidia-l4", 1, "NVIDIA_L4_GPUS"),
        MachineType("a3-highgpu-8g", 208, 1916928, "A3_CPUS", "nvidia-h100-80gb", 8,
                    "NVIDIA_H100_GPUS"),
    )
}

DEFAULT_REGIONS = {
    "us-central1": ["us-central1-a", "us-central1-b", "us-central1-c"],
    "us-east1": ["us-east1-b", "us-east1-c"],
}
DEFAULT_REGION_QUOTAS = {
    "CPUS": 200.0,
    "N2_CPUS": 200.0,
    "A2_CPUS": 96.0,
    "G2_CPUS": 96.0,
    "A3_CPUS": 416.0,
    "NVIDIA_A100_GPUS": 8.0,
    "NVIDIA_L4_GPUS": 8.0,
    "NVIDIA_H100_GPUS": 16.0,
    "PREEMPTIBLE_CPUS": 0.0,  # not granted: spot VMs draw on CPUS
    "IN_USE_ADDRESSES": 64.0,
}
DEFAULT_PROJECT_QUOTAS = {"GPUS_ALL_REGIONS": 16.0, "FIREWALLS": 200.0}


class ApiError(Exception):
    """An error answered in Google's JSON shape."""

    def __init__(self, code: int, reason: str, message: str, status: str | None = None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.status = status or _STATUS_NAMES.get(code, "UNKNOWN")

    def body(self) -> dict[str, Any]:
        return {"error": {
            "code": self.code,
            "message": self.message,
            "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
            "status": self.status,
        }}


def not_found(path: str) -> ApiError:
    return ApiError(404, "notFound", f"The resource '{path}' was not found")


def invalid(field_name: str, value: Any, why: str) -> ApiError:
    return ApiError(400, "invalid", f"Invalid value for field '{field_name}': '{value}'. {why}")


@dataclass
class _Fault:
    zone: str | None
    kind: str  # "http", "operation" or "stall"
    skip: int = 0  # matching calls to let through first
    http: ApiError | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Instance:
    resource: dict[str, Any]
    machine: MachineType
    spot: bool
    pending: list[str] = field(default_factory=list)  # statuses still to come, one per read
    ready_at: float = 0.0  # time.monotonic() before which ``pending`` waits (its operation)
    boot_disk: dict[str, Any] = field(default_factory=dict)  # its Disk resource

    @property
    def status(self) -> str:
        return str(self.resource["status"])

    @property
    def zone(self) -> str:
        return str(self.resource["zone"]).rsplit("/", 1)[-1]


@dataclass
class _Operation:
    resource: dict[str, Any]
    final: dict[str, Any]  # what DONE adds: error, httpErrorStatusCode...
    stalled: bool = False
    done_at: float = 0.0  # time.monotonic() before which it cannot be DONE (latency)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _label_match(instance: dict[str, Any], expressions: list[tuple[str, str, str]]) -> bool:
    for key, op, value in expressions:
        if key.startswith("labels."):
            actual = instance.get("labels", {}).get(key.removeprefix("labels."))
        else:
            actual = instance.get(key)
        if (str(actual) == value) != (op == "="):
            return False
    return True


def parse_filter(text: str) -> list[tuple[str, str, str]]:
    """The list filter's ANDed ``(field = "value")`` expressions; anything else is invalid."""
    expressions = [m.groups() for m in _FILTER_EXPR.finditer(text)]
    rest = re.sub(r"\s+|\bAND\b", "", _FILTER_EXPR.sub("", text))
    if rest:
        raise invalid("filter", text, "Invalid list filter expression.")
    return [(k, o, v) for k, o, v in expressions]


class ComputeState:
    """Everything the fake knows, guarded by one lock. Methods named after the API's
    (``instances_insert``) take the path parameters and return the JSON answer."""

    def __init__(self, project: str, regions: dict[str, list[str]]):
        self.project = project
        self.regions = regions
        self.lock = threading.RLock()
        self.instances: dict[tuple[str, str], _Instance] = {}
        self.firewalls: dict[str, dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], _Operation] = {}
        self.region_quotas = {r: dict(DEFAULT_REGION_QUOTAS) for r in regions}
        self.project_quotas = dict(DEFAULT_PROJECT_QUOTAS)
        self.base_usage: Counter[tuple[str, str]] = Counter()  # (region or "", metric)
        self.faults: dict[str, list[_Fault]] = {}
        self.calls: list[tuple[str, str | None]] = []
        self.bodies: list[tuple[str, dict[str, Any]]] = []  # each call's JSON body, as sent
        self.page_size: int | None = None
        self.latency: dict[str, float] = {}  # operation type -> seconds it takes
        self._ids = itertools.count(1000)

    # -- helpers ------------------------------------------------------------------
    def _link(self, *parts: str) -> str:
        return LINK + "/".join(("projects", self.project, *parts))

    def region_of(self, zone: str) -> str:
        for region, zones in self.regions.items():
            if zone in zones:
                return region
        raise invalid("zone", zone, "Unknown zone.")

    def take_fault(self, method: str, zone: str | None, kinds: tuple[str, ...]) -> _Fault | None:
        queue = self.faults.get(method, [])
        for i, fault in enumerate(queue):
            if fault.kind in kinds and fault.zone in (None, zone):
                if fault.skip:
                    fault.skip -= 1
                    return None
                return queue.pop(i)
        return None

    def _operation(
        self, op_type: str, target: str, zone: str | None, method: str,
        errors: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A new operation; faults queued for ``method`` replace its outcome."""
        name = f"operation-{next(self._ids)}-{op_type}"
        where = ("zones", zone) if zone else ("global",)
        resource: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": name,
            "operationType": op_type,
            "targetLink": target,
            "status": "PENDING",
            "progress": 0,
            "insertTime": _now(),
            "selfLink": self._link(*where, "operations", name),
        }
        if zone:
            resource["zone"] = self._link("zones", zone)
        final: dict[str, Any] = {}
        if errors:
            status = _OPERATION_HTTP_STATUS.get(str(errors[0]["code"]), 400)
            final = {"error": {"errors": errors}, "httpErrorStatusCode": status,
                     "httpErrorMessage": _STATUS_NAMES.get(status, "ERROR").replace("_", " ")}
        stall = self.take_fault(method, zone, ("stall",))
        done_at = self.ready_at(op_type)
        self.operations[(zone or "global", name)] = _Operation(resource, final, stall is not None,
                                                               done_at)
        instance = self.instances.get((zone or "", target.rsplit("/", 1)[-1]))
        if instance is not None and instance.resource["selfLink"] == target:
            instance.ready_at = done_at
        return copy.deepcopy(resource)

    def ready_at(self, op_type: str) -> float:
        seconds = self.latency.get(op_type, 0.0)
        return time.monotonic() + seconds if seconds else 0.0

    def wait_left(self, where: str, name: str) -> float:
        """Seconds until the operation may be DONE (0 when it may be now, or is unknown)."""
        op = self.operations.get((where, name))
        return max(0.0, op.done_at - time.monotonic()) if op and not op.stalled else 0.0

    def _advance_operation(self, op: _Operation, to_done: bool) -> dict[str, Any]:
        """One step on ``get`` (PENDING → RUNNING → DONE); straight to DONE on ``wait``."""
        status = op.resource["status"]
        if op.stalled or (status != "DONE" and time.monotonic() < op.done_at):
            op.resource.update(status="RUNNING", progress=50)
        elif status != "DONE" and (to_done or status == "RUNNING"):
            op.resource.update(status="DONE", progress=100, endTime=_now(), **op.final)
            self._settle(op.resource["targetLink"])
        elif status == "PENDING":
            op.resource.update(status="RUNNING", progress=50, startTime=_now())
        return copy.deepcopy(op.resource)

    def _settle(self, target: str) -> None:
        """An operation on an instance is over: so is the instance's way (Google's insert
        is DONE once the instance runs, a stop once it is TERMINATED, a delete once it is
        gone)."""
        parts = target.rstrip("/").split("/")
        inst = self.instances.get((parts[-3], parts[-1])) if "instances" in parts else None
        while inst is not None and inst.pending:
            self._set_status(inst, inst.pending.pop(0))

    def _observe(self, inst: _Instance) -> dict[str, Any]:
        """A read: report the instance, then take it one step along its way."""
        seen = copy.deepcopy(inst.resource)
        if inst.pending and time.monotonic() >= inst.ready_at:
            self._set_status(inst, inst.pending.pop(0))
        return seen

    def _set_status(self, inst: _Instance, status: str) -> None:
        if status == "DELETED":
            self.instances.pop((inst.zone, inst.resource["name"]), None)
            return
        inst.resource["status"] = status
        access = inst.resource["networkInterfaces"][0]["accessConfigs"][0]
        if status == "RUNNING":
            n = int(inst.resource["id"]) % 250 + 1
            access["natIP"] = f"203.0.113.{n}"  # ephemeral: a new stop/start may change it
            inst.resource["lastStartTimestamp"] = _now()
        elif status == "TERMINATED":
            access.pop("natIP", None)

    def _get_instance(self, zone: str, name: str) -> _Instance:
        self.region_of(zone)
        inst = self.instances.get((zone, name))
        if inst is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/instances/{name}")
        return inst

    # -- quotas -------------------------------------------------------------------
    def _consumes(self, inst: _Instance, region_quotas: dict[str, float]) -> Counter[str]:
        m = inst.machine
        preemptible = inst.spot and region_quotas.get("PREEMPTIBLE_CPUS", 0) > 0
        use: Counter[str] = Counter({"IN_USE_ADDRESSES": 1})
        if preemptible:
            use["PREEMPTIBLE_CPUS"] += m.cpus
        else:
            use["CPUS"] += m.cpus
            if m.family_metric:
                use[m.family_metric] += m.cpus
        if m.gpu_metric:
            use[f"PREEMPTIBLE_{m.gpu_metric}" if preemptible else m.gpu_metric] += m.gpu_count
        return use

    def usage(self, region: str) -> Counter[str]:
        use: Counter[str] = Counter()
        for inst in self.instances.values():
            if inst.status != "TERMINATED" and self.region_of(inst.zone) == region:
                use += self._consumes(inst, self.region_quotas[region])
        for (where, metric), amount in self.base_usage.items():
            if where == region:
                use[metric] += amount
        return use

    def project_usage(self) -> Counter[str]:
        gpus = sum(i.machine.gpu_count for i in self.instances.values()
                   if i.status != "TERMINATED")
        use = Counter({"GPUS_ALL_REGIONS": gpus, "FIREWALLS": len(self.firewalls)})
        for (where, metric), amount in self.base_usage.items():
            if where == "":
                use[metric] += amount
        return use

    def _quota_errors(self, inst: _Instance) -> list[dict[str, Any]]:
        """Google's QUOTA_EXCEEDED operation error when running ``inst`` does not fit."""
        region = self.region_of(inst.zone)
        limits, usage = self.region_quotas[region], self.usage(region)
        for metric, amount in sorted(self._consumes(inst, limits).items()):
            if metric in limits and usage[metric] + amount > limits[metric]:
                message = f"Quota '{metric}' exceeded.  Limit: {limits[metric]} in region {region}."
                return [{"code": "QUOTA_EXCEEDED", "message": message}]
        limit = self.project_quotas.get("GPUS_ALL_REGIONS")
        if inst.machine.gpu_count and limit is not None and (
                self.project_usage()["GPUS_ALL_REGIONS"] + inst.machine.gpu_count > limit):
            return [{"code": "QUOTA_EXCEEDED",
                     "message": f"Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: {limit} globally."}]
        return []

    def _quota_list(self, limits: dict[str, float], usage: Counter[str]) -> list[dict[str, Any]]:
        return [{"metric": m, "limit": limit, "usage": float(usage[m])}
                for m, limit in sorted(limits.items())]

    # -- projects, regions, machine types ------------------------------------------------
    def projects_get(self) -> dict[str, Any]:
        return {
            "kind": "compute#project",
            "id": "4242",
            "name": self.project,
            "quotas": self._quota_list(self.project_quotas, self.project_usage()),
            "defaultServiceAccount": f"4242-compute@{self.project}.iam.gserviceaccount.com",
            "selfLink": self._link(),
        }

    def regions_get(self, region: str) -> dict[str, Any]:
        if region not in self.regions:
            raise not_found(f"projects/{self.project}/regions/{region}")
        return {
            "kind": "compute#region",
            "id": str(1000 + sorted(self.regions).index(region)),
            "name": region,
            "status": "UP",
            "zones": [self._link("zones", z) for z in self.regions[region]],
            "quotas": self._quota_list(self.region_quotas[region], self.usage(region)),
            "selfLink": self._link("regions", region),
        }

    def machine_types_get(self, zone: str, name: str) -> dict[str, Any]:
        self.region_of(zone)
        m = MACHINE_TYPES.get(name)
        if m is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/machineTypes/{name}")
        resource: dict[str, Any] = {
            "kind": "compute#machineType",
            "name": m.name,
            "guestCpus": m.cpus,
            "memoryMb": m.memory_mb,
            "zone": zone,
            "isSharedCpu": False,
            "selfLink": self._link("zones", zone, "machineTypes", m.name),
        }
        if m.gpu_type:
            resource["accelerators"] = [
                {"guestAcceleratorType": m.gpu_type, "guestAcceleratorCount": m.gpu_count}]
        return resource

    # -- instances ------------------------------------------------------------------
    def instances_insert(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        self.region_of(zone)
        name = str(body.get("name", ""))
        if not _NAME.match(name):
            raise invalid("resource.name", name, "Must be a match of regex "
                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?|[1-9][0-9]{0,19})'")
        machine_type = str(body.get("machineType", "")).rsplit("/", 1)[-1]
        if machine_type not in MACHINE_TYPES:
            raise invalid("resource.machineType", body.get("machineType"),
                          f"Machine type with name '{machine_type}' does not exist in zone "
                          f"'{zone}'.")
        labels = body.get("labels", {})
        for key, value in labels.items():
            if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(str(value)):
                raise invalid("resource.labels", f"{key}={value}",
                              "Label keys and values must be lowercase letters, digits, _ or -.")
        boot_disk = self._boot_disk(zone, name, machine_type, body.get("disks", []))
        scheduling = body.get("scheduling", {})
        model = scheduling.get("provisioningModel", "STANDARD")
        if model not in ("STANDARD", "SPOT"):
            raise invalid("resource.scheduling.provisioningModel", model, "Unknown enum value.")
        target = self._link("zones", zone, "instances", name)
        if (zone, name) in self.instances:
            raise ApiError(409, "alreadyExists",
                           f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                           "already exists")
        fault = self.take_fault("instances.insert", zone, ("operation",))
        number = next(self._ids)
        inst = _Instance(
            resource={
                "kind": "compute#instance",
                "id": str(number),
                "creationTimestamp": _now(),
                "name": name,
                "machineType": self._link("zones", zone, "machineTypes", machine_type),
                "status": "PROVISIONING",
                "zone": self._link("zones", zone),
                "labels": dict(labels),
                "labelFingerprint": f"fp{number}",
                "tags": {**body.get("tags", {}), "fingerprint": f"tfp{number}"},
                "metadata": {"kind": "compute#metadata", "fingerprint": f"mfp{number}",
                             **body.get("metadata", {})},
                "scheduling": {"provisioningModel": model, **scheduling},
                "disks": [{"kind": "compute#attachedDisk", "boot": True, "autoDelete": True,
                           "deviceName": "persistent-disk-0", "index": 0,
                           "diskSizeGb": d.get("initializeParams", {}).get("diskSizeGb", "10"),
                           "source": self._link("zones", zone, "disks", name)}
                          for d in body.get("disks", [])],
                "networkInterfaces": [{
                    "kind": "compute#networkInterface",
                    "name": "nic0",
                    "network": self._link("global", "networks", "default"),
                    "networkIP": f"10.128.{number // 250 % 250}.{number % 250 + 2}",
                    "accessConfigs": [{"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT",
                                       "name": "External NAT", "networkTier": "PREMIUM"}],
                }],
                "selfLink": target,
            },
            machine=MACHINE_TYPES[machine_type],
            spot=model == "SPOT",
            pending=["STAGING", "RUNNING"],
            boot_disk=boot_disk,
        )
        errors = fault.errors if fault else self._quota_errors(inst)
        if not errors:
            self.instances[(zone, name)] = inst
        return self._operation("insert", target, zone, "instances.insert", errors)

    def _boot_disk(self, zone: str, name: str, machine_type: str,
                   disks: list[dict[str, Any]]) -> dict[str, Any]:
        """The Disk resource of the boot disk, after Compute Engine's checks of its type."""
        boot = next((d for d in disks if d.get("boot")), {})
        params = boot.get("initializeParams", {})
        field_name = "resource.disks[0].initializeParams.diskType"
        link = params.get("diskType", f"zones/{zone}/diskTypes/pd-standard")
        disk_type = str(link).rsplit("/", 1)[-1]
        if disk_type not in DISK_TYPES or f"zones/{zone}/diskTypes/" not in str(link):
            raise invalid(field_name, link, "The referenced diskType resource cannot be found.")
        if disk_type == "pd-extreme" and not _EXTREME_MACHINES.match(machine_type):
            raise invalid(field_name, link, f"[pd-extreme] disk type is not supported for "
                          f"machine type '{machine_type}'.")
        if disk_type == "pd-extreme" and "provisionedIops" not in params:
            raise invalid("resource.disks[0].initializeParams.provisionedIops", None,
                          "pd-extreme disks need provisionedIops.")
        return {"kind": "compute#disk", "name": name, "zone": self._link("zones", zone),
                "type": self._link("zones", zone, "diskTypes", disk_type),
                "sizeGb": str(params.get("diskSizeGb", "10")),
                **({"provisionedIops": str(params["provisionedIops"])}
                   if "provisionedIops" in params else {})}

    def instances_get(self, zone: str, name: str) -> dict[str, Any]:
        return self._observe(self._get_instance(zone, name))

    def _listed(self, zone: str, expressions: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
        found = [i for (z, _), i in sorted(self.instances.items()) if z == zone
                 and _label_match(i.resource, expressions)]
        return [self._observe(i) for i in found]

    def instances_list(self, zone: str, filter_text: str) -> dict[str, Any]:
        self.region_of(zone)
        items = self._listed(zone, parse_filter(filter_text))
        return {"kind": "compute#instanceList", "items": items,
                "selfLink": self._link("zones", zone, "instances")}

    def instances_aggregated_list(self, filter_text: str, page_token: str) -> dict[str, Any]:
        expressions = parse_filter(filter_text)
        zones = sorted(z for zs in self.regions.values() for z in zs)
        start = int(page_token or 0)
        end = len(zones) if self.page_size is None else start + self.page_size
        items: dict[str, Any] = {}
        for zone in zones[start:end]:
            found = self._listed(zone, expressions)
            scope = f"zones/{zone}"
            items[scope] = {"instances": found} if found else {"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": f"There are no results for scope '{scope}' on this page.",
                "data": [{"key": "scope", "value": scope}],
            }}
        answer: dict[str, Any] = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.project}/aggregated/instances",
            "items": items,
            "selfLink": self._link("aggregated", "instances"),
        }
        if end < len(zones):
            answer["nextPageToken"] = str(end)
        return answer

    def instances_start(self, zone: str, name: str) -> dict[str, Any]:
        inst = self._get_instance(zone, name)
        if inst.status in ("STOPPING", "SUSPENDING"):
            raise ApiError(400, "resourceNotReady",
                           f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}'"
                           " is not ready")
        fault = self.take_fault("instances.start", zone, ("operation",))
        errors = fault.errors if fault else []
        if inst.status == "TERMINATED" and not errors:
            errors = self._quota_errors(inst)
            if not errors:
                self._set_status(inst, "STAGING")
                inst.pending = ["RUNNING"]
        return self._operation("start", inst.resource["selfLink"], zone, "instances.start", errors)

    def instances_stop(self, zone: str, name: str) -> dict[str, Any]:
        inst = self._get_instance(zone, name)
        fault = self.take_fault("instances.stop", zone, ("operation",))
        if fault is None and inst.status in ("PROVISIONING", "STAGING", "RUNNING"):
            self._set_status(inst, "STOPPING")
            inst.pending = ["TERMINATED"]
        return self._operation("stop", inst.resource["selfLink"], zone, "instances.stop",
                               fault.errors if fault else None)

    def instances_delete(self, zone: str, name: str) -> dict[str, Any]:
        inst = self._get_instance(zone, name)
        fault = self.take_fault("instances.delete", zone, ("operation",))
        if fault is None:
            if inst.status == "TERMINATED":
                self._set_status(inst, "DELETED")
            else:
                self._set_status(inst, "STOPPING")
                inst.pending = ["DELETED"]
        return self._operation("delete", inst.resource["selfLink"], zone, "instances.delete",
                               fault.errors if fault else None)

    def preempt(self, zone: str, name: str) -> None:
        """Google reclaims a spot VM: it stops (instanceTerminationAction STOP)."""
        inst = self._get_instance(zone, name)
        self._set_status(inst, "STOPPING")
        inst.pending = ["TERMINATED"]

    # -- operations -----------------------------------------------------------------
    def operation(self, where: str, name: str, wait: bool) -> dict[str, Any]:
        op = self.operations.get((where, name))
        if op is None:
            scope = "global" if where == "global" else f"zones/{where}"
            raise not_found(f"projects/{self.project}/{scope}/operations/{name}")
        return self._advance_operation(op, to_done=wait)

    # -- firewalls ------------------------------------------------------------------
    def _firewall(self, name: str) -> dict[str, Any]:
        rule = self.firewalls.get(name)
        if rule is None:
            raise not_found(f"projects/{self.project}/global/firewalls/{name}")
        return rule

    def firewalls_get(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self._firewall(name))

    def firewalls_insert(self, body: dict[str, Any]) -> dict[str, Any]:
        name = str(body.get("name", ""))
        if not _NAME.match(name):
            raise invalid("resource.name", name, "Must be a match of regex '[a-z]...'")
        if name in self.firewalls:
            raise ApiError(409, "alreadyExists",
                           f"The resource 'projects/{self.project}/global/firewalls/{name}' "
                           "already exists")
        target = self._link("global", "firewalls", name)
        fault = self.take_fault("firewalls.insert", None, ("operation",))
        if fault is None:
            self.firewalls[name] = {
                "kind": "compute#firewall", "id": str(next(self._ids)), "name": name,
                "creationTimestamp": _now(), "priority": 1000, "direction": "INGRESS",
                "network": self._link("global", "networks", "default"), **body,
                "selfLink": target,
            }
        return self._operation("insert", target, None, "firewalls.insert",
                               fault.errors if fault else None)

    def firewalls_patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        rule = self._firewall(name)
        fault = self.take_fault("firewalls.patch", None, ("operation",))
        if fault is None:
            rule.update({k: v for k, v in body.items() if k != "name"})
        return self._operation("patch", rule["selfLink"], None, "firewalls.patch",
                               fault.errors if fault else None)

    def firewalls_delete(self, name: str) -> dict[str, Any]:
        rule = self._firewall(name)
        fault = self.take_fault("firewalls.delete", None, ("operation",))
        if fault is None:
            del self.firewalls[name]
        return self._operation("delete", rule["selfLink"], None, "firewalls.delete",
                               fault.errors if fault else None)


_Route = tuple[str, re.Pattern[str], str, Callable[..., Any]]


def _routes(state: ComputeState) -> list[_Route]:
    """(HTTP method, path pattern, API method name, handler(match, query, body))."""
    p = r"projects/(?P<project>[^/]+)"
    z = p + r"/zones/(?P<zone>[^/]+)"
    g = p + r"/global"
    table: list[tuple[str, str, str, Callable[..., Any]]] = [
        ("GET", p, "projects.get", lambda m, q, b: state.projects_get()),
        ("GET", p + r"/regions/(?P<region>[^/]+)", "regions.get",
         lambda m, q, b: state.regions_get(m["region"])),
        ("GET", z + r"/machineTypes/(?P<name>[^/]+)", "machineTypes.get",
         lambda m, q, b: state.machine_types_get(m["zone"], m["name"])),
        ("GET", p + r"/aggregated/instances", "instances.aggregatedList",
         lambda m, q, b: state.instances_aggregated_list(q.get("filter", ""),
                                                         q.get("pageToken", ""))),
        ("GET", z + r"/instances", "instances.list",
         lambda m, q, b: state.instances_list(m["zone"], q.get("filter", ""))),
        ("POST", z + r"/instances", "instances.insert",
         lambda m, q, b: state.instances_insert(m["zone"], b)),
        ("GET", z + r"/instances/(?P<name>[^/]+)", "instances.get",
         lambda m, q, b: state.instances_get(m["zone"], m["name"])),
        ("DELETE", z + r"/instances/(?P<name>[^/]+)", "instances.delete",
         lambda m, q, b: state.instances_delete(m["zone"], m["name"])),
        ("POST", z + r"/instances/(?P<name>[^/]+)/start", "instances.start",
         lambda m, q, b: state.instances_start(m["zone"], m["name"])),
        ("POST", z + r"/instances/(?P<name>[^/]+)/stop", "instances.stop",
         lambda m, q, b: state.instances_stop(m["zone"], m["name"])),
        ("GET", z + r"/operations/(?P<name>[^/]+)", "zoneOperations.get",
         lambda m, q, b: state.operation(m["zone"], m["name"], wait=False)),
        ("POST", z + r"/operations/(?P<name>[^/]+)/wait", "zoneOperations.wait",
         lambda m, q, b: state.operation(m["zone"], m["name"], wait=True)),
        ("GET", g + r"/operations/(?P<name>[^/]+)", "globalOperations.get",
         lambda m, q, b: state.operation("global", m["name"], wait=False)),
        ("POST", g + r"/operations/(?P<name>[^/]+)/wait", "globalOperations.wait",
         lambda m, q, b: state.operation("global", m["name"], wait=True)),
        ("POST", g + r"/firewalls", "firewalls.insert",
         lambda m, q, b: state.firewalls_insert(b)),
        ("GET", g + r"/firewalls/(?P<name>[^/]+)", "firewalls.get",
         lambda m, q, b: state.firewalls_get(m["name"])),
        ("PATCH", g + r"/firewalls/(?P<name>[^/]+)", "firewalls.patch",
         lambda m, q, b: state.firewalls_patch(m["name"], b)),
        ("DELETE", g + r"/firewalls/(?P<name>[^/]+)", "firewalls.delete",
         lambda m, q, b: state.firewalls_delete(m["name"])),
    ]
    return [(verb, re.compile(f"^{pattern}$"), name, fn) for verb, pattern, name, fn in table]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httplib2 expects
    disable_nagle_algorithm = True  # headers and body go out in two writes
    fake: GCPComputeFake  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        """Quiet: tests read the fake's call log instead."""

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self, verb: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        raw = self._body()
        if verb == "POST" and url.path == TOKEN_PATH:
            status, payload = self.fake.token_response(urllib.parse.parse_qs(raw.decode()))
            self._send(status, payload)
            return
        try:
            body = json.loads(raw) if raw else {}
            status, payload = 200, self.fake.dispatch(
                verb, url.path, dict(urllib.parse.parse_qsl(url.query)), body,
                self.headers.get("Authorization"))
        except ApiError as e:
            status, payload = e.code, e.body()
        self._send(status, payload)

    def do_GET(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")


class GCPComputeFake:
    """The server. Use as a context manager; point the provider at ``endpoint``."""

    def __init__(self, project: str = "orch-test",
                 regions: dict[str, list[str]] | None = None):
        self.state = ComputeState(project, regions or DEFAULT_REGIONS)
        self.require_auth = False
        self._service_accounts: dict[str, bytes] = {}  # client email → public key PEM
        self._tokens: set[str] = set()
        self._routes = _routes(self.state)
        self._loopback = Loopback(type("Handler", (_Handler,), {"fake": self}))

    @property
    def project(self) -> str:
        return self.state.project

    @property
    def base_url(self) -> str:
        return f"http://{self._loopback.host}"

    @property
    def endpoint(self) -> str:
        """The ``api_endpoint`` to give the client (Google's base URL, rerouted here)."""
        return self.base_url + API_PREFIX

    def __enter__(self) -> GCPComputeFake:
        self._loopback.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._loopback.stop()

    # -- requests -------------------------------------------------------------------
    def dispatch(self, verb: str, path: str, query: dict[str, str], body: dict[str, Any],
                 authorization: str | None) -> dict[str, Any]:
        if not path.startswith(API_PREFIX):
            raise not_found(path)
        path = path.removeprefix(API_PREFIX).rstrip("/")
        for route_verb, pattern, method, handler in self._routes:
            match = pattern.match(path)
            if route_verb != verb or match is None:
                continue
            zone = match.groupdict().get("zone")
            if method.endswith("Operations.wait"):  # blocks, as Google's does, not locked
                with self.state.lock:
                    left = self.state.wait_left(zone or "global", match["name"])
                time.sleep(min(left, WAIT_CAP_S))
            with self.state.lock:
                self.state.calls.append((method, zone))
                self.state.bodies.append((method, copy.deepcopy(body)))
                self._check_auth(authorization)
                if match["project"] != self.project:
                    raise ApiError(403, "forbidden", f"Permission denied on resource project "
                                   f"{match['project']}.")
                fault = self.state.take_fault(method, zone, ("http",))
                if fault is not None and fault.http is not None:
                    raise fault.http
                result: dict[str, Any] = handler(match, query, body)
                return result
        raise not_found(path)

    def _check_auth(self, authorization: str | None) -> None:
        if not self.require_auth:
            return
        token = (authorization or "").removeprefix("Bearer ").strip()
        if token not in self._tokens:
            raise ApiError(401, "required" if not token else "authError",
                           "Request is missing required authentication credential. Expected "
                           "OAuth 2 access token, login cookie or other valid authentication "
                           "credential.")

    def token_response(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """OAuth2's JWT-bearer grant: a signed assertion from a known service account."""
        assertion = (form.get("assertion") or [""])[0]
        try:
            issuer = jwt.decode(assertion, verify=False)["iss"]
            jwt.decode(assertion, certs=self._service_accounts[issuer],
                       audience=TOKEN_AUDIENCE)
        except (KeyError, ValueError) as e:
            return 400, {"error": "invalid_grant", "error_description": f"Invalid JWT: {e}"}
        return 200, {"access_token": self.issue_token(), "expires_in": 3600,
                     "token_type": "Bearer"}

    def issue_token(self) -> str:
        """A new access token the API accepts."""
        token = f"ya29.fake-{len(self._tokens)}"
        self._tokens.add(token)
        return token

    # -- test controls ----------------------------------------------------------------
    def service_account(self, email: str | None = None) -> dict[str, Any]:
        """A service-account key file's contents, with a fresh RSA key this fake trusts."""
        email = email or f"orch@{self.project}.iam.gserviceaccount.com"
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._service_accounts[email] = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        private = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        return {
            "type": "service_account",
            "project_id": self.project,
            "private_key_id": "fake-key-1",
            "private_key": private,
            "client_email": email,
            "client_id": "1234567890",
            "token_uri": self.base_url + TOKEN_PATH,
        }

    def authorized_user(self) -> dict[str, Any]:
        """Application-default user credentials: the fields ``gcloud auth
        application-default login`` writes, plus a live access token and its expiry as
        google-auth's ``Credentials.to_json`` saves them. (google-auth always refreshes
        user credentials at Google's own token endpoint, whatever the file says, so the
        token is what lets a test use them.)"""
        expiry = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)
        return {"account": "", "client_id": "764086051850-fake.apps.googleusercontent.com",
                "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty", "quota_project_id": self.project,
                "refresh_token": "1//fake-refresh", "type": "authorized_user",
                "universe_domain": "googleapis.com", "token": self.issue_token(),
                "expiry": expiry.isoformat() + "Z"}

    def fail_http(self, method: str, status: int, reason: str, message: str | None = None,
                  *, zone: str | None = None, times: int = 1, skip: int = 0) -> None:
        """After ``skip`` calls, the next ``times`` calls of ``method`` (in ``zone``) answer
        an HTTP error."""
        error = ApiError(status, reason, message or f"{reason} (injected)")
        self._queue(method, [_Fault(zone, "http", skip if i == 0 else 0, http=error)
                             for i in range(times)])

    def fail_operation(self, method: str, code: str, message: str | None = None, *,
                       zone: str | None = None, times: int = 1, skip: int = 0) -> None:
        """After ``skip`` calls, the next ``times`` operations of ``method`` (in ``zone``)
        finish with ``error.errors[]``."""
        entry = {"code": code, "message": message or f"{code} (injected)"}
        self._queue(method, [_Fault(zone, "operation", skip if i == 0 else 0, errors=[entry])
                             for i in range(times)])

    def set_latency(self, seconds: dict[str, float]) -> None:
        """Operation type (``insert``, ``delete``, ``start``, ``stop``) -> its seconds."""
        with self.state.lock:
            self.state.latency = dict(seconds)

    def stall_operation(self, method: str, *, zone: str | None = None, times: int = 1) -> None:
        """The next ``times`` operations of ``method`` (in ``zone``) never reach DONE."""
        self._queue(method, [_Fault(zone, "stall") for _ in range(times)])

    def _queue(self, method: str, faults: list[_Fault]) -> None:
        with self.state.lock:
            self.state.faults.setdefault(method, []).extend(faults)

    def set_quota(self, region: str | None, metric: str, limit: float,
                  usage: int = 0) -> None:
        """Set a regional quota (or, with ``region`` None, a project one). ``usage`` adds to
        what the fake's own instances use."""
        with self.state.lock:
            limits = self.state.project_quotas if region is None else self.state.region_quotas[
                region]
            limits[metric] = limit
            self.state.base_usage[(region or "", metric)] = usage

    def set_page_size(self, zones_per_page: int | None) -> None:
        with self.state.lock:
            self.state.page_size = zones_per_page

    def preempt(self, zone: str, name: str) -> None:
        with self.state.lock:
            self.state.preempt(zone, name)

    # -- inspection -----------------------------------------------------------------
    def instances(self) -> dict[str, dict[str, Any]]:
        """Every instance by name (a snapshot; reading it moves nothing along)."""
        with self.state.lock:
            return {name: copy.deepcopy(i.resource)
                    for (_, name), i in sorted(self.state.instances.items())}

    def boot_disks(self) -> dict[str, dict[str, Any]]:
        """The boot Disk resource of every instance, by instance name."""
        with self.state.lock:
            return {name: copy.deepcopy(i.boot_disk)
                    for (_, name), i in sorted(self.state.instances.items())}

    def firewalls(self) -> dict[str, dict[str, Any]]:
        with self.state.lock:
            return copy.deepcopy(self.state.firewalls)

    def bodies(self, method: str) -> list[tuple[str, dict[str, Any]]]:
        with self.state.lock:
            return [c for c in self.state.bodies if c[0] == method]

    def calls(self, method: str | None = None) -> list[tuple[str, str | None]]:
        with self.state.lock:
            return [c for c in self.state.calls if method is None or c[0] == method]
