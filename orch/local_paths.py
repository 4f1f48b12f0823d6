"""What a path the user wrote is on this machine, without ever raising: a path with a NUL
byte, one too long for the OS or one behind a directory we may not read makes ``Path``'s
own ``is_dir``/``exists``/``resolve`` raise ValueError or OSError, which would escape as a
traceback instead of a message naming the field."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

FILE, DIRECTORY, MISSING, OTHER = "file", "directory", "missing", "other"


def path_kind(path: str | Path) -> str:
    """``"file"``, ``"directory"``, ``"missing"``, ``"other"`` (a socket, a device), or
    why it cannot be a path here ("not a usable path: …")."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return MISSING
    except ValueError:  # a NUL byte
        return "not a usable path: it contains a NUL character"
    except OSError as exc:
        reason = "too long" if exc.errno == errno.ENAMETOOLONG else exc.strerror or str(exc)
        return f"not a usable path: {reason}"
    return DIRECTORY if stat.S_ISDIR(mode) else FILE if stat.S_ISREG(mode) else OTHER


def resolved(path: Path) -> str:
    """``path`` made absolute with symlinks resolved, or as given when it cannot be."""
    try:
        return str(path.resolve())
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop (<3.13)
        return str(path)
