"""The driver at work in a batch of ``keel evaluate --app``: each poll, every run that
waits is answered by the first rule of the user's ``Driver``
(``orchestrator/application/driver_rules.py``) that matches it, through Keel's real
paths (docs/evaluation.md, "A workflow that waits"):

* a signal: a ``SignalWorkflow`` command under a message id made of the run, its state
  visit and the signal, so a repeat is one command to the orchestrator;
* a webhook: the body signed with the source's scheme and a secret made for the batch,
  posted to the connector's ``/webhooks/<source>``, whose route makes it the signal (an
  application with no webhook source: the body is the signal's payload);
* a human task: a decision signed as ``keel human-tasks decide`` signs one
  (:class:`~orchestrator.client.human_task_decisions.TaskDesk`), with the task's token
  and the operation digest the inbox shows, checked by the orchestrator.

Under ``duplicate_callbacks`` every answer is sent twice (a double click, a redelivered
webhook): the second must change nothing. A wait no rule answers, and that no timer of
the run ends before the batch's time is up, stops the batch with an error naming the run,
its state and what it waits for.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ops.evaluation.webhook_signing import secret_for, signed_headers
from orchestrator.application.app import KeelApp
from orchestrator.application.driver_rules import (
    ActionKind,
    Driver,
    Rule,
    SignalRule,
    TaskRule,
    Waiting,
    WebhookRule,
    unanswered_message,
    waiting_of,
)
from orchestrator.client.client import KeelClient
from orchestrator.client.human_task_decisions import DecisionStatus, TaskDesk
from orchestrator.client.json_args import payload_json
from orchestrator.client.query_answers import without_ciphertext
from orchestrator.config.settings import Settings
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.messages import SignalWorkflow
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.trust.human_task_tokens import load_task_tokens

__all__ = ["Answered", "DriverAgent", "webhook_secrets"]

#: How long a decision waits for the orchestrator's answer before the next poll asks again.
DECISION_WAIT_S = 5.0


@dataclass(frozen=True)
class Answered:
    """One wait the driver answered: the run, its state, how and what."""

    workflow_id: str
    state: str
    kind: ActionKind
    name: str
    at_ms: int


def webhook_secrets(app: KeelApp, driver: Driver | None) -> dict[str, str]:
    """When the driver delivers webhooks: a fresh secret for every source the application
    declares (the connector starts only with them all), by the variable the connector
    reads it from (the source's ``secret_env``); else none, and no connector."""
    rules = driver.rules if driver is not None else []
    if not any(isinstance(r, WebhookRule) and r.source is not None for r in rules):
        return {}
    return {s.secret_env: secret_for(s.scheme) for s in app.webhooks.values()}


@dataclass
class DriverAgent:
    """Answers the waiting runs of one batch (module doc). ``settings`` carry the batch's
    task-token secret; ``connector`` gives the connector's address (it moves when a
    deployment restarts it)."""

    settings: Settings
    app: KeelApp
    client: KeelClient
    driver: Driver | None
    spec: str | None
    connector: Callable[[], str]
    secrets: dict[str, str]
    repeat: bool = False
    answered: list[Answered] = field(default_factory=list)
    #: Answers Keel refused (a decision, a delivery): each fails the class.
    refusals: list[str] = field(default_factory=list)
    _done: set[tuple[str, str, str, int]] = field(default_factory=set)

    def use(self, client: KeelClient, app: KeelApp) -> None:
        """Go on with a new deployment's client and application (``old_schema``)."""
        self.client, self.app = client, app

    def counts(self) -> dict[str, int]:
        return dict(Counter(str(a.kind) for a in self.answered))

    def answer(self, ids: list[str], deadline_ms: int) -> None:
        """Answer every run of ``ids`` that waits; ``InvalidInputError`` for the runs no
        rule answers and no timer of theirs ends before ``deadline_ms``."""
        stuck: list[Waiting] = []
        for state in self.client.projection.load_states(ids).values():
            waiting = waiting_of(state)
            if waiting is None or waiting.key in self._done:
                continue
            definition = self.app.get(state.name, state.version)
            ctx: Context[Any] = Context(definition, without_ciphertext(state))
            rule = None
            if self.driver is not None:
                with _users_code(waiting, None):
                    rule = self.driver.answer(waiting, ctx)
            if rule is None:
                ends = waiting.ends_alone_at
                if ends is None or ends > deadline_ms:
                    stuck.append(waiting)
            elif self._apply(waiting, rule, ctx):
                self._done.add(waiting.key)
        if stuck:
            raise InvalidInputError(unanswered_message(stuck, self.spec))

    def _apply(self, waiting: Waiting, rule: Rule, ctx: Context) -> bool:
        """Send ``rule``'s answer (twice under ``repeat``); True once it is settled."""
        if isinstance(rule, TaskRule):
            return self._decide(waiting, rule, ctx)
        if isinstance(rule, WebhookRule) and rule.source is not None:
            return self._deliver(waiting, rule, ctx)
        with _users_code(waiting, rule.name):
            payload = rule.payload_of(ctx) if isinstance(rule, SignalRule) else rule.body_of(ctx)
        what = f"payload of signal '{rule.name}'"
        command = SignalWorkflow(rule.name, payload_json(payload, what), waiting.correlation)
        wf, run, state, visit = waiting.key
        mid = f"keel-evaluate/{wf}/{run}/{state}#{visit}/{rule.name}"
        for _ in range(2 if self.repeat else 1):
            self.client.send_as(wf, command, mid)
        kind = ActionKind.SIGNAL if isinstance(rule, SignalRule) else ActionKind.WEBHOOK
        self._note(waiting, kind, rule.name)
        return True

    def _deliver(self, waiting: Waiting, rule: WebhookRule, ctx: Context) -> bool:
        """Post the signed delivery; False when the connector could not take it now
        (unreachable, or 5xx: sent again at the next poll, under the same event id)."""
        source = self.app.webhooks[str(rule.source)]
        wf, _, state, visit = waiting.key
        with _users_code(waiting, rule.name):
            body = json.dumps(rule.body_of(ctx)).encode()
            event_id = rule.event_id(ctx) if rule.event_id else f"{wf}/{state}#{visit}"
        secret = self.secrets[source.secret_env]
        for _ in range(2 if self.repeat else 1):
            headers = signed_headers(source.scheme, secret, body, event_id, rule.event_type)
            status, answer = _post(f"{self.connector()}/webhooks/{source.name}", body, headers)
            if status == 0 or status >= 500:
                return False
            if status >= 300:
                self.refusals.append(
                    f"the connector answered {status} to the '{source.name}' delivery for "
                    f"run '{wf}': {answer[:300]}"
                )
                return True
        self._note(waiting, ActionKind.WEBHOOK, rule.name)
        return True

    def _decide(self, waiting: Waiting, rule: TaskRule, ctx: Context) -> bool:
        """Decide the open task; False while the orchestrator has not answered (asked
        again at the next poll: the same request, the same message id)."""
        desk = TaskDesk(
            self.settings,
            TasksView(self.client.projection.r, self.settings.topic_prefix),
            self.client.send_as,
            wait_s=DECISION_WAIT_S,
        )
        token = load_task_tokens(self.settings, create=False).issue(str(waiting.task_id))
        with _users_code(waiting, rule.name):
            decision, correction = str(rule.decision_of(ctx)), rule.correction_of(ctx)
        sent = 0
        while sent < (2 if self.repeat else 1):
            outcome = desk.decide(
                token, rule.actor, list(waiting.roles), decision, rule.reason, None, correction
            )
            if outcome.status in (DecisionStatus.PENDING, DecisionStatus.UNKNOWN):
                return sent > 0  # not in the inbox yet, or no answer yet: ask again later
            if outcome.status is DecisionStatus.REFUSED:
                self.refusals.append(
                    f"human task '{rule.name}' of run '{waiting.workflow_id}': {decision} "
                    f"refused ({outcome.refusal}): {outcome.reason}"
                )
                return True
            sent += 1
            if sent == 1:
                self._note(waiting, ActionKind.HUMAN_TASK, rule.name)
        return True

    def _note(self, waiting: Waiting, kind: ActionKind, name: str) -> None:
        at = int(time.time() * 1000)
        self.answered.append(Answered(waiting.workflow_id, waiting.state, kind, name, at))


@contextmanager
def _users_code(waiting: Waiting, rule: str | None) -> Iterator[None]:
    """Where the driver's own functions run: what they raise names the run and the rule."""
    try:
        yield
    except InvalidInputError:
        raise
    except Exception as exc:
        which = "" if rule is None else f" (its rule for '{rule}')"
        raise InvalidInputError(
            f"the driver{which} failed on run '{waiting.workflow_id}' waiting in state "
            f"'{waiting.state}' for {waiting.what}: {type(exc).__name__}: {exc}"
        ) from None


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """The connector's status and answer (0: it could not be reached)."""
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")
    except OSError as exc:  # refused, reset, timed out: the connector is not there now
        return 0, str(exc)
