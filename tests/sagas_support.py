"""Fixtures and helpers of the saga tests: the booking service as a real process."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.fakes.booking import BookingClient

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def booking_url() -> Iterator[str]:
    """``ops/fakes/booking.py`` on a free port of 127.0.0.1, stopped by PID."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops.fakes.booking", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the booking service did not start within 30 s"
        line = proc.stdout.readline().strip()
        assert line.startswith("booking listening on "), line
        yield line.removeprefix("booking listening on ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def booking(booking_url: str) -> BookingClient:
    client = BookingClient(booking_url)
    client.reset()
    return client


def trip(i: int, declined: bool = False) -> dict:
    card = "4000000000000002" if declined else "4242424242424242"
    return {"trip": f"T{i}", "card": card, "amount": 100.0 + i}
