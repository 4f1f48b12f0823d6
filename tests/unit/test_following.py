"""Which server errors mean "the control plane is away" to a command following an Update."""

from __future__ import annotations

from temporalio.service import RPCError, RPCStatusCode

from orch.client.following import unreachable


def test_a_refused_or_cut_connection_is_the_server_away() -> None:
    assert unreachable(RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b""))
    assert unreachable(RPCError("deadline", RPCStatusCode.DEADLINE_EXCEEDED, b""))
    # The server killed mid-call (found by the chaos harness, seed 13 run 5).
    assert unreachable(RPCError("transport error", RPCStatusCode.UNKNOWN, b""))


def test_an_answer_from_the_server_is_not() -> None:
    assert not unreachable(RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""))
    assert not unreachable(RPCError("boom", RPCStatusCode.UNKNOWN, b""))
