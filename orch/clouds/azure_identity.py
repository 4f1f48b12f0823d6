"""The Azure credential chain orch uses, and which link of it granted the token.

The links are ``DefaultAzureCredential``'s, in its order, minus the developer tools orch
does not document (VS Code, PowerShell, azd, the shared cache, a browser): a service
principal in the environment, workload identity (only when its token file is named),
managed identity (only with the config's ``cloud_identity``: it asks the instance
metadata service, 169.254.169.254, wherever it runs), and the Azure CLI login. Each link
is wrapped so the chain knows which one answered (:attr:`IdentityChain.source`); a
wrapper's class takes the wrapped one's name, which the chain's errors quote.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from azure.core.credentials import AccessToken, TokenCredential
from azure.identity import (
    AzureCliCredential,
    ChainedTokenCredential,
    EnvironmentCredential,
    ManagedIdentityCredential,
    WorkloadIdentityCredential,
)

MANAGED_IDENTITY = "managed identity"


class _Credential(TokenCredential, Protocol):
    """azure-identity's credentials: token credentials that are context managers."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *args: Any) -> None: ...


class _Link:
    """One credential of the chain, telling the chain when it granted a token."""

    def __init__(self, label: str, credential: _Credential, chain: IdentityChain):
        self.label, self.credential, self.chain = label, credential, chain

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        token = self.credential.get_token(*scopes, **kwargs)
        self.chain.source = self.label
        return token

    def __enter__(self) -> _Link:
        self.credential.__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        self.credential.__exit__(*args)


class IdentityChain(ChainedTokenCredential):
    """``ChainedTokenCredential`` over labelled links; ``source`` is the label of the last
    link that granted a token (None before any did)."""

    def __init__(self, links: list[tuple[str, _Credential]]):
        self.source: str | None = None
        super().__init__(*(type(type(credential).__name__, (_Link,), {})(label, credential, self)
                           for label, credential in links))


def identity_chain(cloud_identity: bool) -> IdentityChain:
    env = os.environ
    links: list[tuple[str, _Credential]] = [
        ("service principal (AZURE_CLIENT_ID)", EnvironmentCredential())]
    if env.get("AZURE_FEDERATED_TOKEN_FILE"):
        links.append(("workload identity (AZURE_FEDERATED_TOKEN_FILE)",
                      WorkloadIdentityCredential()))
    if cloud_identity:  # a user-assigned identity is named by AZURE_CLIENT_ID, as in DAC
        links.append((MANAGED_IDENTITY,
                      ManagedIdentityCredential(client_id=env.get("AZURE_CLIENT_ID") or None)))
    links.append(("Azure CLI login", AzureCliCredential()))
    return IdentityChain(links)
