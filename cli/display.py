"""Tables and progress for the terminal (rich)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.table import Table

from orch.client import ClusterSummary
from orch.runtime.jobs import JobRecord
from orch.server import ServerState


class Progress:
    """A spinner naming the current step; each finished step stays on screen."""

    def __init__(self, console: Console, title: str):
        self.console = console
        self.title = title
        self.status: Status | None = None
        self.current: str | None = None
        self.started = datetime.now(UTC)

    def __enter__(self) -> Progress:
        self.status = self.console.status(self.title)
        self.status.__enter__()
        return self

    def step(self, name: str) -> None:
        if self.current:
            self.console.print(f"  [green]✓[/] {self.current}")
        self.current = name
        assert self.status is not None
        self.status.update(f"{self.title}: {name}")

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if self.current and exc_type is None:
            self.console.print(f"  [green]✓[/] {self.current}")
        assert self.status is not None
        self.status.__exit__(exc_type, *rest)


def ago(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    seconds = int((datetime.now(UTC) - moment).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m {secs}s" if hours else f"{minutes}m {secs}s"


def clusters_table(console: Console, clusters: list[ClusterSummary]) -> None:
    if not clusters:
        console.print("No clusters.")
        return
    table = Table(show_edge=False, box=None, header_style="bold")
    for column in ("NAME", "STATUS", "CLOUD", "REGION", "RESOURCES", "LAUNCHED", "MANAGED JOB"):
        table.add_column(column)
    for c in clusters:
        table.add_row(c.name, c.status, c.cloud or "-", c.region or "-", c.resources or "-",
                      ago(c.launched_at), c.job_id or "-")
    console.print(table)


def job_json(job: JobRecord) -> dict[str, Any]:
    return {**job.model_dump(mode="json", exclude={"driver_pid"}), "duration_s": job.duration_s}


def jobs_table(console: Console, cluster: str, jobs: list[JobRecord]) -> None:
    if not jobs:
        console.print(f"No jobs on {cluster}.")
        return
    table = Table(show_edge=False, box=None, header_style="bold", title=f"Jobs on {cluster}")
    for column in ("ID", "NAME", "STATUS", "SUBMITTED", "DURATION"):
        table.add_column(column)
    for job in jobs:
        table.add_row(str(job.id), job.name or "-", job.status, ago(job.submitted_at),
                      duration(job.duration_s))
    console.print(table)


def server_state(console: Console, state: ServerState, running: bool) -> None:
    table = Table(show_header=False, box=None)
    table.add_row("Temporal server", f"{state.address} ({'up' if running else 'down'})")
    table.add_row("Web UI", state.ui_url)
    table.add_row("Server pid", str(state.server_pid))
    table.add_row("Worker pid", str(state.worker_pid or "-"))
    console.print(table)
