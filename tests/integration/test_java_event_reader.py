"""Keel's event log read from outside Python: the Java reader (``ops/event_reader/``,
docs/event-log.md) decodes every record of ``<prefix>.events`` after a mixed workload with
Avro's ``BinaryMessageDecoder`` and a ``SchemaStore`` of every schema in ``avro/``, and its
lines equal ``keel workflow export``'s field by field (``*_json`` fields compared parsed).
Every record whose data has a published payload schema (``avro/payloads/``) carries it
typed, and the reader's typed value equals the JSON the export shows; the same holds for
every event of a ``keel demo`` batch (issue 32's bar).

A second test writes one record of every payload type in every envelope version ever
released, plus two records no reader can decode, to a topic of its own: the reader resolves
each old writer schema to the newest as ``orchestrator/payload_schemas/codec.py`` does, and counts the two
failures. ``make setup`` builds the jar; the tests build it too when it is missing or older
than its sources, and skip only when ``java`` or ``mvn`` is absent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from fastavro import parse_schema, schemaless_writer

from orchestrator.client.history_io import envelope_to_dict
from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import ActivityScheduled, Envelope
from orchestrator.payload_schemas.codec import (
    ENVELOPE_NAME,
    MAGIC,
    TYPED_FIELDS,
    Codec,
    DecodeError,
    SchemaFile,
    load_schema_files,
)
from tests.integration.test_read_model import keel
from tests.support import read_topic, wait_until
from tests.unit.test_schema_evolution import _plain  # the schema without logical types

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "ops" / "event_reader"
JAR = PROJECT / "target" / "keel-event-reader.jar"
SCHEMAS = REPO / "avro"


@pytest.fixture(scope="module")
def reader_jar() -> Path:
    """The reader's jar, built with Maven (as ``make setup`` does) when missing or stale."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    assert not missing, f"{', '.join(missing)} not found: `make setup` installs them"
    sources = [PROJECT / "pom.xml", *PROJECT.joinpath("src").rglob("*.java")]
    if not JAR.is_file() or max(p.stat().st_mtime for p in sources) > JAR.stat().st_mtime:
        built = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(PROJECT / "pom.xml"), "package"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    return JAR


def run_reader(jar: Path, settings, topic: str) -> tuple[int, list[dict[str, Any]], dict]:
    """(exit status, one object per stdout line, the stderr summary) of one read of ``topic``."""
    proc = subprocess.run(
        ["java", "-jar", str(jar), "--bootstrap-servers", settings.kafka_servers,
         "--topic", topic, "--schemas", str(SCHEMAS), "--timeout-s", "60"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    err = proc.stderr.strip().splitlines()
    assert err, f"no summary on stderr (exit {proc.returncode}); stdout: {proc.stdout[-2000:]}"
    summary = json.loads(err[-1])
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], summary


def parsed(line: dict[str, Any]) -> dict[str, Any]:
    """An export line with each ``*_json`` payload field parsed ("" is none), as the reader
    prints it."""
    payload = {
        k: (json.loads(v) if v else None) if k.endswith("_json") and isinstance(v, str) else v
        for k, v in line["payload"].items()
    }
    return {**line, "payload": payload}


def by_workflow(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        out.setdefault(line["workflow_id"], []).append(line)
    return out


def test_the_java_reader_decodes_a_mixed_workload_as_keel_workflow_export(
    settings, services, client, reader_jar
):
    services.start("orchestrator")
    services.start("worker")
    expected: dict[str, str] = {}
    checks = [(f"checks-{n}", {"n": n}) for n in range(16)]
    client.start_many("parallel_checks", checks)
    expected.update(dict.fromkeys((wf for wf, _ in checks), "completed"))
    timers = [(f"timer-{i}", {"seconds": 0.5 + i / 4}) for i in range(4)]
    client.start_many("timer_demo", timers)
    expected.update(dict.fromkeys((wf for wf, _ in timers), "completed"))
    reviews = {
        **{f"review-ok-{i}": ("approved", f"lease {i} é") for i in range(3)},
        **{f"review-fraud-{i}": ("rejected", f"fraud {i}") for i in range(2)},
        **{f"review-cancel-{i}": ("cancelled", f"memo {i}") for i in range(2)},
    }
    for wf, (_, document) in reviews.items():
        client.start("document_review", {"document": document}, wf, confirm_timeout_s=None)
        expected[wf] = "cancelled" if wf.startswith("review-cancel") else "completed"

    def waiting(wf: str, rounds: int) -> bool:
        entered = [
            h for h in client.projection.history(wf)
            if h["type"] == "StateEntered" and h["data"]["state"] == "needs_documents"
        ]  # fmt: skip
        return len(entered) == rounds and client.projection.status(wf) == "waiting"

    signalled = [wf for wf in reviews if wf.startswith("review-ok")]
    for rounds, document in enumerate(("receipt 𝄞", "contract"), start=1):
        for wf in signalled:
            wait_until(lambda w=wf, n=rounds: waiting(w, n), 60, f"{wf} waiting, round {rounds}")
            client.signal(wf, "documents_added", {"document": document, "pages": rounds})
    for wf in (w for w in reviews if w.startswith("review-cancel")):
        wait_until(lambda w=wf: waiting(w, 1), 60, f"{wf} waiting")
        client.cancel(wf, "withdrawn by the applicant")
    for wf, status in expected.items():
        assert client.wait(wf, 60).status == status, wf

    topic = settings.topic("events")
    in_topic = len(read_topic(settings.kafka_servers, topic, settings.partitions))
    rc, lines, summary = run_reader(reader_jar, settings, topic)

    # Every record decoded: as many as a Python read_committed consumer sees, none failed.
    assert rc == 0, summary
    assert summary == {"topic": topic, "records": in_topic, "decoded": in_topic, "failed": 0}
    assert len(lines) == in_topic and not [line for line in lines if "error" in line]

    ids = sorted(expected)
    export = keel(settings, "workflow", "export", "--no-commands", *ids)
    assert export.returncode == 0, export.stderr
    exported = [parsed(json.loads(line)) for line in export.stdout.splitlines()]
    assert len(exported) == in_topic
    typed = [line.pop("typed_payload", None) for line in lines]  # not in the export
    java, python = by_workflow(lines), by_workflow(exported)
    assert sorted(java) == ids
    for wf in ids:
        assert java[wf] == python[wf], wf

    # Typed payloads: every record whose data has a published schema carries it typed, and
    # its value is the JSON the export shows (none of these inputs leaves a default out).
    bound = expected_bindings(lines, Codec())
    assert sum(b is not None for b in bound) >= 4 * len(checks)  # start, 3 checks, combine...
    for line, binding, got in zip(lines, bound, typed, strict=True):
        where = (line["workflow_id"], line["seq"], line["type"])
        assert (got is not None) == (binding is not None), where
        if got is None:
            continue
        field = TYPED_FIELDS[line["type"]][1]
        assert got["field"] == field and got["version"] == 1, where
        assert got["schema"] == binding, where
        assert got["value"] == line["payload"][field], where

    # Typed values, not JSON text: the reader parsed the payloads' JSON.
    kinds = {line["type"] for line in lines}
    assert {"SignalReceived", "TimerFired", "WorkflowCancelled", "ActivityCompleted"} <= kinds
    last = java["checks-3"][-1]
    assert last["type"] == "WorkflowCompleted" and last["payload"]["output_json"] == {
        "result": 19
    }  # 4 + 6 + 9
    assert isinstance(last["seq"], int) and isinstance(last["recorded_at"], int)
    signal = next(e for e in java["review-ok-0"] if e["type"] == "SignalReceived")
    assert signal["payload"]["payload_json"] == {"document": "receipt 𝄞", "pages": 1}


def test_the_java_reader_decodes_every_event_of_the_demo_with_typed_payloads(
    servers, tmp_path, reader_jar
):
    """Issue 32's bar: ``keel demo --basic`` (a batch through an orchestrator SIGKILL), then every
    record of its events topic decoded, each value with a published schema typed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        KEEL_BOOTSTRAP_SERVERS=servers.bootstrap_servers,
        KEEL_REDIS_URL=servers.redis_url,
        KEEL_HOME=str(tmp_path),
        KEEL_PARTITIONS="4",
    )
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "demo", "--basic", "--size", "12"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    prefix = re.search(r"topic prefix (demo-[\w-]+)", done.stdout)
    assert prefix is not None, done.stdout
    settings = Settings(
        bootstrap_servers=servers.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=prefix.group(1),
        partitions=4,
    )
    topic = settings.topic("events")
    in_topic = len(read_topic(settings.kafka_servers, topic, settings.partitions))
    rc, lines, summary = run_reader(reader_jar, settings, topic)
    assert rc == 0 and summary["decoded"] == summary["records"] == in_topic > 0, summary
    typed = [line.pop("typed_payload", None) for line in lines]
    bound = expected_bindings(lines, Codec())
    for line, binding, got in zip(lines, bound, typed, strict=True):
        assert (got is None) == (binding is None), (line["workflow_id"], line["seq"])
        if got is not None:
            assert got["schema"] == binding and got["value"] == line["payload"][got["field"]]
    kinds = {b for b in bound if b}
    assert "keel.payload.activity.post_to_ledger.Result" in kinds  # the invoices' ledger
    assert "keel.payload.workflow.document_review.v1.Output" in kinds


def expected_bindings(lines: list[dict[str, Any]], codec: Codec) -> list[str | None]:
    """Per line, the payload schema its data must be typed with (None: no published one),
    from what the history says: the run's definition, each activity's type."""
    runs: dict[str, tuple[str, int]] = {}
    activity_types: dict[tuple[str, str], str] = {}
    out: list[str | None] = []
    for line in lines:
        wf, p = line["workflow_id"], line["payload"]
        key: tuple[str, str, int, str] | None = None
        if line["type"] == "WorkflowStarted":
            runs[wf] = (p["name"], p["version"])
            key = ("input", p["name"], p["version"], "")
        elif line["type"] == "ActivityScheduled":
            activity_types[wf, p["activity_id"]] = p["activity_type"]
            key = ("input", "", 0, p["activity_type"])
        elif line["type"] == "ActivityCompleted":
            key = ("result", "", 0, activity_types[wf, p["activity_id"]])
        elif line["type"] == "WorkflowCompleted":
            key = ("output", *runs[wf], "")
        elif line["type"] == "WorkflowContinuedAsNew":
            key = ("input", *runs[wf], "")
        out.append(codec.payloads.fullname(key) if key else None)
    return out


# -- every envelope version ever released, written as its writer wrote it ------------------

JSON_TEXT = '{"n": 1, "s": "sé𝄞", "l": [true, null, 2.5]}'


def _sample(name: str, t: Any, nulls: bool) -> Any:
    """A value of field ``name`` of Avro type ``t``; a nullable field is null when ``nulls``."""
    if isinstance(t, list):
        if (nulls or name.endswith("_avro")) and "null" in t:  # typed payloads: below
            return None
        return _sample(name, next(b for b in t if b != "null"), nulls)
    if isinstance(t, dict):
        return _sample(name, t["type"], nulls)
    samples = {"int": -7, "long": 2**40, "boolean": True, "bytes": b"\x00\xff", "double": 2.25}
    if t == "string":
        return JSON_TEXT if name.endswith("_json") else f"{name} sé𝄞"
    return samples[t]


def _encode(f: SchemaFile, i: int, branch: dict[str, Any], type_name: str) -> bytes:
    """Record ``i`` of version ``f``: a ``branch`` payload whose envelope says ``type_name``;
    nullable fields are null in the payload or in the envelope, in turn."""
    plain = _plain(f.schema)
    body = {fld["name"]: _sample(fld["name"], fld["type"], i % 2 == 1) for fld in branch["fields"]}
    datum = {  # causation_id, correlation_id, traceparent, and any newer field
        fld["name"]: _sample(fld["name"], fld["type"], i % 2 == 0)
        for fld in plain["fields"]
        if fld["name"] != "payload"
    }
    datum.update(
        message_id=f"v{f.version}-{i}",
        workflow_id=f"old-v{f.version}",
        run_id=f"run-v{f.version}",
        seq=i + 1,
        type=type_name,
        recorded_at=1_700_000_000_000 + i,
        payload=(branch["name"], body),
    )
    out = BytesIO()
    out.write(MAGIC + f.fingerprint)
    schemaless_writer(out, parse_schema(plain), datum)
    return out.getvalue()


def _branches(f: SchemaFile) -> list[dict[str, Any]]:
    return next(fld["type"] for fld in _plain(f.schema)["fields"] if fld["name"] == "payload")


def test_the_java_reader_resolves_every_released_envelope_version_as_the_python_codec(
    settings, reader_jar
):
    versions = [f for f in load_schema_files() if f.name == ENVELOPE_NAME]
    assert len(versions) == len(Codec().known_fingerprints()) >= 7
    good = [
        _encode(f, i, branch, branch["name"].rsplit(".", 1)[-1])
        for f in versions
        for i, branch in enumerate(_branches(f))
    ]
    fire_timer = next(b for b in _branches(versions[-1]) if b["name"] == "keel.FireTimer")
    bad = {  # what the Python codec refuses, and why the reader must say
        "BadHeaderException": b"\x00not avro",
        "MissingSchemaException": MAGIC + b"\x01" * 8 + b"\x00",
        "EOFException": good[0][:-3],
        "trailing bytes": good[0] + b"\x00",
        "does not match payload keel.FireTimer": _encode(versions[-1], 0, fire_timer, "Nope"),
    }
    codec = Codec()
    for value in bad.values():
        with pytest.raises(DecodeError):
            codec.decode(value)
    typed = codec.encode(
        Envelope("typed", "old-v8", "run", 1, "ActivityScheduled", 1_700_000_000_000,
                 ActivityScheduled("a#1/a", "square", "a", '{"n": 7}', 1, 1, "k"))
    )  # fmt: skip
    good.append(typed)
    unknown = typed.replace(codec.typed_values(typed)["input_json"].fingerprint, b"\x01" * 8)
    with pytest.raises(DecodeError, match="unknown payload schema fingerprint"):
        codec.typed_values(unknown)
    bad["input_json: unknown payload schema fingerprint"] = unknown
    topic = f"{settings.topic_prefix}.old-envelopes"
    admin = AdminClient({"bootstrap.servers": settings.kafka_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": settings.kafka_servers})
    for value in [*good, *bad.values()]:
        producer.produce(topic, key=b"old", value=value, partition=0)
    assert producer.flush(30) == 0

    rc, lines, summary = run_reader(reader_jar, settings, topic)

    total = len(good) + len(bad)
    assert summary == {"topic": topic, "records": total, "decoded": len(good), "failed": len(bad)}
    assert rc == 1
    for offset, (value, line) in enumerate(zip(good, lines, strict=False)):
        typed_line = line.pop("typed_payload", None)
        assert line == parsed(envelope_to_dict(codec.decode(value))), offset
        if value is typed:
            assert typed_line == {
                "field": "input_json",
                "schema": "keel.payload.activity.square.Input",
                "version": 1,
                "value": {"n": 7},
            }
        else:
            assert typed_line is None, offset
    errors = lines[len(good) :]
    assert [(e["partition"], e["offset"]) for e in errors] == [
        (0, offset) for offset in range(len(good), total)
    ]
    for (reason, _), error in zip(bad.items(), errors, strict=True):
        assert reason in error["error"], error
