"""The error every parser of user input raises: it names the file (or flag) and each field
that is wrong, and the CLI turns it into exit code 2 without a traceback."""

from __future__ import annotations


class SpecError(Exception):
    """A task spec that cannot be used; ``problems`` pairs a field path with what is wrong.
    Subclasses name other user files (``what``) and share the CLI's exit code 2."""

    what = "task spec"

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: invalid {self.what}"]
        lines += [f"  {field}: {message}" if field else f"  {message}" for field, message in
                  problems]
        super().__init__("\n".join(lines))
