"""orch.names: SkyPilot's rule for user names, and the name a cloud sees."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from orch.names import (
    CLOUD_NAME_RULES,
    CLOUD_SAFE_LENGTH,
    HASH_LENGTH,
    ID_ENV,
    ID_FILE,
    MAX_NAME_LENGTH,
    InvalidNameError,
    check_name,
    control_plane_hash,
    control_plane_id,
    name_on_cloud,
    name_problem,
    valid_on,
)
from orch.spec_errors import SpecError

PLANE = "a1b2c3"


@pytest.mark.parametrize("name", [
    "lora", "seed-1", "Cuda_11.8", "a", "A9", "my.cluster_name-2", "x" * MAX_NAME_LENGTH,
])
def test_skypilots_valid_names_are_accepted(name: str) -> None:
    assert name_problem(name) is None
    assert check_name(name, "--cluster (-c)") == name


@pytest.mark.parametrize(("name", "why"), [
    ("bad;name", "';'"),
    ("11.8cuda", "does not start with a letter"),
    ("-lead", "does not start with a letter"),
    ("_lead", "does not start with a letter"),
    ("trail-", "does not end with a letter or digit"),
    ("trail.", "does not end with a letter or digit"),
    ("has space", "' '"),
    ("naïve", "'ï'"),
    ("a/b", "'/'"),
    ("", "empty"),
    ("x" * (MAX_NAME_LENGTH + 1), f"more than {MAX_NAME_LENGTH}"),
])
def test_invalid_names_are_refused_with_the_reason_and_the_rule(name: str, why: str) -> None:
    problem = name_problem(name)
    assert problem is not None and why in problem
    with pytest.raises(InvalidNameError) as raised:
        check_name(name, "--cluster (-c)")
    message = str(raised.value)
    assert message.startswith("--cluster (-c): invalid cluster name")
    assert why in message
    if len(name) <= MAX_NAME_LENGTH and name:
        assert "starting with a letter" in message  # the rule itself is shown


def test_the_error_is_a_spec_error_naming_the_file_and_field() -> None:
    with pytest.raises(SpecError) as raised:  # the CLI's exit-2 type
        check_name("1bad", "job.yaml", "name", kind="managed-job name")
    assert str(raised.value).splitlines()[:2] == [
        "job.yaml: invalid managed-job name",
        "  name: '1bad' does not start with a letter; use letters, digits, '-', '_' and '.', "
        f"starting with a letter and ending with a letter or digit, at most {MAX_NAME_LENGTH} "
        "characters (SkyPilot's rule: [a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?)"]


def test_a_huge_name_is_quoted_cut_short() -> None:
    problem = name_problem("y" * 100_000)
    assert problem is not None and len(problem) < 200


def test_a_plain_name_gets_the_planes_hash() -> None:
    assert name_on_cloud("hello", PLANE) == "hello-a1b2c3"
    assert name_on_cloud("job-12-0", PLANE) == "job-12-0-a1b2c3"


def test_no_hash_means_the_users_name_as_before() -> None:
    assert name_on_cloud("Mixed_Case", "") == "Mixed_Case"


def test_two_planes_give_two_names() -> None:
    assert name_on_cloud("dev", "aaaaaa") != name_on_cloud("dev", "bbbbbb")


@pytest.mark.parametrize("name", [
    "hello", "Cuda_11.8", "UPPER", "a", "x" * MAX_NAME_LENGTH, "a.b_c-d" * 9, "Z9" * 31,
    "job-123456-7",
])
def test_every_name_on_cloud_is_valid_on_every_cloud(name: str) -> None:
    cloud_name = name_on_cloud(name, PLANE)
    assert len(cloud_name) <= CLOUD_SAFE_LENGTH == 35  # GCP's limit, the strictest
    assert cloud_name.endswith(f"-{PLANE}")
    for cloud in CLOUD_NAME_RULES:
        assert valid_on(cloud, cloud_name), (cloud, cloud_name)


def test_lowercase_clouds_refuse_what_aws_accepts() -> None:
    assert valid_on("aws", "Mixed-Case") and not valid_on("gcp", "Mixed-Case")
    assert not valid_on("azure", "Mixed-Case")
    assert valid_on("azure", "a" * 42) and not valid_on("azure", "a" * 43)
    assert valid_on("gcp", "a" * 35) and not valid_on("gcp", "a" * 36)


def test_names_made_alike_by_the_cloud_rule_stay_apart() -> None:
    """Lowercasing, '_'/'.' to '-' and cutting could merge names; a hash of the user's
    name keeps them apart."""
    merged = ["Dev", "dev", "d.ev", "d-ev", "d_ev"]
    assert len({name_on_cloud(n, PLANE) for n in merged}) == len(merged)
    long_a, long_b = "p" * 40 + "a", "p" * 40 + "b"
    assert name_on_cloud(long_a, PLANE) != name_on_cloud(long_b, PLANE)
    assert name_on_cloud(long_a, PLANE).startswith("pppp")


def test_a_cut_never_leaves_a_dash_before_the_hashes() -> None:
    cloud_name = name_on_cloud("a" * 21 + "-" * 5 + "b" * 20, PLANE)  # cut at "a--"
    assert "--" not in cloud_name and re.fullmatch(r"a+-[0-9a-f]{4}-a1b2c3", cloud_name)


def test_per_cloud_length_is_honoured_when_asked() -> None:
    assert len(name_on_cloud("z" * 60, PLANE, max_length=20)) == 20


def test_the_id_is_made_once_and_kept(tmp_path: Path) -> None:
    first = control_plane_id(tmp_path, env={})
    assert (tmp_path / ID_FILE).read_text().strip() == first and len(first) == 32
    assert control_plane_id(tmp_path, env={}) == first
    assert control_plane_id(tmp_path / "other", env={}) != first


def test_an_empty_id_file_is_made_again(tmp_path: Path) -> None:
    (tmp_path / ID_FILE).write_text("")
    made = control_plane_id(tmp_path, env={})
    assert made and (tmp_path / ID_FILE).read_text().strip() == made


def test_concurrent_first_uses_agree_on_one_id(tmp_path: Path) -> None:
    ids: list[str] = []
    threads = [threading.Thread(target=lambda: ids.append(control_plane_id(tmp_path, env={})))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 1 and len(ids) == 8


def test_the_hash_is_stable_and_tells_control_planes_apart(tmp_path: Path) -> None:
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    embedded_a = control_plane_hash(home_a, "embedded", env={})
    assert re.fullmatch(f"[0-9a-f]{{{HASH_LENGTH}}}", embedded_a)
    assert control_plane_hash(home_a, "embedded", env={}) == embedded_a  # stable
    assert control_plane_hash(home_b, "embedded", env={}) != embedded_a  # another machine
    # one ORCH_HOME, two servers (or namespaces): two control planes
    assert control_plane_hash(home_a, "temporal:7233/default", env={}) != embedded_a
    assert (control_plane_hash(home_a, "temporal:7233/default", env={})
            != control_plane_hash(home_a, "temporal:7233/team", env={}))


def test_the_env_id_replaces_everything(tmp_path: Path) -> None:
    env = {ID_ENV: "fleet-1"}
    pinned = control_plane_hash(tmp_path / "a", "embedded", env=env)
    assert pinned == control_plane_hash(tmp_path / "b", "x:1/y", env=env)
    assert pinned != control_plane_hash(tmp_path / "a", "embedded", env={ID_ENV: "fleet-2"})
    assert not (tmp_path / "a" / ID_FILE).exists()  # nothing written for a given id


@pytest.mark.parametrize("name", ["hello", "Cuda_11.8", "x" * MAX_NAME_LENGTH, "job-99999-3"])
def test_gcp_and_azure_derive_their_resource_names_from_it_within_their_limits(
    name: str,
) -> None:
    from orch.clouds import azure_resources as azure
    from orch.clouds.gcp_resources import cloud_cluster_name, node_names

    on_cloud = name_on_cloud(name, PLANE)
    assert cloud_cluster_name(on_cloud) == on_cloud  # GCP takes it as it is
    assert all(len(node) <= 63 for node, _ in node_names(on_cloud, 100))  # GCP instances
    assert len(azure.resource_group_name(on_cloud, "australiasoutheast")) <= 90
    assert all(len(vm) <= 64 for vm in azure.vm_names(on_cloud, 100))  # Linux VM names
