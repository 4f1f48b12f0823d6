"""AWS credentials: botocore's own chain, minus the instance role unless asked for, and
where the credentials came from in words.

botocore looks for credentials in the environment, the profile's files (static keys, SSO,
``credential_process``, assumed roles), a container's endpoint (only when its variables
say so), and last the EC2 instance metadata service. That last step probes
169.254.169.254 from wherever it runs, a laptop included (a second or more of timeouts),
so orch takes it out of the chain unless the config's ``cloud_identity`` is on.
``credentials.method`` (botocore's name for the provider that found them) says which step
answered.
"""

from __future__ import annotations

import botocore.loaders
import botocore.session
from botocore.credentials import Credentials

# The API models (EC2's is megabytes of JSON), parsed once per process rather than once per
# session. Sessions stay per provider: a session keeps the credentials it first resolved.
_MODELS = botocore.loaders.create_loader()
IMDS_METHOD = "iam-role"

# botocore's provider name -> how ``orch check`` says it (the profile's own in _PROFILED).
_PLAIN = {
    "env": "env AWS_ACCESS_KEY_ID",
    "iam-role": "instance role (IMDS)",
    "container-role": "container role (AWS_CONTAINER_CREDENTIALS_*)",
    "assume-role-with-web-identity": "web identity (AWS_WEB_IDENTITY_TOKEN_FILE)",
    "boto-config": "boto config file",
}
_PROFILED = {
    "shared-credentials-file": ("", "credentials_file"),
    "config-file": ("", "config_file"),
    "sso": ("SSO, ", "config_file"),
    "custom-process": ("credential_process, ", "config_file"),
    "assume-role": ("assumed role, ", "config_file"),
    "login": ("aws login, ", "config_file"),
}


def new_session(cloud_identity: bool) -> botocore.session.Session:
    """A session whose chain reaches the instance metadata service only if
    ``cloud_identity``."""
    session = botocore.session.get_session()
    session.register_component("data_loader", _MODELS)
    if not cloud_identity:
        session.get_component("credential_provider").remove(IMDS_METHOD)
    return session


def found(session: botocore.session.Session) -> Credentials | None:
    """The credentials the session's chain finds. Nothing leaves the machine for them but
    a ``credential_process`` (which runs) and a container endpoint the environment names;
    SSO and assumed roles are fetched when first used."""
    credentials: Credentials | None = session.get_credentials()
    return credentials


def source(session: botocore.session.Session, credentials: Credentials) -> str:
    """Where ``credentials`` came from: "env AWS_ACCESS_KEY_ID", "profile dev, from
    ~/.aws/config", "instance role (IMDS)"..."""
    method = credentials.method or "unknown"
    if method in _PROFILED:
        kind, file_variable = _PROFILED[method]
        profile = session.get_config_variable("profile") or "default"
        return f"profile {profile}, {kind}from {session.get_config_variable(file_variable)}"
    return _PLAIN.get(method, f"botocore provider {method}")
