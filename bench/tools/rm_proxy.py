"""A counting proxy in front of a ResourceManager's web address: forwards every request as it is and
counts what each endpoint was asked and answered, to measure what clients cost a real
ResourceManager."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import requests


def endpoint(path: str) -> str:
    """The REST endpoint a path asks (``apps``, ``app``, ``nodes``, ``scheduler``, ...)."""
    rest = urlsplit(path).path.removeprefix("/ws/v1/cluster")
    if rest.startswith("/apps/"):
        return "app"
    return rest.strip("/").split("/")[0] or "other"


class CountingProxy:
    def __init__(self, target: str):
        self.target = target.rstrip("/")
        self.counts: list[tuple[float, str, int]] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        proxy = self
        session = requests.Session()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                r = session.request(self.command, proxy.target + self.path, data=body, headers=headers,
                                    allow_redirects=False, timeout=60)
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)
                with proxy.lock:
                    proxy.counts.append((time.monotonic(), endpoint(self.path), len(r.content)))

            do_GET = do_PUT = do_POST = do_DELETE = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def load(self, since: float, until: float) -> dict[str, Any]:
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
