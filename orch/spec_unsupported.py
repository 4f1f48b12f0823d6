"""The SkyPilot task fields orch refuses, in one table: field path → the message.

A SkyPilot user's YAML must never be half-run: a field orch cannot honour is refused by
name ("SkyPilot field X is not supported by orch"), never reported as an unknown field
nor answered with a typo hint toward another field, and never planned and dropped. The
keys are the field paths as SkyPilot's YAML reference writes them; ``resources.X`` also
applies inside ``any_of`` / ``ordered``. Keys with a ``:`` name a form of a field orch
otherwise supports (the validators of those fields look their message up here).
"""

from __future__ import annotations

IMAGE_DOCKER = "resources.image_id: docker:<image>"
WORKDIR_GIT = "workdir: {url, ref}"
AUTOSTOP_HOOK = "resources.autostop.hook"
AUTOSTOP_WAIT_NONE = "resources.autostop.wait_for: none"


def _refused(field: str, why: str) -> str:
    return f"SkyPilot field {field} is not supported by orch: {why}"


UNSUPPORTED: dict[str, str] = {
    "config": _refused("config", "per-task advanced config (docker, kubernetes, gcp, "
                       "nvidia_gpus options) has no counterpart in orch"),
    "service": _refused("service", "orch runs clusters and managed jobs, not SkyServe "
                        "services"),
    "volumes": _refused("volumes", "orch does not attach volumes"),
    "resources.accelerator_args": _refused("resources.accelerator_args", "orch does not "
                                           "run TPUs"),
    "resources.volumes": _refused("resources.volumes", "orch does not attach volumes"),
    AUTOSTOP_HOOK: _refused(AUTOSTOP_HOOK, "orch stops a cluster from its controller and "
                            "runs no script on the node first; save state at the end of run "
                            "instead"),
    AUTOSTOP_WAIT_NONE: _refused(AUTOSTOP_WAIT_NONE, "orch never stops a cluster with a "
                                 "job pending or running"),
    IMAGE_DOCKER: _refused("resources.image_id: docker:<image>", "orch runs the task on "
                           "the VM, not in a container"),
    WORKDIR_GIT: _refused("workdir: {url, ref}", "orch syncs a local directory; clone the "
                          "repository in setup instead"),
}


def refused_field(loc: list[str], in_resources: bool) -> str | None:
    """The message for a field orch does not have (pydantic's "extra" error at ``loc``),
    when it is one of SkyPilot's; None for a field nobody knows."""
    key = f"resources.{loc[-1]}" if in_resources else loc[-1] if len(loc) == 1 else ""
    return UNSUPPORTED.get(key)

