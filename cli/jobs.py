"""``orch jobs``: managed jobs, as ``sky jobs`` has them (launch, queue, logs, cancel)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from cli import display
from cli.app import AsJson, Yes, console, fail, run
from cli.clusters import (
    Cloud,
    Cpus,
    Detach,
    DiskSize,
    DiskTierFlag,
    Env,
    EnvFile,
    Gpus,
    ImageId,
    Infra,
    InstanceType,
    Memory,
    NetworkTierFlag,
    NumNodes,
    Ports,
    Region,
    SecretFlag,
    UseSpot,
    Workdir,
    Zone,
    checked,
    planned,
)
from cli.tasks import overrides_from_flags, pipeline_from_args
from orch.client import Client, OrchError
from orch.client.managed_jobs import FOLLOW_POLL_S, ManagedJobs
from orch.managed_jobs import (
    KEEP_FIRST_EVENTS,
    ControllerEvent,
    JobSummary,
    ManagedJobState,
    ManagedJobStatus,
)
from orch.names import check_name
from orch.secret import redacted
from orch.spec import Pipeline, SpecError

jobs_app = typer.Typer(
    help="Managed jobs: tasks and pipelines that run to the end despite preemptions.",
    no_args_is_help=True,
)

JobId = Annotated[int | None, typer.Argument(help="Default: the latest job.")]


def _print_line(line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_status(state: ManagedJobState) -> None:
    run_ = state.current
    where = f"task {run_.index + 1}/{len(state.runs)}" if len(state.runs) > 1 else "job"
    console.print(f"[dim]Managed job {state.job_id}: {state.status} ({where}, "
                  f"{state.schedule_state.lower()})[/]", highlight=False)


def _exit_for(state: ManagedJobState) -> None:
    ok = state.status == ManagedJobStatus.SUCCEEDED
    style = "green" if ok else "red"
    failure = f": {state.failure}" if state.failure and not ok else ""
    console.print(f"Managed job {state.job_id}: [{style}]{state.status}[/]{failure}",
                  highlight=False)
    if not ok:
        raise typer.Exit(1)


def _pipeline(entrypoint: str, **flags: Any) -> Pipeline:
    """The tasks to run, validated before anything starts (exit 2 otherwise)."""
    try:
        overrides = overrides_from_flags(**flags)
        pipeline = pipeline_from_args(entrypoint, overrides)
    except SpecError as err:
        raise fail(str(err), code=2) from None
    many = len(pipeline.tasks) > 1
    for i, task in enumerate(pipeline.tasks):  # exits 2 naming task[i] and the field
        planned(entrypoint, task, overrides=overrides, prefix=f"task[{i}]." if many else "")
    return pipeline


def _show_plans(pipeline: Pipeline, as_json: bool) -> None:
    """Each task's candidates, as ``orch launch --dryrun`` shows one task's."""
    many = len(pipeline.tasks) > 1
    plans = [(candidates, checked(candidates)) for candidates in (
        planned(None, task, prefix=f"task[{i}]." if many else "")
        for i, task in enumerate(pipeline.tasks))]
    if as_json:
        print(json.dumps([
            {"task": i, "name": task.name,
             "candidates": display.plan_json(candidates, {c.cloud: c.ok for c in checks},
                                             redacted(task.secrets))}
            for i, (task, (candidates, checks)) in enumerate(zip(pipeline.tasks, plans,
                                                                 strict=True))]))
        return
    for i, (task, (candidates, checks)) in enumerate(zip(pipeline.tasks, plans, strict=True)):
        console.print(f"[bold]Task {i + 1}/{len(pipeline.tasks)}[/]"
                      + (f" ({task.name})" if task.name else ""), highlight=False)
        display.plan_table(console, candidates, checks, task.num_nodes)


def _job_name(name: str | None, pipeline: Pipeline, entrypoint: str) -> str | None:
    """The managed job's name (the flag's, else the YAML's), checked against the rule of
    orch.names before anything starts: exit 2 naming the flag or the file's field."""
    given = name or pipeline.name or pipeline.tasks[0].name
    if given is None:
        return None
    source, field = ("--name (-n)", "") if name else (entrypoint, "name")
    try:
        check_name(given, source, field, kind="managed-job name")
    except SpecError as err:
        raise fail(str(err), code=2) from None
    return name or pipeline.name


@jobs_app.command("launch")
def launch(
    entrypoint: Annotated[str, typer.Argument(
        help="Task YAML (several documents: a pipeline), or a command.")],
    name: Annotated[str | None, typer.Option("--name", "-n", help="The job's name.")] = None,
    infra: Infra = None, cloud: Cloud = None, region: Region = None, zone: Zone = None,
    instance_type: InstanceType = None, cpus: Cpus = None, memory: Memory = None,
    gpus: Gpus = None, num_nodes: NumNodes = None, use_spot: UseSpot = None,
    env: Env = None, env_file: EnvFile = None, secret: SecretFlag = None,
    workdir: Workdir = None, detach_run: Detach = False,
    disk_size: DiskSize = None, disk_tier: DiskTierFlag = None,
    network_tier: NetworkTierFlag = None, image_id: ImageId = None, ports: Ports = None,
    dryrun: Annotated[bool, typer.Option(
        "--dryrun", help="Show every task's plan and launch nothing (no control plane).")
    ] = False,
    as_json: AsJson = False,
    yes: Yes = False,
) -> None:
    """Launch a managed job: each task on a cluster of its own, recovered on preemption."""
    pipeline = _pipeline(entrypoint, infra=infra, cloud=cloud, region=region, zone=zone,
                         instance_type=instance_type, cpus=cpus, memory=memory, gpus=gpus,
                         num_nodes=num_nodes, use_spot=use_spot, env=env, env_file=env_file,
                         workdir=workdir, secret=secret, disk_size=disk_size,
                         disk_tier=disk_tier, network_tier=network_tier, image_id=image_id,
                         ports=ports)
    job_name = _job_name(name, pipeline, entrypoint)
    if dryrun:
        _show_plans(pipeline, as_json)
        return
    if not yes and sys.stdin.isatty():
        what = f"{len(pipeline.tasks)} tasks" if len(pipeline.tasks) > 1 else "a task"
        typer.confirm(f"Launch managed job {job_name or ''} ({what})?", default=True,
                      abort=True)

    async def go(client: Client) -> ManagedJobState | None:
        jobs = ManagedJobs(client)
        job_id = await jobs.launch(pipeline.tasks, job_name)
        console.print(f"Managed job [bold]{job_id}[/] submitted"
                      + (f" ({job_name})." if job_name else "."))
        if detach_run:
            console.print(f"Follow it with: orch jobs logs {job_id}")
            return None
        return await jobs.logs(job_id, follow=True, on_line=_print_line,
                               on_status=_print_status)

    final = run(go)
    if final is not None:
        _exit_for(final)


def _queue_table(jobs: list[JobSummary]) -> None:
    if not jobs:
        console.print("No managed jobs.")
        return
    now = datetime.now(UTC)
    table = Table(show_edge=False, box=None, header_style="bold")
    for column in ("ID", "NAME", "TASK", "STATUS", "RECOVERIES", "SUBMITTED", "DURATION",
                   "CLUSTER"):
        table.add_column(column)
    for j in jobs:
        table.add_row(str(j.id), j.name or "-", f"{j.task_index + 1}/{j.num_tasks}", j.status,
                      str(j.recoveries), display.ago(j.submitted_at),
                      display.duration(j.duration_s(now)), j.cluster or "-")
    console.print(table)


@jobs_app.command("queue")
def queue(as_json: AsJson = False) -> None:
    """List managed jobs, newest first."""
    jobs = run(lambda client: ManagedJobs(client).queue())
    if as_json:
        now = datetime.now(UTC)
        print(json.dumps([{**j.model_dump(mode="json"), "duration_s": j.duration_s(now)}
                          for j in jobs]))
    else:
        _queue_table(jobs)


def _event_line(event: ControllerEvent) -> str:
    at = event.at.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    task = f"task {event.task + 1} " if event.task is not None else ""
    return f"{at} {task}{event.kind}: {event.message}"


async def _latest(jobs: ManagedJobs) -> int:
    listed = await jobs.queue()
    if not listed:
        raise OrchError("there are no managed jobs yet")
    return listed[0].id


async def _controller_log(jobs: ManagedJobs, job_id: int, follow: bool) -> ManagedJobState:
    """Print the controller's events; with ``follow``, the new ones until the job ends.
    An event's position counts the ones dropped from the middle of the kept list."""
    printed = 0
    while True:
        state = await jobs.state(job_id)
        for index, event in enumerate(state.events):
            position = index if index < KEEP_FIRST_EVENTS else index + state.events_dropped
            if position < printed:
                continue
            if position > printed and index == KEEP_FIRST_EVENTS:
                _print_line(f"... ({position - printed} events not kept)")
            _print_line(_event_line(event))
            printed = position + 1
        if not follow or state.status.is_terminal:
            return state
        await asyncio.sleep(FOLLOW_POLL_S)


@jobs_app.command("logs")
def logs(
    job_id: JobId = None,
    controller: Annotated[bool, typer.Option(
        "--controller", help="What the controller did: launches, hops, preemptions, "
                             "restarts.")] = False,
    no_follow: Annotated[bool, typer.Option("--no-follow", help="Print what is there.")] = False,
) -> None:
    """Print a managed job's output across its tasks and recoveries; follow it to its end."""

    async def go(client: Client) -> ManagedJobState:
        jobs = ManagedJobs(client)
        wanted = job_id if job_id is not None else await _latest(jobs)
        if controller:
            return await _controller_log(jobs, wanted, follow=not no_follow)
        return await jobs.logs(wanted, follow=not no_follow, on_line=_print_line)

    final = run(go)
    if not no_follow and final.status != ManagedJobStatus.SUCCEEDED:
        raise typer.Exit(1)


@jobs_app.command("cancel")
def cancel(
    job_ids: Annotated[list[int] | None, typer.Argument(help="Managed job ids.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", "-a", help="Every unfinished job.")] = False,
    yes: Yes = False,
) -> None:
    """Cancel managed jobs: their clusters are torn down and their slots given back."""
    if not job_ids and not all_jobs:
        raise fail("name the managed jobs to cancel, or pass --all", code=2)
    if not yes:
        what = "all managed jobs" if all_jobs else "managed job(s) " + ", ".join(
            map(str, job_ids or []))
        typer.confirm(f"Cancel {what}?", abort=True)

    async def go(client: Client) -> None:
        jobs = ManagedJobs(client)
        if all_jobs:
            with display.Progress(console, "Cancelling every managed job") as progress:
                outcomes = await jobs.cancel_all(progress.step)
        else:
            outcomes = [await jobs.cancel(job_id) for job_id in job_ids or []]
        for outcome in outcomes:
            if outcome.requested:
                console.print(f"Cancelling managed job {outcome.job_id}.")
            else:
                console.print(f"Managed job {outcome.job_id} already ended ({outcome.status}).")
        if not outcomes:
            console.print("No managed job to cancel.")

    run(go)
