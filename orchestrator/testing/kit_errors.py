"""What the test kit raises: each a :class:`~orchestrator.domain.model.errors.KeelError`, so
a test (or ``except KeelError``) handles them like the rest of Keel's errors."""

from __future__ import annotations

from orchestrator.domain.model.errors import KeelError

__all__ = [
    "HistoryInvariantError",
    "ReplayDivergedError",
    "RunBlockedError",
    "WorkflowFailedError",
]


class WorkflowFailedError(KeelError):
    """The run ended without completing: ``status`` (failed, cancelled, compensated, ...)
    and the ``reason`` its last event recorded."""

    def __init__(self, workflow_id: str, status: str, reason: str) -> None:
        self.workflow_id = workflow_id
        self.status = status
        self.reason = reason
        super().__init__(f"workflow '{workflow_id}' ended {status}: {reason or '(no reason)'}")


class RunBlockedError(KeelError):
    """Waiting for a run that nothing in the environment will move: it waits for a signal,
    a webhook or a person and no timer is armed (or none within the wait's limit), or it
    needs an operator."""


class ReplayDivergedError(KeelError):
    """The current code decides a recorded history differently: ``reports`` holds every
    run's report (``RunReport``), the message names the first differing event."""

    def __init__(self, message: str, reports: list[object]) -> None:
        self.reports = reports
        super().__init__(message)


class HistoryInvariantError(KeelError):
    """A history the environment recorded breaks an invariant (``keel workflow verify``'s
    rules); ``violations`` lists each."""

    def __init__(self, message: str, violations: list[object]) -> None:
        self.violations = violations
        super().__init__(message)
