"""EC2 vCPU quotas: which Service Quotas code limits an instance type.

EC2 limits running vCPUs per region and per instance-family group, separately for
on-demand and spot. The group is named by the letters that start the instance type
(``m5.large`` → ``m``, ``g4dn.xlarge`` → ``g``, ``inf2.xlarge`` → ``inf``). Families not
listed here (``mac``, ``hpc``, ...) have no vCPU quota orch knows of: the check passes.
"""

from __future__ import annotations

import re

_STANDARD = ("a", "c", "d", "h", "i", "im", "is", "m", "r", "t", "z")

# family prefix → (on-demand quota code, spot quota code); None: no such quota.
_CODES: dict[str, tuple[str, str | None]] = {
    **dict.fromkeys(_STANDARD, ("L-1216C47A", "L-34B43A08")),
    "f": ("L-74FC7D96", "L-88CF9481"),
    "g": ("L-DB2E81BA", "L-3819A6DF"),
    "vt": ("L-DB2E81BA", "L-3819A6DF"),
    "p": ("L-417A185B", "L-7212CCBC"),
    "x": ("L-7295265B", "L-E3A00192"),
    "inf": ("L-1945791B", "L-B5D1601B"),
    "dl": ("L-6E869C2A", "L-85EED4F7"),
    "trn": ("L-2C3B7624", "L-6B0D517C"),
    "u": ("L-43DA4232", None),  # high memory: on-demand only
}
_FAMILY = re.compile(r"^[a-z]+")


def vcpu_quota_code(instance_type: str, use_spot: bool) -> str | None:
    """The Service Quotas code (service ``ec2``) limiting ``instance_type``'s vCPUs."""
    match = _FAMILY.match(instance_type.lower())
    codes = _CODES.get(match.group(0)) if match else None
    if codes is None:
        return None
    return codes[1] if use_spot else codes[0]
