"""Each store's bucket-name rules (pure), with the examples of the services' own docs."""

from __future__ import annotations

import pytest

from orch.storage import get_store
from orch.storage.azure_blob import AzureBlobStore
from orch.storage.base import Store, StoreKind
from orch.storage.gcs import GCSStore
from orch.storage.local import LocalStore
from orch.storage.names import (
    azure_account_problems,
    azure_container_problems,
    gcs_name_problems,
    local_name_problems,
    s3_name_problems,
)
from orch.storage.s3 import S3Store


@pytest.mark.parametrize("name", [
    "docexamplebucket1", "log-delivery-march-2020", "my-hosted-content", "a.b-c", "abc",
    "x" * 63, "1bucket",
])
def test_s3_accepts(name: str) -> None:
    assert s3_name_problems(name) == []


@pytest.mark.parametrize(("name", "why"), [
    ("ab", "3-63 characters long (it has 2)"),
    ("x" * 64, "(it has 64)"),
    ("doc_example_bucket", "not '_'"),
    ("DocExampleBucket", "not 'B', 'D', 'E'"),
    ("-bucket", "begin and end"),
    ("bucket.", "begin and end"),
    ("my..bucket", "two adjacent dots"),
    ("192.168.5.4", "IP address"),
    ("xn--bucket", "'xn--'"),
    ("sthree-bucket", "'sthree-'"),
    ("amzn-s3-demo-bucket", "'amzn-s3-demo-'"),
    ("bucket-s3alias", "'-s3alias'"),
    ("bucket--ol-s3", "'--ol-s3'"),
    ("bucket.mrap", "'.mrap'"),
    ("bucket--x-s3", "'--x-s3'"),
    ("bucket--table-s3", "'--table-s3'"),
])
def test_s3_refuses(name: str, why: str) -> None:
    problems = s3_name_problems(name)
    assert any(why in p for p in problems), problems


@pytest.mark.parametrize("name", [
    "my-travel-maps", "0f75d593-8e7b-4418-a5ba-cb2970f0b91e", "test.example.com",
    "with_underscore", "a" * 63, ".".join(["a" * 63] * 3),
])
def test_gcs_accepts(name: str) -> None:
    assert gcs_name_problems(name) == []


@pytest.mark.parametrize(("name", "why"), [
    ("My-Travel-Maps", "lowercase"),
    ("test bucket", "not ' '"),
    ("a" * 64, "3-63 characters"),
    (".".join(["a" * 63] * 4), "3-222 characters"),
    ("a" * 64 + ".com", "at most 63 characters"),
    ("_bucket", "begin and end"),
    ("192.168.5.4", "IP address"),
    ("goog-bucket", "'goog'"),
    ("my-google-bucket", "'google'"),
    ("my-g00gle-bucket", "'google'"),
    ("a..b", "two adjacent dots"),
])
def test_gcs_refuses(name: str, why: str) -> None:
    problems = gcs_name_problems(name)
    assert any(why in p for p in problems), problems


@pytest.mark.parametrize("name", ["mycontainer", "my-container-1", "abc", "1" * 63])
def test_azure_containers_accept(name: str) -> None:
    assert azure_container_problems(name) == []


@pytest.mark.parametrize(("name", "why"), [
    ("my--container", "'--'"),
    ("container-", "'-' at the end"),
    ("-container", "begin with a letter"),
    ("my.container", "not '.'"),
    ("My-Container", "lowercase"),
    ("ab", "3-63"),
])
def test_azure_containers_refuse(name: str, why: str) -> None:
    problems = azure_container_problems(name)
    assert any(why in p for p in problems), problems


def test_azure_account_names() -> None:
    assert azure_account_problems("devstoreaccount1") == []
    assert azure_account_problems("my-account")
    assert azure_account_problems("a" * 25)


@pytest.mark.parametrize(("name", "ok"), [
    ("ckpt-1", True), ("my_data.v2", True), ("..", False), (".hidden", False),
    ("a/b", False), ("a..b", False), ("UPPER", False), ("ab", False),
])
def test_local_names_are_one_safe_directory(name: str, ok: bool) -> None:
    assert (local_name_problems(name) == []) is ok


@pytest.mark.parametrize(("kind", "rule"), [
    (StoreKind.S3, s3_name_problems), (StoreKind.GCS, gcs_name_problems),
    (StoreKind.AZURE, azure_container_problems), (StoreKind.LOCAL, local_name_problems),
])
def test_each_store_validates_with_its_own_rules(kind: StoreKind, rule: object) -> None:
    store = get_store(kind)
    for name in ("my-ckpt", "goog-x", "my--x", "my_x", "192.168.5.4", "a" * 70):
        assert store.validate_name(name) == rule(name)  # type: ignore[operator]


def test_every_store_keeps_the_protocol() -> None:
    stores: list[Store] = [LocalStore(), S3Store(), GCSStore(), AzureBlobStore()]  # mypy too
    assert [s.kind for s in stores] == [StoreKind.LOCAL, StoreKind.S3, StoreKind.GCS,
                                        StoreKind.AZURE]
    assert all(isinstance(s, Store) for s in stores)


def test_an_unknown_store_is_named() -> None:
    with pytest.raises(ValueError, match="unknown store 'r2'; known: s3, gcs, azure, local"):
        get_store("r2")
