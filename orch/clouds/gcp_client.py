"""A Compute Engine v1 client for one project: credentials, calls, and operation waits.

Built with google-api-python-client from the discovery document the package ships
(``static_discovery=True``), so building needs no network. httplib2 connections are not
thread-safe, and activities may call one provider from several threads, so each thread
gets its own client. Every failure leaves this module as a typed ``ProvisionError``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from typing import Any

import google_auth_httplib2
import httplib2
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.exceptions import GoogleAuthError, TransportError
from googleapiclient import discovery
from googleapiclient.errors import HttpError
from pydantic import BaseModel

from orch.clouds import gcp_credentials
from orch.clouds.errors import AuthError, ProvisionError, TransientError
from orch.clouds.gcp_errors import (
    from_http_error,
    from_operation,
    http_error_reasons,
    operation_errors,
    widest,
)
from orch.settings import load_settings

HTTP_TIMEOUT_SECONDS = 60.0


class GCPSettings(BaseModel):
    """Where the API is and who calls it. ``endpoint`` overrides Google's (tests point it at
    a fake); with an endpoint and no credentials found, calls are anonymous.
    ``cloud_identity``: the config's, whether the metadata server may be asked."""

    project: str | None = None
    endpoint: str | None = None
    credentials_file: str | None = None
    cloud_identity: bool = False
    # zoneOperations.wait blocks up to two minutes on Google's side; this bounds the rounds.
    max_operation_waits: int = 10

    @classmethod
    def from_env(cls) -> GCPSettings:
        env = os.environ
        return cls(
            project=env.get("GOOGLE_CLOUD_PROJECT") or None,
            endpoint=env.get("ORCH_GCP_ENDPOINT") or None,
            credentials_file=env.get("GOOGLE_APPLICATION_CREDENTIALS") or None,
            cloud_identity=load_settings().cloud_identity,
        )


class ComputeAPI:
    """The compute v1 resources of one project, with errors typed and operations waited."""

    def __init__(self, settings: GCPSettings):
        self.settings = settings
        self._lock = threading.Lock()
        self._local = threading.local()
        self._credentials: Credentials | None = None
        self._project: str | None = None
        self.source = ""  # where the credentials came from, once resolved

    def _resolve(self) -> tuple[Credentials, str]:
        with self._lock:
            if self._credentials is None:
                found = gcp_credentials.load(
                    self.settings.credentials_file, cloud_identity=self.settings.cloud_identity,
                    anonymous=bool(self.settings.endpoint))
                project = self.settings.project or found.project
                if not project:
                    raise AuthError(f"no GCP project: set GOOGLE_CLOUD_PROJECT (credentials: "
                                    f"{found.source})", code="NO_PROJECT")
                self._credentials, self._project = found.credentials, project
                self.source = found.source
            assert self._project is not None
            return self._credentials, self._project

    @property
    def project(self) -> str:
        return self._resolve()[1]

    def compute(self) -> Any:
        """This thread's discovery client (``compute.instances()`` and so on)."""
        client = getattr(self._local, "client", None)
        if client is None:
            creds, _ = self._resolve()
            http = google_auth_httplib2.AuthorizedHttp(
                creds,
                http=httplib2.Http(timeout=HTTP_TIMEOUT_SECONDS),
                # Anonymous credentials cannot refresh: let a 401 surface as itself.
                refresh_status_codes=() if isinstance(creds, AnonymousCredentials) else (401,),
            )
            options = {"api_endpoint": self.settings.endpoint} if self.settings.endpoint else None
            client = discovery.build(
                "compute", "v1", http=http, static_discovery=True, client_options=options
            )
            self._local.client = client
        return client

    def call(self, request: Any, *, tolerate: Collection[str] = ()) -> dict[str, Any] | None:
        """Execute ``request``; None when it failed with a reason in ``tolerate`` (such as
        ``alreadyExists`` for a repeated insert, ``notFound`` for a repeated delete)."""
        try:
            result: dict[str, Any] = request.execute(num_retries=0)
        except HttpError as e:
            if tolerate and set(http_error_reasons(e)) & set(tolerate):
                return None
            raise from_http_error(e) from e
        except (TransportError, httplib2.HttpLib2Error, OSError) as e:
            raise TransientError(f"cannot reach the Compute API: {e}", code="UNREACHABLE") from e
        except GoogleAuthError as e:  # after TransportError, which is one too
            raise AuthError(f"GCP credentials were rejected: {e}", code="REFRESH_FAILED") from e
        return result

    def get(self, request: Any) -> dict[str, Any]:
        """Execute a request that tolerates nothing, so it always has a result."""
        result = self.call(request)
        assert result is not None
        return result

    def wait(
        self, operation: dict[str, Any], zone: str | None = None, *,
        tolerate: Collection[str] = (),
    ) -> dict[str, Any]:
        """Wait for a zonal (or, without ``zone``, global) operation to be DONE; raise the
        typed error it finished with unless every error code is in ``tolerate``."""
        ops = self.compute().zoneOperations() if zone else self.compute().globalOperations()
        where = {"zone": zone} if zone else {}
        for _ in range(self.settings.max_operation_waits):
            if operation.get("status") == "DONE":
                break
            operation = self.get(
                ops.wait(project=self.project, operation=operation["name"], **where)
            )
        if operation.get("status") != "DONE":
            raise TransientError(
                f"operation {operation.get('name')} ({operation.get('operationType')}) did not "
                f"finish after {self.settings.max_operation_waits} waits",
                code="OPERATION_TIMEOUT",
            )
        errors = operation_errors(operation)
        if errors and not {str(e.get("code")) for e in errors} <= set(tolerate):
            raise from_operation(operation)
        return operation

    def wait_all(
        self, operations: list[dict[str, Any]], zone: str | None = None, *,
        tolerate: Collection[str] = (),
    ) -> None:
        """Wait for every operation, then raise the widest of their errors, if any."""
        failures: list[ProvisionError] = []
        for operation in operations:
            try:
                self.wait(operation, zone, tolerate=tolerate)
            except ProvisionError as e:
                failures.append(e)
        if failures:
            raise widest(failures)
