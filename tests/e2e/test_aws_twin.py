"""A twin of a real AWS launch: ``orch launch --cloud aws`` against moto's EC2, with every
instance moto runs given a body (tests/fakes/twin_hosts.py: a network namespace at the
instance's private IP running sshd as the image's login user).

The worker provisions in moto (through the fault front, which answers EC2's ClientToken
idempotency), reaches the nodes at their private IPs over SSH with paramiko, installs the
runtime (a venv over the image's Ray, plus the wheel of this orch), starts Ray head then
worker across the namespaces, and runs a 2-node job; ``orch down`` terminates the
instances, and the machines go with them.

Runs as root on Linux with iproute2, util-linux and openssh-server; skipped elsewhere.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from orch.names import ID_ENV, control_plane_hash, name_on_cloud
from orch.runtime.install import RECORD_FILE, VENV_DIR
from tests.clouds.aws.conftest import cluster_instances, front, moto_url  # noqa: F401
from tests.e2e.conftest import Orch, wait_for
from tests.fakes.ec2_fault_front import EC2FaultFront
from tests.fakes.twin_hosts import VPC_NETWORK, Image, TwinWatcher, unavailable_reason

UNAVAILABLE = unavailable_reason()
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")]

REGION = "us-east-1"
CLUSTER = "twin"
PLANE_ID = "twin-test-plane"  # ORCH_CONTROL_PLANE_ID of the test's control plane
ON_CLOUD = name_on_cloud(CLUSTER, control_plane_hash(Path("/nonexistent"), "", {ID_ENV: PLANE_ID}))
# Each rank prints the address its own machine has (not what orch told it).
TASK = 'echo "rank $ORCH_NODE_RANK of $ORCH_NUM_NODES at $(hostname -I | cut -d" " -f1)"'


@pytest.fixture
def ec2(moto_url: str) -> Any:  # noqa: F811 - the fixture imported above
    """EC2 straight from moto: the watcher's view and the ground truth."""
    return boto3.session.Session().client(
        "ec2", region_name=REGION, endpoint_url=moto_url,
        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture
def twin(ec2: Any, tmp_path: Path) -> Iterator[TwinWatcher]:
    image = Image.for_other_users()
    assert image is not None  # or the module would have been skipped
    with TwinWatcher(ec2, ON_CLOUD, tmp_path / "machines", image) as watcher:
        yield watcher


@pytest.fixture
def orch_aws(front: EC2FaultFront, twin: TwinWatcher,  # noqa: F811
             tmp_path: Path) -> Iterator[Orch]:
    yield from twin_control_plane(front, tmp_path, cleanup=[CLUSTER])


def twin_control_plane(aws_front: EC2FaultFront, tmp_path: Path, cleanup: list[str],
                       **env: str) -> Iterator[Orch]:
    """A control plane of its own whose worker sees AWS at the front (and ``env``), with
    fake credentials, and reaches nodes at their private IPs; ``cleanup``: the clusters
    torn down at the end."""
    aws_front.reset()
    cli = Orch(tmp_path / "orch-home")
    for name in [n for n in cli.env if n.startswith("AWS_")]:
        del cli.env[name]
    cli.env.update({
        "AWS_ENDPOINT_URL": aws_front.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "ORCH_SSH_USE_INTERNAL_IPS": "1",
        ID_ENV: PLANE_ID,
        **env,
    })
    cli("server", "start")
    try:
        yield cli
    finally:
        for cluster in cleanup:
            cli("down", "-y", cluster, check=False)
        cli("server", "stop", check=False)


def head_first(instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def kind(instance: dict[str, Any]) -> str:
        return next(t["Value"] for t in instance["Tags"] if t["Key"] == "orch-node")

    return sorted(instances, key=lambda i: kind(i) != "head")


def machines(twin: TwinWatcher) -> list[str]:
    """The twin's instance namespaces that exist (the switch's aside)."""
    return [name for name in twin.namespaces() if name != twin.switch.netns]


def test_launch_on_aws_runs_a_job_on_twin_machines_and_down_terminates_them(
    orch_aws: Orch, twin: TwinWatcher, ec2: Any
) -> None:
    launched = orch_aws("launch", "-c", CLUSTER, "--cloud", "aws", "--region", REGION,
                        "--num-nodes", "2", TASK, timeout=600)

    instances = head_first(cluster_instances(ec2, ON_CLOUD, ("running",)))
    assert cluster_instances(ec2, CLUSTER) == []  # the cloud sees the name on cloud only
    ips = [i["PrivateIpAddress"] for i in instances]
    assert len(ips) == 2 and all(ipaddress.ip_address(ip) in VPC_NETWORK for ip in ips)
    for rank, ip in enumerate(ips):
        assert f"rank {rank} of 2 at {ip}" in launched.stdout, launched.stdout
    assert sorted(twin.hosts) == sorted(i["InstanceId"] for i in instances)
    for host in twin.hosts.values():
        # The image's Ray was reused: the venv holds orch's wheel and no Ray of its own.
        record = json.loads((host.home / RECORD_FILE).read_text())
        assert record["ray"] == importlib.metadata.version("ray")
        assert record["orch"].startswith(importlib.metadata.version("orch") + "+")
        site_packages = next((host.home / VENV_DIR / "lib").glob("python*/site-packages"))
        assert list(site_packages.glob("orch-*.dist-info"))
        assert not list(site_packages.glob("ray-*.dist-info"))
    status = next(c for c in orch_aws.json("status") if c["name"] == CLUSTER)
    assert (status["status"], status["cloud"], status["num_nodes"]) == ("UP", "aws", 2)

    orch_aws("down", "-y", CLUSTER)

    gone = cluster_instances(ec2, ON_CLOUD, ("terminated",))
    assert sorted(i["InstanceId"] for i in gone) == sorted(i["InstanceId"] for i in instances)
    wait_for(lambda: not twin.hosts and not machines(twin), timeout=30,
             what="the twin machines to power off")
    assert twin.errors == []
