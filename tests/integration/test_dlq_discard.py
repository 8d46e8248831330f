"""Issue 31, item 5: ``keel dlq discard ID --reason`` closes a letter once, with an audit
record, and excludes a redrive (and a redrive excludes it); ``keel dlq list`` is ordered
by time across partitions (docs/activities.md, "Dead letters")."""

from __future__ import annotations

import json
import re
import threading

from confluent_kafka import Producer

from orchestrator.client.dead_letters import DISCARD_HEADER, DeadLetters
from orchestrator.domain.model.errors import CommandRejected
from orchestrator.domain.model.messages import DeadLetter
from orchestrator.io.kafka.clients import header, producer_config
from orchestrator.payload_schemas.codec import Codec
from orchestrator.records.envelopes import now_ms, runtime_envelope
from tests.integration.test_dlq_redrive import _letters
from tests.integration.test_durable_core import keel
from tests.support import produce, read_topic, wait_until

GARBAGE = b"\x00not a command at all"
WHEN = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def _garbage_in_commands(settings) -> int:
    records = read_topic(
        settings.kafka_servers, settings.topic("commands"), settings.partitions, max_s=2
    )
    return sum(r.value() == GARBAGE for r in records)


def test_a_letter_is_discarded_once_with_its_audit_record_and_never_redriven(settings, services):
    services.start("orchestrator")
    produce(settings, "commands", [(b"wf-d", GARBAGE)])
    [letter] = wait_until(lambda: _letters(settings), 60, "the poison's dead letter")
    assert (letter["kind"], letter["state"], letter["workflow_id"]) == ("record", "open", "wf-d")

    done = keel(settings, "dlq", "discard", letter["id"], "--reason", "test noise, INC-7",
                "--actor", "ops-anna")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip()
        == f"dead letter '{letter['id']}' discarded by ops-anna: test noise, INC-7"
    )
    assert _letters(settings) == []
    [closed] = _letters(settings, "--all")
    assert (closed["id"], closed["state"]) == (letter["id"], "discarded")
    assert (closed["closed_by"], closed["close_reason"]) == ("ops-anna", "test noise, INC-7")
    assert closed["closed_at"] >= letter["recorded_at"]
    assert closed["redriven_at"] is None
    table = keel(settings, "dlq", "list")
    assert "1 discarded letter(s) not shown; `keel dlq list --all` shows them" in table.stdout
    every = keel(settings, "dlq", "list", "--all")
    assert "discarded" in every.stdout and "ops-anna" in every.stdout

    # the audit record: a marker in the dlq, and the claim in Redis
    dlq = read_topic(settings.kafka_servers, settings.topic("dlq"), settings.partitions, max_s=2)
    markers = [m for m in dlq if header(m, DISCARD_HEADER) == letter["id"]]
    assert len(markers) == 1
    info = json.loads(Codec().decode(markers[0].value()).payload.value)
    assert (info["by"], info["reason"]) == ("ops-anna", "test noise, INC-7")

    closed_line = (
        rf"error: dead letter '{re.escape(letter['id'])}' was already discarded at {WHEN} "
        r"by ops-anna \(test noise, INC-7\)"
    )
    again = keel(settings, "dlq", "discard", letter["id"], "--reason", "again")
    assert again.returncode == 1
    assert re.fullmatch(closed_line + "; a second discard is refused\n", again.stderr), again.stderr
    sent = keel(settings, "dlq", "redrive", letter["id"])
    assert sent.returncode == 1
    assert re.fullmatch(closed_line + "; it cannot be redriven\n", sent.stderr), sent.stderr
    assert _garbage_in_commands(settings) == 1, "never sent again"

    blank = keel(settings, "dlq", "discard", letter["id"], "--reason", "  ")
    assert (blank.returncode, blank.stderr) == (
        1,
        "error: a discard needs a reason (--reason TEXT)\n",
    )
    unknown = keel(settings, "dlq", "discard", "no-such-letter", "--reason", "x")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: no dead letter with id 'no-such-letter'")


def test_a_redriven_letter_cannot_be_discarded_and_racing_closings_close_it_once(
    settings, services
):
    services.start("orchestrator")
    produce(settings, "commands", [(b"wf-r", GARBAGE), (b"wf-s", GARBAGE)])
    letters = wait_until(lambda: len(_letters(settings)) == 2 and _letters(settings), 60, "two")
    first, second = sorted(letters, key=lambda x: x["workflow_id"])
    services.stop_all()  # what is redriven stays in the commands topic, countable

    sent = keel(settings, "dlq", "redrive", first["id"])
    assert sent.returncode == 0, sent.stderr
    late = keel(settings, "dlq", "discard", first["id"], "--reason", "too late")
    assert late.returncode == 1
    assert re.fullmatch(
        rf"error: dead letter '{re.escape(first['id'])}' was already redriven at {WHEN}; "
        "it cannot be discarded\n",
        late.stderr,
    ), late.stderr

    # an operator redrives while another discards: one of them closes the letter
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def close(how: str) -> None:
        start.wait()
        try:
            if how == "redrive":
                outcomes.append(DeadLetters(settings).redrive(second["id"]))
            else:
                outcomes.append(DeadLetters(settings).discard(second["id"], "duplicate", "ops-ben"))
        except CommandRejected as exc:
            outcomes.append(f"refused: {exc}")

    threads = [threading.Thread(target=close, args=(how,)) for how in ("redrive", "discard")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(outcomes) == 2 and sum(o.startswith("refused: ") for o in outcomes) == 1, outcomes
    [state] = [x.state for x in DeadLetters(settings).letters() if x.id == second["id"]]
    redriven = any(o.startswith("record sent again") for o in outcomes)
    assert state == ("redriven" if redriven else "discarded")
    assert _garbage_in_commands(settings) == (4 if redriven else 3)  # 2 + 1 redriven before


def _letter_at(settings, producer: Producer, partition: int, name: str, at: int) -> None:
    env = runtime_envelope(
        f"dlq/{name}",
        name,
        "",
        DeadLetter("x.commands", partition, 0, f"letter {name}", None, b"v"),
        at,
    )
    producer.produce(settings.topic("dlq"), Codec().encode(env), name.encode(), partition=partition)


def test_the_list_is_ordered_by_time_across_partitions(settings):
    base = now_ms() - 60_000
    producer = Producer(producer_config(settings))
    # written partition by partition, each partition's letter of another time
    for partition, name, at in ((0, "c", base + 3000), (1, "a", base + 1000),
                                (2, "d", base + 4000), (3, "b", base + 2000)):  # fmt: skip
        _letter_at(settings, producer, partition, name, at)
    assert producer.flush(30) == 0
    listed = _letters(settings)
    assert [x["workflow_id"] for x in listed] == ["a", "b", "c", "d"]
    assert listed[0]["time"].endswith("Z") and listed[0]["time"][10] == "T"
    newest = _letters(settings, "--newest-first")
    assert [x["workflow_id"] for x in newest] == ["d", "c", "b", "a"]
    table = keel(settings, "dlq", "list")
    assert table.returncode == 0, table.stderr
    shown = [table.stdout.index(f"letter {n}") for n in "abcd"]
    assert shown == sorted(shown)
