"""``orch down``, ``orch stop``, ``orch start`` and ``orch autostop``: on the clusters
named, or on every one with ``-a`` (see ``cli.bulk``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from cli.app import Yes, app
from cli.bulk import All, Names, confirmed, for_each
from orch.client import Client
from orch.lifecycle import Autostop
from orch.records import TeardownResult
from orch.status import ClusterStatus

RUNNING = frozenset({ClusterStatus.UP, ClusterStatus.INIT})  # what `stop -a` stops
STARTABLE = frozenset({ClusterStatus.STOPPED, ClusterStatus.INIT})  # what `start -a` starts


def _outcome(result: TeardownResult, message: str) -> str:
    warnings = "".join(f"\n[yellow]Warning:[/] {w}" for w in result.warnings)
    return message + warnings


@app.command()
def down(
    clusters: Names = None, all_: All = False,
    purge: Annotated[bool, typer.Option(
        "--purge", help="Forget the cluster even if its cloud calls keep failing.")] = False,
    yes: Yes = False,
) -> None:
    """Tear clusters down: stop Ray, terminate the instances, confirm they are gone."""
    names = confirmed(clusters, all_, yes, "Tear down", warning=" Their data will be lost.")

    async def one(client: Client, name: str, on_step: Callable[[str], None]) -> str:
        result = await client.down(name, purge=purge)
        if result is None:
            return f"Cluster {name} does not exist: nothing to do."
        return _outcome(result, result.message)

    for_each(names, "Tearing down", one)


@app.command()
def stop(clusters: Names = None, all_: All = False, yes: Yes = False) -> None:
    """Stop clusters: Ray stopped, instances stopped and confirmed so; disks are kept."""
    names = confirmed(clusters, all_, yes, "Stop", RUNNING)

    async def one(client: Client, name: str, on_step: Callable[[str], None]) -> str:
        result = await client.stop(name, on_step=on_step)
        return _outcome(result, f"Cluster {name} stopped. {result.message}")

    for_each(names, "Stopping", one)


@app.command()
def start(
    clusters: Names = None, all_: All = False,
    retry_until_up: Annotated[bool, typer.Option(
        "--retry-until-up", help="Keep trying (in its zone) until there is capacity.")] = False,
    yes: Yes = False,
) -> None:
    """Start stopped clusters where they are (no failover: their disks hold data)."""
    names = confirmed(clusters, all_, yes, "Start", STARTABLE)

    async def one(client: Client, name: str, on_step: Callable[[str], None]) -> str:
        record = await client.start(name, on_step=on_step, retry_until_up=retry_until_up)
        return f"Cluster {name} is {record.status}: {record.task_resources}"

    for_each(names, "Starting", one)


@app.command()
def autostop(
    clusters: Names = None, all_: All = False,
    idle_minutes: Annotated[int, typer.Option(
        "--idle-minutes", "-i", min=0, help="Idle minutes before stopping.")] = 5,
    down: Annotated[bool, typer.Option("--down", help="Tear down instead of stopping.")] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Remove the setting.")] = False,
    yes: Yes = False,
) -> None:
    """Stop (or tear down) clusters after they have been idle: no job pending or running."""
    setting = None if cancel else Autostop(idle_minutes=idle_minutes, down=down)
    verb = "Cancel autostop of" if cancel else "Set autostop of"
    one_named = len(clusters or []) == 1 and not all_  # no question for one, as before
    names = confirmed(clusters, all_, yes or one_named, verb)

    async def one(client: Client, name: str, on_step: Callable[[str], None]) -> str:
        record = await client.set_autostop(name, setting)
        if setting is None:
            return f"Autostop of {name} cancelled."
        return f"Cluster {name} will {record.autostop_summary()}."

    for_each(names, "Setting autostop of", one)
