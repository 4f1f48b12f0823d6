"""Whether a task fits a cluster that already exists (pure: used by ClusterWorkflow).

As SkyPilot's ``check_resources_fit_cluster``: a task fits when it asks for no more than
the cluster has (nodes, and per node CPUs, memory and accelerators) and names no other
place or instance type; what it leaves out is the cluster's. A misfit is the user's
mistake, said as such (the CLI exits 2), never a provisioning failure.
"""

from __future__ import annotations

from orch.records import ClusterRecord
from orch.spec import Task

TASK_DOES_NOT_FIT = "TaskDoesNotFit"  # the error type of a misfit


def cluster_size(record: ClusterRecord) -> int:
    """The cluster's node count: the shape it was launched with, else the nodes it has."""
    if record.launched is not None:
        return record.launched.num_nodes
    return len(record.info.nodes) if record.info else 0


def misfit(task: Task, record: ClusterRecord) -> str | None:
    """Why ``task`` cannot run on ``record``'s cluster, or None when it can."""
    problem = _problem(task, record)
    if problem is None:
        return None
    name = record.name
    return (f"Task requested {problem}. To fix: specify a new cluster name, or down the "
            f"existing cluster first: orch down {name}")


def _problem(task: Task, record: ClusterRecord) -> str | None:
    """What the task asks for and the cluster has not: ``3 nodes, but the existing cluster
    hello has 2``."""
    existing = f"the existing cluster {record.name}"
    size = cluster_size(record)
    if size and task.num_nodes > size:
        return f"{task.num_nodes} nodes, but {existing} has {size}"
    wanted = task.resources
    placement = record.placement
    if placement is not None:
        for field, have in (("cloud", placement.cloud), ("region", placement.region),
                            ("zone", placement.zone), ("instance_type", placement.instance_type)):
            want = getattr(wanted, field)
            if want and have and want != have:
                return f"{field} {want}, but {existing} has {field} {have}"
    node = record.info.nodes[0] if record.info and record.info.nodes else None
    if node is None:
        return None
    if wanted.min_cpus() > node.cpus:
        return f"{wanted.cpus} CPUs per node, but {existing} has {node.cpus:g}"
    if wanted.min_memory_gb(node.cpus) > node.memory_gb:
        return (f"{wanted.min_memory_gb(node.cpus):g} GB per node (memory {wanted.memory}), "
                f"but {existing} has {node.memory_gb:g} GB")
    for accelerator, count in (wanted.accelerators or {}).items():
        if node.gpus.get(accelerator, 0) < count:
            have_gpus = ", ".join(f"{k}:{v}" for k, v in node.gpus.items()) or "no GPUs"
            return f"{accelerator}:{count} per node, but {existing} has {have_gpus}"
    return None
