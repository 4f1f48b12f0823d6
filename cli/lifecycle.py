"""``orch stop``, ``orch start`` and ``orch autostop``."""

from __future__ import annotations

from typing import Annotated

import typer

from cli import display
from cli.app import Yes, app, console, run
from orch.client import Client
from orch.lifecycle import Autostop


@app.command()
def stop(clusters: Annotated[list[str], typer.Argument(help="Cluster names.")],
         yes: Yes = False) -> None:
    """Stop clusters: Ray stopped, instances stopped and confirmed so; disks are kept."""
    if not yes:
        typer.confirm(f"Stop {', '.join(clusters)}?", abort=True)

    async def go(client: Client) -> None:
        for name in clusters:
            with display.Progress(console, f"Stopping {name}") as progress:
                result = await client.stop(name, on_step=progress.step)
            for warning in result.warnings:
                console.print(f"[yellow]Warning:[/] {warning}", highlight=False)
            console.print(f"Cluster {name} stopped. {result.message}", highlight=False)

    run(go)


@app.command()
def start(
    clusters: Annotated[list[str], typer.Argument(help="Cluster names.")],
    retry_until_up: Annotated[bool, typer.Option(
        "--retry-until-up", help="Keep trying (in its zone) until there is capacity.")] = False,
    yes: Yes = False,
) -> None:
    """Start stopped clusters where they are (no failover: their disks hold data)."""
    if not yes:
        typer.confirm(f"Start {', '.join(clusters)}?", abort=True)

    async def go(client: Client) -> None:
        for name in clusters:
            with display.Progress(console, f"Starting {name}") as progress:
                record = await client.start(name, on_step=progress.step,
                                            retry_until_up=retry_until_up)
            console.print(f"Cluster {name} is {record.status}: {record.task_resources}")

    run(go)


@app.command()
def autostop(
    cluster: str,
    idle_minutes: Annotated[int, typer.Option(
        "--idle-minutes", "-i", min=0, help="Idle minutes before stopping.")] = 5,
    down: Annotated[bool, typer.Option("--down", help="Tear down instead of stopping.")] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Remove the setting.")] = False,
) -> None:
    """Stop (or tear down) a cluster after it has been idle: no job pending or running."""
    setting = None if cancel else Autostop(idle_minutes=idle_minutes, down=down)
    record = run(lambda client: client.set_autostop(cluster, setting))
    if setting is None:
        console.print(f"Autostop of {cluster} cancelled.")
    else:
        console.print(f"Cluster {cluster} will {record.autostop_summary()}.")
