"""Credentials, project, endpoint override, transient failures, and operations that are
started and polled, never waited on."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orch.clouds.base import ProvisionConfig
from orch.clouds.errors import AuthError, TransientError
from orch.clouds.gcp import GCPProvider
from orch.clouds.gcp_client import GCPSettings
from tests.clouds.gcp.conftest import REGION, ZONE
from tests.clouds.waits import settle
from tests.fakes.gcp_compute_fake import GCPComputeFake

Config = Callable[..., ProvisionConfig]


def write_key(tmp_path: Path, info: dict[str, object]) -> str:
    path = tmp_path / "key.json"
    path.write_text(json.dumps(info))
    return str(path)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-1")
    monkeypatch.setenv("ORCH_GCP_ENDPOINT", "http://127.0.0.1:9/compute/v1/")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json")

    assert GCPSettings.from_env() == GCPSettings(
        project="proj-1", endpoint="http://127.0.0.1:9/compute/v1/",
        credentials_file="/keys/sa.json")


def test_provider_built_from_env_reaches_the_fake(
    fake: GCPComputeFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What orch.clouds.get_provider("gcp") does: no arguments, the environment decides."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", fake.project)
    monkeypatch.setenv("ORCH_GCP_ENDPOINT", fake.endpoint)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)

    assert GCPProvider().credentials_ok() == (
        True, f"project {fake.project} (anonymous (ORCH_GCP_ENDPOINT))")


def test_anonymous_calls_are_refused_where_auth_is_required(fake: GCPComputeFake,
                                                            provider: GCPProvider) -> None:
    fake.require_auth = True

    ok, reason = provider.credentials_ok()

    assert not ok
    assert reason.startswith("AuthError")


def test_service_account_file_gives_token_and_project(fake: GCPComputeFake,
                                                      tmp_path: Path) -> None:
    fake.require_auth = True
    key = write_key(tmp_path, fake.service_account())
    provider = GCPProvider(GCPSettings(endpoint=fake.endpoint, credentials_file=key))

    assert provider.credentials_ok() == (
        True, f"project {fake.project} (service-account key file {key})")
    assert provider.query_instances("us-central1", "c1") == {}


def test_a_key_the_token_endpoint_does_not_trust(fake: GCPComputeFake, tmp_path: Path) -> None:
    fake.require_auth = True
    with GCPComputeFake() as other:
        stranger = other.service_account()  # signed by a key this fake never issued
    stranger["token_uri"] = fake.service_account()["token_uri"]
    key = write_key(tmp_path, stranger)
    provider = GCPProvider(GCPSettings(endpoint=fake.endpoint, credentials_file=key))

    ok, reason = provider.credentials_ok()

    assert not ok
    assert "invalid_grant" in reason
    with pytest.raises(AuthError):
        provider.query_instances("us-central1", "c1")


@pytest.mark.parametrize("content", ['{"type": "service_account"}', "not json"])
def test_unusable_credentials_file(fake: GCPComputeFake, tmp_path: Path, content: str) -> None:
    key = tmp_path / "key.json"
    key.write_text(content)
    provider = GCPProvider(GCPSettings(endpoint=fake.endpoint, credentials_file=str(key)))

    ok, reason = provider.credentials_ok()

    assert not ok
    assert "NO_CREDENTIALS" in reason


def test_threads_share_a_provider(fake: GCPComputeFake, provider: GCPProvider,
                                  config: Config) -> None:
    """httplib2 is not thread-safe: each thread gets its own client."""
    names = [f"t{i}" for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        records = list(pool.map(
            lambda name: provider.run_instances(config(cluster_name=name, num_nodes=2)), names))

    assert [r.head_instance_id for r in records] == [f"{n}-head" for n in names]
    assert len(fake.instances()) == 8


def test_project_is_required(fake: GCPComputeFake) -> None:
    provider = GCPProvider(GCPSettings(endpoint=fake.endpoint))

    ok, reason = provider.credentials_ok()

    assert not ok
    assert "GOOGLE_CLOUD_PROJECT" in reason


def test_another_project_is_refused(fake: GCPComputeFake) -> None:
    provider = GCPProvider(GCPSettings(project="someone-else", endpoint=fake.endpoint))

    assert provider.credentials_ok()[0] is False


def test_throttling_is_transient(fake: GCPComputeFake, provider: GCPProvider) -> None:
    fake.fail_http("instances.aggregatedList", 403, "rateLimitExceeded", "Rate Limit Exceeded")

    with pytest.raises(TransientError) as raised:
        provider.query_instances("us-central1", "c1")
    assert raised.value.code == "rateLimitExceeded"
    assert provider.query_instances("us-central1", "c1") == {}  # the next call goes through


def test_unreachable_endpoint_is_transient() -> None:
    with GCPComputeFake() as gone:
        endpoint = gone.endpoint
    provider = GCPProvider(GCPSettings(project="p", endpoint=endpoint))

    with pytest.raises(TransientError) as raised:
        provider.query_instances("us-central1", "c1")
    assert raised.value.code == "UNREACHABLE"


def test_operations_are_started_never_waited_on(fake: GCPComputeFake, provider: GCPProvider,
                                                config: Config) -> None:
    fake.stall_operation("instances.insert")

    record = provider.run_instances(config(num_nodes=1))  # returns: nothing blocks on Google
    (operation,) = record.operations
    assert (operation.kind, operation.target, operation.zone) == ("insert", "c1-head", ZONE)
    with pytest.raises(TransientError) as raised:
        settle(provider, REGION, "c1", record.operations, timeout_s=0.5)

    assert raised.value.code == "WaitTimeout"
    assert raised.value.message.endswith("last seen insert c1-head RUNNING")
    assert fake.calls("zoneOperations.wait") == []
    assert len(fake.calls("zoneOperations.get")) > 1


def test_operations_polled_by_get_go_pending_running_done(fake: GCPComputeFake,
                                                          provider: GCPProvider,
                                                          config: Config) -> None:
    provider.run_instances(config(num_nodes=1))
    ops = provider.api.compute().zoneOperations()
    fake.fail_operation("instances.delete", "RESOURCE_NOT_FOUND")
    operation = provider.api.get(provider.api.compute().instances().delete(
        project=fake.project, zone="us-central1-a", instance="c1-head"))

    seen = [operation["status"]]
    for _ in range(3):
        operation = provider.api.get(ops.get(project=fake.project, zone="us-central1-a",
                                             operation=operation["name"]))
        seen.append(operation["status"])

    assert seen == ["PENDING", "RUNNING", "DONE", "DONE"]
    assert operation["error"]["errors"][0]["code"] == "RESOURCE_NOT_FOUND"
    assert operation["httpErrorStatusCode"] == 404
