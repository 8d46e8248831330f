"""Send a command, then wait for its answer: the one loop every client request that learns
its outcome uses (a start confirmed by the read model, a human-task decision, a migration).

The orchestrator is the authority and answers in the logs and the read model, never to
the sender; so a sender publishes, then looks where the answer will show until it does or
the time is up. What differs between requests is only *where* it looks (``answer``) and
*what wakes it* between looks (``pause``: a row announcement, a poll of the refusals'
topic, a sleep); the order (look first, then wait at most what is left) is the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["await_answer", "send_and_await"]

S = TypeVar("S")
A = TypeVar("A")


def await_answer(
    answer: Callable[[], A | None],
    pause: Callable[[float], object],
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> A | None:
    """``answer()`` once it is not None, or None when ``timeout_s`` passes first.

    It looks first (an answer already there costs no wait), then calls ``pause(left)``
    with the seconds left, which returns when something may have changed or a slice of
    that time has passed, and looks again.
    """
    deadline = clock() + timeout_s
    while True:
        found = answer()
        if found is not None:
            return found
        left = deadline - clock()
        if left <= 0:
            return None
        pause(left)


def send_and_await(
    send: Callable[[], S],
    answer: Callable[[S], A | None],
    pause: Callable[[float], object],
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[S, A | None]:
    """``send()`` once (it returns what was sent, e.g. the message ids), then
    :func:`await_answer` with ``answer(sent)``: what was sent, and the answer or None."""
    sent = send()
    return sent, await_answer(lambda: answer(sent), pause, timeout_s, clock)
