"""The ``orch`` command: a thin layer over ``orch.client``.

Each module registers its commands on the one typer app, in the order of ``--help``.
"""

from __future__ import annotations

import sys

from cli import (  # noqa: F401  (they register commands)
    catalog,
    clusters,
    config_cmd,  # noqa: F401  (registers `orch config`)
    cost_report,
    lifecycle,
    server,
    version,
)
from cli.app import app, fail
from cli.crash import report_internal_error
from cli.jobs import jobs_app
from cli.skypilot_flags import refused_flag
from cli.storage import storage_app
from orch.process_exit import exit_code, exit_without_finalizing

app.add_typer(jobs_app, name="jobs")
app.add_typer(storage_app, name="storage")

__all__ = ["app", "main"]


def main() -> None:
    """The console script: run the app, then leave without interpreter finalization
    (see ``orch.process_exit``), keeping the exit code the command chose; an exception no
    command handled is logged, not shown (``cli.crash``)."""
    refused = refused_flag(sys.argv[1:])
    if refused:
        fail(refused, code=2)
        exit_without_finalizing(2)
    try:
        app()
        code = 0
    except SystemExit as exit_:
        code = exit_code(exit_)
    except Exception as exc:  # a bug: logged, one line on screen (see cli.crash)
        code = report_internal_error(exc)
    exit_without_finalizing(code)


if __name__ == "__main__":
    main()
