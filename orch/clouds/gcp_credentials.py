"""GCP credentials in application-default order, and where they came from in words.

google-auth's ``google.auth.default()`` looks at ``GOOGLE_APPLICATION_CREDENTIALS``, then
gcloud's application-default credentials file, then asks the GCE metadata server (a
request to 169.254.169.254 from wherever it runs, a laptop included). orch takes the
first two steps itself, with google-auth's own loaders and path, and leaves the third to
``google.auth.default()`` only when the config's ``cloud_identity`` is on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import google.auth
from google.auth import _cloud_sdk, compute_engine
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.exceptions import DefaultCredentialsError
from google.oauth2 import credentials as oauth2_credentials
from google.oauth2 import service_account

from orch.clouds.errors import AuthError

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_KINDS = {"external_account": "workload identity federation",
          "impersonated_service_account": "impersonated service account"}


class Found(NamedTuple):
    credentials: Credentials
    project: str | None  # the one the credentials name, if any
    source: str  # for ``orch check``: "service-account key file /k.json", "metadata server"


def adc_path() -> Path:
    """gcloud's application-default credentials file (``CLOUDSDK_CONFIG`` honoured), as
    ``gcloud auth application-default login`` writes it and google-auth reads it."""
    return Path(_cloud_sdk.get_application_default_credentials_path())


def _from_file(path: str, where: str) -> Found:
    """A credentials file. Service-account keys (the usual case) and user credentials are
    loaded by their own loaders; other kinds (workload identity) by google.auth's generic
    one."""
    try:
        info = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise AuthError(f"cannot read GCP credentials {path}: {e}", code="NO_CREDENTIALS") from e
    kind = info.get("type") if isinstance(info, dict) else None
    if kind == "service_account":
        creds = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
        return Found(creds, info.get("project_id"), f"service-account key file {path}")
    if kind == "authorized_user":  # project: the one gcloud made the quota project
        user = oauth2_credentials.Credentials.from_authorized_user_info(info, scopes=SCOPES)
        return Found(user, user.quota_project_id, f"{where} (user credentials, {path})")
    creds, project = google.auth.load_credentials_from_file(path, scopes=SCOPES)
    return Found(creds, project, f"{where} ({_KINDS.get(str(kind), kind)}, {path})")


def load(credentials_file: str | None, *, cloud_identity: bool, anonymous: bool) -> Found:
    """The first credentials found: the named file, gcloud's application-default file,
    the metadata server (``cloud_identity`` only), else anonymous ones when ``anonymous``
    (an endpoint override: a fake in tests)."""
    try:
        if credentials_file:
            return _from_file(credentials_file, "GOOGLE_APPLICATION_CREDENTIALS")
        if adc_path().is_file():
            return _from_file(str(adc_path()), "application-default credentials")
        if cloud_identity:
            creds, project = google.auth.default(scopes=SCOPES)
            return Found(creds, project, "metadata server" if isinstance(
                creds, compute_engine.Credentials) else type(creds).__name__)
        if anonymous:
            return Found(AnonymousCredentials(), None, "anonymous (ORCH_GCP_ENDPOINT)")
    except (DefaultCredentialsError, ValueError) as e:
        raise AuthError(f"no usable GCP credentials: {e}", code="NO_CREDENTIALS") from e
    raise AuthError("no GCP credentials: no GOOGLE_APPLICATION_CREDENTIALS, no "
                    f"application-default credentials at {adc_path()}, and cloud_identity "
                    "is off", code="NO_CREDENTIALS")
