"""The config file: precedence, sources, errors (field path, close matches), garbage."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orch.lifecycle import Autostop
from orch.settings import ConfigError, config_path, configured_user, load, load_settings
from orch.spec import SpecError


def env_for(tmp_path: Path, text: str | bytes | None = None, **variables: str) -> dict[str, str]:
    """An environment whose ORCH_HOME is ``tmp_path``, with a config.yaml holding ``text``."""
    if text is not None:
        file = tmp_path / "config.yaml"
        file.write_bytes(text.encode() if isinstance(text, str) else text)
    return {"ORCH_HOME": str(tmp_path), **variables}


def problems(tmp_path: Path, text: str | bytes, **variables: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as error:
        load(env_for(tmp_path, text, **variables))
    return dict(error.value.problems)


FULL = """
allowed_clouds: [AWS, gcp, local]
aws: {default_region: us-west-2}
gcp: {default_region: europe-west4}
launch_permits: 4
job_slots: 50
temporal:
  address: temporal.example.com:7233
  namespace: prod
  tls: {cert: /c.pem, key: /k.pem, ca: /ca.pem}
  api_key_env: MY_KEY
autostop: {idle_minutes: 30, down: true}
ssh_user: {"ami-0abc*": ec2-user, "debian-*": admin}
"""


def test_no_file_means_defaults_from_nowhere(tmp_path: Path) -> None:
    loaded = load(env_for(tmp_path))
    assert not loaded.file_exists and loaded.path == tmp_path / "config.yaml"
    assert set(loaded.sources.values()) == {"default"}
    settings = loaded.settings
    assert settings.allowed_clouds is None and settings.allows("aws")
    assert (settings.launch_permits, settings.job_slots) == (16, 2000)
    assert settings.autostop is None and settings.launch_autostop(None) is None
    assert settings.temporal_settings().address is None


def test_the_file_sets_every_value_and_says_so(tmp_path: Path) -> None:
    loaded = load(env_for(tmp_path, FULL))
    source = f"file {tmp_path / 'config.yaml'}"
    settings = loaded.settings
    assert settings.allowed_clouds == ["aws", "gcp", "local"]
    assert not settings.allows("azure")
    assert settings.default_regions() == {"aws": "us-west-2", "gcp": "europe-west4"}
    assert settings.permit_limits().launch == 4 and settings.permit_limits().job == 50
    temporal = settings.temporal_settings()
    assert (temporal.address, temporal.namespace, temporal.tls_cert, temporal.tls_key,
            temporal.tls_ca, temporal.api_key_env) == (
        "temporal.example.com:7233", "prod", "/c.pem", "/k.pem", "/ca.pem", "MY_KEY")
    assert settings.launch_autostop(None) == Autostop(idle_minutes=30, down=True)
    assert loaded.sources["temporal.tls.ca"] == source
    assert loaded.sources["azure.default_region"] == "default"
    assert loaded.values()["ssh_user"] == {"ami-0abc*": "ec2-user", "debian-*": "admin"}


def test_env_wins_over_the_file_and_an_empty_variable_is_unset(tmp_path: Path) -> None:
    loaded = load(env_for(tmp_path, FULL, ORCH_LAUNCH_PERMITS="9", TEMPORAL_ADDRESS="h:1",
                          TEMPORAL_TLS_CA="/other.pem", ORCH_JOB_SLOTS=""))
    settings = loaded.settings
    assert settings.launch_permits == 9 and loaded.sources["launch_permits"] == (
        "env ORCH_LAUNCH_PERMITS")
    assert settings.temporal.address == "h:1"
    assert loaded.sources["temporal.address"] == "env TEMPORAL_ADDRESS"
    assert settings.temporal.tls.ca == "/other.pem" and settings.temporal.tls.cert == "/c.pem"
    assert settings.job_slots == 50 and loaded.sources["job_slots"].startswith("file ")


def test_env_applies_without_a_file(tmp_path: Path) -> None:
    loaded = load(env_for(tmp_path, TEMPORAL_NAMESPACE="ns", ORCH_JOB_SLOTS="3"))
    assert loaded.settings.temporal.namespace == "ns" and loaded.settings.job_slots == 3
    assert loaded.sources["temporal.namespace"] == "env TEMPORAL_NAMESPACE"


def test_flags_win_over_the_default_autostop(tmp_path: Path) -> None:
    settings = load_settings(env_for(tmp_path, "autostop: {idle_minutes: 10}"))
    given = Autostop(idle_minutes=0, down=True)
    assert settings.launch_autostop(given) is given
    assert settings.launch_autostop(None) == Autostop(idle_minutes=10, down=False)


def test_orch_config_names_the_file_and_must_exist(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.yaml"
    other.write_text("job_slots: 5\n")
    env = env_for(tmp_path, "job_slots: 6\n", ORCH_CONFIG=str(other))
    assert config_path(env) == other and load_settings(env).job_slots == 5
    with pytest.raises(ConfigError, match="no such file") as error:
        load(env_for(tmp_path, ORCH_CONFIG=str(tmp_path / "missing.yaml")))
    assert str(tmp_path / "missing.yaml") in str(error.value)


def test_unknown_keys_name_their_path_and_close_matches(tmp_path: Path) -> None:
    found = problems(tmp_path, "lanch_permits: 3\ntemporal: {adress: x, tls: {cerf: y}}\n"
                               "aws: {region: us-east-1, zone: a}\n")
    assert found["lanch_permits"] == "unknown field; did you mean 'launch_permits'?"
    assert found["temporal.adress"] == "unknown field; did you mean 'address'?"
    assert found["temporal.tls.cerf"] == "unknown field; did you mean 'cert'?"
    assert found["aws.region"] == "unknown field; did you mean 'default_region'?"
    assert found["aws.zone"] == "unknown field (known here: default_region)"


def test_wrong_values_name_their_path(tmp_path: Path) -> None:
    found = problems(tmp_path, "job_slots: many\nlaunch_permits: 0\nautostop: {down: true}\n"
                               "allowed_clouds: [aws, gpc]\nssh_user: {ami-1: 'no way'}\n")
    assert "valid integer" in found["job_slots"] and "'many'" in found["job_slots"]
    assert "greater than or equal to 1" in found["launch_permits"]
    assert "Field required" in found["autostop.idle_minutes"]
    assert "unknown cloud 'gpc'; did you mean 'gcp'?" in found["allowed_clouds"]
    assert "'no way' is not a login user name" in found["ssh_user"]


def test_an_unknown_default_region_gets_close_matches(tmp_path: Path) -> None:
    found = problems(tmp_path, "aws: {default_region: us-wst-2}\n")
    assert found["aws.default_region"].startswith("unknown region 'us-wst-2' of aws; did you "
                                                  "mean 'us-west-2'")


def test_a_bad_variable_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load(env_for(tmp_path, FULL, ORCH_LAUNCH_PERMITS="lots"))
    assert error.value.source == "environment"
    assert "valid integer" in dict(error.value.problems)["ORCH_LAUNCH_PERMITS"]


@pytest.mark.parametrize(("text", "expected"), [
    (b"a: [1,\n", "not valid YAML"),
    (b"- aws\n- gcp\n", "expected a mapping of settings, got list"),
    (b"just words\n", "expected a mapping of settings, got str"),
    (b"\xff\xfe\x00garbage!", "not valid UTF-16 text"),
    (b"a: caf\xe9\n", "not UTF-8 text (byte 0xe9 at line 1 column 7)"),
    (b"a: 1\na: 2\n", "the key 'a' is given twice (lines 1 and 2)"),
    (b"a: [" * 100 + b"\n", "nested more than 64 levels deep"),
    (b"a: 1\n---\nb: 2\n", "expected one YAML document, found 2"),
    (b"a: !!python/object:os.system x\n", "not valid YAML"),
])
def test_broken_files_are_config_errors(tmp_path: Path, text: bytes, expected: str) -> None:
    with pytest.raises(ConfigError, match="invalid config") as error:
        load(env_for(tmp_path, text))
    assert expected in str(error.value) and str(tmp_path / "config.yaml") in str(error.value)


def test_a_directory_is_not_a_config(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        load(env_for(tmp_path))


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    assert load_settings(env_for(tmp_path, "# nothing yet\n")).launch_permits == 16


def test_config_errors_are_spec_errors_for_the_cli() -> None:
    assert issubclass(ConfigError, SpecError)
    assert str(ConfigError("f.yaml", [("a.b", "bad")])) == "f.yaml: invalid config\n  a.b: bad"


KEYS = ["allowed_clouds", "aws", "gcp", "launch_permits", "job_slots", "temporal", "autostop",
        "ssh_user", "default_region", "idle_minutes", "tls", "1", "~", "?"]
VALUES = ["[aws]", "{}", "x", "-1", "3", "null", "[", "{a: [b]}", "&a [*a]", "*b", "true",
          "'\\xff'", "[local, gcp]", "{idle_minutes: 2}", "{default_region: us-east-1}", ":"]


def test_garbage_never_escapes_as_anything_but_a_config_error(tmp_path: Path) -> None:
    """Random bytes, and random YAML made of the file's own words: each loads or is a
    ConfigError, never another exception."""
    rng = random.Random(20261201)
    texts: list[bytes] = [rng.randbytes(rng.randint(0, 64)) for _ in range(200)]
    for _ in range(200):
        lines = [f"{'  ' * rng.randint(0, 2)}{rng.choice(KEYS)}: {rng.choice(VALUES)}"
                 for _ in range(rng.randint(1, 5))]
        texts.append("\n".join(lines).encode())
    outcomes = {"ok": 0, "error": 0}
    for text in texts:
        try:
            load(env_for(tmp_path, text))
            outcomes["ok"] += 1
        except ConfigError as err:
            assert str(err).startswith(f"{tmp_path / 'config.yaml'}: invalid config")
            outcomes["error"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 200


def test_configured_users_match_exactly_first_then_by_glob_in_file_order() -> None:
    users = {"ami-*": "first", "ami-1": "exact", "*": "any"}
    assert configured_user(users, "ami-1") == "exact"
    assert configured_user(users, "ami-2") == "first"
    assert configured_user(users, None, "ubuntu/images/x") == "any"
    assert configured_user({}, "ami-1") is None


def test_cloud_identity_is_off_unless_the_file_or_the_variable_turns_it_on(
        tmp_path: Path) -> None:
    assert load(env_for(tmp_path)).settings.cloud_identity is False
    loaded = load(env_for(tmp_path, "cloud_identity: true\n"))
    assert loaded.settings.cloud_identity and loaded.sources["cloud_identity"].startswith("file ")
    loaded = load(env_for(tmp_path, "cloud_identity: true\n", ORCH_CLOUD_IDENTITY="0"))
    assert loaded.settings.cloud_identity is False
    assert loaded.sources["cloud_identity"] == "env ORCH_CLOUD_IDENTITY"
    with pytest.raises(ConfigError, match="ORCH_CLOUD_IDENTITY"):
        load(env_for(tmp_path, ORCH_CLOUD_IDENTITY="maybe"))
