"""Who starts a workflow, as the Web UI shows it: ``user@host`` in the static details and
in the ``OrchUser`` search attribute (so ``OrchUser="alice@laptop"`` lists her work), and
the text of the static summary and details, computed once by the caller."""

from __future__ import annotations

import getpass
import socket

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from orch.records import SA_JOB_ID, SA_JOB_NAME, SA_SUMMARY, SA_USER


def requester() -> str:
    """``user@host`` of this process; a user the OS cannot name is ``unknown``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def start_attributes(user: str, summary: str, job_id: int | None = None,
                     job_name: str | None = None) -> TypedSearchAttributes:
    """The search attributes a workflow starts with (the rest it upserts itself). The
    summary is one of them because the Web UI's workflow list shows search attributes as
    columns but not static summaries (its list API does not return them)."""
    pairs: list[SearchAttributePair] = [
        SearchAttributePair(SearchAttributeKey.for_keyword(SA_USER), user),
        SearchAttributePair(SearchAttributeKey.for_text(SA_SUMMARY), summary)]
    if job_id is not None:
        pairs.append(SearchAttributePair(SearchAttributeKey.for_keyword(SA_JOB_ID), str(job_id)))
    if job_name:
        pairs.append(SearchAttributePair(SearchAttributeKey.for_keyword(SA_JOB_NAME), job_name))
    return TypedSearchAttributes(pairs)
