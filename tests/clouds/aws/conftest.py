"""moto's server behind the fault front, and an AWSProvider that reaches it via env only."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from moto.server import ThreadedMotoServer

from orch.clouds.aws import AWSProvider
from orch.clouds.base import ProvisionConfig
from tests.fakes.ec2_fault_front import EC2FaultFront

REGION = "us-west-2"
ZONE_A, ZONE_B = f"{REGION}a", f"{REGION}b"
INSTANCE_TYPE = "m5.large"  # 2 vCPUs, 8 GiB


def new_public_key() -> str:
    """A real OpenSSH public key, as a user's ~/.ssh/id_ed25519.pub holds."""
    key = Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode() + " orch-test"


PUBLIC_KEY = new_public_key()


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def front(moto_url: str) -> Iterator[EC2FaultFront]:
    with EC2FaultFront(moto_url) as started:
        yield started


@pytest.fixture
def aws_env(front: EC2FaultFront, monkeypatch: pytest.MonkeyPatch,
            tmp_path: Path) -> Iterator[EC2FaultFront]:
    """Fake credentials and the front as the endpoint, through boto3's usual variables
    only; no config file, no instance metadata (that would leave loopback)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", front.url)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # one botocore retry: quick, still exercised
    front.reset()
    yield front
    front.reset()


@pytest.fixture
def provider(aws_env: EC2FaultFront) -> AWSProvider:
    return AWSProvider(poll_interval=0.01, wait_timeout=10)


@pytest.fixture
def cluster_name() -> str:
    """moto is shared by the session: every test has its own cluster."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def moto_ec2(moto_url: str) -> Any:
    """EC2 straight from moto, past the front: the ground truth for assertions."""
    return boto3.session.Session().client(
        "ec2", region_name=REGION, endpoint_url=moto_url,
        aws_access_key_id="testing", aws_secret_access_key="testing")


def make_config(cluster_name: str, **overrides: Any) -> ProvisionConfig:
    fields: dict[str, Any] = {
        "cluster_name": cluster_name, "num_nodes": 2, "region": REGION, "zone": ZONE_A,
        "instance_type": INSTANCE_TYPE, "idempotency_token": f"attempt-{uuid.uuid4().hex}",
        "ssh_public_key": PUBLIC_KEY, "disk_size": 64,
    }
    return ProvisionConfig(**{**fields, **overrides})


def cluster_instances(moto_ec2: Any, cluster_name: str,
                      states: tuple[str, ...] = ("pending", "running", "stopping", "stopped",
                                                 "shutting-down")) -> list[dict[str, Any]]:
    reservations = moto_ec2.describe_instances(Filters=[
        {"Name": "tag:orch-cluster", "Values": [cluster_name]},
        {"Name": "instance-state-name", "Values": list(states)},
    ])["Reservations"]
    return [i for r in reservations for i in r["Instances"]]
