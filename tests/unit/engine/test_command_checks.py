"""A command's client-written JSON is checked against the limits before deciding
(orchestrator/engine/command_checks.py): a start's input, a signal's payload, and both
of a signal-with-start."""

from __future__ import annotations

from orchestrator.domain.model.limits import MAX_JSON_DEPTH
from orchestrator.domain.model.messages import SignalWithStart, SignalWorkflow, StartWorkflow
from orchestrator.engine.command_checks import over_limits

DEEP = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
DEPTH = f"nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects"


def test_every_client_written_value_is_checked_and_named() -> None:
    assert over_limits(StartWorkflow("w", None, DEEP)) == f"the workflow input {DEPTH}"
    assert over_limits(SignalWorkflow("go", DEEP)) == f"signal 'go' payload {DEPTH}"
    assert over_limits(SignalWithStart("w", DEEP, "go", "{}")) == f"the workflow input {DEPTH}"
    assert over_limits(SignalWithStart("w", "{}", "go", DEEP)) == f"signal 'go' payload {DEPTH}"
    assert over_limits(SignalWithStart("w", "{}", "go", "{}")) is None
    assert over_limits(StartWorkflow("w", None, "not json")) is None  # the decider says why
