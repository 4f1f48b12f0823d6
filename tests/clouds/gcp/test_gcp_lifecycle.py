"""Waiting, querying, stop/start (resume), terminate, and finding a cluster by labels."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orch.clouds.base import InstanceStatus, ProvisionConfig
from orch.clouds.errors import BlockScope, CapacityError, TransientError
from orch.clouds.gcp import GCPProvider
from tests.clouds.gcp.conftest import REGION, ZONE
from tests.clouds.waits import launch, wait_instances
from tests.fakes.gcp_compute_fake import GCPComputeFake

Config = Callable[..., ProvisionConfig]
S = InstanceStatus


def test_query_follows_provisioning_to_running(
    provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=2))

    seen = [provider.query_instances(REGION, "c1") for _ in range(3)]

    assert seen[0] == {"c1-head": S.PENDING, "c1-worker-1": S.PENDING}  # PROVISIONING
    assert seen[1] == {"c1-head": S.PENDING, "c1-worker-1": S.PENDING}  # STAGING
    assert seen[2] == {"c1-head": S.RUNNING, "c1-worker-1": S.RUNNING}


def test_wait_then_cluster_info_head_first_with_addresses(
    provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=3))

    wait_instances(provider, REGION, "c1", S.RUNNING)
    info = provider.get_cluster_info(REGION, "c1")

    assert (info.cloud, info.zone, info.instance_type) == ("gcp", ZONE, "n2-standard-8")
    assert [n.instance_id for n in info.nodes] == ["c1-head", "c1-worker-1", "c1-worker-2"]
    assert info.head is not None and info.head.instance_id == "c1-head"
    for node in info.nodes:
        assert node.internal_ip.startswith("10.128.")
        assert node.external_ip and node.external_ip.startswith("203.0.113.")
        assert (node.cpus, node.memory_gb, node.runner) == (8.0, 32.0, "ssh")
    assert len({n.internal_ip for n in info.nodes}) == 3


def test_cluster_info_reports_gpus_of_the_machine_type(
    provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1, instance_type="a2-highgpu-1g"))
    wait_instances(provider, REGION, "c1", S.RUNNING)

    (node,) = provider.get_cluster_info(REGION, "c1").nodes
    assert node.gpus == {"nvidia-tesla-a100": 1}


def test_wait_is_bounded(provider: GCPProvider, config: Config) -> None:
    provider.run_instances(config(num_nodes=1))  # STAGING for a poll, then RUNNING

    with pytest.raises(TransientError) as raised:
        wait_instances(provider, REGION, "c1", S.RUNNING, timeout_s=0)
    assert raised.value.code == "WaitTimeout"
    assert raised.value.message.endswith("last seen c1-head=PENDING")  # STAGING, as orch reads it


def test_wait_for_running_fails_when_spot_is_preempted(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=2, use_spot=True))
    fake.preempt(ZONE, "c1-worker-1")

    with pytest.raises(CapacityError) as raised:
        wait_instances(provider, REGION, "c1", S.RUNNING)
    assert raised.value.scope == BlockScope.ZONE
    assert "c1-worker-1" in raised.value.message


def test_wait_for_running_without_instances_fails(provider: GCPProvider) -> None:
    with pytest.raises(CapacityError):
        wait_instances(provider, REGION, "nothing-here", S.RUNNING)


def test_stop_then_relaunch_resumes_the_stopped_instances(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=2))
    wait_instances(provider, REGION, "c1", S.RUNNING)
    ids = {name: i["id"] for name, i in fake.instances().items()}

    provider.stop_instances(REGION, "c1")
    assert set(provider.query_instances(REGION, "c1").values()) == {S.STOPPING}
    wait_instances(provider, REGION, "c1", S.STOPPED)
    assert {i["status"] for i in fake.instances().values()} == {"TERMINATED"}
    assert provider.get_cluster_info(REGION, "c1").nodes == []

    record = provider.run_instances(config(num_nodes=2, idempotency_token="attempt-2"))

    assert record.resumed_instance_ids == ["c1-head", "c1-worker-1"]
    assert record.created_instance_ids == []
    assert {name: i["id"] for name, i in fake.instances().items()} == ids
    wait_instances(provider, REGION, "c1", S.RUNNING)
    assert len(fake.calls("instances.start")) == 2


def test_resume_waits_for_instances_still_stopping(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    """Google refuses to start a STOPPING instance (400 resourceNotReady): run_instances
    says it waits, starts nothing, and the next call (the waiter's) starts it."""
    provider.run_instances(config(num_nodes=1))
    provider.stop_instances(REGION, "c1")

    first = provider.run_instances(config(num_nodes=1))
    assert first.waiting_for == "c1-head=STOPPING" and first.operations == []
    record = launch(provider, config(num_nodes=1))

    assert record.resumed_instance_ids == ["c1-head"]
    assert fake.calls("instances.start") == [("instances.start", ZONE)]
    wait_instances(provider, REGION, "c1", S.RUNNING, operations=record.operations)


def test_starting_a_stopping_instance_is_a_zone_capacity_error(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1))
    provider.stop_instances(REGION, "c1")
    start = provider.api.compute().instances().start(
        project=fake.project, zone=ZONE, instance="c1-head")

    with pytest.raises(CapacityError) as raised:
        provider.api.get(start)
    assert raised.value.code == "resourceNotReady"


def test_stop_workers_only(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=3))
    wait_instances(provider, REGION, "c1", S.RUNNING)

    provider.stop_instances(REGION, "c1", worker_only=True)

    statuses = provider.query_instances(REGION, "c1")
    assert statuses == {"c1-head": S.RUNNING, "c1-worker-1": S.STOPPING,
                        "c1-worker-2": S.STOPPING}


def test_terminate_deletes_every_instance_and_is_idempotent(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=3))

    provider.terminate_instances(REGION, "c1")
    # A retried terminate meets instances already being deleted, then none at all.
    provider.terminate_instances(REGION, "c1")
    provider.terminate_instances(REGION, "c1")

    assert provider.query_instances(REGION, "c1") == {}
    assert fake.instances() == {}


def test_terminate_tolerates_instances_deleted_meanwhile(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=2))
    fake.fail_http("instances.delete", 404, "notFound",
                   f"The resource 'projects/{fake.project}/zones/{ZONE}/instances/c1-head' "
                   "was not found")

    provider.terminate_instances(REGION, "c1")

    assert len(fake.calls("instances.delete")) == 2


def test_terminate_workers_only_keeps_the_head(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=3))

    provider.terminate_instances(REGION, "c1", worker_only=True)

    provider.query_instances(REGION, "c1")  # the deletes finish
    assert list(fake.instances()) == ["c1-head"]


def test_terminating_a_cluster_that_never_existed_succeeds(
    fake: GCPComputeFake, provider: GCPProvider
) -> None:
    provider.terminate_instances(REGION, "never-launched")
    provider.stop_instances(REGION, "never-launched")

    assert fake.calls("instances.delete") == fake.calls("instances.stop") == []


def test_label_filter_keeps_clusters_and_regions_apart(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(cluster_name="c1", num_nodes=2))
    provider.run_instances(config(cluster_name="c10", num_nodes=1))
    provider.run_instances(config(cluster_name="c1", region="us-east1", zone="us-east1-b",
                                  num_nodes=1))

    assert set(provider.query_instances(REGION, "c1")) == {"c1-head", "c1-worker-1"}
    assert set(provider.query_instances(REGION, "c10")) == {"c10-head"}
    assert set(provider.query_instances("us-east1", "c1")) == {"c1-head"}
    provider.terminate_instances(REGION, "c1")
    provider.query_instances(REGION, "c1")
    assert sorted(i["zone"].rsplit("/", 1)[-1] + "/" + n for n, i in fake.instances().items()) \
        == ["us-central1-a/c10-head", "us-east1-b/c1-head"]


def test_listing_follows_pages(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1, zone="us-central1-c"))
    fake.set_page_size(1)  # one zone per page: the instance is on page three of five
    before = len(fake.calls("instances.aggregatedList"))

    assert list(provider.query_instances(REGION, "c1")) == ["c1-head"]
    assert len(fake.calls("instances.aggregatedList")) - before == 5
