"""``keel workflow verify``: real runs verify clean; a forged event is reported, exit 1."""

from __future__ import annotations

import dataclasses
import json

import pytest
from confluent_kafka import Producer

from orchestrator.io.partitioning import partition_for
from orchestrator.payload_schemas.codec import Codec
from tests.integration.test_read_model import keel
from tests.support import histories


@pytest.mark.unsound_history  # it forges a duplicate event on purpose
def test_verify_passes_real_runs_and_reports_a_forged_duplicate_seq(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    ids = [client.start("parallel_checks", {"n": n}, f"verify-{n}").workflow_id for n in (1, 2, 3)]
    for wf in ids:
        assert client.wait(wf, 60).status == "completed"

    clean = keel(settings, "workflow", "verify", "--all", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    doc = json.loads(clean.stdout)
    events = sum(len(h) for h in histories(settings).values())
    assert doc == {
        "workflows": 3,
        "events": events,
        "proofs_verified": doc["proofs_verified"],  # whether the test home holds a key
        "violations": [],
    }
    one = keel(settings, "workflow", "verify", ids[0])
    assert one.returncode == 0, one.stderr
    assert one.stdout.strip().endswith("0 violations")
    assert "\n1 workflows, " in "\n" + one.stdout

    # Forge: the second event of verify-2 once more (same seq, new message id), and a
    # record no codec can read under another key.
    victim = histories(settings)["verify-2"][1]
    forged = dataclasses.replace(victim, message_id="forged-1")
    raw = Producer({"bootstrap.servers": settings.kafka_servers})
    topic = settings.topic("events")
    part = partition_for(b"verify-2", settings.partitions)
    raw.produce(topic, key=b"verify-2", value=Codec().encode(forged), partition=part)
    raw.produce(topic, key=b"garbage", value=b"\x00not avro", partition=0)
    assert raw.flush(30) == 0

    broken = keel(settings, "workflow", "verify", "--all", "--json")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    doc = json.loads(broken.stdout)
    found = {(v["workflow_id"], v["seq"], v["rule"]) for v in doc["violations"]}
    assert ("verify-2", 2, "seq") in found  # repeats seq 2
    assert ("verify-2", 2, "run_end") in found  # and after the run completed
    assert ("garbage", 0, "record") in found
    assert not {v for v in found if v[0] in (ids[0], ids[2])}
    assert doc["events"] == events + 2

    text = keel(settings, "workflow", "verify", "verify-2", "verify-9", COLUMNS="250")
    assert text.returncode == 1
    assert "repeats seq 2" in text.stdout
    assert f"no events in {topic}" in text.stdout  # verify-9 never ran
    assert "1 workflows, " in text.stdout and text.stdout.strip().endswith("3 violations")


@pytest.mark.unsound_history  # the old code's history, written into the topic on purpose
def test_verify_all_flags_the_run_scope_promises_the_old_code_broke(settings):
    """Issue 44: ids, a report and a timer of run 1 applied in run 2, a forged timer fire,
    child ids naming a finished run and the parent itself, as the code before run-scoped
    ids wrote them (tests/unit/domain/histories/); ``verify --all`` flags each."""
    from pathlib import Path

    from orchestrator.client.history_io import read_history_file

    fixture = Path(__file__).parents[1] / "unit/domain/histories/run_scope_old_code.jsonl"
    old = read_history_file(fixture)
    raw = Producer({"bootstrap.servers": settings.kafka_servers})
    topic = settings.topic("events")
    for env in old:
        key = env.workflow_id.encode()
        part = partition_for(key, settings.partitions)
        raw.produce(topic, key=key, value=Codec().encode(env), partition=part)
    assert raw.flush(30) == 0

    out = keel(settings, "workflow", "verify", "--all", "--json")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert sorted((v["workflow_id"], v["seq"], v["rule"]) for v in doc["violations"]) == [
        ("forged-old", 8, "timer"),
        ("loop-old", 11, "run_scope"),
        ("loop-old", 12, "idempotency_key"),
        ("loop-old", 12, "run_scope"),
        ("loop-old", 13, "run_scope"),
        ("loop-old", 15, "run_scope"),
        ("loop-old", 16, "timer"),
        ("p-old", 3, "child"),
        ("p-self-old", 3, "child"),
    ]
