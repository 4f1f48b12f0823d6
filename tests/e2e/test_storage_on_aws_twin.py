"""The managed-job checkpoint story on the AWS twin (tests/e2e/test_aws_twin.py): S3
through moto, EC2 through moto and the fault front, each instance a twin machine reached
over SSH, where rclone mounts the job's S3 bucket as the machine's own (non-root) user.

The job trains in steps and writes a checkpoint to its MOUNT bucket every step; moto then
terminates its instance behind orch's back (a spot reclaim), and the twin machine goes with
it, mounts and all. The recovered job, on a new instance, resumes from the newest
checkpoint, succeeds, and its bucket is deleted from S3.

The nodes reach S3 at the host's end of the twin's network (``HOST_ADDRESS``): a moto
server listens there, and the worker is given it as ``AWS_ENDPOINT_URL_S3``, which is
also the endpoint the nodes' rclone remote names. Runs as root on Linux with the twin's
tools, rclone and FUSE; skipped elsewhere, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from orch.names import ID_ENV, control_plane_hash, name_on_cloud
from tests.clouds.aws.conftest import cluster_instances, front, moto_url  # noqa: F401
from tests.e2e.conftest import Orch, wait_for
from tests.e2e.test_aws_twin import PLANE_ID, REGION, ec2, twin_control_plane  # noqa: F401
from tests.e2e.test_managed_jobs import job, status_is, submit, task_file
from tests.e2e.test_storage import FUSE_MISSING, TRAIN, bucket_name
from tests.fakes.ec2_fault_front import EC2FaultFront
from tests.fakes.twin_hosts import HOST_ADDRESS, Image, TwinWatcher, unavailable_reason

UNAVAILABLE = unavailable_reason() or FUSE_MISSING
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")]

JOB_CLUSTER = "job-1-0"  # the first task of the first job of a fresh control plane
ON_CLOUD = name_on_cloud(JOB_CLUSTER,
                         control_plane_hash(Path("/nonexistent"), "", {ID_ENV: PLANE_ID}))


@pytest.fixture
def twin(ec2: Any, tmp_path: Path) -> Iterator[TwinWatcher]:  # noqa: F811
    image = Image.for_other_users()
    assert image is not None  # or the module would have been skipped
    with TwinWatcher(ec2, ON_CLOUD, tmp_path / "machines", image) as watcher:
        yield watcher


@pytest.fixture
def s3_url(twin: TwinWatcher) -> Iterator[str]:
    """moto's S3, where both the worker and the twin machines reach it."""
    server = ThreadedMotoServer(ip_address=HOST_ADDRESS, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def orch_s3(front: EC2FaultFront, twin: TwinWatcher, s3_url: str,  # noqa: F811
            tmp_path: Path) -> Iterator[Orch]:
    yield from twin_control_plane(front, tmp_path, cleanup=[], AWS_ENDPOINT_URL_S3=s3_url)


def s3_keys(s3: Any, bucket: str) -> list[str]:
    try:
        return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    except ClientError:
        return []


def bucket_exists(s3: Any, bucket: str) -> bool:
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError:
        return False
    return True


def test_a_preempted_job_on_aws_resumes_from_its_s3_checkpoint_and_the_bucket_goes(
    orch_s3: Orch, twin: TwinWatcher, ec2: Any, s3_url: str, tmp_path: Path,  # noqa: F811
) -> None:
    s3 = boto3.session.Session().client("s3", region_name=REGION, endpoint_url=s3_url,
                                        aws_access_key_id="testing",
                                        aws_secret_access_key="testing")
    bucket = bucket_name("twin-ckpt")
    spec = TRAIN.format(bucket=bucket, steps=20).replace(
        "  cloud: local\n", f"  cloud: aws\n  region: {REGION}\n")
    job_id = submit(orch_s3, task_file(tmp_path, "train.yaml", spec))
    assert job_id == 1  # so its cluster is JOB_CLUSTER, the one the twin gives bodies to
    wait_for(lambda: "step-0003" in s3_keys(s3, bucket), 300, "the third checkpoint in S3")

    first = cluster_instances(ec2, ON_CLOUD, ("running",))
    ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in first])  # reclaimed

    wait_for(lambda: status_is(orch_s3, job_id, "SUCCEEDED"), 300, "the job to recover")
    assert job(orch_s3, job_id)["recoveries"] == 1
    output = orch_s3("jobs", "logs", str(job_id), "--no-follow").stdout
    resumed = re.search(r"resumed from step (\d+)", output)
    assert resumed and int(resumed.group(1)) >= 3, output
    assert "finished at step 20" in output
    wait_for(lambda: not bucket_exists(s3, bucket), 60, "the bucket deleted from S3")
    assert twin.errors == []
