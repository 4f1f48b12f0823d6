"""Every kind of user mistake through the real ``orch launch --dryrun`` console script: exit
code 2, one message naming the file (or the flag) and the field path, a close match where
one exists, never a traceback, and no control plane started. An exception orch does not
expect becomes "internal error, please report" and a log file, exit 1."""

from __future__ import annotations

import codecs
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orch.server import ControlPlane
from orch.spec_yaml import MAX_BYTES, MAX_DEPTH

ORCH = str(Path(sys.executable).parent / "orch")


def _bomb() -> str:
    """The "billion laughs": eleven levels of nine aliases each, 9**11 values expanded."""
    lines, previous = ["a: &a [x, x, x, x, x, x, x, x, x]"], "a"
    for level in range(1, 12):
        lines.append(f"b{level}: &b{level} [{', '.join([f'*{previous}'] * 9)}]")
        previous = f"b{level}"
    return "\n".join([*lines, f"run: *{previous}"]) + "\n"


def _merge_bomb() -> str:
    """The same through merge keys (``<<: [*a, *a …]``), which PyYAML flattens in place."""
    lines = ["a0: &a0 {k0: 1, k1: 2, k2: 3, k3: 4}"]
    for level in range(1, 12):
        lines.append(f"a{level}: &a{level} {{<<: [{', '.join([f'*a{level - 1}'] * 9)}], "
                     f"z{level}: 1}}")
    return "\n".join([*lines, "run: x"]) + "\n"


# name → (file content, extra arguments, what the message must say)
CASES: dict[str, tuple[bytes | str, list[str], list[str]]] = {
    "binary": (bytes(range(256)) * 4, [],
               ["a binary file, not UTF-8 text (byte 0x80 at line 2 column 118)"]),
    "latin1": ("run: echo café\n".encode("latin-1"), [],
               ["not UTF-8 text (byte 0xe9 at line 1 column 14)"]),
    "utf16_no_bom": ("run: echo hé\n".encode("utf-16-le"), [], ["not UTF-8 text"]),
    # libyaml (when PyYAML has it) stops flow nesting at 1000 itself, with its own words
    "deep_flow": ("run: " + "[" * 5000 + "]" * 5000 + "\n", [], ["nest", "line 1"]),
    "deep_block": ("".join(f"{' ' * i}k{i}:\n" for i in range(MAX_DEPTH + 6)) + "\n", [],
                   [f"line {MAX_DEPTH + 1}: nested more than {MAX_DEPTH} levels deep"]),
    "alias_bomb": (_bomb(), [], ["once aliases (*name) are expanded"]),
    "merge_bomb": (_merge_bomb(), [], ["<<: more than 100,000 values once aliases"]),
    "recursive_alias": ("run: &a [*a]\n", [], ["run[0]: line 1: an alias refers to the node"]),
    "too_big": ("run: " + "x" * (MAX_BYTES + 10) + "\n", [], ["at most 1,048,576 (1 MiB)"]),
    "huge_value": ("resources:\n  cpus: '" + "9x" * 400_000 + "'\n", [],
                   ["resources.cpus: expected a positive number", "'9x9x9x", "…"]),
    "long_key": ("resources:\n  " + "k" * 1000 + ": 1\n", [],
                 ["resources.kkkk", "…: unknown field"]),
    # PyYAML takes keys of at most 1024 characters; past that, it is not YAML it reads
    "huge_key": ("resources:\n  " + "k" * 500_000 + ": 1\n", [],
                 ["not valid YAML: mapping values are not allowed", "line 2"]),
    "duplicate_key": ("run: a\nresources:\n  cpus: 2\nrun: b\n", [],
                      ["run: the key 'run' is given twice (lines 1 and 4)"]),
    "duplicate_nested": ("resources:\n  cpus: 2\n  cpus: 4\n", [],
                         ["resources.cpus: the key 'cpus' is given twice (lines 2 and 3)"]),
    "port_too_big": ("resources:\n  ports: 70000\n", [],
                     ["resources.ports: ports are 1 to 65535, got 70000 (line 2)"]),
    "port_zero": ("resources:\n  ports: [8080, 0]\n", [],
                  ["resources.ports: ports are 1 to 65535"]),
    "port_reversed": ("resources:\n  ports: 9000-8000\n", [],
                      ["resources.ports: the range 9000-8000 is reversed"]),
    "spot_string": ('resources:\n  use_spot: "yes"\n', [],
                    ["resources.use_spot: expected true or false"]),
    "spot_number": ("resources:\n  use_spot: 1\n", [],
                    ["resources.use_spot: expected true or false"]),
    "empty_any_of": ("resources:\n  any_of: []\n", [], ["resources.any_of: an empty list"]),
    "empty_ordered": ("resources:\n  ordered: []\n", [], ["resources.ordered: an empty list"]),
    "disk_huge": ("resources:\n  disk_size: 100000000\n", [],
                  ["resources.disk_size: Input should be less than or equal to 65536"]),
    "disk_zero": ("resources:\n  disk_size: 0\n", [], ["resources.disk_size"]),
    "nodes_zero": ("num_nodes: 0\n", [], ["num_nodes: Input should be greater than or equal to 1"]),
    "nodes_negative": ("num_nodes: -3\n", [], ["num_nodes"]),
    "nodes_fraction": ("num_nodes: 1.5\n", [], ["num_nodes: expected a whole number"]),
    "nodes_huge": ("num_nodes: 100000\n", [],
                   ["num_nodes: Input should be less than or equal to 1000"]),
    "gpus_zero": ("resources:\n  accelerators: A100:0\n", [],
                  ["resources.accelerators: count of 'A100' must be at least 1"]),
    "gpus_huge": ("resources:\n  accelerators: {A100: 1000}\n", [],
                  ["resources.accelerators: count of 'A100' is 1000; at most 64 per node"]),
    "gpus_fraction": ("resources:\n  accelerators: A100:0.5\n", [],
                      ["resources.accelerators: count of 'A100' must be a whole number"]),
    "gpus_in_any_of": ("resources:\n  any_of:\n    - accelerators: T4\n    - accelerators: T4:-1\n",
                       [], ["resources.any_of[1].accelerators: count of 'T4' must be at least 1, "
                            "got -1 (line 4)"]),
    "workdir_nul": ('workdir: "a\\0b"\n', [], ["workdir: ", "contains a NUL character"]),
    "mount_too_long": ("file_mounts:\n  /x: " + "a" * 5000 + "\n", [],
                       ["file_mounts./x: ", "aaa…", "is not a usable path: too long"]),
    "bucket_mode": ("file_mounts:\n  /checkpoint:\n    name: ckpt-1\n    mode: MOUNTED\n", [],
                    ["file_mounts./checkpoint.mode: expected MOUNT, COPY or MOUNT_CACHED (got "
                     "'MOUNTED'); did you mean 'MOUNT' or 'MOUNT_CACHED'? (line 4)"]),
    "bucket_field": ("file_mounts:\n  /checkpoint:\n    nmae: ckpt-1\n", [],
                     ["file_mounts./checkpoint.nmae: unknown field; did you mean 'name'?"]),
    "bucket_store": ("file_mounts:\n  /c:\n    name: ckpt-1\n    store: gsc\n", [],
                     ["file_mounts./c.store: expected s3, gcs, azure or local (got 'gsc'); did "
                      "you mean 'gcs'?"]),
    "bucket_name_s3": ("file_mounts:\n  /c:\n    name: My_Ckpt\n    store: s3\n", [],
                       ["file_mounts./c.name: 'My_Ckpt' is not a valid s3 bucket name: may "
                        "contain only lowercase letters, digits, '.' and '-' (not 'C', 'M', "
                        "'_')"]),
    "bucket_persistent": ("file_mounts:\n  /c:\n    name: ckpt-1\n    persistent: 'no'\n", [],
                          ["file_mounts./c.persistent: expected true or false"]),
    "env_mapping": ("envs:\n  A: {b: 1}\n", [], ["envs: A: expected a string or a number"]),
    "env_list": ("envs:\n  A: [1, 2]\n", [], ["envs: A: expected a string or a number"]),
    "unknown_region": ("resources:\n  cloud: aws\n  region: us-east-99\n", [],
                       ["resources.region: unknown region 'us-east-99'", "did you mean"]),
    "unknown_region_infra": ("resources:\n  infra: aws/us-east-99\n", [],
                             ["resources.infra: unknown region 'us-east-99' on aws"]),
    "unknown_region_any_of": ("resources:\n  any_of:\n    - infra: aws/us-east-1\n"
                              "    - infra: gcp/europe-nowhere1\n", [],
                              ["resources.any_of[1].infra: unknown region 'europe-nowhere1'"]),
    "unknown_zone_inherited": ("resources:\n  infra: aws\n  any_of:\n    - region: us-east-1\n"
                               "    - zone: us-east-1z\n", [],
                               ["resources.any_of[1].zone: unknown zone 'us-east-1z' on aws"]),
    "unknown_instance_type": ("resources:\n  instance_type: m5.lrage\n", [],
                              ["resources.instance_type: unknown instance type", "'m5.large'"]),
    "unknown_accelerator": ("resources:\n  any_of:\n    - cloud: aws\n    - accelerators: A1000\n",
                            [], ["resources.any_of[1].accelerators: unknown accelerator 'A1000'",
                                 "did you mean 'A100'"]),
    "type_lacks_accelerator": ("resources:\n  instance_type: m5.large\n  accelerators: A100\n", [],
                               ["resources: No resources satisfy A100:1, m5.large"]),
    "flag_cpus": ("run: a\n", ["--cpus", "abc"], ["--cpus", "expected a positive number"]),
    "flag_region": ("run: a\n", ["--region", "us-east-99"], ["--region", "unknown region"]),
    "flag_gpus": ("run: a\n", ["--gpus", "A100:x"], ["--gpus", "whole count"]),
    "flag_env": ("run: a\n", ["--env", "=x"], ["--env", "'=x': expected NAME=VALUE"]),
    "flag_cloud": ("run: a\n", ["--cloud", "foo"], ["--cloud", "unknown cloud 'foo'"]),
    "flag_instance_type": ("resources:\n  cloud: aws\n", ["--instance-type", "m5.lrage"],
                           ["--instance-type", "did you mean 'm5.large'"]),
    "flag_infra": ("run: a\n", ["--infra", "aws/us-east-99"], ["--infra", "unknown region"]),
    "flag_workdir": ("run: a\n", ["--workdir", "/no/such/dir"], ["--workdir", "not a directory"]),
    "flag_env_file_endless": ("run: a\n", ["--env-file", "/dev/zero"],
                              ["--env-file /dev/zero", "more than 1,048,576 bytes"]),
    "flag_env_file_missing": ("run: a\n", ["--env-file", "nope.env"],
                              ["--env-file nope.env", "no such file"]),
    "flag_nodes": ("run: a\n", ["--num-nodes", "5000"], ["--num-nodes", "expected 1 to 1000"]),
}
ACCEPTED_ENCODINGS = {
    "utf8_bom": codecs.BOM_UTF8 + b"run: echo caf\xc3\xa9\n",
    "utf16_bom": "run: echo café\n".encode("utf-16"),
}


def orch(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORCH_HOME": str(home), "COLUMNS": "200"}
    for key in ("TEMPORAL_ADDRESS", "ORCH_CONFIG"):
        env.pop(key, None)
    result = subprocess.run([ORCH, *args], env=env, cwd=cwd, capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-2000:]
    assert ControlPlane(home).state() is None and not (home / "server").exists()
    return result


def _write(path: Path, content: bytes | str) -> Path:
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_mistake_exits_2_naming_the_file_or_flag_and_the_field(name: str,
                                                                   tmp_path: Path) -> None:
    content, args, expected = CASES[name]
    _write(tmp_path / f"{name}.yaml", content)
    result = orch(tmp_path / "home", tmp_path, "launch", "--dryrun", *args, f"{name}.yaml")
    message = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stdout[-500:] + result.stderr[-2000:]
    blamed = next((a for a in args if a.startswith("--")), f"{name}.yaml")
    assert message.startswith(f"Error: {blamed}"), message[:300]
    assert "invalid task spec" in message.split("\n")[0]
    for text in expected:
        assert text in message, message[:1000]
    assert len(message) < 3000  # quoted values are cut, never megabytes


@pytest.mark.parametrize("name", sorted(ACCEPTED_ENCODINGS))
def test_utf8_with_a_bom_and_utf16_with_a_bom_are_read(name: str, tmp_path: Path) -> None:
    _write(tmp_path / "t.yaml", ACCEPTED_ENCODINGS[name])
    result = orch(tmp_path / "home", tmp_path, "launch", "--dryrun", "--json", "t.yaml")
    assert result.returncode == 0, result.stderr
    assert '"cloud": "local"' in result.stdout


def test_a_directory_entrypoint_is_refused_and_a_missing_yaml_named(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "tasks.yaml").mkdir()
    for entrypoint in ("code", "tasks.yaml"):
        result = orch(tmp_path / "home", tmp_path, "launch", "--dryrun", entrypoint)
        assert result.returncode == 2
        assert f"{entrypoint}: invalid task spec" in result.stderr
        assert "is a directory" in result.stderr
    missing = orch(tmp_path / "home", tmp_path, "launch", "--dryrun", "nope.yaml")
    assert missing.returncode == 2 and "nope.yaml: invalid task spec" in missing.stderr
    assert "no such file" in missing.stderr


@pytest.mark.parametrize("name", ["duplicate_key", "unknown_region", "flag_region"])
def test_a_real_launch_refuses_before_starting_anything(name: str, tmp_path: Path) -> None:
    """Not a dry run: the same refusal, and still no control plane (``orch`` checks that)."""
    content, args, expected = CASES[name]
    _write(tmp_path / "t.yaml", content)
    result = orch(tmp_path / "home", tmp_path, "launch", "-y", *args, "t.yaml")
    assert result.returncode == 2 and expected[0] in " ".join(result.stderr.split())


@pytest.mark.parametrize("mode", ["-y", "--dryrun"])
def test_jobs_launch_names_the_task_of_a_pipeline(mode: str, tmp_path: Path) -> None:
    _write(tmp_path / "p.yaml", "name: p\n---\nrun: a\n---\nresources:\n  accelerators: A1000\n")
    result = orch(tmp_path / "home", tmp_path, "jobs", "launch", mode, "p.yaml")
    message = " ".join(result.stderr.split())
    assert result.returncode == 2
    assert ("p.yaml: invalid task spec task[1].resources.accelerators: unknown accelerator"
            in message)


@pytest.mark.parametrize("argument", ["A100:abc", "A100:0", "A100:1.5", ":8", "A100:8:1"])
def test_show_gpus_refuses_a_bad_argument(argument: str, tmp_path: Path) -> None:
    result = orch(tmp_path / "home", tmp_path, "show-gpus", argument)
    assert result.returncode == 2
    assert f"orch show-gpus {argument!r}" in " ".join(result.stderr.split())


def test_show_gpus_takes_a_whole_float_count(tmp_path: Path) -> None:
    result = orch(tmp_path / "home", tmp_path, "show-gpus", "--json", "A100:8.0")
    assert result.returncode == 0 and '"count": 8' in result.stdout


def _failing_cli(home: Path, exception: str) -> subprocess.CompletedProcess[str]:
    """The real entry point, with ``orch show-gpus`` made to raise ``exception``."""
    script = ("import sys, cli.main, cli.catalog\n"
              "def boom(*args, **kwargs):\n"
              f"    raise {exception}\n"
              "cli.catalog.list_accelerators = boom\n"
              "sys.argv = ['orch', 'show-gpus', 'A100']\n"
              "cli.main.main()\n")
    env = {**os.environ, "ORCH_HOME": str(home)}
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=home.parent,
                          capture_output=True, text=True, timeout=120)


def test_an_interrupt_outside_a_command_is_a_line_not_a_traceback(tmp_path: Path) -> None:
    result = _failing_cli(tmp_path / "home", "KeyboardInterrupt")  # typer's own handling
    assert result.returncode == 130 and "Traceback" not in result.stderr + result.stdout


def test_an_unexpected_exception_is_logged_not_shown(tmp_path: Path) -> None:
    """A command made to fail as a bug would."""
    home = tmp_path / "home"
    result = _failing_cli(home, "RuntimeError('the catalog exploded')")
    log = home / "logs" / "cli-errors.log"
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert "internal error, please report: RuntimeError: the catalog exploded" in result.stderr
    assert str(log) in result.stderr
    logged = log.read_text()
    assert "Traceback" in logged and "the catalog exploded" in logged and "show-gpus" in logged
