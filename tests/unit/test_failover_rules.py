"""Failover block rules: scopes to block entries, the blocklist, history rows. (Which cloud
error code has which scope is tested with each provider, under tests/clouds/.)"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from pydantic import ValidationError
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orch.clouds.errors import BlockScope
from orch.failover_rules import (
    HISTORY_HEADERS,
    HISTORY_KEPT,
    RETRIES_PER_ZONE,
    THROTTLE_BACKOFF_S,
    AttemptLog,
    BlockEntry,
    Blocklist,
    Candidate,
    FailoverAttempt,
    Retries,
    block_entry,
    history_rows,
    is_throttling,
    record_failure,
    retry_backoff_s,
)

P4D = Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a", "us-east-1b"],
                instance_type="p4d.24xlarge", accelerators={"A100": 8}, num_nodes=2,
                cpus=96, memory_gb=1152, price_per_node=21.96, price_per_hour=43.92)
AZURE = Candidate(cloud="azure", region="eastus", instance_type="Standard_ND96asr_v4",
                  accelerators={"A100": 8}, price_per_node=27.2, price_per_hour=27.2)


def test_zone_scope_blocks_that_zone_for_that_instance_type_and_pricing():
    entry = block_entry(P4D, "CapacityError", BlockScope.ZONE, "us-east-1a")
    assert entry == BlockEntry(cloud="aws", region="us-east-1", zone="us-east-1a",
                               instance_type="p4d.24xlarge", use_spot=False,
                               reason="CapacityError")
    blocked = Blocklist().add(entry)
    assert blocked.blocks("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", False)
    assert not blocked.blocks("aws", "us-east-1", "us-east-1b", "p4d.24xlarge", False)
    assert not blocked.blocks("aws", "us-east-1", "us-east-1a", "p5.48xlarge", False)
    assert not blocked.blocks("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", True)


def test_zone_scope_without_a_zone_blocks_the_whole_candidate():
    entry = block_entry(AZURE, "CapacityError", BlockScope.ZONE, None)
    assert entry is not None and entry.zone is None
    blocked = Blocklist().add(entry)
    assert blocked.blocks("azure", "eastus", None, "Standard_ND96asr_v4", False)
    assert not blocked.blocks("azure", "eastus", None, "Standard_NC24ads_A100_v4", False)
    assert not blocked.blocks("azure", "westus2", None, "Standard_ND96asr_v4", False)


def test_region_scope_blocks_every_instance_type_of_the_region():
    blocked = Blocklist().add(block_entry(P4D, "QuotaError", BlockScope.REGION, "us-east-1a"))
    assert blocked.blocks("aws", "us-east-1", "us-east-1b", "m6id.large", True)
    assert blocked.blocks("aws", "us-east-1", None, None, None)
    assert not blocked.blocks("aws", "us-east-2", "us-east-2a", "p4d.24xlarge", False)


def test_cloud_scope_blocks_the_cloud_and_nothing_else():
    blocked = Blocklist().add(block_entry(P4D, "AuthError", BlockScope.CLOUD, "us-east-1a"))
    assert blocked.blocks("aws", "eu-west-1", "eu-west-1a", "c8i.2xlarge", False)
    assert not blocked.blocks("gcp", "us-central1", "us-central1-a", "a2-highgpu-8g", False)


def test_transient_errors_block_nothing():
    assert block_entry(P4D, "TransientError", BlockScope.NONE, "us-east-1a") is None
    assert Blocklist().add(None) == Blocklist()


def _fail_transient(retries: Retries, zone: str | None, code: str = "InternalError",
                    candidate: Candidate = P4D) -> tuple[FailoverAttempt, Retries]:
    attempt = record_failure(candidate, zone, "TransientError", code, "try later",
                             BlockScope.NONE, retries=retries.of(candidate, zone))
    return attempt, retries.after(attempt)


def test_a_failure_that_blocks_nothing_blocks_its_zone_at_the_retry_limit():
    retries = Retries()
    blocks = []
    for _ in range(RETRIES_PER_ZONE):
        attempt, retries = _fail_transient(retries, "us-east-1a")
        blocks.append(attempt.block)
    assert blocks[:-1] == [None] * (RETRIES_PER_ZONE - 1)
    assert blocks[-1] == BlockEntry(cloud="aws", region="us-east-1", zone="us-east-1a",
                                    instance_type="p4d.24xlarge", use_spot=False,
                                    reason=f"TransientError x{RETRIES_PER_ZONE}")
    # The blocking attempt is not counted again; other places have counts of their own.
    assert retries.of(P4D, "us-east-1a") == RETRIES_PER_ZONE - 1
    assert retries.of(P4D, "us-east-1b") == 0
    assert retries.of(P4D.model_copy(update={"use_spot": True}), "us-east-1a") == 0
    zoneless, _ = _fail_transient(Retries(counts={"azure/eastus/-/Standard_ND96asr_v4/on": 2}),
                                  None, candidate=AZURE)
    assert zoneless.block is not None and zoneless.block.describe() == (
        "azure region eastus (Standard_ND96asr_v4)")


def test_retries_are_immutable_and_count_only_unblocked_failures():
    empty = Retries()
    attempt, once = _fail_transient(empty, "us-east-1a")
    assert empty.counts == {} and once.of(P4D, "us-east-1a") == 1
    capacity = record_failure(P4D, "us-east-1a", "CapacityError", "", "", BlockScope.ZONE)
    assert once.after(capacity) is once


def test_throttling_backs_off_longer_each_time_and_not_once_the_place_is_blocked():
    retries, waits = Retries(), []
    for _ in range(RETRIES_PER_ZONE):
        before = retries.of(P4D, "us-east-1a")
        attempt, retries = _fail_transient(retries, "us-east-1a", code="RequestLimitExceeded")
        waits.append(retry_backoff_s(attempt, before))
    assert waits == [*THROTTLE_BACKOFF_S[:RETRIES_PER_ZONE - 1], 0]
    assert waits[0] < waits[1]
    passing, _ = _fail_transient(Retries(), "us-east-1a", code="InternalError")
    assert retry_backoff_s(passing, 0) == 0


def test_each_clouds_throttling_errors_are_recognised():
    """The codes come from the providers' own error translation, not from this test."""
    from botocore.exceptions import ClientError

    from orch.clouds import aws_errors, azure_errors, gcp_errors

    def aws(code: str) -> str:
        return aws_errors.translate(ClientError({"Error": {"Code": code}}, "RunInstances")).code

    def gcp(code: str = "", status: int = 0) -> str:  # a finished operation's error
        errors = [{"code": code, "message": "slow down"}] if code else []
        return gcp_errors.from_operation({"error": {"errors": errors},
                                          "httpErrorStatusCode": status}).code

    throttled = [
        aws("RequestLimitExceeded"), aws("Throttling"),
        gcp(code="rateLimitExceeded"), gcp(code="RESOURCE_OPERATION_RATE_EXCEEDED"),
        gcp(status=429),
        azure_errors.classify("TooManyRequests", "slow down", status=429, region="eastus",
                              zone=None).code,
        azure_errors.classify("", "slow down", status=429, region="eastus", zone=None).code,
    ]
    assert all(is_throttling(code) for code in throttled), throttled
    passing = [aws("InternalError"), gcp(code="backendError"), gcp(status=503),
               azure_errors.classify("", "oops", status=500, region="eastus", zone=None).code]
    assert not any(is_throttling(code) for code in passing), passing


def test_the_attempt_log_keeps_the_latest_and_counts_the_rest():
    log = AttemptLog()
    attempts = [record_failure(P4D, f"zone-{n}", "CapacityError", "", "", BlockScope.ZONE)
                for n in range(HISTORY_KEPT + 7)]
    for attempt in attempts:
        log = log.add(attempt)
    assert log.recent == attempts[7:] and log.older == 7 and log.total == HISTORY_KEPT + 7
    rows = history_rows(log.recent, log.older)
    assert rows[0][0] == "8" and rows[-1][0] == str(HISTORY_KEPT + 7)
    assert AttemptLog.model_validate_json(log.model_dump_json()) == log


def test_a_zone_entry_does_not_block_a_zoneless_query():
    blocked = Blocklist().add(block_entry(P4D, "CapacityError", BlockScope.ZONE, "us-east-1a"))
    assert not blocked.blocks("aws", "us-east-1", None, "p4d.24xlarge", False)


def test_blocklist_is_immutable_and_deduplicates():
    entry = block_entry(P4D, "CapacityError", BlockScope.ZONE, "us-east-1a")
    empty = Blocklist()
    once = empty.add(entry)
    assert empty.entries == [] and len(once.entries) == 1
    assert once.add(entry) is once
    with pytest.raises(ValidationError):
        once.entries = []  # type: ignore[misc]


def test_models_survive_a_json_round_trip():
    """They cross the Temporal boundary through the pydantic data converter."""
    attempt = record_failure(P4D, "us-east-1a", "CapacityError", "InsufficientInstanceCapacity",
                             "We currently do not have sufficient p4d.24xlarge capacity",
                             BlockScope.ZONE)
    blocked = Blocklist().add(attempt.block)
    assert FailoverAttempt.model_validate_json(attempt.model_dump_json()) == attempt
    assert Blocklist.model_validate(json.loads(blocked.model_dump_json())) == blocked


def test_record_failure_applies_the_block_rule():
    attempt = record_failure(P4D, "us-east-1b", "QuotaError", "VcpuLimitExceeded",
                             "You have requested more vCPU capacity than your current limit",
                             BlockScope.REGION)
    assert attempt.block == BlockEntry(cloud="aws", region="us-east-1", reason="QuotaError")
    assert attempt.zone == "us-east-1b" and attempt.code == "VcpuLimitExceeded"


def test_history_rows_render_each_attempt_and_its_block_rule():
    attempts = [
        record_failure(P4D, "us-east-1a", "CapacityError", "InsufficientInstanceCapacity",
                       "no capacity", BlockScope.ZONE),
        record_failure(P4D, "us-east-1b", "TransientError", "RequestLimitExceeded",
                       "throttled", BlockScope.NONE),
        record_failure(AZURE, None, "AuthError", "AuthorizationFailed", "denied",
                       BlockScope.CLOUD),
    ]
    rows = history_rows(attempts)
    assert all(len(row) == len(HISTORY_HEADERS) for row in rows)
    assert rows[0] == ["1", "aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "A100:8", "no",
                       "CapacityError", "InsufficientInstanceCapacity",
                       "aws zone us-east-1a (p4d.24xlarge)", "no capacity"]
    assert rows[1][9] == "nothing (retried)"
    assert rows[2][3] == "-" and rows[2][9] == "cloud azure"


def test_block_descriptions_name_the_scope():
    spot = P4D.model_copy(update={"use_spot": True})
    assert block_entry(spot, "CapacityError", BlockScope.ZONE, None).describe() == (  # type: ignore[union-attr]
        "aws region us-east-1 (p4d.24xlarge spot)")
    assert BlockEntry(cloud="gcp", region="us-central1").describe() == "gcp region us-central1"


def test_importing_the_rules_pulls_in_no_io_layers():
    """Workflows import this module: it must not bring the catalog, providers or Temporal."""
    code = ("import sys, orch.failover_rules; "
            "print(','.join(m for m in sys.modules if m.startswith(('orch', 'temporalio', "
            "'boto3', 'googleapiclient', 'azure'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().split(",")
    assert set(out) <= {"orch", "orch.clouds", "orch.clouds.base", "orch.clouds.errors",
                        "orch.clouds.tiers", "orch.failover_rules"}, out


@workflow.defn(sandboxed=True)
class _BlockInSandbox:
    """Runs the rules inside Temporal's workflow sandbox (which rejects I/O and clocks)."""

    @workflow.run
    async def run(self, attempt: FailoverAttempt) -> Blocklist:
        redo = record_failure(attempt.candidate, attempt.zone, attempt.error_type,
                              attempt.code, attempt.message, BlockScope.ZONE)
        return Blocklist().add(redo.block)


async def test_rules_run_inside_the_temporal_workflow_sandbox(
        time_skipping_env: WorkflowEnvironment):
    attempt = FailoverAttempt(candidate=P4D, zone="us-east-1a", error_type="CapacityError")
    queue = f"rules-{uuid.uuid4()}"
    async with Worker(time_skipping_env.client, task_queue=queue, workflows=[_BlockInSandbox]):
        result = await time_skipping_env.client.execute_workflow(
            _BlockInSandbox.run, attempt, id=f"rules-{uuid.uuid4()}", task_queue=queue)
    assert result.blocks("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", False)
