"""What an orch worker hosts: every workflow and activity, on one task queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities import plan, provision, runtime
from workflows.cluster import ClusterWorkflow
from workflows.failover import FailoverWorkflow
from workflows.launch import LaunchWorkflow
from workflows.teardown import TeardownWorkflow

WORKFLOWS: list[type] = [ClusterWorkflow, LaunchWorkflow, FailoverWorkflow, TeardownWorkflow]

ACTIVITIES: list[Callable[..., Any]] = [
    plan.plan_candidates,
    provision.check_quota,
    provision.run_instances,
    provision.wait_running,
    provision.get_cluster_info,
    provision.query_instances,
    provision.stop_instances,
    provision.terminate_instances,
    provision.wait_instances_gone,
    provision.cleanup_ports,
    runtime.wait_for_nodes,
    runtime.setup_runtime,
    runtime.start_ray,
    runtime.sync_files,
    runtime.run_setup,
    runtime.submit_job,
    runtime.stop_ray,
]
