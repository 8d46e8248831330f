"""Human tasks end to end: the real orchestrator, worker and `keel connector` on loopback,
real Kafka and Redis, on the fast-clock approval of tests/integration/tasks_app.py.

Every answer of ``POST /tasks/{token}/decision`` is checked against what the orchestrator
wrote: the history's ``HumanTask*`` events and, for refusals, its ``CommandRefused`` reason
(a refusal is never a dead letter).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CommandRefused,
    HumanTaskDecided,
    HumanTaskEscalated,
    HumanTaskExpired,
    HumanTaskOpened,
    HumanTaskReminded,
    StateEntered,
    TimerScheduled,
)
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.projector.projector import Projector
from orchestrator.trust.human_task_tokens import TaskTokens
from tests.integration import tasks_app
from tests.integration.test_connector import request, start_connector
from tests.support import histories, read_topic, wait_until

APP = "tests.integration.tasks_app:app"
SECRET = f"task-key-{uuid.uuid4().hex}{uuid.uuid4().hex}"
BEARERS = {name: f"bearer-{name}-{uuid.uuid4().hex}" for name in ("alice", "lena", "bob")}
ROLES = {"alice": ["finance-approver"], "lena": ["finance-lead"], "bob": ["intern"]}
DAY_MS = int(tasks_app.DAY_S * 1000)


@pytest.fixture
def stack(settings, services, tmp_path):
    """Orchestrator, worker and connector for the fast approval app; (client, base URL)."""
    actors = {
        name: {"token_sha256": hashlib.sha256(BEARERS[name].encode()).hexdigest(), "roles": r}
        for name, r in ROLES.items()
    }
    path = tmp_path / "actors.json"
    path.write_text(json.dumps(actors))
    env = {
        "KEEL_TASK_TOKEN_SECRET": SECRET,
        "KEEL_ACTORS_FILE": str(path),
        "TASKS_APP_PRICES_DOWN": str(tmp_path / "prices-down"),
    }
    services.env.update(env)
    services.start("orchestrator", "--app", APP)
    services.start("worker", "--app", APP)
    _, url = start_connector(services, "--app", APP)
    c = KeelClient(settings, tasks_app.app)
    yield c, url, env
    c.close()


def auth(actor: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {BEARERS[actor]}", "Content-Type": "application/json"}


def decide(url: str, token: str, actor: str | None, **body: Any) -> tuple[int, dict[str, Any]]:
    headers = auth(actor) if actor else {"Content-Type": "application/json"}
    data = json.dumps(body).encode()
    return request("POST", f"{url}/tasks/{token}/decision", data, headers)


def decide_answered(url: str, token: str, actor: str, **body: Any) -> tuple[int, dict[str, Any]]:
    """A decision the orchestrator judges, sent again while the connector answers 202
    "pending" (its verdict not back within the connector's wait, on a loaded host): the
    same request again is how a client learns the outcome (docs/connector.md)."""
    deadline = time.monotonic() + 90
    while True:
        status, answer = decide(url, token, actor, **body)
        if status != 202 or answer.get("status") != "pending" or time.monotonic() > deadline:
            return status, answer
        time.sleep(0.5)


def inbox(url: str, actor: str, query: str = "") -> list[dict[str, Any]]:
    status, body = request("GET", f"{url}/tasks{query}", None, auth(actor))
    assert status == 200, body
    return body["tasks"]


def task_of(url: str, wf: str, actor: str = "alice") -> dict[str, Any] | None:
    return next((t for t in inbox(url, actor) if t["workflow_id"] == wf), None)


def events_of(settings, wf: str) -> list:
    return histories(settings).get(wf, [])


def start(client: KeelClient, wf: str, expires_days: float) -> None:
    inp = {"payment_id": wf, "account": "acc-9", "amount": 12.5, "expires_days": expires_days}
    client.start("payment_fast", inp, wf)


def test_a_task_reminds_escalates_and_the_lead_approval_resumes_the_run_once(
    settings, services, stack
):
    client, url, _ = stack
    wf = "pay-approved-1"
    start(client, wf, expires_days=15)
    task = wait_until(lambda: task_of(url, wf), 60, "the task in alice's inbox")
    token = task["token"]
    assert task["owner"] == "finance-team" and task["roles"] == ["finance-approver"]
    assert task["evidence"] == {
        "payment": {"payment_id": wf, "account": "acc-9", "amount": 12.5},
        "note": "invoice 7 of supplier ACME",
    }
    digest = task["operation_digest"]
    # lena may not decide yet: she sees the task (filtering by owner) but gets no token
    lenas = inbox(url, "lena", "?owner=finance-team")
    assert [t["task_id"] for t in lenas] == [task["task_id"]] and "token" not in lenas[0]

    # refusals, each the orchestrator's (or, for the token, nothing to send to)
    assert decide(url, token, None, decision="approve", operation_digest=digest)[0] == 401
    wrong = {"Authorization": "Bearer not-a-configured-token"}
    assert request("POST", f"{url}/tasks/{token}/decision", b"{}", wrong)[0] == 401
    guessed = hashlib.sha256(b"guess").hexdigest()
    assert decide(url, guessed, "alice", decision="approve", operation_digest=digest) == (
        404,
        {"status": "unknown", "error": "no human task has this token"},
    )
    assert decide(url, "../etc", "alice", decision="reject")[0] == 404
    status, body = decide(url, token, "bob", decision="reject", reason="not mine")
    assert status == 403 and body["status"] == "refused"
    assert body["error"].startswith("actor 'bob' holds none of the roles that may decide")
    stale = hashlib.sha256(b"the operation as it was yesterday").hexdigest()
    status, body = decide(url, token, "alice", decision="approve", operation_digest=stale)
    assert status == 409 and body["error"].startswith(
        f"stale approval: the approver saw operation {stale[:12]}…"
    )
    assert not any(isinstance(e.payload, HumanTaskDecided) for e in events_of(settings, wf))

    # the escalation (after one "day") makes lena qualified: now she sees the token
    def escalated() -> dict[str, Any] | None:
        t = task_of(url, wf, "lena")
        return t if t and t["level"] == 1 and "token" in t else None

    lena_view = wait_until(escalated, 60, "the escalation to the finance lead")
    assert lena_view["token"] == token and lena_view["owner"] == "finance-lead"
    assert lena_view["reminders"] == 2
    status, body = decide_answered(
        url, token, "lena", decision="approve", reason="ok", operation_digest=digest
    )
    assert status == 200, body
    assert body["status"] == "decided"
    assert body["decision"]["decision"] == "approve" and body["decision"]["actor"] == "lena"
    # the same decision again: the first result, nothing written
    again = decide(url, token, "lena", decision="approve", reason="ok", operation_digest=digest)
    assert again[0] == 200 and again[1]["status"] == "repeated"
    assert again[1]["decision"] == body["decision"]
    # a conflicting one: refused by the orchestrator
    status, conflict = decide_answered(url, token, "alice", decision="reject", reason="no")
    assert status == 409 and conflict["status"] == "refused", conflict
    # the orchestrator's reason: the task was decided, or the run already ended with it
    assert "was already approved by 'lena'" in conflict["error"] or conflict["error"].startswith(
        f"workflow '{wf}' is completed; reject of human task"
    )
    assert conflict["decision"] == body["decision"]  # what stands: lena's approval

    done = client.wait(wf, 60)
    assert done.output == {"status": "paid", "decided_by": "lena"}
    events = events_of(settings, wf)
    kinds = [type(e.payload) for e in events]
    assert kinds.count(HumanTaskDecided) == 1
    opened = next(e for e in events if isinstance(e.payload, HumanTaskOpened))
    t0 = opened.recorded_at
    timers = {
        e.payload.purpose: e.payload.fire_at
        for e in events
        if isinstance(e.payload, TimerScheduled)
    }
    assert timers["human:remind:1"] == t0 + round(DAY_MS / 6)
    assert timers["human:remind:2"] == t0 + round(DAY_MS * 5 / 6)
    assert timers["human:escalate:1"] == t0 + DAY_MS
    assert timers["human:expire:0"] == t0 + 15 * DAY_MS
    assert opened.payload.due_at == t0 + DAY_MS
    fired = [e for e in events if isinstance(e.payload, HumanTaskReminded | HumanTaskEscalated)]
    assert [type(e.payload).__name__ for e in fired] == [
        "HumanTaskReminded",
        "HumanTaskReminded",
        "HumanTaskEscalated",
    ]
    on_time = [timers["human:remind:1"], timers["human:remind:2"], timers["human:escalate:1"]]
    assert all(e.recorded_at >= at for e, at in zip(fired, on_time, strict=True))
    decided = next(e for e in events if isinstance(e.payload, HumanTaskDecided))
    assert decided.payload.actor == "lena" and decided.payload.operation_digest == digest
    assert decided.seq > fired[-1].seq
    assert decided.payload.reason_digest == hashlib.sha256(b"ok").hexdigest()
    after = events[events.index(decided) + 1 :]
    assert isinstance(after[0].payload, StateEntered) and after[0].payload.state == "pay"
    assert sum(isinstance(e.payload, ActivityScheduled) for e in after) == 1
    # the refusals were recorded in the run's history with the reasons the answers carried,
    # and none was dead-lettered
    refusals = [e.payload.reason for e in events if isinstance(e.payload, CommandRefused)]
    assert any(r.startswith("stale approval") for r in refusals)
    assert any("holds none of the roles" in r for r in refusals)
    if "was already approved by 'lena'" in conflict["error"]:  # else: the run had ended
        assert any("reject of human task" in r for r in refusals)
    assert _letters(settings) == []

    # the inbox closed the task, with its history
    view = TasksView(client.projection.r, settings.topic_prefix)
    record = view.get(task["task_id"])
    assert record["status"] == "approved" and record["actor"] == "lena"
    assert [h["type"] for h in view.history(task["task_id"])] == [
        "HumanTaskOpened",
        "HumanTaskReminded",
        "HumanTaskReminded",
        "HumanTaskEscalated",
        "HumanTaskDecided",
    ]
    assert inbox(url, "alice") == []
    show = client.show(wf)
    assert [(t["status"], t["actor"]) for t in show.human_tasks] == [("approved", "lena")]

    # no token, bearer or key anywhere: logs, events, commands, dead letters, read model
    _assert_no_secrets(settings, services, [token, SECRET, *BEARERS.values()])


def test_an_undecided_task_expires_into_a_rejection_and_refuses_a_late_approval(
    settings, services, stack, tmp_path
):
    client, url, _ = stack
    wf = "pay-expired-1"
    start(client, wf, expires_days=1.5)  # expires after the escalation, undecided
    task = wait_until(lambda: task_of(url, wf), 60, "the task in the inbox")
    done = client.wait(wf, 60)
    assert done.output == {"status": "rejected", "decided_by": None}
    events = events_of(settings, wf)
    expired = [e.payload for e in events if isinstance(e.payload, HumanTaskExpired)]
    assert expired == [HumanTaskExpired(task["task_id"], "reject")]
    assert not any(isinstance(e.payload, HumanTaskDecided | ActivityScheduled) for e in events)
    opened = next(e for e in events if isinstance(e.payload, HumanTaskOpened))
    expiry = next(e for e in events if isinstance(e.payload, HumanTaskExpired))
    assert expiry.recorded_at >= opened.payload.expires_at == opened.recorded_at + 3 * DAY_MS // 2

    # a late approval, from the CLI as an operator-configured actor: refused, 410
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    cli_env.update(services.env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    token = TaskTokens(SECRET.encode(), "test").issue(task["task_id"])
    late = subprocess.run(
        [sys.executable, "-m", "orchestrator", "human-tasks", "decide", token, "--approve",
         "--operation-digest", task["operation_digest"], "--actor", "alice", "--app", APP],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert late.returncode == 1, late.stdout + late.stderr
    assert late.stderr.startswith(f"error: refused (gone): workflow '{wf}' is completed;")
    assert not any(isinstance(e.payload, HumanTaskDecided) for e in events_of(settings, wf))

    # the inbox is a projection: a rebuild gives the same task record and history
    view = TasksView(client.projection.r, settings.topic_prefix)
    before = (view.get(task["task_id"]), view.history(task["task_id"]))
    assert before[0]["status"] == "expired" and before[0]["expiry_outcome"] == "reject"
    Projector(settings, tasks_app.app).rebuild()
    assert (view.get(task["task_id"]), view.history(task["task_id"])) == before
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator", "human-tasks", "show", task["task_id"], "--json"],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "expired"
    _assert_no_secrets(settings, services, [token, SECRET, *BEARERS.values()])


def test_an_approval_refused_while_the_operation_cannot_be_computed_passes_once_it_can(
    settings, services, stack
):
    """503 while the operation's code fails (a refusal that says nothing of the request);
    the same request again is its next attempt, and once the price service is back it is
    decided, once (docs/human-tasks.md, "Deciding")."""
    client, url, env = stack
    wf = "pay-priced-1"
    inp = {"payment_id": wf, "account": "acc-9", "amount": 12.5, "expires_days": 15}
    client.start("payment_priced", inp, wf)
    task = wait_until(lambda: task_of(url, wf), 60, "the task in alice's inbox")
    body = {"decision": "approve", "operation_digest": task["operation_digest"], "reason": "ok"}
    down = Path(env["TASKS_APP_PRICES_DOWN"])
    down.touch()
    first = decide_answered(url, task["token"], "alice", **body)
    again = decide_answered(url, task["token"], "alice", **body)
    down.unlink()
    passed = decide_answered(url, task["token"], "alice", **body)

    assert first[0] == 503 and first[1]["status"] == "refused", first
    assert first[1]["error"] == (
        "the operation cannot be computed now (state 'approval': operation of human task "
        "'approve_payment' raised ConnectionError: the price service is down); approve of "
        f"human task '{task['task_id']}' by 'alice' refused"
    )
    assert again[0] == 503 and again[1]["message_id"] == f"{first[1]['message_id']}/again/1"
    assert passed[0] == 200 and passed[1]["status"] == "decided", passed
    assert passed[1]["message_id"] == f"{first[1]['message_id']}/again/2"
    assert client.wait(wf, 60).output == {"status": "paid", "decided_by": "alice"}
    events = events_of(settings, wf)
    refused = [e for e in events if isinstance(e.payload, CommandRefused)]
    assert [e.causation_id for e in refused] == [first[1]["message_id"], again[1]["message_id"]]
    decided = [e for e in events if isinstance(e.payload, HumanTaskDecided)]
    assert len(decided) == 1 and decided[0].causation_id == passed[1]["message_id"]
    # the decided attempt again: the first result stands, nothing is sent
    assert decide(url, task["token"], "alice", **body)[1]["status"] == "repeated"


def test_an_app_with_human_tasks_and_no_key_refuses_to_start(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        KEEL_TASK_TOKEN_SECRET_FILE=str(tmp_path / "missing.secret"),
        KEEL_HOME=str(tmp_path),
        PYTHONPATH=os.environ.get("PYTHONPATH", ""),
    )
    for role in ("orchestrator", "connector"):
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", role, "--app", APP],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 1, (role, done.stdout, done.stderr)
        assert done.stderr.strip() == (
            "error: the application declares human tasks (payment_fast v1.approval, "
            "payment_priced v1.approval): "
            f"KEEL_TASK_TOKEN_SECRET_FILE '{tmp_path / 'missing.secret'}' cannot be read: "
            "No such file or directory"
        ), role


def _letters(settings) -> list[str]:
    from orchestrator.payload_schemas.codec import Codec

    codec = Codec()
    raw = read_topic(settings.kafka_servers, settings.topic("dlq"), settings.partitions, max_s=5)
    return [codec.decode(m.value()).payload.reason for m in raw]


def _assert_no_secrets(settings, services, secrets: list[str]) -> None:
    blobs: list[tuple[str, bytes]] = []
    for proc in services.procs:
        blobs.append((str(proc.log_path), proc.log_path.read_bytes()))
    for kind in ("events", "commands", "dlq", "snapshots"):
        for m in read_topic(settings.kafka_servers, settings.topic(kind), settings.partitions):
            blobs.append((kind, (m.key() or b"") + (m.value() or b"")))
    r = redis.Redis.from_url(settings.redis)
    try:
        for key in r.scan_iter(match=f"keel:{settings.topic_prefix}:*"):
            kind = r.type(key)
            if kind == b"hash":
                value = b"".join(k + v for k, v in r.hgetall(key).items())
            elif kind == b"list":
                value = b"".join(r.lrange(key, 0, -1))
            elif kind == b"string":
                value = r.get(key) or b""
            else:
                value = b"".join(r.zrange(key, 0, -1) if kind == b"zset" else r.smembers(key))
            blobs.append((key.decode(), key + value))
    finally:
        r.close()
    assert len(blobs) > 10
    for secret in secrets:
        for where, blob in blobs:
            assert secret.encode() not in blob, f"a secret leaked into {where}"
