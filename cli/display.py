"""Tables and progress for the terminal (rich)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.table import Table

from orch.catalog.queries import AcceleratorOffer
from orch.check import CloudCheck
from orch.client import ClusterSummary
from orch.failover_rules import HISTORY_HEADERS, Candidate, FailoverAttempt, history_rows
from orch.managed_jobs import JobSummary, ManagedJobStatus
from orch.runtime.job_records import JobRecord
from orch.server import ServerState
from orch.summaries import short


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
    columns = ["NAME", "STATUS", "CLOUD", "REGION", "RESOURCES", "LAUNCHED", "AUTOSTOP"]
    with_jobs = any(c.job_id for c in clusters)
    for column in columns + (["MANAGED JOB"] if with_jobs else []):
        table.add_column(column)
    for c in clusters:
        row = [c.name, c.status, c.cloud or "-", c.region or "-", c.resources or "-",
               ago(c.launched_at), c.autostop or "-"]
        table.add_row(*row, *([c.job_id or "-"] if with_jobs else []))
    console.print(table)


def init_hint(console: Console, names: list[str]) -> None:
    """Under the table: what an INIT cluster is, and what to do with one a launch left so."""
    if not names:
        return
    name = names[0] if len(names) == 1 else "NAME"
    console.print(f"INIT ({', '.join(names)}): launching, or left half-made by a failed launch; "
                  f"orch launch -c {name} TASK retries (keeping its nodes), orch down {name} "
                  "removes it", highlight=False)


_RUNNING_FIRST = (ManagedJobStatus.RUNNING, ManagedJobStatus.RECOVERING,
                  ManagedJobStatus.STARTING, ManagedJobStatus.PENDING)


def queue_summary(jobs: list[JobSummary]) -> str:
    """One line for `orch status`, as `sky status` shows: how many jobs are in each
    status, in-progress ones first (running before waiting), then ended ones, e.g.
    "Managed jobs: 2 RUNNING, 1 PENDING, 5 SUCCEEDED — orch jobs queue for details"."""
    if not jobs:
        return "Managed jobs: none (orch jobs launch starts one)"
    counts = Counter(job.status for job in jobs)
    seen = dict.fromkeys(s for s in (*_RUNNING_FIRST, *ManagedJobStatus) if s in counts)
    order = sorted(seen, key=lambda s: s.is_terminal)  # stable: keeps the order above
    parts = ", ".join(f"{counts[s]} {s}" for s in order)
    return f"Managed jobs: {parts} — orch jobs queue for details"


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


def server_state(console: Console, state: ServerState, running: bool,
                 worker_running: bool = True) -> None:
    """The embedded control plane; a server or worker that is gone is said so, in red,
    with how to bring it back."""
    table = Table(show_header=False, box=None)
    table.add_row("Temporal server", f"{state.address} ({'up' if running else '[red]down[/]'})")
    table.add_row("Web UI", state.ui_url)
    table.add_row("Server pid", str(state.server_pid))
    worker = f"{state.worker_pid or '-'} (running)"
    if not worker_running:
        gone = f"{state.worker_pid} (dead)" if state.worker_pid else "none"
        worker = f"[red]{gone}[/]: nothing runs launches or jobs; orch server start restarts it"
    table.add_row("Worker pid", worker)
    console.print(table, highlight=False)


def _table(console: Console, headers: list[str], rows: list[list[str]], title: str = "",
           one_line: bool = False) -> None:
    """A plain table; ``one_line``: each row on one line, the last column (a message) cut
    with an ellipsis to leave the others whole."""
    table = Table(show_edge=False, box=None, header_style="bold", title=title or None)
    for index, header in enumerate(headers):
        if not one_line:
            table.add_column(header, overflow="fold")
        elif index < len(headers) - 1:
            widest = max(len(cell) for cell in [header, *(row[index] for row in rows)])
            table.add_column(header, no_wrap=True, min_width=min(widest, ONE_LINE_CELL))
        else:
            table.add_column(header, no_wrap=True, overflow="ellipsis")
    for row in rows:
        table.add_row(*row)
    console.print(table)


GROUP_AFTER = 10  # more attempts than this are shown one row per error, not per attempt
TABLE_MESSAGE = 60  # characters of an attempt's message in a table cell
GROUP_HEADERS = ["ERROR", "CODE", "ATTEMPTS", "WHERE", "BLOCKED", "FIRST MESSAGE"]
ONE_LINE_CELL = 48  # the widest a one-line table keeps a cell before the message column


def failover_table(console: Console, attempts: list[dict[str, Any]], older: int = 0) -> None:
    """Every candidate tried (the latest ones, when ``older`` earlier attempts were only
    counted), its error and the block rule applied; past :data:`GROUP_AFTER` attempts,
    one row per error and code, so that 40 attempts stay a table one can read."""
    tried = [FailoverAttempt.model_validate(a) for a in attempts]
    total = older + len(tried)
    if len(tried) > GROUP_AFTER:
        title = f"Failover attempts: {total}, grouped by error"
        if older:
            title += f" (the first {older} only counted)"
        _table(console, GROUP_HEADERS, attempt_groups(tried), title=title, one_line=True)
        return
    rows = [[*row[:-1], short(row[-1], TABLE_MESSAGE)] for row in history_rows(tried, older)]
    title = "Failover attempts"
    if older:
        title += f": {total} in all, the first {older} not shown"
    _table(console, HISTORY_HEADERS, rows, title=title, one_line=True)


def attempt_groups(attempts: list[FailoverAttempt]) -> list[list[str]]:
    """One row per error type and code, in the order they first happened: how many
    attempts, where (the first few places), what they blocked, the first message."""
    groups: dict[tuple[str, str], list[FailoverAttempt]] = {}
    for attempt in attempts:
        groups.setdefault((attempt.error_type, attempt.code), []).append(attempt)
    rows = []
    for (error, code), group in groups.items():
        places: dict[str, list[str]] = {}
        for a in group:
            zones = places.setdefault(a.candidate.cloud, [])
            if (a.zone or a.candidate.region) not in zones:
                zones.append(a.zone or a.candidate.region)
        where = "; ".join(f"{cloud} {_zones(zones)}" for cloud, zones in places.items())
        rows.append([error, code or "-", str(len(group)), where,
                     _blocked(group), short(group[0].message, TABLE_MESSAGE)])
    return rows


def _blocked(group: list[FailoverAttempt]) -> str:
    """What a group of attempts blocked: the one rule, or how many of each scope."""
    blocks = list(dict.fromkeys(a.block for a in group if a.block is not None))
    if not blocks:
        return "nothing (retried)"
    if len(blocks) == 1:
        return blocks[0].describe()
    scopes = Counter("zone" if b.zone else "region" if b.region else "cloud" for b in blocks)
    return ", ".join(f"{n} {scope}{'s' if n > 1 else ''}" for scope, n in scopes.items())


def _zones(zones: list[str]) -> str:
    shown = ", ".join(zones[:3]) or "-"
    return shown + (f" (+{len(zones) - 3})" if len(zones) > 3 else "")


def plan_json(candidates: list[Candidate], usable: dict[str, bool],
              secrets: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The candidates; with the task's ``secrets`` (names → ``<redacted>``) on each, when
    it has some, so a dry run shows what the task will be given."""
    extra = {"secrets": secrets} if secrets else {}
    return [{**c.model_dump(mode="json"), "usable": usable.get(c.cloud, False), **extra}
            for c in candidates]


def plan_table(console: Console, candidates: list[Candidate], checks: list[CloudCheck],
               num_nodes: int) -> None:
    usable = {c.cloud: c.ok for c in checks}
    rows = [
        [c.cloud, c.region, _zones(c.zones), c.instance_type or "-",
         c.accelerators_text() or "-", "yes" if c.use_spot else "no",
         f"{c.price_per_hour:.2f}", "yes" if usable.get(c.cloud) else "no (orch check)"]
        for c in candidates
    ]
    _table(console, ["CLOUD", "REGION", "ZONES", "INSTANCE TYPE", "ACCELERATORS", "SPOT",
                     f"$/H ({num_nodes} NODE{'S' if num_nodes > 1 else ''})", "USABLE"],
           rows, title="Candidates, cheapest first")
    best = next((c for c in candidates if usable.get(c.cloud)), None)
    if best is not None:
        console.print(f"orch would launch on {best.cloud} {best.region}"
                      f"{' ' + best.instance_type if best.instance_type else ''} "
                      f"(${best.price_per_hour:.2f}/h), failing over down this list.")
    else:
        console.print("No candidate is usable from here: see orch check.")


def checks_table(console: Console, checks: list[CloudCheck]) -> None:
    _table(console, ["CLOUD", "ENABLED", "DETAILS"],
           [[c.cloud, "[green]yes[/]" if c.ok else "[red]no[/]", c.reason] for c in checks])


def accelerators_table(console: Console, offers: list[AcceleratorOffer]) -> None:
    if not offers:
        console.print("No such accelerator in the catalog.")
        return
    rows = [[o.accelerator, str(o.count), o.cloud, o.region, o.instance_type, f"{o.vcpus:g}",
             f"{o.memory_gib:g}", f"{o.price:.2f}",
             f"{o.spot_price:.2f}" if o.spot_price is not None else "-"] for o in offers]
    _table(console, ["GPU", "COUNT", "CLOUD", "REGION", "INSTANCE TYPE", "VCPUS", "MEM (GB)",
                     "$/H", "SPOT $/H"], rows)
