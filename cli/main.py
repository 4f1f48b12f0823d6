"""The ``orch`` command: a thin layer over ``orch.client``.

Each module registers its commands on the one typer app, in the order of ``--help``.
"""

from __future__ import annotations

from cli import catalog, clusters, lifecycle, server  # noqa: F401  (they register commands)
from cli.app import app
from cli.jobs import jobs_app

app.add_typer(jobs_app, name="jobs")

__all__ = ["app"]

if __name__ == "__main__":
    app()
