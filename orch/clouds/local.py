"""The embedded ``local`` cloud: each node is a sandbox directory on this machine.

A node has its own loopback address (127.0.x.y, allocated machine-wide so clusters of
different ``ORCH_HOME``s never share one) and runs its processes with the node's marker
in their environment (see ``orch.runtime.local_processes``). Node resources are the
host's. There are no GPUs, no regions and no prices.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from orch.clouds.base import (
    ClusterInfo,
    InstanceStatus,
    NodeInfo,
    Operation,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.clouds.errors import InvalidConfigError
from orch.config import orch_home
from orch.runtime.local_processes import kill_marked
from orch.runtime.ray_node import local_ray_temp_dir

REGION = "local"
_IP_REGISTRY = Path(tempfile.gettempdir()) / f"orch-local-ips-{os.getuid()}.json"


def host_cpus() -> int:
    return os.cpu_count() or 1


def host_memory_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


@contextmanager
def _ip_registry():
    """The machine-wide table of loopback addresses in use, under an exclusive lock."""
    with open(_IP_REGISTRY, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        text = handle.read()
        table: dict[str, str] = json.loads(text) if text.strip() else {}
        # An address is free again once its sandbox is gone.
        table = {ip: home for ip, home in table.items() if Path(home).exists()}
        yield table
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(table))


def _allocate_ip(home: Path) -> str:
    with _ip_registry() as table:
        for ip, owner in table.items():
            if owner == str(home):
                return ip
        for n in range(2 * 256 + 1, 250 * 256):
            ip = f"127.0.{n // 256}.{n % 256}"
            if n % 256 not in (0, 255) and ip not in table:
                table[ip] = str(home)
                return ip
    raise InvalidConfigError("no free loopback address left for a local node")


class LocalProvider:
    name = "local"

    def __init__(self, root: Path | None = None):
        self.root = root or orch_home() / "local"

    # -- records on disk -------------------------------------------------------------
    def _cluster_dir(self, cluster_name: str) -> Path:
        return self.root / cluster_name

    def _nodes(self, cluster_name: str) -> list[dict]:
        cluster_dir = self._cluster_dir(cluster_name)
        nodes = []
        for path in sorted(cluster_dir.glob("*/node.json")):
            try:
                nodes.append(json.loads(path.read_text()))
            except (OSError, json.JSONDecodeError):
                continue  # a node removed while we read is not there
        return sorted(nodes, key=lambda n: n["index"])

    def _write(self, node: dict) -> None:
        path = Path(node["home"]) / "node.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(node))
        tmp.replace(path)

    # -- the provider interface ------------------------------------------------------
    def check_quota(self, config: ProvisionConfig) -> None:
        if config.cpus > host_cpus():
            raise InvalidConfigError(
                f"the local cloud has {host_cpus()} CPUs per node; {config.cpus:g} requested"
            )

    def run_instances(self, config: ProvisionConfig) -> ProvisionRecord:
        existing = self._nodes(config.cluster_name)
        resumed = []
        for node in existing:
            if node["status"] == InstanceStatus.STOPPED and config.resume_stopped:
                node["status"] = InstanceStatus.RUNNING
                self._write(node)
                resumed.append(node["instance_id"])
        have = {node["index"] for node in existing}
        created = []
        for index in range(config.num_nodes):
            if index in have:
                continue
            instance_id = f"{config.cluster_name}-{'head' if index == 0 else f'worker{index}'}"
            home = self._cluster_dir(config.cluster_name) / instance_id
            home.mkdir(parents=True, exist_ok=True)
            node = {
                "instance_id": instance_id,
                "index": index,
                "home": str(home),
                "ip": _allocate_ip(home),
                "status": InstanceStatus.RUNNING,
            }
            self._write(node)
            created.append(instance_id)
        return ProvisionRecord(
            cloud=self.name,
            cluster_name=config.cluster_name,
            region=REGION,
            head_instance_id=f"{config.cluster_name}-head",
            created_instance_ids=created,
            resumed_instance_ids=resumed,
        )

    def check_instances(self, region: str, cluster_name: str, state: InstanceStatus) -> StateCheck:
        # Local state changes are immediate: a node is in the state we last wrote.
        statuses = self.query_instances(region, cluster_name)
        wrong = {i: s for i, s in statuses.items() if s != state}
        if wrong:
            raise InvalidConfigError(f"local nodes not {state}: {wrong}")
        return StateCheck(done=True, seen=", ".join(f"{i}={s}" for i, s in statuses.items()))

    def query_instances(self, region: str, cluster_name: str) -> dict[str, InstanceStatus]:
        return {n["instance_id"]: InstanceStatus(n["status"]) for n in self._nodes(cluster_name)}

    def get_cluster_info(self, region: str, cluster_name: str) -> ClusterInfo:
        nodes = [
            NodeInfo(
                instance_id=n["instance_id"],
                internal_ip=n["ip"],
                is_head=n["index"] == 0,
                runner="local",
                home=n["home"],
                python=sys.executable,
                cpus=host_cpus(),
                memory_gb=round(host_memory_gb(), 1),
            )
            for n in self._nodes(cluster_name)
            if n["status"] == InstanceStatus.RUNNING
        ]
        return ClusterInfo(cloud=self.name, region=REGION, nodes=nodes)

    def check_operations(self, region: str, cluster_name: str,
                         operations: list[Operation]) -> StateCheck:
        """Local calls finish before they return: there is never anything to wait for."""
        return StateCheck(done=True)

    def stop_instances(self, region: str, cluster_name: str, worker_only: bool = False
                       ) -> list[Operation]:
        for node in self._nodes(cluster_name):
            if worker_only and node["index"] == 0:
                continue
            kill_marked(node["home"])
            node["status"] = InstanceStatus.STOPPED
            self._write(node)
        return []

    def terminate_instances(
        self, region: str, cluster_name: str, worker_only: bool = False
    ) -> list[Operation]:
        for node in self._nodes(cluster_name):
            if worker_only and node["index"] == 0:
                continue
            kill_marked(node["home"])
            shutil.rmtree(local_ray_temp_dir(node["home"]), ignore_errors=True)
            shutil.rmtree(node["home"], ignore_errors=True)
        cluster_dir = self._cluster_dir(cluster_name)
        if cluster_dir.exists() and not any(cluster_dir.iterdir()):
            cluster_dir.rmdir()
        return []

    def credentials_ok(self) -> tuple[bool, str]:
        return True, "no account needed"

    def open_ports(self, region: str, cluster_name: str, ports: list[str]
                   ) -> list[Operation]:
        """Loopback addresses need no firewall rules."""
        return []

    def cleanup_ports(self, region: str, cluster_name: str) -> list[Operation]:
        """Nothing was opened."""
        return []
