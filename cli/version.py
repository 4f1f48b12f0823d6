"""The app's own options: ``orch --version`` and shell completion.

``--install-completion SHELL`` / ``--show-completion SHELL`` take the shell by name (bash,
zsh, fish, powershell, pwsh, or auto to detect it), as ``sky --install-shell-completion``
does; typer's own options only auto-detect the shell, so the app has them turned off
(``add_completion=False``) and these call typer's completion code with the name.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from typer import completion

from cli.app import app, console, settings
from orch.client.info import versions

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
completion.completion_init()  # typer's completion classes answer the _ORCH_COMPLETE requests


def _shell(value: str) -> str | bool:
    """The shell for typer's callbacks: a name, or True (detect it) for "auto"."""
    if value == "auto":
        return True
    if value not in SHELLS:
        raise typer.BadParameter(f"{value!r} is not one of auto, {', '.join(SHELLS)}")
    return value


def install_completion(ctx: typer.Context, param: typer.CallbackParam,
                       value: str | None) -> None:
    if value is not None:
        completion.install_callback(ctx, param, _shell(value))


def show_completion(ctx: typer.Context, param: typer.CallbackParam,
                    value: str | None) -> None:
    if value is not None:
        completion.show_callback(ctx, param, _shell(value))


def show_version(value: bool) -> None:
    """Print the versions and exit; nothing is started (the server is only asked when
    TEMPORAL_ADDRESS or the config names one, with a short timeout)."""
    if not value:
        return
    found = asyncio.run(versions(settings().temporal_settings()))
    console.print(f"orch {found.orch}", highlight=False)
    console.print(f"Temporal server {found.temporal_server} ({found.temporal_where})",
                  highlight=False)
    console.print(f"Ray {found.ray}", highlight=False)
    console.print(f"Catalog {found.catalog_date}", highlight=False)
    raise typer.Exit()


Shell = "SHELL"


@app.callback()
def options(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=show_version,
        help="Show the versions of orch, the Temporal server, Ray and the catalog.")] = False,
    install: Annotated[str | None, typer.Option(
        "--install-completion", metavar=Shell, is_eager=True, expose_value=False,
        callback=install_completion,
        help="Install completion for SHELL (bash, zsh, fish, powershell, pwsh, auto).")] = None,
    show: Annotated[str | None, typer.Option(
        "--show-completion", metavar=Shell, is_eager=True, expose_value=False,
        callback=show_completion,
        help="Print the completion script for SHELL, to copy or customize.")] = None,
) -> None:
    """Launch clusters, run jobs on them, tear them down: durably, on Temporal."""
