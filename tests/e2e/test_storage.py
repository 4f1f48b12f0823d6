"""Buckets end to end on the local cloud: the real CLI, the dev server, a worker, real Ray,
the local store (buckets are directories under ``$ORCH_HOME/storage``) and real rclone
mounts (FUSE) on the nodes. A preemption is real, as in test_managed_jobs.py: the node's
processes are killed and its sandbox removed behind orch's back; the kernel forgets its
mounts as it would a vanished machine's."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient

from orch.runtime.local_processes import kill_marked
from tests.e2e.conftest import Orch, wait_for
from tests.e2e.test_managed_jobs import job, status_is, submit, task_file

FUSE_MISSING = next((why for why, missing in (
    ("rclone is not installed (apt-get install rclone)", shutil.which("rclone") is None),
    ("fusermount3 is not installed (apt-get install fuse3)",
     shutil.which("fusermount3") is None),
    ("this machine has no /dev/fuse", not Path("/dev/fuse").exists()),
) if missing), None)
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(FUSE_MISSING is not None,
                                                  reason=FUSE_MISSING or "")]


def bucket_name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def fuse_mounts_under(path: str) -> list[str]:
    """This machine's FUSE mount points under ``path``."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point, kind = line.split()[1], line.split()[2]
        if kind.startswith("fuse") and point.startswith(path):
            found.append(point)
    return found


def take_back(home: str) -> None:
    """The cloud takes the machine back: its processes, its mounts, its disk."""
    kill_marked(home)
    for point in fuse_mounts_under(home):
        subprocess.run(["fusermount3", "-uz", point], check=False)
    shutil.rmtree(home)


def bucket_dir(orch: Orch, name: str) -> Path:
    return orch.home / "storage" / name


def listed(orch: Orch) -> dict[str, dict]:
    return {b["name"]: b for b in orch.json("storage", "ls")}


def test_mount_copy_and_cached_buckets_survive_stop_start_and_go_with_the_cluster(
    orch: Orch, tmp_path: Path,
) -> None:
    ckpt, data, cache = bucket_name("ckpt"), bucket_name("data"), bucket_name("cache")
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "train.txt").write_text("42 examples\n")
    spec = task_file(tmp_path, "buckets.yaml", f"""\
resources:
  cloud: local
envs:
  CKPT: {ckpt}
file_mounts:
  ~/ckpt:
    name: ${{CKPT}}
    persistent: false
  ~/data:
    name: {data}
    source: {tmp_path / "dataset"}
    mode: COPY
    persistent: false
  ~/cache:
    name: {cache}
    mode: MOUNT_CACHED
    persistent: false
run: |
  cat ~/data/train.txt
  echo one > ~/ckpt/model-1.txt
  echo cached > ~/cache/c.txt
""")
    launched = orch("launch", "-y", "-c", "buckets", spec, timeout=600)
    assert "42 examples" in launched.stdout and "COPY ~/data 100%" in launched.stdout
    (home,) = orch.node_homes("buckets")
    assert sorted(fuse_mounts_under(home)) == [f"{home}/cache", f"{home}/ckpt"]
    assert (bucket_dir(orch, ckpt) / "model-1.txt").read_text() == "one\n"  # write-through
    assert (bucket_dir(orch, data) / "train.txt").read_text() == "42 examples\n"  # uploaded
    wait_for(lambda: (bucket_dir(orch, cache) / "c.txt").exists(), 30, "the cache written back")

    buckets = listed(orch)
    assert {b: buckets[b]["users"] for b in (ckpt, data, cache)} == {
        b: ["cluster/buckets"] for b in (ckpt, data, cache)}
    assert (buckets[ckpt]["store"], buckets[ckpt]["persistent"]) == ("local", False)
    refused = orch("storage", "delete", "-y", ckpt, check=False)
    assert refused.returncode == 1 and "is used by cluster/buckets" in refused.stderr

    orch("stop", "-y", "buckets")
    assert fuse_mounts_under(home) == []  # unmounted first, cleanly
    orch("start", "-y", "buckets")
    assert sorted(fuse_mounts_under(home)) == [f"{home}/cache", f"{home}/ckpt"]
    again = orch("exec", "buckets", "cat ~/ckpt/model-1.txt ~/cache/c.txt")
    assert "one" in again.stdout and "cached" in again.stdout

    down = orch("down", "-y", "buckets")
    assert f"Bucket {ckpt} deleted" in down.stdout and f"Bucket {cache} deleted" in down.stdout
    assert fuse_mounts_under(home) == [] and orch.node_homes("buckets") == []
    assert not any(bucket_dir(orch, b).exists() for b in (ckpt, data, cache))
    assert not {ckpt, data, cache} & set(listed(orch))


def test_a_persistent_bucket_outlives_its_cluster_and_a_uri_bucket_is_never_touched(
    orch: Orch, tmp_path: Path,
) -> None:
    kept, theirs = bucket_name("kept"), bucket_name("theirs")
    bucket_dir(orch, theirs).mkdir(parents=True)
    (bucket_dir(orch, theirs) / "corpus.txt").write_text("their data\n")
    spec = task_file(tmp_path, "kept.yaml", f"""\
resources:
  cloud: local
file_mounts:
  ~/kept:
    name: {kept}
  ~/theirs:
    source: local://{theirs}
    mode: MOUNT
run: |
  cat ~/theirs/corpus.txt
  echo "runs before: $(ls ~/kept | wc -l)"
  touch ~/kept/run-$RANDOM
""")
    first = orch("launch", "-y", "-c", "keeper", spec, timeout=600)
    assert "their data" in first.stdout and "runs before: 0" in first.stdout
    orch("down", "-y", "keeper")
    assert len(list(bucket_dir(orch, kept).glob("run-*"))) == 1
    assert listed(orch)[kept]["users"] == [] and theirs not in listed(orch)

    second = orch("launch", "-y", "-c", "keeper", spec, timeout=600)
    assert "runs before: 1" in second.stdout  # the same bucket, with the first run's file
    orch("down", "-y", "keeper")

    deleted = orch("storage", "delete", "-y", kept)
    assert f"Deleted LOCAL bucket {kept}." in deleted.stdout
    assert not bucket_dir(orch, kept).exists() and kept not in listed(orch)
    assert (bucket_dir(orch, theirs) / "corpus.txt").read_text() == "their data\n"


TRAIN = """\
name: train
resources:
  cloud: local
file_mounts:
  ~/ckpt:
    name: {bucket}
    persistent: false
run: |
  latest=$(ls ~/ckpt | sort | tail -1)
  if [ -n "$latest" ]; then
    step=$(cat ~/ckpt/$latest); echo "resumed from step $step"
  else
    step=0; echo "started at step 0"
  fi
  while [ $step -lt {steps} ]; do
    step=$((step + 1)); sleep 1
    echo $step > ~/ckpt/step-$(printf %04d $step)
    echo "trained step $step"
  done
  echo "finished at step $step"
"""


def test_a_preempted_job_resumes_from_its_checkpoint_bucket_and_the_bucket_goes(
    orch: Orch, tmp_path: Path,
) -> None:
    bucket = bucket_name("train")
    job_id = submit(orch, task_file(tmp_path, "train.yaml",
                                    TRAIN.format(bucket=bucket, steps=12)))
    cluster = f"job-{job_id}-0"
    wait_for(lambda: (bucket_dir(orch, bucket) / "step-0003").exists(), 180,
             "the third checkpoint in the bucket")
    assert sorted(listed(orch)[bucket]["users"]) == [f"cluster/{cluster}", f"job/{job_id}"]

    for home in orch.node_homes(cluster):
        take_back(home)

    wait_for(lambda: status_is(orch, job_id, "SUCCEEDED"), 300, "the job to recover")
    assert job(orch, job_id)["recoveries"] == 1
    output = orch("jobs", "logs", str(job_id), "--no-follow").stdout
    resumed = re.search(r"resumed from step (\d+)", output)
    assert resumed and int(resumed.group(1)) >= 3, output
    assert output.index("started at step 0") < resumed.start()
    assert "finished at step 12" in output
    wait_for(lambda: not bucket_dir(orch, bucket).exists(), 60, "the bucket deleted")
    controller = orch("jobs", "logs", str(job_id), "--controller").stdout
    assert f"bucket {bucket} deleted" in controller
    assert bucket not in listed(orch)


async def _delete_activities(address: str, workflow_id: str) -> list[str]:
    """The results of the entity's completed ``delete_bucket`` activities."""
    client = await TemporalClient.connect(address)
    events = [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]
    deletes = {e.event_id for e in events
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               and e.activity_task_scheduled_event_attributes.activity_type.name
               == "delete_bucket"}
    return [e.activity_task_completed_event_attributes.result.payloads[0].data.decode()
            for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and e.activity_task_completed_event_attributes.scheduled_event_id in deletes]


def test_a_worker_killed_between_the_clusters_end_and_its_buckets_deletes_it_once(
    orch: Orch, tmp_path: Path,
) -> None:
    bucket = bucket_name("doomed")
    spec = task_file(tmp_path, "doomed.yaml", f"""\
resources:
  cloud: local
file_mounts:
  ~/out:
    name: {bucket}
    persistent: false
run: echo kept > ~/out/result.txt
""")
    orch("launch", "-y", "-c", "doomed", spec, timeout=600)
    (home,) = orch.node_homes("doomed")
    worker = orch.plane().state()
    assert worker is not None and worker.worker_pid

    down = orch.popen("down", "-y", "doomed")
    while Path(home).exists():  # the cluster's machine is being deleted
        assert down.poll() is None, down.communicate()[0]
        time.sleep(0.005)
    os.killpg(worker.worker_pid, signal.SIGSTOP)  # at once: before the bucket's turn
    assert bucket_dir(orch, bucket).is_dir()
    os.killpg(worker.worker_pid, signal.SIGKILL)
    orch("server", "start")  # a new worker takes the teardown over

    output, _ = down.communicate(timeout=300)
    assert down.returncode == 0, output
    assert f"Bucket {bucket} deleted" in output
    assert not bucket_dir(orch, bucket).exists() and bucket not in listed(orch)
    state = orch.plane().state()
    assert state is not None
    results = asyncio.run(_delete_activities(f"127.0.0.1:{state.port}",
                                             f"storage/local/{bucket}"))
    assert results == ["true"]  # deleted, once: no second delete, no retry needed
