"""Webhook sources: what an application declares about each sender, checked at declaration.

An application declares each sender once with :meth:`KeelApp.webhook
<orchestrator.application.app.KeelApp.webhook>` (docs/connector.md)::

    app.webhook(
        "ledger",
        secret_env="KEEL_WEBHOOK_LEDGER_SECRETS",
        event_id=lambda body: body["id"],
        route=lambda body: WebhookSignal(body["workflow_id"], "payment_settled", body["data"]),
    )

``event_id`` names the delivery (the sender's own event id: its retries repeat it);
``route`` maps the parsed JSON body to a :class:`WebhookSignal` to a workflow or a
:class:`WebhookStart` of one (``orchestrator.webhooks``). Both run on the sender's input, so
any exception they raise is answered 400 with its reason. ``scheme`` picks how deliveries
are signed (:class:`SignatureScheme`, ``keel`` by default): under a provider's scheme the
provider names the event id and type, so ``event_id`` is left out and ``route`` receives a
:class:`WebhookEvent`. This module is authoring: it imports the domain only, so the
application object holds its sources without loading the connector
(``connectors/webhooks.py`` reads deliveries; ``connectors/server/service.py`` serves them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from orchestrator.domain.model.errors import DefinitionError, InvalidInputError, KeelError
from orchestrator.domain.model.ids import MAX_ID_LENGTH, check_workflow_id
from orchestrator.domain.model.limits import check_payload_size
from orchestrator.domain.model.messages import SignalWithStart, SignalWorkflow, StartWorkflow

__all__ = [
    "DEFAULT_DEDUPE_TTL_S",
    "DEFAULT_TOLERANCE_S",
    "MAX_EVENT_ID_CHARS",
    "Command",
    "RouteError",
    "SignatureScheme",
    "StartValidator",
    "WebhookEvent",
    "WebhookSignal",
    "WebhookSource",
    "WebhookStart",
    "check_event_id",
]

#: The longest event id a sender may use.
MAX_EVENT_ID_CHARS = MAX_ID_LENGTH
#: How long a delivered event id is remembered in Redis (7 days: longer than any
#: sender's retry schedule; past it the message id still stops a repeat).
DEFAULT_DEDUPE_TTL_S = 7 * 24 * 3600
#: How far (seconds, either way) a signature's timestamp may be from the receiver's clock.
DEFAULT_TOLERANCE_S = 300

_SOURCE_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_SIGNAL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")


class SignatureScheme(StrEnum):
    """How a source's deliveries are signed, and where their event id comes from
    (docs/connector.md, "Signature schemes")."""

    KEEL = "keel"  # Keel-Signature: t=,v1=<hex>; event id from the declared event_id(body)
    STANDARD_WEBHOOKS = "standard-webhooks"  # webhook-id / -timestamp / -signature: v1,<b64>
    GITHUB = "github"  # X-Hub-Signature-256: sha256=<hex>; X-GitHub-Delivery, X-GitHub-Event
    STRIPE = "stripe"  # Stripe-Signature: t=,v1=<hex>; the body's id and type
    SLACK = "slack"  # X-Slack-Signature: v0=<hex>, X-Slack-Request-Timestamp; event_id


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """A verified delivery under a provider's scheme: what its ``route`` receives.

    ``id`` is the provider's event id (dedupe uses it), ``type`` its event type ("" when
    the provider names none), ``body`` the parsed JSON object.
    """

    id: str
    type: str
    body: dict[str, Any]


class StartValidator(Protocol):
    """What a routed start is checked against: the application (``KeelApp``)."""

    def validate_start(self, name: str, version: int | None, input_obj: Any) -> Any: ...


class RouteError(InvalidInputError):
    """A delivery's body cannot be read as the source declares (answered 400)."""


@dataclass(frozen=True, slots=True)
class WebhookSignal:
    """Deliver signal ``name`` with ``payload`` (any JSON value) to ``workflow_id``;
    with ``start``, first start that run (same workflow id) if the workflow has none, in
    one command (docs/workflows.md, "Signal-with-start")."""

    workflow_id: str
    name: str
    payload: Any = None
    start: WebhookStart | None = None


@dataclass(frozen=True, slots=True)
class WebhookStart:
    """Start workflow ``name`` (latest version unless ``version``) as ``workflow_id``.

    A start of an id that exists already creates nothing, so a repeat is harmless.
    """

    name: str
    workflow_id: str
    input: Any
    version: int | None = None


@dataclass(frozen=True, slots=True)
class Command:
    """The command a delivery becomes, ready to be wrapped in an envelope."""

    workflow_id: str
    payload: SignalWorkflow | StartWorkflow | SignalWithStart


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, KeyError):
        return f"missing field {text}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class WebhookSource:
    """One sender of webhooks, declared with :meth:`KeelApp.webhook`.

    ``secret_env`` names the environment variable holding the active secrets,
    comma-separated (two during a rotation); the connector reads it at start. Under the
    ``keel`` scheme ``event_id`` and ``route`` take the body; under a provider's scheme
    ``event_id`` is None (the provider names it) and ``route`` takes a WebhookEvent.
    """

    name: str
    secret_env: str
    event_id: Callable[[dict[str, Any]], Any] | None
    route: Callable[[Any], WebhookSignal | WebhookStart]
    tolerance_s: float = DEFAULT_TOLERANCE_S
    dedupe_ttl_s: int = DEFAULT_DEDUPE_TTL_S
    scheme: SignatureScheme = SignatureScheme.KEEL
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SOURCE_RE.fullmatch(self.name):
            raise DefinitionError(
                f"webhook source name {self.name!r} must be 1-64 characters: a lowercase "
                "letter or digit first, then lowercase letters, digits, _ and -"
            )
        if not isinstance(self.secret_env, str) or not _ENV_RE.fullmatch(self.secret_env):
            raise DefinitionError(
                f"webhook source '{self.name}': secret_env {self.secret_env!r} is not the "
                "name of an environment variable"
            )
        try:
            scheme = SignatureScheme(self.scheme)
        except ValueError:
            known = ", ".join(SignatureScheme)
            raise DefinitionError(
                f"webhook source '{self.name}': unknown scheme {str(self.scheme)[:40]!r}; "
                f"known: {known}"
            ) from None
        object.__setattr__(self, "scheme", scheme)
        if scheme is SignatureScheme.KEEL:
            if not callable(self.event_id) or not callable(self.route):
                raise DefinitionError(
                    f"webhook source '{self.name}': event_id and route must be functions of "
                    "the body"
                )
        elif self.event_id is not None:
            raise DefinitionError(
                f"webhook source '{self.name}': the {scheme} scheme names the event id; "
                "leave event_id out"
            )
        elif not callable(self.route):
            raise DefinitionError(
                f"webhook source '{self.name}': route must be a function of a WebhookEvent"
            )
        if not 0 < self.tolerance_s <= 24 * 3600:
            raise DefinitionError(
                f"webhook source '{self.name}': tolerance_s must be in (0, 86400] seconds"
            )
        if not 60 <= self.dedupe_ttl_s <= 366 * 24 * 3600:
            raise DefinitionError(
                f"webhook source '{self.name}': dedupe_ttl_s must be 60 s to 366 days"
            )

    def event_id_of(self, body: dict[str, Any]) -> str:
        """The sender's event id of a ``keel`` delivery (text or an integer, at most 200
        chars); a provider's scheme reads it from the delivery (connectors/schemes/)."""
        if self.event_id is None:
            raise KeelError(f"webhook source '{self.name}': the {self.scheme} scheme names it")
        try:
            value = self.event_id(body)
        except Exception as exc:
            raise RouteError(
                f"cannot read the event id of a '{self.name}' delivery: {_reason(exc)}"
            ) from None
        return check_event_id(self.name, value)

    def command_of(self, delivery: dict[str, Any] | WebhookEvent, app: StartValidator) -> Command:
        """The command this delivery asks for, checked as the client checks one: ``route``
        takes the body under ``keel``, the WebhookEvent under a provider's scheme."""
        if isinstance(delivery, WebhookEvent) and self.scheme is SignatureScheme.KEEL:
            delivery = delivery.body
        try:
            routed = self.route(delivery)
        except Exception as exc:
            raise RouteError(f"cannot route a '{self.name}' delivery: {_reason(exc)}") from None
        try:
            if isinstance(routed, WebhookSignal):
                return self._signal(routed, app)
            if isinstance(routed, WebhookStart):
                return self._start(routed, app)
        except (InvalidInputError, ValueError, TypeError) as exc:
            raise RouteError(str(exc)) from None
        raise KeelError(
            f"webhook source '{self.name}': route returned {type(routed).__name__}, "
            "not WebhookSignal or WebhookStart (a bug in the application)"
        )

    def _signal(self, s: WebhookSignal, app: StartValidator) -> Command:
        wid = check_workflow_id(s.workflow_id)
        if not isinstance(s.name, str) or not _SIGNAL_RE.fullmatch(s.name):
            raise RouteError(f"signal name {str(s.name)[:60]!r} is not a valid signal name")
        payload_json = _dumps(s.payload, f"payload of signal '{s.name}'")
        if s.start is None:
            return Command(wid, SignalWorkflow(s.name, payload_json))
        if s.start.workflow_id != wid:
            raise RouteError(
                f"signal '{s.name}' to '{wid}' starts another workflow id "
                f"('{s.start.workflow_id}'); signal-with-start needs the same one"
            )
        definition = app.validate_start(s.start.name, s.start.version, s.start.input)
        if s.name not in definition.signal_names:
            raise RouteError(f"{definition.label} has no signal '{s.name}'")
        input_json = _dumps(s.start.input, f"input of {definition.label}")
        return Command(
            wid,
            SignalWithStart(definition.name, input_json, s.name, payload_json, definition.version),
        )

    def _start(self, s: WebhookStart, app: StartValidator) -> Command:
        wid = check_workflow_id(s.workflow_id)
        definition = app.validate_start(s.name, s.version, s.input)
        input_json = _dumps(s.input, f"input of {definition.label}")
        return Command(wid, StartWorkflow(definition.name, definition.version, input_json))


def check_event_id(source: str, value: Any) -> str:
    """``value`` as an event id of ``source``: non-empty text (or an integer), at most
    :data:`MAX_EVENT_ID_CHARS`; RouteError with the reason else."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise RouteError(
            f"the event id of a '{source}' delivery must be non-empty text, "
            f"got {json.dumps(value)[:60]}"
        )
    if len(value) > MAX_EVENT_ID_CHARS:
        raise RouteError(
            f"the event id of a '{source}' delivery is {len(value)} characters; "
            f"the limit is {MAX_EVENT_ID_CHARS}"
        )
    return value


def _dumps(value: Any, what: str) -> str:
    try:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RouteError(f"{what} is not JSON: {exc}") from None
    check_payload_size(text, what)
    return text
