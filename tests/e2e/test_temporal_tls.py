"""orch's TLS settings against a real server behind TLS: the dev server (which speaks only
plaintext) behind a TLS-terminating proxy that requires a client certificate, as a
self-hosted frontend with mTLS does. Certificates are made here by a throwaway CA."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from orch.client import connect_temporal
from orch.config import TemporalSettings
from tests.e2e.test_production import DevServer, dev_server  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def issue(directory: Path, name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
          | None) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer[0].subject if issuer else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None),
                              critical=True))
    if issuer:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    else:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{name}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = issue(directory, "ca", None)
    issue(directory, "server", ca)
    issue(directory, "client", ca)
    return Pki(directory / "ca.pem", directory / "server.pem", directory / "server.key",
               directory / "client.pem", directory / "client.key")


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
async def tls_frontend(dev_server: DevServer, pki: Pki) -> AsyncIterator[str]:  # noqa: F811
    """``localhost:<port>``: TLS with a required client certificate, then the dev server."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])
    host, port = dev_server.address.split(":")

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", 0, ssl=context)
    try:
        yield f"localhost:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def system_info(settings: TemporalSettings) -> str:
    client = await connect_temporal(settings, timeout_s=3)
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    return str(info.server_version)


async def test_mtls_with_a_private_ca(tls_frontend: str, pki: Pki) -> None:
    settings = TemporalSettings(address=tls_frontend, tls_ca=str(pki.ca),
                                tls_cert=str(pki.client_cert), tls_key=str(pki.client_key))
    assert await system_info(settings)


async def test_without_the_client_certificate_the_server_refuses(
    tls_frontend: str, pki: Pki
) -> None:
    with pytest.raises(RuntimeError):
        await system_info(TemporalSettings(address=tls_frontend, tls_ca=str(pki.ca)))


async def test_without_the_ca_the_servers_certificate_is_not_trusted(
    tls_frontend: str, pki: Pki
) -> None:
    settings = TemporalSettings(address=tls_frontend, tls_cert=str(pki.client_cert),
                                tls_key=str(pki.client_key))
    with pytest.raises(RuntimeError, match="UnknownIssuer"):
        await system_info(settings)


async def test_tls_forced_off_does_not_speak_tls(tls_frontend: str, pki: Pki) -> None:
    settings = TemporalSettings(address=tls_frontend, tls=False, tls_ca=str(pki.ca),
                                tls_cert=str(pki.client_cert), tls_key=str(pki.client_key))
    with pytest.raises(RuntimeError):
        await system_info(settings)
