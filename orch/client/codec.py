"""orch's Temporal data converter: pydantic JSON, and AES-GCM for payloads holding secrets.

Why a payload codec. A task's ``secrets`` must reach the worker that runs setup and
submits the job, and workflows only pass values through their inputs and the inputs of
activities; a worker-side secret store would need its own storage, replication and
clean-up, outside Temporal's durability. So secrets ride in the payloads, and every
payload that holds one is encrypted before it leaves the process (client or worker):
the server, its database, the ``temporal`` CLI and the Web UI only ever see ciphertext.

Which payloads. The payload converter serializes with :func:`orch.secret.reveal_context`,
which writes a :class:`~orch.secret.Secret` in clear and notes that it did; only such
payloads are marked for encryption. Payloads without a secret (activity summaries, the
details the Web UI shows, inputs of tasks without secrets) stay readable JSON, so the Web
UI keeps its text without a codec server. Search attributes never pass through a codec:
orch never puts a secret in one (tests/e2e/test_secrets.py scans them too).

The key. 32 bytes, the same in every client and worker of a namespace: ``ORCH_CODEC_KEY``
(base64), else the file named by ``ORCH_CODEC_KEY_FILE`` (base64 text), else
``$ORCH_HOME/codec.key``, created (0600) the first time a secret is encrypted or
decrypted, which is what the embedded control plane shares: its worker runs with the
CLI's ``ORCH_HOME``. Tasks without secrets never need the key. Workers elsewhere (production)
need the key given to them. A payload carries the id of its key (a hash prefix), so a
process with another key fails with a message saying so rather than with garbage.

Payloads without orch's encoding (histories recorded before this codec, or by a process
without secrets) are decoded as they are, so old histories still replay.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import (
    PydanticJSONPlainPayloadConverter,
    PydanticPayloadConverter,
)
from temporalio.converter import CompositePayloadConverter, DataConverter, PayloadCodec

from orch.config import orch_home
from orch.secret import reveal_context, revealed_any

ENCODING = b"binary/orch-aes256gcm"
KEY_ID = "orch-key-id"
SECRET_MARK = "orch-secret"  # set by the payload converter, read (and dropped) by the codec
KEY_ENV = "ORCH_CODEC_KEY"
KEY_FILE_ENV = "ORCH_CODEC_KEY_FILE"
KEY_FILE_NAME = "codec.key"
NONCE_BYTES = 12


class CodecKeyError(Exception):
    """The codec key is missing, malformed, or not the one a payload was encrypted with."""


@dataclasses.dataclass(frozen=True)
class CodecKey:
    secret: bytes = dataclasses.field(repr=False)
    source: str  # where it came from, for messages

    def __post_init__(self) -> None:
        if len(self.secret) != 32:
            raise CodecKeyError(f"{self.source}: expected 32 bytes (base64), got "
                                f"{len(self.secret)}")

    @property
    def id(self) -> str:
        return hashlib.sha256(b"orch-codec-key:" + self.secret).hexdigest()[:12]

    @classmethod
    def generate(cls, source: str = "generated") -> CodecKey:
        return cls(AESGCM.generate_key(bit_length=256), source)

    @classmethod
    def from_text(cls, text: str, source: str) -> CodecKey:
        try:
            return cls(base64.b64decode(text.strip(), validate=True), source)
        except (binascii.Error, ValueError):
            raise CodecKeyError(f"{source}: not base64 text") from None

    def text(self) -> str:
        return base64.b64encode(self.secret).decode()


def _key_file(path: Path, create: bool) -> CodecKey:
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = CodecKey.generate(str(path))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: use theirs
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(key.text() + "\n")
    try:
        return CodecKey.from_text(path.read_text(), str(path))
    except OSError as err:
        raise CodecKeyError(f"{KEY_FILE_ENV}={path}: {err.strerror}") from None


def given_key(env: Mapping[str, str] | None = None) -> CodecKey | None:
    """The key ``ORCH_CODEC_KEY`` or ``ORCH_CODEC_KEY_FILE`` gives, if one does."""
    env = os.environ if env is None else env
    if env.get(KEY_ENV):
        return CodecKey.from_text(env[KEY_ENV], KEY_ENV)
    if env.get(KEY_FILE_ENV):
        return _key_file(Path(env[KEY_FILE_ENV]).expanduser(), create=False)
    return None


def load_key(env: Mapping[str, str] | None = None) -> CodecKey:
    """The key, by the rule of the module docstring."""
    env = os.environ if env is None else env
    return given_key(env) or _key_file(orch_home(env) / KEY_FILE_NAME, create=True)


class EncryptingCodec(PayloadCodec):
    """AES-256-GCM over the payloads the converter marked as holding a secret."""

    def __init__(self, key: CodecKey | Callable[[], CodecKey]) -> None:
        self._key = key  # or how to get it, the first time a secret needs it
        self._aead: AESGCM | None = None

    @property
    def key(self) -> CodecKey:
        if not isinstance(self._key, CodecKey):
            self._key = self._key()
        return self._key

    @property
    def aead(self) -> AESGCM:
        if self._aead is None:
            self._aead = AESGCM(self.key.secret)
        return self._aead

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encrypt(p) if SECRET_MARK in p.metadata else p for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(p) if p.metadata.get("encoding") == ENCODING else p
                for p in payloads]

    def _encrypt(self, payload: Payload) -> Payload:
        inner = Payload()
        inner.CopyFrom(payload)
        del inner.metadata[SECRET_MARK]
        nonce = os.urandom(NONCE_BYTES)
        sealed = self.aead.encrypt(nonce, inner.SerializeToString(), self.key.id.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: self.key.id.encode()},
                       data=nonce + sealed)

    def _decrypt(self, payload: Payload) -> Payload:
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        if key_id != self.key.id:
            raise CodecKeyError(
                f"a payload was encrypted with orch codec key {key_id or '?'}, but this "
                f"process has key {self.key.id} (from {self.key.source}): give every orch "
                f"client and worker of the namespace the same key ({KEY_ENV} or {KEY_FILE_ENV})")
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plain = self.aead.decrypt(nonce, sealed, key_id.encode())
        except InvalidTag:
            raise CodecKeyError(f"a payload encrypted with key {key_id} does not decrypt: "
                                "it was altered") from None
        return Payload.FromString(plain)


class _MarkingJSONConverter(PydanticJSONPlainPayloadConverter):
    """pydantic JSON that writes secrets in clear and marks the payloads that hold one."""

    def to_payload(self, value: Any) -> Payload | None:
        context = reveal_context()
        payload = Payload(metadata={"encoding": self.encoding.encode()},
                          data=to_json(value, context=context))
        if revealed_any(context):
            payload.metadata[SECRET_MARK] = b"1"
        return payload


class OrchPayloadConverter(CompositePayloadConverter):
    """The pydantic payload converter, with its JSON converter marking secrets."""

    def __init__(self) -> None:
        marking = _MarkingJSONConverter()
        super().__init__(*(
            marking if isinstance(c, PydanticJSONPlainPayloadConverter) else c
            for c in PydanticPayloadConverter().converters.values()
        ))


def orch_data_converter(key: CodecKey | None = None) -> DataConverter:
    """The converter of every orch client and worker (``key`` default: :func:`load_key`;
    a key the environment gives is read now, so a malformed one fails the connection, and
    ``$ORCH_HOME/codec.key`` is read, or made, only once a secret needs it).

    Failures keep the default converter: their messages are orch's own (where a secret
    shows as ``<redacted>``) or the last lines of a failed setup, from which the setup
    activity removes the task's secret values; encoding them would hide every failure
    from the Web UI for nothing."""
    codec = EncryptingCodec(key or given_key() or load_key)
    return DataConverter(payload_converter_class=OrchPayloadConverter, payload_codec=codec)
