"""The provider interface every cloud implements, and its small record types.

After SkyPilot's ``sky/provision``: a handful of functions, each idempotent where the
cloud allows it, all keyed by (region, cluster name) so that a cluster's instances are
found by their tags rather than remembered. Activities call these; nothing here knows
about Temporal.

Every call is short: a call that makes the cloud work for a while (GCP's operations,
Azure's long-running operations) starts the work and returns what is still running
(:class:`Operation`); waiting for them, and for instances to change state, is the caller's job
(:func:`orch.waiting.wait_until` over :meth:`Provider.check_operations` and
:meth:`Provider.check_instances`), so that it can heartbeat and resume after a crash.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orch.clouds.tiers import DiskTier, NetworkTier

TAG_CLUSTER = "orch-cluster"
TAG_NODE_KIND = "orch-node"  # "head" or "worker"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class InstanceStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    TERMINATING = "TERMINATING"


class ProvisionConfig(_Record):
    """What to create. ``idempotency_token`` is stable across retries of one attempt, so a
    repeated call finds what the first one created instead of creating again."""

    cluster_name: str
    num_nodes: int
    region: str
    zone: str | None = None
    instance_type: str | None = None
    accelerators: dict[str, int] | None = None  # GCP attaches some GPUs to a host type
    use_spot: bool = False
    disk_size: int = 256
    disk_tier: DiskTier | None = None  # see orch.clouds.tiers
    network_tier: NetworkTier | None = None
    labels: dict[str, str] = Field(default_factory=dict)  # the task's, beside orch's tags
    image_id: str | None = None
    ports: list[str] = Field(default_factory=list)
    resume_stopped: bool = True
    idempotency_token: str = ""
    ssh_public_key: str | None = None  # the public half only; private keys never leave disk
    cpus: float = 0.0  # for clouds without instance types (local)
    memory_gb: float = 0.0


class Operation(_Record):
    """Work a provider started on the cloud and returned without waiting for; the waiter
    polls it with :meth:`Provider.check_operations`. What ``name`` names is the cloud's
    business: GCP's Operation resource (``zone`` None: a global one), or the Azure
    resource whose provisioning state tells how its operation goes. ``tolerate``: error
    codes that mean done here (an insert that met an existing instance)."""

    kind: str  # what it does: insert, start, stop, delete, ...
    name: str
    target: str = ""  # what it acts on, for what the wait reports
    zone: str | None = None
    tolerate: list[str] = Field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.kind} {self.target or self.name}"


class ProvisionRecord(_Record):
    """What ``run_instances`` did. ``operations`` are still running (creates, starts):
    the wait for RUNNING waits for them first. A non-empty ``waiting_for`` says the call
    could not start everything yet (instances still stopping, a network the VMs need still
    being made): call it again, it goes on where it stopped."""

    cloud: str
    cluster_name: str
    region: str
    zone: str | None = None
    head_instance_id: str
    created_instance_ids: list[str] = Field(default_factory=list)
    resumed_instance_ids: list[str] = Field(default_factory=list)
    operations: list[Operation] = Field(default_factory=list)
    waiting_for: str = ""


class NodeInfo(_Record):
    """How to reach one node. ``runner`` is "local" (a sandbox on this machine) or "ssh"."""

    instance_id: str
    internal_ip: str
    external_ip: str | None = None
    is_head: bool = False
    runner: str = "ssh"
    ssh_user: str | None = None
    ssh_port: int = 22
    ssh_key_path: str | None = None  # a path on the worker; the key itself stays on disk
    home: str | None = None  # local runner: the sandbox directory
    python: str = "python3"  # the interpreter with ray and orch on the node
    cpus: float = 0.0
    memory_gb: float = 0.0
    gpus: dict[str, int] = Field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.external_ip or self.internal_ip


class ClusterInfo(_Record):
    """The live view of a cluster's instances, head first."""

    cloud: str
    region: str
    zone: str | None = None
    instance_type: str | None = None
    nodes: list[NodeInfo] = Field(default_factory=list)

    @property
    def head(self) -> NodeInfo | None:
        return self.nodes[0] if self.nodes and self.nodes[0].is_head else None


class StateCheck(_Record):
    """One look at a cluster: whether a wait is over, and what was seen (for the
    heartbeat and the timeout message), e.g. ``i-0ab=pending, i-0cd=running``."""

    done: bool
    seen: str = ""


@runtime_checkable
class Provider(Protocol):
    """One cloud. Each method is keyed by region and cluster name; instances are found by
    the ``orch-cluster`` tag so that half-provisioned clusters are covered too."""

    name: str

    def check_quota(self, config: ProvisionConfig) -> None:
        """Raise QuotaError when the request would exceed a quota; unknown quota passes."""

    def run_instances(self, config: ProvisionConfig) -> ProvisionRecord:
        """Start creating or resuming instances until the cluster has ``num_nodes``; all or
        nothing. Returns without waiting (see :class:`ProvisionRecord`)."""

    def check_operations(self, region: str, cluster_name: str,
                         operations: list[Operation]) -> StateCheck:
        """One look at operations this provider started: done once every one is; raise
        the typed error of the widest failure once none is left running."""

    def check_instances(self, region: str, cluster_name: str, state: InstanceStatus) -> StateCheck:
        """One look: whether every instance is in ``state`` and what was seen; raise when
        it never will be (an instance lost while booting). Waiting is the caller's job
        (:func:`orch.waiting.wait_until`), so that it can heartbeat and resume."""

    def query_instances(self, region: str, cluster_name: str) -> dict[str, InstanceStatus]:
        """Status of every non-terminated instance of the cluster."""

    def get_cluster_info(self, region: str, cluster_name: str) -> ClusterInfo: ...

    def stop_instances(self, region: str, cluster_name: str, worker_only: bool = False
                       ) -> list[Operation]:
        """Start stopping; returns the operations still running."""

    def terminate_instances(
        self, region: str, cluster_name: str, worker_only: bool = False
    ) -> list[Operation]:
        """Start terminating (everything the cluster has in the region, unless
        ``worker_only``); returns the operations still running."""

    def open_ports(self, region: str, cluster_name: str, ports: list[str]
                   ) -> list[Operation]: ...

    def credentials_ok(self) -> tuple[bool, str]:
        """Whether this machine's credentials work for the cloud, and who they are (or why
        not); one cheap call."""

    def cleanup_ports(self, region: str, cluster_name: str) -> list[Operation]: ...
