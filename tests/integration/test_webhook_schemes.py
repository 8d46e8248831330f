"""Every signature scheme end to end, each delivery signed by the sender's own library.

For each provider scheme (docs/connector.md, "Signature schemes") the real ``keel
connector`` and orchestrator run ``tests/integration/schemes_app.py``: a delivery signed by
the provider's library starts ``tally``, two more signal it (one signed with the old
secret of a rotation) and it completes with exactly those two signals. Every delivery is
sent twice (the second is a ``200`` duplicate, keyed by the scheme's event id); a tampered
body, a wrong secret, an old timestamp and a missing signature are refused with their
exact answer; at the end the commands topic holds exactly the three commands. Signers:
``standardwebhooks`` (``Webhook.sign``), Stripe's ``WebhookSignature.
generate_signature_header``, ``@octokit/webhooks-methods`` ``sign`` (node,
tests/senders/sign.mjs), and slack_sdk's ``SignatureVerifier.generate_signature``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import stripe
from slack_sdk.signature import SignatureVerifier
from standardwebhooks import Webhook

from connectors.webhooks import message_id
from orchestrator import SignatureScheme
from orchestrator.client.client import KeelClient
from tests.integration.schemes_app import SECRETS_ENV
from tests.integration.schemes_app import app as schemes_app
from tests.integration.test_connector import commands, request
from tests.support import wait_until

APP = "tests.integration.schemes_app:app"
SENDERS = Path(__file__).resolve().parents[1] / "senders"
MISMATCH = "{} does not match the body under any active secret"
WINDOW = "{} is outside the tolerance window of 300 s (sign with the current time)"


# ---------------------------------------------------------------------------- the senders
def github_sign(secret: str, body: bytes) -> str:
    """``X-Hub-Signature-256`` by GitHub's own ``@octokit/webhooks-methods``."""
    assert shutil.which("node"), (
        "node not found: `make setup` installs it (GitHub's signer runs on it)"
    )
    if not (SENDERS / "node_modules" / "@octokit" / "webhooks-methods").is_dir():
        raise AssertionError("run `make tests/senders/node_modules` (npm ci in tests/senders)")
    done = subprocess.run(
        ["node", str(SENDERS / "sign.mjs"), secret],
        input=body,
        capture_output=True,
        check=True,
        timeout=30,
    )
    return done.stdout.decode()


@dataclass(frozen=True)
class Sender:
    """One provider: its source, how it signs, what its events look like, its refusals."""

    source: str
    scheme: SignatureScheme
    new_secret: str
    old_secret: str
    # (event id, kind, n) -> (body, headers that are not the signature)
    event: Callable[[str, str, int], tuple[dict[str, Any], dict[str, str]]]
    # (secret, body, unix seconds, headers) -> the signature headers
    sign: Callable[[str, bytes, int, dict[str, str]], dict[str, str]]
    signature_header: str
    window_header: str | None  # None: the scheme signs no time
    workflow_id: str

    def deliver(
        self, url: str, body: bytes, extra: dict[str, str], secret: str | None = None,
        ts: int | None = None, sign_body: bytes | None = None,
    ) -> tuple[int, dict[str, Any]]:  # fmt: skip
        ts = int(time.time()) if ts is None else ts
        signed = self.sign(secret or self.new_secret, sign_body or body, ts, extra)
        headers = {"Content-Type": "application/json", **extra, **signed}
        return request("POST", f"{url}/webhooks/{self.source}", body, headers)


def whsec() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def standard_event(eid: str, kind: str, n: int) -> tuple[dict[str, Any], dict[str, str]]:
    data = {"invoice_id": "in-7", "customer": "cus-1", "amount": 100 * n}
    body = {"type": "invoice.created" if kind == "start" else "invoice.paid", "data": data}
    return body, {"webhook-id": eid}


def standard_sign(secret: str, body: bytes, ts: int, extra: dict[str, str]) -> dict[str, str]:
    stamp = datetime.fromtimestamp(ts, tz=UTC)
    sig = Webhook(secret).sign(extra["webhook-id"], stamp, body.decode())
    return {"webhook-timestamp": str(ts), "webhook-signature": sig}


def github_event(eid: str, kind: str, n: int) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {
        "action": "opened" if kind == "start" else "created",
        "issue": {"number": 42, "title": "Crash on start"},
        "repository": {"full_name": "octo-org/hello-world"},
        "sender": {"login": "octocat"},
    }
    if kind != "start":
        body["comment"] = {"body": f"comment {n}"}
    event = "issues" if kind == "start" else "issue_comment"
    return body, {"X-GitHub-Delivery": eid, "X-GitHub-Event": event}


def github_headers(secret: str, body: bytes, ts: int, extra: dict[str, str]) -> dict[str, str]:
    return {"X-Hub-Signature-256": github_sign(secret, body)}


def stripe_event(eid: str, kind: str, n: int) -> tuple[dict[str, Any], dict[str, str]]:
    if kind == "start":
        obj = {"id": "pi_3MtwBw", "object": "payment_intent", "customer": "cus_NffrFeUfNV2Hib"}
        kind_name = "payment_intent.created"
    else:
        obj = {"id": f"ch_{n}", "object": "charge", "payment_intent": "pi_3MtwBw", "amount": n}
        kind_name = "charge.succeeded"
    return {"id": eid, "object": "event", "type": kind_name, "data": {"object": obj}}, {}


def stripe_sign(secret: str, body: bytes, ts: int, extra: dict[str, str]) -> dict[str, str]:
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, ts)
    return {"Stripe-Signature": header}


def slack_event(eid: str, kind: str, n: int) -> tuple[dict[str, Any], dict[str, str]]:
    if kind == "start":
        inner = {"type": "app_mention", "user": "U061F7AUR", "channel": "C123", "ts": "1.2"}
    else:
        item = {"type": "message", "channel": "C123", "ts": "1.2"}
        inner = {"type": "reaction_added", "user": "U0G9QF9C6", "reaction": f"r{n}", "item": item}
    body = {"type": "event_callback", "team_id": "T1", "event_id": eid, "event": inner}
    return body, {}


def slack_sign(secret: str, body: bytes, ts: int, extra: dict[str, str]) -> dict[str, str]:
    sig = SignatureVerifier(secret).generate_signature(timestamp=str(ts), body=body.decode())
    assert sig is not None
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sig}


SENDERS_BY_SCHEME = {
    SignatureScheme.STANDARD_WEBHOOKS: Sender(
        "billing", SignatureScheme.STANDARD_WEBHOOKS, whsec(), whsec(), standard_event,
        standard_sign, "webhook-signature", "webhook-timestamp", "invoice-in-7",
    ),
    SignatureScheme.GITHUB: Sender(
        "github", SignatureScheme.GITHUB, uuid.uuid4().hex, uuid.uuid4().hex, github_event,
        github_headers, "X-Hub-Signature-256", None, "issue-octo-org-hello-world-42",
    ),
    SignatureScheme.STRIPE: Sender(
        "stripe", SignatureScheme.STRIPE, f"whsec_{uuid.uuid4().hex}",
        f"whsec_{uuid.uuid4().hex}", stripe_event, stripe_sign, "Stripe-Signature",
        "Stripe-Signature timestamp", "payment-pi_3MtwBw",
    ),
    SignatureScheme.SLACK: Sender(
        "slack", SignatureScheme.SLACK, uuid.uuid4().hex, uuid.uuid4().hex, slack_event,
        slack_sign, "X-Slack-Signature", "X-Slack-Request-Timestamp", "thread-C123-1.2",
    ),
}  # fmt: skip


def start_connector(services, app: str = APP, **env: str) -> str:
    """`keel connector --port 0` for ``app``; its URL once it listens."""
    proc = services.start("connector", "--app", app, "--port", "0", **env)

    def listening() -> str | None:
        assert proc.poll() is None, proc.log_path.read_text()[-2000:]
        lines = proc.log_path.read_text().splitlines()
        found = [line.split()[3] for line in lines if line.startswith("connector listening on ")]
        return found[0] if found else None

    return wait_until(listening, 60, "the connector to listen", 0.1)


def secrets_env(active: dict[SignatureScheme, str]) -> dict[str, str]:
    """Every source's variable: the given secrets, others a placeholder of their form."""
    return {
        SECRETS_ENV[scheme]: active.get(scheme, f"{sender.new_secret},{sender.old_secret}")
        for scheme, sender in SENDERS_BY_SCHEME.items()
    }


# ---------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("scheme", list(SENDERS_BY_SCHEME), ids=str)
def test_a_delivery_signed_by_the_providers_library_runs_once_per_event_id(
    settings, services, scheme
):
    sender = SENDERS_BY_SCHEME[scheme]
    services.start("orchestrator", "--app", APP)
    url = start_connector(services, **secrets_env({}))
    client = KeelClient(settings, schemes_app)
    wf = sender.workflow_id
    tag = uuid.uuid4().hex[:8]
    try:
        accepted = []
        for number, (kind, secret) in enumerate(
            [("start", sender.new_secret), ("signal", sender.new_secret),
             ("signal", sender.old_secret)]  # the old secret of a rotation still holds
        ):  # fmt: skip
            eid = f"evt-{tag}-{number}"
            event, extra = sender.event(eid, kind, number)
            body = json.dumps(event).encode()
            first = sender.deliver(url, body, extra, secret)
            again = sender.deliver(url, body, extra, secret)  # a retry of the same event
            mid = message_id(sender.source, eid)
            assert first == (202, {"status": "accepted", "duplicate": False,
                                   "source": sender.source, "event_id": eid,
                                   "workflow_id": wf, "message_id": mid}), first  # fmt: skip
            assert again[0] == 200 and again[1]["status"] == "duplicate", again
            assert again[1]["message_id"] == mid
            accepted.append(mid)
            if kind == "start":
                wait_until(lambda: client.projection.status(wf) == "waiting", 60, "tally to wait")
                refusals(sender, url, f"evt-{tag}-refused")
        done = client.wait(wf, 60)
        assert done.status == "completed", done
        hooks = done.output["hooks"]
        assert len(hooks) == 2, hooks  # two signals, each applied once
        on_topic = [env.message_id for env in commands(settings)]
        assert sorted(on_topic) == sorted(accepted)  # nothing from a refusal or a duplicate
    finally:
        client.close()


def refusals(sender: Sender, url: str, eid: str) -> None:
    """A tampered body, a wrong secret, an old timestamp, no signature: each refused."""
    event, extra = sender.event(eid, "signal", 9)
    body = json.dumps(event).encode()
    tampered = body.replace(b'"hook', b'"hooK').replace(b"9", b"8")
    assert tampered != body
    mismatch = (401, {"error": MISMATCH.format(sender.signature_header)})
    assert sender.deliver(url, tampered, extra, sign_body=body) == mismatch
    wrong = whsec() if sender.scheme is SignatureScheme.STANDARD_WEBHOOKS else uuid.uuid4().hex
    assert sender.deliver(url, body, extra, secret=wrong) == mismatch
    if sender.window_header is not None:
        window = (401, {"error": WINDOW.format(sender.window_header)})
        assert sender.deliver(url, body, extra, ts=int(time.time()) - 301) == window
        assert sender.deliver(url, body, extra, ts=int(time.time()) + 600) == window
    unsigned = request(
        "POST", f"{url}/webhooks/{sender.source}", body,
        {"Content-Type": "application/json", **extra},
    )  # fmt: skip
    assert unsigned[0] == 401 and unsigned[1]["error"].startswith("missing "), unsigned


def test_handshakes_are_answered_at_once_and_write_nothing(settings, services):
    """Slack's url_verification gets its challenge back; GitHub's ping gets a pong."""
    url = start_connector(services, **secrets_env({}))
    slack = SENDERS_BY_SCHEME[SignatureScheme.SLACK]
    challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    body = json.dumps(
        {"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "challenge": challenge, "type": "url_verification"}
    ).encode()
    assert slack.deliver(url, body, {}) == (200, {"challenge": challenge})
    forged = slack.deliver(url, body, {}, secret="not-the-secret")
    assert forged == (401, {"error": MISMATCH.format("X-Slack-Signature")})

    github = SENDERS_BY_SCHEME[SignatureScheme.GITHUB]
    ping = json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()
    headers = {"X-GitHub-Delivery": str(uuid.uuid4()), "X-GitHub-Event": "ping"}
    assert github.deliver(url, ping, headers) == (200, {"status": "pong"})
    assert commands(settings) == []


def test_a_standard_webhooks_secret_not_in_its_form_stops_the_start(settings, services):
    env = secrets_env({SignatureScheme.STANDARD_WEBHOOKS: f"{whsec()},whsec_%%%"})
    proc = services.start("connector", "--app", APP, "--port", "0", **env)
    assert proc.wait(60) != 0
    log = proc.log_path.read_text()
    assert (
        "webhook source 'billing': secret 2 in KEEL_WEBHOOK_BILLING_SECRETS is not "
        "whsec_<base64> (a Standard Webhooks secret)"
    ) in log
    assert "%%%" not in log
