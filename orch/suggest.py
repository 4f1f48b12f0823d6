"""Close matches for a misspelt name ("; did you mean 'x'?"), shared by every parser of
user input (the task spec, its ``infra`` field, the config file)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def suggest(word: str, options: Iterable[str]) -> str:
    """"; did you mean 'x'?" for the close matches of ``word`` (or "")."""
    close = difflib.get_close_matches(word, list(options), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
