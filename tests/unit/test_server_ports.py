"""The embedded server keeps its port across a crash: a port whose last connections
linger in TIME_WAIT (the server closed them first, as a killed process does) is free."""

from __future__ import annotations

import socket

from orch.server import _ephemeral_low, _free, _free_port


def test_a_port_in_time_wait_after_the_server_died_is_still_free() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server's side closes first: its end goes to TIME_WAIT
    listener.close()
    client.recv(1)  # the client sees the close
    client.close()

    plain = socket.socket()  # what a bind without SO_REUSEADDR says meanwhile
    try:
        plain.bind(("127.0.0.1", port))
        lingering = False
    except OSError:
        lingering = True
    finally:
        plain.close()

    assert lingering, "the kernel let the port go at once: this test shows nothing here"
    assert _free(port)


def test_a_port_something_listens_on_is_not_free() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert not _free(listener.getsockname()[1])


def test_a_chosen_port_is_free_and_below_the_ephemeral_range() -> None:
    """Outgoing connections take their local ports from the ephemeral range: a server port
    from there could be taken while the server restarts (seen in CI: "bind: address
    already in use" when the embedded server came back)."""
    ports = {_free_port() for _ in range(20)}
    assert all(10_000 <= port < _ephemeral_low() and _free(port) for port in ports)
    assert len(ports) > 1  # spread, not the same first free port for every control plane
