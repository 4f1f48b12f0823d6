"""orch's data converter (orch.client.codec): payloads holding a secret are encrypted with
AES-GCM and decrypt only with the same key; every other payload passes through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload

from orch.client.codec import (
    ENCODING,
    KEY_FILE_NAME,
    CodecKey,
    CodecKeyError,
    load_key,
    orch_data_converter,
)
from orch.secret import REDACTED, Secret, SecretValue
from orch.spec import Task, parse_task

VALUE = "s3cr3t-value-for-the-codec-test"


class Holder(BaseModel):
    name: str
    secrets: dict[str, Secret] = Field(default_factory=dict)


async def test_a_payload_holding_a_secret_round_trips_encrypted() -> None:
    converter = orch_data_converter(CodecKey.generate())
    task = parse_task({"run": "echo", "secrets": {"API_TOKEN": VALUE}}, "t.yaml")
    [payload] = await converter.encode([task])
    assert payload.metadata["encoding"] == ENCODING
    assert VALUE.encode() not in payload.SerializeToString()
    [back] = await converter.decode([payload], [Task])
    assert back == task and back.secrets["API_TOKEN"].get_secret_value() == VALUE


async def test_a_payload_without_secrets_stays_readable_json() -> None:
    converter = orch_data_converter(CodecKey.generate())
    [payload] = await converter.encode([Holder(name="visible")])
    assert payload.metadata["encoding"] == b"json/plain"
    assert b'"visible"' in payload.data and "orch-secret" not in payload.metadata
    [text] = await converter.encode(["an activity summary"])
    assert text.data == b'"an activity summary"'


async def test_a_payload_with_no_encryption_marker_is_decoded_as_it_is() -> None:
    """What histories recorded before the codec hold."""
    converter = orch_data_converter(CodecKey.generate())
    recorded = Payload(metadata={"encoding": b"json/plain"},
                       data=b'{"name": "old", "secrets": {"A": "was-clear"}}')
    [back] = await converter.decode([recorded], [Holder])
    assert back.name == "old" and back.secrets["A"].get_secret_value() == "was-clear"


async def test_another_key_is_refused_with_a_message_naming_both_keys() -> None:
    mine, theirs = CodecKey.generate("mine"), CodecKey.generate("theirs")
    [payload] = await orch_data_converter(theirs).encode([Holder(name="x", secrets={
        "A": SecretValue(VALUE)})])
    with pytest.raises(CodecKeyError) as caught:
        await orch_data_converter(mine).decode([payload], [Holder])
    message = str(caught.value)
    assert theirs.id in message and mine.id in message and "ORCH_CODEC_KEY" in message


async def test_an_altered_ciphertext_is_refused() -> None:
    key = CodecKey.generate()
    [payload] = await orch_data_converter(key).encode([Holder(name="x", secrets={
        "A": SecretValue(VALUE)})])
    payload.data = payload.data[:-1] + bytes([payload.data[-1] ^ 1])
    with pytest.raises(CodecKeyError, match="altered"):
        await orch_data_converter(key).decode([payload], [Holder])


def test_the_key_comes_from_the_env_a_key_file_or_orch_home(tmp_path: Path) -> None:
    key = CodecKey.generate()
    assert load_key({"ORCH_CODEC_KEY": key.text()}).id == key.id
    file = tmp_path / "k"
    file.write_text(key.text() + "\n")
    assert load_key({"ORCH_CODEC_KEY_FILE": str(file)}).id == key.id
    home = tmp_path / "home"
    first = load_key({"ORCH_HOME": str(home)})
    assert stat.S_IMODE(os.stat(home / KEY_FILE_NAME).st_mode) == 0o600
    assert load_key({"ORCH_HOME": str(home)}).id == first.id != key.id


def test_a_bad_key_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CodecKeyError, match="ORCH_CODEC_KEY: not base64"):
        load_key({"ORCH_CODEC_KEY": "not base64!"})
    with pytest.raises(CodecKeyError, match="expected 32 bytes"):
        load_key({"ORCH_CODEC_KEY": "c2hvcnQ="})
    with pytest.raises(CodecKeyError, match="ORCH_CODEC_KEY_FILE=.*No such file"):
        load_key({"ORCH_CODEC_KEY_FILE": str(tmp_path / "missing")})


def test_a_secret_displays_as_redacted() -> None:
    holder = Holder(name="x", secrets={"A": SecretValue(VALUE)})
    for shown in (str(holder), repr(holder), holder.model_dump_json(),
                  str(holder.model_dump()), str(holder.model_dump(mode="json"))):
        assert VALUE not in shown and REDACTED in shown


def test_a_failed_setups_output_loses_the_secret_values() -> None:
    """What a setup prints goes into the failure, and so into the history."""
    from activities.runtime import without_values

    shown = without_values(f"token={VALUE}\nprefix {VALUE[:6]} stays\n", {"A": VALUE, "E": ""})
    assert shown == f"token={REDACTED}\nprefix {VALUE[:6]} stays\n"


async def test_orch_home_s_key_is_made_only_once_a_secret_needs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ORCH_CODEC_KEY", "ORCH_CODEC_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path))
    converter = orch_data_converter()
    await converter.encode([Holder(name="no secret")])
    assert not (tmp_path / KEY_FILE_NAME).exists()
    [payload] = await converter.encode([Holder(name="x", secrets={"A": SecretValue(VALUE)})])
    assert (tmp_path / KEY_FILE_NAME).exists()
    [back] = await orch_data_converter(load_key()).decode([payload], [Holder])
    assert back.secrets["A"].get_secret_value() == VALUE


async def test_marking_one_payload_does_not_mark_the_next() -> None:
    converter = orch_data_converter(CodecKey.generate())
    secret, plain = await converter.encode([
        Holder(name="x", secrets={"A": SecretValue(VALUE)}), Holder(name="y")])
    assert secret.metadata["encoding"] == ENCODING
    assert plain.metadata["encoding"] == b"json/plain"
