"""A stateful HTTPS fake of the Azure Resource Manager REST API, for what orch's Azure
provider uses.

It answers the documented ARM paths with the documented JSON payloads: resource groups,
network security groups, virtual networks (subnets inline), public IP addresses, network
interfaces, virtual machines (``$expand=instanceView`` with ``ProvisioningState/...`` and
``PowerState/...`` statuses), ``start`` / ``deallocate`` / ``delete``, compute usages and
resource SKUs, and resource-provider registration. Writes are long-running operations as
ARM runs them: ``201``/``202`` with ``Azure-AsyncOperation`` (and ``Location`` for POST and
DELETE) headers, the resource in ``Creating``/``Updating``/``Deleting`` until its operation
ends. Operations run on their own, whether or not anyone polls them: each request the fake
serves moves every operation one step, and one ends after ``lro_polls`` such steps (so a
test is deterministic); a latency profile (:meth:`AzureARMFake.set_latency`) makes chosen
operations also take that many seconds, answering ``InProgress`` with ARM's
``Retry-After`` until then, as a real VM create (90-200 s) or resource-group delete does.
ARM refuses a network resource that names one still being made
(``ReferencedResourceNotProvisioned``), and deletes a VM's network interfaces and public
IPs with it when they say ``deleteOption: Delete``.

Errors use ARM's shape, ``{"error": {"code": ..., "message": ...}}``, either as the HTTP
answer to the request or, for long-running operations, as a failed operation
(``{"status": "Failed", "error": {...}}``) that leaves the resource ``Failed``. Faults are
queued per ARM operation id (``VirtualMachines_CreateOrUpdate``...) and, optionally, per
availability zone; the fake also enforces vCPU quotas on VM creation the way ARM does
(``OperationNotAllowed`` naming the quota).

TLS: the Azure SDK refuses to send a bearer token over plain HTTP, so the fake serves HTTPS
on loopback with a self-signed certificate it generates. ``ca_path`` is that certificate;
point the SDK at it with ``REQUESTS_CA_BUNDLE`` (honoured by ``requests``, which azure-core
uses as its transport) so the provider needs no test-only TLS option. Bearer tokens are
checked against ``token``.

Not modelled: managed disks as resources, load balancers, ARM templates, paging
(``nextLink``), ETags.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
import math
import re
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Json = dict[str, Any]


@dataclass(frozen=True)
class VmSize:
    """One row of the fake's resource-SKU table (a few real Azure sizes)."""

    name: str
    family: str
    family_display: str
    vcpus: int
    memory_gb: float
    gpus: int = 0
    premium_storage: bool = True  # the "s" sizes; Azure refuses Premium_LRS disks on others


OS_DISK_TYPES = ("Standard_LRS", "StandardSSD_LRS", "Premium_LRS", "StandardSSD_ZRS",
                 "Premium_ZRS")

VM_SIZES = {
    size.name: size
    for size in (
        VmSize("Standard_D2s_v3", "standardDSv3Family", "Standard DSv3 Family vCPUs", 2, 8),
        VmSize("Standard_D2_v3", "standardDv3Family", "Standard Dv3 Family vCPUs", 2, 8,
               premium_storage=False),
        VmSize("Standard_D4s_v3", "standardDSv3Family", "Standard DSv3 Family vCPUs", 4, 16),
        VmSize("Standard_D8s_v3", "standardDSv3Family", "Standard DSv3 Family vCPUs", 8, 32),
        VmSize(
            "Standard_NC4as_T4_v3",
            "Standard NCASv3_T4 Family",
            "Standard NCASv3_T4 Family vCPUs",
            4,
            28,
            gpus=1,
        ),
    )
}
ZONES = ("1", "2", "3")
DEFAULT_LIMIT = 100


@dataclass
class Fault:
    """An error the fake answers instead of doing ``operation``.

    ``in_operation`` makes the request succeed at first and its long-running operation end
    ``Failed`` with the error (how ARM reports allocation failures); otherwise the request
    itself is answered with ``status`` and the error body."""

    operation: str
    code: str
    message: str
    status: int = 409
    zone: str | None = None
    in_operation: bool = False
    times: int = 1


@dataclass
class _Operation:
    """A long-running operation: finishes after ``polls_left`` more polls."""

    id: str
    polls_left: int
    done_at: float  # time.monotonic() before which it stays InProgress (0: no latency)
    on_success: Callable[[], None]
    on_failure: Callable[[Json], None]
    error: Json | None = None
    error_status: int = 409
    status: str = "InProgress"
    start_time: str = ""
    end_time: str | None = None


@dataclass
class _Reply:
    status: int
    body: Json | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Call:
    method: str
    url: str  # path and query, as requested
    operation: str
    groups: dict[str, str]
    params: dict[str, str]
    body: Json | None
    fault: Fault | None = None


def _retry_after(op: _Operation) -> dict[str, str]:
    """ARM's hint of when to poll again, for an operation that runs on a clock."""
    if op.status != "InProgress" or not op.done_at:
        return {}
    return {"Retry-After": str(max(1, min(5, math.ceil(op.done_at - time.monotonic()))))}


class ArmError(Exception):
    """Raised inside a handler to answer with ARM's error shape."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def _check_os_disk(size: VmSize, vm_name: str, properties: Json) -> None:
    """Azure's checks of the OS disk's storage account type (Ultra disks cannot boot)."""
    disk = properties.get("storageProfile", {}).get("osDisk", {})
    kind = disk.get("managedDisk", {}).get("storageAccountType", "StandardSSD_LRS")
    if kind not in OS_DISK_TYPES:
        raise ArmError(400, "InvalidParameter", f"Storage account type '{kind}' is not "
                       "supported for OS disks.")
    if kind.startswith("Premium") and not size.premium_storage:
        raise ArmError(409, "OperationNotAllowed", "Requested operation cannot be performed "
                       f"because the VM size {size.name} does not support the storage account "
                       f"type {kind} of disk '{vm_name}-osdisk'. Consider updating the VM to a "
                       "size that supports Premium storage.")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _not_found(kind: str, name: str, group: str) -> ArmError:
    return ArmError(
        404,
        "ResourceNotFound",
        f"The Resource '{kind}/{name}' under resource group '{group}' was not found. "
        "For more details please go to https://aka.ms/ARMResourceNotFoundFix",
    )


_SUB = r"/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourcegroups/(?P<rg>[^/]+)"
_NETWORK_TYPES = {
    "networksecuritygroups": ("NetworkSecurityGroups", "networkSecurityGroups"),
    "virtualnetworks": ("VirtualNetworks", "virtualNetworks"),
    "publicipaddresses": ("PublicIPAddresses", "publicIPAddresses"),
    "networkinterfaces": ("NetworkInterfaces", "networkInterfaces"),
}
_VERBS = {"GET": "Get", "PUT": "CreateOrUpdate", "DELETE": "Delete", "HEAD": "CheckExistence"}


def _long_running(operation: str) -> bool:
    """Whether ARM answers ``operation`` with an operation to poll (all writes here but
    the resource group's PUT)."""
    verb = operation.rsplit("_", 1)[-1]
    return operation != "ResourceGroups_CreateOrUpdate" and verb in (
        "CreateOrUpdate", "Delete", "Start", "Deallocate")


class AzureArmFake:
    """The fake's state and request handlers; ``start()`` serves it on 127.0.0.1."""

    def __init__(self, subscription_id: str | None = None, lro_polls: int = 1):
        self.subscription_id = subscription_id or str(uuid.uuid4())
        self.token = "fake-arm-token-" + uuid.uuid4().hex
        self.lro_polls = lro_polls
        self.calls: list[str] = []  # ARM operation ids, in order
        self.registered_providers = {"Microsoft.Compute", "Microsoft.Network"}
        # ARM keeps an operation's record (its Location) for a while only: once expired,
        # the operations still run but their Location answers 404.
        self.records_expired = False
        self._resources: dict[str, Json] = {}  # lower-case resource id -> resource
        self._power: dict[str, str | None] = {}  # VM id -> PowerState code suffix
        self._failures: dict[str, Json] = {}  # VM id -> error of its last failed operation
        self._held: dict[str, tuple[str, int]] = {}  # VM id -> (power state shown, reads)
        self._operations: dict[str, _Operation] = {}
        self._latency: dict[str, float] = {}  # ARM operation id -> seconds it takes
        self._faults: list[Fault] = []
        self._limits: dict[tuple[str, str], int] = {}
        self._public_ips = (f"203.0.113.{i}" for i in range(1, 255))
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="azure-arm-fake-")
        self.ca_path = str(Path(self._tmp.name) / "cert.pem")

    # ---- test-facing API -------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the fake first"
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> AzureArmFake:
        key_path = _write_self_signed_cert(Path(self._tmp.name), self.ca_path)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_path, key_path)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         name="azure-arm-fake", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._tmp.cleanup()

    def __enter__(self) -> AzureArmFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject_fault(
        self,
        operation: str,
        code: str,
        message: str = "",
        *,
        status: int = 409,
        zone: str | None = None,
        in_operation: bool = False,
        times: int = 1,
    ) -> None:
        """Queue an error for the next ``times`` calls of ``operation`` (in ``zone``)."""
        if in_operation and not _long_running(operation):
            raise ValueError(f"{operation} is not a long-running operation")
        fault = Fault(operation, code, message or f"{code} (injected)", status, zone,
                      in_operation, times)
        with self._lock:
            self._faults.append(fault)

    def set_limit(self, location: str, usage_name: str, limit: int) -> None:
        """Set a quota (``cores``, ``lowPriorityCores``, a family such as
        ``standardDSv3Family``) in a location; others default to ``DEFAULT_LIMIT``."""
        with self._lock:
            self._limits[(location.lower(), usage_name)] = limit

    def set_latency(self, seconds: dict[str, float]) -> None:
        """Make operations take time: ARM operation id (``VirtualMachines_CreateOrUpdate``,
        ``ResourceGroups_Delete``...) -> the seconds each new one stays ``InProgress``."""
        with self._lock:
            self._latency = dict(seconds)

    def hold_power_state(self, vm_name: str, power_state: str, reads: int) -> None:
        """Show ``PowerState/<power_state>`` for the VM's next ``reads`` reads (a slow
        transition, e.g. ``deallocating``)."""
        with self._lock:
            vm = self._find("Microsoft.Compute/virtualMachines", vm_name)
            self._held[vm["id"].lower()] = (power_state, reads)

    def resources(self, kind: str) -> list[Json]:
        """Every resource of an ARM type, e.g. ``Microsoft.Compute/virtualMachines``."""
        with self._lock:
            return [copy.deepcopy(r) for r in self._resources.values()
                    if r["type"].lower() == kind.lower()]

    def resource_groups(self) -> list[str]:
        return [r["name"] for r in self.resources("Microsoft.Resources/resourceGroups")]

    def power_state(self, vm_name: str) -> str | None:
        with self._lock:
            vm = self._find("Microsoft.Compute/virtualMachines", vm_name)
            return self._power.get(vm["id"].lower())

    def count(self, operation: str) -> int:
        return self.calls.count(operation)

    # ---- dispatch ---------------------------------------------------------------------

    def handle(self, method: str, url: str, headers: dict[str, str], raw: bytes) -> _Reply:
        parts = urlsplit(url)
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        try:
            self._authenticate(headers.get("authorization", ""))
            route = self._route(method, parts.path)
            if route is None:
                raise ArmError(400, "UnsupportedByFake", f"{method} {parts.path} is not faked")
            operation, handler, groups = route
            if groups["sub"] != self.subscription_id:
                raise ArmError(404, "SubscriptionNotFound",
                               f"The subscription '{groups['sub']}' could not be found.")
            if "api-version" not in params:
                raise ArmError(400, "MissingApiVersionParameter",
                               "The api-version query parameter (?api-version=) is required "
                               "for all requests.")
            call = _Call(method, url, operation, groups, params, json.loads(raw) if raw else None)
            with self._lock:
                self._tick()
                self.calls.append(operation)
                call.fault = self._take_fault(operation, self._zone_of(call))
                if call.fault and not call.fault.in_operation:
                    raise ArmError(call.fault.status, call.fault.code, call.fault.message)
                return handler(call)
        except ArmError as err:
            return _Reply(err.status, {"error": {"code": err.code, "message": err.message}},
                          err.headers)
        except (KeyError, TypeError, ValueError) as err:  # a body the fake cannot read
            return _Reply(400, {"error": {"code": "InvalidRequestContent",
                                          "message": f"The request content was invalid: {err!r}"}})

    def _authenticate(self, authorization: str) -> None:
        challenge = {"WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline'
                     '.com/common", error="invalid_token", error_description="The access token '
                     'is invalid."'}
        if not authorization:
            raise ArmError(401, "AuthenticationFailed",
                           "Authentication failed. The 'Authorization' header is missing.",
                           challenge)
        if authorization != f"Bearer {self.token}":
            raise ArmError(401, "InvalidAuthenticationToken",
                           "The access token is invalid.", challenge)

    def _route(self, method: str, path: str
               ) -> tuple[str, Callable[[_Call], _Reply], dict[str, str]] | None:
        def match(pattern: str) -> dict[str, str] | None:
            found = re.fullmatch(pattern, path, re.IGNORECASE)
            return found.groupdict() if found else None

        if method == "GET":
            for pattern, operation, handler in (
                (_SUB + r"/providers/(?P<ns>microsoft\.\w+)", "Providers_Get",
                 self._provider),
                (_SUB + r"/providers/microsoft\.compute/locations/(?P<loc>[^/]+)/usages",
                 "Usage_List", self._usages),
                (_SUB + r"/providers/microsoft\.compute/skus", "ResourceSkus_List", self._skus),
                (_SUB + r"/providers/microsoft\.(compute|network)/locations/[^/]+/operations/"
                 r"(?P<op>[^/]+)", "AsyncOperation_Get", self._operation_status),
                (_SUB + r"(/providers/microsoft\.(compute|network)/locations/[^/]+)?"
                 r"/operationresults/(?P<op>[^/]+)", "OperationResults_Get",
                 self._operation_result),
            ):
                groups = match(pattern)
                if groups is not None:
                    return operation, handler, groups
        groups = match(_RG)
        if groups is not None and method in _VERBS:
            return f"ResourceGroups_{_VERBS[method]}", self._resource_group, groups
        groups = match(_RG + r"/providers/microsoft\.network/(?P<kind>[a-z]+)(/(?P<name>[^/]+))?")
        if groups is not None and groups["kind"].lower() in _NETWORK_TYPES:
            prefix = _NETWORK_TYPES[groups["kind"].lower()][0]
            verb = _VERBS.get(method) if groups["name"] else "List" if method == "GET" else None
            return (f"{prefix}_{verb}", self._network, groups) if verb else None
        groups = match(_RG + r"/providers/microsoft\.compute/virtualmachines"
                       r"(/(?P<name>[^/]+)(/(?P<action>start|deallocate|instanceview))?)?")
        if groups is None:
            return None
        action = (groups["action"] or "").lower()
        if action:
            expected = "GET" if action == "instanceview" else "POST"
            name = {"start": "Start", "deallocate": "Deallocate",
                    "instanceview": "InstanceView"}[action]
            return (f"VirtualMachines_{name}", self._vm_action, groups) if (
                method == expected) else None
        verb = _VERBS.get(method) if groups["name"] else "List" if method == "GET" else None
        return (f"VirtualMachines_{verb}", self._vm, groups) if verb else None

    def _take_fault(self, operation: str, zone: str | None) -> Fault | None:
        for fault in self._faults:
            if fault.operation == operation and fault.zone in (None, zone):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _zone_of(self, call: _Call) -> str | None:
        """The availability zone a request acts in (for zone-keyed faults)."""
        zones = (call.body or {}).get("zones")
        if zones:
            return str(zones[0])
        if call.operation.startswith("VirtualMachines_") and call.groups.get("name"):
            vm = self._resources.get(self._vm_id(call).lower())
            if vm and vm.get("zones"):
                return str(vm["zones"][0])
        return None

    # ---- ids and lookups --------------------------------------------------------------

    def _group_id(self, group: str) -> str:
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{group}"

    def _vm_id(self, call: _Call) -> str:
        return (f"{self._group_id(call.groups['rg'])}/providers/Microsoft.Compute/"
                f"virtualMachines/{call.groups['name']}")

    def _find(self, kind: str, name: str) -> Json:
        for resource in self._resources.values():
            if resource["type"].lower() == kind.lower() and resource["name"] == name:
                return resource
        raise KeyError(f"no {kind} named {name}")

    def _existing_group(self, group: str) -> Json:
        resource = self._resources.get(self._group_id(group).lower())
        if resource is None:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{group}' could not "
                           "be found.")
        return resource

    def _in_group(self, group: str, kind: str) -> list[Json]:
        prefix = self._group_id(group).lower() + "/"
        return [r for key, r in self._resources.items()
                if key.startswith(prefix) and r["type"].lower() == kind.lower()]

    def _referenced(self, resource_id: str, what: str, *, provisioned: bool = False) -> Json:
        """The resource ``what`` names; ``provisioned``: as the network provider checks,
        one still being made (or failed) is refused too."""
        resource = self._resources.get(resource_id.lower())
        if resource is None:
            raise ArmError(400, "InvalidResourceReference",
                           f"Resource {resource_id} referenced by {what} was not found.")
        state = resource["properties"].get("provisioningState", "Succeeded")
        if provisioned and state != "Succeeded":
            raise ArmError(400, "ReferencedResourceNotProvisioned", (
                f"Cannot proceed with operation because resource {resource_id} used by "
                f"resource {what} is not in Succeeded state. Resource is in {state} state and "
                "the last operation that updated/is updating the resource is "
                f"Put{resource['type'].rsplit('/', 1)[-1]}Operation."))
        return resource

    # ---- long-running operations ------------------------------------------------------

    def _operation(self, call: _Call, on_success: Callable[[], None],
                   on_failure: Callable[[Json], None]) -> _Operation:
        seconds = self._latency.get(call.operation, 0.0)
        op = _Operation(str(uuid.uuid4()), self.lro_polls,
                        time.monotonic() + seconds if seconds else 0.0, on_success, on_failure,
                        start_time=_now())
        if call.fault:  # an in-operation fault: accepted now, Failed when polled to the end
            op.error = {"code": call.fault.code, "message": call.fault.message}
            op.error_status = call.fault.status
        self._operations[op.id] = op
        return op

    def _begin(self, call: _Call, namespace: str, location: str, status: int, body: Json | None,
               on_success: Callable[[], None], on_failure: Callable[[Json], None],
               with_location: bool) -> _Reply:
        """Start a resource provider's operation: polled through ``Azure-AsyncOperation``
        (and ``Location`` for POST and DELETE)."""
        op = self._operation(call, on_success, on_failure)
        base = (f"{self.base_url}/subscriptions/{self.subscription_id}/providers/"
                f"{namespace}/locations/{location}")
        version = call.params["api-version"]
        headers = {"Azure-AsyncOperation": f"{base}/operations/{op.id}?api-version={version}",
                   **_retry_after(op)}
        if with_location:
            headers["Location"] = f"{base}/operationResults/{op.id}?api-version={version}"
        return _Reply(status, body, headers)

    def _tick(self) -> None:
        """Time passes for every operation under way (ARM runs them whether polled or not)."""
        for op in list(self._operations.values()):
            if op.status == "InProgress":
                self._advance(op.id)

    def _advance(self, op_id: str) -> _Operation:
        op = self._operations.get(op_id)
        if op is None:
            raise ArmError(404, "NotFound", f"The operation '{op_id}' was not found.")
        if op.status == "InProgress":
            if op.polls_left > 0 or time.monotonic() < op.done_at:
                op.polls_left = max(0, op.polls_left - 1)
            else:
                op.end_time = _now()
                if op.error is None:
                    op.status = "Succeeded"
                    op.on_success()
                else:
                    op.status = "Failed"
                    op.on_failure(op.error)
        return op

    def _operation_status(self, call: _Call) -> _Reply:
        op = self._advance(call.groups["op"])
        body: Json = {"name": op.id, "status": op.status, "startTime": op.start_time}
        if op.end_time:
            body["endTime"] = op.end_time
        if op.error is not None and op.status == "Failed":
            body["error"] = op.error
        return _Reply(200, body, _retry_after(op))

    def _operation_result(self, call: _Call) -> _Reply:
        if self.records_expired:
            raise ArmError(404, "NotFound", f"The operation '{call.groups['op']}' was not "
                           "found.")
        op = self._advance(call.groups["op"])
        if op.status == "InProgress":
            return _Reply(202, None, {"Location": f"{self.base_url}{call.url}"})
        if op.status == "Failed":
            assert op.error is not None
            raise ArmError(op.error_status, op.error["code"], op.error["message"])
        return _Reply(200, None)

    # ---- subscription-level reads -----------------------------------------------------

    def _provider(self, call: _Call) -> _Reply:
        namespace = next((n for n in ("Microsoft.Compute", "Microsoft.Network",
                                      "Microsoft.Resources")
                          if n.lower() == call.groups["ns"].lower()), call.groups["ns"])
        state = "Registered" if namespace in self.registered_providers else "NotRegistered"
        return _Reply(200, {
            "id": f"/subscriptions/{self.subscription_id}/providers/{namespace}",
            "namespace": namespace,
            "registrationState": state,
            "resourceTypes": [],
        })

    def _usage_of(self, location: str) -> dict[str, int]:
        used: dict[str, int] = {"cores": 0, "lowPriorityCores": 0, "virtualMachines": 0}
        for vm in self._resources.values():
            if vm["type"] != "Microsoft.Compute/virtualMachines" or (
                vm["location"].lower() != location.lower()
            ):
                continue
            size = VM_SIZES[vm["properties"]["hardwareProfile"]["vmSize"]]
            used["virtualMachines"] += 1
            if vm["properties"].get("priority") == "Spot":
                used["lowPriorityCores"] += size.vcpus
            else:
                used["cores"] += size.vcpus
                used[size.family] = used.get(size.family, 0) + size.vcpus
        return used

    def _limit(self, location: str, name: str) -> int:
        default = 25000 if name == "virtualMachines" else DEFAULT_LIMIT
        return self._limits.get((location.lower(), name), default)

    def _usages(self, call: _Call) -> _Reply:
        location = call.groups["loc"]
        used = self._usage_of(location)
        names = {"cores": "Total Regional vCPUs", "lowPriorityCores":
                 "Total Regional Low-priority vCPUs", "virtualMachines": "Virtual Machines"}
        names.update({s.family: s.family_display for s in VM_SIZES.values()})
        return _Reply(200, {"value": [
            {"unit": "Count", "currentValue": used.get(name, 0),
             "limit": self._limit(location, name),
             "name": {"value": name, "localizedValue": display}}
            for name, display in names.items()
        ]})

    def _skus(self, call: _Call) -> _Reply:
        wanted = re.search(r"location\s+eq\s+'([^']+)'", call.params.get("$filter", ""))
        location = wanted.group(1) if wanted else "eastus"
        return _Reply(200, {"value": [
            {"resourceType": "virtualMachines", "name": s.name, "tier": "Standard",
             "size": s.name.removeprefix("Standard_"), "family": s.family,
             "locations": [location],
             "locationInfo": [{"location": location, "zones": list(ZONES)}],
             "capabilities": [
                 {"name": "vCPUs", "value": str(s.vcpus)},
                 {"name": "MemoryGB", "value": f"{s.memory_gb:g}"},
                 {"name": "GPUs", "value": str(s.gpus)},
             ],
             "restrictions": []}
            for s in VM_SIZES.values()
        ]})

    # ---- resource groups --------------------------------------------------------------

    def _resource_group(self, call: _Call) -> _Reply:
        group = call.groups["rg"]
        key = self._group_id(group).lower()
        existing = self._resources.get(key)
        if call.method == "HEAD":
            return _Reply(404 if existing is None else 204)
        if call.method == "GET":
            return _Reply(200, self._existing_group(group))
        if call.method == "PUT":
            if existing and existing["properties"]["provisioningState"] == "Deleting":
                raise ArmError(409, "ResourceGroupBeingDeleted", f"The resource group '{group}' "
                               "is in deprovisioning state and cannot perform this operation.")
            body = call.body or {}
            resource = {"id": self._group_id(group), "name": group,
                        "type": "Microsoft.Resources/resourceGroups",
                        "location": body["location"], "tags": body.get("tags", {}),
                        "properties": {"provisioningState": "Succeeded"}}
            self._resources[key] = resource
            return _Reply(200 if existing else 201, resource)
        self._existing_group(group)["properties"]["provisioningState"] = "Deleting"
        prefix = key + "/"
        for resource_key, resource in self._resources.items():
            if resource_key.startswith(prefix):
                resource["properties"]["provisioningState"] = "Deleting"

        def remove() -> None:
            for resource_key in [k for k in self._resources if k == key or k.startswith(prefix)]:
                self._drop(resource_key)

        def keep(error: Json) -> None:  # the delete failed: the group is back, as it was
            for resource_key, resource in self._resources.items():
                if resource_key == key or resource_key.startswith(prefix):
                    resource["properties"]["provisioningState"] = "Succeeded"

        # Resource-group deletion is polled through Location only, as ARM does.
        op = self._operation(call, remove, keep)
        url = (f"{self.base_url}/subscriptions/{self.subscription_id}/operationresults/"
               f"{op.id}?api-version={call.params['api-version']}")
        return _Reply(202, None, {"Location": url})

    def _drop(self, key: str) -> None:
        self._resources.pop(key, None)
        self._power.pop(key, None)
        self._failures.pop(key, None)
        self._held.pop(key, None)

    # ---- network resources ------------------------------------------------------------

    def _network(self, call: _Call) -> _Reply:
        group, name = call.groups["rg"], call.groups["name"]
        prefix, kind_name = _NETWORK_TYPES[call.groups["kind"].lower()]
        kind = f"Microsoft.Network/{kind_name}"
        self._existing_group(group)
        if name is None:
            return _Reply(200, {"value": copy.deepcopy(self._in_group(group, kind))})
        resource_id = f"{self._group_id(group)}/providers/{kind}/{name}"
        key = resource_id.lower()
        existing = self._resources.get(key)
        if call.method == "GET":
            if existing is None:
                raise _not_found(kind, name, group)
            return _Reply(200, existing)
        if call.method == "DELETE":
            if existing is None:
                return _Reply(204)
            self._check_deletable(prefix, existing)
            existing["properties"]["provisioningState"] = "Deleting"
            return self._begin(call, "Microsoft.Network", existing["location"], 202, None,
                               lambda: self._delete_network(key), lambda error: None, True)
        body = copy.deepcopy(call.body or {})
        resource = {**body, "id": resource_id, "name": name, "type": kind,
                    "etag": f'W/"{uuid.uuid4()}"'}
        properties = resource.setdefault("properties", {})
        previous = existing["properties"] if existing else {}
        {"NetworkSecurityGroups": self._shape_nsg, "VirtualNetworks": self._shape_vnet,
         "PublicIPAddresses": self._shape_public_ip,
         "NetworkInterfaces": self._shape_nic}[prefix](resource_id, properties, previous)
        properties["provisioningState"] = "Updating"
        properties["resourceGuid"] = previous.get("resourceGuid", str(uuid.uuid4()))
        self._resources[key] = resource

        def succeed() -> None:
            properties["provisioningState"] = "Succeeded"

        def fail(error: Json) -> None:
            properties["provisioningState"] = "Failed"

        return self._begin(call, "Microsoft.Network", resource["location"],
                           200 if existing else 201, copy.deepcopy(resource), succeed, fail, False)

    def _shape_nsg(self, resource_id: str, properties: Json, previous: Json) -> None:
        for rule in properties.setdefault("securityRules", []):
            rule["id"] = f"{resource_id}/securityRules/{rule['name']}"
            rule.setdefault("properties", {})["provisioningState"] = "Succeeded"

    def _shape_vnet(self, resource_id: str, properties: Json, previous: Json) -> None:
        for subnet in properties.setdefault("subnets", []):
            subnet["id"] = f"{resource_id}/subnets/{subnet['name']}"
            subnet_properties = subnet.setdefault("properties", {})
            subnet_properties["provisioningState"] = "Succeeded"
            nsg = subnet_properties.get("networkSecurityGroup")
            if nsg:
                self._referenced(nsg["id"], f"subnet {subnet['name']}", provisioned=True)

    def _shape_public_ip(self, resource_id: str, properties: Json, previous: Json) -> None:
        properties.setdefault("publicIPAllocationMethod", "Static")
        properties["ipAddress"] = previous.get("ipAddress") or next(self._public_ips)
        if previous.get("ipConfiguration"):
            properties["ipConfiguration"] = previous["ipConfiguration"]

    def _shape_nic(self, resource_id: str, properties: Json, previous: Json) -> None:
        if previous.get("virtualMachine"):
            properties["virtualMachine"] = previous["virtualMachine"]
        old = {c["name"]: c["properties"] for c in previous.get("ipConfigurations", [])}
        for config in properties.setdefault("ipConfigurations", []):
            config["id"] = f"{resource_id}/ipConfigurations/{config['name']}"
            config_properties = config.setdefault("properties", {})
            subnet_id = config_properties["subnet"]["id"]
            vnet_id, _, subnet_name = subnet_id.partition("/subnets/")
            vnet = self._referenced(vnet_id, f"network interface {resource_id}", provisioned=True)
            subnet = next((s for s in vnet["properties"]["subnets"] if s["name"] == subnet_name),
                          None)
            if subnet is None:
                raise ArmError(400, "InvalidResourceReference", f"Subnet {subnet_id} referenced "
                               f"by network interface {resource_id} was not found.")
            address = old.get(config["name"], {}).get("privateIPAddress") or self._free_ip(
                subnet["properties"]["addressPrefix"], subnet_id)
            config_properties.update(privateIPAddress=address, privateIPAllocationMethod=(
                config_properties.get("privateIPAllocationMethod", "Dynamic")),
                provisioningState="Succeeded")
            public = config_properties.get("publicIPAddress")
            if public:
                public_ip = self._referenced(public["id"], f"network interface {resource_id}",
                                             provisioned=True)
                public_ip["properties"]["ipConfiguration"] = {"id": config["id"]}

    def _free_ip(self, prefix: str, subnet_id: str) -> str:
        used = {
            c["properties"].get("privateIPAddress")
            for nic in self._resources.values() if nic["type"] == "Microsoft.Network/"
            "networkInterfaces" for c in nic["properties"]["ipConfigurations"]
            if c["properties"]["subnet"]["id"].lower() == subnet_id.lower()
        }
        hosts = ipaddress.ip_network(prefix).hosts()
        for _ in range(3):  # Azure reserves the first addresses of a subnet
            next(hosts)
        return next(str(ip) for ip in hosts if str(ip) not in used)

    def _check_deletable(self, prefix: str, resource: Json) -> None:
        properties = resource["properties"]
        if prefix == "NetworkInterfaces" and properties.get("virtualMachine"):
            raise ArmError(400, "NicInUse", f"Network Interface {resource['id']} is used by "
                           f"existing resource {properties['virtualMachine']['id']}. In order to "
                           "delete the network interface, it must be dissociated from the "
                           "resource.")
        if prefix == "PublicIPAddresses" and properties.get("ipConfiguration"):
            raise ArmError(400, "PublicIPAddressCannotBeDeleted", f"Public IP address "
                           f"{resource['id']} can not be deleted since it is still allocated to "
                           f"resource {properties['ipConfiguration']['id']}.")

    def _delete_network(self, key: str) -> None:
        resource = self._resources.pop(key, None)
        if resource and resource["type"] == "Microsoft.Network/networkInterfaces":
            for config in resource["properties"]["ipConfigurations"]:
                public = config["properties"].get("publicIPAddress")
                public_ip = self._resources.get(public["id"].lower()) if public else None
                if public_ip:
                    public_ip["properties"].pop("ipConfiguration", None)

    # ---- virtual machines -------------------------------------------------------------

    def _instance_view(self, vm: Json) -> Json:
        key = vm["id"].lower()
        state = vm["properties"]["provisioningState"]
        failure = self._failures.get(key)
        if state == "Failed" and failure:
            statuses = [{"code": f"ProvisioningState/failed/{failure['code']}", "level": "Error",
                         "displayStatus": "Provisioning failed", "message": failure["message"]}]
        else:
            statuses = [{"code": f"ProvisioningState/{state.lower()}", "level": "Info",
                         "displayStatus": f"Provisioning {state.lower()}"}]
        power = self._power.get(key)
        if key in self._held:
            power, reads = self._held.pop(key)
            if reads > 1:
                self._held[key] = (power, reads - 1)
        if power:
            statuses.append({"code": f"PowerState/{power}", "level": "Info",
                             "displayStatus": f"VM {power}"})
        return {"computerName": vm["properties"].get("osProfile", {}).get("computerName"),
                "statuses": statuses}

    def _vm_view(self, vm: Json, expand: bool) -> Json:
        shown = copy.deepcopy(vm)
        if expand:
            shown["properties"]["instanceView"] = self._instance_view(vm)
        return shown

    def _vm(self, call: _Call) -> _Reply:
        group, name = call.groups["rg"], call.groups["name"]
        self._existing_group(group)
        expand = call.params.get("$expand", "").lower() == "instanceview"
        if name is None:
            vms = self._in_group(group, "Microsoft.Compute/virtualMachines")
            return _Reply(200, {"value": [self._vm_view(vm, expand) for vm in vms]})
        vm_id = self._vm_id(call)
        key = vm_id.lower()
        existing = self._resources.get(key)
        if call.method == "GET":
            if existing is None:
                raise _not_found("Microsoft.Compute/virtualMachines", name, group)
            return _Reply(200, self._vm_view(existing, expand))
        if call.method == "DELETE":
            if existing is None:
                return _Reply(204)
            existing["properties"]["provisioningState"] = "Deleting"
            return self._begin(call, "Microsoft.Compute", existing["location"], 202, None,
                               lambda: self._delete_vm(key), lambda error: None, True)
        return self._create_vm(call, vm_id, existing)

    def _create_vm(self, call: _Call, vm_id: str, existing: Json | None) -> _Reply:
        key = vm_id.lower()
        body = copy.deepcopy(call.body or {})
        properties = body.setdefault("properties", {})
        size_name = properties.get("hardwareProfile", {}).get("vmSize")
        size = VM_SIZES.get(size_name or "")
        if size is None:
            raise ArmError(400, "InvalidParameter", f"The value {size_name} provided for the VM "
                           "size is not valid. The valid sizes in the current region are: "
                           f"{', '.join(VM_SIZES)}.")
        _check_os_disk(size, call.groups["name"], properties)
        if not existing:
            self._check_quota(body["location"], size, properties.get("priority") == "Spot")
        nic_ids = [n["id"] for n in properties.get("networkProfile", {}).get(
            "networkInterfaces", [])]
        nics = [self._referenced(nic_id, f"virtual machine {vm_id}") for nic_id in nic_ids]
        for nic in nics:
            owner = nic["properties"].get("virtualMachine")
            if owner and owner["id"].lower() != key:
                raise ArmError(400, "NicInUse", f"Network Interface {nic['id']} is used by "
                               f"existing resource {owner['id']}.")
        vm = {**body, "id": vm_id, "name": call.groups["name"],
              "type": "Microsoft.Compute/virtualMachines"}
        properties["vmId"] = existing["properties"]["vmId"] if existing else str(uuid.uuid4())
        properties["timeCreated"] = (existing or vm)["properties"].get("timeCreated", _now())
        properties["provisioningState"] = "Updating" if existing else "Creating"
        self._resources[key] = vm
        self._failures.pop(key, None)
        for nic in nics:
            nic["properties"]["virtualMachine"] = {"id": vm_id}
        previous_power = self._power.get(key)
        self._power[key] = previous_power or "starting"

        def succeed() -> None:
            properties["provisioningState"] = "Succeeded"
            self._power[key] = "running" if previous_power in (None, "starting", "running") \
                else previous_power

        def fail(error: Json) -> None:
            properties["provisioningState"] = "Failed"
            self._failures[key] = error
            self._power[key] = previous_power

        return self._begin(call, "Microsoft.Compute", vm["location"], 200 if existing else 201,
                           self._vm_view(vm, False), succeed, fail, False)

    def _check_quota(self, location: str, size: VmSize, spot: bool) -> None:
        used = self._usage_of(location)
        quotas = [("lowPriorityCores", "LowPriorityCores")] if spot else [
            (size.family, size.family), ("cores", "Total Regional Cores")]
        for name, label in quotas:
            limit, current = self._limit(location, name), used.get(name, 0)
            if current + size.vcpus > limit:
                raise ArmError(409, "OperationNotAllowed", (
                    f"Operation could not be completed as it results in exceeding approved "
                    f"{label} quota. Additional details - Deployment Model: Resource Manager, "
                    f"Location: {location}, Current Limit: {limit}, Current Usage: {current}, "
                    f"Additional Required: {size.vcpus}, (Minimum) New Limit Required: "
                    f"{current + size.vcpus}. Submit a request for Quota increase at "
                    "https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/"
                    "UsageAndQuota.ReactView."))

    def _delete_vm(self, key: str) -> None:
        """The VM goes, and with it the network interfaces it says to delete (and their
        public IPs that say so too); the others are only detached."""
        vm = self._resources.get(key)
        if vm is None:
            return
        for ref in vm["properties"].get("networkProfile", {}).get("networkInterfaces", []):
            nic_key = ref["id"].lower()
            nic = self._resources.get(nic_key)
            if not nic:
                continue
            nic["properties"].pop("virtualMachine", None)
            if ref.get("properties", {}).get("deleteOption") != "Delete":
                continue
            public_ips = [c["properties"].get("publicIPAddress") for c in
                          nic["properties"]["ipConfigurations"]]
            self._delete_network(nic_key)
            for public in filter(None, public_ips):
                ip = self._resources.get(public["id"].lower())
                if ip and ip["properties"].get("deleteOption") == "Delete":
                    self._drop(public["id"].lower())
        self._drop(key)

    def _vm_action(self, call: _Call) -> _Reply:
        self._existing_group(call.groups["rg"])
        vm_id = self._vm_id(call)
        key = vm_id.lower()
        vm = self._resources.get(key)
        if vm is None:
            raise _not_found("Microsoft.Compute/virtualMachines", call.groups["name"],
                             call.groups["rg"])
        if call.operation == "VirtualMachines_InstanceView":
            return _Reply(200, self._instance_view(vm))
        properties = vm["properties"]
        if properties["provisioningState"] in ("Creating", "Deleting"):
            raise ArmError(409, "OperationNotAllowed", "Operation "
                           f"'{call.groups['action'].lower()}' is not allowed on VM "
                           f"'{vm['name']}' since the VM is in provisioning state "
                           f"'{properties['provisioningState']}'.")
        previous_power = self._power.get(key)
        starting = call.operation == "VirtualMachines_Start"
        properties["provisioningState"] = "Updating"
        self._power[key] = "starting" if starting else "deallocating"

        def succeed() -> None:
            properties["provisioningState"] = "Succeeded"
            self._power[key] = "running" if starting else "deallocated"

        def fail(error: Json) -> None:
            properties["provisioningState"] = "Failed"
            self._failures[key] = error
            self._power[key] = previous_power

        return self._begin(call, "Microsoft.Compute", vm["location"], 202, None, succeed, fail,
                           True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    disable_nagle_algorithm = True  # headers and body are separate writes

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake: AzureArmFake = self.server.fake  # type: ignore[attr-defined]
        reply = fake.handle(self.command, self.path, headers, raw)
        payload = json.dumps(reply.body).encode() if reply.body is not None else b""
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: pytest shows the test's own output."""


def _write_self_signed_cert(directory: Path, cert_path: str) -> str:
    """A self-signed CA certificate for 127.0.0.1/localhost; returns the key's path."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "azure-arm-fake")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    Path(cert_path).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = directory / "key.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(key_path)
