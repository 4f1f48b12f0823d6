"""TeardownWorkflow: stop or terminate a cluster, and make sure of it.

``ray stop`` on the nodes comes first and is best effort: a head that does not exist or
cannot be reached must not fail the teardown (SkyPilot's bug, where ``run_on_head``
raised "Failed to get head ip" for a cluster already gone). Instances are then found by
the cluster's tags, not by the record, so half-provisioned clusters are covered; we
query until every one is stopped or terminated, then clean up ports.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.provision import (
        InstancesRequest,
        WaitGoneRequest,
        cleanup_ports,
        stop_instances,
        terminate_instances,
        wait_instances_gone,
    )
    from orch.clouds.base import InstanceStatus
    from orch.contracts.runtime import STOP_RAY, NodesRequest
    from orch.records import TEARDOWN_WORKFLOW, TeardownInput, TeardownResult
    from orch.summaries import instances_call, on_nodes
    from workflows.options import BEST_EFFORT, LONG_CALL, PROVIDER_CALL, error_message


@workflow.defn(name=TEARDOWN_WORKFLOW)
class TeardownWorkflow:
    @workflow.run
    async def run(self, request: TeardownInput) -> TeardownResult:
        name, verb = request.cluster_name, "terminated" if request.terminate else "stopped"
        if request.placement is None:
            return TeardownResult(
                message=f"Cluster {name} was never provisioned: nothing to tear down."
            )
        warnings: list[str] = []
        if request.info is not None and request.info.nodes:
            workflow.set_current_details("**Now:** " + on_nodes("ray stop", request.info))
            try:
                warnings += await workflow.execute_activity(
                    STOP_RAY, NodesRequest(info=request.info, timeout_s=60),
                    result_type=list[str], **BEST_EFFORT,
                    summary=on_nodes("ray stop (best effort)", request.info),
                )
            except ActivityError as err:
                warnings.append(f"ray stop skipped: {error_message(err)}")
        instances = InstancesRequest(
            cloud=request.placement.cloud, region=request.placement.region,
            cluster_name=request.cloud_name,
        )
        action = terminate_instances if request.terminate else stop_instances
        cloud, region = request.placement.cloud, request.placement.region
        call = instances_call("terminate" if request.terminate else "stop", cloud, region, name)
        workflow.set_current_details(f"**Now:** {call}")
        found = await workflow.execute_activity(action, instances, **PROVIDER_CALL, summary=call)
        workflow.set_current_details(f"**Now:** waiting until {len(found)} instance(s) are "
                                     f"{verb}")
        await workflow.execute_activity(
            wait_instances_gone,
            WaitGoneRequest(
                instances=instances, target=None if request.terminate else InstanceStatus.STOPPED
            ),
            **LONG_CALL,
            summary=instances_call("describe", cloud, region, name) + f" until {verb}",
        )
        if request.terminate:
            await workflow.execute_activity(
                cleanup_ports, instances, **PROVIDER_CALL,
                summary=f"remove the firewall rules of {name} in {region}")
        if not found:
            message = f"Cluster {name} had no instances on {cloud}: nothing to do."
        else:
            message = f"Cluster {name}: {len(found)} instance(s) {verb}."
        workflow.set_current_details(f"**Done:** {message}")
        return TeardownResult(message=message, instances=found, warnings=warnings)
