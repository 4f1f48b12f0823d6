"""The last resort: an exception no command turned into a message (a bug in orch, not a
mistake of the user) is written with its traceback to a log file, and the user sees one
line saying so and where the log is, exit code 1, never a traceback on screen."""

from __future__ import annotations

import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path

from orch.config import orch_home

LOG_NAME = "cli-errors.log"


def report_internal_error(exc: BaseException) -> int:
    """Log ``exc`` under ``$ORCH_HOME/logs/`` and tell the user; returns the exit code."""
    log = orch_home() / "logs" / LOG_NAME
    where = str(log)
    try:
        _append(log, exc)
    except OSError as err:  # an unwritable home must not hide the error itself
        where = f"not written ({err.strerror or err}); the traceback follows"
        traceback.print_exception(exc, file=sys.stderr)
    print(f"Error: internal error, please report: {type(exc).__name__}: "
          f"{str(exc)[:200]}\nThe details are in {where}", file=sys.stderr)
    return 1


def _append(log: Path, exc: BaseException) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as out:
        out.write(f"--- {datetime.now(UTC).isoformat()} orch {' '.join(sys.argv[1:])}\n")
        traceback.print_exception(exc, file=out)
