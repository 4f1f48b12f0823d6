"""Whether a task fits a cluster that is already up (pure: used by ClusterWorkflow)."""

from __future__ import annotations

from orch.records import ClusterRecord
from orch.spec import Task


def misfit(task: Task, record: ClusterRecord) -> str | None:
    """Why ``task`` cannot run on ``record``'s cluster, or None when it can."""
    name = record.name
    nodes = record.info.nodes if record.info else []
    if task.num_nodes > len(nodes):
        return (f"the task needs {task.num_nodes} nodes; cluster {name} has {len(nodes)}. "
                "Launch it on a new cluster, or down this one first.")
    wanted = task.resources
    placement = record.placement
    if placement is not None:
        for field, have in (("cloud", placement.cloud), ("region", placement.region),
                            ("zone", placement.zone), ("instance_type", placement.instance_type)):
            want = getattr(wanted, field)
            if want and have and want != have:
                return f"the task asks for {field} {want}; cluster {name} has {have}"
    node = nodes[0] if nodes else None
    if node is not None:
        if wanted.min_cpus() > node.cpus:
            return f"the task needs {wanted.cpus} CPUs per node; cluster {name} has {node.cpus:g}"
        if wanted.min_memory_gb(node.cpus) > node.memory_gb:
            return (f"the task needs {wanted.min_memory_gb(node.cpus):g} GB per node "
                    f"(memory {wanted.memory}); cluster {name} has {node.memory_gb:g} GB")
        for accelerator, count in (wanted.accelerators or {}).items():
            if node.gpus.get(accelerator, 0) < count:
                have_gpus = ", ".join(f"{k}:{v}" for k, v in node.gpus.items()) or "no GPUs"
                return f"the task needs {accelerator}:{count}; cluster {name} has {have_gpus}"
    return None
