"""The scheme verifiers (connectors/schemes/) against the providers' published test vectors
and their own signing libraries; every refusal's exact reason."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
import stripe
from slack_sdk.signature import SignatureVerifier
from standardwebhooks import Webhook

from connectors.schemes.standard_signature import key_of
from connectors.schemes.verdict import Verified
from connectors.schemes.verifiers import keys_of, verify_delivery
from connectors.signing import SignatureError
from orchestrator import KeelApp, SignatureScheme, WebhookEvent, WebhookSignal, WebhookSource
from orchestrator.application.webhook_sources import RouteError
from orchestrator.domain.model.errors import ConfigError, DefinitionError

NOW = 1_767_225_600


def source(scheme: SignatureScheme) -> WebhookSource:
    return WebhookSource(
        "hook", "HOOK_SECRETS", None, lambda e: WebhookSignal("wf", "s"), scheme=scheme
    )


def check(scheme: SignatureScheme, secrets: str, headers: dict[str, str], body: bytes,
          now: float = NOW) -> Verified:  # fmt: skip
    src = source(scheme)
    return verify_delivery(src, keys_of(src, secrets), headers, body, now)


def refused(scheme, secrets, headers, body, now: float = NOW) -> str:
    with pytest.raises((SignatureError, RouteError)) as err:
        check(scheme, secrets, headers, body, now)
    return f"{type(err.value).__name__}: {err.value}"


# ------------------------------------------------------------------ Standard Webhooks
# The spec's test vector, used by the reference libraries' own tests.
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID, SW_TS, SW_BODY = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
SW_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
SW = SignatureScheme.STANDARD_WEBHOOKS


def sw_headers(sig: str = SW_SIG, ts: int = SW_TS, msg_id: str = SW_ID) -> dict[str, str]:
    return {"Webhook-Id": msg_id, "Webhook-Timestamp": str(ts), "Webhook-Signature": sig}


def test_standard_webhooks_the_specs_vector_verifies():
    got = check(SW, SW_SECRET, sw_headers(), SW_BODY, now=SW_TS)
    assert got == Verified(SW_ID, "", {"test": 2432232314})
    # several signatures, one of another version, one valid; and a rotation's two secrets
    many = f"v1a,abc v1,{base64.b64encode(b'x' * 32).decode()} {SW_SIG}"
    other = "whsec_" + base64.b64encode(b"k" * 24).decode()
    assert check(SW, f"{other},{SW_SECRET}", sw_headers(many), SW_BODY, now=SW_TS).event_id == SW_ID


def test_standard_webhooks_refusals():
    mismatch = "SignatureError: webhook-signature does not match the body under any active secret"
    window = (
        "SignatureError: webhook-timestamp is outside the tolerance window of 300 s "
        "(sign with the current time)"
    )
    assert refused(SW, SW_SECRET, sw_headers(), SW_BODY[:-1] + b"5}", SW_TS) == mismatch
    assert refused(SW, SW_SECRET, sw_headers(msg_id="msg_other"), SW_BODY, SW_TS) == mismatch
    assert refused(SW, "whsec_" + "A" * 32, sw_headers(), SW_BODY, SW_TS) == mismatch
    assert refused(SW, SW_SECRET, sw_headers(), SW_BODY, SW_TS + 301) == window
    assert refused(SW, SW_SECRET, sw_headers(), SW_BODY, SW_TS - 301) == window
    headers = sw_headers()
    del headers["Webhook-Id"]
    assert refused(SW, SW_SECRET, headers, SW_BODY, SW_TS) == (
        "SignatureError: missing webhook-id header"
    )
    assert refused(SW, SW_SECRET, sw_headers("v2,abc"), SW_BODY, SW_TS) == (
        "SignatureError: webhook-signature has no v1,<base64 signature>"
    )
    assert refused(SW, SW_SECRET, sw_headers("v1,%%%"), SW_BODY, SW_TS) == (
        "SignatureError: webhook-signature holds a v1 signature that is not base64"
    )


def test_standard_webhooks_signed_by_its_library_with_the_type_of_the_body():
    secret = "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()
    body = json.dumps({"type": "invoice.paid", "data": {"id": 7}})
    from datetime import UTC, datetime

    sig = Webhook(secret).sign("msg_1", datetime.fromtimestamp(NOW, tz=UTC), body)
    got = check(SW, secret, sw_headers(sig, NOW, "msg_1"), body.encode())
    assert (got.event_id, got.event_type) == ("msg_1", "invoice.paid")


def test_standard_webhooks_secrets_are_whsec_base64():
    assert key_of(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == base64.b64decode(
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    )
    assert key_of(b"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == key_of(SW_SECRET.encode())
    with pytest.raises(ConfigError) as err:
        keys_of(source(SW), f"{SW_SECRET}, whsec_not*base64")
    assert str(err.value) == (
        "webhook source 'hook': secret 2 in HOOK_SECRETS is not whsec_<base64> "
        "(a Standard Webhooks secret)"
    )
    with pytest.raises(ConfigError, match="needs its secrets in HOOK_SECRETS"):
        keys_of(source(SW), " , ")


# ------------------------------------------------------------------ GitHub
# GitHub's documented example: this secret and payload give this signature.
GH_SECRET, GH_PAYLOAD = "It's a Secret to Everybody", b"Hello, World!"
GH_SIG = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
GH = SignatureScheme.GITHUB


def gh_headers(sig: str = GH_SIG, event: str = "issues") -> dict[str, str]:
    return {"X-Hub-Signature-256": sig, "X-GitHub-Delivery": "72d3162e", "X-GitHub-Event": event}


def test_github_the_documented_example_passes_the_signature_check():
    # the signature holds; the example's body is not JSON, which is the next check
    assert refused(GH, GH_SECRET, gh_headers(), GH_PAYLOAD) == (
        "RouteError: body is not valid JSON: Expecting value at line 1 column 1"
    )
    assert refused(
        GH, GH_SECRET, gh_headers(GH_SIG.upper().replace("SHA256", "sha256")), GH_PAYLOAD
    ).startswith("RouteError: body is not valid JSON")
    assert refused(GH, GH_SECRET + "!", gh_headers(), GH_PAYLOAD) == (
        "SignatureError: X-Hub-Signature-256 does not match the body under any active secret"
    )


def gh_sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_github_reads_the_delivery_and_event_headers_and_answers_a_ping():
    body = b'{"action": "opened"}'
    got = check(GH, f"new,{GH_SECRET}", gh_headers(gh_sign(GH_SECRET, body)), body)
    assert got == Verified("72d3162e", "issues", {"action": "opened"})
    ping = check(GH, GH_SECRET, gh_headers(gh_sign(GH_SECRET, body), "ping"), body)
    assert ping.reply == {"status": "pong"}
    headers = gh_headers(gh_sign(GH_SECRET, body))
    del headers["X-GitHub-Delivery"]
    assert refused(GH, GH_SECRET, headers, body) == "RouteError: missing X-GitHub-Delivery header"
    assert refused(GH, GH_SECRET, gh_headers("sha1=abc"), body) == (
        "SignatureError: X-Hub-Signature-256 must be sha256=<64 hex digits>"
    )
    assert refused(GH, GH_SECRET, {}, body) == "SignatureError: missing X-Hub-Signature-256 header"


# ------------------------------------------------------------------ Stripe
ST = SignatureScheme.STRIPE
ST_SECRET = "whsec_test_secret"


def st_body(**fields: Any) -> bytes:
    return json.dumps(
        {"id": "evt_1", "object": "event", "type": "charge.succeeded", **fields}
    ).encode()


def test_stripe_signed_by_its_library_with_the_event_id_of_the_body():
    body = st_body()
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), ST_SECRET, NOW)
    got = check(ST, ST_SECRET, {"Stripe-Signature": header}, body)
    assert (got.event_id, got.event_type) == ("evt_1", "charge.succeeded")
    # a header with a v0 entry and two v1 entries (Stripe's rotation), one valid
    rotated = header.replace(",v1=", ",v0=00,v1=" + "0" * 64 + ",v1=")
    assert (
        check(ST, f"whsec_new,{ST_SECRET}", {"stripe-signature": rotated}, body).event_id == "evt_1"
    )


def test_stripe_refusals():
    body = st_body()
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), ST_SECRET, NOW)
    assert refused(ST, "whsec_other", {"Stripe-Signature": header}, body) == (
        "SignatureError: Stripe-Signature does not match the body under any active secret"
    )
    assert refused(ST, ST_SECRET, {"Stripe-Signature": header}, body, NOW + 301) == (
        "SignatureError: Stripe-Signature timestamp is outside the tolerance window of 300 s "
        "(sign with the current time)"
    )
    no_id = json.dumps({"type": "charge.succeeded"}).encode()
    header = stripe.WebhookSignature.generate_signature_header(no_id.decode(), ST_SECRET, NOW)
    assert refused(ST, ST_SECRET, {"Stripe-Signature": header}, no_id) == (
        "RouteError: a Stripe delivery's body has no 'id' field"
    )
    long_id = st_body(id="e" * 201)
    header = stripe.WebhookSignature.generate_signature_header(long_id.decode(), ST_SECRET, NOW)
    assert refused(ST, ST_SECRET, {"Stripe-Signature": header}, long_id) == (
        "RouteError: the event id of a 'hook' delivery is 201 characters; the limit is 200"
    )


# ------------------------------------------------------------------ Slack
# Slack's documented example ("Verifying requests from Slack"): a slash command's body.
SL_SECRET, SL_TS = "8f742231b10e8888abcd99yyyzzz85a5", 1531420618
SL_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
    b"G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook"
    b"-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F39770"
    b"0885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10"
    b"d2c447fce8b6703c"
)
SL_SIG = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
SL = SignatureScheme.SLACK


def sl_headers(sig: str, ts: int) -> dict[str, str]:
    return {"X-Slack-Signature": sig, "X-Slack-Request-Timestamp": str(ts)}


def test_slack_the_documented_example_passes_the_signature_check():
    # the signature holds; a slash command is form-encoded, and only Events API JSON is read
    assert refused(SL, SL_SECRET, sl_headers(SL_SIG, SL_TS), SL_BODY, SL_TS).startswith(
        "RouteError: body is not valid JSON"
    )
    assert refused(SL, SL_SECRET, sl_headers(SL_SIG, SL_TS), SL_BODY + b"x", SL_TS) == (
        "SignatureError: X-Slack-Signature does not match the body under any active secret"
    )
    assert refused(SL, SL_SECRET, sl_headers(SL_SIG, SL_TS), SL_BODY, SL_TS + 301) == (
        "SignatureError: X-Slack-Request-Timestamp is outside the tolerance window of 300 s "
        "(sign with the current time)"
    )


def sl_sign(body: bytes, ts: int = NOW, secret: str = SL_SECRET) -> dict[str, str]:
    sig = SignatureVerifier(secret).generate_signature(timestamp=str(ts), body=body.decode())
    assert sig is not None
    return sl_headers(sig, ts)


def test_slack_events_and_the_url_verification_handshake():
    event = {"type": "event_callback", "event_id": "Ev1", "event": {"type": "app_mention"}}
    body = json.dumps(event).encode()
    got = check(SL, f"rotated,{SL_SECRET}", sl_sign(body), body)
    assert (got.event_id, got.event_type, got.reply) == ("Ev1", "app_mention", None)
    hello = json.dumps({"type": "url_verification", "challenge": "3eZbrw1a", "token": "t"})
    got = check(SL, SL_SECRET, sl_sign(hello.encode()), hello.encode())
    assert got.reply == {"challenge": "3eZbrw1a"}
    # the handshake is signed too
    assert refused(SL, "other", sl_sign(hello.encode()), hello.encode()).startswith(
        "SignatureError: X-Slack-Signature does not match"
    )
    assert refused(SL, SL_SECRET, sl_headers("v1=" + "0" * 64, NOW), body) == (
        "SignatureError: X-Slack-Signature must be v0=<64 hex digits>"
    )
    assert refused(SL, SL_SECRET, {"X-Slack-Signature": SL_SIG}, body) == (
        "SignatureError: missing X-Slack-Request-Timestamp header"
    )
    assert refused(
        SL, SL_SECRET, sl_headers(SL_SIG, NOW) | {"X-Slack-Request-Timestamp": "1.5"}, body
    ) == ("SignatureError: X-Slack-Request-Timestamp must be Unix seconds (digits only)")


# ------------------------------------------------------------------ declarations
def test_a_provider_scheme_names_the_event_id_and_routes_a_webhook_event():
    app = KeelApp("t")
    seen = []

    def route(event: WebhookEvent) -> WebhookSignal:
        seen.append(event)
        return WebhookSignal("wf-1", "paid", event.body)

    declared = app.webhook("gh", secret_env="GH", route=route, scheme="github")
    assert declared.scheme is SignatureScheme.GITHUB
    cmd = declared.command_of(WebhookEvent("d-1", "push", {"a": 1}), app)
    assert (cmd.workflow_id, cmd.payload.signal_name) == ("wf-1", "paid")
    assert seen == [WebhookEvent("d-1", "push", {"a": 1})]
    with pytest.raises(DefinitionError) as err:
        app.webhook("gh2", secret_env="GH", route=route, scheme="github", event_id=str)
    assert str(err.value) == (
        "webhook source 'gh2': the github scheme names the event id; leave event_id out"
    )
    with pytest.raises(DefinitionError) as err:
        app.webhook("gh3", secret_env="GH", route=route, scheme="gitlab")
    assert str(err.value) == (
        "webhook source 'gh3': unknown scheme 'gitlab'; known: keel, standard-webhooks, "
        "github, stripe, slack"
    )
    with pytest.raises(DefinitionError, match="event_id and route must be functions"):
        app.webhook("plain", secret_env="P", route=route)  # keel needs its event_id
    assert app.webhook("plain", secret_env="P", route=str, event_id=str).scheme == "keel"
