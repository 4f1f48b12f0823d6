"""The typer app, its consoles, and the one place user errors become exit codes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from cli import display
from orch.client import SERVER_ERRORS, USER_ERRORS, Client, OrchError
from orch.client.codec import CodecKeyError
from orch.server import ControlPlaneError
from orch.settings import Settings, load_settings
from orch.spec import SpecError

app = typer.Typer(
    name="orch",
    help="Launch clusters, run jobs on them, tear them down: durably, on Temporal.",
    no_args_is_help=True,
    add_completion=False,  # cli/version.py has the options, taking a shell name
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")

Yes = Annotated[bool, typer.Option("--yes", "-y", help="Skip confirmation.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]Error:[/] {message}", highlight=False)
    return typer.Exit(code)


def settings() -> Settings:
    """The effective config (file, env, defaults); a broken one exits 2 with its message."""
    try:
        return load_settings()
    except SpecError as err:
        raise fail(str(err), code=2) from None


def run(coro_fn: Callable[[Client], Awaitable[T]],
        on_interrupt: Callable[[], None] | None = None) -> T:
    """Connect (starting the embedded control plane if needed), run, and turn every user
    error into a message and an exit code, never a traceback. Ctrl-C calls
    ``on_interrupt`` (what to do with the operation under way) before exiting 130."""

    async def main() -> T:
        client = await Client.connect()
        async with client:
            return await coro_fn(client)

    try:
        return asyncio.run(main())
    except SpecError as err:  # a broken config file, read while connecting
        raise fail(str(err), code=2) from None
    except OrchError as err:
        attempts = err.details.get("attempts")
        if attempts:
            older = int(err.details.get("older_attempts") or 0)
            display.failover_table(err_console, attempts, older)
        raise fail(str(err), code=2 if err.kind in USER_ERRORS else 1) from None
    except ControlPlaneError as err:
        raise fail(f"the control plane is not available: {err}") from None
    except CodecKeyError as err:  # a secret encrypted with another key than this one
        raise fail(str(err)) from None
    except SERVER_ERRORS as err:
        hint = (" (if the task has secrets: the workers may have another codec key, and "
                "their log says so; see the README, Secrets)"
                if "Workflow Task in failed state" in str(err) else "")
        raise fail(f"the Temporal server refused the request: {err}{hint}") from None
    except KeyboardInterrupt:
        if on_interrupt is None:
            err_console.print("Interrupted. Operations already submitted go on in the "
                              "background.")
        else:
            on_interrupt()
        raise typer.Exit(130) from None
