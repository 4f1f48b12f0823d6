"""Secrets end to end: a launch on the local cloud, and a managed job, with recognisable
secret values (one in the YAML, one by ``--secret NAME`` from the caller's environment).
Setup and run get them (they print a hash of the values), and the clear values are nowhere
else: not in any workflow history of the namespace (every event's raw bytes), not in any
search attribute or memo, not in any file of ORCH_HOME outside the node (the server's
database and logs, the worker's log), and on the node only in the job's 0600 spec file."""

from __future__ import annotations

import base64
import hashlib
import secrets
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client as TemporalClient

from orch.client.codec import ENCODING, CodecKey, load_key, orch_data_converter
from tests.e2e.conftest import Orch

pytestmark = pytest.mark.e2e
TOKEN = f"s3cr3t-{secrets.token_hex(8)}"
OTHER = f"0th3r-{secrets.token_hex(8)}"
HASH = "printf '%s:%s' \"$API_TOKEN\" \"$OTHER\" | sha256sum | cut -c1-16"
TASK = f"""\
name: secretive
resources: {{infra: local}}
envs: {{VISIBLE: plain-env-value}}
secrets: {{API_TOKEN: {TOKEN}, OTHER: null}}
setup: |
  echo "setup-hash=$({HASH})"
run: |
  echo "run-hash=$({HASH}) $VISIBLE"
"""


def needles() -> list[bytes]:
    clear = [TOKEN.encode(), OTHER.encode()]
    return clear + [base64.b64encode(v) for v in clear]


@pytest.fixture(scope="module")
def launched(orch: Orch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    task = tmp_path_factory.mktemp("secrets") / "task.yaml"
    task.write_text(TASK)
    caller = Orch(orch.home)
    caller.env = {**orch.env, "OTHER": OTHER}
    result = caller("launch", "-y", "-c", "secretive", str(task), "--secret", "OTHER")
    job = caller("jobs", "launch", "-y", "-n", "secret-job", str(task), "--secret", "OTHER")
    yield result.stdout + result.stderr + "\n---managed job---\n" + job.stdout + job.stderr
    orch("down", "-y", "secretive", check=False)


@pytest_asyncio.fixture(scope="module")
async def temporal(orch: Orch, launched: str) -> AsyncIterator[TemporalClient]:
    state = orch.plane().state()
    assert state is not None
    converter = orch_data_converter(load_key(orch.env))
    yield await TemporalClient.connect(state.address, data_converter=converter)


def test_setup_and_run_got_the_values(launched: str) -> None:
    expected = hashlib.sha256(f"{TOKEN}:{OTHER}".encode()).hexdigest()[:16]
    cluster, managed = launched.split("---managed job---")
    assert f"run-hash={expected} plain-env-value" in cluster
    assert "Job 1 on secretive: SUCCEEDED" in cluster
    assert f"run-hash={expected} plain-env-value" in managed, managed
    assert TOKEN not in launched and OTHER not in launched


async def test_no_history_search_attribute_or_memo_holds_them(temporal: TemporalClient
                                                               ) -> None:
    scanned, encrypted, task_seen, named = 0, 0, False, 0
    async for listed in temporal.list_workflows():
        raw = listed.raw_info
        attributes = raw.search_attributes.SerializeToString() + raw.memo.SerializeToString()
        assert not [n for n in needles() if n in attributes], listed.id
        named += b"secretive" in attributes
        history = await temporal.get_workflow_handle(listed.id, run_id=listed.run_id
                                                     ).fetch_history()
        for event in history.events:
            data = event.SerializeToString()
            assert not [n for n in needles() if n in data], (listed.id, event.event_type)
            encrypted += data.count(ENCODING)
            task_seen = task_seen or b"plain-env-value" in data
        scanned += 1
    # The scan reads what it should: the cluster's attributes, and the launch's inputs,
    # encrypted whole (the task's plain env value is inside them).
    assert scanned >= 3 and named and encrypted and not task_seen, (
        scanned, named, encrypted, task_seen)


def test_no_file_of_orch_home_holds_them_but_the_nodes_job_spec(orch: Orch,
                                                                launched: str) -> None:
    [node] = orch.node_homes("secretive")
    server = orch.home / "server"
    assert (server / "worker.log").is_file() and (server / "temporal.db").is_file()
    holding = [path for path in orch.home.rglob("*") if path.is_file()
               and any(n in path.read_bytes() for n in needles())]
    specs = [p for p in holding if p.is_relative_to(node)]
    assert holding == specs, [str(p) for p in holding]
    assert [p.relative_to(node) for p in specs] == [Path(".orch-node/jobs/1/spec.json")]
    assert stat.S_IMODE(specs[0].stat().st_mode) == 0o600



async def test_a_cli_with_another_key_is_told_and_the_worker_names_both_keys(
        orch: Orch, temporal: TemporalClient, tmp_path: Path) -> None:
    """Run last: it leaves a cluster workflow that no worker can read (then terminated)."""
    other = CodecKey.generate()
    task = tmp_path / "task.yaml"
    task.write_text(TASK.replace("name: secretive", "name: wrong-key"))
    caller = Orch(orch.home)
    caller.env = {**orch.env, "OTHER": OTHER, "ORCH_CODEC_KEY": other.text()}
    try:
        result = caller("launch", "-y", "-c", "wrong-key", str(task), "--secret", "OTHER",
                        check=False, timeout=120)
        shown = " ".join((result.stdout + result.stderr).split())
        assert result.returncode == 1 and "Traceback" not in shown, shown
        assert "another codec key" in shown, shown
        log = (orch.home / "server" / "worker.log").read_text(errors="replace")
        assert f"encrypted with orch codec key {other.id}, but this process has key " \
               f"{load_key(orch.env).id}" in log
    finally:
        await temporal.get_workflow_handle("cluster/wrong-key").terminate()
