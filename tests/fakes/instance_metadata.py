"""Fakes of the three clouds' instance-metadata credential endpoints, on loopback, each
recording every request it gets (so a test can assert that none came).

- :class:`AwsImds`: EC2's IMDSv2 as AWS documents it: ``PUT /latest/api/token`` with
  ``X-aws-ec2-metadata-token-ttl-seconds`` gives a session token; ``GET
  /latest/meta-data/iam/security-credentials/`` (the role's name) and ``.../<role>`` (its
  temporary keys, JSON) need it in ``X-aws-ec2-metadata-token``, else 401. botocore finds
  it through ``AWS_EC2_METADATA_SERVICE_ENDPOINT``.
- :class:`GceMetadata`: the GCE metadata server: every request needs ``Metadata-Flavor:
  Google`` (403 without) and every answer carries it; the project id, the default service
  account (``?recursive=true``) and its token. google-auth finds it through
  ``GCE_METADATA_IP`` (the ping) and ``GCE_METADATA_HOST`` (the rest).
- :class:`AzureIdentity`: Azure managed identity, in both of azure-identity's shapes: App
  Service's ``IDENTITY_ENDPOINT`` (``X-IDENTITY-HEADER`` must equal ``IDENTITY_HEADER``)
  and the VM's IMDS ``/metadata/identity/oauth2/token`` (``Metadata: true``), which
  azure-identity finds through ``AZURE_POD_IDENTITY_AUTHORITY_HOST``.

Tokens come from ``mint``, so the API fakes (moto, the Compute and ARM fakes) accept them.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any, NamedTuple, Self

from tests.fakes.loopback import Loopback


class Hit(NamedTuple):
    method: str
    path: str  # with the query
    headers: dict[str, str]  # lower-case names


class Reply(NamedTuple):
    status: int
    body: str
    headers: dict[str, str]


class _Handler(BaseHTTPRequestHandler):
    server_fake: MetadataFake  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        """Quiet: tests read the fake's hits instead."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        hit = Hit(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        reply = self.server_fake.record(hit)
        data = reply.body.encode()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = _answer  # noqa: N815 - BaseHTTPRequestHandler's naming


class MetadataFake:
    """A recording HTTP server; subclasses answer in :meth:`answer`."""

    def __init__(self, mint: Callable[[], str] = lambda: "token-" + secrets.token_hex(8)):
        self.mint = mint
        self.hits: list[Hit] = []
        self._lock = threading.Lock()
        self._loopback = Loopback(type("Handler", (_Handler,), {"server_fake": self}))

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``."""
        return self._loopback.host

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def __enter__(self) -> Self:
        self._loopback.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._loopback.stop()

    def record(self, hit: Hit) -> Reply:
        with self._lock:
            self.hits.append(hit)
            return self.answer(hit)

    def answer(self, hit: Hit) -> Reply:
        return Reply(404, "Not Found", {"Content-Type": "text/plain"})


def _json(payload: dict[str, Any], **headers: str) -> Reply:
    return Reply(200, json.dumps(payload), {"Content-Type": "application/json", **headers})


class AwsImds(MetadataFake):
    ROLE = "orch-worker-role"
    CREDENTIALS = "/latest/meta-data/iam/security-credentials/"

    def __init__(self, mint: Callable[[], str] | None = None):
        super().__init__(mint or (lambda: "ASIA" + secrets.token_hex(8).upper()))
        self._sessions: set[str] = set()
        self.access_key_id = ""

    def answer(self, hit: Hit) -> Reply:
        text = {"Content-Type": "text/plain"}
        if hit.method == "PUT" and hit.path == "/latest/api/token":
            ttl = hit.headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return Reply(400, "", text)
            token = secrets.token_urlsafe(32)
            self._sessions.add(token)
            return Reply(200, token, {**text, "X-aws-ec2-metadata-token-ttl-seconds": ttl})
        if hit.headers.get("x-aws-ec2-metadata-token") not in self._sessions:
            return Reply(401, "", text)  # IMDSv2 required: no IMDSv1
        if hit.path == self.CREDENTIALS:
            return Reply(200, self.ROLE, text)
        if hit.path == self.CREDENTIALS + self.ROLE:
            now = datetime.now(UTC).replace(microsecond=0)
            self.access_key_id = self.mint()
            return _json({
                "Code": "Success", "LastUpdated": now.isoformat().replace("+00:00", "Z"),
                "Type": "AWS-HMAC", "AccessKeyId": self.access_key_id,
                "SecretAccessKey": secrets.token_urlsafe(30), "Token": secrets.token_urlsafe(64),
                "Expiration": (now + timedelta(hours=6)).isoformat().replace("+00:00", "Z")})
        return super().answer(hit)


class GceMetadata(MetadataFake):
    ROOT = "/computeMetadata/v1/"
    EMAIL = "orch-worker@orch-test.iam.gserviceaccount.com"

    def __init__(self, project: str, mint: Callable[[], str]):
        super().__init__(mint)
        self.project = project

    def answer(self, hit: Hit) -> Reply:
        flavor = {"Metadata-Flavor": "Google"}
        if hit.headers.get("metadata-flavor") != "Google":
            return Reply(403, "Missing Metadata-Flavor:Google header.", {"Content-Type":
                                                                         "text/html"})
        path = urllib.parse.urlsplit(hit.path).path
        text = {**flavor, "Content-Type": "application/text"}
        account = self.ROOT + "instance/service-accounts/default/"
        if path == "/":
            return Reply(200, "computeMetadata/\n", text)
        if path == self.ROOT + "project/project-id":
            return Reply(200, self.project, text)
        if path == self.ROOT + "universe/universe-domain":
            return Reply(200, "googleapis.com", text)
        if path == account:
            return _json({"aliases": ["default"], "email": self.EMAIL,
                          "scopes": ["https://www.googleapis.com/auth/cloud-platform"]},
                         **flavor)
        if path == account + "token":
            return _json({"access_token": self.mint(), "expires_in": 3599,
                          "token_type": "Bearer"}, **flavor)
        return Reply(404, "Not Found", {**flavor, "Content-Type": "text/html"})


class AzureIdentity(MetadataFake):
    APP_SERVICE = "/msi/token"
    IMDS = "/metadata/identity/oauth2/token"

    def __init__(self, mint: Callable[[], str]):
        super().__init__(mint)
        self.secret = secrets.token_hex(16)  # IDENTITY_HEADER

    def answer(self, hit: Hit) -> Reply:
        url = urllib.parse.urlsplit(hit.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        expires = str(int(time.time()) + 3600)
        if url.path == self.APP_SERVICE and query.get("api-version") == "2019-08-01":
            if hit.headers.get("x-identity-header") != self.secret:
                return Reply(401, json.dumps({"statusCode": 401, "message": "Unauthorized"}),
                             {"Content-Type": "application/json"})
            return _json({"access_token": self.mint(), "expires_on": expires,
                          "resource": query.get("resource", ""), "token_type": "Bearer",
                          "client_id": "0f1e2d3c-0000-4000-8000-00000000c11d"})
        if url.path == self.IMDS:
            if hit.headers.get("metadata") != "true":
                return Reply(400, json.dumps({
                    "error": "invalid_request",
                    "error_description": "Required metadata header not specified"}),
                    {"Content-Type": "application/json"})
            return _json({"access_token": self.mint(), "client_id": "0f1e2d3c",
                          "expires_in": "3599", "expires_on": expires,
                          "ext_expires_in": "3599", "not_before": str(int(time.time())),
                          "resource": query.get("resource", ""), "token_type": "Bearer"})
        return super().answer(hit)
