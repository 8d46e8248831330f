"""One outcome per attempt, on the real broker (issue 29, item 5).

With the worker down, ``post`` (start-to-close 5 s from its dispatch, status query
``ledger_posting_status``) times out before it ever ran: its outcome is unknown, so the
orchestrator schedules the status query. When the worker comes back it runs the tasks
of each workflow in log order: the posting first (it finds no claim, so it posts), then
the query (which finds the posting). The posting's report is late: its attempt already
timed out and the query settles it. Before the fix that late ``CompleteActivity`` was
recorded as ``ActivityCompleted(run#1/post, 1)`` and the query's "found" answer recorded
a second one for the same attempt.
"""

from __future__ import annotations

from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    ActivityTimedOut,
)
from tests.support import assert_sound_history, histories, wait_until

#: Several runs, so the late report meets the query's answer in more than one interleaving.
RUNS = 3
POST = "run#1/post"
QUERY = f"{POST}/query/1"


def _timed_out_and_queried(events: list) -> bool:
    timed_out = any(
        isinstance(e.payload, ActivityTimedOut)
        and (e.payload.activity_id, e.payload.attempt) == (POST, 1)
        for e in events
    )
    queried = any(
        isinstance(e.payload, ActivityScheduled) and e.payload.activity_id == QUERY for e in events
    )
    return timed_out and queried


def test_a_late_report_of_a_timed_out_attempt_is_not_a_second_completion(
    settings, services, client, ledger_url, ledger
):
    # Dedupe off: a second POST of one key would show in the ledger's own book too.
    ledger.set_faults(dedupe=False)
    services.env["KEEL_LEDGER_URL"] = ledger_url
    services.start("orchestrator")  # no worker yet: nothing runs the posting
    wfs = [
        client.start(
            "invoice_posting",
            {"invoice_id": f"LATE-{i}", "account": "ACME", "amount": 10.0 + i},
            f"late-{i}",
        ).workflow_id
        for i in range(RUNS)
    ]

    def all_timed_out_and_queried() -> bool:
        by_wf = histories(settings)
        return all(_timed_out_and_queried(by_wf.get(wf, [])) for wf in wfs)

    wait_until(all_timed_out_and_queried, 40, "start-to-close timeouts and status queries")
    assert ledger.ledger()["calls"] == {}, "no worker ran: nothing reached the ledger"

    services.start("worker")
    for wf in wfs:
        assert client.wait(wf, 60).status == "completed"

    by_wf = histories(settings)
    book = ledger.ledger()
    for wf in wfs:
        events = by_wf[wf]
        posts = [
            e.payload
            for e in events
            if isinstance(e.payload, ActivityScheduled) and e.payload.activity_id == POST
        ]
        assert [p.attempt for p in posts] == [1], "the write was never dispatched again"
        completions = [
            e.payload
            for e in events
            if isinstance(e.payload, ActivityCompleted)
            and (e.payload.activity_id, e.payload.attempt) == (POST, 1)
        ]
        assert len(completions) == 1, (
            f"{wf}: {len(completions)} ActivityCompleted of ({POST!r}, 1) in "
            + ", ".join(f"{e.type}({getattr(e.payload, 'activity_id', '')})" for e in events)
        )
        assert_sound_history(wf, events)
        assert check_history(events) == []
        key = posts[0].idempotency_key
        assert book["effects"][key] == 1, f"{wf}: the ledger holds one posting for {key}"
        posting = ledger.posting(key)
        assert posting is not None
        assert client.wait(wf, 5).output == {"posting_id": posting["posting_id"]}
    assert book["total_effects"] == RUNS
