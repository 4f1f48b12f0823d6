"""``orch server start|stop|status`` and ``orch worker``."""

from __future__ import annotations

import os
import sys

import typer

from cli import display
from cli.app import app, console, fail, settings
from orch.server import ControlPlane, ControlPlaneError

server_app = typer.Typer(help="The embedded control plane (Temporal dev server + worker).",
                         no_args_is_help=True)
app.add_typer(server_app, name="server")


@server_app.command("start")
def server_start() -> None:
    """Start the embedded Temporal dev server and an orch worker (if not running)."""
    try:
        state = ControlPlane().ensure()
    except ControlPlaneError as err:
        raise fail(str(err)) from None
    display.server_state(console, state, running=True)


@server_app.command("stop")
def server_stop() -> None:
    """Stop the embedded worker and server (clusters and their workflows are kept)."""
    console.print("Stopped." if ControlPlane().stop() else "Not running.")


@server_app.command("status")
def server_status() -> None:
    """Where the Temporal server and its Web UI are."""
    temporal = settings().temporal_settings()
    if temporal.address:
        console.print(f"Using the Temporal server at {temporal.address} "
                      f"(namespace {temporal.namespace}); no embedded server.")
        return
    plane = ControlPlane()
    state = plane.state()
    if state is None:
        console.print("Not running. `orch server start` (or any command) starts it.")
        raise typer.Exit(1)
    display.server_state(console, state, running=plane.server_running(state),
                         worker_running=plane.worker_running(state))


@app.command()
def worker() -> None:
    """Run an orch worker in the foreground (for a Temporal cluster: set TEMPORAL_ADDRESS)."""
    temporal = settings().temporal_settings()
    address = temporal.address
    if not address:
        state = ControlPlane().state()
        if state is None:
            raise fail("set TEMPORAL_ADDRESS, or start the embedded server (orch server start)")
        address = state.address
    os.execv(sys.executable, [sys.executable, "-m", "workers", "--address", address])
