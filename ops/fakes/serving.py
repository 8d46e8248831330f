"""How every fake service runs: as a process on loopback that announces its address.

A fake prints one line, ``<name> listening on http://HOST:PORT``, once it accepts
connections, and stops on SIGTERM/SIGINT. :func:`running` starts one as a real process on
a free port and stops it by its PID, for tests, the demo and the history recorder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import select
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

__all__ = ["ControlClient", "main", "running", "serve"]


async def serve(app: web.Application, name: str, host: str, port: int) -> None:
    """Run ``app`` until SIGTERM/SIGINT; announce the bound address on stdout."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    print(f"{name} listening on http://{bound_host}:{bound_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(
    create_app: Callable[[], web.Application],
    name: str,
    description: str,
    default_port: int,
    argv: list[str] | None = None,
) -> int:
    """The command line of a fake: ``--host`` (default 127.0.0.1) and ``--port`` (0: any)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=default_port, help=f"port (default {default_port}; 0 = any)"
    )
    args = parser.parse_args(argv)
    asyncio.run(serve(create_app(), name, args.host, args.port))
    return 0


@contextmanager
def running(module: str, name: str, timeout_s: float = 30.0) -> Iterator[str]:
    """The fake ``python -m <module>`` on a free loopback port; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    banner = f"{name} listening on "
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        line = proc.stdout.readline().strip() if ready else ""
        if not line.startswith(banner):
            raise RuntimeError(f"the fake {name} did not start: {line!r}")
        yield line.removeprefix(banner)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class ControlClient:
    """A synchronous stdlib client of a fake's JSON control routes (books, fault switches)."""

    #: How the fake names itself in errors.
    name = "fake"

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            raise RuntimeError(
                f"{self.name} {method} {path} answered {err.code}: {err.read()!r}"
            ) from None


class BooksClient(ControlClient):
    """The client of a fake that keeps ``/books`` and resets with ``/reset``."""

    def books(self) -> dict[str, Any]:
        return self._call("GET", "/books")  # type: ignore[no-any-return]

    def set_faults(self, **switches: Any) -> dict[str, Any]:
        return self._call("POST", "/faults", switches)  # type: ignore[no-any-return]

    def reset(self) -> None:
        self._call("POST", "/reset", {})
