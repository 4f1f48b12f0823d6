"""Turn orch's typed errors into Temporal ``ApplicationError``s at the activity boundary.

Capacity and quota errors are not retried in place: the failover workflow decides where
to go next. Auth and config errors cannot be fixed by retrying. Transient errors and
unreachable nodes are retried with the activity's backoff.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from temporalio.exceptions import ApplicationError

from orch.clouds.errors import CapacityError, ProvisionError, QuotaError, SetupError
from orch.runtime.commands import NodeUnreachableError

P = ParamSpec("P")
R = TypeVar("R")


def typed_errors(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ProvisionError as exc:
            retry_here = exc.retryable and not isinstance(exc, CapacityError | QuotaError)
            raise ApplicationError(
                exc.message,
                {"code": exc.code, "scope": str(exc.scope)},
                type=type(exc).__name__,
                non_retryable=not retry_here,
            ) from exc
        except SetupError as exc:
            raise ApplicationError(
                str(exc), {"tail": exc.tail}, type="SetupError", non_retryable=True
            ) from exc
        except NodeUnreachableError as exc:
            raise ApplicationError(str(exc), type="NodeUnreachableError") from exc

    return wrapper
