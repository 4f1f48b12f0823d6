"""One firewall rule per cluster, targeting the cluster's network tag."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orch.clouds.base import ProvisionConfig
from orch.clouds.errors import AuthError
from orch.clouds.gcp import GCPProvider
from tests.clouds.gcp.conftest import REGION
from tests.clouds.waits import settle
from tests.fakes.gcp_compute_fake import GCPComputeFake

Config = Callable[..., ProvisionConfig]


def test_firewall_lifecycle(fake: GCPComputeFake, provider: GCPProvider,
                            config: Config) -> None:
    provider.run_instances(config(num_nodes=1, ports=["8080"]))
    (rule,) = fake.firewalls().values()
    assert rule["name"] == "orch-c1-ports"
    assert rule["targetTags"] == fake.instances()["c1-head"]["tags"]["items"] == ["orch-c1"]
    assert rule["allowed"] == [{"IPProtocol": "tcp", "ports": ["8080"]}]
    assert rule["sourceRanges"] == ["0.0.0.0/0"]

    provider.open_ports(REGION, "c1", ["8080", "10000-10010"])
    assert fake.firewalls()["orch-c1-ports"]["allowed"] == [
        {"IPProtocol": "tcp", "ports": ["8080", "10000-10010"]}]

    provider.open_ports(REGION, "c1", ["8080"])  # already open: nothing to change
    assert len(fake.calls("firewalls.patch")) == 1

    provider.cleanup_ports("us-east1", "c1")  # the rule is global: the head still uses it
    assert list(fake.firewalls()) == ["orch-c1-ports"]
    provider.terminate_instances(REGION, "c1")
    for _ in range(5):  # the delete moves the head to STOPPING, then gone, one step per read
        if not provider.query_instances(REGION, "c1"):
            break
    assert provider.query_instances(REGION, "c1") == {}

    provider.cleanup_ports(REGION, "c1")
    assert fake.firewalls() == {}
    provider.cleanup_ports(REGION, "c1")  # a second cleanup finds nothing, and is fine
    assert len(fake.calls("firewalls.delete")) == 2


def test_no_ports_no_rule(fake: GCPComputeFake, provider: GCPProvider,
                          config: Config) -> None:
    provider.run_instances(config(num_nodes=1))
    provider.open_ports(REGION, "c1", [])

    assert fake.firewalls() == {}
    assert fake.calls("firewalls.insert") == []


def test_rule_created_concurrently_is_widened(fake: GCPComputeFake, provider: GCPProvider) -> None:
    """Another attempt created the rule between our get and our insert."""
    provider.open_ports(REGION, "c1", ["22"])
    fake.fail_http("firewalls.get", 404, "notFound",
                   f"The resource 'projects/{fake.project}/global/firewalls/orch-c1-ports' "
                   "was not found")

    provider.open_ports(REGION, "c1", ["8888"])

    assert fake.firewalls()["orch-c1-ports"]["allowed"][0]["ports"] == ["22", "8888"]


def test_firewall_errors_inside_the_global_operation(fake: GCPComputeFake,
                                                     provider: GCPProvider) -> None:
    fake.fail_operation("firewalls.insert", "IAM_PERMISSION_DENIED",
                        "Required 'compute.firewalls.create' permission")

    operations = provider.open_ports(REGION, "c1", ["8080"])
    with pytest.raises(AuthError):
        settle(provider, REGION, "c1", operations)
    assert fake.firewalls() == {}
