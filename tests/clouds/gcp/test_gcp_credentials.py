"""Where GCP credentials come from: gcloud's application-default file (user credentials,
refreshed at the fake's token endpoint) and, with ``cloud_identity`` only, the GCE
metadata server (a fake that hands out tokens the Compute fake accepts). Real google-auth
throughout."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.auth.compute_engine import _metadata

from orch.check import _credentials_present, check_cloud
from orch.clouds.gcp import GCPProvider
from orch.clouds.gcp_client import GCPSettings
from tests.fakes.gcp_compute_fake import GCPComputeFake
from tests.fakes.instance_metadata import GceMetadata


@pytest.fixture
def metadata(fake: GCPComputeFake, monkeypatch: pytest.MonkeyPatch,
             tmp_path: Path) -> Iterator[GceMetadata]:
    """The metadata fake where google-auth looks: ``GCE_METADATA_IP`` is read at each
    ping; ``GCE_METADATA_HOST`` only when google-auth is imported (already done here, so
    its module value is set too). No credentials elsewhere, and orch's config isolated."""
    for name in list(os.environ):
        if name.startswith(("ORCH_", "GOOGLE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "orch-home"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", fake.project)
    with GceMetadata(fake.project, fake.issue_token) as server:
        monkeypatch.setenv("GCE_METADATA_IP", server.host)
        monkeypatch.setenv("GCE_METADATA_HOST", server.host)
        monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", server.host)
        yield server


def test_application_default_user_credentials_are_found_and_used(
        fake: GCPComputeFake, metadata: GceMetadata, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.require_auth = True
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")  # the file's quota project names it
    adc = Path(os.environ["CLOUDSDK_CONFIG"]) / "application_default_credentials.json"
    adc.write_text(json.dumps(fake.authorized_user()))

    provider = GCPProvider(GCPSettings.from_env().model_copy(update={"endpoint": fake.endpoint}))

    assert provider.credentials_ok() == (True, (
        f"project {fake.project} (application-default credentials (user credentials, "
        f"{adc}))"))
    assert provider.query_instances("us-central1", "c1") == {}
    assert metadata.hits == []


def test_the_application_default_file_alone_counts_for_orch_check(
        fake: GCPComputeFake, metadata: GceMetadata, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not _credentials_present("gcp", cloud_identity=False)
    adc = Path(os.environ["CLOUDSDK_CONFIG"]) / "application_default_credentials.json"
    adc.write_text(json.dumps(fake.authorized_user()))
    assert _credentials_present("gcp", cloud_identity=False)

    monkeypatch.setenv("ORCH_GCP_ENDPOINT", fake.endpoint)  # Google's own: not from a test
    fake.require_auth = True
    result = check_cloud("gcp")

    assert result.ok and "(application-default credentials (user" in result.reason
    assert metadata.hits == []


def test_without_cloud_identity_the_metadata_server_is_never_asked(
        fake: GCPComputeFake, metadata: GceMetadata) -> None:
    result = check_cloud("gcp")
    ok, reason = GCPProvider(GCPSettings.from_env()).credentials_ok()
    anonymous = GCPProvider(GCPSettings(endpoint=fake.endpoint, project=fake.project))

    assert not result.ok and result.reason.startswith("no credentials found")
    assert not ok and "cloud_identity is off" in reason
    assert anonymous.credentials_ok()[1].endswith("(anonymous (ORCH_GCP_ENDPOINT))")
    assert metadata.hits == []


def test_with_cloud_identity_the_metadata_server_account_is_used(
        fake: GCPComputeFake, metadata: GceMetadata, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.require_auth = True
    monkeypatch.setenv("ORCH_CLOUD_IDENTITY", "1")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")  # the metadata server names it
    settings = GCPSettings.from_env()
    provider = GCPProvider(settings.model_copy(update={"endpoint": fake.endpoint}))

    assert settings.cloud_identity
    assert provider.credentials_ok() == (True, f"project {fake.project} (metadata server)")
    assert provider.query_instances("us-central1", "c1") == {}
    paths = {hit.path.split("?")[0] for hit in metadata.hits}
    assert "/computeMetadata/v1/instance/service-accounts/default/token" in paths
    assert all(hit.headers.get("metadata-flavor") == "Google" for hit in metadata.hits)
