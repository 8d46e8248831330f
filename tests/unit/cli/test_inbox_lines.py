"""``keel human-tasks list`` at 80 columns: what a person needs to act on each task."""

from __future__ import annotations

import shlex

from orchestrator.cli.human_task_commands import WIDTH, inbox_lines

DIGEST = "3f" * 32

OPEN = {
    "task_id": "pay-1/run-7f3a/approval#0",
    "status": "open",
    "due_at": 1_796_300_000_000,
    "owner": None,
    "roles": ["finance-approver"],
    "level": 0,
    "task_name": "approve_payment",
    "resource": "ledger.post",
    "evidence": {"lines": [1, 2], "amount": 1200, "currency": "EUR", "supplier": "ACME GmbH"},
    "operation_digest": DIGEST,
}
DECIDED = {
    **OPEN,
    "task_id": "doc-9#1",
    "status": "approved",
    "owner": "alice",
    "level": 1,
    "evidence": {"text": "x" * 300},
}


def test_an_open_task_shows_what_is_decided_when_and_how() -> None:
    lines = inbox_lines([OPEN])
    assert lines == [
        "pay-1/run-7f3a/approval#0  [open, due 2026-12-03T12:13:20Z]",
        "  approve_payment: ledger.post (roles finance-approver, level 0)",
        '  amount=1200, currency="EUR", supplier="ACME GmbH", lines=[1,2]',
        "  keel human-tasks decide 'pay-1/run-7f3a/approval#0' --actor YOU \\",
        "    --approve --operation-digest \\",
        f"    {DIGEST}",
    ]
    command = " ".join(line.strip().rstrip("\\") for line in lines[3:])
    assert shlex.split(command)[3:] == [
        "pay-1/run-7f3a/approval#0", "--actor", "YOU", "--approve", "--operation-digest", DIGEST,
    ]  # fmt: skip


def test_every_line_fits_eighty_columns_and_a_decided_task_has_no_command() -> None:
    lines = inbox_lines([OPEN, DECIDED])
    assert max(len(line) for line in lines) <= WIDTH == 80
    decided = lines[lines.index("") + 1 :]
    assert decided[0] == "doc-9#1  [approved, due 2026-12-03T12:13:20Z]"
    assert decided[1] == "  approve_payment: ledger.post (owner alice, level 1)"
    assert decided[2].endswith("…") and len(decided[2]) == 80
    assert not any("keel human-tasks decide" in line for line in decided)


def test_a_long_id_puts_the_command_on_lines_of_its_own_and_is_never_cut() -> None:
    task_id = "invoice-2026-000123/run-7f3a9c1d2e4b8a6f/approval-of-the-payment-to-the-supplier#0"
    lines = inbox_lines([{**OPEN, "task_id": task_id}])
    assert lines[3:] == [
        "  keel human-tasks decide \\",
        f"    '{task_id}' --actor YOU \\",
        "    --approve --operation-digest \\",
        f"    {DIGEST}",
    ]
    command = " ".join(line.strip().rstrip("\\") for line in lines[3:])
    assert shlex.split(command)[3:] == [
        task_id, "--actor", "YOU", "--approve", "--operation-digest", DIGEST,
    ]  # fmt: skip
    assert not any(line.endswith("…") for line in lines[3:])


def test_the_list_command_in_a_pipe_prints_the_long_id_whole(monkeypatch) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app, human_task_commands

    task_id = "x" * 120 + "#0"  # shell-quoted
    monkeypatch.setattr(
        human_task_commands,
        "_view",
        lambda _settings: type(
            "View", (), {"list": lambda *_a, **_k: [{**OPEN, "task_id": task_id}]}
        )(),
    )
    done = CliRunner().invoke(app, ["human-tasks", "list"], env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    assert f"    '{task_id}' --actor YOU \\" in done.output.splitlines()
