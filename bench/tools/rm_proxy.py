"""A counting proxy in front of a ResourceManager's web address: forwards every request as it is and
counts what each endpoint was asked and answered, to measure what clients cost a real
ResourceManager."""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import requests
from counting import Counted


def endpoint(path: str) -> str:
    """The REST endpoint a path asks (``apps``, ``app``, ``nodes``, ``scheduler``, ...)."""
    rest = urlsplit(path).path.removeprefix("/ws/v1/cluster")
    if rest.startswith("/apps/"):
        return "app"
    return rest.strip("/").split("/")[0] or "other"


class CountingProxy(Counted):
    def __init__(self, target: str):
        super().__init__()
        self.target = target.rstrip("/")

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
                proxy.count(endpoint(self.path), len(r.content))

            do_GET = do_PUT = do_POST = do_DELETE = _forward

            def log_message(self, *args: Any) -> None:
                pass

        return self.serve(Handler)
