"""A Compute Engine v1 client for one project: credentials, calls, and operations.

Built with google-api-python-client from the discovery document the package ships
(``static_discovery=True``), so building needs no network. httplib2 connections are not
thread-safe, and activities may call one provider from several threads, so each thread
gets its own client. Every failure leaves this module as a typed ``ProvisionError``.

Operations are never waited on here (``zoneOperations.wait`` blocks for up to two
minutes on Google's side): a call that starts one hands it back as an
:class:`~orch.clouds.base.Operation` (:func:`started`), and :meth:`ComputeAPI.operation`
reads it again, once per poll of the caller's waiter.
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
from orch.clouds.base import Operation
from orch.clouds.errors import AuthError, TransientError
from orch.clouds.gcp_errors import from_http_error, http_error_reasons
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
    """The compute v1 resources of one project, with errors typed."""

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

    def operation(self, operation: Operation) -> dict[str, Any]:
        """The Operation resource as it is now (``operations.get``: one read, no wait)."""
        if operation.zone:
            ops = self.compute().zoneOperations()
            return self.get(ops.get(project=self.project, zone=operation.zone,
                                    operation=operation.name))
        return self.get(self.compute().globalOperations().get(project=self.project,
                                                              operation=operation.name))


def started(operation: dict[str, Any], *, tolerate: Collection[str] = ()) -> Operation:
    """The record of an operation a call just started (``tolerate``: error codes that
    count as done, such as RESOURCE_ALREADY_EXISTS for an insert)."""
    zone = operation.get("zone")
    return Operation(kind=str(operation.get("operationType", "")), name=operation["name"],
                     target=str(operation.get("targetLink", "")).rsplit("/", 1)[-1],
                     zone=str(zone).rsplit("/", 1)[-1] if zone else None,
                     tolerate=sorted(tolerate))
