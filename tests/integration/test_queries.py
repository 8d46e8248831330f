"""Queries (docs/workflows.md, "Queries"): a real run is asked while it waits for a signal
and after it finished, through ``KeelClient.query`` and ``keel workflow query``; the answers
and the refusals are exact, sealed values show as ``***``, and nothing is written: no topic
of the prefix a client could write grows, the run's history and its read-model row stay as they were, and with
the services stopped not one Redis key of the prefix changes.

Real broker, real Redis, real orchestrator and worker processes (``tests.support.Services``).
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from pydantic import SecretStr

from orchestrator import (
    InvalidInputError,
    KeelClient,
    NotFoundError,
    QueryAnswer,
    QueryError,
)
from orchestrator.config.settings import TOPIC_KINDS
from orchestrator.trust.sealing import new_key_entry
from tests.integration import queries_app
from tests.integration.queries_app import APP
from tests.integration.test_read_model import keel
from tests.integration.test_sealed_fields import _redis_dump
from tests.support import Services, assert_sound_history, histories, wait_until

CARD = "4111-1111-CLEAR-CARD-NUMBER"
WF = "order-q1"
ORDER = {"customer": "acme", "items": ["apples", "bread", "cheese"], "card": CARD}
DECLARED = "'broken', 'card', 'card_token', 'input', 'line', 'output', 'progress', 'tamper'"


#: The topics a query could write to, were it to write. Not the snapshots: only an
#: orchestrator writes there, on its own clock (a checkpoint every 30 s, and one on
#: SIGTERM whose records reach the topic's end seconds after the process exited).
WRITABLE = tuple(kind for kind in TOPIC_KINDS if kind != "snapshots")


def _ends(settings) -> dict[tuple[str, int], int]:
    """The end offset of every partition of the prefix's :data:`WRITABLE` topics."""
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_servers, "group.id": f"q-{uuid.uuid4().hex}"}
    )
    try:
        return {
            (kind, p): consumer.get_watermark_offsets(
                TopicPartition(settings.topic(kind), p), timeout=10
            )[1]
            for kind in WRITABLE
            for p in range(settings.partitions)
        }
    finally:
        consumer.close()


def _redis_keys(settings) -> list[bytes]:
    """Every Redis key of the prefix with its value, but the projectors' health notes
    (they expire on their own, 30 s after the projector's last)."""
    return [line for line in _redis_dump(settings).split(b"\n") if b":rm:health:" not in line]


def _ask_everything(client: KeelClient, settings, key_entry: str) -> dict[str, object]:
    """Every query, through the client and the CLI, and the refusals; the answers."""
    out: dict[str, object] = {}
    for name in ("progress", "card", "card_token", "input", "output"):
        out[name] = client.query(WF, name).value
    out["line"] = client.query(WF, "line", {"index": 1}).value
    refusals: list[tuple[str, type[Exception], str, str, object]] = [
        ("line 9", QueryError, WF, "line", {"index": 9}),
        ("line no args", InvalidInputError, WF, "line", None),
        ("tamper", QueryError, WF, "tamper", None),
        ("broken", QueryError, WF, "broken", None),
        ("nope", InvalidInputError, WF, "nope", None),
        ("no run", NotFoundError, "order-none", "progress", None),
    ]
    for key, error, wf, name, args in refusals:
        with pytest.raises(error) as refused:
            client.query(wf, name, args)
        out[key] = str(refused.value)

    env = {"KEEL_SEAL_KEY": key_entry}
    cli = keel(settings, "workflow", "query", WF, "progress", "--app", APP, **env)
    assert (cli.returncode, cli.stderr) == (0, ""), cli.stderr
    out["cli progress"] = cli.stdout
    cli = keel(settings, "workflow", "query", WF, "line", "--args", '{"index": 2}', "--json",
               "--app", APP, **env)  # fmt: skip
    assert (cli.returncode, cli.stderr) == (0, ""), cli.stderr
    out["cli line --json"] = json.loads(cli.stdout)
    for args, key in (
        (["order-none", "progress"], "cli no run"),
        ([WF, "nope"], "cli nope"),
        ([WF, "tamper"], "cli tamper"),
    ):
        cli = keel(settings, "workflow", "query", *args, "--app", APP, **env)
        out[key] = (cli.returncode, cli.stdout, cli.stderr)
    return out


def _refusals(status: str, state: str, seq: int, run_id: str) -> dict[str, object]:
    """What both phases answer the same way, and the CLI's ``--json`` of ``line``."""
    tamper = (
        f"query 'tamper' of workflow '{WF}' tried to change the run's state "
        "(x[k] = v on a mapping); a query is read-only"
    )
    return {
        "card": "***",
        "card_token": "***",
        "input": {"customer": "acme", "items": ["apples", "bread", "cheese"], "card": "***"},
        "line": "bread",
        "line 9": f"query 'line' of workflow '{WF}' failed: IndexError: list index out of range",
        "line no args": (
            "invalid args for query 'line' of workflow 'queried_order' v1: field 'index': "
            "Field required"
        ),
        "tamper": tamper,
        "broken": f"query 'broken' of workflow '{WF}' failed: KeyError: 'missing'",
        "nope": f"workflow 'queried_order' v1 has no query 'nope' (declared: {DECLARED})",
        "no run": "workflow 'order-none' does not exist; query 'progress' refused",
        "cli line --json": {
            "workflow_id": WF,
            "run_id": run_id,
            "status": status,
            "state": state,
            "seq": seq,
            "value": "cheese",
        },
        "cli no run": (
            1,
            "",
            "error: workflow 'order-none' does not exist; query 'progress' refused\n",
        ),
        "cli nope": (
            1,
            "",
            f"error: workflow 'queried_order' v1 has no query 'nope' (declared: {DECLARED})\n",
        ),
        "cli tamper": (1, "", f"error: {tamper}\n"),
    }


def test_queries_answer_a_waiting_and_a_finished_run_and_write_nothing(settings, tmp_path):
    key_entry = new_key_entry("k1")
    sealed_settings = settings.model_copy(update={"seal_key": SecretStr(key_entry)})
    svc = Services(settings, tmp_path, KEEL_SEAL_KEY=key_entry)
    client = KeelClient(sealed_settings, queries_app.app)
    asker = KeelClient(settings, queries_app.app)  # asks, never sends: no producer
    try:
        svc.start("orchestrator", "--app", APP)
        svc.start("worker", "--app", APP)
        started = client.start("queried_order", ORDER, workflow_id=WF)
        wait_until(lambda: client.projection.status(WF) == "waiting", 60, "the approval wait")

        # -- while it waits for its signal (the services running) ---------------------
        row, history = client.projection.get(WF), client.projection.history(WF)
        ends = _ends(settings)
        answer = asker.query(WF, "progress")
        assert answer == QueryAnswer(
            workflow_id=WF,
            run_id=started.run_id,
            status="waiting",
            state="approval",
            seq=row["seq"],
            value={"state": "approval", "status": "waiting", "priced": True, "approvals": 0},
        )
        waiting = _ask_everything(asker, settings, key_entry)
        assert waiting == {
            **_refusals("waiting", "approval", row["seq"], started.run_id),
            "progress": answer.value,
            "output": None,
            "cli progress": json.dumps(answer.value) + "\n",
        }
        assert _ends(settings) == ends
        assert client.projection.get(WF) == row
        assert client.projection.history(WF) == history

        # -- after it finished ------------------------------------------------------------
        client.signal(WF, "approve", {"by": "alice"})
        done = client.wait(WF, 60)
        assert (done.status, done.output) == (
            "completed",
            {"total": 30, "approved_by": "alice"},
        )
    finally:
        svc.stop_all()
    # Nothing runs now but the queries: the topics, the history and every Redis key of
    # the prefix must be exactly as they were after them.
    row, history = client.projection.get(WF), client.projection.history(WF)
    ends, redis_before = _ends(settings), _redis_keys(settings)
    try:
        finished = _ask_everything(asker, settings, key_entry)
        progress = {"state": "done", "status": "completed", "priced": True, "approvals": 1}
        assert finished == {
            **_refusals("completed", "done", row["seq"], started.run_id),
            "progress": progress,
            "output": {"total": 30, "approved_by": "alice"},
            "cli progress": json.dumps(progress) + "\n",
        }
        assert _ends(settings) == ends
        assert _redis_keys(settings) == redis_before
        assert client.projection.get(WF) == row and client.projection.history(WF) == history
        everything = json.dumps([waiting, finished])
        assert CARD not in everything and "$keel_sealed" not in everything
        assert asker._producer is None and asker._bulk_producer is None
    finally:
        client.close()
        asker.close()
    events = histories(settings)[WF]
    assert_sound_history(WF, events)
    assert [e.type for e in events][-3:] == ["SignalReceived", "StateEntered", "WorkflowCompleted"]
