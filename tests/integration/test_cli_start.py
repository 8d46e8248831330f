"""``keel workflow start`` reports the true run; inputs from files and stdin; signal names.

Real broker, real Redis, a real orchestrator process (``tests.support.Services``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from orchestrator.domain.model.messages import SignalWorkflow, WorkflowStarted
from tests.integration.test_read_model import keel
from tests.support import decode_all, histories, read_topic, wait_until


def _popen(settings, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        env=settings.child_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_concurrent_starts_of_one_id_agree_on_the_one_run(settings, services, client):
    services.start("orchestrator")
    services.start("worker")
    warm = client.start("parallel_checks", {"n": 1}, "warm-up")  # the orchestrator is up
    assert warm.existed is False
    args = ("workflow", "start", "parallel_checks", "--id", "dup", "--input", '{"n": 1}', "--json")
    procs = [_popen(settings, *args) for _ in range(2)]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        outs.append(json.loads(stdout))
    assert sorted(o["existed"] for o in outs) == [False, True]
    assert outs[0]["run_id"] == outs[1]["run_id"]
    assert client.wait("dup", 60).status == "completed"
    starts = [e for e in histories(settings)["dup"] if isinstance(e.payload, WorkflowStarted)]
    assert [e.run_id for e in starts] == [outs[0]["run_id"]]


def test_a_start_the_read_model_does_not_confirm_is_an_error_naming_the_command(
    settings, services, client
):
    late = keel(
        settings, "workflow", "start", "parallel_checks", "--id", "lag-1",
        "--input", '{"n": 1}', "--timeout", "3",
    )  # fmt: skip
    assert late.returncode == 1
    match = re.fullmatch(
        r"error: start of 'lag-1' was sent \(command ([0-9a-f]{32})\) but the read model did "
        r"not show the workflow within 3s; is an orchestrator running\? `keel workflow show "
        r"lag-1` tells when it does",
        late.stderr.strip(),
    )
    assert match, late.stderr
    services.start("orchestrator")
    services.start("worker")
    assert client.wait("lag-1", 90).run_id == match.group(1)
    again = keel(
        settings, "workflow", "start", "parallel_checks", "--id", "lag-1", "--input", '{"n": 1}',
        "--json",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {
        "workflow_id": "lag-1",
        "run_id": match.group(1),
        "existed": True,
    }


def test_inputs_from_a_file_and_stdin_and_signal_names_checked(
    settings, services, client, tmp_path
):
    services.start("orchestrator")
    services.start("worker")
    path = tmp_path / "input.json"
    path.write_text(json.dumps({"n": 3}))
    from_file = keel(
        settings, "workflow", "start", "parallel_checks", "--id", "from-file",
        "--input", f"@{path}", "--wait", "--json",
    )  # fmt: skip
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout)["output"] == {"result": 4 + 6 + 9}

    env = settings.child_environment()
    from_stdin = subprocess.run(
        [sys.executable, "-m", "orchestrator", "workflow", "start", "document_review",
         "--id", "review-stdin", "--input", "-"],
        input=json.dumps({"document": "a lease"}),
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout.startswith("started: review-stdin (run ")
    wait_until(lambda: client.projection.status("review-stdin") == "waiting", 60, "the wait")

    wrong = keel(settings, "workflow", "signal", "review-stdin", "document_added")
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == (
        "error: workflow 'document_review' v1 has no signal 'document_added' "
        "(known: 'documents_added'); signal refused"
    )
    path.write_text(json.dumps({"document": "the signed page"}))
    right = keel(
        settings, "workflow", "signal", "review-stdin", "documents_added", "--payload", f"@{path}"
    )
    assert right.returncode == 0, right.stderr
    signals = [
        e.payload
        for e in decode_all(read_topic(settings.kafka_servers, settings.topic("commands"), 4))
        if isinstance(e.payload, SignalWorkflow)
    ]
    assert [s.signal_name for s in signals] == ["documents_added"], (
        "the refused signal wrote nothing"
    )
    assert json.loads(signals[0].payload_json) == {"document": "the signed page"}


def test_start_wait_on_a_run_that_stops_for_an_operator_prints_why_and_exits_3(settings, services):
    """``needs_attention`` is not ``completed``: exit 3 and the reason, never ``null``."""
    services.env["KEEL_LEDGER_URL"] = "http://127.0.0.1:1"  # nothing listens: refused
    services.start("orchestrator")
    services.start("worker")
    done = keel(
        settings, "workflow", "start", "invoice_posting", "--id", "post-ledger-down",
        "--input", json.dumps({"invoice_id": "I1", "account": "A", "amount": 5}),
        "--wait", "--timeout", "90",
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    first, second = done.stdout.strip().splitlines()
    assert first.startswith("started: post-ledger-down (run ")
    assert second.startswith("needs_attention: "), second
    assert "run#1/post" in second and "null" not in second, second
