"""Generated input, seeded: every spec is either accepted (it loads and plans) or refused
with a SpecError that names the file and, for a spec that is a mapping, the field; never
another exception, never an unbounded message.

Three sources of input: mutations of valid specs (a field set to a value of the wrong type
or out of range, unknown keys, keys removed, nesting deeper than the limit, then text-level
damage: a line duplicated, the file cut short, re-encoded, an alias bomb appended), YAML-ish
text built from YAML's special characters, and random bytes. The checks run in-process
(load, then plan, as ``orch launch --dryrun`` does); a handful also go through the real CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orch.optimizer import HostResources
from orch.spec import load_pipeline
from orch.spec_errors import SpecError
from orch.spec_plan import check_plannable
from orch.spec_yaml import MAX_DEPTH

SEEDED = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.filter_too_much])
HOST = HostResources(cpus=4, memory_gb=16)
ORCH = str(Path(sys.executable).parent / "orch")

VALID: list[dict[str, Any]] = [
    {"run": "echo hi"},
    {"name": "train", "num_nodes": 2, "setup": "pip install x", "run": "python t.py",
     "envs": {"A": "1", "B": 2}, "resources": {"cloud": "aws", "cpus": "4+", "memory": "16+"}},
    {"resources": {"accelerators": "A100:8", "use_spot": True, "disk_size": 512,
                   "ports": [8080, "9000-9010"]}},
    {"resources": {"infra": "gcp/us-central1", "accelerators": {"T4": 1}}},
    {"resources": {"any_of": [{"cloud": "aws", "region": "us-east-1"},
                              {"infra": "gcp", "accelerators": "L4"}]}},
    {"resources": {"ordered": [{"infra": "aws/us-west-2"}, {"infra": "aws/us-east-1"}],
                   "cpus": 2}},
    {"resources": {"accelerators": ["V100", "T4"], "job_recovery": "failover"}},
    {"resources": {"instance_type": "m5.large", "image_id": "ami-123"}, "secrets": {"T": "x"}},
    {"resources": {"cloud": "aws", "disk_size": "512GB", "disk_tier": "high",
                   "network_tier": "best", "labels": {"team": "ml"}, "max_hourly_cost": 5.0,
                   "autostop": {"idle_minutes": 10, "down": True}, "memory": "32GB+"}},
]
PATHS = [
    "name", "workdir", "num_nodes", "resources", "envs", "envs.A", "secrets", "secrets.S",
    "file_mounts", "setup", "run", "resources.cloud", "resources.region", "resources.zone",
    "resources.infra", "resources.instance_type", "resources.cpus", "resources.memory",
    "resources.accelerators", "resources.use_spot", "resources.disk_size", "resources.ports",
    "resources.image_id", "resources.job_recovery", "resources.any_of", "resources.ordered",
    "resources.any_of.0", "resources.any_of.0.accelerators", "resources.ordered.1.region",
    "rn", "resource", "resources.cpu", "resources.gpus", "resources.any_of.0.cloud_",
    "resources.disk_tier", "service", "config", "envs.BAD NAME", "file_mounts./x",
    "file_mounts.~/y", "workdir", "resources.labels", "resources.labels.team",
    "resources.autostop", "resources.autostop.idle_minutes", "resources.max_hourly_cost",
    "resources.network_tier", "resources.image_id.us-east-1", "resources.job_recovery.strategy",
]
WORDS = ["aws", "gcp", "azure", "local", "k8s", "lambda", "*", "aws/*/us-east-1a", "gcp/",
         "us-east-1", "us-east-99", "us-central1-a", "m5.large", "m5.lrage", "p3.2xlarge",
         "A100", "A100:8", "A100:0", "A100:0.5", "A100:-1", "A100:1e9", "T4:x", "a100-80gb",
         "4", "4+", "0", "-1", "8x", "16GB", "1e400", "nan", "inf", "yes", "no", "on", "",
         " ", "8080", "9000-8000", "0-10", "70000", "docker:ubuntu", "${A}", "$HOME/x",
         "failover", "EAGER_NEXT_REGION", "none", "\x00", "é", "🙂", "x" * 300]
# Values for the fields that name local paths (workdir, file_mounts sources).
PATH_WORDS = ["p" * 5000, "a\x00b", "~nosuchuser/x", ".", "..", "/", "/etc/passwd",
              "./missing", "/dev/null", "${A}/x", "s3://bucket", "~"]
scalars = (st.none() | st.booleans() | st.integers(-(10**12), 10**12)
           | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(WORDS)
           | st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(WORDS + PATHS) | st.text(max_size=6), inner, max_size=3), max_leaves=8)


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _set(spec: Any, path: str, value: Any) -> Any:
    """``spec`` with ``value`` at the dotted ``path`` (list indexes as numbers), creating
    what is missing; a part that cannot hold a child is replaced."""
    head, _, rest = path.partition(".")
    if isinstance(spec, list) and head.isdigit():
        items = list(spec) or [{}]
        index = min(int(head), len(items) - 1)
        items[index] = _set(items[index], rest, value) if rest else value
        return items
    mapping = dict(spec) if isinstance(spec, dict) else {}
    mapping[head] = _set(mapping.get(head), rest, value) if rest else value
    return mapping


def _delete(spec: dict[str, Any], path: str) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    if not rest:
        return {k: v for k, v in spec.items() if k != head}
    inner = spec.get(head)
    return {**spec, head: _delete(inner, rest)} if isinstance(inner, dict) else spec


@st.composite
def mutated_specs(draw: st.DrawFn) -> bytes:
    """A valid spec, changed a few times, dumped, maybe damaged as text."""
    spec: Any = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        kind = draw(st.sampled_from(["set", "set", "set", "delete", "deep"]))
        if kind == "delete" and isinstance(spec, dict):
            spec = _delete(spec, path)
        else:
            depth = draw(st.sampled_from([MAX_DEPTH - 5, MAX_DEPTH + 5]))
            words = PATH_WORDS if path.startswith(("workdir", "file_mounts")) else WORDS
            value = draw(st.sampled_from(words) | values)
            spec = _set(spec, path, _nested(depth) if kind == "deep" else value)
    pipeline = [{"name": "p"}, spec, draw(st.sampled_from(VALID))]
    documents = [spec] if draw(st.booleans()) else pipeline
    text = yaml.safe_dump_all(documents, allow_unicode=True, sort_keys=False)
    return draw(damaged(text))


@st.composite
def damaged(draw: st.DrawFn, text: str) -> bytes:
    lines = text.splitlines(keepends=True)
    how = draw(st.sampled_from(["none", "none", "duplicate", "cut", "latin-1", "utf-16",
                                "bom", "bomb", "tabs"]))
    if how == "duplicate" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(draw(st.integers(i + 1, len(lines))), lines[i])
    if how == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    if how == "bomb":
        bomb = "x0: &x0 [a, a, a, a, a, a, a, a]\n" + "".join(
            f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 8)}]\n" for i in range(1, 9))
        lines.append(bomb)
    if how == "tabs":
        lines = [line.replace("  ", "\t", 1) for line in lines]
    result = text if how == "cut" else "".join(lines)
    if how == "latin-1":
        return result.encode("latin-1", "replace") + "é\n".encode("latin-1")
    if how == "utf-16":
        return result.encode("utf-16")
    if how == "bom":
        return b"\xef\xbb\xbf" + result.encode("utf-8")
    return result.encode("utf-8", "surrogatepass")


yamlish = st.text(st.sampled_from(list("{}[]:-,&*!|>?'\"#%@` \n\tabc019.") + ["\u00e9", "\ufeff"]),
                  max_size=120).map(lambda t: t.encode("utf-8"))

FILE_LEVEL = ("not UTF-8 text", "a binary file", "not valid", "line ", "the file holds no task",
              "expected a mapping of task fields")


def outcome(file: Path) -> str:
    """"accepted" or "refused"; any other exception fails the test that called it."""
    try:
        pipeline = load_pipeline(file)
        check_plannable(pipeline.tasks, str(file), host=HOST)
    except SpecError as err:
        message = str(err)
        assert message.startswith(f"{file}: invalid task spec\n"), message
        assert err.problems and len(message) < 20_000, message[:2000]
        for field, text in err.problems:
            assert text.strip(), message
            assert field or text.startswith(FILE_LEVEL), message
        return "refused"
    return "accepted"


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "task.yaml"


def _check(spec_file: Path, content: bytes, seen: dict[str, int]) -> None:
    spec_file.write_bytes(content)
    result = outcome(spec_file)
    seen[result] = seen.get(result, 0) + 1


def test_mutated_specs_are_accepted_or_refused_by_field(spec_file: Path) -> None:
    seen: dict[str, int] = {}

    @settings(SEEDED, max_examples=2500)
    @given(mutated_specs())
    def check(content: bytes) -> None:
        _check(spec_file, content, seen)

    check()
    assert seen.get("accepted", 0) > 50 and seen.get("refused", 0) > 1000, seen


def test_yamlish_text_and_random_bytes_never_crash(spec_file: Path) -> None:
    seen: dict[str, int] = {}

    @settings(SEEDED, max_examples=1500)
    @given(yamlish | st.binary(max_size=400))
    def check(content: bytes) -> None:
        _check(spec_file, content, seen)

    check()
    assert seen.get("refused", 0) > 500, seen


def test_a_handful_through_the_real_cli(tmp_path: Path) -> None:
    """The same property where the user meets it: exit 0 or 2, no traceback."""
    env = {**os.environ, "ORCH_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    for key in ("TEMPORAL_ADDRESS", "ORCH_CONFIG"):
        env.pop(key, None)
    codes: list[int] = []

    @settings(SEEDED, max_examples=6)
    @given(mutated_specs() | st.binary(max_size=200))
    def check(content: bytes) -> None:
        (tmp_path / "t.yaml").write_bytes(content)
        result = subprocess.run([ORCH, "launch", "--dryrun", "t.yaml"], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=120,
                                stdin=subprocess.DEVNULL)
        assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
        assert result.returncode in (0, 2), result.stderr[-3000:]
        if result.returncode == 2:
            assert result.stderr.startswith("Error: t.yaml: invalid task spec"), result.stderr
        codes.append(result.returncode)

    check()
    assert 2 in codes
