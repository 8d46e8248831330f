"""Record the LLM replay corpus (``tests/llm_histories``) by running the real stack.

Like :mod:`ops.record_histories`, for the application ``orchestrator.examples.llm_invoices``
(its own app, so its histories live beside the main corpus, not in it): an orchestrator
and a worker run as processes against ``KEEL_BOOTSTRAP_SERVERS`` / ``KEEL_REDIS_URL``
under a fresh topic prefix, the local OpenAI-compatible fake answers, and
``invoice_extraction`` v1 and v2 are driven through their paths (valid, repaired, invalid
past the bound: v1 fails, v2 opens a correction task that is approved with a correction
or rejected). ``tests/unit/test_llm_replay_corpus.py`` replays the file.

    python -m ops.record_llm_histories --out tests/llm_histories
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ops.fakes.openai_server import running
from ops.record_histories import WAIT_S, _process, recording_env
from orchestrator.client.client import KeelClient
from orchestrator.client.history_io import read_topic_history, write_history
from orchestrator.client.human_task_decisions import DecisionStatus, TaskDesk
from orchestrator.config.settings import Settings, load_settings
from orchestrator.examples.llm_invoices import app
from orchestrator.io.kafka.topics import create_topics
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.trust.human_task_tokens import TaskTokens

APP = "orchestrator.examples.llm_invoices:app"
FIELDS = {"vendor": "ACME", "invoice_number": "I-1", "currency": "EUR", "confidence": 0.95}
CORRECTION = {"vendor": "ACME GmbH", "invoice_number": "I-9", "total": 4200, "currency": "EUR"}


def _scenarios(client: KeelClient, fake: Any, desk: TaskDesk, tokens: TaskTokens) -> list[str]:
    view: TasksView = desk.tasks
    ran: list[str] = []

    def run(wf: str, version: int, document: str, status: str) -> None:
        client.start("invoice_extraction", {"document": document}, wf, version)
        found = client.wait(wf, WAIT_S)
        if found.status != status:
            raise RuntimeError(f"{wf} is {found.status}, expected {status}")
        ran.append(wf)

    def decide(wf: str, version: int, document: str, decision: str, **kw: Any) -> None:
        client.start("invoice_extraction", {"document": document}, wf, version)
        deadline = time.monotonic() + WAIT_S
        while not (task := next((t for t in view.list() if t["workflow_id"] == wf), None)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{wf} opened no correction task")
            time.sleep(0.1)
        token = tokens.issue(task["task_id"])
        out = desk.decide(token, "clara", ["invoice-clerk"], decision, "checked the scan",
                          task["operation_digest"], **kw)  # fmt: skip
        if out.status != DecisionStatus.DECIDED:
            raise RuntimeError(f"{decision} of {task['task_id']}: {out.status} {out.reason}")
        client.wait(wf, WAIT_S)
        ran.append(wf)

    fake.script([{"match": "doc-large", "json": {**FIELDS, "total": 4200.0}}],
                default={"json": {**FIELDS, "total": 12.0}})  # fmt: skip
    for version in (1, 2):
        run(f"llm-v{version}-ok", version, "doc-large", "completed")
        fake.set_faults(malformed=1, wrong_schema=1)
        run(f"llm-v{version}-repaired", version, "doc-small", "completed")
        fake.set_faults(malformed=-1)
        if version == 1:
            run("llm-v1-invalid", 1, "doc-bad", "failed")
        else:
            decide("llm-v2-corrected", 2, "doc-bad", "approve", correction=CORRECTION)
            decide("llm-v2-rejected", 2, "doc-bad-2", "reject")
        fake.set_faults(malformed=0)
    return ran


def record(settings: Settings, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    create_topics(settings)
    logs = Path(tempfile.mkdtemp(prefix=f"keel-record-{settings.topic_prefix}-"))
    secret = secrets.token_hex(32)
    tokens = TaskTokens(secret.encode(), "the recording")
    with running() as fake:
        env = recording_env(settings, secret, KEEL_LLM_BASE_URL=fake.api_root)
        with (
            _process(["orchestrator", "orchestrator", "--app", APP], env, logs / "orch.log"),
            _process(["orchestrator", "worker", "--app", APP], env, logs / "worker.log"),
        ):
            client = KeelClient(settings, app)
            try:
                view = TasksView(client.projection.r, settings.topic_prefix)
                desk = TaskDesk(settings, view, client.send_as, wait_s=WAIT_S)
                ids = _scenarios(client, fake, desk, tokens)
                envelopes = read_topic_history(settings, ids)
                with (out / "invoice_extraction.jsonl").open("w", encoding="utf-8") as fh:
                    return write_history(envelopes, fh)
            finally:
                client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/llm_histories"))
    args = parser.parse_args(argv)
    base = load_settings()
    settings = base.model_copy(update={"topic_prefix": f"rec{uuid.uuid4().hex[:10]}"})
    lines = record(settings, args.out)
    print(json.dumps({"topic_prefix": settings.topic_prefix, "lines": lines}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
