"""Signals: the inbox, correlations, and signals that come early, late or mismatched.

The rules (docs/workflows.md, "Signals"):

* A signal for a finished run, or one whose name no state waits for, is refused
  (``CommandRejected``; a live run records the refusal as ``CommandRefused``,
  :mod:`orchestrator.domain.lifecycle.refusals`, and no signal is applied).
* Without a correlation (no wait of that name declares one) a signal is applied to
  the current wait for it, else it waits in the inbox and satisfies the next wait for
  it in this run: the rule that lets a signal arrive before its wait.
* A wait declared with ``correlation=`` computes its correlation when it begins
  (``SignalWaitOpened``). Signals of that name must carry a correlation: a matching
  one satisfies the open wait; one that differs from the open wait's is recorded
  and refused (``SignalRefused``); one for a wait that already closed is recorded and
  refused as late; one that comes before its wait is held and satisfies the wait
  whose correlation it carries when that wait opens. So a late or stray signal is
  never applied to the wrong step.

The deciding half acts on a ``Decision`` (see
:mod:`orchestrator.domain.lifecycle.command_handlers`); the appliers at the end fold the events
(registered by :mod:`orchestrator.domain.lifecycle.evolve`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from orchestrator.domain.authoring.definitions import SignalWait, WorkflowDefinition
from orchestrator.domain.lifecycle.activities import command_json
from orchestrator.domain.model.errors import CommandRejected, HistoryError
from orchestrator.domain.model.frozen_init import replace
from orchestrator.domain.model.messages import (
    Envelope,
    SignalReceived,
    SignalRefused,
    SignalWaitOpened,
    SignalWithStart,
    SignalWorkflow,
)
from orchestrator.domain.model.state import (
    CLOSED_CORRELATIONS_WINDOW,
    WaitState,
    WorkflowState,
    remember_command,
)
from orchestrator.domain.model.vocabulary import WaitKind

__all__ = ["APPLIERS", "begin_wait", "close_correlation", "on_signal", "open_wait", "satisfy"]

#: The longest correlation a signal may carry (a correlation is an id, not data).
MAX_CORRELATION_CHARS = 200


class Decision(Protocol):
    defn: WorkflowDefinition
    cmd: Envelope[Any]

    @property
    def s(self) -> WorkflowState: ...

    def emit(self, payload: Any) -> None: ...

    def advance(self) -> None: ...

    def call(self, fn: Callable[..., Any], what: str) -> Any: ...

    def use(self, value: Any, convert: Callable[[Any], Any], problem: str) -> Any: ...


def on_signal(d: Decision, p: SignalWorkflow) -> None:
    s = d.s
    wid = s.workflow_id
    name = p.signal_name
    if s.has_seen(d.cmd.message_id):
        return
    if s.is_terminal:
        raise CommandRejected(f"workflow '{wid}' is {s.status}; signal '{name}' refused")
    if name not in d.defn.signal_names:
        known = ", ".join(sorted(d.defn.signal_names)) or "(none)"
        raise CommandRejected(
            f"workflow '{wid}' ({d.defn.name} v{d.defn.version}) does not wait for "
            f"signal '{name}'; known signals: {known}"
        )
    what = f"payload of signal '{name}'"
    command_json(p.payload_json, what, f"{what} is not valid JSON")
    corr = p.correlation
    if corr is not None and len(corr) > MAX_CORRELATION_CHARS:
        raise CommandRejected(
            f"the correlation of signal '{name}' is {len(corr):,} characters; the limit is "
            f"{MAX_CORRELATION_CHARS}"
        )
    if name in d.defn.correlated_signals:
        why = _refusal(s, name, corr)
        if why is not None:
            d.emit(SignalRefused(name, corr, why))
            return
    d.emit(SignalReceived(name, p.payload_json, corr))
    d.advance()


def on_signal_with_start(d: Decision, p: SignalWithStart) -> None:
    """The signal of a ``SignalWithStart``, the run started or not (the decider starts a
    workflow that has none): a run of another workflow refuses it."""
    s = d.s
    if s.name != p.name:
        raise CommandRejected(
            f"workflow '{s.workflow_id}' runs '{s.name}', not '{p.name}'; "
            f"signal-with-start of signal '{p.signal_name}' refused"
        )
    on_signal(d, SignalWorkflow(p.signal_name, p.payload_json, p.correlation))


def _refusal(s: WorkflowState, name: str, corr: str | None) -> str | None:
    """Why a signal for a correlated wait must not be applied, or None."""
    where = f"the run is in state '{s.current_state}'"
    if corr is None:
        return f"signal '{name}' carries no correlation; its waits require one ({where})"
    if (name, corr) in s.closed_correlations:
        return f"late: the wait for signal '{name}' with correlation '{corr}' has closed ({where})"
    w = s.wait
    if (
        w is not None
        and w.signal_name == name
        and w.correlation is not None
        and not w.satisfied
        and w.correlation != corr
    ):
        return (
            f"state '{s.current_state}' waits for signal '{name}' with correlation "
            f"'{w.correlation}', not '{corr}'"
        )
    return None


def open_wait(d: Decision, wait: SignalWait) -> None:
    """A correlated wait begins: compute and record its correlation."""
    assert wait.correlation is not None
    what = f"correlation of signal '{wait.name}'"
    value = d.use(d.call(wait.correlation, what), _correlation, what)
    d.emit(SignalWaitOpened(wait.name, value))


def _correlation(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty str, got {value!r}"[:200])
    if len(value) > MAX_CORRELATION_CHARS:
        raise ValueError(f"longer than {MAX_CORRELATION_CHARS} characters")
    return value


# -- folding ------------------------------------------------------------------------------


def satisfy(n: WorkflowState, w: WaitState, payload_json: str) -> None:
    n.wait = replace(w, satisfied=True, payload_json=payload_json)
    if w.timer_id is not None:  # the timeout is cancelled
        n.drop_timer(w.timer_id)


def begin_wait(n: WorkflowState) -> None:
    """All steps of the visit are done: a signal wait consumes the oldest matching signal."""
    w = n.wait
    if w is None or w.kind != WaitKind.SIGNAL or w.satisfied or w.correlated:
        return  # a correlated wait takes its signal when it opens (SignalWaitOpened)
    for i, (name, payload) in enumerate(n.inbox):
        if name == w.signal_name:
            n.inbox = n.inbox[:i] + n.inbox[i + 1 :]
            satisfy(n, w, payload)
            return


def close_correlation(n: WorkflowState, w: WaitState) -> None:
    """A correlated wait ends with its state: a signal for it from now on is late."""
    if w.correlation is None:
        return
    key = (w.signal_name or "", w.correlation)
    if key not in n.closed_correlations:
        closed = (*n.closed_correlations, key)
        n.closed_correlations = closed[-CLOSED_CORRELATIONS_WINDOW:]


def _remember(n: WorkflowState, env: Envelope[Any]) -> None:
    """A signal command wrote this event: a redelivery, however late, writes nothing."""
    if env.causation_id is not None:
        n.seen_commands = remember_command(n.seen_commands, env.causation_id)
        n.remember_signal(env.causation_id)


def _received(lookup: Any, n: WorkflowState, p: SignalReceived, env: Envelope[Any]) -> None:
    signals = n.mut_signals()
    signals[p.signal_name] = (*signals.get(p.signal_name, ()), p.payload_json)
    _remember(n, env)
    w = n.wait
    correlated = p.signal_name in lookup(n).correlated_signals
    if (
        w is not None
        and w.kind == WaitKind.SIGNAL
        and w.signal_name == p.signal_name
        and not w.satisfied
        and not n.steps_remaining
        and (not correlated or (w.correlation is not None and w.correlation == p.correlation))
    ):
        satisfy(n, w, p.payload_json)
    elif correlated:  # held until a wait with its correlation opens
        held = (p.signal_name, p.correlation or "", p.payload_json)
        n.correlated_inbox = (*n.correlated_inbox, held)
    else:
        n.inbox = (*n.inbox, (p.signal_name, p.payload_json))


def _refused(lookup: Any, n: WorkflowState, p: SignalRefused, env: Envelope[Any]) -> None:
    _remember(n, env)  # recorded, never applied: a redelivery writes nothing


def _opened(lookup: Any, n: WorkflowState, p: SignalWaitOpened, env: Envelope[Any]) -> None:
    w = n.wait
    if w is None or w.signal_name != p.signal_name or not w.correlated:
        raise HistoryError(
            f"workflow '{n.workflow_id}': SignalWaitOpened for '{p.signal_name}' in state "
            f"'{n.current_state}', which does not wait for it with a correlation"
        )
    w = replace(w, correlation=p.correlation)
    n.wait = w
    for i, (name, corr, payload) in enumerate(n.correlated_inbox):
        if name == p.signal_name and corr == p.correlation:
            n.correlated_inbox = n.correlated_inbox[:i] + n.correlated_inbox[i + 1 :]
            satisfy(n, w, payload)
            return


APPLIERS: dict[type, Callable[[Any, WorkflowState, Any, Envelope[Any]], None]] = {
    SignalReceived: _received,
    SignalRefused: _refused,
    SignalWaitOpened: _opened,
}
