"""What only the S3 store does, against moto's S3 server: regions, another account's name,
moto's IAM refusing, multipart MD5s in metadata, stale uploads, what a node is given."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from orch.storage.base import BucketRef, StoreKind
from orch.storage.errors import AccessDenied, BadName, NameTaken, StorageError
from orch.storage.s3 import MD5_METADATA, S3Store
from orch.storage.s3_errors import from_client_error
from orch.storage.upload import b64
from tests.storage.conftest import PART_SIZE, new_bucket, use_server
from tests.storage.servers import MotoS3


@pytest.fixture
def s3(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> S3Store:
    use_server(moto_s3, monkeypatch)
    return S3Store(part_size=PART_SIZE)


def raw(moto_s3: MotoS3, service: str = "s3", **credentials: str) -> Any:
    """A boto3 client past orch, for setting the scene and checking the result."""
    keys = credentials or {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    return boto3.client(service, endpoint_url=moto_s3.url, region_name=moto_s3.region, **keys)


def other_account(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Temporary keys of another AWS account (moto keys accounts by the assumed role)."""
    credentials = raw(moto_s3, "sts").assume_role(
        RoleArn="arn:aws:iam::222222222222:role/other", RoleSessionName="orch-test",
    )["Credentials"]
    env = {"AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
           "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
           "AWS_SESSION_TOKEN": credentials["SessionToken"]}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_a_name_held_by_another_account_is_taken(s3: S3Store, moto_s3: MotoS3,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = new_bucket(s3)
    assert s3.create(bucket) is True
    other_account(moto_s3, monkeypatch)
    with pytest.raises(NameTaken) as taken:
        S3Store().create(bucket)
    assert taken.value.code == "BucketAlreadyExists"
    assert f"S3 bucket {bucket.name} belongs to another account" in str(taken.value)


def test_us_east_1_takes_no_location_constraint(s3: S3Store, moto_s3: MotoS3) -> None:
    east = new_bucket(s3).model_copy(update={"region": "us-east-1"})
    ireland = new_bucket(s3).model_copy(update={"region": "eu-west-1"})
    assert s3.create(east) is True
    assert s3.create(east) is False  # us-east-1 would answer 200: asked first
    assert s3.create(ireland) is True
    assert s3.create(ireland) is False  # BucketAlreadyOwnedByYou
    client = raw(moto_s3)
    assert client.get_bucket_location(Bucket=east.name)["LocationConstraint"] is None
    assert client.get_bucket_location(Bucket=ireland.name)["LocationConstraint"] == "eu-west-1"


def test_refusals_of_moto_iam_are_access_denied(s3: S3Store, moto_s3: MotoS3,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = new_bucket(s3)
    s3.create(bucket)
    iam = raw(moto_s3, "iam")
    iam.create_user(UserName="no-rights")
    key = iam.create_access_key(UserName="no-rights")["AccessKey"]
    with moto_s3.auth_enforced():
        with pytest.raises(AccessDenied) as unknown_key:
            s3.exists(bucket)  # "testing" is no key moto's IAM made
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        with pytest.raises(AccessDenied) as no_rights:
            list(S3Store().list(bucket))
    assert unknown_key.value.code == "403"  # HeadBucket's bare status
    assert no_rights.value.code == "AccessDenied"
    assert "check the credentials and the bucket's permissions" in str(no_rights.value)


def test_the_services_own_refusal_of_a_name_is_bad_name(moto_s3: MotoS3) -> None:
    with pytest.raises(ClientError) as refused:  # "ab" passes no check of orch's here
        raw(moto_s3).create_bucket(Bucket="ab", CreateBucketConfiguration={
            "LocationConstraint": moto_s3.region})
    error = from_client_error("ab", refused.value)
    assert isinstance(error, BadName) and error.code == "InvalidBucketName"


def test_multipart_objects_carry_their_md5(s3: S3Store, moto_s3: MotoS3,
                                          tmp_path: Path) -> None:
    data = os.urandom(PART_SIZE + 100)
    (tmp_path / "big").write_bytes(data)
    bucket = new_bucket(s3)
    s3.create(bucket)
    s3.upload_dir(tmp_path, bucket)
    head = raw(moto_s3).head_object(Bucket=bucket.name, Key="big")
    assert head["ETag"].strip('"').endswith("-2")  # the parts' hash, not the file's
    assert head["Metadata"][MD5_METADATA] == b64(hashlib.md5(data).digest())
    assert [o.md5 for o in s3.list(bucket)] == [hashlib.md5(data).hexdigest()]


def test_delete_aborts_open_uploads_and_buckets_expire_them(s3: S3Store,
                                                            moto_s3: MotoS3) -> None:
    bucket = new_bucket(s3)
    s3.create(bucket)
    client = raw(moto_s3)
    rules = client.get_bucket_lifecycle_configuration(Bucket=bucket.name)["Rules"]
    assert rules[0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    client.create_multipart_upload(Bucket=bucket.name, Key="killed-mid-way")
    assert s3.delete(bucket) is True
    assert s3.exists(bucket) is False


def test_a_node_gets_the_endpoint_region_and_keys(s3: S3Store, moto_s3: MotoS3,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = BucketRef(store=StoreKind.S3, name="ckpt", prefix="/run/1/")
    remote = s3.rclone_remote(bucket)
    assert (remote.type, remote.path) == ("s3", "ckpt/run/1")
    assert remote.options == {"provider": "AWS", "region": moto_s3.region, "env_auth": "false",
                              "endpoint": moto_s3.url}
    assert s3.rclone_secrets(bucket) == {"access_key_id": "testing",
                                         "secret_access_key": "testing"}
    temporary = other_account(moto_s3, monkeypatch)
    assert S3Store().rclone_secrets(bucket)["session_token"] == temporary["AWS_SESSION_TOKEN"]


@pytest.mark.parametrize(("code", "status", "retryable"), [
    ("SlowDown", 503, True), ("InternalError", 500, True), ("OperationAborted", 409, True),
    ("SomethingNew", 502, True), ("BucketNotEmpty", 409, False), ("InvalidArgument", 400, False),
])
def test_other_codes_are_retryable_only_when_another_attempt_can_help(
        code: str, status: int, retryable: bool) -> None:
    error = from_client_error("b", ClientError({
        "Error": {"Code": code, "Message": "said the service"},
        "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"))
    assert type(error) is StorageError
    assert (error.code, error.retryable) == (code, retryable)
    assert f"({code}): said the service" in str(error)
    again = pickle.loads(pickle.dumps(error))  # as an activity's error may travel
    assert (type(again), str(again), again.code, again.retryable) == (
        StorageError, str(error), code, retryable)
