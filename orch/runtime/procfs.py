"""Whether a process is alive, read from /proc (Linux): a zombie counts as gone."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    except PermissionError:  # someone else's, and there
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
