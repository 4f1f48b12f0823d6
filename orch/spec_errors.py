"""The error every parser of user input raises: it names the file (or flag) and each field
that is wrong, and the CLI turns it into exit code 2 without a traceback."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# A message never grows with the input: a multi-megabyte value or key is cut when quoted.
MAX_QUOTED = 80
MAX_MESSAGE = 500
MAX_PROBLEMS = 20


def shorten(text: str, limit: int = MAX_QUOTED) -> str:
    """``text`` cut to ``limit`` characters, ending in "…" when it was longer."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def quoted(value: object, limit: int = MAX_QUOTED) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters (a huge value's repr is
    never built in full: a string is cut before it is quoted)."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit - 3]) + "…"
    if isinstance(value, list | dict | tuple | set) and len(value) > limit:
        return f"<a {type(value).__name__} of {len(value):,} items>"
    return shorten(repr(value), limit)


def field_path(parts: Sequence[object]) -> str:
    """``["resources", "any_of", 0, "cpus"]`` → ``resources.any_of[0].cpus`` (an empty key
    shown as '')."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + (str(part) or "''")
    return path


class SpecError(Exception):
    """A task spec that cannot be used; ``problems`` pairs a field path with what is wrong.
    Subclasses name other user files (``what``) and share the CLI's exit code 2."""

    what = "task spec"

    def __init__(self, source: str, problems: list[tuple[str, str]],
                 lines: Mapping[str, int] | None = None):
        """``lines``: the line of the file each field is on (shown after its message)."""
        self.source = shorten(source, 300)
        self.problems = [(shorten(field, 200), shorten(message, MAX_MESSAGE))
                         for field, message in problems]
        self.lines = dict(lines or {})
        shown = [(field, message + (f" (line {self.lines[field]})" if field in self.lines
                                    else "")) for field, message in self.problems]
        rendered = [f"  {field}: {message}" if field else f"  {message}"
                    for field, message in shown[:MAX_PROBLEMS]]
        if len(self.problems) > MAX_PROBLEMS:
            rendered.append(f"  … and {len(self.problems) - MAX_PROBLEMS} more")
        super().__init__("\n".join([f"{self.source}: invalid {self.what}", *rendered]))
