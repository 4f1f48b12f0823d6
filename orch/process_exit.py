"""Leaving a process that used a Temporal client, without CPython's finalization.

The client's Rust runtime keeps threads that may call back into Python while the
interpreter finalizes, which aborts the process with "PyGILState_Release: thread state
must be current" after its work is done (temporalio/sdk-python#300). A process that has
written everything it owes leaves through ``os._exit`` instead, keeping its exit code.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_without_finalizing(code: int) -> NoReturn:
    """Flush what the process wrote, then end it with ``code``; never returns."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_code(exit_: SystemExit) -> int:
    """The code a ``SystemExit`` means, printing a message exit as Python would."""
    if exit_.code is None or isinstance(exit_.code, int):
        return exit_.code or 0
    print(exit_.code, file=sys.stderr)
    return 1
