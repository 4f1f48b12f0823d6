"""What only the Azure Blob store does, against Azurite: accounts, a refused key, the
service's own name check, what a node is given."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobServiceClient

from orch.storage.azure_blob import AzureBlobStore
from orch.storage.azure_errors import from_http_error
from orch.storage.base import BucketRef, StoreKind
from orch.storage.errors import AccessDenied, BadName
from tests.storage.conftest import PART_SIZE, clear_store_env, new_bucket, use_server
from tests.storage.servers import AZURITE_ACCOUNT, AZURITE_KEY, OTHER_ACCOUNT, OTHER_KEY, Azurite


@pytest.fixture
def azure(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> AzureBlobStore:
    use_server(azurite, monkeypatch)
    return AzureBlobStore(part_size=PART_SIZE)


def test_container_names_are_per_account(azure: AzureBlobStore, azurite: Azurite,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Azure has no global namespace: another account's container of the same name is no
    obstacle, so Azure never answers "name taken"."""
    mine = new_bucket(azure)
    assert mine.account == AZURITE_ACCOUNT
    assert azure.create(mine) is True
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       azurite.connection_string(OTHER_ACCOUNT, OTHER_KEY))
    theirs = mine.model_copy(update={"account": OTHER_ACCOUNT})
    assert AzureBlobStore().create(theirs) is True


def test_a_refused_key_is_access_denied(azure: AzureBlobStore, azurite: Azurite,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = new_bucket(azure)
    azure.create(bucket)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       azurite.connection_string(AZURITE_ACCOUNT, OTHER_KEY))
    with pytest.raises(AccessDenied) as refused:
        list(AzureBlobStore().list(bucket))
    assert refused.value.code == "AuthorizationFailure"  # Azure itself: AuthenticationFailed


def test_no_account_anywhere_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_store_env(monkeypatch)
    with pytest.raises(AccessDenied, match="names no storage account and none is set"):
        AzureBlobStore().create(BucketRef(store=StoreKind.AZURE, name="ckpt"))


def test_a_bad_account_name_is_refused_before_any_call(azure: AzureBlobStore) -> None:
    with pytest.raises(BadName, match="storage account name 'My-Account'"):
        azure.create(BucketRef(store=StoreKind.AZURE, name="ckpt", account="My-Account"))


def test_the_services_own_refusal_of_a_name_is_bad_name(azurite: Azurite) -> None:
    service = BlobServiceClient.from_connection_string(
        azurite.connection_string(AZURITE_ACCOUNT, AZURITE_KEY))
    with pytest.raises(HttpResponseError) as refused:
        service.create_container("Bad--Name")
    error = from_http_error("Bad--Name", refused.value)
    assert isinstance(error, BadName) and error.code == "InvalidResourceName"


def test_a_node_gets_the_account_endpoint_and_key(azure: AzureBlobStore,
                                                  azurite: Azurite) -> None:
    bucket = BucketRef(store=StoreKind.AZURE, name="ckpt", prefix="run/1",
                       account=AZURITE_ACCOUNT)
    remote = azure.rclone_remote(bucket)
    assert (remote.type, remote.path) == ("azureblob", "ckpt/run/1")
    assert remote.options == {"account": AZURITE_ACCOUNT, "env_auth": "false",
                              "endpoint": f"{azurite.url}/{AZURITE_ACCOUNT}"}
    assert azure.rclone_secrets(bucket) == {"key": AZURITE_KEY}


def test_account_and_key_variables_name_the_default_account(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clear_store_env(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "prodacct")
    monkeypatch.setenv("AZURE_STORAGE_KEY", "a2V5")
    store = AzureBlobStore()
    bucket = BucketRef(store=StoreKind.AZURE, name="ckpt")
    assert store.default_account == "prodacct"
    assert store.rclone_remote(bucket).options == {"account": "prodacct", "env_auth": "false"}
    assert store.rclone_secrets(bucket) == {"key": "a2V5"}
    # another account than the key's: no key to give, the node's own identity is used
    elsewhere = bucket.model_copy(update={"account": "otheracct"})
    assert store.rclone_remote(elsewhere).options == {"account": "otheracct", "env_auth": "true"}
    assert store.rclone_secrets(elsewhere) == {}
