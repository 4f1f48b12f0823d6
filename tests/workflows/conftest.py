"""Fixtures shared by the workflow tests."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from orch.client.codec import CodecKey, orch_data_converter
from tests.server_teardown import leave_server
from workflows.launch_semaphore import LAUNCH_HOLDERS_ATTRIBUTE, LAUNCH_WAITING_ATTRIBUTE


@pytest.fixture
async def dev_server(request: pytest.FixtureRequest) -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of its own, with the semaphore's search attributes (the time-skipping
    server has none). Also for tests whose activities outlive their workflow (a cancelled
    call that returns later): a time-skipping server would keep its clock stopped while
    such an activity runs."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"),
        data_converter=orch_data_converter(CodecKey.generate("the test")),
        search_attributes=[LAUNCH_HOLDERS_ATTRIBUTE, LAUNCH_WAITING_ATTRIBUTE],
    )
    try:
        yield env
    finally:
        await leave_server(env, request.node)
