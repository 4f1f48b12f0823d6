"""A threaded HTTP server on 127.0.0.1 and a free port, for the fakes."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Loopback:
    """``handler`` served from a daemon thread between :meth:`start` and :meth:`stop`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
