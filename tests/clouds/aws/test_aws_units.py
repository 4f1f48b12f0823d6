"""The AWS provider's pure parts: quota codes, client tokens, node indices, ports, images."""

from __future__ import annotations

from typing import Any

import pytest

from orch.clouds.aws_images import image_preference, ssh_user
from orch.clouds.aws_instances import client_token, missing_indices, node_index
from orch.clouds.aws_network import parse_ports
from orch.clouds.aws_quota import vcpu_quota_code
from orch.clouds.errors import InvalidConfigError


@pytest.mark.parametrize(("instance_type", "spot", "code"), [
    ("m5.large", False, "L-1216C47A"),
    ("m5.large", True, "L-34B43A08"),
    ("c7g.xlarge", False, "L-1216C47A"),
    ("im4gn.large", False, "L-1216C47A"),
    ("g4dn.xlarge", False, "L-DB2E81BA"),
    ("vt1.3xlarge", True, "L-3819A6DF"),
    ("p4d.24xlarge", False, "L-417A185B"),
    ("inf2.xlarge", False, "L-1945791B"),
    ("trn1.2xlarge", True, "L-6B0D517C"),
    ("u-6tb1.metal", False, "L-43DA4232"),
    ("u-6tb1.metal", True, None),
    ("mac1.metal", False, None),
])
def test_vcpu_quota_codes(instance_type: str, spot: bool, code: str | None) -> None:
    assert vcpu_quota_code(instance_type, spot) == code


def test_client_tokens_are_stable_per_node_and_attempt() -> None:
    token = client_token("attempt-1", "c", "us-east-1", 0)
    assert token is not None and len(token) <= 64 and token.isascii()
    assert token == client_token("attempt-1", "c", "us-east-1", 0)
    others = {client_token("attempt-2", "c", "us-east-1", 0),
              client_token("attempt-1", "d", "us-east-1", 0),
              client_token("attempt-1", "c", "us-west-2", 0),
              client_token("attempt-1", "c", "us-east-1", 1)}
    assert token not in others and len(others) == 4
    assert client_token("", "c", "us-east-1", 0) is None


def _instance(kind: str, index: str | None = None) -> dict[str, Any]:
    tags = [{"Key": "orch-node", "Value": kind}]
    if index is not None:
        tags.append({"Key": "orch-node-index", "Value": index})
    return {"InstanceId": f"i-{kind}{index}", "Tags": tags}


def test_node_indices() -> None:
    assert node_index(_instance("head")) == 0
    assert node_index(_instance("worker", "3")) == 3
    assert node_index(_instance("worker")) is None
    assert node_index(_instance("worker", "x")) is None


@pytest.mark.parametrize(("existing", "num_nodes", "missing"), [
    ([], 3, [0, 1, 2]),
    ([_instance("head")], 3, [1, 2]),
    ([_instance("worker", "2")], 3, [0, 1]),
    ([_instance("head"), _instance("worker", "1")], 2, []),
    # A worker without an index still counts: only one more node is needed.
    ([_instance("head"), _instance("worker")], 3, [1]),
])
def test_missing_indices(existing: list[dict[str, Any]], num_nodes: int,
                         missing: list[int]) -> None:
    assert missing_indices(existing, num_nodes) == missing


def test_parse_ports() -> None:
    assert parse_ports(["22", " 8000-8010 "]) == [(22, 22), (8000, 8010)]
    for bad in ("0", "10-5", "70000", "http"):
        with pytest.raises(InvalidConfigError):
            parse_ports([bad])


def test_ssh_user_follows_the_image() -> None:
    assert ssh_user(None) == "ubuntu"
    assert ssh_user({"Name": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-1"}) == "ubuntu"
    assert ssh_user({"Name": "amzn2-ami-hvm-2.0.20180810-x86_64-gp2"}) == "ec2-user"
    assert ssh_user({"Name": "al2023-ami-2023.1-x86_64"}) == "ec2-user"
    assert ssh_user({"Name": "debian-12-amd64-20240717"}) == "admin"
    assert ssh_user({"Name": "anything", "Tags": [{"Key": "orch-ssh-user", "Value": "me"}]}) == "me"


def test_default_imageimage_preference_is_lts_then_release_then_build() -> None:
    names = {
        "noble": "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20240801",
        "noble_old": "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20240101",
        "oracular": "ubuntu/images/hvm-ssd-gp3/ubuntu-oracular-24.10-amd64-server-20241009",
        "jammy": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20240801",
    }
    images = [{"Name": name, "CreationDate": name[-8:]} for name in names.values()]
    assert max(images, key=image_preference)["Name"] == names["noble"]
