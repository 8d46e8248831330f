"""The webhook signature check: any change to body, timestamp or secret fails (property tests)."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from connectors.signing import (
    SignatureError,
    parse_secrets,
    parse_signature_header,
    sign,
    signature_header,
    verify,
)
from connectors.webhooks import message_id, parse_body
from orchestrator.application.webhook_sources import (
    RouteError,
    WebhookSignal,
    WebhookSource,
    WebhookStart,
)

NOW = 1_767_225_600
bodies = st.binary(max_size=512)
# Secrets as the connector reads them from an environment variable, which cannot hold NUL.
# That matters: HMAC pads a key shorter than its block with zero bytes (RFC 2104), so
# b"k" and b"k\0" are one key, and "any other secret fails" holds only without NUL.
secrets = st.binary(min_size=1, max_size=64).filter(
    lambda s: b"," not in s and b"\0" not in s and s.strip() == s
)
timestamps = st.integers(min_value=NOW - 300, max_value=NOW + 300)


@given(body=bodies, secret=secrets, ts=timestamps)
def test_a_signed_body_verifies(body, secret, ts):
    assert verify(signature_header([secret], ts, body), body, [secret], now=NOW) == ts


@given(body=bodies, other=bodies, secret=secrets, ts=timestamps)
def test_any_change_to_the_body_fails(body, other, secret, ts):
    assume(other != body)
    with pytest.raises(SignatureError, match="does not match the body under any active secret"):
        verify(signature_header([secret], ts, body), other, [secret], now=NOW)


@given(body=bodies, secret=secrets, ts=timestamps, moved=timestamps)
def test_any_change_to_the_timestamp_fails(body, secret, ts, moved):
    assume(moved != ts)
    forged = f"t={moved},v1={sign(secret, ts, body)}"
    with pytest.raises(SignatureError, match="does not match"):
        verify(forged, body, [secret], now=NOW)


@given(body=bodies, secret=secrets, other=secrets, ts=timestamps)
def test_any_change_to_the_secret_fails(body, secret, other, ts):
    assume(other != secret)
    with pytest.raises(SignatureError, match="does not match"):
        verify(signature_header([other], ts, body), body, [secret], now=NOW)


@given(body=bodies, secret=secrets, ts=timestamps, index=st.integers(0, 63), bit=st.integers(0, 3))
def test_any_flipped_signature_digit_fails(body, secret, ts, index, bit):
    good = sign(secret, ts, body)
    digit = format(int(good[index], 16) ^ (1 << bit), "x")
    forged = good[:index] + digit + good[index + 1 :]
    with pytest.raises(SignatureError, match="does not match"):
        verify(f"t={ts},v1={forged}", body, [secret], now=NOW)


@given(body=bodies, secret=secrets, skew=st.integers(301, 10**9))
def test_a_timestamp_outside_the_window_fails_even_when_correctly_signed(body, secret, skew):
    for ts in (NOW - skew, NOW + skew):
        assume(ts >= 0)
        with pytest.raises(SignatureError, match="outside the tolerance window of 300 s"):
            verify(signature_header([secret], ts, body), body, [secret], now=NOW)


def test_the_signature_is_hmac_sha256_over_timestamp_dot_body():
    expected = hmac.new(b"whsec", b"1767225600.{}", hashlib.sha256).hexdigest()
    assert sign("whsec", 1767225600, b"{}") == expected


def test_rotation_any_active_secret_and_any_v1_matches():
    body = b'{"id":"evt-1"}'
    old_only = signature_header([b"old"], NOW, body)
    both = signature_header([b"new", b"old"], NOW, body)
    assert verify(old_only, body, parse_secrets("new, old"), now=NOW) == NOW
    assert verify(both, body, parse_secrets("new"), now=NOW) == NOW
    with pytest.raises(SignatureError, match="does not match"):
        verify(old_only, body, parse_secrets("new"), now=NOW)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing Keel-Signature header"),
        ("", "missing Keel-Signature header"),
        ("v1=abc", "Keel-Signature header has no t=<unix seconds>"),
        ("t=1767225600", "Keel-Signature header has no v1=<hex signature>"),
        ("t=1767225600,v0=abc", "Keel-Signature header has no v1=<hex signature>"),
        ("t=-5,v1=abc", "Keel-Signature timestamp must be Unix seconds (digits only)"),
        ("t=1e9,v1=abc", "Keel-Signature timestamp must be Unix seconds (digits only)"),
        ("t=1767225600," + ",".join(["v1=a"] * 9), "more than 8 signatures"),
        ("t=1," + "x" * 5000, "longer than 4096 chars"),
    ],
)
def test_malformed_headers_are_refused_with_their_reason(header, reason):
    with pytest.raises(SignatureError) as err:
        parse_signature_header(header)
    assert reason in str(err.value)


def test_a_non_ascii_signature_is_refused_not_a_crash():
    with pytest.raises(SignatureError, match="does not match"):
        verify(f"t={NOW},v1=é" + "a" * 63, b"{}", [b"s"], now=NOW)


def test_no_secret_refuses_everything():
    with pytest.raises(SignatureError, match="no secret is configured"):
        verify(signature_header([b"s"], NOW, b"{}"), b"{}", [], now=NOW)


def test_secrets_are_comma_separated_and_blanks_ignored():
    assert parse_secrets(" a , ,b,") == [b"a", b"b"]
    assert parse_secrets(None) == []


def test_the_message_id_is_a_function_of_source_and_event_id_only():
    assert message_id("ledger", "evt-1") == message_id("ledger", "evt-1")
    ids = {
        message_id("ledger", "evt-1"),
        message_id("ledger", "evt-2"),
        message_id("bank", "evt-1"),
    }
    assert len(ids) == 3
    assert len(message_id("a", "b")) == 32


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            b"{",
            "body is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2",
        ),
        (b"[1]", "body must be a JSON object, got an array"),
        (b"\xff{}", "body is not UTF-8: invalid byte at position 0"),
        (b"[" * 70 + b"]" * 70, "body nests deeper than 64 levels of arrays and objects"),
        (
            b'{"id": 1, "data": {"amount": 5, "amount": 500}}',
            "body holds the key 'amount' twice in one object",
        ),
    ],
)
def test_bodies_that_are_not_a_json_object_are_refused_with_the_reason(body, reason):
    with pytest.raises(RouteError) as err:
        parse_body(body)
    assert str(err.value) == reason


def test_event_id_and_route_errors_name_the_source_and_field():
    src = WebhookSource(
        "ledger",
        "KEEL_WEBHOOK_LEDGER_SECRETS",
        event_id=lambda b: b["id"],
        route=lambda b: WebhookSignal(b["workflow_id"], "paid", b.get("data")),
    )
    with pytest.raises(RouteError) as err:
        src.event_id_of({})
    assert str(err.value) == "cannot read the event id of a 'ledger' delivery: missing field 'id'"
    with pytest.raises(RouteError) as err:
        src.command_of({"id": "e"}, None)  # type: ignore[arg-type]
    assert str(err.value) == "cannot route a 'ledger' delivery: missing field 'workflow_id'"
    with pytest.raises(RouteError) as err:
        src.command_of({"workflow_id": "bad id"}, None)  # type: ignore[arg-type]
    assert str(err.value).startswith("invalid workflow id 'bad id'")
    assert src.event_id_of({"id": 42}) == "42"


def test_sources_are_declared_once_with_valid_names_on_the_app():
    from orchestrator.application.app import AppError, KeelApp
    from orchestrator.domain.model.errors import DefinitionError

    app = KeelApp("t")
    declared = app.webhook("ledger", secret_env="LEDGER_SECRETS", event_id=str, route=str)
    assert app.webhooks == {"ledger": declared}
    with pytest.raises(AppError, match="webhook source 'ledger' is already declared"):
        app.webhook("ledger", secret_env="OTHER", event_id=str, route=str)
    with pytest.raises(DefinitionError, match="webhook source name 'Bad/Name' must be"):
        app.webhook("Bad/Name", secret_env="X", event_id=str, route=str)
    with pytest.raises(DefinitionError, match="secret_env 'not a var' is not the name"):
        app.webhook("bank", secret_env="not a var", event_id=str, route=str)
    assert KeelApp("other").webhooks == {}


def test_the_example_app_serves_the_bundled_workflows_and_a_documents_source():
    from orchestrator.examples import app as bundled
    from orchestrator.examples.webhook_app import app

    assert app.definitions == bundled.definitions
    assert sorted(app.webhooks) == ["documents"]
    cmd = app.webhooks["documents"].command_of(
        {"type": "document.added", "workflow_id": "review-1", "document": "receipt"}, app
    )
    assert (cmd.workflow_id, cmd.payload.signal_name, cmd.payload.payload_json) == (
        "review-1",
        "documents_added",
        '{"document":"receipt"}',
    )


def test_a_route_returning_something_else_is_an_application_bug_not_a_bad_delivery():
    from orchestrator.domain.model.errors import KeelError

    src = WebhookSource("ledger", "S", event_id=lambda b: b["id"], route=lambda b: "oops")
    with pytest.raises(KeelError) as err:
        src.command_of({"id": "e"}, None)  # type: ignore[arg-type]
    assert not isinstance(err.value, RouteError)
    assert str(err.value) == (
        "webhook source 'ledger': route returned str, not WebhookSignal or WebhookStart (a bug in the application)"
    )


def test_a_signal_with_start_route_becomes_one_signal_with_start_command():
    from orchestrator.domain.model.messages import SignalWithStart
    from orchestrator.examples import app

    def route(body: dict) -> WebhookSignal:
        start = WebhookStart("document_review", body["workflow_id"], {"document": "passport"})
        return WebhookSignal(body["workflow_id"], body["signal"], {"document": "visa"}, start=start)

    src = WebhookSource("docs", "S", event_id=lambda b: b["id"], route=route)
    cmd = src.command_of({"workflow_id": "review-9", "signal": "documents_added"}, app)
    assert cmd.workflow_id == "review-9"
    assert cmd.payload == SignalWithStart(
        "document_review", '{"document":"passport"}', "documents_added", '{"document":"visa"}', 1
    )
    with pytest.raises(RouteError) as err:
        src.command_of({"workflow_id": "review-9", "signal": "paid"}, app)
    assert str(err.value) == "workflow 'document_review' v1 has no signal 'paid'"

    def elsewhere(body: dict) -> WebhookSignal:
        return WebhookSignal(
            "review-9", "documents_added", start=WebhookStart("document_review", "x", {})
        )

    other = WebhookSource("docs", "S", event_id=lambda b: b["id"], route=elsewhere)
    with pytest.raises(RouteError) as err:
        other.command_of({}, app)
    assert str(err.value) == (
        "signal 'documents_added' to 'review-9' starts another workflow id ('x'); "
        "signal-with-start needs the same one"
    )
