"""orch's SSH key pair for cloud nodes, kept on the worker's disk under $ORCH_HOME/ssh/.

Only the public half ever leaves this machine (to the cloud, as the cluster's key pair);
records carry the private key's path, never its contents.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from orch.config import orch_home

KEY_NAME = "orch_ed25519"


def key_paths() -> tuple[Path, Path]:
    directory = orch_home() / "ssh"
    return directory / KEY_NAME, directory / f"{KEY_NAME}.pub"


def ensure_key_pair() -> tuple[Path, str]:
    """The private key's path and the public key's OpenSSH text, created on first use."""
    private, public = key_paths()
    private.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(private.parent / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (private.exists() and public.exists()):
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
            openssh = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                    serialization.PublicFormat.OpenSSH)
            descriptor = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(pem)
            public.write_text(openssh.decode() + " orch\n")
    return private, public.read_text().strip()
