"""Keel: a durable, event-sourced workflow orchestrator on Apache Kafka.

This package is the public face, and the only one, an application imports: the
application object (``KeelApp``, every registration one of its methods) and, grouped by
role like ``temporalio.workflow`` / ``temporalio.activity``, the modules

- ``orchestrator.workflow``: definitions, their vocabulary, ``Context``, queries, search
  attributes, migrations (docs/workflows.md);
- ``orchestrator.activity``: ``context()``, ``side_effect``, the failure classes,
  ``RateLimit``, ``Sensitive`` (docs/activities.md);
- ``orchestrator.client``: ``KeelClient`` and what it returns (docs/client.md);
- ``orchestrator.webhooks``, ``orchestrator.llm``, ``orchestrator.sagas``,
  ``orchestrator.errors``; ``orchestrator.embedding`` builds Keel's processes inside an
  application's own (docs/embedding.md); ``orchestrator.testing`` is reserved for the
  test kit.

Every name of those modules is also a name of this package (the flat face, kept for
compatibility), both generated from the one table in
``orchestrator.application.public_face``. The
domain's internals, the runtime, the processes and the CLI stay behind the processes and
may change between releases; the docs import from the face only
(tests/unit/test_doc_snippets.py).

Names load lazily, so ``import orchestrator`` is cheap and pulls in no I/O client; so does
every name an application declares with (tests/unit/test_layers.py). The client is I/O by
nature: it loads the Kafka and Redis clients when ``KeelClient`` is first named.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from orchestrator.application.public_face import ROLES as _ROLES
from orchestrator.application.public_face import flat_names as _flat_names
from orchestrator.application.public_face import load as _load

__all__ = _flat_names()


def __getattr__(name: str) -> _typing.Any:
    if name in _ROLES and name != "app":
        return _importlib.import_module(f"orchestrator.{name}")
    return _load("app", name, globals())


def __dir__() -> list[str]:
    return list(__all__)


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from handlers.llm.agent import AgentCall as AgentCall
    from handlers.llm.cache import CachePolicy as CachePolicy
    from handlers.llm.node import INVALID_OUTPUT as INVALID_OUTPUT
    from handlers.llm.node import LlmCall as LlmCall
    from handlers.llm.node import OnInvalid as OnInvalid
    from handlers.llm.node import RiskRule as RiskRule
    from handlers.llm.node import confidence_below as confidence_below
    from handlers.llm.node import has_flag as has_flag
    from handlers.llm.prompts import PromptTemplate as PromptTemplate
    from handlers.llm.prompts import load_prompt as load_prompt
    from handlers.llm.prompts import prompts as prompts
    from handlers.llm.runtime import Pricing as Pricing
    from handlers.llm.tools import Tool as Tool
    from handlers.sdk.activity_context import ActivityContext as ActivityContext
    from handlers.sdk.activity_errors import ActivityError as ActivityError
    from handlers.sdk.activity_errors import OutcomeUnknownError as OutcomeUnknownError
    from handlers.sdk.activity_errors import PermanentError as PermanentError
    from handlers.sdk.activity_errors import TransientError as TransientError
    from handlers.sdk.markers import side_effect as side_effect
    from orchestrator.application.activity_limits import RateLimit as RateLimit
    from orchestrator.application.app import KeelApp as KeelApp
    from orchestrator.application.app import load_app as load_app
    from orchestrator.application.saga_declarations import Emit as Emit
    from orchestrator.application.saga_declarations import Saga as Saga
    from orchestrator.application.saga_declarations import SagaFact as SagaFact
    from orchestrator.application.saga_declarations import SagaView as SagaView
    from orchestrator.application.webhook_sources import RouteError as RouteError
    from orchestrator.application.webhook_sources import SignatureScheme as SignatureScheme
    from orchestrator.application.webhook_sources import WebhookEvent as WebhookEvent
    from orchestrator.application.webhook_sources import WebhookSignal as WebhookSignal
    from orchestrator.application.webhook_sources import WebhookSignal as _Signal
    from orchestrator.application.webhook_sources import WebhookSource as WebhookSource
    from orchestrator.application.webhook_sources import WebhookStart as WebhookStart
    from orchestrator.application.webhook_sources import WebhookStart as _Start
    from orchestrator.client.client import KeelClient as KeelClient
    from orchestrator.client.client import StartResult as StartResult
    from orchestrator.client.query_answers import QueryAnswer as QueryAnswer
    from orchestrator.client.run_search import RunFilter as RunFilter
    from orchestrator.client.run_search import RunPage as RunPage
    from orchestrator.client.run_search import RunRow as RunRow
    from orchestrator.config.settings import Settings as Settings
    from orchestrator.config.settings import load_settings as load_settings
    from orchestrator.domain.authoring.definitions import RetryPolicy as RetryPolicy
    from orchestrator.domain.authoring.definitions import SignalWait as SignalWait
    from orchestrator.domain.authoring.definitions import State as State
    from orchestrator.domain.authoring.definitions import Step as Step
    from orchestrator.domain.authoring.definitions import TimerWait as TimerWait
    from orchestrator.domain.authoring.definitions import Transition as Transition
    from orchestrator.domain.authoring.definitions import WorkflowDefinition as WorkflowDefinition
    from orchestrator.domain.authoring.migrations import Migration as Migration
    from orchestrator.domain.authoring.policies import Compensation as Compensation
    from orchestrator.domain.authoring.queries import Query as Query
    from orchestrator.domain.authoring.queries import QueryContext as QueryContext
    from orchestrator.domain.authoring.queries import QueryError as QueryError
    from orchestrator.domain.authoring.run_context import Context as Context
    from orchestrator.domain.authoring.search_attributes import SearchAttribute as SearchAttribute
    from orchestrator.domain.authoring.search_attributes import SearchKind as SearchKind
    from orchestrator.domain.authoring.waits import Escalation as Escalation
    from orchestrator.domain.authoring.waits import HumanTask as HumanTask
    from orchestrator.domain.model.errors import CommandRejected as CommandRejected
    from orchestrator.domain.model.errors import ConfigError as ConfigError
    from orchestrator.domain.model.errors import DefinitionError as DefinitionError
    from orchestrator.domain.model.errors import InvalidIdError as InvalidIdError
    from orchestrator.domain.model.errors import InvalidInputError as InvalidInputError
    from orchestrator.domain.model.errors import KeelError as KeelError
    from orchestrator.domain.model.errors import LimitExceededError as LimitExceededError
    from orchestrator.domain.model.errors import NotFoundError as NotFoundError
    from orchestrator.domain.model.errors import UnavailableError as UnavailableError
    from orchestrator.domain.model.errors import UnknownWorkflowError as UnknownWorkflowError
    from orchestrator.domain.model.errors import WorkflowIdConflictError as WorkflowIdConflictError
    from orchestrator.domain.model.messages import CancelWorkflow as CancelWorkflow
    from orchestrator.domain.model.messages import SignalWorkflow as SignalWorkflow
    from orchestrator.domain.model.messages import StartWorkflow as StartWorkflow
    from orchestrator.domain.model.vocabulary import HumanDecision as HumanDecision
    from orchestrator.domain.model.vocabulary import ItemFailurePolicy as ItemFailurePolicy
    from orchestrator.domain.model.vocabulary import OnCancel as OnCancel
    from orchestrator.domain.model.vocabulary import OnExhausted as OnExhausted
    from orchestrator.domain.model.vocabulary import OnExpiry as OnExpiry
    from orchestrator.domain.model.vocabulary import OnUnknown as OnUnknown
    from orchestrator.domain.model.vocabulary import ParentClosePolicy as ParentClosePolicy
    from orchestrator.domain.model.vocabulary import WorkflowStatus as WorkflowStatus
    from orchestrator.trust.sealing import SealedValue as SealedValue
    from orchestrator.trust.sealing import Sensitive as Sensitive

    Signal = _Signal
    Start = _Start
