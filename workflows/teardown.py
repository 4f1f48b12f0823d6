"""TeardownWorkflow: stop or terminate a cluster, and make sure of it.

``ray stop`` on the nodes comes first and is best effort: a head that does not exist or
cannot be reached must not fail the teardown (SkyPilot's bug, where ``run_on_head``
raised "Failed to get head ip" for a cluster already gone). Instances are then found by
the cluster's tags, not by the record, so half-provisioned clusters are covered; we
query until every one is stopped or terminated, then clean up ports.

A terminate also empties every other region the cluster's launches touched (its record's
``regions``: failed candidates, a launch that failed everywhere), in the same three steps,
so that no instance, security group, firewall rule or key pair of theirs is left behind;
a cluster that was never provisioned but has such regions is cleaned all the same.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orch.clouds.base import InstanceStatus
    from orch.contracts.provision import (
        CLEANUP_PORTS,
        STOP_INSTANCES,
        TERMINATE_INSTANCES,
        WAIT_INSTANCES_GONE,
        InstancesRequest,
        TeardownStarted,
        WaitGoneRequest,
    )
    from orch.contracts.runtime import STOP_RAY, NodesRequest
    from orch.records import TEARDOWN_WORKFLOW, CloudRegion, TeardownInput, TeardownResult
    from orch.summaries import instances_call, on_nodes
    from workflows import storage_steps
    from workflows.options import BEST_EFFORT, LONG_CALL, PROVIDER_CALL, error_message


def other_regions(request: TeardownInput) -> list[CloudRegion]:
    """The regions to empty besides the placement's (a terminate only), each once."""
    if not request.terminate:
        return []
    placement = request.placement
    return [r for r in dict.fromkeys(request.regions)
            if placement is None or (r.cloud, r.region) != (placement.cloud, placement.region)]


@workflow.defn(name=TEARDOWN_WORKFLOW)
class TeardownWorkflow:
    @workflow.run
    async def run(self, request: TeardownInput) -> TeardownResult:
        name, verb = request.cluster_name, "terminated" if request.terminate else "stopped"
        others = other_regions(request)
        if request.placement is None and not others:
            return TeardownResult(
                message=f"Cluster {name} was never provisioned: nothing to tear down."
            )
        warnings: list[str] = await self._unmount_storage(request)
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
        found: list[str] = []
        if request.placement is not None:
            found += await self._empty(request, request.placement.cloud,
                                       request.placement.region)
        for place in others:
            found += await self._empty(request, place.cloud, place.region)
        if request.placement is None:
            where = ", ".join(f"{r.cloud} {r.region}" for r in others)
            message = (f"Cluster {name} was never provisioned: cleaned up after its launch "
                       f"attempts in {where}" + (f", {len(found)} instance(s) terminated."
                                                 if found else "."))
        elif not found:
            cloud = request.placement.cloud
            message = f"Cluster {name} had no instances on {cloud}: nothing to do."
        else:
            message = f"Cluster {name}: {len(found)} instance(s) {verb}."
        message = " ".join([message, *await self._release_storage(request)])
        workflow.set_current_details(f"**Done:** {message}")
        return TeardownResult(message=message, instances=found, warnings=warnings)

    async def _unmount_storage(self, request: TeardownInput) -> list[str]:
        """First, the buckets unmounted where nodes answer (a cached mount writes back)."""
        if not request.storage:
            return []
        workflow.set_current_details("**Now:** unmounting the buckets")
        return await storage_steps.unmount(request.info, request.storage)

    async def _release_storage(self, request: TeardownInput) -> list[str]:
        """Last, once the instances are gone, a terminate releases the cluster's buckets:
        the entity of each deletes it when nobody else uses it and it does not persist.
        A worker that dies in between leaves this step to the next one (Temporal retries
        it), and the entity deletes a bucket once."""
        buckets = storage_steps.buckets_of(request.storage)
        if not request.terminate or not buckets or not request.storage_user:
            return []
        workflow.set_current_details(f"**Now:** releasing {len(buckets)} bucket(s)")
        said = await storage_steps.release(request.storage_user, buckets)
        return [f"{line[0].upper()}{line[1:]}." for line in said]

    async def _empty(self, request: TeardownInput, cloud: str, region: str) -> list[str]:
        """Stop or terminate the cluster's instances in one region and wait until they
        are; a terminate then removes its security groups and firewall rules there."""
        name, verb = request.cluster_name, "terminated" if request.terminate else "stopped"
        instances = InstancesRequest(cloud=cloud, region=region, cluster_name=request.cloud_name)
        action = TERMINATE_INSTANCES if request.terminate else STOP_INSTANCES
        call = instances_call("terminate" if request.terminate else "stop", cloud, region, name)
        workflow.set_current_details(f"**Now:** {call}")
        started = await workflow.execute_activity(action, instances, result_type=TeardownStarted,
                                                  **PROVIDER_CALL, summary=call)
        found = started.instances
        workflow.set_current_details(f"**Now:** waiting until {len(found)} instance(s) are "
                                     f"{verb}")
        await workflow.execute_activity(
            WAIT_INSTANCES_GONE,
            WaitGoneRequest(
                instances=instances, target=None if request.terminate else InstanceStatus.STOPPED,
                operations=started.operations,
            ),
            **LONG_CALL,
            summary=instances_call("describe", cloud, region, name) + f" until {verb}",
        )
        if request.terminate:
            await workflow.execute_activity(
                CLEANUP_PORTS, instances, **PROVIDER_CALL,
                summary=f"remove the firewall rules of {name} in {region}")
        return found
