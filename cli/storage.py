"""``orch storage``: the buckets orch created, as ``sky storage`` has them (ls, delete)."""

from __future__ import annotations

import difflib
import json
from typing import Annotated

import typer
from rich.table import Table

from cli.app import AsJson, Yes, console, err_console, fail, run
from cli.display import ago
from orch.client import Client, OrchError
from orch.client.storage import Storage, StorageSummary

storage_app = typer.Typer(
    help="Buckets orch created for tasks' file_mounts: list them, delete them.",
    no_args_is_help=True,
)


def _table(buckets: list[StorageSummary]) -> None:
    if not buckets:
        console.print("No existing storage.")
        return
    table = Table(show_edge=False, box=None, header_style="bold")
    for column in ("NAME", "CREATED", "STORE", "REGION", "CREATED BY", "PERSISTENT",
                   "USED BY", "STATUS"):
        table.add_column(column)
    for b in buckets:
        table.add_row(b.name, ago(b.created_at), b.store.upper(), b.region or "-",
                      b.created_by or "-", "yes" if b.persistent else "no",
                      ", ".join(b.users) or "-", b.status)
    console.print(table, highlight=False)


@storage_app.command("ls")
def ls(as_json: AsJson = False) -> None:
    """List the buckets orch created (never those given by URI)."""
    buckets = run(lambda client: Storage(client).ls())
    if as_json:
        print(json.dumps([b.model_dump(mode="json") for b in buckets]))
        return
    _table(buckets)


def _chosen(names: list[str], all_: bool, buckets: list[StorageSummary]
            ) -> list[StorageSummary]:
    if all_ and names:
        raise fail("pass bucket names or --all, not both", code=2)
    if not all_ and not names:
        raise fail("name the buckets, or pass --all", code=2)
    if all_:
        return buckets
    known = sorted({b.name for b in buckets})
    missing = []
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            missing.append(f"storage {name} does not exist{hint}; orch storage ls lists them")
    if missing:
        raise fail("; ".join(missing), code=2)
    return [b for b in buckets if b.name in names]


@storage_app.command("delete")
def delete(
    names: Annotated[list[str] | None, typer.Argument(help="Bucket names.",
                                                      show_default=False)] = None,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Every bucket orch created.")
                    ] = False,
    yes: Yes = False,
) -> None:
    """Delete buckets orch created, contents and all (not while in use)."""
    chosen = _chosen(list(dict.fromkeys(names or [])), all_,
                     run(lambda client: Storage(client).ls()))
    if not chosen:
        console.print("No existing storage.")
        return
    if not yes:
        typer.confirm(f"Deleting storage object(s): {', '.join(b.name for b in chosen)}. "
                      "Proceed?", default=True, abort=True)

    async def go(client: Client) -> int:
        failed = 0
        for bucket in chosen:
            console.print(f"Deleting storage object {bucket.name}...", highlight=False)
            try:
                await Storage(client).delete(bucket)
            except OrchError as err:
                err_console.print(f"[bold red]Error:[/] {bucket.name}: {err}", highlight=False)
                failed += 1
                continue
            console.print(f"Deleted {bucket.store.upper()} bucket {bucket.name}.",
                          highlight=False)
        return failed

    if run(go):
        raise typer.Exit(1)
