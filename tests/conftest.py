"""Shared fixtures: the Temporal test servers shipped by PyPI packages, never downloaded."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from orch.client.codec import CodecKey, orch_data_converter

BIN_DIR = Path(sys.executable).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (scripts/test): a file's tests stay on
    one worker, so its module fixtures start once; a file that declares a group of its own
    (``pytestmark = pytest.mark.xdist_group(...)``, e.g. the AWS twin's, whose machines
    take host routes that a second twin would take too) shares a worker with that group."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def test_server_path() -> str:
    path = BIN_DIR / "temporal-test-server"
    if not path.exists():
        pytest.fail(f"{path} is missing: install the test extras (pip install -e '.[test]')")
    return str(path)


@pytest_asyncio.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping test server for the session (starting one costs seconds)."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=test_server_path(),
        data_converter=orch_data_converter(CodecKey.generate("the test session")),
    )
    try:
        yield env
    finally:
        await env.shutdown()
