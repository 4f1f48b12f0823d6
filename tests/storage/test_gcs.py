"""What only the GCS store does: the emulator's answers, the error table for what the
emulator cannot express (it has no authentication and one namespace, so neither "taken by
another project" nor "forbidden" can be produced there), what a node is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from google.api_core.exceptions import from_http_status

from orch.storage.base import BucketRef, StoreKind
from orch.storage.errors import AccessDenied, NoSuchBucket, StorageError
from orch.storage.gcs import GCSStore
from orch.storage.gcs_errors import from_api_error
from tests.storage.conftest import PART_SIZE, clear_store_env, use_server
from tests.storage.servers import GCSEmulator

BUCKET = BucketRef(store=StoreKind.GCS, name="ckpt", prefix="run/1")


@pytest.fixture
def gcs(gcs_emulator: GCSEmulator, monkeypatch: pytest.MonkeyPatch) -> GCSStore:
    use_server(gcs_emulator, monkeypatch)
    return GCSStore(part_size=PART_SIZE)


def test_an_emulator_is_reached_anonymously(gcs: GCSStore, gcs_emulator: GCSEmulator) -> None:
    remote = gcs.rclone_remote(BUCKET)
    assert (remote.type, remote.path) == ("google cloud storage", "ckpt/run/1")
    assert remote.options == {"bucket_policy_only": "true", "env_auth": "false",
                              "anonymous": "true", "endpoint": gcs_emulator.url}
    assert gcs.rclone_secrets(BUCKET) == {}


def test_a_service_account_key_goes_to_the_node(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    clear_store_env(monkeypatch)
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps({
        "type": "service_account", "project_id": "p", "private_key_id": "k",
        "private_key": pem, "client_email": "orch@p.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    store = GCSStore()
    assert store.rclone_remote(BUCKET).options == {"bucket_policy_only": "true",
                                                   "env_auth": "false"}
    assert store.rclone_secrets(BUCKET) == {"service_account_credentials": key_file.read_text()}


def test_gcloud_user_credentials_go_as_a_refresh_token(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    clear_store_env(monkeypatch)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    (tmp_path / "application_default_credentials.json").write_text(json.dumps({
        "type": "authorized_user", "client_id": "cid", "client_secret": "cs",
        "refresh_token": "rt"}))
    secrets = GCSStore().rclone_secrets(BUCKET)
    assert (secrets["client_id"], secrets["client_secret"]) == ("cid", "cs")
    assert json.loads(secrets["token"])["refresh_token"] == "rt"


def test_no_credentials_and_no_emulator_is_named(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    clear_store_env(monkeypatch)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no ADC file there
    with pytest.raises(AccessDenied) as refused:
        GCSStore().exists(BUCKET)
    assert refused.value.code == "NoCredentials" and "no GCP credentials" in str(refused.value)


def test_the_emulators_404_is_no_such_bucket(gcs: GCSStore) -> None:
    with pytest.raises(NoSuchBucket) as missing:
        list(gcs.list(BucketRef(store=StoreKind.GCS, name="orch-never-made")))
    assert missing.value.code == "404"  # the emulator gives no reason; GCS says notFound


@pytest.mark.parametrize(("status", "reason", "kind", "retryable"), [
    (404, "notFound", NoSuchBucket, False),
    (403, "forbidden", AccessDenied, False),
    (401, "required", AccessDenied, False),
    (429, "rateLimitExceeded", StorageError, True),
    (503, "backendError", StorageError, True),
    (409, "conflict", StorageError, False),  # outside create: e.g. a bucket not empty
    (400, "invalid", StorageError, False),
])
def test_gcs_reasons(status: int, reason: str, kind: type, retryable: bool) -> None:
    error = from_api_error("ckpt", from_http_status(status, "said GCS",
                                                    errors=[{"reason": reason}]))
    assert type(error) is kind
    assert (error.code, error.retryable) == (reason, retryable)
    assert f"({reason}): said GCS" in str(error)


def test_creating_needs_a_project(gcs: GCSStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    with pytest.raises(StorageError, match="set GOOGLE_CLOUD_PROJECT") as refused:
        GCSStore().create(BucketRef(store=StoreKind.GCS, name="orch-no-project"))
    assert (refused.value.code, refused.value.retryable) == ("NoProject", False)
