"""The simulated cloud, for benchmarks only: orch's provider interface over a model of a
cloud, with simulated heads reached over real SSH.

Not a cloud a user can pick: it is in no catalog, the optimizer never plans it, ``orch
check`` does not list it and ``allowed_clouds`` cannot name it. ``get_provider("simulated")``
knows it only in a process whose environment has ``ORCH_SIMULATED_CLOUD`` (the directory
of one simulated cloud), which only the benchmarks set (``bench/sim_cloud.py``) for the
worker they start; that worker also plans launches on it (``activities/simulated.py``).

The model (``config.json`` in that directory, :class:`SimConfig`):

* every provider call sleeps its configured latency first (``latency_s``, per method);
* an instance is PENDING for ``boot_s`` after ``run_instances`` (plus its own share of
  ``boot_spread_s``, see :meth:`SimConfig.boot_of`), then RUNNING;
* each zone has a capacity (instances at once; past it, or at 0, ``run_instances`` fails
  with EC2's ``InsufficientInstanceCapacity``), each region a quota (instances at once;
  past it, ``check_quota`` and ``run_instances`` fail with ``VcpuLimitExceeded``);
* :meth:`SimulatedProvider.preempt` removes a cluster's instances as a spot reclaim does.

The state (instances, the addresses handed out, and a log of every call with its latency,
from which the benchmarks compute how much of a launch was the cloud's time) is one SQLite
file, shared by every process and thread that uses the cloud.

Nodes. Every node gets a loopback address of its own (in 127.64.0.0/10) and a home
directory ``heads/<address>/``; one sshd on the bench's port serves them all, choosing the
home by the address the client connected to (``orch.clouds.simulated_node``), so each node
is a separate SSH connection, as on a real cloud, and a command on a head runs orch's real
node-side CLI in that home.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from orch.clouds.base import (
    ClusterInfo,
    InstanceStatus,
    NodeInfo,
    Operation,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.clouds.errors import CapacityError, InvalidConfigError, QuotaError

SIMULATED = "simulated"
ENV = "ORCH_SIMULATED_CLOUD"
UNLIMITED = 1_000_000

_SCHEMA = """
create table if not exists instances (
  id text primary key, cluster text, region text, zone text, idx integer,
  status text, ip text, ready_at real);
create table if not exists addresses (n integer primary key autoincrement, instance text);
create table if not exists calls (at real, call text, cluster text, latency real);
"""


class SimZone(BaseModel):
    capacity: int = UNLIMITED  # instances at once


class SimRegion(BaseModel):
    zones: dict[str, SimZone]
    quota: int = UNLIMITED  # instances at once, over all zones


class SimConfig(BaseModel):
    """One simulated cloud (``config.json`` in its directory)."""

    regions: dict[str, SimRegion]  # in the order launches try them
    latency_s: dict[str, float] = Field(default_factory=dict)  # per provider method
    boot_s: float = 0.0
    boot_spread_s: float = 0.0
    cpus: float = 4.0
    memory_gb: float = 16.0
    price_per_node: float = 0.1
    ssh_port: int
    ssh_user: str
    ssh_key_path: str
    python: str  # the heads' interpreter (simulated_node.write_head_files)

    def latency(self, call: str) -> float:
        return self.latency_s.get(call, self.latency_s.get("default", 0.0))

    def boot_of(self, instance: str) -> float:
        """How long ``instance`` boots: ``boot_s`` plus a share of ``boot_spread_s`` fixed
        by its name. With one boot for every instance, every launch's describes fall at
        the same instants of it, and a benchmark measures the one oversleep that phase
        gives, lucky or not; a spread as wide as the gap between polls samples them all."""
        share = zlib.crc32(instance.encode()) % 1000 / 1000
        return self.boot_s + self.boot_spread_s * share


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def instance_name(cluster_name: str, index: int) -> str:
    """The simulated instance ``index`` of a cluster (its head is 0)."""
    return f"{cluster_name}-{index}"


def address(n: int) -> str:
    """The ``n``-th head address (n >= 1), in 127.64.0.0/10, far from the local cloud's."""
    return f"127.{64 + n // 65536}.{n // 256 % 256}.{n % 256}"


class SimulatedProvider:
    name = SIMULATED

    def __init__(self, root: Path | None = None) -> None:
        given = root or os.environ.get(ENV)
        if not given:
            raise InvalidConfigError(f"the simulated cloud needs ${ENV} (benchmarks only)")
        self.root = Path(given)
        self.config = SimConfig.model_validate_json((self.root / "config.json").read_text())

    # -- state --------------------------------------------------------------------------
    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.root / "state.db", timeout=60, isolation_level=None)
        try:
            db.execute("pragma journal_mode=wal")
            db.executescript(_SCHEMA)
            db.execute("begin immediate")
            yield db
            db.execute("commit")
        except BaseException:
            if db.in_transaction:
                db.execute("rollback")
            raise
        finally:
            db.close()

    def _call(self, call: str, cluster: str) -> None:
        """Spend the call's latency, and log it."""
        latency = self.config.latency(call)
        if latency:
            time.sleep(latency)
        with self._db() as db:
            db.execute("insert into calls values (?, ?, ?, ?)",
                       (time.time(), call, cluster, latency))

    def node_home(self, ip: str) -> Path:
        return self.root / "heads" / ip

    def _instances(self, db: sqlite3.Connection, region: str, cluster: str) -> list[tuple]:
        return db.execute("select id, idx, status, ip, ready_at, zone from instances "
                          "where region = ? and cluster = ? order by idx",
                          (region, cluster)).fetchall()

    @staticmethod
    def _status(status: str, ready_at: float) -> InstanceStatus:
        if status == InstanceStatus.PENDING and time.time() >= ready_at:
            return InstanceStatus.RUNNING
        return InstanceStatus(status)

    def _check_room(self, db: sqlite3.Connection, config: ProvisionConfig, adding: int) -> None:
        region = self.config.regions.get(config.region)
        if region is None:
            raise InvalidConfigError(f"no simulated region {config.region}")
        (in_region,) = db.execute("select count(*) from instances where region = ?",
                                  (config.region,)).fetchone()
        if in_region + adding > region.quota:
            raise QuotaError(f"quota of {region.quota} instances in {config.region} reached",
                             code="VcpuLimitExceeded")
        zone = region.zones.get(config.zone or "")
        if config.zone is not None and zone is None:
            raise InvalidConfigError(f"no simulated zone {config.zone}")
        (in_zone,) = db.execute("select count(*) from instances where zone = ?",
                                (config.zone,)).fetchone()
        if zone is not None and in_zone + adding > zone.capacity:
            raise CapacityError(f"no capacity left in {config.zone}",
                                code="InsufficientInstanceCapacity")

    # -- the provider interface ------------------------------------------------------------
    def check_quota(self, config: ProvisionConfig) -> None:
        self._call("check_quota", config.cluster_name)
        with self._db() as db:
            have = len(self._instances(db, config.region, config.cluster_name))
            self._check_room(db, config.model_copy(update={"zone": None}),
                             max(0, config.num_nodes - have))

    def run_instances(self, config: ProvisionConfig) -> ProvisionRecord:
        self._call("run_instances", config.cluster_name)
        with self._db() as db:
            existing = self._instances(db, config.region, config.cluster_name)
            have = {row[1] for row in existing}
            missing = [i for i in range(config.num_nodes) if i not in have]
            self._check_room(db, config, len(missing))
            created = []
            for index in missing:
                instance = instance_name(config.cluster_name, index)
                cursor = db.execute("insert into addresses (instance) values (?)", (instance,))
                ip = address(int(cursor.lastrowid or 0))
                self.node_home(ip).mkdir(parents=True, exist_ok=True)
                db.execute("insert into instances values (?, ?, ?, ?, ?, ?, ?, ?)",
                           (instance, config.cluster_name, config.region, config.zone, index,
                            InstanceStatus.PENDING, ip,
                            time.time() + self.config.boot_of(instance)))
                created.append(instance)
        return ProvisionRecord(cloud=self.name, cluster_name=config.cluster_name,
                               region=config.region, zone=config.zone,
                               head_instance_id=instance_name(config.cluster_name, 0),
                               created_instance_ids=created)

    def query_instances(self, region: str, cluster_name: str) -> dict[str, InstanceStatus]:
        self._call("query_instances", cluster_name)
        with self._db() as db:
            rows = self._instances(db, region, cluster_name)
        return {row[0]: self._status(row[2], row[4]) for row in rows}

    def check_instances(self, region: str, cluster_name: str, state: InstanceStatus) -> StateCheck:
        self._call("check_instances", cluster_name)
        with self._db() as db:
            rows = self._instances(db, region, cluster_name)
        seen = {row[0]: self._status(row[2], row[4]) for row in rows}
        done = bool(seen) and all(s == state for s in seen.values())
        return StateCheck(done=done, seen=", ".join(f"{i}={s}" for i, s in seen.items()))

    def get_cluster_info(self, region: str, cluster_name: str) -> ClusterInfo:
        self._call("get_cluster_info", cluster_name)
        with self._db() as db:
            rows = self._instances(db, region, cluster_name)
        nodes = [NodeInfo(
            instance_id=row[0], internal_ip=row[3], is_head=row[1] == 0,
            ssh_user=self.config.ssh_user, ssh_port=self.config.ssh_port,
            ssh_key_path=self.config.ssh_key_path, python=self.config.python,
            cpus=self.config.cpus, memory_gb=self.config.memory_gb,
        ) for row in rows if self._status(row[2], row[4]) == InstanceStatus.RUNNING]
        zone = rows[0][5] if rows else None
        return ClusterInfo(cloud=self.name, region=region, zone=zone, nodes=nodes)

    def check_operations(self, region: str, cluster_name: str,
                         operations: list[Operation]) -> StateCheck:
        """Calls change the instances' rows before they return: no operation outlives one
        (the latency is in the call and in the boot, as EC2's)."""
        return StateCheck(done=True)

    def stop_instances(self, region: str, cluster_name: str, worker_only: bool = False
                       ) -> list[Operation]:
        self._call("stop_instances", cluster_name)
        with self._db() as db:
            db.execute("update instances set status = ? where region = ? and cluster = ? "
                       "and idx >= ?", (InstanceStatus.STOPPED, region, cluster_name,
                                        1 if worker_only else 0))
        return []

    def terminate_instances(self, region: str, cluster_name: str,
                            worker_only: bool = False) -> list[Operation]:
        self._call("terminate_instances", cluster_name)
        self._remove(region, cluster_name, 1 if worker_only else 0)
        return []

    def preempt(self, region: str, cluster_name: str) -> None:
        """The cloud takes the cluster's instances back (a spot reclaim)."""
        self._remove(region, cluster_name, 0)

    def _remove(self, region: str, cluster_name: str, from_index: int) -> None:
        with self._db() as db:
            rows = self._instances(db, region, cluster_name)
            db.execute("delete from instances where region = ? and cluster = ? and idx >= ?",
                       (region, cluster_name, from_index))
        for row in rows:
            if row[1] >= from_index:
                shutil.rmtree(self.node_home(row[3]), ignore_errors=True)

    def open_ports(self, region: str, cluster_name: str, ports: list[str]
                   ) -> list[Operation]:
        """No firewall is simulated."""
        return []

    def cleanup_ports(self, region: str, cluster_name: str) -> list[Operation]:
        self._call("cleanup_ports", cluster_name)
        return []

    def credentials_ok(self) -> tuple[bool, str]:
        return True, "simulated"

    # -- for the benchmarks ---------------------------------------------------------------
    def clusters(self) -> list[tuple[str, str, str]]:
        """(cluster, region, head address) of every cluster that has instances."""
        with self._db() as db:
            return db.execute("select cluster, region, ip from instances where idx = 0"
                              ).fetchall()

    def calls(self) -> list[tuple[float, str, str, float]]:
        """(when it returned, method, cluster, latency) of every call so far, in order."""
        with self._db() as db:
            return db.execute("select at, call, cluster, latency from calls order by at"
                              ).fetchall()
