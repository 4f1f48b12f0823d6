"""How orch connects to an external Temporal: TEMPORAL_* variables, TLS and the API key."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.service import ConnectConfig, TLSConfig

from orch.client import OrchError, tls_option
from orch.config import TemporalSettings
from orch.settings import load_settings

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> TemporalSettings:
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TLS", "TEMPORAL_TLS_CERT",
                 "TEMPORAL_TLS_KEY", "TEMPORAL_TLS_CA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ORCH_CONFIG", "/dev/null")  # no config file: the variables alone
    return load_settings().temporal_settings()


def sdk_uses_tls(tls: TLSConfig | bool | None, api_key: str | None) -> bool:
    """Whether the SDK's connection would be TLS, as its bridge config says."""
    config = ConnectConfig(target_host="temporal.example:7233", tls=tls, api_key=api_key)
    return config._to_bridge_config().tls_config is not None


def test_an_api_key_alone_connects_over_tls_as_temporal_cloud_requires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = settings(monkeypatch, TEMPORAL_ADDRESS="ns.acct.tmprl.cloud:7233")
    assert tls_option(plain) is None
    assert sdk_uses_tls(tls_option(plain), api_key="secret")
    assert not sdk_uses_tls(tls_option(plain), api_key=None)  # a self-hosted server


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("yes", True),
                                                 ("false", False), ("0", False), ("", None)])
def test_temporal_tls_forces_tls_on_or_off(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool | None
) -> None:
    chosen = settings(monkeypatch, TEMPORAL_TLS=value)
    assert chosen.tls is expected
    assert tls_option(chosen) is expected
    assert sdk_uses_tls(tls_option(chosen), api_key=None) is bool(expected)


def test_certificates_are_read_from_the_named_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_bytes(PEM + name.encode())
    chosen = settings(monkeypatch, TEMPORAL_TLS_CA=str(tmp_path / "ca.pem"),
                      TEMPORAL_TLS_CERT=str(tmp_path / "client.pem"),
                      TEMPORAL_TLS_KEY=str(tmp_path / "client.key"))
    tls = tls_option(chosen)
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == PEM + b"ca.pem"
    assert tls.client_cert == PEM + b"client.pem"
    assert tls.client_private_key == PEM + b"client.key"
    assert sdk_uses_tls(tls, api_key=None)


def test_a_ca_alone_verifies_the_server_without_a_client_certificate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "ca.pem").write_bytes(PEM)
    tls = tls_option(settings(monkeypatch, TEMPORAL_TLS_CA=str(tmp_path / "ca.pem")))
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == PEM and tls.client_cert is None


def test_unreadable_or_incomplete_tls_settings_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(OrchError, match=f"TEMPORAL_TLS_CA={missing}: No such file"):
        tls_option(settings(monkeypatch, TEMPORAL_TLS_CA=missing))
    (tmp_path / "client.key").write_bytes(PEM)
    with pytest.raises(OrchError, match="TEMPORAL_TLS_KEY is set without TEMPORAL_TLS_CERT"):
        tls_option(settings(monkeypatch, TEMPORAL_TLS_KEY=str(tmp_path / "client.key")))
