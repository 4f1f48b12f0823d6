"""Activities on the nodes: reach them, start Ray, sync files, run setup, submit jobs.

Work on several nodes runs in threads while the activity's own thread heartbeats, so a
worker that dies mid-call is noticed within the heartbeat timeout and the call retried.
Every step is idempotent: Ray is not started twice, a job id is not submitted twice.
Retries converge after a crash at any point: the runtime venv is built beside the one in
use and switched to only once complete (orch.runtime.install), and ``ray_node start``
records what it starts before starting it and stops what a failed or cut-short earlier
attempt left (orch.runtime.ray_node).
"""

from __future__ import annotations

import json
import shlex
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

from temporalio import activity

from activities.errors import typed_errors
from activities.heartbeat import beat_interval
from activities.storage import as_application_error
from orch.clouds.base import ClusterInfo, NodeInfo
from orch.clouds.errors import SetupError
from orch.contracts.runtime import (
    HEAD_JOBS,
    JOBS_ACTIVITY,
    RAY_HEALTHY,
    RUN_SETUP,
    SETUP_RUNTIME,
    START_RAY,
    STOP_RAY,
    SUBMIT_JOB,
    SYNC_FILES,
    WAIT_FOR_NODES,
    HeadJobsRequest,
    HealthRequest,
    JobsActivity,
    NodesRequest,
    SetupRequest,
    StartRayRequest,
    SubmitRequest,
    SyncRequest,
)
from orch.contracts.staging import StagedFiles, StagedTree
from orch.runtime.commands import CommandError, NodeUnreachableError
from orch.runtime.install import ensure_runtime
from orch.runtime.job_records import SECRETS_ENV, WORKDIR, JobRecord
from orch.runtime.ray_node import RAY_START_TIMEOUT_S
from orch.runtime.runner import runner_for
from orch.secret import REDACTED, clear_values
from orch.staging_cache import fetch
from orch.storage import get_store
from orch.storage.errors import StorageError

T = TypeVar("T")
UNREACHABLE_AFTER_S = 10.0  # for best-effort steps on nodes that may be gone


def on_every_node(nodes: list[NodeInfo], fn: Callable[[int, NodeInfo], T]) -> list[T]:
    """Run ``fn(rank, node)`` for every node in parallel, heartbeating until all are done."""
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes)))) as pool:
        futures: list[Future[T]] = [pool.submit(fn, rank, n) for rank, n in enumerate(nodes)]
        return _heartbeating(futures)


def _heartbeating(futures: list[Future[T]]) -> list[T]:
    """The futures' results, heartbeating while any is running (a large file downloading,
    a slow node) so the activity is not thought dead. A heartbeat from this thread waits
    for the worker's event loop, so it is sent a few times per heartbeat timeout
    (``beat_interval``), not at every check: at 5 a second, 150 launches in their node
    steps asked the loop of a worker watching 1,700 jobs for 750 callbacks a second."""
    every = beat_interval(activity.info().heartbeat_timeout)
    while True:
        activity.heartbeat()
        if not wait(futures, timeout=every).not_done:
            return [f.result() for f in futures]


def _node_cli(node: NodeInfo, module: str, args: str) -> str:
    return f"{shlex.quote(node.python)} -m orch.runtime.{module} {args}"


@activity.defn(name=WAIT_FOR_NODES)
@typed_errors
def wait_for_nodes(request: NodesRequest) -> None:
    """Wait until every node answers a command (SSH up, sandbox present)."""
    deadline = time.monotonic() + request.timeout_s

    def reach(rank: int, node: NodeInfo) -> None:
        delay = 1.0
        while True:
            try:
                with runner_for(node) as runner:
                    runner.check("true", timeout=60)
                return
            except (NodeUnreachableError, CommandError):
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 15)

    on_every_node(request.info.nodes, reach)


@activity.defn(name=SETUP_RUNTIME)
@typed_errors
def setup_runtime(request: NodesRequest) -> list[str]:
    """Install (or check) Ray and orch's node package on every node; returns each node's
    interpreter for orch's node-side modules, in the order of the nodes."""

    def install(rank: int, node: NodeInfo) -> str:
        with runner_for(node) as runner:
            return ensure_runtime(runner, node)

    return on_every_node(request.info.nodes, install)


@activity.defn(name=START_RAY)
@typed_errors
def start_ray(request: StartRayRequest) -> str:
    """Start Ray on the head, then on the workers; returns the head's GCS address.

    A retry (after a failure, a timeout or a worker killed mid-call) starts over on every
    node: a node whose completed start is alive for the same head reuses it, any other
    first stops what the earlier attempt left, so no node ends with two heads or raylets.
    """
    nodes = request.info.nodes

    def start(node: NodeInfo, head_address: str | None) -> str:
        args = f"start --ip {node.internal_ip} --cpus {max(1, int(node.cpus))}"
        args += f" --gpus {sum(node.gpus.values())}"
        if head_address:
            args += f" --head-address {head_address}"
        with runner_for(node) as runner:
            # ray_node gives up on ray start first, and cleans up after it.
            result = runner.check(_node_cli(node, "ray_node", args),
                                  timeout=RAY_START_TIMEOUT_S + 60)
        return str(json.loads(result.tail.splitlines()[-1])["gcs_address"])

    gcs_address = on_every_node(nodes[:1], lambda _, head: start(head, None))[0]
    on_every_node(nodes[1:], lambda _, worker: start(worker, gcs_address))
    return gcs_address


@activity.defn(name=SYNC_FILES)
@typed_errors
def sync_files(request: SyncRequest) -> None:
    """Copy the workdir to ``~/sky_workdir`` and each file mount to its path, on every node:
    staged files through this worker's cache (fetched from the staging store first)."""
    workdir, file_mounts = request.workdir, request.file_mounts
    if request.staged is not None:
        with ThreadPoolExecutor(max_workers=1) as pool:
            staged = request.staged
            workdir, file_mounts = _heartbeating([pool.submit(_fetch_staged, staged)])[0]

    def sync(rank: int, node: NodeInfo) -> None:
        with runner_for(node) as runner:
            if workdir:
                runner.upload(workdir, WORKDIR)
            for remote, local in file_mounts.items():
                runner.upload(local, remote)

    on_every_node(request.info.nodes, sync)


def _fetch_staged(staged: StagedFiles) -> tuple[str | None, dict[str, str]]:
    """The staged workdir and file mounts as paths in this worker's cache."""

    def local(tree: StagedTree) -> str:
        try:
            return str(fetch(tree, get_store(tree.root.store)))
        except StorageError as error:
            raise as_application_error(error) from error

    workdir = local(staged.workdir) if staged.workdir else None
    return workdir, {remote: local(tree) for remote, tree in staged.file_mounts.items()}


def node_envs(info: ClusterInfo, cluster_name: str, rank: int) -> dict[str, str]:
    ips = "\n".join(n.internal_ip for n in info.nodes)
    return {
        "ORCH_NODE_RANK": str(rank),
        "ORCH_NODE_IPS": ips,
        "ORCH_NUM_NODES": str(len(info.nodes)),
        "ORCH_CLUSTER_NAME": cluster_name,
        "SKYPILOT_NODE_RANK": str(rank),
        "SKYPILOT_NODE_IPS": ips,
        "SKYPILOT_NUM_NODES": str(len(info.nodes)),
    }


@activity.defn(name=RUN_SETUP)
@typed_errors
def run_setup(request: SetupRequest) -> None:
    """Run the task's setup on every node. On failure the job is recorded FAILED_SETUP on
    the head (with the setup's last lines as its log) and SetupError is raised."""

    secrets = clear_values(request.secrets)

    def setup(rank: int, node: NodeInfo):
        env = {**request.envs, **secrets, **node_envs(request.info, request.cluster_name, rank)}
        command = f"cd {WORKDIR} 2>/dev/null || cd ~; {request.setup}"
        with runner_for(node) as runner:
            return runner.run(command, env=env)

    results = on_every_node(request.info.nodes, setup)
    failed = [(rank, r) for rank, r in enumerate(results) if not r.ok]
    if not failed:
        return
    rank, result = failed[0]
    tail = "\n".join(f"(setup, rank={rank}) {line}"
                     for line in without_values(result.tail, secrets).splitlines())
    if request.job_id is not None:
        head = request.info.nodes[0]
        with runner_for(head) as runner, tempfile.TemporaryDirectory() as tmp:
            output = Path(tmp) / "setup.log"
            output.write_text(tail)
            remote = f".orch-node/setup-{request.job_id}.log"
            runner.upload(str(output), remote)
            name = f" --name {shlex.quote(request.job_name)}" if request.job_name else ""
            runner.check(_node_cli(
                head, "jobs", f"setup-failed {request.job_id}{name} --output-file ~/{remote}"
            ))
    raise SetupError(
        f"setup failed on rank {rank} ({request.info.nodes[rank].instance_id}) with exit code "
        f"{result.returncode}", tail,
    )


def without_values(text: str, secrets: dict[str, str]) -> str:
    """``text`` (a command's output, bound for a failure in the history) with every secret
    value replaced by ``<redacted>``, longest first (one may contain another)."""
    for value in sorted((v for v in secrets.values() if v), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


@activity.defn(name=SUBMIT_JOB)
@typed_errors
def submit_job(request: SubmitRequest) -> JobRecord:
    """Start the job's driver on the head; submitting the same id again is a no-op. The
    secrets go in the submit command's environment, never in a file here (see
    orch.runtime.jobs)."""
    spec = request.spec
    secrets = {SECRETS_ENV: json.dumps(clear_values(spec.secrets))} if spec.secrets else {}
    with runner_for(request.head) as runner, tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(spec.model_dump_json(exclude={"secrets"}))
        remote = f".orch-node/submit-{spec.id}.json"
        runner.upload(str(spec_file), remote)
        result = runner.check(_node_cli(request.head, "jobs", f"submit ~/{remote}"),
                              env=secrets)
    return JobRecord.model_validate_json(result.tail.splitlines()[-1])


@activity.defn(name=RAY_HEALTHY)
@typed_errors
def ray_healthy(request: HealthRequest) -> bool:
    """Whether every node answers and runs its raylet for this cluster."""

    def check(rank: int, node: NodeInfo) -> bool:
        args = f"health --ip {node.internal_ip} --gcs-address {request.gcs_address}"
        try:
            with runner_for(node, connect_deadline=UNREACHABLE_AFTER_S) as runner:
                return runner.run(_node_cli(node, "ray_node", args), timeout=60).ok
        except NodeUnreachableError:
            return False

    return all(on_every_node(request.info.nodes, check))


@activity.defn(name=JOBS_ACTIVITY)
@typed_errors
def jobs_activity(request: NodesRequest) -> JobsActivity:
    """What the head's job table says about idleness (for autostop)."""
    jobs = _job_table(request.info.nodes[0], "queue")
    moments = [m for j in jobs for m in (j.submitted_at, j.ended_at) if m is not None]
    return JobsActivity(active=any(not j.status.is_terminal for j in jobs),
                        last_activity_at=max(moments) if moments else None)


def _job_table(head: NodeInfo, args: str) -> list[JobRecord]:
    """What ``python -m orch.runtime.jobs ARGS`` prints on the head: the job table."""
    with runner_for(head) as runner:
        result = runner.check(_node_cli(head, "jobs", args), timeout=60)
    return [JobRecord.model_validate(j) for j in json.loads(result.tail.splitlines()[-1])]


@activity.defn(name=HEAD_JOBS)
@typed_errors
def head_jobs(request: HeadJobsRequest) -> list[JobRecord]:
    """The head's job table for ``orch queue`` (after ``orch cancel``'s cancels): read here,
    so that the CLI needs no way of its own to the head."""
    if request.cancel_all:
        return _job_table(request.head, "cancel --all")
    if request.cancel:
        return _job_table(request.head, "cancel " + " ".join(map(str, request.cancel)))
    return _job_table(request.head, "queue")


@activity.defn(name=STOP_RAY)
@typed_errors
def stop_ray(request: NodesRequest) -> list[str]:
    """Stop Ray on every node that answers; best effort. Returns what could not be done
    (a node that is gone is not an error)."""

    def stop(rank: int, node: NodeInfo) -> str | None:
        try:
            # Quick to give up: a head that is gone must not hold the teardown up.
            with runner_for(node, connect_deadline=UNREACHABLE_AFTER_S) as runner:
                result = runner.run(_node_cli(node, "ray_node", "stop"),
                                    timeout=request.timeout_s)
        except NodeUnreachableError as exc:
            return f"ray stop skipped on {node.instance_id}: unreachable ({exc})"
        return None if result.ok else f"ray stop failed on {node.instance_id}: {result.tail}"

    return [problem for problem in on_every_node(request.info.nodes, stop) if problem]
