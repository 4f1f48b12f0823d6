"""Each store's bucket-name rules, pure: what is wrong with a name, as sentences a user
can act on (empty: nothing). The spec checks names with these before anything starts;
the services would refuse the same names later with a bare ``InvalidBucketName``.
"""

from __future__ import annotations

import ipaddress
import re

_LENGTH = (3, 63)


def _length(name: str, low: int, high: int) -> list[str]:
    if low <= len(name) <= high:
        return []
    return [f"must be {low}-{high} characters long (it has {len(name)})"]


def _alphabet(name: str, allowed: str, allowed_words: str) -> list[str]:
    bad = sorted({c for c in name if not re.fullmatch(allowed, c)})
    if not bad:
        return []
    return [f"may contain only {allowed_words} (not {', '.join(repr(c) for c in bad)})"]


def _ends(name: str) -> list[str]:
    if name and name[0].isalnum() and name[-1].isalnum():
        return []
    return ["must begin and end with a letter or a digit"]


def _looks_like_ip(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


# S3's reserved prefixes and suffixes, from its naming rules below.
_S3_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_S3_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def s3_name_problems(name: str) -> list[str]:
    """S3 general purpose buckets, per
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html :
    3-63 characters; lowercase letters, digits, dots and hyphens; begins and ends with a
    letter or digit; no two adjacent dots; not an IP address (192.168.5.4); not beginning
    with ``xn--``, ``sthree-`` or ``amzn-s3-demo-``; not ending with ``-s3alias``,
    ``--ol-s3``, ``.mrap``, ``--x-s3`` or ``--table-s3``."""
    problems = _length(name, *_LENGTH)
    problems += _alphabet(name, r"[a-z0-9.-]", "lowercase letters, digits, '.' and '-'")
    problems += _ends(name)
    if ".." in name:
        problems.append("may not contain two adjacent dots")
    if _looks_like_ip(name):
        problems.append("may not be formatted as an IP address")
    problems += [f"may not begin with {p!r} (reserved by AWS)"
                 for p in _S3_PREFIXES if name.startswith(p)]
    problems += [f"may not end with {s!r} (reserved by AWS)"
                 for s in _S3_SUFFIXES if name.endswith(s)]
    return problems


# "google" and its close misspellings, which GCS refuses anywhere in a name.
_GOOGLE_LIKE = re.compile(r"g[o0]{2}g[l1]e")


def gcs_name_problems(name: str) -> list[str]:
    """Cloud Storage buckets, per https://cloud.google.com/storage/docs/buckets#naming :
    lowercase letters, digits, dashes, underscores and dots; begins and ends with a letter
    or digit; 3-63 characters, or up to 222 when the name has dots, each dot-separated
    part at most 63; not an IP address in dotted-decimal form; not beginning with
    ``goog``; not containing ``google`` or a close misspelling (``g00gle``). (Names with
    dots also need a verified domain: that only the service can tell.)"""
    if "." in name:
        problems = _length(name, 3, 222)
        problems += [f"each dot-separated part must be at most 63 characters ({part[:20]!r}... "
                     f"has {len(part)})" for part in name.split(".") if len(part) > 63]
        if "" in name.split("."):
            problems.append("may not contain two adjacent dots")
    else:
        problems = _length(name, *_LENGTH)
    problems += _alphabet(name, r"[a-z0-9._-]", "lowercase letters, digits, '-', '_' and '.'")
    problems += _ends(name)
    if _looks_like_ip(name):
        problems.append("may not be formatted as an IP address")
    if name.startswith("goog"):
        problems.append("may not begin with 'goog' (reserved by Google)")
    if _GOOGLE_LIKE.search(name):
        problems.append("may not contain 'google' or a close misspelling of it")
    return problems


def azure_container_problems(name: str) -> list[str]:
    """Azure Blob containers, per https://learn.microsoft.com/en-us/rest/api/storageservices/
    naming-and-referencing-containers--blobs--and-metadata#container-names : 3-63
    characters; lowercase letters, digits and hyphens; begins with a letter or digit;
    every hyphen immediately preceded and followed by a letter or digit (so no double
    hyphen, no hyphen at the end)."""
    problems = _length(name, *_LENGTH)
    problems += _alphabet(name, r"[a-z0-9-]", "lowercase letters, digits and '-'")
    if name and not name[0].isalnum():
        problems.append("must begin with a letter or a digit")
    if "--" in name or name.endswith("-"):
        problems.append("every '-' must sit between two letters or digits (no '--', no "
                        "'-' at the end)")
    return problems


def azure_account_problems(account: str) -> list[str]:
    """Azure storage account names, per https://learn.microsoft.com/en-us/azure/
    azure-resource-manager/management/resource-name-rules#microsoftstorage : 3-24
    characters, lowercase letters and digits only."""
    problems = _length(account, 3, 24)
    problems += _alphabet(account, r"[a-z0-9]", "lowercase letters and digits")
    return problems


def local_name_problems(name: str) -> list[str]:
    """The local store's buckets are directories under ``$ORCH_HOME/storage``: a name is
    one safe path component, 3-63 characters of lowercase letters, digits, '-', '_' and
    '.', beginning and ending with a letter or digit (so never ``..`` nor hidden), no two
    adjacent dots. That is every valid S3 or Azure name and most GCS ones, so a task that
    names its bucket for a cloud also runs on the local cloud."""
    problems = _length(name, *_LENGTH)
    problems += _alphabet(name, r"[a-z0-9._-]", "lowercase letters, digits, '-', '_' and '.'")
    problems += _ends(name)
    if ".." in name:
        problems.append("may not contain two adjacent dots")
    return problems


def describe(kind: str, name: str, problems: list[str]) -> str:
    """One sentence for a BadName error: ``s3 bucket name 'My_B': may contain ...; ...``."""
    return f"{kind} bucket name {name!r}: " + "; ".join(problems)
