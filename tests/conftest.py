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
