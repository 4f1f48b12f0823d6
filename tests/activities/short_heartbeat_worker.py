"""``python -m tests.activities.short_heartbeat_worker SECONDS [python -m workers' options]``:
an orch worker, as ``python -m workers`` runs it, whose provider calls and waits run under
a heartbeat timeout of SECONDS (the tests' ``short_heartbeats``, for a worker in a process
of its own), and whose heartbeats reach the server every SECONDS/6 at most: the SDK's
default throttle, 0.8 x the timeout, leaves a loaded machine no margin.

The cloud SDKs are imported before the worker starts, as a long-lived worker has them:
importing one holds the GIL for seconds, which a first activity must not pay in its
heartbeat timeout.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from functools import partial

import orch.clouds.aws
import orch.clouds.azure
import orch.clouds.gcp  # noqa: F401 (imported for the reason above)
import workers.__main__ as worker_main
from workflows import options


def main() -> None:
    heartbeat = timedelta(seconds=float(sys.argv.pop(1)))
    for calls in (options.PROVIDER_CALL, options.LONG_CALL):
        calls["heartbeat_timeout"] = heartbeat
    throttle = heartbeat / 6
    worker_main.Worker = partial(  # type: ignore[misc,assignment]
        worker_main.Worker, max_heartbeat_throttle_interval=throttle,
        default_heartbeat_throttle_interval=throttle)
    worker_main.main()


if __name__ == "__main__":
    main()
