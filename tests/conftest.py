"""Shared fixtures: the Temporal test servers shipped by PyPI packages, never downloaded."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Generator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from orch.client.codec import CodecKey, orch_data_converter
from tests.server_teardown import CALL_FAILED, leave_server

BIN_DIR = Path(sys.executable).parent


def test_server_path() -> str:
    path = BIN_DIR / "temporal-test-server"
    if not path.exists():
        pytest.fail(f"{path} is missing: install the test extras (pip install -e '.[test]')")
    return str(path)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember whether the test itself failed, for its fixtures' teardown."""
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


@pytest_asyncio.fixture
async def time_skipping_env(request: pytest.FixtureRequest
                            ) -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server of the test's own (starting one takes about 0.1 s).

    The server's clock is one for everything it runs: it stands still while any workflow
    or activity task is outstanding, and a workflow a finished test left open schedules
    its next task, on a task queue nobody polls any more, as soon as a later test lets time
    skip. A shared server then stops its clock for every test after (a three-day job hung
    for 600 s in CI), and a test cut short mid-lock leaves it skipping for good (the
    semaphore's holders "never finished" after ten simulated years). Temporal's testing
    guide advises a server of their own for tests whose time behaves differently; one per
    test is the simple form of that.
    """
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=test_server_path(),
        data_converter=orch_data_converter(CodecKey.generate("the test")),
    )
    try:
        yield env
    finally:
        await leave_server(env, request.node)
