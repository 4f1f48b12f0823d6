"""The GCP provider: Compute Engine instances found by their labels.

Instances are zonal while the provider interface is keyed by region, so a cluster's
instances are listed with ``instances.aggregatedList`` filtered by the ``orch-cluster``
label and kept to the region's zones. A cluster lives in one zone: the zone of the
instances it already has, else the zone asked for, else the region's first zone.

Every call that changes something (insert, start, stop, delete, a firewall's insert,
patch or delete) returns as soon as Google has accepted it, with its Operation's name
(:class:`~orch.clouds.base.Operation`); the waiter polls them with
:meth:`GCPProvider.check_operations` (``operations.get``, never ``operations.wait``),
because only the operation says why it failed: an insert out of capacity
(ZONE_RESOURCE_POOL_EXHAUSTED) or over quota leaves no instance behind to look at.
``run_instances`` does not start instances that are still stopping (Google refuses
them): it says so (``waiting_for``) and is called again.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from orch.clouds.base import (
    ClusterInfo,
    InstanceStatus,
    Operation,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.clouds.errors import BlockScope, CapacityError, InvalidConfigError, ProvisionError
from orch.clouds.gcp_client import ComputeAPI, GCPSettings, started
from orch.clouds.gcp_errors import from_operation, operation_errors, widest
from orch.clouds.gcp_quota import check, gpu_count, parse_quotas, regional_demand
from orch.clouds.gcp_resources import (
    cloud_cluster_name,
    firewall_body,
    firewall_name,
    firewall_ports,
    head_name,
    instance_body,
    label_filter,
    last_segment,
    node_info,
    node_names,
    node_order,
    status_of,
    zone_in_region,
)

_ACTIVE = (InstanceStatus.PENDING, InstanceStatus.RUNNING)


class GCPProvider:
    """Compute Engine through google-api-python-client."""

    name = "gcp"

    def __init__(self, settings: GCPSettings | None = None, *, ssh_user: str = "orch"):
        self.api = ComputeAPI(settings or GCPSettings.from_env())
        self.ssh_user = ssh_user

    # -- credentials --------------------------------------------------------------
    def credentials_ok(self) -> tuple[bool, str]:
        """Whether the credentials can read the project (one ``projects.get``), and where
        they came from."""
        try:
            project = self.api.project
            self.api.get(self.api.compute().projects().get(project=project))
        except ProvisionError as e:
            return False, f"{type(e).__name__} {e.code}: {e.message}"
        return True, f"project {project} ({self.api.source})"

    # -- lookups ------------------------------------------------------------------
    def _instances(
        self, region: str | None, cloud_name: str, worker_only: bool = False
    ) -> list[dict[str, Any]]:
        """Every instance of the cluster in the region (None: in every region), in any
        status, head first."""
        instances_api = self.api.compute().instances()
        request = instances_api.aggregatedList(
            project=self.api.project, filter=label_filter(cloud_name, worker_only)
        )
        found: list[dict[str, Any]] = []
        while request is not None:
            page = self.api.get(request)
            for scope, items in page.get("items", {}).items():
                if region is None or zone_in_region(last_segment(scope), region):
                    found += items.get("instances", [])
            request = instances_api.aggregatedList_next(request, page)
        return sorted(found, key=node_order)

    def _region(self, region: str) -> dict[str, Any]:
        return self.api.get(self.api.compute().regions().get(project=self.api.project,
                                                             region=region))

    def _machine_type(self, zone: str, machine_type: str) -> dict[str, Any]:
        return self.api.get(self.api.compute().machineTypes().get(
            project=self.api.project, zone=zone, machineType=machine_type))

    def _zone(self, config: ProvisionConfig, existing: list[dict[str, Any]],
              region: dict[str, Any] | None = None) -> str:
        """The cluster's zone: where its instances are, else the requested one, else the
        region's first."""
        if existing:
            zone = last_segment(existing[0]["zone"])
            if config.zone and config.zone != zone:
                raise InvalidConfigError(
                    f"cluster {config.cluster_name} already has instances in {zone}, "
                    f"not {config.zone}", code="CLUSTER_IN_OTHER_ZONE", scope=BlockScope.ZONE)
            return zone
        if config.zone:
            if not zone_in_region(config.zone, config.region):
                raise InvalidConfigError(f"zone {config.zone} is not in region {config.region}",
                                         code="ZONE_NOT_IN_REGION", scope=BlockScope.ZONE)
            return config.zone
        zones = sorted(last_segment(z) for z in (region or self._region(config.region))["zones"])
        if not zones:
            raise InvalidConfigError(f"region {config.region} has no zones", code="NO_ZONES",
                                     scope=BlockScope.REGION)
        return zones[0]

    @staticmethod
    def _require_instance_type(config: ProvisionConfig) -> str:
        if not config.instance_type:
            raise InvalidConfigError("GCP needs an instance type (machine type)",
                                     code="NO_MACHINE_TYPE")
        return config.instance_type

    # -- the provider interface -------------------------------------------------------
    def check_quota(self, config: ProvisionConfig) -> None:
        machine_type = self._require_instance_type(config)
        cloud_name = cloud_cluster_name(config.cluster_name)
        existing = self._instances(config.region, cloud_name)
        # Instances that already run count in the usage Google reports: ask only for the rest.
        active = sum(status_of(i) in _ACTIVE for i in existing)
        nodes = max(config.num_nodes - active, 0)
        if nodes == 0:
            return
        region = self._region(config.region)
        machine = self._machine_type(self._zone(config, existing, region), machine_type)
        regional = parse_quotas(region)
        check(regional_demand(machine, nodes, config.use_spot, regional), regional,
              f"in region {config.region}")
        gpus = gpu_count(machine, nodes)
        if gpus:
            project = self.api.get(self.api.compute().projects().get(project=self.api.project))
            check(Counter({"GPUS_ALL_REGIONS": gpus}), parse_quotas(project), "globally")

    def run_instances(self, config: ProvisionConfig) -> ProvisionRecord:
        """Start the stopped instances and insert the missing ones; returns their
        operations. Nothing is started while an instance is still stopping."""
        machine_type = self._require_instance_type(config)
        cloud_name = cloud_cluster_name(config.cluster_name)
        existing = self._instances(config.region, cloud_name)
        zone = self._zone(config, existing)
        record = ProvisionRecord(cloud=self.name, cluster_name=config.cluster_name,
                                 region=config.region, zone=zone,
                                 head_instance_id=head_name(cloud_name))
        stopping = self._stopped(config, existing, InstanceStatus.STOPPING)
        if stopping:
            return record.model_copy(update={"waiting_for": ", ".join(
                f"{name}=STOPPING" for name in stopping)})
        machine = self._machine_type(zone, machine_type)
        resumed = self._stopped(config, existing, InstanceStatus.STOPPED)
        instances = self.api.compute().instances()
        operations = [started(self.api.get(instances.start(
            project=self.api.project, zone=zone, instance=name))) for name in resumed]
        created: list[str] = []
        # Every node is inserted, even those listed above: the name makes the insert
        # idempotent (409 alreadyExists), which holds even when the listing is stale
        # because an earlier attempt of this activity is still running.
        for name, kind in node_names(cloud_name, config.num_nodes):
            body = instance_body(config, cloud_name, name, kind, zone,
                                 has_accelerators=bool(machine.get("accelerators")),
                                 ssh_user=self.ssh_user)
            operation = self.api.call(
                instances.insert(project=self.api.project, zone=zone, body=body),
                tolerate={"alreadyExists"},
            )
            if operation is not None:
                created.append(name)
                operations.append(started(operation, tolerate={"RESOURCE_ALREADY_EXISTS"}))
        operations += self.open_ports(config.region, config.cluster_name, config.ports)
        return record.model_copy(update={"created_instance_ids": created,
                                         "resumed_instance_ids": resumed,
                                         "operations": operations})

    @staticmethod
    def _stopped(config: ProvisionConfig, existing: list[dict[str, Any]],
                 status: InstanceStatus) -> list[str]:
        """The names of the cluster's instances in ``status`` (STOPPING or STOPPED), which
        a launch resumes, unless told not to."""
        names = [i["name"] for i in existing if status_of(i) == status]
        if names and not config.resume_stopped:
            raise InvalidConfigError(
                f"cluster {config.cluster_name} has stopped instances; resume or terminate it",
                code="STOPPED_INSTANCES_EXIST", scope=BlockScope.ZONE)
        return names

    def check_operations(self, region: str, cluster_name: str,
                         operations: list[Operation]) -> StateCheck:
        """Read every operation again; once none is running, raise the widest of their
        errors (those they tolerate aside)."""
        running: list[str] = []
        failures: list[ProvisionError] = []
        for operation in operations:
            current = self.api.operation(operation)
            if current.get("status") != "DONE":
                running.append(f"{operation} {current.get('status', 'PENDING')}")
                continue
            codes = {str(error.get("code")) for error in operation_errors(current)}
            if codes - set(operation.tolerate):
                failures.append(from_operation(current))
        if running:
            return StateCheck(done=False, seen=", ".join(running))
        if failures:
            raise widest(failures)
        return StateCheck(done=True, seen=", ".join(f"{op} DONE" for op in operations))

    def check_instances(self, region: str, cluster_name: str, state: InstanceStatus) -> StateCheck:
        statuses = self.query_instances(region, cluster_name)
        if state == InstanceStatus.RUNNING:
            if not statuses:
                raise CapacityError(f"cluster {cluster_name} has no instances in {region}",
                                    code="RESOURCE_NOT_FOUND")
            gone = sorted(n for n, s in statuses.items() if s not in _ACTIVE)
            if gone:  # e.g. spot capacity reclaimed while booting
                raise CapacityError(f"instances {gone} stopped before running",
                                    code="PREEMPTED")
        return StateCheck(done=all(s == state for s in statuses.values()),
                          seen=", ".join(f"{n}={s}" for n, s in sorted(statuses.items())))

    def query_instances(self, region: str, cluster_name: str) -> dict[str, InstanceStatus]:
        return {
            i["name"]: status_of(i)
            for i in self._instances(region, cloud_cluster_name(cluster_name))
        }

    def get_cluster_info(self, region: str, cluster_name: str) -> ClusterInfo:
        running = [
            i for i in self._instances(region, cloud_cluster_name(cluster_name))
            if status_of(i) == InstanceStatus.RUNNING
        ]
        if not running:
            return ClusterInfo(cloud=self.name, region=region)
        zone = last_segment(running[0]["zone"])
        machine_type = last_segment(running[0]["machineType"])
        machine = self._machine_type(zone, machine_type)
        return ClusterInfo(
            cloud=self.name,
            region=region,
            zone=zone,
            instance_type=machine_type,
            nodes=[node_info(i, machine, self.ssh_user) for i in running],
        )

    def stop_instances(self, region: str, cluster_name: str, worker_only: bool = False
                       ) -> list[Operation]:
        targets = [
            i for i in self._instances(region, cloud_cluster_name(cluster_name), worker_only)
            if status_of(i) in _ACTIVE
        ]
        return self._each(targets, "stop")

    def terminate_instances(
        self, region: str, cluster_name: str, worker_only: bool = False
    ) -> list[Operation]:
        targets = self._instances(region, cloud_cluster_name(cluster_name), worker_only)
        return self._each(targets, "delete")

    def _each(self, targets: list[dict[str, Any]], method: str) -> list[Operation]:
        """Call instances.<method> on every target; returns the operations. An instance
        deleted meanwhile is not an error."""
        instances = self.api.compute().instances()
        operations = []
        for instance in targets:
            request = getattr(instances, method)(project=self.api.project,
                                                 zone=last_segment(instance["zone"]),
                                                 instance=instance["name"])
            operation = self.api.call(request, tolerate={"notFound"})
            if operation is not None:
                operations.append(started(operation, tolerate={"RESOURCE_NOT_FOUND"}))
        return operations

    def open_ports(self, region: str, cluster_name: str, ports: list[str]
                   ) -> list[Operation]:
        """Create the cluster's firewall rule, or widen it to include ``ports``."""
        if not ports:
            return []
        cloud_name = cloud_cluster_name(cluster_name)
        firewalls = self.api.compute().firewalls()
        project, rule = self.api.project, firewall_name(cloud_name)
        current = self.api.call(firewalls.get(project=project, firewall=rule),
                                tolerate={"notFound"})
        if current is None:
            operation = self.api.call(
                firewalls.insert(project=project, body=firewall_body(cloud_name, ports)),
                tolerate={"alreadyExists"},
            )
            if operation is not None:
                return [started(operation)]
            # Created concurrently: fall through and widen it.
            current = self.api.get(firewalls.get(project=project, firewall=rule))
        have = firewall_ports(current)
        wanted = have + [p for p in ports if p not in have]
        if wanted == have:
            return []
        return [started(self.api.get(firewalls.patch(
            project=project, firewall=rule, body=firewall_body(cloud_name, wanted))))]

    def cleanup_ports(self, region: str, cluster_name: str) -> list[Operation]:
        """Delete the cluster's firewall rule once no instance of it is left in any region:
        the rule is global, and a failover cleans a region it left while the cluster lives
        on in another."""
        cloud_name = cloud_cluster_name(cluster_name)
        if self._instances(None, cloud_name):
            return []
        rule = firewall_name(cloud_name)
        operation = self.api.call(
            self.api.compute().firewalls().delete(project=self.api.project, firewall=rule),
            tolerate={"notFound"},
        )
        return [started(operation, tolerate={"RESOURCE_NOT_FOUND"})] if operation else []
