"""docs/connector.md, "Signature schemes", runs as written: ``hooks.py`` served by a real
connector (beside a real orchestrator and worker), ``send.py`` signing with each provider's
library, its printed answers those the page shows, and the workflows it starts running."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from orchestrator.client.client import KeelClient
from orchestrator.examples import app as examples
from tests.doc_blocks import snippets
from tests.integration.test_webhook_schemes import start_connector
from tests.support import wait_until

PAGE = Path(__file__).resolve().parents[2] / "docs" / "connector.md"
_LINES = PAGE.read_text().splitlines()
_START = next(n for n, line in enumerate(_LINES, 1) if line.startswith("## Signature schemes"))
_END = next(
    (n for n, line in enumerate(_LINES, 1) if n > _START and line.startswith("## ")),
    len(_LINES) + 1,
)
SECTION = range(_START, _END)


def block(kind: str, first_line: str) -> str:
    """The section's one block of language ``kind`` that starts with ``first_line`` (read
    with the docs harness's parser, so a block's markers do not hide it)."""
    found = [
        s.code
        for s in snippets(PAGE)
        if s.lang == kind and s.line in SECTION and s.code.startswith(first_line)
    ]
    assert len(found) == 1, f"one {kind} block starting {first_line!r} in the section"
    return found[0]


def answers(lines: list[str]) -> list[tuple[int, dict]]:
    parsed = []
    for line in lines:
        status, _, body = line.partition(" ")
        parsed.append((int(status), json.loads(body)))
    return parsed


def same(shown: dict, got: dict) -> bool:
    """``got`` as the page shows it; a shown value ending in ``...`` stands for any."""
    if shown.keys() != got.keys():
        return False
    for key, value in shown.items():
        if isinstance(value, str) and value.endswith("..."):
            assert isinstance(got[key], str) and got[key].startswith(value[:-3]), (key, got[key])
        elif value != got[key]:
            return False
    return True


def test_the_worked_example_of_the_signature_schemes_runs_as_written(settings, services, tmp_path):
    (tmp_path / "hooks.py").write_text(block("python", "# hooks.py"))
    secrets = dict(re.findall(r"^export (KEEL_WEBHOOK_\w+)=(.*)$", block("bash", "export "), re.M))
    assert len(secrets) == 4
    secrets = {k: v.strip("'") for k, v in secrets.items()}
    services.start("orchestrator")
    services.start("worker")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    url = start_connector(services, "hooks:app", PYTHONPATH=path, **secrets)
    send = block("python", "# send.py").replace("http://127.0.0.1:8701", url)
    assert url in send

    def run_send() -> list[tuple[int, dict]]:
        done = subprocess.run(
            [sys.executable, "-c", send], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return answers(done.stdout.splitlines())

    shown = answers(block("text", "202 ").strip().splitlines())
    first = run_send()
    assert len(first) == len(shown) == 6
    for (status, body), (want_status, want) in zip(first, shown, strict=True):
        assert status == want_status and same(want, body), (status, body, want)

    client = KeelClient(settings, examples)
    try:
        started = ["issue-7", "invoice-in_1MtHbE", "slack-C123-1515449522.000016", "contract-C-9"]
        for wf in started:  # one document each: every review waits for more
            wait_until(lambda wf=wf: client.projection.status(wf) == "waiting", 60, f"{wf} waits")
        again = run_send()
        assert [(status, body.get("status")) for status, body in again] == [
            (202, "accepted"),  # GitHub: a fresh delivery id
            (200, "duplicate"),
            (200, "duplicate"),  # Stripe: the same event id
            (200, None),  # Slack's handshake again
            (200, "duplicate"),  # Slack: the same event_id
            (202, "accepted"),  # billing: a fresh webhook-id
        ]
        for wf in started:  # a start of an existing id created nothing
            runs = [h for h in client.projection.history(wf) if h["type"] == "WorkflowStarted"]
            assert len(runs) == 1, (wf, runs)
    finally:
        client.close()
