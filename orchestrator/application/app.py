"""The application object named by ``--app MODULE:ATTR``: definitions plus activity handlers.

One :class:`KeelApp` is shared by the orchestrator (which needs the definitions, via
:func:`decider_of`), the workers (which need the handlers) and the CLI (which validates a
start before producing it). Everything an application declares is a method of it:
``@app.activity``, ``app.workflow``, ``app.webhook``, ``app.saga``, ``app.llm_step``.
Handlers may live in another process: declare their activity type with
:meth:`KeelApp.declare_activity`.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, get_type_hints, overload

from pydantic import BaseModel

from orchestrator.application.activity_limits import (
    ActivityLimits,
    LimitDeclarationError,
    RateLimit,
)
from orchestrator.application.saga_declarations import Saga
from orchestrator.application.webhook_sources import WebhookSource
from orchestrator.domain.authoring.activity_refs import function_name, mark_activity
from orchestrator.domain.authoring.definitions import (
    DefinitionError,
    InvalidInputError,
    UnknownWorkflowError,
    WorkflowDefinition,
    resolve_definition,
)
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.steps import Step
from orchestrator.domain.authoring.upcasting import check_upcasters, schema_version_of
from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model import errors as kinds
from orchestrator.domain.model.limits import loads_bounded

__all__ = [
    "ActivityHandler",
    "AppError",
    "AppLoadError",
    "DefinitionError",
    "InvalidInputError",
    "KeelApp",
    "LlmNode",
    "UnknownActivityError",
    "UnknownWorkflowError",
    "decider_of",
    "load_app",
]

F = TypeVar("F", bound=Callable[..., Any])


class AppError(kinds.DefinitionError):
    """An application is inconsistent (e.g. a step's activity type has no handler)."""


class UnknownActivityError(AppError):
    """No handler is registered or declared for an activity type."""


class AppLoadError(kinds.ConfigError):
    """``--app MODULE:ATTR`` does not name a KeelApp."""


@dataclass(frozen=True)
class ActivityHandler:
    """A registered activity: ``fn(input)`` returns the output (``is_async``: a coroutine).

    ``input`` is an instance of ``input_model`` when one is given (else the decoded JSON);
    the return value is validated against ``output_model`` when one is given.
    ``limits``: what the type may use across all workers (docs/limits.md, "Per-type
    limits"); None: unlimited.
    """

    activity_type: str
    fn: Callable[..., Any]
    input_model: type[BaseModel] | None
    output_model: type[BaseModel] | None
    is_async: bool
    limits: ActivityLimits | None = None

    @property
    def schema_version(self) -> int:
        """The version of the result schema this handler writes (docs/schema-evolution.md)."""
        return schema_version_of(self.output_model)


class LlmNode(Protocol):
    """An LLM step's spec (``orchestrator.llm``: ``LlmCall``, ``AgentCall``): it builds its
    Step and registers the handler that runs it, which lives with the worker's LLM parts
    (a layer above this one)."""

    def as_step(
        self,
        app: KeelApp,
        step_name: str,
        input: Callable[[Context], Any] | None,
        step_options: dict[str, Any],
    ) -> Step: ...


class KeelApp:
    """Registry of workflow definitions by (name, version) and activity handlers by type,
    and of what else an application declares: webhook sources, sagas and LLM nodes.

    :meth:`include` takes in another application's registrations (an app that serves
    several at once)."""

    def __init__(self, name: str = "keel") -> None:
        self.name = name
        self.definitions: dict[tuple[str, int], WorkflowDefinition] = {}
        self.handlers: dict[str, ActivityHandler] = {}
        self.external_activities: set[str] = set()
        #: Webhook sources by name (:meth:`webhook`; served by ``keel connector``).
        self.webhooks: dict[str, WebhookSource] = {}
        #: Sagas by name (:meth:`saga`; run by the saga manager).
        self.sagas: dict[str, Saga] = {}
        #: LLM nodes by activity type, then spec digest: ``(node, runner)``
        #: (:meth:`llm_step`; the type's one handler runs the spec a task names).
        self.llm_nodes: dict[str, dict[str, Any]] = {}
        self._decider: Decider | None = None

    # -- registration ---------------------------------------------------------------

    @overload
    def activity(self, activity_type: F, /) -> F: ...
    @overload
    def activity(
        self,
        activity_type: str | None = None,
        *,
        input: type[BaseModel] | None = None,
        output: type[BaseModel] | None = None,
        max_concurrent: int | None = None,
        rate_limit: RateLimit | str | None = None,
    ) -> Callable[[F], F]: ...
    def activity(
        self,
        activity_type: str | F | None = None,
        *,
        input: type[BaseModel] | None = None,
        output: type[BaseModel] | None = None,
        max_concurrent: int | None = None,
        rate_limit: RateLimit | str | None = None,
    ) -> F | Callable[[F], F]:
        """Decorator registering a sync or async handler for ``activity_type`` (default:
        the function's name; bare ``@app.activity`` works too).

        ``input`` and ``output`` default to the pydantic models the handler is annotated
        with (``async def reserve(req: ReserveIn) -> Reservation``). The function is
        returned unchanged, marked with its type, so a step may name it
        (``Step("reserve", reserve)``) and ``ctx.result(reserve)`` reads its output model.
        ``max_concurrent`` and ``rate_limit`` (a :class:`RateLimit` or ``"10/min"``) bound
        the type across every worker (docs/limits.md, "Per-type limits").
        """
        if callable(activity_type):
            return self.activity()(activity_type)

        def register(fn: F) -> F:
            name = activity_type if isinstance(activity_type, str) else _name_of(fn)
            if not name:
                raise AppError(
                    f"activity handler '{function_name(fn)}' has no name to be its type: "
                    "@app.activity('type_name')"
                )
            try:
                limits = ActivityLimits.declare(name, max_concurrent, rate_limit)
            except LimitDeclarationError as exc:
                raise AppError(str(exc)) from None
            existing = self.handlers.get(name)
            if existing is not None and not _same_function(existing.fn, fn):
                raise AppError(f"activity '{name}' already has a handler")
            models = _annotated_models(fn)
            input_model = input if input is not None else models[0]
            output_model = output if output is not None else models[1]
            check_upcasters(output_model, f"activity '{name}': output")
            self.handlers[name] = ActivityHandler(
                activity_type=name,
                fn=fn,
                input_model=input_model,
                output_model=output_model,
                is_async=inspect.iscoroutinefunction(fn),
                limits=limits,
            )
            mark_activity(fn, name, output_model)
            return fn

        return register

    def declare_activity(self, activity_type: str) -> None:
        """Declare an activity type whose handler runs in another process."""
        self.external_activities.add(activity_type)

    def workflow(self, definition: WorkflowDefinition) -> WorkflowDefinition:
        """Register a definition; the same (name, version) with other contents is an error."""
        key = (definition.name, definition.version)
        existing = self.definitions.get(key)
        if existing is not None and existing.digest != definition.digest:
            raise DefinitionError(f"{definition.label} is already registered with other contents")
        self.definitions[key] = definition
        self._decider = None
        return definition

    def include(self, other: KeelApp) -> KeelApp:
        """Take in everything ``other`` registered: its definitions, activity handlers,
        external activities, webhook sources, sagas and LLM nodes; returns this app.

        What both hold must be the same registration (the same definition contents, the
        same handler, the same source, saga or node specs); anything else is an
        ``AppError`` (``DefinitionError`` for a definition), as registering it twice here.
        """
        for definition in other.definitions.values():
            self.workflow(definition)
        _merge(self.handlers, other.handlers, "activity", same=lambda a, b: a == b)
        self.external_activities |= other.external_activities
        _merge(self.webhooks, other.webhooks, "webhook source")
        _merge(self.sagas, other.sagas, "saga")
        _merge(self.llm_nodes, other.llm_nodes, "LLM node activity")
        return self

    # -- webhook sources (served by `keel connector`; application/webhook_sources.py) --
    def webhook(
        self,
        source: str,
        *,
        secret_env: str,
        route: Callable[[Any], Any],
        event_id: Callable[[dict[str, Any]], Any] | None = None,
        **options: Any,
    ) -> WebhookSource:
        """Declare webhook ``source``: its secrets' variable, event id and routing.

        ``route`` returns an ``orchestrator.webhooks.WebhookSignal`` or ``WebhookStart``;
        ``options`` are ``scheme`` (``SignatureScheme``, ``keel`` by default), ``tolerance_s`` and
        ``dedupe_ttl_s`` (docs/connector.md).
        """
        if source in self.webhooks:
            raise AppError(f"webhook source '{source}' is already declared")
        declared = WebhookSource(source, secret_env, event_id, route, **options)
        self.webhooks[source] = declared
        return declared

    # -- end of webhook sources --------------------------------------------------------

    def saga(self, saga: Saga) -> Saga:
        """Declare ``saga`` (docs/sagas.md): the saga manager of this app runs it."""
        known = self.sagas.get(saga.name)
        if known is not None and known is not saga:
            raise DefinitionError(f"saga '{saga.name}' is already declared")
        self.sagas[saga.name] = saga
        return saga

    def llm_step(
        self,
        step_name: str,
        node: LlmNode,
        *,
        input: Callable[[Context], Any] | None = None,
        **step_options: Any,
    ) -> Step:
        """A Step running ``node`` (an ``LlmCall`` or a bounded ``AgentCall``,
        docs/llm-nodes.md), whose handler this registers; ``input`` builds the node's input
        from the run (the run's input by default), ``step_options`` are Step's (after,
        retry, timeouts...)."""
        return node.as_step(self, step_name, input, step_options)

    # -- queries --------------------------------------------------------------------

    def get(self, name: str, version: int | None = None) -> WorkflowDefinition:
        """The definition ``name`` at ``version`` (latest when None); UnknownWorkflowError."""
        return resolve_definition(self.definitions, name, version)

    def latest(self, name: str) -> WorkflowDefinition:
        return self.get(name, None)

    def handler(self, activity_type: str) -> ActivityHandler:
        found = self.handlers.get(activity_type)
        if found is None:
            known = ", ".join(sorted(self.handlers)) or "(none)"
            raise UnknownActivityError(
                f"no handler for activity '{activity_type}' in this process; known: {known}"
            )
        return found

    def validate_start(
        self, name: str, version: int | None, input_obj: str | bytes | dict[str, Any] | BaseModel
    ) -> WorkflowDefinition:
        """Check a start before it is sent: the definition exists and the input fits.

        Raises a :class:`~orchestrator.domain.model.errors.InvalidInputError` kind (unknown
        workflow, bad JSON, a limit of docs/limits.md, the input schema).
        """
        try:
            definition = self.get(name, version)
            if isinstance(input_obj, str | bytes):
                text = input_obj.decode("utf-8") if isinstance(input_obj, bytes) else input_obj
                try:
                    loads_bounded(text, f"input for {definition.label}")
                except kinds.KeelError:
                    raise
                except ValueError as exc:
                    raise InvalidInputError(
                        f"input for {definition.label} is not valid JSON: {exc}"
                    ) from None
            else:
                loads_bounded(
                    _json_text(input_obj, definition.label), f"input for {definition.label}"
                )
            definition.parse_input(input_obj)
        except ValueError as exc:
            if isinstance(exc, kinds.KeelError):
                raise
            raise _as_keel_error(exc) from None
        return definition

    def check(self) -> None:
        """Every step's activity type and status query has a handler here or is declared
        (a child-workflow step's run is started by the orchestrator, not a handler)."""
        available = set(self.handlers) | self.external_activities
        for definition in self.definitions.values():
            for step in definition.steps_by_name.values():
                if step.activity_type not in available and step.child_workflow is None:
                    raise UnknownActivityError(
                        f"{definition.label}: step '{step.name}' uses activity "
                        f"'{step.activity}', which has no handler and is not declared "
                        "(use @app.activity or app.declare_activity)"
                    )
                if step.status_query is not None and step.status_query not in available:
                    raise UnknownActivityError(
                        f"{definition.label}: step '{step.name}' uses status query "
                        f"'{step.status_query}', which has no handler and is not declared "
                        "(use @app.activity or app.declare_activity)"
                    )

    def __repr__(self) -> str:
        return (
            f"<KeelApp {self.name}: {len(self.definitions)} workflows, "
            f"{len(self.handlers)} activities>"
        )


def decider_of(app: KeelApp, task_token_hash: Callable[[str], str] | None = None) -> Decider:
    """The decider for all of ``app``'s definitions (checked): for the processes, not a
    method of the public ``KeelApp``, so the domain stays behind them.

    ``task_token_hash(task_id)`` is the sha256 of the token the runtime issues for a
    human task (docs/human-tasks.md): a decider that opens tasks needs it; one that
    only folds or replays does not. The decider without it is built once per app.
    """
    if task_token_hash is not None:
        app.check()
        return Decider(app.definitions, task_token_hash=task_token_hash)
    if app._decider is None:
        app.check()
        app._decider = Decider(app.definitions)
    return app._decider


V = TypeVar("V")


def _merge(
    into: dict[str, V],
    new: dict[str, V],
    what: str,
    same: Callable[[V, V], bool] = lambda a, b: a is b,
) -> None:
    """``new``'s entries added to ``into``; a name both hold differently is an AppError."""
    for name, value in new.items():
        existing = into.get(name)
        if existing is not None and not same(existing, value):
            raise AppError(f"{what} '{name}' is already registered otherwise")
        into[name] = value


def _name_of(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", "")
    return name if isinstance(name, str) and name != "<lambda>" else ""


def _annotated_models(fn: Callable[..., Any]) -> tuple[type[BaseModel] | None, ...]:
    """The pydantic models ``fn`` is annotated to take (its first parameter) and to
    return; None where there is no annotation, it is no model, or it cannot be resolved
    (the handler then gets and gives JSON data, as without ``input=``/``output=``)."""
    try:
        hints = get_type_hints(fn)
        params = list(inspect.signature(fn).parameters.values())
    except (NameError, TypeError, ValueError, AttributeError):
        return None, None
    given = hints.get(params[0].name) if params else None
    return tuple(
        hint if isinstance(hint, type) and issubclass(hint, BaseModel) else None
        for hint in (given, hints.get("return"))
    )


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    """The same function defined again: its module was reloaded (it replaces the old)."""
    return bool(
        a.__module__ == b.__module__
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
    )


def _json_text(value: Any, label: str) -> str:
    """``value`` as JSON text, so the limits of docs/limits.md can be checked on it."""
    try:
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        return json.dumps(value)
    except RecursionError:
        raise kinds.LimitExceededError(f"input for {label} nests too deep") from None
    except TypeError as exc:
        raise kinds.InvalidInputError(f"input for {label} is not JSON: {exc}") from None


_BRIDGED: dict[type, type] = {}


def _as_keel_error(exc: ValueError) -> Exception:
    """``exc`` as an ``InvalidInputError`` that is still an instance of its own class.

    A bridge for while ``orchestrator.domain.authoring.definitions`` raises plain ``ValueError``
    kinds; once it raises the domain kinds (``orchestrator.domain.model.errors``) this is never
    called.
    """
    cls = type(exc)
    if cls not in _BRIDGED:
        _BRIDGED[cls] = type(cls.__name__, (cls, kinds.InvalidInputError), {})
    return _BRIDGED[cls](*exc.args)


def load_object(spec: str, option: str = "--app") -> Any:
    """Import ``module:attr`` (like uvicorn) and return the object it names
    (``AppLoadError`` naming ``option`` when it is malformed or absent)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppLoadError(f"{option} must look like 'module:attr', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(f"cannot import module '{module_name}': {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AppLoadError(f"module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj


def load_app(spec: str) -> KeelApp:
    """Import ``module:attr`` (like uvicorn) and return the checked KeelApp it names."""
    obj = load_object(spec)
    if not isinstance(obj, KeelApp):
        raise AppLoadError(f"'{spec}' is a {type(obj).__name__}, not a KeelApp")
    try:
        obj.check()
    except AppError as exc:
        raise AppLoadError(f"'{spec}': {exc}") from None
    return obj
