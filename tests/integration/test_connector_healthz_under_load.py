"""The real `keel connector` answers its own /healthz within a second while 20 unauthenticated
UI cancels with 8,000-character run ids are refused (issue 44, item 6: /healthz took 11.6 s,
each refusal's log line redacted in quadratic time on the event loop).

The process is the real one (its JSON logging and redaction included, where the stall was),
on the test broker and Redis its /healthz asks."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from tests.integration.test_connector import start_connector
from tests.support import wait_until

RUN_ID = "w" * 8_000
REQUESTS = 20


async def _healthz_under_refusals(url: str) -> tuple[float, int, list[int]]:
    """(seconds /healthz took, its status, the statuses of the cancels) with the cancels
    in flight while /healthz is asked."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.get(f"{url}/healthz") as warm:  # Kafka and Redis connected once
            assert warm.status == 200, await warm.text()

        async def cancel() -> int:
            async with http.post(f"{url}/ui/runs/{RUN_ID}/cancel", data={"csrf": "x"}) as r:
                await r.read()
                return r.status

        posts = [asyncio.create_task(cancel()) for _ in range(REQUESTS)]
        await asyncio.sleep(0.05)  # the cancels are on the wire
        began = time.perf_counter()
        async with http.get(f"{url}/healthz") as health:
            await health.read()
            waited = time.perf_counter() - began
            status = health.status
        return waited, status, list(await asyncio.gather(*posts))


def test_healthz_answers_within_a_second_under_20_unauthenticated_long_id_cancels(services):
    proc, url = start_connector(services)
    waited, status, refused = asyncio.run(_healthz_under_refusals(url))
    assert refused == [403] * REQUESTS  # no session: refused, nothing sent
    assert status == 200
    assert waited < 1.0, f"/healthz took {waited:.2f} s under the load"

    def logged() -> list[str] | None:
        lines = [
            line
            for line in proc.log_path.read_text().splitlines()
            if "(8,016 characters): 403: sign in first" in line
        ]
        return lines if len(lines) == REQUESTS else None

    # each refusal was logged, its path clipped (the line that once stalled the loop)
    lines = wait_until(logged, 10, "the 20 refusals in the connector's log", 0.1)
    assert all(RUN_ID not in line and "w" * 191 + "..." in line for line in lines)
