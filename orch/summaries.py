"""What the Temporal Web UI says about orch's workflows and activities, in words.

Temporal shows a workflow's *static summary*, *static details* and *current details*
(markdown) on its page (User Metadata), and each activity's *summary* in the event history
and the timeline. Its list shows no summaries (only search attributes: the client copies a
cluster's and a job's summary into ``OrchSummary``). These functions turn orch's records
into that text. They are pure, since workflows call them: no clock, no environment, no I/O.

The formats, chosen so that an operator can read a history without opening payloads:

- cluster: ``cluster hello: 2× A100:8 on aws us-east-1 (spot)``
- launch: ``launch hello: 2× A100:8 on aws us-east-1 (spot)``
- failover: ``failover hello: find 2× A100:8 on aws us-east-1 (spot)``
- teardown: ``teardown hello: 4 instances in aws us-east-1`` (``stop hello: …``)
- managed job: ``managed job 7 "train": 1× A100:8 on any cloud`` or, for a pipeline,
  ``managed job 7 "train": 3 tasks``; each of its launches says which task it is for:
  ``launch job-7-1 for managed job 7 "train", task 2/3: …``
- activities: the cloud's own call where there is one (``RunInstances m6i.xlarge ×2 in
  us-east-1b``, ``instances.insert n2-standard-8 ×2 in us-central1-a``), else what happens
  on the nodes (``ray start on 2 nodes``).
"""

from __future__ import annotations

from collections.abc import Sequence

from orch.clouds.base import ClusterInfo, ProvisionConfig
from orch.failover_rules import FailoverAttempt
from orch.managed_jobs import ManagedJobState
from orch.records import ClusterRecord, Placement
from orch.spec import Resources, Task
from orch.status import ClusterStatus

# The API call each cloud makes for a step, so the summary reads like the cloud's console.
_CLOUD_CALLS: dict[str, dict[str, str]] = {
    "aws": {"quota": "GetServiceQuota", "create": "RunInstances",
            "describe": "DescribeInstances", "terminate": "TerminateInstances",
            "stop": "StopInstances"},
    "gcp": {"quota": "regions.get (quotas)", "create": "instances.insert",
            "describe": "instances.list", "terminate": "instances.delete",
            "stop": "instances.stop"},
    "azure": {"quota": "usage.list", "create": "virtualMachines.createOrUpdate",
              "describe": "virtualMachines.list", "terminate": "virtualMachines.delete",
              "stop": "virtualMachines.deallocate"},
}
_LOCAL_CALLS = {"quota": "check capacity", "create": "start sandboxes",
                "describe": "list sandboxes", "terminate": "remove sandboxes",
                "stop": "stop sandboxes"}


def short(text: str, limit: int = 100) -> str:
    """``text`` cut at a word boundary to about ``limit`` characters, with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return f"{cut}…"


def cloud_call(cloud: str, step: str) -> str:
    return _CLOUD_CALLS.get(cloud, _LOCAL_CALLS).get(step, step)


def where(cloud: str | None, region: str | None = None, zone: str | None = None) -> str:
    """``aws us-east-1b`` (a zone names its region), ``aws us-east-1``, ``any cloud``."""
    if cloud is None and region is None and zone is None:
        return "any cloud"
    name, place = cloud or "any cloud", zone or region
    return name if place in (None, cloud) else f"{name} {place}"


def _what(resources: Resources) -> str:
    """The hardware asked for: accelerators, else the instance type, else CPUs/memory."""
    if resources.accelerators:
        return ", ".join(f"{name}:{count:g}" for name, count in resources.accelerators.items())
    if resources.instance_type:
        return resources.instance_type
    asked = [f"cpus={resources.cpus}" if resources.cpus else "",
             f"memory={resources.memory}" if resources.memory else ""]
    return " ".join(a for a in asked if a) or "CPU nodes"


def resources_phrase(task: Task) -> str:
    """``2× A100:8 on aws us-east-1 (spot)``; alternatives are counted, not listed."""
    resources = task.resources
    options = resources.alternatives()
    first = options[0] if options else resources
    text = f"{task.num_nodes}× {_what(first)} on " + where(
        first.cloud or resources.cloud, first.region or resources.region,
        first.zone or resources.zone)
    if first.use_spot or resources.use_spot:
        text += " (spot)"
    if len(options) > 1:
        text += f", or {len(options) - 1} other choice{'s' if len(options) > 2 else ''}"
    return text


def placement_phrase(placement: Placement, nodes: int) -> str:
    what = placement.instance_type or "sandbox"
    spot = " (spot)" if placement.use_spot else ""
    return f"{nodes}× {what} on {where(placement.cloud, placement.region, placement.zone)}{spot}"


# -- workflows: static summaries and details --------------------------------------------
def cluster_summary(name: str, task: Task) -> str:
    return f"cluster {name}: {resources_phrase(task)}"


def launch_summary(name: str, task: Task, reuse: ClusterInfo | None = None,
                   purpose: str = "") -> str:
    """A launch that reuses an UP cluster only sets it up again: say so."""
    head = f"launch {name}" + (f" for {purpose}" if purpose else "")
    if reuse is not None:
        return f"{head}: set up again on its {len(reuse.nodes)} node(s)"
    return f"{head}: {resources_phrase(task)}"


def failover_summary(name: str, task: Task, pinned: Placement | None) -> str:
    if pinned is not None and pinned.instance_type:
        return f"failover {name}: find {placement_phrase(pinned, task.num_nodes)}"
    return f"failover {name}: find {resources_phrase(task)}"


def teardown_summary(name: str, placement: Placement | None, info: ClusterInfo | None,
                     terminate: bool) -> str:
    verb = "teardown" if terminate else "stop"
    if placement is None:
        return f"{verb} {name}: never provisioned"
    count = len(info.nodes) if info is not None else 0
    instances = f"{count} instance{'s' if count != 1 else ''}" if count else "its instances"
    return f"{verb} {name}: {instances} in {where(placement.cloud, placement.region)}"


def job_summary(job_id: int, name: str | None, tasks: Sequence[Task]) -> str:
    head = f'managed job {job_id} "{name or "-"}"'
    if len(tasks) == 1:
        return f"{head}: {resources_phrase(tasks[0])}"
    return f"{head}: {len(tasks)} tasks"


def job_task_purpose(job_id: int, name: str | None, index: int, total: int) -> str:
    return f'managed job {job_id} "{name or "-"}", task {index + 1}/{total}'


def task_details(task: Task, requested_by: str = "") -> str:
    """Static details (markdown): what was asked for, and by whom from where."""
    lines = [f"**Resources:** {resources_phrase(task)}"]
    resources = task.resources
    extras = [f"disk {resources.disk_size} GB",
              f"image {resources.image_id}" if resources.image_id else "",
              f"ports {', '.join(resources.ports)}" if resources.ports else ""]
    lines.append("**Also:** " + ", ".join(e for e in extras if e))
    if task.name:
        lines.append(f"**Task:** {task.name}")
    if requested_by:
        lines.append(f"**Launched by:** {requested_by}")
    return "\n\n".join(lines)


def pipeline_details(tasks: Sequence[Task], requested_by: str) -> str:
    """Static details of a managed job: each task's resources, then who launched it."""
    parts = [f"**Task {i + 1}/{len(tasks)}" + (f" ({t.name})" if t.name else "") + ":** "
             + resources_phrase(t) for i, t in enumerate(tasks)]
    return "\n\n".join([*parts, f"**Launched by:** {requested_by}"])


def cluster_details(record: ClusterRecord) -> str:
    """Current details of a ClusterWorkflow (markdown): status, where, the step."""
    lines = [f"**Status:** {record.status}"]
    if record.placement is not None:
        lines.append("**Nodes:** " + placement_phrase(record.placement, record.num_nodes))
    if record.step:
        lines.append(f"**Now:** {record.step}")
    elif record.status == ClusterStatus.UP:
        lines.append("**Now:** idle, waiting for jobs or operations")
    if record.status_reason:
        lines.append(f"**Why:** {record.status_reason}")
    if record.last_error:
        lines.append(f"**Last error:** {record.last_error}")
    autostop = record.autostop_summary()
    if autostop:
        lines.append(f"**Autostop:** {autostop}")
    return "\n\n".join(lines)


# -- activities ---------------------------------------------------------------------------
def provision_call(step: str, config: ProvisionConfig, cloud: str) -> str:
    """``RunInstances m6i.xlarge ×2 in us-east-1b``."""
    what = config.instance_type or (f"{config.cpus:g} CPU" if config.cpus else "")
    spot = " (spot)" if config.use_spot else ""
    return (f"{cloud_call(cloud, step)} {what} ×{config.num_nodes}{spot} in "
            f"{config.zone or config.region}").replace("  ", " ")


def instances_call(step: str, cloud: str, region: str, name: str) -> str:
    """``TerminateInstances of hello in us-east-1``."""
    return f"{cloud_call(cloud, step)} of {name} in {where(cloud, region)}"


def on_nodes(action: str, info: ClusterInfo | None) -> str:
    """``ray start on 2 nodes (head 10.0.0.5)``."""
    if info is None or not info.nodes:
        return action
    count = len(info.nodes)
    head = info.head
    at = f" (head {head.address})" if head is not None else ""
    return f"{action} on {count} node{'s' if count != 1 else ''}{at}"


def attempt_phrase(attempt: FailoverAttempt) -> str:
    """``CapacityError InsufficientInstanceCapacity in aws us-east-1a (m6i.xlarge)``."""
    candidate = attempt.candidate
    code = f" {attempt.code}" if attempt.code else ""
    what = f" ({candidate.instance_type})" if candidate.instance_type else ""
    return (f"{attempt.error_type}{code} in "
            f"{where(candidate.cloud, candidate.region, attempt.zone)}{what}")


ATTEMPT_MESSAGE = 100  # characters of a failed attempt's message on its one line


def attempt_line(attempt: FailoverAttempt) -> str:
    """One failed attempt on one line: ``aws us-east-1/us-east-1a m6i.xlarge spot:
    CapacityError InsufficientInstanceCapacity: We currently do not… ; blocked aws zone
    us-east-1a (m6i.xlarge)``."""
    candidate = attempt.candidate
    place = "/".join(filter(None, [candidate.region, attempt.zone]))
    what = " ".join(filter(None, [candidate.cloud, place, candidate.instance_type,
                                  "spot" if candidate.use_spot else None]))
    error = " ".join(filter(None, [attempt.error_type, attempt.code]))
    message = short(" ".join(attempt.message.split()), ATTEMPT_MESSAGE)
    blocked = attempt.block.describe() if attempt.block else "nothing (retry)"
    return f"{what}: {error}" + (f": {message}" if message else "") + f"; blocked {blocked}"


def job_details(state: ManagedJobState) -> str:
    """Current details of a ManagedJobWorkflow (markdown): status, task, cluster, last step."""
    run = state.current
    task = f'{run.index + 1}/{len(state.runs)}' + (f' "{run.name}"' if run.name else "")
    lines = [f"**Status:** {state.status} ({state.schedule_state})", f"**Task:** {task}"]
    if run.placement is not None:
        nodes = len(run.info.nodes) if run.info is not None else 0
        lines.append(f"**Cluster:** {run.cluster_name}, "
                     + placement_phrase(run.placement, nodes))
    if state.recoveries:
        lines.append(f"**Recoveries:** {state.recoveries}")
    if state.events:
        lines.append(f"**Last step:** {state.events[-1].message}")
    return "\n\n".join(lines)
