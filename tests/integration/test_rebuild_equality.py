"""Every read model is a pure function of ``keel.events``, however its events were batched.

A mixed workload (activities, signals, a timer, human tasks decided and cancelled,
compensations, a cross-workflow saga, LLM nodes, a dead-lettered activity redriven, a
recorded migration, a run that continues as new) runs on one orchestrator whose
projector (a child process fed through the pipe, the default) writes the read model as
transactions commit. Then every read-model key of the test's prefix is snapshotted, the
read model is rebuilt from the topic (what ``keel projections rebuild`` calls, in batches
of 2,000 records) and snapshotted again: the two must be equal. The same events are then
folded again into a prefix of their own in other batchings (one event per write; random
batch sizes; small batches with each run's decided state handed over, as the
orchestrator's in-process hand-off does), and each must equal the rebuild too.

Excluded from the comparison, by key: ``rm:health:projector:<instance>`` (a live
projector's heartbeat: its counters and clock, expiring after 30 s; a rebuild writes
none) and ``rm:rebuild:lock`` / ``rm:rebuild:epoch`` (a rebuild's coordination: a random
token per rebuild). Nothing else, and no field of any row, is excluded.
"""

from __future__ import annotations

import random
import secrets
import time
from typing import Any

import pytest
from pydantic import SecretStr

from ops.fakes import serving
from ops.fakes.booking import BookingClient
from ops.fakes.ledger import LedgerClient
from ops.fakes.openai_server import running as openai_fake
from ops.record_histories import Recorder, _invoice, _trip
from orchestrator.application.app import decider_of
from orchestrator.client.client import KeelClient
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.projector.placement import ProjectorPlacement
from orchestrator.projector.projector import Projector, RedisReadModelStore
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.integration import rebuild_app
from tests.integration.test_llm_nodes import fields
from tests.support import histories, read_topic, wait_until

APP = "tests.integration.rebuild_app:app"
WAIT_S = 60.0

#: Read-model keys that are not folded from events (see the module doc).
EPHEMERAL = ("health:projector:", "rebuild:lock", "rebuild:epoch")


def snapshot(r: Any, prefix: str) -> dict[str, Any]:
    """Every read-model key of ``prefix`` but the ephemeral ones, by its suffix, with its
    value: hashes as dicts, lists in order, zsets with scores, sets sorted."""
    base = Keyspace(prefix).read_model
    out: dict[str, Any] = {}
    for key in r.scan_iter(match=f"{base}*", count=1000):
        name = key[len(base) :]
        if name.startswith(EPHEMERAL):
            continue
        kind = r.type(key)
        if kind == "hash":
            out[name] = r.hgetall(key)
        elif kind == "list":
            out[name] = r.lrange(key, 0, -1)
        elif kind == "zset":
            out[name] = r.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            out[name] = sorted(r.smembers(key))
        elif kind == "string":
            out[name] = r.get(key)
        else:
            raise AssertionError(f"{key}: a read-model key of type {kind}")
    return out


def differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What differs, one line per key (and per field of a hash)."""
    lines = [f"only in the rebuild: {k}" for k in sorted(set(want) - set(got))]
    lines += [f"only live: {k}" for k in sorted(set(got) - set(want))]
    for k in sorted(set(want) & set(got)):
        a, b = want[k], got[k]
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for f in sorted(set(a) | set(b)):
                if a.get(f) != b.get(f):
                    lines.append(f"{k} {f}: rebuilt {a.get(f)!r} != {b.get(f)!r}")
        else:
            lines.append(f"{k}: rebuilt {a!r} != {b!r}")
    return lines


def run_workload(settings: Any, services: Any, placement: ProjectorPlacement) -> list[str]:
    """Drive every kind of run to where it rests (the orchestrator's projector where
    ``placement`` says); returns the workflow ids."""
    secret = secrets.token_hex(32)
    tokens = TaskTokens(secret.encode(), "the test")
    with (
        serving.running("ops.fakes.ledger", "ledger") as ledger_url,
        serving.running("ops.fakes.booking", "booking") as booking_url,
        openai_fake() as fake,
    ):
        services.env.update(
            KEEL_TASK_TOKEN_SECRET=secret,
            KEEL_LEDGER_URL=ledger_url,
            KEEL_BOOKING_URL=booking_url,
            KEEL_LLM_BASE_URL=fake.api_root,
            KEEL_LLM_API_KEY="sk-keel-test-rebuild-equality-0001",
        )
        fake.reset()
        fake.script(
            [
                {"match": "doc-big", "json": fields(total=4200.0)},
                {"match": "doc-unsure", "json": fields(confidence=0.5)},
            ]
        )
        services.start("orchestrator", "--app", APP, "--projector-in", placement)
        services.start("worker", "--app", APP)
        # the client decides tasks under the deployment's key, as the connector does
        keyed = settings.model_copy(update={"task_token_secret": SecretStr(secret)})
        client = KeelClient(keyed, rebuild_app.app)
        rec = Recorder(client, LedgerClient(ledger_url), tokens, BookingClient(booking_url))
        rec.ledger.reset()
        rec.booking.reset()  # type: ignore[union-attr]
        try:
            return _drive(client, rec)
        finally:
            client.close()


def _drive(client: KeelClient, rec: Recorder) -> list[str]:
    finished: dict[str, str] = {}

    def start(wf: str, name: str, inp: Any, status: str, version: int | None = None) -> None:
        client.start(name, inp, wf, version=version)
        finished[wf] = status

    start("checks", "parallel_checks", {"n": 3}, "completed")
    start("steps", "three_step", {"n": 2}, "completed")
    start("timer", "timer_demo", {"seconds": 0.5}, "completed")
    start("review-fraud", "document_review", {"document": "fraud"}, "completed")
    start("review", "document_review", {"document": "passport"}, "completed")
    start("invoice", "invoice_posting", _invoice("A-1", 10), "completed")
    start("trip", "travel_booking", _trip("T1", "4242424242424242"), "completed")
    start("trip-declined", "travel_booking", _trip("T2", "4000000000000002"), "compensated")
    start("llm-big", "invoice_extraction", {"document": "doc-big"}, "completed", version=1)
    start("llm-unsure", "invoice_extraction", {"document": "doc-unsure"}, "completed", 1)
    start("ship-A", "shipment", {"order_id": "A"}, "cancelled")
    start("pay-A", "payment", {"order_id": "A", "amount": 500}, "failed")
    start("paid", "payment_approval", _payment("P-1"), "completed")
    start("withdrawn", "payment_approval", _payment("P-2"), "cancelled")
    start("ticket", "ticket", {"ticket": 101}, "completed", version=1)
    start("counter", "counter", {"total": 0}, "waiting")

    for doc in ("payslip", "contract"):
        rec.wait_status("review", "waiting")
        client.signal("review", "documents_added", {"document": doc})
        time.sleep(0.3)
    rec.decide(rec.open_task("paid"), "fin-1", ["finance-approver"], "approve")
    rec.open_task("withdrawn")
    client.cancel("withdrawn", "the request was withdrawn")
    for n in range(1, 5):  # the third continues the run as new
        rec.wait_status("counter", "waiting")
        client.signal("counter", "add", {"n": n})
        time.sleep(0.2)
    rec.wait_status("ticket", "waiting")
    [moved] = client.migrations.send(["ticket"], 2, "ana", "approval gets a timeout", WAIT_S)
    assert moved.as_dict()["outcome"] == "migrated", moved.as_dict()
    client.signal("ticket", "approve", {})
    finished.update(dict.fromkeys(rec.dead_letter(), "completed"))  # down, DLQ, redrive

    for wf, status in finished.items():
        if status == "waiting":
            rec.wait_status(wf, status)
        else:
            rec.wait(wf, status, past_attention=True)
    return sorted(finished)


def _payment(payment_id: str) -> dict[str, Any]:
    return {"payment_id": payment_id, "account": "acc-9", "amount": 12.5, "requested_by": "sam"}


def caught_up(r: Any, prefix: str, last_seq: dict[str, int]) -> bool:
    ks = Keyspace(prefix)
    pipe = r.pipeline(transaction=False)
    for wf in last_seq:
        pipe.hget(ks.workflow(wf), "seq")
    return all(int(s or 0) == last_seq[wf] for wf, s in zip(last_seq, pipe.execute(), strict=True))


def refold(settings: Any, records: list[Any], prefix: str, batches: Any) -> dict[str, Any]:
    """Fold ``records`` into the read model of ``prefix`` in the given batching."""
    other = settings.model_copy(update={"topic_prefix": prefix})
    definitions = rebuild_app.app.definitions  # as a projector's store gets its app's
    store = RedisReadModelStore(store_client(settings), prefix, settings.redis, definitions)
    projector = Projector(other, rebuild_app.app, adapters=(None, store))  # type: ignore[arg-type]
    store.clear()
    try:
        batches(projector, records)
        return snapshot(store.r, prefix)
    finally:
        store.clear()


def store_client(settings: Any) -> Any:
    from orchestrator.io.redis.client_factory import RedisUse, redis_client

    return redis_client(settings.redis, RedisUse.READ_MODEL)


def one_by_one(projector: Projector, records: list[Any]) -> None:
    for rec in records:
        projector.apply([rec])


def random_sizes(projector: Projector, records: list[Any]) -> None:
    rnd = random.Random(29)
    at = 0
    while at < len(records):
        n = rnd.choice((1, 2, 3, 5, 8, 13, 40))
        projector.apply(records[at : at + n])
        at += n


def handed_over(projector: Projector, records: list[Any]) -> None:
    """Batches of 4 records with each run's state after its last event there, as the
    orchestrator hands them to an in-process projector (``CommittedEvent.state``)."""
    decider = decider_of(rebuild_app.app)
    states: dict[str, Any] = {}
    for at in range(0, len(records), 4):
        by_wf = projector._decode(records[at : at + 4])
        for wf, events in by_wf.items():
            states[wf] = decider.fold(events, states.get(wf))
        decided = {wf: states[wf] for wf in by_wf}
        projector._apply_envelopes(by_wf, guarded=True, decided=decided)


@pytest.mark.parametrize("placement", list(ProjectorPlacement))
def test_the_read_model_equals_its_rebuild_however_events_were_batched(
    settings, services, placement
):
    """The child is fed record values through the pipe; the thread is handed the decoded
    envelopes and each run's decided state (folded by the orchestrator, not by it)."""
    began = time.monotonic()
    ids = run_workload(settings, services, placement)
    events = histories(settings)
    assert set(ids) <= set(events), sorted(set(ids) - set(events))
    last_seq = {wf: evs[-1].seq for wf, evs in events.items()}
    r = store_client(settings)
    wait_until(lambda: caught_up(r, settings.topic_prefix, last_seq), 30, "the live projector")
    services.stop_all()  # nothing writes the read model from here on
    live = snapshot(r, settings.topic_prefix)

    total, _ = Projector(settings, rebuild_app.app).rebuild()
    assert total == sum(len(evs) for evs in events.values())
    rebuilt = snapshot(r, settings.topic_prefix)
    assert rebuilt, "the rebuild wrote nothing"
    assert not differences(rebuilt, live), "\n".join(differences(rebuilt, live))

    records = read_topic(settings.kafka_servers, settings.topic("events"), settings.partitions)
    for name, batches in (
        ("one", one_by_one),
        ("random", random_sizes),
        ("handed", handed_over),
    ):
        got = refold(settings, records, f"{settings.topic_prefix}{name}", batches)
        diff = differences(rebuilt, got)
        assert not diff, f"{name}:\n" + "\n".join(diff)
    print(f"rebuild equality: {len(records)} events, {time.monotonic() - began:.1f}s")
