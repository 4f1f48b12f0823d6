"""Every command's --help renders (a help text is rich markup: a stray "[/X]" in it made
`orch exec --help` crash before this test)."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cli.main import app


def _paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under ``command`` (typer's own click: groups have .commands)."""
    if hasattr(command, "commands"):
        return [p for name, sub in command.commands.items()
                for p in _paths(sub, (*prefix, name))] + [prefix]
    return [prefix]


PATHS = _paths(typer.main.get_command(app))


def test_the_commands_are_found() -> None:
    assert ("launch",) in PATHS and ("jobs", "launch") in PATHS and len(PATHS) > 15


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) or "orch" for p in PATHS])
def test_help_renders(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
