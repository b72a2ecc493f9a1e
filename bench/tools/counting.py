"""What the benchmark's stand-ins for a ResourceManager share: a threaded HTTP server on a free
port, and the count of what it answered, per endpoint, over a window of time."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Counted:
    """An HTTP server of ``handler`` (a request handler class that calls :meth:`count`) and the
    requests it answered."""

    def __init__(self) -> None:
        self.counts: list[tuple[float, str, int]] = []  # (when, endpoint, bytes)
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def count(self, endpoint: str, size: int) -> None:
        with self.lock:
            self.counts.append((time.monotonic(), endpoint, size))

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> str:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def load(self, since: float, until: float) -> dict[str, Any]:
        """Requests and bytes a second between two monotonic times, in all and per endpoint."""
        with self.lock:
            seen = [(e, b) for t, e, b in self.counts if since <= t < until]
        span = max(1e-9, until - since)
        per: dict[str, list[int]] = {}
        for e, b in seen:
            per.setdefault(e, [0, 0])
            per[e][0] += 1
            per[e][1] += b
        return {"requests_per_s": round(len(seen) / span, 3), "bytes_per_s": round(sum(b for _, b in seen) / span),
                "by_endpoint": {e: {"requests_per_s": round(n / span, 3), "bytes_per_s": round(b / span)}
                                for e, (n, b) in sorted(per.items())}}
