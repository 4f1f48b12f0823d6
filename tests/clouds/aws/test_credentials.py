"""Where AWS credentials come from: profiles (static keys, ``credential_process``, SSO)
and, with ``cloud_identity`` only, the instance role from IMDSv2 (a fake), with STS and
EC2 answered by moto. The real botocore chain throughout; nothing is mocked."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.check import check_cloud
from orch.clouds.aws import AWSProvider
from orch.clouds.aws_credentials import found, new_session
from orch.clouds.errors import AuthError
from tests.clouds.aws.conftest import REGION
from tests.fakes.ec2_fault_front import EC2FaultFront
from tests.fakes.instance_metadata import AwsImds

MOTO_ACCOUNT = "123456789012"


@pytest.fixture
def imds() -> Iterator[AwsImds]:
    with AwsImds() as fake:
        yield fake


@pytest.fixture
def no_keys(front: EC2FaultFront, imds: AwsImds, monkeypatch: pytest.MonkeyPatch,
            tmp_path: Path) -> Path:
    """moto as the endpoint, no credentials anywhere, IMDS pointed at the fake (and not
    disabled: orch's own choice is under test). Returns the config file's path."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "ORCH_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "orch-home"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", front.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
    config = tmp_path / "aws-config"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    front.reset()
    return config


def test_a_credential_process_profile_works_end_to_end(
        no_keys: Path, monkeypatch: pytest.MonkeyPatch, imds: AwsImds) -> None:
    output = json.dumps({"Version": 1, "AccessKeyId": "AKIAPROCESS0000TEST",
                         "SecretAccessKey": "process-secret"})
    command = shlex.join([sys.executable, "-c", f"print({output!r})"])
    no_keys.write_text(f"[profile dev]\nregion = {REGION}\ncredential_process = {command}\n")
    monkeypatch.setenv("AWS_PROFILE", "dev")

    result = check_cloud("aws")

    assert result.ok, result.reason
    assert result.reason.startswith(f"AWS account {MOTO_ACCOUNT} as arn:aws:")
    assert result.reason.endswith(f"(profile dev, credential_process, from {no_keys})")
    assert AWSProvider().query_instances(REGION, "no-such-cluster") == {}  # EC2 too
    assert imds.hits == []


def test_an_sso_profile_counts_and_says_so(no_keys: Path, monkeypatch: pytest.MonkeyPatch,
                                           imds: AwsImds) -> None:
    """As ``aws configure sso`` writes it; its keys are fetched when first used (here:
    never, the login's token cache is empty, so the STS call fails and says why)."""
    no_keys.write_text(
        "[profile team]\nsso_session = corp\nsso_account_id = 111122223333\n"
        "sso_role_name = Admin\nregion = us-west-2\n\n"
        "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\n"
        "sso_region = us-east-1\nsso_registration_scopes = sso:account:access\n")
    monkeypatch.setenv("AWS_PROFILE", "team")
    monkeypatch.setenv("HOME", str(no_keys.parent))  # ~/.aws/sso/cache: empty

    credentials = found(new_session(cloud_identity=False))
    result = check_cloud("aws")

    assert credentials is not None and credentials.method == "sso"
    assert not result.ok and "no credentials found" not in result.reason
    assert "Error loading SSO Token" in result.reason, result.reason
    assert imds.hits == []


def test_a_region_only_profile_is_no_credentials_and_imds_is_never_asked(
        no_keys: Path, imds: AwsImds) -> None:
    no_keys.write_text(f"[default]\nregion = {REGION}\n")

    result = check_cloud("aws")
    provider = AWSProvider()
    ok, reason = provider.credentials_ok()
    with pytest.raises(AuthError):
        provider.query_instances(REGION, "any")

    assert not result.ok and result.reason.startswith("no credentials found")
    assert "cloud_identity" in result.reason
    assert not ok and "credentials" in reason
    assert imds.hits == []


def test_with_cloud_identity_the_instance_role_is_used(
        no_keys: Path, monkeypatch: pytest.MonkeyPatch, imds: AwsImds) -> None:
    monkeypatch.setenv("ORCH_CLOUD_IDENTITY", "1")

    result = check_cloud("aws")

    assert result.ok, result.reason
    assert result.reason.endswith("(instance role (IMDS))")
    assert [(h.method, h.path) for h in imds.hits] == [
        ("PUT", "/latest/api/token"),
        ("GET", AwsImds.CREDENTIALS),
        ("GET", AwsImds.CREDENTIALS + AwsImds.ROLE)]
    assert AWSProvider().query_instances(REGION, "no-such-cluster") == {}


def test_static_keys_in_a_profile_name_the_file(no_keys: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "no-credentials"  # the file AWS_SHARED_CREDENTIALS_FILE names
    keys.write_text("[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n")

    result = check_cloud("aws")

    assert result.ok and result.reason.endswith(f"(profile default, from {keys})")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert check_cloud("aws").reason.endswith("(env AWS_ACCESS_KEY_ID)")
