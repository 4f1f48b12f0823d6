"""Commands on clusters and their jobs: launch, exec, status, queue, logs, cancel."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from cli import display
from cli.app import AsJson, Yes, app, console, err_console, fail, run, settings
from cli.tasks import overrides_from_flags, task_source, written_task_from_args
from orch.check import CloudCheck, check_clouds
from orch.client import Client, ClusterSummary, OrchError, new_cluster_name
from orch.client.managed_jobs import ManagedJobs
from orch.failover_rules import Candidate
from orch.lifecycle import Autostop
from orch.managed_jobs import JobSummary
from orch.names import check_name
from orch.runtime.job_records import JobRecord
from orch.secret import redacted
from orch.spec import SpecError, Task
from orch.spec_overrides import Overrides
from orch.spec_plan import checked_plan
from orch.status import ClusterStatus, JobStatus

# Options shared by launch and exec (they override the task YAML).
Infra = Annotated[str | None, typer.Option(
    "--infra", help="CLOUD, CLOUD/REGION or CLOUD/REGION/ZONE; * for any part: aws, "
    "gcp/us-central1, */us-east-1.")]
Cloud = Annotated[str | None, typer.Option("--cloud", help="local, aws, gcp or azure.")]
Region = Annotated[str | None, typer.Option("--region")]
Zone = Annotated[str | None, typer.Option("--zone")]
InstanceType = Annotated[str | None, typer.Option("--instance-type", "-t")]
Cpus = Annotated[str | None, typer.Option("--cpus", help="e.g. 4 or 4+.")]
Memory = Annotated[str | None, typer.Option("--memory", help="GB, e.g. 16 or 16+.")]
Gpus = Annotated[str | None, typer.Option("--gpus", help="e.g. A100:8.")]
NumNodes = Annotated[int | None, typer.Option("--num-nodes", min=1)]
UseSpot = Annotated[bool | None, typer.Option("--use-spot/--no-use-spot")]
Env = Annotated[list[str] | None, typer.Option("--env", help="K=V (or K: taken from your env).")]
EnvFile = Annotated[str | None, typer.Option(
    "--env-file", help="A dotenv file of K=V lines (--env wins over it).")]
SecretFlag = Annotated[list[str] | None, typer.Option(
    "--secret", help="K=V (or K: taken from your env); shown as <redacted>.")]
Workdir = Annotated[str | None, typer.Option("--workdir")]
DiskSize = Annotated[str | None, typer.Option(
    "--disk-size", help="OS disk in GB, or with a unit: 256GB, 1TB.")]
DiskTierFlag = Annotated[str | None, typer.Option(
    "--disk-tier", help="low, medium, high, ultra or best.")]
NetworkTierFlag = Annotated[str | None, typer.Option(
    "--network-tier", help="standard or best.")]
ImageId = Annotated[str | None, typer.Option("--image-id", help="The image to boot.")]
Ports = Annotated[list[str] | None, typer.Option(
    "--ports", help="A port or range to open, e.g. 8080 or 10000-10010; repeat for more.")]
Detach = Annotated[bool, typer.Option("--detach-run", "-d", help="Do not follow the output.")]


def check_cluster_flag(cluster: str | None) -> None:
    """A new cluster's name follows the rule (orch.names) before anything is read or
    started: exit 2 naming the flag."""
    if cluster is not None:
        try:
            check_name(cluster, "--cluster (-c)")
        except SpecError as err:
            raise fail(str(err), code=2) from None


def parse_task(entrypoint: str | None, **flags: Any) -> Task:
    return parse_task_args(entrypoint, **flags)[0]


def parse_task_args(entrypoint: str | None, **flags: Any) -> tuple[Task, Task, Overrides]:
    """The task, the task as written, and the flags that override it; a mistake in either
    exits 2."""
    try:
        overrides = overrides_from_flags(**flags)
        return (*written_task_from_args(entrypoint, overrides), overrides)
    except SpecError as err:
        raise fail(str(err), code=2) from None


def planned(entrypoint: str | None, task: Task, written: Task | None = None,
            overrides: Overrides | None = None, prefix: str = "") -> list[Candidate]:
    """The task's candidates; a name the catalog does not know exits 2, naming the file
    and field (``prefix``: the task of a pipeline) or the flag it came from, before
    anything starts."""
    config = settings()
    try:
        return checked_plan(task, task_source(entrypoint), flags=overrides, written=written,
                            prefix=prefix, allowed_clouds=config.allowed_clouds,
                            default_regions=config.default_regions())
    except SpecError as err:
        raise fail(str(err), code=2) from None


async def follow_job(client: Client, cluster: str, job_id: int) -> JobRecord:
    record = await client.logs(cluster, job_id, follow=True,
                               on_line=lambda line: console.print(line, markup=False,
                                                                   highlight=False))
    return record


def exit_for(record: JobRecord, cluster: str) -> None:
    style = "green" if record.status == JobStatus.SUCCEEDED else "red"
    console.print(f"Job {record.id} on {cluster}: [{style}]{record.status}[/]")
    if record.status != JobStatus.SUCCEEDED:
        raise typer.Exit(1)


@app.command()
def launch(
    entrypoint: Annotated[str | None, typer.Argument(help="Task YAML, or a command.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c")] = None,
    infra: Infra = None, cloud: Cloud = None, region: Region = None, zone: Zone = None,
    instance_type: InstanceType = None, cpus: Cpus = None, memory: Memory = None,
    gpus: Gpus = None, num_nodes: NumNodes = None, use_spot: UseSpot = None,
    env: Env = None, env_file: EnvFile = None, secret: SecretFlag = None,
    workdir: Workdir = None, detach_run: Detach = False,
    disk_size: DiskSize = None, disk_tier: DiskTierFlag = None,
    network_tier: NetworkTierFlag = None, image_id: ImageId = None, ports: Ports = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="The task's name.")] = None,
    dryrun: Annotated[bool, typer.Option(
        "--dryrun", help="Show the plan (candidates, cheapest first) and launch nothing.")] = False,
    as_json: AsJson = False,
    retry_until_up: Annotated[bool, typer.Option(
        "--retry-until-up", help="When nothing has capacity, keep trying in rounds.")] = False,
    idle_minutes: Annotated[int | None, typer.Option(
        "--idle-minutes-to-autostop", "-i", min=0, help="Autostop after idle minutes.")] = None,
    down: Annotated[bool, typer.Option(
        "--down", help="With -i: tear down instead of stopping.")] = False,
    yes: Yes = False,
) -> None:
    """Launch a cluster (or reuse an UP one) and run a task on it."""
    check_cluster_flag(cluster)
    task, written, overrides = parse_task_args(
        entrypoint, name=name, infra=infra, cloud=cloud, region=region, zone=zone,
        instance_type=instance_type, cpus=cpus, memory=memory, gpus=gpus, num_nodes=num_nodes,
        use_spot=use_spot, env=env, env_file=env_file, workdir=workdir, secret=secret,
        disk_size=disk_size, disk_tier=disk_tier, network_tier=network_tier,
        image_id=image_id, ports=ports)
    candidates = planned(entrypoint, task, written, overrides)
    if dryrun:
        show_plan(task, candidates, as_json)
        return
    autostop = None
    if idle_minutes is not None or down:
        autostop = Autostop(idle_minutes=idle_minutes or 0, down=down)
    if not yes and sys.stdin.isatty():
        where = f"cluster {cluster}" if cluster else "a new cluster"
        typer.confirm(f"Launch {task.num_nodes} node(s) on {where}?", default=True, abort=True)
    target = cluster or new_cluster_name()

    async def go(client: Client) -> tuple[str, int | None]:
        with display.Progress(console, f"Launching {target}") as progress:
            result = await client.launch(task, target, on_step=progress.step,
                                         retry_until_up=retry_until_up, autostop=autostop)
        name_ = result.record.name
        verb = "launched" if result.provisioned else "reused"
        console.print(f"Cluster [bold]{name_}[/] {verb}: {result.record.task_resources}")
        if result.job_id is None:
            return name_, None
        console.print(f"Job {result.job_id} submitted.")
        if detach_run:
            console.print(f"Follow it with: orch logs {name_} {result.job_id}")
            return name_, None
        exit_for(await follow_job(client, name_, result.job_id), name_)
        return name_, result.job_id

    run(go, on_interrupt=lambda: ask_to_cancel(target))


def ask_to_cancel(cluster: str) -> None:
    """Ctrl-C in ``orch launch``: at a terminal, ask whether to cancel the launch or leave
    it running in the background (SkyPilot detaches); elsewhere, leave it running."""
    later = f"orch status shows it; orch down {cluster} removes it"
    if not sys.stdin.isatty() or not typer.confirm(
            f"\nCancel the launch of {cluster}? (no: it goes on in the background)",
            default=False, err=True):
        err_console.print(f"The launch of {cluster} goes on in the background ({later}).")
        return
    cut = run(lambda client: client.cancel_operation(cluster))
    err_console.print(f"Cancelled the {cut} of {cluster}; the nodes it was making are gone "
                      f"({later})." if cut else f"Nothing was under way on {cluster}.")


@app.command("exec")
def exec_(
    cluster: Annotated[str, typer.Argument(help="An UP cluster.")],
    entrypoint: Annotated[str | None, typer.Argument(help="Task YAML, or a command.")] = None,
    infra: Infra = None, cloud: Cloud = None, region: Region = None, zone: Zone = None,
    instance_type: InstanceType = None, cpus: Cpus = None, memory: Memory = None,
    gpus: Gpus = None, num_nodes: NumNodes = None, use_spot: UseSpot = None,
    env: Env = None, env_file: EnvFile = None, secret: SecretFlag = None,
    workdir: Workdir = None, detach_run: Detach = False,
    disk_size: DiskSize = None, disk_tier: DiskTierFlag = None,
    network_tier: NetworkTierFlag = None, image_id: ImageId = None, ports: Ports = None,
    name: Annotated[str | None, typer.Option("--name", "-n")] = None,
) -> None:
    """Run a task on an UP cluster (no provisioning, no setup)."""
    task = parse_task(entrypoint, name=name, infra=infra, cloud=cloud, region=region,
                      zone=zone, instance_type=instance_type, cpus=cpus, memory=memory,
                      gpus=gpus, num_nodes=num_nodes, use_spot=use_spot, env=env,
                      env_file=env_file, workdir=workdir, secret=secret,
                      disk_size=disk_size, disk_tier=disk_tier, network_tier=network_tier,
                      image_id=image_id, ports=ports)

    async def go(client: Client) -> None:
        job_id = await client.exec(cluster, task)
        console.print(f"Job {job_id} submitted to {cluster}.")
        if not detach_run:
            exit_for(await follow_job(client, cluster, job_id), cluster)

    run(go)


def checked(candidates: list[Candidate]) -> list[CloudCheck]:
    """The credential checks of the clouds ``candidates`` are on."""
    return check_clouds(tuple(sorted({c.cloud for c in candidates})))


def show_plan(task: Task, candidates: list[Candidate], as_json: bool) -> None:
    """The plan of one task, marked usable or not."""
    checks = checked(candidates)
    secrets = redacted(task.secrets)
    if as_json:
        print(json.dumps(display.plan_json(candidates, {c.cloud: c.ok for c in checks},
                                           secrets)))
        return
    display.plan_table(console, candidates, checks, task.num_nodes)
    if secrets:
        shown = ", ".join(f"{name}={value}" for name, value in secrets.items())
        console.print(f"Secrets given to setup and run: {shown}", markup=False)


@app.command()
def status(
    clusters: Annotated[list[str] | None, typer.Argument(
        help="Only these clusters (default: all, and a line on managed jobs).",
        show_default=False)] = None,
    as_json: AsJson = False,
    refresh: Annotated[bool, typer.Option(
        "--refresh", "-r", help="Check every cluster against its cloud first.")] = False,
) -> None:
    """List the clusters, and (with no names) how many managed jobs are in each status."""
    with_jobs = not clusters and not as_json

    async def go(client: Client) -> tuple[list[ClusterSummary], list[JobSummary]]:
        listed, jobs = await asyncio.gather(
            client.status(refresh=refresh),
            ManagedJobs(client).queue() if with_jobs else asyncio.sleep(0, []))
        for name, record in client.refreshed.items():
            if record.status == ClusterStatus.TERMINATED:
                console.print(f"Cluster {name} removed: {record.status_reason}", highlight=False)
            elif record.status_reason:
                console.print(f"Cluster {name} is {record.status}: {record.status_reason}",
                              highlight=False)
            for warning in record.warnings:
                console.print(f"[yellow]Warning:[/] {name}: {warning}", highlight=False)
        return listed, jobs

    listed, jobs = run(go)
    if clusters:
        missing = sorted(set(clusters) - {c.name for c in listed})
        if missing:
            err_console.print(f"No cluster named {', '.join(missing)}.", highlight=False)
        listed = [c for c in listed if c.name in clusters]
    if as_json:
        print(json.dumps([c.model_dump(mode="json") for c in listed]))
        return
    display.clusters_table(console, listed)
    display.init_hint(console, [c.name for c in listed if c.status == ClusterStatus.INIT])
    if with_jobs:
        console.print(display.queue_summary(jobs), highlight=False)


@app.command()
def queue(cluster: str, as_json: AsJson = False) -> None:
    """List the jobs of a cluster."""
    jobs = run(lambda client: client.queue(cluster))
    if as_json:
        print(json.dumps([display.job_json(j) for j in jobs]))
    else:
        display.jobs_table(console, cluster, jobs)


@app.command()
def logs(
    cluster: str,
    job_id: Annotated[int | None, typer.Argument(help="Default: the latest job.")] = None,
    no_follow: Annotated[bool, typer.Option("--no-follow", help="Print what is there.")] = False,
) -> None:
    """Print a job's output; follow it until the job ends."""

    async def go(client: Client) -> JobRecord:
        wanted = job_id
        if wanted is None:
            jobs = await client.queue(cluster)
            if not jobs:
                raise OrchError(f"cluster {cluster} has no jobs yet")
            wanted = jobs[-1].id
        return await client.logs(cluster, wanted, follow=not no_follow,
                                 on_line=lambda line: console.print(line, markup=False,
                                                                     highlight=False))

    record = run(go)
    if not no_follow and record.status != JobStatus.SUCCEEDED:
        raise typer.Exit(1)


@app.command()
def cancel(
    cluster: str,
    job_ids: Annotated[list[int] | None, typer.Argument(help="Job ids.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", "-a", help="Every unfinished job.")] = False,
    yes: Yes = False,
) -> None:
    """Cancel jobs on a cluster."""
    if not job_ids and not all_jobs:
        raise fail("name the jobs to cancel, or pass --all", code=2)
    if not yes:
        what = "all jobs" if all_jobs else "job(s) " + ", ".join(map(str, job_ids or []))
        typer.confirm(f"Cancel {what} on {cluster}?", abort=True)
    cancelled = run(lambda client: client.cancel(cluster, job_ids, all_jobs))
    for job in cancelled:
        console.print(f"Job {job.id}: {job.status}")
    if not cancelled:
        console.print("No job to cancel.")
