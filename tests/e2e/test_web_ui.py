"""The Web UI as orch's window, checked in a real browser after a launch and a managed job.

What the page must show is read from Temporal, never written here: each workflow's static
summary (``describe()``), its current details (the ``__temporal_workflow_metadata`` query
the UI itself sends) and each activity's summary (the history's ActivityTaskScheduled
events). The screenshots land in ``$ORCH_TEST_ARTIFACTS/web-ui/`` (``test-artifacts/`` by
default); ``scripts/readme_screenshots`` copies the README's from there to ``docs/img/``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Page, ViewportSize
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client as TemporalClient

from orch.client.codec import load_key, orch_data_converter
from orch.managed_jobs import managed_job_workflow_id
from orch.records import (
    LAUNCH_WORKFLOW,
    SA_CLUSTER,
    SA_JOB_ID,
    SA_SUMMARY,
    cluster_workflow_id,
)
from tests.e2e import web_ui
from tests.e2e.conftest import REPO, Orch, wait_for
from tests.e2e.test_managed_jobs import ENDED, job, status_is, submit

pytestmark = pytest.mark.e2e
CLUSTER = "webui"
JOB_NAME = "webui-job"
ARTIFACTS = Path(os.environ.get("ORCH_TEST_ARTIFACTS") or REPO / "test-artifacts") / "web-ui"
# The list cannot show static summaries, only search attributes: orch copies the summary
# into OrchSummary, shown as a column here.
COLUMNS = ["Status", "Workflow ID", SA_SUMMARY, "Type", SA_CLUSTER, SA_JOB_ID,
           "OrchClusterStatus", "OrchJobStatus", "Start"]
TALL = ViewportSize(width=1600, height=1500)
METADATA_QUERY = "__temporal_workflow_metadata"


@dataclass
class Workflow:
    """What Temporal holds about one workflow: the truth the page is checked against."""

    id: str
    run_id: str
    summary: str
    current_details: str
    activities: int  # how many activities it scheduled
    activity_summaries: list[str]


@dataclass
class Launched:
    ui_url: str
    temporal: TemporalClient
    job_id: int


async def read_workflow(temporal: TemporalClient, workflow_id: str) -> Workflow:
    handle = temporal.get_workflow_handle(workflow_id)
    description = await handle.describe()
    metadata = await handle.query(METADATA_QUERY, result_type=WorkflowMetadata)
    scheduled, summaries = 0, []
    async for event in handle.fetch_history_events():
        if not event.HasField("activity_task_scheduled_event_attributes"):
            continue
        scheduled += 1
        if event.user_metadata.HasField("summary"):
            [text] = await temporal.data_converter.decode([event.user_metadata.summary], [str])
            summaries.append(text)
    return Workflow(workflow_id, description.run_id, await description.static_summary() or "",
                    metadata.current_details, scheduled, summaries)


async def launch_child(temporal: TemporalClient, parent_id: str) -> str:
    """The id of the first LaunchWorkflow a workflow started."""
    async for event in temporal.get_workflow_handle(parent_id).fetch_history_events():
        started = event.start_child_workflow_execution_initiated_event_attributes
        if event.HasField("start_child_workflow_execution_initiated_event_attributes") and \
                started.workflow_type.name == LAUNCH_WORKFLOW:
            return started.workflow_id
    raise AssertionError(f"{parent_id} started no {LAUNCH_WORKFLOW}")


async def listed_ids(temporal: TemporalClient, query: str) -> set[str]:
    return {w.id async for w in temporal.list_workflows(query)}


@pytest_asyncio.fixture(scope="module")
async def launched(orch: Orch) -> AsyncIterator[Launched]:
    """One small cluster and one managed job, shared by the module; both run at once. The
    job is waited for to end so that what its page shows no longer changes."""
    job_id = submit(orch, "-n", JOB_NAME, "--cloud", "local", "echo hello from a managed job")
    orch("launch", "-c", CLUSTER, "--cpus", "1", "echo hello from the web ui test")
    wait_for(lambda: status_is(orch, job_id, *ENDED), 180,
             "the managed job to end")
    assert job(orch, job_id)["status"] == "SUCCEEDED"
    state = orch.plane().state()
    assert state is not None
    converter = orch_data_converter(load_key(orch.env))
    temporal = await TemporalClient.connect(state.address, data_converter=converter)
    try:
        yield Launched(state.ui_url, temporal, job_id)
    finally:
        orch("down", "-y", CLUSTER, check=False)


@pytest_asyncio.fixture(scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BrowserContext]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with web_ui.chromium(tmp_path_factory.mktemp("chromium-profile"), COLUMNS) as context:
        yield context


@pytest_asyncio.fixture
async def page(browser: BrowserContext) -> AsyncIterator[Page]:
    page = await browser.new_page()
    try:
        yield page
    finally:
        await page.close()


async def shot(page: Page, name: str) -> None:
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


async def the_workflow(launched: Launched, kind: str) -> Workflow:
    """``cluster`` (cluster/<name>), ``launch`` (its first launch) or ``job`` (job/<id>)."""
    temporal = launched.temporal
    if kind == "cluster":
        return await read_workflow(temporal, cluster_workflow_id(CLUSTER))
    if kind == "launch":
        child = await launch_child(temporal, cluster_workflow_id(CLUSTER))
        return await read_workflow(temporal, child)
    return await read_workflow(temporal, managed_job_workflow_id(launched.job_id))


def names_its_subject(launched: Launched, kind: str, summary: str) -> bool:
    return (f"managed job {launched.job_id}" in summary if kind == "job"
            else CLUSTER in summary)


async def test_the_list_finds_a_cluster_and_a_job_by_their_search_attributes(
    launched: Launched, page: Page,
) -> None:
    cluster_id, job_id = cluster_workflow_id(CLUSTER), managed_job_workflow_id(launched.job_id)
    by_cluster, by_job = f'{SA_CLUSTER}="{CLUSTER}"', f'{SA_JOB_ID}="{launched.job_id}"'
    shown = {}
    for query, wanted, other in ((by_cluster, cluster_id, job_id), (by_job, job_id, cluster_id)):
        expected = await listed_ids(launched.temporal, query)
        assert wanted in expected and other not in expected, (query, expected)

        rows = await web_ui.listed(page, web_ui.list_url(launched.ui_url, query), len(expected))

        assert {row["Workflow ID"] for row in rows} == expected, query
        shown.update({row["Workflow ID"]: row for row in rows})
    assert (shown[cluster_id]["Type"], shown[cluster_id][SA_CLUSTER]) == (
        "ClusterWorkflow", CLUSTER)
    assert (shown[job_id]["Type"], shown[job_id][SA_JOB_ID]) == (
        "ManagedJobWorkflow", str(launched.job_id))
    for kind, workflow_id in (("cluster", cluster_id), ("job", job_id)):
        summary = (await read_workflow(launched.temporal, workflow_id)).summary
        assert summary and names_its_subject(launched, kind, summary), summary
        assert shown[workflow_id][SA_SUMMARY] == summary

    both = f"{by_cluster} OR {by_job}"
    await web_ui.listed(page, web_ui.list_url(launched.ui_url, both), 2)
    await shot(page, "list")


@pytest.mark.parametrize("kind", ["cluster", "launch", "job"])
async def test_a_workflow_page_shows_its_summary_and_current_details(
    launched: Launched, page: Page, kind: str,
) -> None:
    workflow = await the_workflow(launched, kind)
    assert workflow.summary and names_its_subject(launched, kind, workflow.summary), workflow
    assert workflow.current_details, workflow

    shown = await web_ui.user_metadata(
        page, web_ui.workflow_url(launched.ui_url, workflow.id, workflow.run_id, "user-metadata"))
    await shot(page, f"{kind}-user-metadata")

    for part, text in (("summary", workflow.summary),
                       ("current-details", workflow.current_details)):
        given, rendered = shown[part]
        assert given == text, part
        assert web_ui.words(rendered) == web_ui.words(text), (part, rendered)


@pytest.mark.parametrize("kind", ["cluster", "launch", "job"])
async def test_a_workflow_page_shows_its_activities_summaries(
    launched: Launched, page: Page, kind: str,
) -> None:
    workflow = await the_workflow(launched, kind)
    assert workflow.activities and len(workflow.activity_summaries) == workflow.activities
    assert all(workflow.activity_summaries), workflow
    url = web_ui.workflow_url(launched.ui_url, workflow.id, workflow.run_id, "history")
    await page.set_viewport_size(TALL)  # room below the input and result for the screenshots

    await web_ui.timeline(page, url, workflow.activity_summaries)
    await shot(page, f"{kind}-timeline")
    shown = await web_ui.event_summaries(page, url, workflow.activity_summaries)
    await shot(page, f"{kind}-history")

    missing = Counter(workflow.activity_summaries) - Counter(shown)  # children have some too
    assert not missing, (missing, shown)
