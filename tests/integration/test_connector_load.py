"""The connector under load and slow clients (docs/connector.md, "Limits and timeouts"):
a burst of concurrent deliveries all acknowledged, stalled connections closed within the
read timeout, and a 503 whose record still landed retried into exactly one effect."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from connectors.server.service import Connector, create_app
from connectors.webhooks import message_id
from orchestrator.domain.model.errors import UnavailableError
from orchestrator.domain.model.messages import WorkflowStarted
from tests.integration.test_connector import (
    SECRET,
    SOURCE,
    added,
    commands,
    deliver,
    request,
    requested,
    signals_received,
    start_connector,
    waiting_for_documents,
)
from tests.support import histories, wait_until

#: The read timeout the slow-client tests run the connector with (KEEL_CONNECTOR_READ_TIMEOUT_S).
READ_TIMEOUT_S = 2.0


def test_150_concurrent_distinct_deliveries_are_all_accepted(settings, services):
    _, url = start_connector(services)
    # starts: the connector accepts them without looking at the read model (a signal for a run
    # that does not exist is answered 404 at once)
    events = [requested(f"evt-load-{i}", f"review-load-{i}", "receipt") for i in range(150)]
    barrier = threading.Barrier(150)

    def send(event):
        barrier.wait(30)  # all 150 requests in flight together
        return deliver(url, event)

    with ThreadPoolExecutor(150) as pool:
        answers = list(pool.map(send, events))
    refused = [(status, body) for status, body in answers if status != 202]
    assert refused == []
    assert {body["event_id"] for _, body in answers} == {e["id"] for e in events}
    written = Counter(env.message_id for env in commands(settings))
    assert written == Counter({message_id(SOURCE, e["id"]): 1 for e in events})


def _open_stalled(host: str, port: int, count: int, partial: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(partial)
        s.setblocking(False)
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket) -> bool:
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_300_connections_stalled_in_their_headers_are_closed_within_the_read_timeout(
    settings, services
):
    _, url = start_connector(services, KEEL_CONNECTOR_READ_TIMEOUT_S=str(READ_TIMEOUT_S))
    host, port = url.removeprefix("http://").split(":")
    partial = f"POST /webhooks/{SOURCE} HTTP/1.1\r\nHost: x\r\nContent-Type: app".encode()
    opened = time.monotonic()
    socks = _open_stalled(host, int(port), 300, partial)
    try:
        # a client that trickles a byte of its headers every 0.3 s is cut off all the same
        trickler = _open_stalled(host, int(port), 1, partial)[0]
        closed_at: dict[int, float] = {}
        deadline = opened + READ_TIMEOUT_S + 3
        while len(closed_at) < len(socks) + 1 and time.monotonic() < deadline:
            for i, s in enumerate([*socks, trickler]):
                if i not in closed_at and _closed_by_server(s):
                    closed_at[i] = time.monotonic() - opened
            if 300 not in closed_at:
                try:
                    trickler.send(b"l")
                except OSError:
                    closed_at.setdefault(300, time.monotonic() - opened)
            time.sleep(0.3)
        assert len(closed_at) == 301, f"{301 - len(closed_at)} connections still open"
        # none before the bound (each was open at least READ_TIMEOUT_S from its own connect)
        assert min(closed_at.values()) >= READ_TIMEOUT_S - 0.5
        assert max(closed_at.values()) <= READ_TIMEOUT_S + 3
    finally:
        for s in socks:
            s.close()
    # the connector still answers after the storm
    assert request("GET", f"{url}/healthz")[0] == 200


def test_a_body_that_stalls_gets_408_and_a_closed_connection(settings, services):
    _, url = start_connector(services, KEEL_CONNECTOR_READ_TIMEOUT_S=str(READ_TIMEOUT_S))
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            f"POST /webhooks/{SOURCE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            'Content-Length: 100\r\n\r\n{"id": '.encode()
        )
        sent = time.monotonic()
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
        elapsed = time.monotonic() - sent
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 408 Request Timeout"
    assert b"Content-Type: application/json; charset=utf-8" in head
    assert json.loads(body) == {
        "error": f"the body did not arrive within {READ_TIMEOUT_S:g} s of the headers"
    }
    # the answer after READ_TIMEOUT_S, the close at most READ_TIMEOUT_S after it
    assert READ_TIMEOUT_S - 0.5 <= elapsed <= 2 * READ_TIMEOUT_S + 2
    assert commands(settings) == []


# ---------------------------------------------------------------------------- 503, then retry
class _InProcessConnector:
    """The connector's aiohttp app in a thread of this test, so a test can make Kafka's
    acknowledgement go missing after the record was written (a lost ack)."""

    def __init__(self, settings) -> None:
        from orchestrator.examples.webhook_app import app

        self.connector = Connector(
            settings, app, secrets={"KEEL_WEBHOOK_DOCUMENTS_SECRETS": SECRET}
        )
        self.loop = asyncio.new_event_loop()
        self.lose_acks_of: set[str] = set()  # message ids whose first ack is "lost"
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.url = self._call(self._start())

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def _start(self) -> str:
        self.runner = web.AppRunner(create_app(self.connector))
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        producer = self.connector.producer
        assert producer is not None
        real_send = producer.send

        async def send_and_lose_the_ack(topic, key, value, headers):
            await real_send(topic, key, value, headers)  # the record is written ...
            mid = self.connector.codec.decode(value).message_id
            if mid in self.lose_acks_of:
                self.lose_acks_of.discard(mid)  # ... but the connector never hears of it
                raise UnavailableError(
                    f"Kafka did not acknowledge the command within {producer.ack_timeout_s:g} s"
                )

        producer.send = send_and_lose_the_ack  # type: ignore[method-assign]
        host, port = self.runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def test_a_503_whose_record_landed_and_its_retry_with_the_same_event_id_apply_once(
    settings, services, client
):
    services.start("orchestrator")
    services.start("worker")
    edge = _InProcessConnector(settings)
    try:
        url, wf = edge.url, "review-lost-ack"
        start, signal = requested("evt-s", wf, "invoice 9"), added("evt-a", wf, "receipt")
        lost = "Kafka did not acknowledge the command within 10 s"
        for event, round_no in ((start, 1), (signal, 2)):
            edge.lose_acks_of.add(message_id(SOURCE, event["id"]))
            assert deliver(url, event) == (503, {"error": lost})
            status, body = deliver(url, event)  # the sender's retry, same event id
            assert (status, body["status"]) == (202, "accepted")
            assert deliver(url, event)[0] == 200
            wait_until(
                lambda n=round_no: waiting_for_documents(client, wf, n), 60, f"wait {round_no}"
            )
    finally:
        edge.close()
    # each event's command is on the topic twice (the 503's and the retry's), one message id
    mids = {message_id(SOURCE, "evt-s"), message_id(SOURCE, "evt-a")}
    written = Counter(env.message_id for env in commands(settings) if env.message_id in mids)
    assert written == Counter(dict.fromkeys(mids, 2))
    # and each applied once: one run, one signal
    events = histories(settings)[wf]
    assert sum(isinstance(e.payload, WorkflowStarted) for e in events) == 1
    assert signals_received(settings, wf) == [{"document": "receipt"}]
