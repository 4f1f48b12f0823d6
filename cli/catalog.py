"""``orch check`` and ``orch show-gpus``: credentials and the catalog (no server needed)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli import display
from cli.app import AsJson, app, console, fail, settings
from orch.catalog.queries import list_accelerators
from orch.check import check_clouds
from orch.spec_values import parse_accelerators


@app.command()
def check() -> None:
    """Which clouds have working credentials on this machine, and why not."""
    display.checks_table(console, check_clouds(allowed=settings().allowed_clouds))


@app.command("show-gpus")
def show_gpus(
    name: Annotated[str | None, typer.Argument(help="e.g. A100 or A100:8.")] = None,
    as_json: AsJson = False,
) -> None:
    """GPUs in the catalog: clouds, regions, instance types, $/h on-demand and spot."""
    if name is not None:
        try:  # the grammar of --gpus, so a typo gets a message and exit 2
            (gpu, count), = (parse_accelerators(name) or {}).items()
        except ValueError as exc:
            raise fail(f"orch show-gpus {name!r}: {exc}", code=2) from None
        name = f"{gpu}:{count}" if ":" in name else gpu  # "A100:8.0" as "A100:8"
    offers = list_accelerators(name)
    if as_json:
        print(json.dumps([o.model_dump(mode="json") for o in offers]))
    else:
        display.accelerators_table(console, offers)
