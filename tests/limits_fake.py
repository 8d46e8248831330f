"""A fake rate-limited service for the per-type limit tests: its own books of arrivals.

Both the integration test across workers and the fault test with an orchestrator SIGKILL
read these books, not Keel's, to judge ``RateLimit`` (docs/limits.md "Per-type limits").
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class _Server(ThreadingHTTPServer):
    #: A burst of calls must not wait for a SYN retry (the default backlog is 5): a call
    #: delayed by a second would reach the service a second after its start.
    request_queue_size = 128


class FakeService:
    """``POST /call`` with ``{"n", "hold_ms"}``: records the arrival, holds, answers."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, int]] = []
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.calls.append((time.time(), body["n"]))
                    fake.running += 1
                    fake.peak = max(fake.peak, fake.running)
                time.sleep(body.get("hold_ms", 0) / 1000)
                with fake.lock:
                    fake.running -= 1
                out = json.dumps({"n": body["n"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def most_in_any_window(self, seconds: float) -> int:
        times = sorted(t for t, _ in self.calls)
        return max((sum(1 for u in times if t <= u < t + seconds) for t in times), default=0)

    def repeated(self) -> dict[int, int]:
        """Items the service was called for more than once, with their call counts."""
        return {n: k for n, k in Counter(n for _, n in self.calls).items() if k > 1}


@pytest.fixture
def fake() -> Iterator[FakeService]:
    service = FakeService()
    yield service
    service.server.shutdown()
