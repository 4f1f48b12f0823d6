"""``orch config show``: the effective config and where each value came from.

Reads the file and the environment only; it never starts the control plane, so it also
works (and explains itself) when the config is what keeps the control plane from starting.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from cli.app import AsJson, app, console, fail
from orch.settings import Loaded, load
from orch.spec import SpecError

config_app = typer.Typer(help="The config file ($ORCH_CONFIG or $ORCH_HOME/config.yaml).",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def show(as_json: AsJson = False) -> None:
    """Print every setting, its effective value and its source (file, env VAR, default)."""
    try:
        loaded = load()
    except SpecError as err:
        raise fail(str(err), code=2) from None
    if as_json:
        print(json.dumps(as_dict(loaded)))
        return
    state = "" if loaded.file_exists else " (not present: defaults and environment only)"
    console.print(f"Config file: {escape(str(loaded.path))}{state}", highlight=False)
    table = Table(show_edge=False, box=None, header_style="bold")
    for column in ("KEY", "VALUE", "SOURCE"):
        table.add_column(column)
    for key, value in loaded.values().items():
        shown = "all" if key == "allowed_clouds" and value is None else _text(value)
        table.add_row(key, escape(shown), escape(loaded.sources[key]))
    console.print(table)


def as_dict(loaded: Loaded) -> dict[str, Any]:
    return {
        "path": str(loaded.path),
        "file_exists": loaded.file_exists,
        "values": {key: {"value": value, "source": loaded.sources[key]}
                   for key, value in loaded.values().items()},
    }


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
    return str(value).lower() if isinstance(value, bool) else str(value)
