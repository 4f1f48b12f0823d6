"""Each config value reaches the code that uses it (the cheapest real path for each: the
semaphore's settings, the launch request, the client's validation, the plan activity, the
AWS login user). The CLI's side is in tests/e2e/test_config_cli.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities import plan as plan_activity
from orch.client import INVALID_RESOURCES, Client, OrchError
from orch.clouds.aws_images import ssh_user
from orch.lifecycle import Autostop
from orch.spec import Task
from workers.registry import semaphore_settings

AWS_TASK = Task.model_validate({"resources": {"cloud": "aws"}, "run": "true"})


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write the config file this process reads (``ORCH_CONFIG``)."""
    path = tmp_path / "config.yaml"
    monkeypatch.setenv("ORCH_CONFIG", str(path))
    for name in ("ORCH_LAUNCH_PERMITS", "ORCH_JOB_SLOTS"):
        monkeypatch.delenv(name, raising=False)

    def write(text: str) -> Path:
        path.write_text(text)
        return path

    return write


def test_launch_permits_and_job_slots_reach_the_semaphore(config, monkeypatch) -> None:
    config("launch_permits: 3\njob_slots: 40\n")
    limits = semaphore_settings().limits
    assert (limits.launch, limits.job) == (3, 40)
    monkeypatch.setenv("ORCH_LAUNCH_PERMITS", "5")
    assert semaphore_settings().limits.launch == 5


def test_the_default_autostop_is_in_the_request_of_a_new_cluster(config) -> None:
    config("autostop: {idle_minutes: 45, down: true}\n")
    request = Client.launch_request(AWS_TASK, retry_until_up=False, autostop=None,
                                    new_cluster=True)
    assert request.autostop == Autostop(idle_minutes=45, down=True)
    flags = Autostop(idle_minutes=2)
    assert Client.launch_request(AWS_TASK, retry_until_up=False, autostop=flags,
                                 new_cluster=True).autostop == flags
    assert Client.launch_request(AWS_TASK, retry_until_up=False, autostop=None,
                                 new_cluster=False).autostop is None


def test_no_default_autostop_leaves_the_request_without_one(config) -> None:
    config("launch_permits: 2\n")
    assert Client.launch_request(AWS_TASK, retry_until_up=True, autostop=None,
                                 new_cluster=True).autostop is None


def test_the_client_refuses_a_disallowed_cloud_before_anything_starts(config) -> None:
    config("allowed_clouds: [gcp]\n")
    with pytest.raises(OrchError, match="not in the config's allowed_clouds") as error:
        Client.validate(AWS_TASK)
    assert error.value.kind == INVALID_RESOURCES
    config("allowed_clouds: [aws]\n")
    Client.validate(AWS_TASK)


def test_the_plan_activity_follows_allowed_clouds_and_default_regions(config, monkeypatch
                                                                      ) -> None:
    monkeypatch.setattr(plan_activity, "enabled_clouds", lambda: ("aws", "gcp", "azure"))
    config("allowed_clouds: [gcp]\ngcp: {default_region: asia-northeast1}\n")
    anywhere = plan_activity.plan_candidates(plan_activity.PlanRequest(task=Task()))
    assert anywhere and {c.cloud for c in anywhere} == {"gcp"}
    gcp = Task.model_validate({"resources": {"cloud": "gcp"}})
    found = plan_activity.plan_candidates(plan_activity.PlanRequest(task=gcp))
    assert found[0].region == "asia-northeast1" and len({c.region for c in found}) > 1
    with pytest.raises(ApplicationError, match="allowed_clouds") as error:
        plan_activity.plan_candidates(plan_activity.PlanRequest(task=AWS_TASK))
    assert error.value.type == "NoCandidatesError" and error.value.non_retryable


def test_a_broken_config_fails_the_plan_activity_for_good(config) -> None:
    path = config("allowed_clouds: [awz]\n")
    with pytest.raises(ApplicationError, match=f"{path}: invalid config") as error:
        plan_activity.plan_candidates(plan_activity.PlanRequest(task=AWS_TASK))
    assert error.value.non_retryable


def test_ssh_user_of_the_config_wins_over_tags_and_names() -> None:
    image = {"ImageId": "ami-0abc123", "Name": "debian-12-amd64",
             "Tags": [{"Key": "orch-ssh-user", "Value": "tagged"}]}
    assert ssh_user(image, configured={"ami-0abc*": "rocky"}) == "rocky"
    assert ssh_user(image, configured={"debian-*": "deb"}) == "deb"
    assert ssh_user(image, configured={"ami-other": "x"}) == "tagged"
    assert ssh_user(None, "ami-0abc123", {"ami-0abc123": "known"}) == "known"
    assert ssh_user(None, "ami-0abc123", {}) == "ubuntu"


def test_a_failed_launch_says_the_setup_tail_then_what_to_do_with_the_init_cluster() -> None:
    from temporalio.exceptions import ApplicationError

    from orch.client import update_failure

    error = update_failure(ApplicationError(
        "ray start failed", {"tail": "(rank=1) boom", "hint": "Cluster c is left INIT."},
        type="SetupError"))
    assert str(error) == "ray start failed\n(rank=1) boom\nCluster c is left INIT."
