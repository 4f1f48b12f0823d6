"""Machine images: the default AMI, and which user to SSH in as.

The default is Canonical's newest Ubuntu LTS server image for the instance type's
architecture, looked up in the region (AMI ids differ per region and change with every
Canonical release, so they are never hard-coded). Ubuntu because orch's node runtime
(Ray, orch's node package) is installed with apt/pip on a stock Ubuntu, and its SSH user is
``ubuntu``. Among the matches, the highest LTS release wins, then the newest build.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orch.clouds.errors import BlockScope, InvalidConfigError
from orch.settings import configured_user

CANONICAL_OWNER = "099720109477"
# hvm-ssd (gp2) up to 22.04, hvm-ssd-gp3 from 24.04; pro and minimal images live elsewhere.
_UBUNTU_SERVER = "ubuntu/images/hvm-ssd*/ubuntu-*-server-*"
_RELEASE = re.compile(r"/ubuntu-[a-z]+-(\d+)\.(\d+)-")
# A custom image may name its login user with this tag.
TAG_SSH_USER = "orch-ssh-user"
_USER_BY_NAME_PREFIX = (
    (("amzn", "al20", "rhel", "suse", "fedora"), "ec2-user"),
    (("debian",), "admin"),
)
DEFAULT_SSH_USER = "ubuntu"


def image_preference(image: dict[str, Any]) -> tuple[bool, int, int, str]:
    match = _RELEASE.search(image.get("Name", ""))
    major, minor = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    is_lts = minor == 4 and major % 2 == 0
    return (is_lts, major, minor, image.get("CreationDate", ""))


def default_image_id(ec2: Any, architecture: str) -> str:
    """The preferred Canonical Ubuntu server AMI for ``architecture`` in ``ec2``'s region."""
    images = ec2.describe_images(
        Owners=[CANONICAL_OWNER],
        Filters=[
            {"Name": "name", "Values": [_UBUNTU_SERVER]},
            {"Name": "architecture", "Values": [architecture]},
            {"Name": "state", "Values": ["available"]},
        ],
    )["Images"]
    if not images:
        raise InvalidConfigError(
            f"no Canonical Ubuntu server image for {architecture} in "
            f"{ec2.meta.region_name}; set image_id", scope=BlockScope.REGION)
    image_id: str = max(images, key=image_preference)["ImageId"]
    return image_id


def ssh_user(image: dict[str, Any] | None, image_id: str | None = None,
             configured: Mapping[str, str] | None = None) -> str:
    """The login user of ``image``: the config's ``ssh_user`` entry matching its id or
    name (the user on this machine knows best), else its ``orch-ssh-user`` tag, else known
    by its name; Ubuntu's when nothing is known."""
    names = [image_id, *((image.get("ImageId"), image.get("Name")) if image else ())]
    chosen = configured_user(configured or {}, *names)
    if chosen:
        return chosen
    if image is None:
        return DEFAULT_SSH_USER
    for tag in image.get("Tags", []):
        if tag.get("Key") == TAG_SSH_USER and tag.get("Value"):
            return str(tag["Value"])
    name = str(image.get("Name", "")).lower()
    for prefixes, user in _USER_BY_NAME_PREFIX:
        if name.startswith(prefixes):
            return user
    return DEFAULT_SSH_USER
