"""Running one activity task: input, effect claim, handler call, result — and what failed.

The order matters for side effects (docs/activities.md):

1. the input is parsed and validated *before* the claim: a bad input wrote nothing;
2. the claim is taken (waiting out a Redis outage, never failing the attempt for it);
3. the handler runs: an exception it raises is classified, and only a definite failure
   (transient or permanent) releases the claim, since an unknown one may have written;
4. once the handler has returned, its write has happened whatever comes next: a result
   that fails its output model or a limit is recorded ``refused`` with the raw value and
   reported as a permanent failure; the claim is never released.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from handlers.effects import Claim, ClaimOutcome, RedisGate
from handlers.handler_threads import HandlerThreads
from handlers.sdk.activity_errors import (
    FailureClass,
    OutcomeUnknownError,
    PermanentError,
    ResultRefusedError,
    classify,
)
from handlers.sdk.markers import has_side_effect
from orchestrator.application.app import ActivityHandler, KeelApp
from orchestrator.domain.model.errors import KeelError, LimitExceededError, format_validation_error
from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES, check_json_text, loads_bounded
from orchestrator.io.ports import Stopping
from orchestrator.trust.sealing import SealKeySource, contains_sealed, sensitive_paths

log = logging.getLogger("keel.worker")

#: Characters of a failure message reported (the event keeps one line).
MAX_MESSAGE_CHARS = 500

IN_DOUBT = (
    "attempt {attempt} was dispatched before and never reported (worker crash?); "
    "its outcome is unknown"
)


#: Whether a model has sensitive fields, per model class: walking a model's fields on
#: every task cost the worker ~15 % of its time (git show 6f66b40:docs/performance.md,
#: "Throughput").
_SENSITIVE: dict[type[BaseModel], bool] = {}


def _given(seal_keys: SealKeySource | None) -> SealKeySource:
    """The keys a caller gave; none given holds no key (a sealed field is refused)."""
    return seal_keys if seal_keys is not None else SealKeySource()


def _has_sensitive(model: type[BaseModel] | None) -> bool:
    if model is None:
        return False
    known = _SENSITIVE.get(model)
    if known is None:
        known = _SENSITIVE[model] = bool(sensitive_paths(model))
    return known


class EffectBook(Protocol):
    """The effect records a side-effect task goes through (``effects.EffectStore``: Redis)."""

    def begin(self, key: str, attempt: int, token: str | None = None) -> Claim: ...

    def commit(self, key: str, result_json: str) -> None: ...

    def refuse(self, key: str, error_type: str, message: str, raw: str) -> None: ...

    def release(self, key: str, attempt: int | None = None) -> bool: ...


class SupersededAttempt(Exception):
    """An old attempt whose activity has moved on: it must not run (its report is ignored)."""


class BadTaskInput(PermanentError):
    """The task's input cannot be given to the handler: invalid JSON or over a limit."""


async def execute(
    app: KeelApp,
    effects: EffectBook | None,
    gate: RedisGate | None,
    activity_type: str,
    input_json: str,
    idempotency_key: str,
    attempt: int,
    threads: HandlerThreads | None = None,
    on_start: Callable[[], None] | None = None,
    seal_keys: SealKeySource | None = None,
    before_call: Callable[[], Awaitable[None]] | None = None,
) -> str:
    """Run the handler for one task and return its result as JSON (see module doc).

    A sync handler runs on ``threads`` when given (the worker), else inline (a local
    step, already on its runner thread); ``seal_keys`` open its input and seal its result
    (handlers/attempt_runner.py passes its process's). ``on_start`` is called once a side effect has
    claimed its key, just before the call that may write: from then on its outcome is
    in doubt until it reports (the worker reports the start, docs/activities.md).
    ``before_call`` is awaited just before that (a side effect's key claimed), and may
    refuse the call by raising: the worker confirms a rate-limited start there
    (handlers/type_limits.py, "confirmation"); a side effect's claim is then released.

    Raises what the handler raised, ``ResultRefusedError`` for an unusable result,
    ``SupersededAttempt``/``OutcomeUnknownError`` from the claim and ``Stopping`` when
    the worker stops while Redis is away.
    """
    handler = app.handler(activity_type)
    arg = parse_input(handler, input_json, seal_keys)
    if not has_side_effect(handler.fn):
        if before_call is not None:
            await before_call()
        raw = await call(handler, arg, threads)
        return result_json(handler, raw, side_effect=False, seal_keys=seal_keys)
    assert effects is not None and gate is not None, "a @side_effect handler needs its store"
    token = uuid.uuid4().hex
    claim = await gate.call("claim", effects.begin, idempotency_key, attempt, token)
    if claim.outcome == ClaimOutcome.COMMITTED:
        assert claim.result_json is not None
        return claim.result_json
    if claim.outcome == ClaimOutcome.REFUSED:
        raise ResultRefusedError(claim.message or "result refused", claim.error_type or "Error")
    if claim.outcome == ClaimOutcome.STALE:
        raise SupersededAttempt(f"attempt {attempt} was superseded by a later attempt")
    if claim.outcome == ClaimOutcome.IN_DOUBT:
        raise OutcomeUnknownError(IN_DOUBT.format(attempt=attempt))
    if before_call is not None:
        try:
            await before_call()
        except BaseException:  # nothing was called: the key is free for a later attempt
            await _settle(gate, "release", effects.release, idempotency_key, attempt)
            raise
    if on_start is not None:
        on_start()
    try:
        raw = await call(handler, arg, threads)
    except Exception as exc:
        if classify(exc) != FailureClass.UNKNOWN:  # the handler says: nothing was written
            await _settle(gate, "release", effects.release, idempotency_key, attempt)
        raise
    try:
        result = result_json(handler, raw, side_effect=True, seal_keys=seal_keys)
    except ResultRefusedError as exc:
        await _settle(
            gate, "refuse", effects.refuse, idempotency_key, exc.error_type, str(exc), _raw(raw)
        )
        raise
    await _settle(gate, "commit", effects.commit, idempotency_key, result)
    return result


async def _settle(gate: RedisGate, what: str, fn: Any, key: str, *args: Any) -> None:
    """Record how a claimed call ended; when stopping with Redis away, leave it pending.

    A claim left ``pending`` is safe: a redelivery of the same attempt is in doubt and
    goes through the status query, never a blind second call.
    """
    try:
        await gate.call(what, fn, key, *args)
    except Stopping:
        log.warning("effect %s of %s not recorded (stopping, Redis unreachable)", what, key)


def parse_input(
    handler: ActivityHandler, input_json: str, seal_keys: SealKeySource | None = None
) -> Any:
    """The handler's argument from the task's input; ``BadTaskInput`` or ``ValidationError``.

    A sealed value is opened with ``seal_keys`` (none given: a sealed input is refused).
    """
    what = f"input of activity '{handler.activity_type}'"
    try:
        raw = loads_bounded(input_json, what)
    except LimitExceededError as exc:
        raise BadTaskInput(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise BadTaskInput(f"{what} is not valid JSON: {exc}") from None
    try:
        if _has_sensitive(handler.output_model):
            _given(seal_keys).get()  # a missing key fails the task here, before any effect
        if contains_sealed(raw):  # opened only here, for the handler (docs/secrets.md)
            raw = _given(seal_keys).get().unseal_tree(raw)
    except KeelError as exc:
        raise BadTaskInput(f"{what}: {exc}") from None
    return handler.input_model.model_validate(raw) if handler.input_model else raw


async def call(handler: ActivityHandler, arg: Any, threads: HandlerThreads | None = None) -> Any:
    if handler.is_async:
        return await handler.fn(arg)
    if threads is not None:
        return await threads.run(handler.fn, arg)
    return handler.fn(arg)


def result_json(
    handler: ActivityHandler,
    raw: Any,
    *,
    side_effect: bool,
    seal_keys: SealKeySource | None = None,
) -> str:
    """The handler's return value as JSON within the limits, or ``ResultRefusedError``;
    its sensitive fields sealed with ``seal_keys``."""
    what = f"result of activity '{handler.activity_type}'"
    try:
        result = raw
        if handler.output_model is not None and not isinstance(raw, handler.output_model):
            result = handler.output_model.model_validate(raw)
        text = result.model_dump_json() if isinstance(result, BaseModel) else json.dumps(result)
        if _has_sensitive(handler.output_model):  # sealed before it is reported or stored
            keys = _given(seal_keys).get()
            data = keys.seal_fields(handler.output_model, json.loads(text))
            text = json.dumps(data, separators=(",", ":"))
        check_json_text(text, "the result", MAX_PAYLOAD_BYTES)
    except (ValidationError, LimitExceededError, TypeError, ValueError, RecursionError) as exc:
        kept = "; its effect is recorded and will not be repeated" if side_effect else ""
        message = f"{what} refused after the handler returned{kept}: {describe(exc)}"
        raise ResultRefusedError(message[:MAX_MESSAGE_CHARS], type(exc).__name__) from None
    return text


def describe(exc: BaseException) -> str:
    """One line for the failure record; a schema error names every offending field."""
    if isinstance(exc, ValidationError):
        return f"invalid {exc.title}: {format_validation_error(exc)}"[:MAX_MESSAGE_CHARS]
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:MAX_MESSAGE_CHARS]


def _raw(value: Any) -> str:
    """The raw result as text for the effect record (JSON where possible)."""
    try:
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        return json.dumps(value, default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(value)[:200_000]
