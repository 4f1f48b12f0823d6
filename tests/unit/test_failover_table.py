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
