"""Commands over several clusters at once (``orch down/stop/start/autostop``): names or
``-a/--all``, checked against `orch status` before anything is done, one confirmation for
all of them, then the operations run concurrently, each cluster's outcome on its own line."""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable
from typing import Annotated

import typer

from cli import display
from cli.app import console, err_console, fail, run
from orch.client import Client, OrchError
from orch.names import name_problem
from orch.status import ClusterStatus

Names = Annotated[list[str] | None, typer.Argument(help="Cluster names.", show_default=False)]
All = Annotated[bool, typer.Option("--all", "-a", help="Every cluster (not managed jobs').")]
Operation = Callable[[Client, str, Callable[[str], None]], Awaitable[str]]


def _unknown(name: str, known: list[str], job_clusters: dict[str, str]) -> str:
    if name in job_clusters:
        return (f"{name} is the cluster of managed job {job_clusters[name]}: "
                f"use orch jobs cancel {job_clusters[name]}")
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    problem = name_problem(name)
    if problem is not None:  # no cluster could have it: say why (orch.names)
        hint += f", and is not a valid cluster name: {problem}"
    return f"cluster {name} does not exist{hint}; orch status lists the clusters"


def targets(names: list[str] | None, all_: bool,
            statuses: frozenset[ClusterStatus] | None = None) -> list[str]:
    """The clusters a command acts on: with ``--all`` every one in ``statuses`` (those the
    operation applies to: `stop -a` leaves stopped clusters alone), else the names given,
    each of which must exist (exit 2 otherwise, with close matches)."""
    names = list(dict.fromkeys(names or []))  # in order, once each
    if all_ and names:
        raise fail("pass cluster names or --all, not both", code=2)
    if not all_ and not names:
        raise fail("name the clusters, or pass --all", code=2)
    summaries = run(lambda client: client.status())
    known = [s.name for s in summaries if not s.job_id]
    if all_:
        return [s.name for s in summaries
                if not s.job_id and (statuses is None or s.status in statuses)]
    job_clusters = {s.name: s.job_id for s in summaries if s.job_id}
    missing = [_unknown(n, known, job_clusters) for n in names if n not in known]
    if missing:
        raise fail("; ".join(missing), code=2)
    return names


def confirmed(names: list[str] | None, all_: bool, yes: bool, verb: str,
              statuses: frozenset[ClusterStatus] | None = None, warning: str = "") -> list[str]:
    """The :func:`targets`, once the user said yes to all of them at once (or passed -y)."""
    chosen = targets(names, all_, statuses)
    if chosen and not yes:
        typer.confirm(f"{verb} {len(chosen)} cluster(s): {', '.join(chosen)}?{warning}",
                      abort=True)
    return chosen


def for_each(names: list[str], title: str, operation: Operation) -> None:
    """Run ``operation`` on every cluster concurrently; each prints its outcome, and a
    failure of one (shown) does not stop the others. Exit 1 if any failed."""
    if not names:
        console.print("No cluster to act on.")
        return

    async def go(client: Client) -> int:
        with display.Progress(console, f"{title} {', '.join(names)}") as progress:
            def on_step(name: str) -> Callable[[str], None]:
                return lambda step: progress.step(f"{name}: {step}")

            outcomes = await asyncio.gather(
                *(operation(client, n, on_step(n)) for n in names), return_exceptions=True)
        failed = 0
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, OrchError):
                err_console.print(f"[bold red]Error:[/] {name}: {outcome}", highlight=False)
                failed += 1
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                console.print(outcome, highlight=False)
        return failed

    if run(go):
        raise typer.Exit(1)
