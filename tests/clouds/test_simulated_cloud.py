"""The benchmarks' simulated cloud (orch/clouds/simulated.py): the provider interface over
its model, and that only the benchmarks can reach it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orch.check import check_clouds
from orch.clouds import CLOUDS, get_provider
from orch.clouds.base import InstanceStatus, ProvisionConfig
from orch.clouds.errors import CapacityError, QuotaError
from orch.clouds.simulated import ENV, SimConfig, SimRegion, SimulatedProvider, SimZone


@pytest.fixture
def cloud(tmp_path: Path) -> SimulatedProvider:
    config = SimConfig(
        regions={"sim-0": SimRegion(zones={"sim-0a": SimZone(capacity=2),
                                           "sim-0b": SimZone(capacity=0)}, quota=3),
                 "sim-1": SimRegion(zones={"sim-1a": SimZone()})},
        latency_s={"run_instances": 0.3, "default": 0.0}, boot_s=0.5,
        ssh_port=2222, ssh_user="me", ssh_key_path="/k", python="/py")
    (tmp_path / "config.json").write_text(config.model_dump_json())
    return SimulatedProvider(tmp_path)


def provision(cloud: SimulatedProvider, name: str, zone: str, nodes: int = 1) -> None:
    cloud.run_instances(ProvisionConfig(cluster_name=name, num_nodes=nodes, region=zone[:-1],
                                        zone=zone))


def test_instances_boot_and_every_call_pays_its_latency(cloud: SimulatedProvider) -> None:
    started = time.monotonic()
    provision(cloud, "a", "sim-0a", nodes=2)
    assert time.monotonic() - started >= 0.3
    assert set(cloud.query_instances("sim-0", "a").values()) == {InstanceStatus.PENDING}
    assert not cloud.check_instances("sim-0", "a", InstanceStatus.RUNNING).done
    time.sleep(0.6)
    assert cloud.check_instances("sim-0", "a", InstanceStatus.RUNNING).done
    info = cloud.get_cluster_info("sim-0", "a")
    assert [n.is_head for n in info.nodes] == [True, False]
    assert len({n.internal_ip for n in info.nodes}) == 2  # each node its own address
    assert all(cloud.node_home(n.internal_ip).is_dir() for n in info.nodes)
    assert [(method, latency) for _, method, _, latency in cloud.calls()][:1] == [
        ("run_instances", 0.3)]


def test_boots_spread_over_their_window_each_instance_its_own(tmp_path: Path) -> None:
    config = SimConfig(regions={"sim-0": SimRegion(zones={"sim-0a": SimZone()})}, boot_s=0.2,
                       boot_spread_s=0.6, ssh_port=2222, ssh_user="me", ssh_key_path="/k",
                       python="/py")
    boots = [config.boot_of(f"l{i}-c{i:06x}-0") for i in range(200)]
    assert all(0.2 <= boot < 0.8 for boot in boots)
    assert min(boots) < 0.3 and max(boots) > 0.7  # the whole window, not one phase
    assert config.boot_of("l1-c000001-0") == boots[1]  # fixed by the name
    (tmp_path / "config.json").write_text(config.model_dump_json())
    cloud = SimulatedProvider(tmp_path)
    names = sorted((f"c{i}" for i in range(30)), key=lambda n: config.boot_of(f"{n}-0"))
    early, late = names[0], names[-1]  # booting in about 0.2 s, and in about 0.8 s
    for name in (early, late):
        provision(cloud, name, "sim-0a")
    time.sleep(config.boot_of(f"{early}-0") + 0.05)
    assert cloud.check_instances("sim-0", early, InstanceStatus.RUNNING).done
    assert not cloud.check_instances("sim-0", late, InstanceStatus.RUNNING).done


def test_capacity_per_zone_and_quota_per_region(cloud: SimulatedProvider) -> None:
    with pytest.raises(CapacityError) as refused:
        provision(cloud, "none", "sim-0b")
    assert refused.value.code == "InsufficientInstanceCapacity"
    provision(cloud, "a", "sim-0a", nodes=2)
    with pytest.raises(CapacityError):
        provision(cloud, "b", "sim-0a")
    provision(cloud, "a", "sim-0a", nodes=2)  # idempotent: nothing more to create
    with pytest.raises(QuotaError):
        cloud.check_quota(ProvisionConfig(cluster_name="c", num_nodes=2, region="sim-0"))
    provision(cloud, "c", "sim-1a", nodes=5)  # another region, no quota


def test_preemption_and_termination_remove_the_nodes(cloud: SimulatedProvider) -> None:
    provision(cloud, "a", "sim-0a")
    provision(cloud, "b", "sim-1a")
    home = cloud.node_home(cloud.clusters()[0][2])
    cloud.preempt("sim-0", "a")
    assert cloud.query_instances("sim-0", "a") == {} and not home.exists()
    cloud.terminate_instances("sim-1", "b")
    assert cloud.clusters() == []


def test_only_a_process_given_the_simulated_cloud_knows_it(
    cloud: SimulatedProvider, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert "simulated" not in CLOUDS
    with pytest.raises(ValueError, match="unknown cloud"):
        get_provider("simulated")
    assert "simulated" not in {c.cloud for c in check_clouds(allowed=())}  # none probed
    monkeypatch.setenv(ENV, str(cloud.root))
    assert isinstance(get_provider("simulated"), SimulatedProvider)
