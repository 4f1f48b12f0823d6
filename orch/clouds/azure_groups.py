"""Deleting a cluster's resource group, and following the delete without waiting on it.

A group's delete is the one Azure operation whose failure is not kept on a resource: the
group just stays (or comes back, ``Succeeded``). So its :class:`Operation` carries the
address ARM gave to follow it (the ``Location`` of the 202, kept from the subscription
on, so that no subscription id is written into a workflow's history), and each look is
one GET of it: 202 while it runs, 200 or 204 once the group is gone, ARM's error (code
and message, as the SDK's poller would have raised it) when it failed. An address ARM no
longer knows (404: kept for a while only) falls back to the group itself.
"""

from __future__ import annotations

from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.core.rest import HttpRequest
from azure.mgmt.resource.resources import ResourceManagementClient

from orch.clouds.azure_errors import classify, is_absent
from orch.clouds.base import Operation
from orch.clouds.errors import BlockScope, ProvisionError

DELETE_GROUP = "delete-group"
ARM_ENDPOINT = "https://management.azure.com"


def _location(pipeline_response: Any, deserialized: Any, headers: Any) -> str:
    return str(pipeline_response.http_response.headers.get("Location", ""))


def start_delete(resources: ResourceManagementClient, group: str, subscription_id: str
                 ) -> Operation | None:
    """Start deleting ``group``; None when there is no such group."""
    try:
        location = resources.resource_groups.begin_delete(group, polling=False,
                                                          cls=_location).result()
    except ResourceNotFoundError as err:
        if not is_absent(err):
            raise
        return None
    marker = f"/subscriptions/{subscription_id}/"
    return Operation(kind=DELETE_GROUP, name=str(location).partition(marker)[2], target=group)


def delete_state(resources: ResourceManagementClient, operation: Operation, *,
                 endpoint: str | None, subscription_id: str, region: str) -> str:
    """``Deleting`` while the delete runs, "" once the group is gone; raises the delete's
    failure."""
    if operation.name:
        url = f"{(endpoint or ARM_ENDPOINT).rstrip('/')}/subscriptions/{subscription_id}/"
        answer = resources.send_request(HttpRequest("GET", url + operation.name))
        if answer.status_code == 202:
            return "Deleting"
        if answer.status_code in (200, 204):
            return ""
        if answer.status_code != 404:
            error = (answer.json() if answer.content else {}).get("error") or {}
            raise classify(str(error.get("code", "")), str(error.get("message", "")),
                           status=answer.status_code, region=region, zone=None)
    try:
        state = resources.resource_groups.get(operation.target).properties
    except ResourceNotFoundError as err:
        if not is_absent(err):
            raise
        return ""
    if state is not None and state.provisioning_state == "Deleting":
        return "Deleting"
    raise ProvisionError(f"Azure {region}: resource group {operation.target} is still there "
                         "after its delete ended", code="ResourceGroupNotDeleted",
                         scope=BlockScope.REGION)
