"""The three clouds as the activity tests run them: moto's EC2 behind the fault front, the
Compute Engine fake and the ARM fake, each with a latency profile, and what of a cluster
is left on each.

Everything a provider needs to reach a fake is in the environment (endpoints,
credentials: a service-account key file for GCP, an ``az`` login for Azure), so the
setups serve orch's activities in the test's own worker and in ``python -m workers``
processes alike.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from orch import check
from orch.clouds.base import TAG_CLUSTER
from orch.spec import Resources
from tests.activities.conftest import EAST_1, INSTANCE_TYPE, Moto
from tests.clouds.azure.support import az_login, point_sdk_at
from tests.fakes.azure_arm_fake import AzureArmFake
from tests.fakes.ec2_fault_front import EC2FaultFront
from tests.fakes.gcp_compute_fake import GCPComputeFake

AZURE_KINDS = ("Microsoft.Resources/resourceGroups", "Microsoft.Compute/virtualMachines",
               "Microsoft.Network/networkInterfaces", "Microsoft.Network/publicIPAddresses",
               "Microsoft.Network/networkSecurityGroups", "Microsoft.Network/virtualNetworks")


def aws_leftovers(moto: Moto, region: str, cluster_name: str) -> dict[str, list[str]]:
    """What of the cluster is still there in ``region``, by kind (empty kinds left out)."""
    ec2 = moto.ec2(region)
    tagged = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_name]}]
    found = {
        "instances": [i["InstanceId"] for i in moto.instances(region, cluster_name)],
        "security groups": [g["GroupId"] for g in
                            ec2.describe_security_groups(Filters=tagged)["SecurityGroups"]],
        "key pairs": [k["KeyName"] for k in ec2.describe_key_pairs(Filters=tagged)["KeyPairs"]],
        "volumes": [v["VolumeId"] for v in ec2.describe_volumes(Filters=tagged)["Volumes"]],
    }
    return {kind: ids for kind, ids in found.items() if ids}


def gcp_leftovers(gcp: GCPComputeFake, cluster_name: str) -> dict[str, list[str]]:
    """The cluster's instances (any zone, any status) and firewall rules still there."""
    found = {
        "instances": [name for name, i in gcp.instances().items()
                      if i.get("labels", {}).get(TAG_CLUSTER) == cluster_name],
        "firewalls": [name for name in gcp.firewalls() if cluster_name in name],
    }
    return {kind: names for kind, names in found.items() if names}


def azure_leftovers(azure: AzureArmFake, cluster_name: str) -> dict[str, list[str]]:
    """Every resource tagged with the cluster, by ARM type (empty types left out)."""
    found = {kind.rsplit("/", 1)[-1]: [r["name"] for r in azure.resources(kind)
                                       if (r.get("tags") or {}).get(TAG_CLUSTER) == cluster_name]
             for kind in AZURE_KINDS}
    return {kind: names for kind, names in found.items() if names}


@dataclass
class Cloud:
    """One cloud under its profile: what to launch there, and what of a cluster it holds
    (by kind, empty kinds left out)."""

    resources: Resources
    left: Callable[[str], dict[str, list[str]]]


def aws(front: EC2FaultFront, moto: Moto, latency: dict[str, float]) -> Cloud:
    """``latency``: seconds an instance shows ``pending``, ``stopping``, ``shutting-down``."""
    front.set_latency(latency)
    return Cloud(Resources(cloud="aws", region=EAST_1, instance_type=INSTANCE_TYPE),
                 lambda name: aws_leftovers(moto, EAST_1, name))


@contextmanager
def gcp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, latency: dict[str, float]
        ) -> Iterator[Cloud]:
    """``latency``: seconds an operation of a type (insert, stop, start, delete) runs."""
    with GCPComputeFake() as fake:
        key = tmp_path / "service-account.json"
        key.write_text(json.dumps(fake.service_account()))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", fake.project)
        monkeypatch.setenv("ORCH_GCP_ENDPOINT", fake.endpoint)
        fake.set_latency(latency)
        monkeypatch.setattr(check, "_cache", None)  # checked anew: GCP is set up now
        yield Cloud(Resources(cloud="gcp", region="us-central1", zone="us-central1-a",
                              instance_type="n2-standard-8"),
                    lambda name: gcp_leftovers(fake, name))


@contextmanager
def azure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, latency: dict[str, float]
          ) -> Iterator[Cloud]:
    """``latency``: seconds an ARM operation (``VirtualMachines_CreateOrUpdate``,
    ``ResourceGroups_Delete``...) runs. The token comes from an ``az`` login to the fake,
    the last link of orch's own credential chain."""
    with AzureArmFake() as fake:
        point_sdk_at(fake, monkeypatch)
        for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET"):
            monkeypatch.delenv(name, raising=False)
        bin_dir = az_login(fake, tmp_path / "az-bin").parent
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        fake.set_latency(latency)
        monkeypatch.setattr(check, "_cache", None)
        yield Cloud(Resources(cloud="azure", region="eastus", instance_type="Standard_D2s_v3"),
                    lambda name: azure_leftovers(fake, name))
