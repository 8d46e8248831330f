"""Fan-out steps: one activity mapped over a list computed at run time (docs/fan-out.md).

A step with ``for_each`` becomes, in each state visit, one ``FanOutStarted`` (how many
items, and the digest of their list) and then one logical activity per item, activity
id ``<state>#<visit>/<step>[<index>]``, each a new logical attempt with its own
idempotency key and the step's retry policy, timeouts and compensation. At most
``max_concurrency`` items are in flight: each completion (or tolerated failure)
dispatches the next, in input order. When every item has ended, the step's result is
the list of item results in input order (``null`` for a failed item) and the state
goes on as after any step.

The list is not recorded: ``for_each`` is a pure function of recorded data, so the
decider computes it again when it dispatches more items and fails the run if the list
differs from the recorded digest (a ``for_each`` that reads something other than the
input and the results of the steps it runs ``after``).

``on_item_failure`` decides what an item that failed for good (permanently, or out of
retries with ``on_exhausted="fail"``) does: ``fail_fast`` takes the step's failure path
at once; ``collect`` records ``FanOutItemFailed`` and goes on; ``tolerate`` does so for
up to ``tolerate`` items, then fails the step. An item dead-lettered
(``on_exhausted="dead_letter"``) parks the run like any step, until a redrive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Protocol

from orchestrator.domain.authoring.definitions import Step, WorkflowDefinition
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.lifecycle import activities, signals
from orchestrator.domain.lifecycle.activities import UserCodeFailed
from orchestrator.domain.model.fingerprint import canonical_json
from orchestrator.domain.model.frozen_init import replace
from orchestrator.domain.model.limits import MAX_FAN_OUT_ITEMS
from orchestrator.domain.model.messages import Envelope, FanOutItemFailed, FanOutStarted
from orchestrator.domain.model.state import ActivityState, FanOutState, WorkflowState
from orchestrator.domain.model.vocabulary import ActivityStatus, ItemFailurePolicy

__all__ = ["APPLIERS", "advance", "is_item", "item_failed", "on_completed", "on_dispatched"]

_COMPLETED = ActivityStatus.COMPLETED


class Decision(activities.Decision, Protocol):
    """What a fan-out needs from the decision it runs in (``command_handlers.Decision``)."""

    def call(self, fn: Callable[[Context], Any], what: str) -> Any: ...

    def use(self, value: Any, convert: Callable[[Any], Any], problem: str) -> Any: ...


def is_item(activity_id: str) -> bool:
    """A fan-out item's activity id (step and state names hold no brackets)."""
    return activity_id.endswith("]") and "[" in activity_id


# -- deciding -----------------------------------------------------------------------------


def _items(d: Decision, step: Step) -> list[str]:
    """The canonical JSON of each item ``for_each`` returns (the run fails on bad ones)."""
    assert step.for_each is not None
    what = f"for_each of step '{step.name}'"
    value = d.call(step.for_each, what)
    if not isinstance(value, list | tuple):
        raise UserCodeFailed(
            f"state '{d.s.current_state}': {what} must return a list; got {type(value).__name__}"
        )
    if len(value) > MAX_FAN_OUT_ITEMS:
        raise UserCodeFailed(
            f"state '{d.s.current_state}': {what} returned {len(value):,} items; a fan-out "
            f"maps at most {MAX_FAN_OUT_ITEMS:,} per state visit (split the list across "
            "continue-as-new runs: docs/fan-out.md)"
        )
    return [d.use(v, canonical_json, f"{what}: item {i} is not JSON") for i, v in enumerate(value)]


def _digest(items: list[str]) -> str:
    return hashlib.sha256(("[" + ",".join(items) + "]").encode()).hexdigest()


def advance(d: Decision, step: Step, base_id: str) -> None:
    """Start the step's fan-out in this visit, then dispatch items up to its concurrency."""
    fo = d.s.fan_outs.get(step.name)
    items: list[str] | None = None
    if fo is None or fo.prefix != base_id:
        items = _items(d, step)
        d.emit(FanOutStarted(step.name, len(items), _digest(items)))
        fo = d.s.fan_outs[step.name]
    limit = step.max_concurrency or MAX_FAN_OUT_ITEMS
    while fo.dispatched < fo.items and fo.in_flight < limit:
        if items is None:
            items = _items(d, step)
            if len(items) != fo.items or _digest(items) != fo.items_digest:
                raise UserCodeFailed(
                    f"state '{d.s.current_state}': for_each of step '{step.name}' returned "
                    f"a different list than when the fan-out began ({len(items)} items, "
                    f"recorded {fo.items}): it may read only the input and the results of "
                    "the steps it runs after"
                )
        activities.schedule_step(d, step, fo.item_id(fo.dispatched), items[fo.dispatched])
        fo = d.s.fan_outs[step.name]


def item_failed(d: Decision, act: ActivityState, reason: str) -> str | None:
    """An item failed for good with ``reason``: None when its step's policy lets the
    fan-out go on (``FanOutItemFailed`` recorded), else the step's failure reason."""
    fo = d.s.fan_outs.get(act.step)
    index = None if fo is None else fo.index_of(act.activity_id)
    if fo is None or index is None:
        return reason
    step = d.defn.steps_by_name[act.step]
    where = f"item {index} of {fo.items}"
    policy = step.on_item_failure
    if policy == ItemFailurePolicy.FAIL_FAST:
        return f"{reason} ({where}; the fan-out fails fast)"
    if policy == ItemFailurePolicy.TOLERATE and len(fo.failures) >= step.tolerate:
        return f"{reason} ({where}; more than the {step.tolerate} failed items it tolerates)"
    d.emit(FanOutItemFailed(act.activity_id, index, reason))
    d.advance()
    return None


# -- folding ------------------------------------------------------------------------------


def _started(
    lookup: Callable[[WorkflowState], WorkflowDefinition],
    n: WorkflowState,
    p: FanOutStarted,
    env: Envelope[Any],
) -> None:
    prefix = f"{n.visit_tag()}/{p.step}"
    _store(n, p.step, FanOutState(prefix, p.items, p.items_digest))


def _item_failed(
    lookup: Callable[[WorkflowState], WorkflowDefinition],
    n: WorkflowState,
    p: FanOutItemFailed,
    env: Envelope[Any],
) -> None:
    step = n.activities[p.activity_id].step
    fo = n.fan_outs[step]
    _store(n, step, replace(fo, ended=fo.ended + 1, failures=(*fo.failures, p.index)))


def on_dispatched(n: WorkflowState, activity_id: str, step: str) -> None:
    """The first dispatch of ``activity_id``: one more item in flight, if it is one."""
    fo = n.fan_outs.get(step)
    if fo is not None and fo.index_of(activity_id) is not None:
        n.mut_fan_outs()[step] = replace(fo, dispatched=fo.dispatched + 1)


def on_completed(n: WorkflowState, act: ActivityState) -> bool:
    """``act`` completed: True when it is a fan-out item (its result is not the step's)."""
    if not is_item(act.activity_id):
        return False
    fo = n.fan_outs.get(act.step)
    if fo is not None and fo.index_of(act.activity_id) is not None:
        _store(n, act.step, replace(fo, ended=fo.ended + 1))
    return True


def _store(n: WorkflowState, step: str, fo: FanOutState) -> None:
    """Keep ``fo``; once every item ended, the step completes with the item results."""
    n.mut_fan_outs()[step] = fo
    if fo.ended < fo.items:
        return
    acts = n.activities
    results = []
    for i in range(fo.items):
        act = acts.get(fo.item_id(i))
        text = act.result_json if act is not None and act.status == _COMPLETED else None
        results.append(text or "null")
    n.record_result(step, "[" + ",".join(results) + "]", 0)
    if fo.prefix == f"{n.visit_tag()}/{step}" and step in n.steps_remaining:
        remaining = n.mut_steps_remaining()
        remaining.discard(step)
        if not remaining:
            signals.begin_wait(n)


APPLIERS: dict[type, Any] = {FanOutStarted: _started, FanOutItemFailed: _item_failed}
