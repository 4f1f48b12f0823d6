"""TeardownWorkflow with its real activities on the local cloud: whatever state a cluster
is in (up, stopped, recorded without instances, half provisioned, never existed), the
teardown ends clean and never raises."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orch.clouds.base import ClusterInfo, NodeInfo, ProvisionConfig
from orch.clouds.local import LocalProvider
from orch.records import Placement, TeardownInput, TeardownResult
from workers.registry import PLAIN_ACTIVITIES, WORKFLOWS
from workflows.teardown import TeardownWorkflow

LOCAL = Placement(cloud="local", region="local")


@pytest_asyncio.fixture
async def teardown(time_skipping_env: WorkflowEnvironment, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> AsyncIterator:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path))
    task_queue = f"local-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(max_workers=8) as executor:
        async with Worker(time_skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS,
                          activities=PLAIN_ACTIVITIES, activity_executor=executor):

            async def run(request: TeardownInput) -> TeardownResult:
                result: TeardownResult = await time_skipping_env.client.execute_workflow(
                    TeardownWorkflow.run, request, id=f"teardown-{uuid.uuid4().hex[:6]}",
                    task_queue=task_queue)
                return result

            yield run


def provision(name: str, nodes: int) -> ClusterInfo:
    provider = LocalProvider()
    provider.run_instances(ProvisionConfig(cluster_name=name, num_nodes=nodes, region="local"))
    return provider.get_cluster_info("local", name)


async def test_an_up_cluster(teardown) -> None:  # type: ignore[no-untyped-def]
    info = provision("up", 2)
    result = await teardown(TeardownInput(cluster_name="up", placement=LOCAL, info=info))
    assert "2 instance(s) terminated" in result.message
    assert LocalProvider().query_instances("local", "up") == {}
    assert not any(Path(n.home).exists() for n in info.nodes if n.home)


async def test_a_stopped_cluster_is_terminated(teardown) -> None:  # type: ignore[no-untyped-def]
    provision("stopped", 2)
    LocalProvider().stop_instances("local", "stopped")
    result = await teardown(TeardownInput(cluster_name="stopped", placement=LOCAL))
    assert "2 instance(s) terminated" in result.message
    assert LocalProvider().query_instances("local", "stopped") == {}


async def test_a_stop_leaves_stopped_instances(teardown) -> None:  # type: ignore[no-untyped-def]
    info = provision("pause", 2)
    result = await teardown(TeardownInput(cluster_name="pause", placement=LOCAL, info=info,
                                          terminate=False))
    assert "stopped" in result.message
    assert set(LocalProvider().query_instances("local", "pause").values()) == {"STOPPED"}


async def test_recorded_but_without_instances(teardown) -> None:  # type: ignore[no-untyped-def]
    ghost = NodeInfo(instance_id="gone-head", internal_ip="127.0.9.9", is_head=True,
                     runner="local", home="/nonexistent/gone-head")
    result = await teardown(TeardownInput(
        cluster_name="gone", placement=LOCAL,
        info=ClusterInfo(cloud="local", region="local", nodes=[ghost])))
    assert "had no instances" in result.message
    assert result.warnings  # ray stop could not reach the head, and said so


async def test_half_provisioned_head_only(teardown) -> None:  # type: ignore[no-untyped-def]
    provision("half", 1)  # the workers never came; the record never got the nodes
    result = await teardown(TeardownInput(cluster_name="half", placement=LOCAL, info=None))
    assert "1 instance(s) terminated" in result.message
    assert LocalProvider().query_instances("local", "half") == {}


async def test_never_existed(teardown) -> None:  # type: ignore[no-untyped-def]
    result = await teardown(TeardownInput(cluster_name="never", placement=None))
    assert "never provisioned" in result.message


async def test_twice_is_the_same_as_once(teardown) -> None:  # type: ignore[no-untyped-def]
    info = provision("twice", 1)
    request = TeardownInput(cluster_name="twice", placement=LOCAL, info=info)
    await teardown(request)
    again = await teardown(request)
    assert "had no instances" in again.message
