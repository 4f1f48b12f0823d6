"""Temporal's Web UI driven in Debian's Chromium (headless), read through its DOM.

Playwright drives the system browser (``/usr/bin/chromium``, installed by ``scripts/test``);
``playwright install`` is never run. The flags keep Chromium off the network it would
otherwise call home on (refused in a closed network, and slow to time out). The UI is a
SvelteKit app that renders after its API calls return: every read waits for a selector,
never for a fixed time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

from playwright.async_api import BrowserContext, Page, async_playwright, expect

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 30_000  # a loaded 2-core machine renders slowly; a missing element still fails
expect.set_options(timeout=TIMEOUT_MS)
NAMESPACE = "default"
LIST_ROW = 'tr[data-testid="workflows-summary-configurable-table-row"]'
EVENT_ROW = 'tr[data-testid="event-summary-row"]'
# The UI keeps its list columns in local storage; custom search attributes can be columns.
COLUMNS_KEY = "namespace-workflow-table-columns"


@asynccontextmanager
async def chromium(user_data_dir: Path, columns: list[str]) -> AsyncIterator[BrowserContext]:
    """A headless Chromium with a fresh profile whose workflow list shows ``columns``."""
    if not os.access(CHROMIUM, os.X_OK):
        raise AssertionError(f"{CHROMIUM} is missing: scripts/test installs Debian's chromium "
                             "(as root), or run `apt-get install chromium`")
    stored = {NAMESPACE: [{"label": label, "pinned": i < 2} for i, label in enumerate(columns)]}
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(user_data_dir), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1600, "height": 1000})
        context.set_default_timeout(TIMEOUT_MS)
        await context.add_init_script(
            f"localStorage.setItem({json.dumps(COLUMNS_KEY)}, {json.dumps(json.dumps(stored))})")
        try:
            yield context
        finally:
            await context.close()


def words(text: str) -> list[str]:
    """The words of markdown or of its rendering, which must be the same: the renderer drops
    emphasis and bullets and turns quotes, dashes and fractions typographic."""
    return re.findall(r"\w+", text)


def list_url(ui_url: str, query: str) -> str:
    return f"{ui_url}/namespaces/{NAMESPACE}/workflows?query={quote(query, safe='')}"


def workflow_url(ui_url: str, workflow_id: str, run_id: str, tab: str) -> str:
    """A workflow's page: ``tab`` is ``history`` (timeline and events) or ``user-metadata``."""
    return (f"{ui_url}/namespaces/{NAMESPACE}/workflows/{quote(workflow_id, safe='')}/"
            f"{run_id}/{tab}")


async def listed(page: Page, url: str, expected_rows: int) -> list[dict[str, str]]:
    """The list page's rows, each as {column header: cell text}, once ``expected_rows`` show.

    The count is waited for because the table first renders whatever the previous query or
    a stale visibility read held."""
    await page.goto(url)
    rows = page.locator(LIST_ROW)
    await rows.nth(expected_rows - 1).wait_for()
    headers = [h.strip() for h in await page.locator("table thead th").all_inner_texts()]
    table = []
    for row in await rows.all():
        cells = [c.strip() for c in await row.locator("td").all_inner_texts()]
        table.append({h: c for h, c in zip(headers, cells, strict=False) if h})
    return table


async def user_metadata(page: Page, url: str) -> dict[str, tuple[str, str]]:
    """The User Metadata tab: for summary and current details, the markdown the UI was given
    (its renderer's ``content`` parameter) and the text it rendered. Both are waited for to
    be non-empty: the current details arrive with a query answered by the worker, after the
    frame is drawn."""
    await page.goto(url)
    shown = {}
    for part in ("summary", "current-details"):
        frame = page.locator(f"iframe#user-metadata-{part}")
        await expect(frame).to_have_attribute("src", re.compile(r"[?&]content=[^&]"))
        src = await frame.get_attribute("src") or ""
        content = parse_qs(urlsplit(src).query)["content"][0]
        body = page.frame_locator(f"iframe#user-metadata-{part}").locator("body")
        await expect(body).to_have_text(re.compile(r"\S"))  # rendered once the frame loads
        shown[part] = (content, await body.inner_text())
    return shown


async def timeline(page: Page, url: str, summaries: list[str]) -> None:
    """Open the Timeline tab and wait until it shows each of ``summaries`` (an activity's
    row reads ``type • summary``)."""
    await page.goto(url)
    await page.get_by_role("tab", name="Timeline").click()
    for summary in summaries:
        await page.locator("main").get_by_text(summary).first.wait_for()


async def event_summaries(page: Page, url: str, expected: list[str]) -> list[str]:
    """The ``Summary`` fields of the Event History's compact view (one row per activity or
    child workflow, all on one page), read once a row shows each of ``expected``."""
    await page.goto(f"{url}?per-page=500")
    await page.get_by_role("tab", name="Event History").click()
    await page.get_by_role("button", name="Compact").click()
    rows = page.locator(EVENT_ROW)
    await rows.first.wait_for()
    for summary in expected:
        await rows.filter(has_text=summary).first.wait_for()
    found = []
    for row in await rows.all():
        lines = [line.strip() for line in (await row.inner_text()).splitlines() if line.strip()]
        found += [lines[i + 1] for i, line in enumerate(lines[:-1]) if line == "Summary"]
    return found
