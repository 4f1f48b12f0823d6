"""`orch check` on a "cloud VM": each cloud's instance-metadata endpoint is a fake that
records every request (AWS IMDSv2, the GCE metadata server, Azure managed identity), and
the APIs are moto, the Compute fake and the ARM fake. Without ``cloud_identity`` none of
the metadata fakes gets a single request; with it, all three clouds pass on their
instance's identity and say so. Through the installed `orch` script, so the SDKs read
their variables at import, as they do for a user."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

import pytest
from moto.server import ThreadedMotoServer

from tests.e2e.conftest import Orch
from tests.fakes.azure_arm_fake import AzureArmFake
from tests.fakes.gcp_compute_fake import GCPComputeFake
from tests.fakes.instance_metadata import AwsImds, AzureIdentity, GceMetadata, MetadataFake

_CREDENTIAL_PREFIXES = ("AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_", "AZURE_", "IDENTITY_",
                        "MSI_", "ORCH_")


class Vm(NamedTuple):
    cli: Orch
    metadata: list[MetadataFake]
    gcp: GCPComputeFake


@pytest.fixture
def vm(tmp_path: Path) -> Iterator[Vm]:
    with ExitStack() as stack:
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        stack.callback(moto.stop)
        gcp = stack.enter_context(GCPComputeFake())
        arm = stack.enter_context(AzureArmFake())
        imds = stack.enter_context(AwsImds())
        gce = stack.enter_context(GceMetadata(gcp.project, gcp.issue_token))
        azure = stack.enter_context(AzureIdentity(lambda: arm.token))
        cli = Orch(tmp_path / "home")
        (tmp_path / "home").mkdir()
        for name in [n for n in cli.env if n.startswith(_CREDENTIAL_PREFIXES)]:
            del cli.env[name]
        host, port = moto.get_host_and_port()
        cli.env.update({
            "ORCH_HOME": str(tmp_path / "home"), "HOME": str(tmp_path),  # no ~/.aws, ~/.azure
            "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
            "AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
            "ORCH_GCP_ENDPOINT": gcp.endpoint,
            "GCE_METADATA_HOST": gce.host, "GCE_METADATA_IP": gce.host,
            "ORCH_AZURE_ENDPOINT": arm.base_url, "AZURE_SUBSCRIPTION_ID": arm.subscription_id,
            "REQUESTS_CA_BUNDLE": arm.ca_path,
            "IDENTITY_ENDPOINT": azure.url + AzureIdentity.APP_SERVICE,
            "IDENTITY_HEADER": azure.secret,
            "AZURE_POD_IDENTITY_AUTHORITY_HOST": azure.url,
        })
        yield Vm(cli, [imds, gce, azure], gcp)


def rows(cli: Orch) -> dict[str, str]:
    """Cloud -> its row of `orch check`'s table, wrapped lines joined."""
    found: dict[str, str] = {}
    cloud = ""
    for line in cli("check").stdout.splitlines()[1:]:
        first = line.split()[0] if line.split() else ""
        cloud = first if first in ("local", "aws", "gcp", "azure") else cloud
        if cloud:
            found[cloud] = " ".join([found.get(cloud, ""), *line.split()])
    return found


def test_without_cloud_identity_no_metadata_endpoint_is_asked(vm: Vm) -> None:
    checked = rows(vm.cli)

    assert [fake.hits for fake in vm.metadata] == [[], [], []]
    assert "no credentials found" in checked["aws"] and "cloud_identity" in checked["aws"]
    assert " yes " not in checked["azure"]


def test_with_cloud_identity_every_cloud_uses_the_instance(vm: Vm) -> None:
    vm.gcp.require_auth = True  # only the metadata server's token gets in
    vm.cli.env["ORCH_CLOUD_IDENTITY"] = "1"

    checked = rows(vm.cli)

    assert "yes" in checked["aws"] and "(instance role (IMDS))" in checked["aws"]
    assert "yes" in checked["gcp"] and "(metadata server)" in checked["gcp"]
    assert "yes" in checked["azure"] and "(managed identity)" in checked["azure"]
    assert all(fake.hits for fake in vm.metadata)
    assert os.environ.get("ORCH_CLOUD_IDENTITY") is None  # the test's own process untouched
