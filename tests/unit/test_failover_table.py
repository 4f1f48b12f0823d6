"""The failover table the CLI prints with a failed launch: a bounded history still says how
many attempts there were, and numbers them as they happened."""

from __future__ import annotations

from rich.console import Console

from cli.display import failover_table
from orch.clouds.errors import BlockScope
from orch.failover_rules import Candidate, record_failure

EAST = Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a"],
                 instance_type="p4d.24xlarge")


def _printed(older: int) -> str:
    attempts = [record_failure(EAST, "us-east-1a", "TransientError", "RequestLimitExceeded",
                               "slow down", BlockScope.NONE, retries=n).model_dump(mode="json")
                for n in range(3)]
    console = Console(record=True, width=200)
    failover_table(console, attempts, older)
    return console.export_text()


def test_a_bounded_history_says_how_many_attempts_there_were() -> None:
    text = _printed(older=47)
    assert "Failover attempts: 50 in all, the first 47 not shown" in text
    numbers = [line.split()[0] for line in text.splitlines() if "RequestLimitExceeded" in line]
    assert numbers == ["48", "49", "50"]


def test_a_whole_history_has_the_plain_title() -> None:
    text = _printed(older=0)
    assert "Failover attempts" in text and "in all" not in text
    assert [line.split()[0] for line in text.splitlines()
            if "RequestLimitExceeded" in line] == ["1", "2", "3"]


def test_forty_attempts_are_a_table_grouped_by_error() -> None:
    zones = [f"us-east-1{letter}" for letter in "abcdef"]
    attempts = [record_failure(EAST, zones[n % 6], "CapacityError",
                               "InsufficientInstanceCapacity",
                               "We currently do not have sufficient p4d.24xlarge capacity in the "
                               "Availability Zone you requested", BlockScope.ZONE)
                for n in range(36)]
    attempts += [record_failure(EAST, None, "QuotaError", "VcpuLimitExceeded", "limit",
                                BlockScope.REGION)] * 3
    attempts.append(record_failure(EAST, "us-east-1a", "HeartbeatTimeout", "",
                                   "heartbeat timeout: the worker stopped answering during "
                                   "run_instances", BlockScope.NONE))
    console = Console(record=True, width=160)
    failover_table(console, [a.model_dump(mode="json") for a in attempts], older=0)
    lines = [line.strip() for line in console.export_text().splitlines()]

    assert lines[0] == "Failover attempts: 40, grouped by error"
    capacity = next(line for line in lines if line.startswith("CapacityError"))
    assert capacity.split()[:3] == ["CapacityError", "InsufficientInstanceCapacity", "36"]
    assert "aws us-east-1a, us-east-1b, us-east-1c (+3)" in capacity
    assert "6 zones" in capacity and "We currently do not" in capacity
    quota = next(line for line in lines if line.startswith("QuotaError"))
    assert quota.split()[2] == "3" and "aws region us-east-1" in quota
    timeout = next(line for line in lines if line.startswith("HeartbeatTimeout"))
    assert "nothing (retried)" in timeout and "heartbeat timeout: the worker" in timeout
    assert len(lines) == 5  # the title, the headers, one line per error
