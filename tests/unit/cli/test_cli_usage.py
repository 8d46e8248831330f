"""The real console entry point: usage errors print typer's usage and exit 2, never a traceback.

These run ``python -m orchestrator`` (the same ``main`` the ``keel`` console script calls)
in a subprocess, with no servers: each error is found before anything is contacted.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def keel(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    # Nothing listens here: a test that reached a server would fail loudly.
    base.update(KEEL_BOOTSTRAP_SERVERS="127.0.0.1:1", KEEL_REDIS_URL="redis://127.0.0.1:1/0")
    base.update(env)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=base,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "usage", "why"),
    [
        (["workflow", "start"], "Usage: keel workflow start [OPTIONS]", "Missing argument"),
        (["workflow", "start", "x", "--bogus"], "Usage: keel workflow start", "No such option"),
        (
            ["workflow", "start", "x", "--version", "abc"],
            "Usage: keel workflow start",
            "'--version'",
        ),
        (["workflow", "nope"], "Usage: keel workflow [OPTIONS] COMMAND", "No such command 'nope'"),
        (["nope"], "Usage: keel [OPTIONS] COMMAND", "No such command 'nope'"),
        (["workflow", "signal", "only-id"], "Usage: keel workflow signal", "Missing argument"),
    ],
)
def test_usage_errors_print_the_usage_and_exit_2(args, usage, why):
    result = keel(*args)
    assert result.returncode == 2, result.stderr
    assert usage in result.stderr
    assert why in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_bad_log_level_is_one_line():
    result = keel("projector", KEEL_LOG_LEVEL="loud")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: invalid setting KEEL_LOG_LEVEL=loud: expected one of debug, info, warning, "
        "error, critical"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["workflow", "start", "parallel_checks", "--id", "[/bold]"],
            "error: invalid workflow id '[/bold]': use 1-200 characters, a letter or digit "
            "first, then letters, digits and . _ - : @ = +",
        ),
        (
            ["workflow", "cancel", "has space"],
            "error: invalid workflow id 'has space': use 1-200 characters, a letter or digit "
            "first, then letters, digits and . _ - : @ = +",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", "[" * 100 + "]" * 100],
            "error: --input nests deeper than 64 levels of arrays and objects",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", '{"n": ' + "9" * 4000 + "}"],
            "error: --input holds an integer of 4000 digits; the limit is 64",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", "{n: 1}"],
            "error: --input is not valid JSON: Expecting property name enclosed in double "
            "quotes at line 1 column 2",
        ),
        (  # the input rule (docs/limits.md): standard JSON in valid UTF-8, nothing else
            ["workflow", "start", "parallel_checks", "--input", '{"amount": 1e400}'],
            "error: --input is not valid JSON: --input holds the number 1e400, which "
            "overflows a double",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", '{"amount": NaN}'],
            "error: --input is not valid JSON: --input holds NaN, which is not standard "
            "JSON (RFC 8259)",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", '{"a": [-Infinity]}'],
            "error: --input is not valid JSON: --input holds -Infinity, which is not "
            "standard JSON (RFC 8259)",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", '{"s": "\\ud800"}'],
            "error: --input is not valid JSON: --input holds a lone surrogate (U+D800), "
            "which is not valid Unicode",
        ),
        (
            ["workflow", "start", "parallel_checks", "--input", "@/nonexistent/in.json"],
            "error: cannot read --input file '/nonexistent/in.json': No such file or directory",
        ),
        (
            ["workflow", "start", "parallel_checks", "--app", "nowhere:app"],
            "error: cannot import module 'nowhere': No module named 'nowhere'",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_1_before_any_server_is_contacted(args, message):
    result = keel(*args)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == message
    assert result.stdout == ""


def test_a_huge_input_from_stdin_is_refused_by_size():
    result = keel(
        "workflow", "start", "parallel_checks", "--input", "-", stdin='{"n": "' + "x" * 300_000
    )
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: --input (stdin) is 262,160 bytes; the limit")


def test_redis_unreachable_is_one_line_without_the_password():
    result = keel("workflow", "list", KEEL_REDIS_URL="redis://:hunter2@127.0.0.1:1/0")
    assert result.returncode == 1
    assert result.stderr.strip().startswith(
        "error: Redis at redis://:***@127.0.0.1:1/0 did not answer: "
    )
    assert "hunter2" not in result.stderr
    assert "\n" not in result.stderr.strip()


def test_approving_from_a_script_needs_the_digest_of_what_was_reviewed():
    """keel human-tasks decide never approves "whatever the operation is now" (issue 31, item 4)."""
    result = keel(
        "human-tasks", "decide", "pay-1/run/approval#0", "--approve", "--actor", "alice", stdin=""
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (
        "error: --operation-digest is required to approve: `keel human-tasks show ID` shows the "
        "operation and its digest; pass the digest of what you reviewed"
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "server"),
    [
        (["dlq", "list"], "Kafka"),
        (["dlq", "redrive", "letter-1"], "Kafka"),
        (["workflow", "verify", "--all"], "Kafka"),
        (["replay-check", "--from-topic"], "Kafka"),
        (["workflow", "list"], "Redis"),
    ],
)
def test_a_dead_server_is_one_error_line_never_a_traceback(args, server):
    # a short bound on every admin call: the answer is the same, 13 s sooner per command
    result = keel(*args, stdin="", KEEL_ADMIN_TIMEOUT_S="2")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr
    assert server in last, last


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        (
            "KEEL_REDIS_URL",
            "redis://127.0.0.1:notaport/0",
            "error: invalid setting KEEL_REDIS_URL=redis://127.0.0.1:notaport/0: Value error, "
            "the port 'notaport' is not a number from 1 to 65535",
        ),
        (
            "KEEL_GC_THRESHOLDS",
            "not json",
            "error: invalid setting KEEL_GC_THRESHOLDS=not json: Value error, must be a JSON "
            "array of three integers, e.g. [700, 10, 10]",
        ),
    ],
)
def test_a_bad_setting_is_one_line_and_the_config_error_status(var, value, message):
    """Issue 44: both were tracebacks (``Port could not be cast``, ``SettingsError``)."""
    result = keel("workflow", "list", **{var: value})
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == message


def test_a_schedule_interval_past_the_timer_limit_is_refused_at_create():
    """Issue 44: it exited 0, then the schedule's run failed and was listed deleted."""
    result = keel(
        "schedules",
        "create",
        "X",
        "--workflow",
        "parallel_checks",
        "--every",
        "99999999999999999999d",
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (
        "error: --every must be at most 3,660d, got '99999999999999999999d'"
    )


def test_an_error_line_prints_markup_and_emoji_codes_as_written():
    """Issue 44: an id holding ``:fire:`` printed an emoji (``err_console`` read emoji codes)."""
    result = keel("workflow", "start", ":fire:[bold]x")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: unknown workflow ':fire:[bold]x'; known workflows: ")
    assert "\N{FIRE}" not in result.stderr


def test_json_input_holding_a_key_twice_is_refused_before_anything_is_sent():
    """Issue 44: the last of two keys won; another reader would take the first."""
    result = keel("workflow", "start", "parallel_checks", "--input", '{"n": 1, "n": 2}')
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == "error: --input holds the key 'n' twice in one object"
