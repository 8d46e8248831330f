"""What a workflow is written with: ``WorkflowDefinition`` and its states, steps,
transitions and waits, the vocabulary they are written in (each member equals its
string), the ``Context`` a definition's functions read, read-only queries, search
attributes and recorded migrations (docs/workflows.md).

Pure: these are the domain's own types, re-exported (``isinstance`` holds across paths),
so importing them loads no I/O client. Names load on first use from the table in
``orchestrator.application.public_face``; imports nothing else of Keel until then.
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("workflow", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
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
    from orchestrator.domain.model.vocabulary import HumanDecision as HumanDecision
    from orchestrator.domain.model.vocabulary import ItemFailurePolicy as ItemFailurePolicy
    from orchestrator.domain.model.vocabulary import OnCancel as OnCancel
    from orchestrator.domain.model.vocabulary import OnExhausted as OnExhausted
    from orchestrator.domain.model.vocabulary import OnExpiry as OnExpiry
    from orchestrator.domain.model.vocabulary import OnUnknown as OnUnknown
    from orchestrator.domain.model.vocabulary import ParentClosePolicy as ParentClosePolicy
    from orchestrator.domain.model.vocabulary import WorkflowStatus as WorkflowStatus
