"""An unknown outcome of a step without a status query is never retried blindly
(issue 29, item 2), on the real broker with a real SIGKILL.

The worker is killed while the ledger holds its answer to a posting it already
committed. The restarted worker gets the task again, finds its own attempt ``pending``
in the effect store and reports the outcome unknown. ``posting_without_query`` has no
status query to ask, so the run needs an operator: no attempt 2 of the write goes out
(before the fix it did, and a ledger that does not deduplicate booked the posting
twice). ``posting_retry_unknown`` opts in with ``on_unknown="retry"``: the same key goes
again and the deduplicating ledger answers with the posting it already has.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.client.client import KeelClient
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityFailed,
    ActivityResolved,
    ActivityScheduled,
    TimerScheduled,
    WorkflowNeedsAttention,
)
from tests.integration.test_durable_core import keel
from tests.integration.unknown_app import APP
from tests.integration.unknown_app import app as unknown_app
from tests.support import assert_sound_history, histories, wait_until

POST = "run#1/post"
#: What the restarted worker reports for the attempt the killed one left pending.
NEVER_REPORTED = "attempt 1 was dispatched before and never reported"


@pytest.fixture
def unknown_client(settings):
    c = KeelClient(settings, unknown_app)
    yield c
    c.close()


def _kill_mid_call(services, client, ledger, name: str, wf: str) -> str:
    """Start ``name`` as ``wf``, SIGKILL the worker while the ledger holds back its
    answer to the committed posting, start another worker; return the posting's key."""
    worker = services.start("worker", "--app", APP)
    client.start(name, {"invoice_id": f"INV-{wf}", "account": "ACME", "amount": 42.0}, wf)
    # The ledger commits, then answers 10 s late: the worker is mid-call from here on
    # (its own client gives up only after 2 s, so the kill lands well before).
    book = wait_until(lambda: ledger.ledger()["effects"], 30, "the posting", interval_s=0.02)
    services.kill(worker)
    (key,) = book
    services.start("worker", "--app", APP)
    return key


def _scheduled(events: list) -> list[ActivityScheduled]:
    return [
        e.payload
        for e in events
        if isinstance(e.payload, ActivityScheduled) and e.payload.activity_id == POST
    ]


def _unknown_failures(events: list) -> list[ActivityFailed]:
    return [
        e.payload
        for e in events
        if isinstance(e.payload, ActivityFailed) and e.payload.failure_class == "unknown"
    ]


def test_an_unknown_outcome_without_a_status_query_needs_an_operator(
    settings, services, unknown_client, ledger_url, ledger
):
    # Dedupe off: a blind second POST of the key would be a second posting in the book.
    ledger.set_faults(dedupe=False, delay_s=10, delay_count=1)
    services.env["KEEL_LEDGER_URL"] = ledger_url
    services.start("orchestrator", "--app", APP)
    wf = "no-query-1"
    key = _kill_mid_call(services, unknown_client, ledger, "posting_without_query", wf)

    def settled() -> str | None:  # stopped for an operator, or (before the fix) ended
        status = unknown_client.projection.status(wf)
        return status if status in ("needs_attention", "completed", "failed") else None

    status = wait_until(settled, 60, "the run to stop for an operator")
    events = histories(settings)[wf]
    assert (status, [p.attempt for p in _scheduled(events)], ledger.ledger()["effects"]) == (
        "needs_attention",
        [1],
        {key: 1},
    ), "no blind attempt 2 of the write, one posting in the ledger's book"
    unknown = _unknown_failures(events)
    assert [(f.attempt, f.error_type) for f in unknown] == [(1, "OutcomeUnknownError")]
    assert unknown[0].message.startswith(NEVER_REPORTED), unknown[0].message
    attention = [e.payload for e in events if isinstance(e.payload, WorkflowNeedsAttention)]
    assert [a.activity_id for a in attention] == [POST]
    assert f"key '{key}'" in attention[0].reason, attention[0].reason
    assert "no status query" in attention[0].reason
    assert not [e for e in events if isinstance(e.payload, TimerScheduled)
                and e.payload.purpose.startswith("retry:")], "no retry armed"  # fmt: skip
    assert ledger.ledger()["calls"] == {key: 1}

    # The operator looks the key up in the ledger's own books and settles the step.
    posting = ledger.posting(key)
    assert posting is not None
    found = json.dumps({"posting_id": posting["posting_id"], "key": key})
    resolved = keel(settings, "workflow", "resolve", wf, POST, "--found", found, "--app", APP)
    assert resolved.returncode == 0, resolved.stderr
    done = unknown_client.wait(wf, 60)
    assert done.status == "completed"
    assert done.output == {"posting_id": posting["posting_id"]}

    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    assert check_history(events) == []
    resolutions = [e.payload for e in events if isinstance(e.payload, ActivityResolved)]
    assert [(r.activity_id, r.resolution) for r in resolutions] == [(POST, "found")]
    completed = [e.payload for e in events if isinstance(e.payload, ActivityCompleted)]
    assert [(c.activity_id, c.attempt) for c in completed] == [(POST, 1)]
    assert [p.attempt for p in _scheduled(events)] == [1]
    assert ledger.ledger()["effects"] == {key: 1}, "exactly one posting, however settled"
    assert ledger.ledger()["calls"] == {key: 1}, "the write was never repeated"


def test_on_unknown_retry_sends_the_same_key_again_to_a_deduplicating_ledger(
    settings, services, unknown_client, ledger_url, ledger
):
    ledger.set_faults(delay_s=10, delay_count=1)  # dedupe on: that is what the opt-in says
    services.env["KEEL_LEDGER_URL"] = ledger_url
    services.start("orchestrator", "--app", APP)
    wf = "retry-unknown-1"
    key = _kill_mid_call(services, unknown_client, ledger, "posting_retry_unknown", wf)

    done = unknown_client.wait(wf, 60)
    assert done.status == "completed"
    posting = ledger.posting(key)
    assert posting is not None
    assert done.output == {"posting_id": posting["posting_id"]}
    events = histories(settings)[wf]
    assert_sound_history(wf, events)
    assert check_history(events) == []
    unknown = _unknown_failures(events)
    assert [(f.attempt, f.error_type) for f in unknown] == [(1, "OutcomeUnknownError")]
    assert unknown[0].message.startswith(NEVER_REPORTED), unknown[0].message
    assert not [e for e in events if isinstance(e.payload, WorkflowNeedsAttention)]
    posts = _scheduled(events)
    assert [p.attempt for p in posts] == [1, 2]
    assert {p.idempotency_key for p in posts} == {key}, "the retry keeps the key"
    assert ledger.ledger()["calls"] == {key: 2}
    assert ledger.ledger()["effects"] == {key: 1}, "the ledger deduplicated the retry"
