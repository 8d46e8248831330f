"""Dead letters are redriven once, listed by state, and garbage in the dlq is listed, not raised."""

from __future__ import annotations

import json
import threading

from orchestrator.client.dead_letters import DeadLetters
from orchestrator.domain.model.errors import CommandRejected
from tests.integration.test_durable_core import keel
from tests.support import produce, read_topic, wait_until

GARBAGE = b"\x00not a task at all"


def _letters(settings, *flags: str) -> list[dict]:
    listed = keel(settings, "dlq", "list", "--json", *flags)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def _garbage_in_tasks(settings) -> int:
    records = read_topic(
        settings.kafka_servers, settings.topic("activity-tasks"), settings.partitions, max_s=2
    )
    return sum(r.value() == GARBAGE for r in records)


def test_a_record_is_redriven_once_and_then_listed_as_redriven(settings, services):
    services.start("worker")
    produce(settings, "activity-tasks", [(b"wf-1", GARBAGE)])
    [first] = wait_until(lambda: _letters(settings), 60, "the worker's dead letter")
    assert (first["kind"], first["state"], first["workflow_id"]) == ("record", "open", "wf-1")

    sent = keel(settings, "dlq", "redrive", first["id"])
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == f"record sent again to {settings.topic('activity-tasks')}"
    # The worker dead-letters the record again: a new letter, open; the first is redriven.
    [second] = wait_until(lambda: _letters(settings), 60, "the second dead letter")
    assert second["id"] != first["id"]
    assert second["state"] == "open"
    everything = {x["id"]: x for x in _letters(settings, "--all")}
    assert set(everything) == {first["id"], second["id"]}
    assert everything[first["id"]]["state"] == "redriven"
    assert everything[first["id"]]["redriven_at"] >= first["recorded_at"]

    again = keel(settings, "dlq", "redrive", first["id"])
    assert again.returncode == 1
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1, again.stderr
    [line] = lines
    assert line.startswith(f"error: dead letter '{first['id']}' was already redriven at ")
    assert line.endswith("Z; a second redrive is refused")
    assert _garbage_in_tasks(settings) == 2, "the original and exactly one redrive"

    table = keel(settings, "dlq", "list")
    assert table.returncode == 0, table.stderr
    assert "1 redriven letter(s) not shown; `keel dlq list --all` shows them" in table.stdout


def test_two_operators_redriving_one_letter_send_it_once(settings, services):
    services.start("worker")
    produce(settings, "activity-tasks", [(b"wf-2", GARBAGE)])
    [letter] = wait_until(lambda: DeadLetters(settings).letters(), 60, "the worker's dead letter")
    services.stop_all()  # the redriven record stays in the tasks topic, countable

    outcomes: list[str] = []
    start = threading.Barrier(2)

    def operator() -> None:
        start.wait()
        try:
            outcomes.append(DeadLetters(settings).redrive(letter.id))
        except CommandRejected as exc:
            outcomes.append(f"refused: {exc}")

    threads = [threading.Thread(target=operator) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(o.split(":")[0] for o in outcomes) == [
        f"record sent again to {settings.topic('activity-tasks')}",
        "refused",
    ]
    assert _garbage_in_tasks(settings) == 2, "the original and exactly one redrive"
    [listed] = DeadLetters(settings).letters()
    assert listed.state == "redriven"


def test_garbage_in_the_dlq_is_listed_as_unreadable_never_a_traceback(settings):
    produce(settings, "dlq", [(b"junk", b"\xc3\x01garbage"), (b"nothing", None)])
    listed = wait_until(lambda: _letters(settings), 30, "the unreadable records")
    assert sorted((x["kind"], x["state"], x["workflow_id"]) for x in listed) == [
        ("unreadable", "open", "junk"),
        ("unreadable", "open", "nothing"),
    ]
    by_wf = {x["workflow_id"]: x for x in listed}
    assert by_wf["nothing"]["reason"].endswith(": the record has no value")
    assert by_wf["junk"]["reason"].startswith(f"unreadable dlq record at {settings.topic('dlq')}[")
    assert "too short for single-object encoding" in by_wf["junk"]["reason"]

    table = keel(settings, "dlq", "list")
    assert table.returncode == 0, table.stderr
    assert "Traceback" not in table.stdout + table.stderr
    assert "unreadable" in table.stdout

    refused = keel(settings, "dlq", "redrive", by_wf["junk"]["id"])
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"error: dead letter '{by_wf['junk']['id']}' is unreadable; nothing to redrive"
    )
    missing = keel(settings, "dlq", "redrive", "no-such-letter")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "error: no dead letter with id 'no-such-letter'; see `keel dlq list --all`"
    )
