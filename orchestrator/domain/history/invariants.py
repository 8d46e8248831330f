"""History invariants: what every workflow's recorded history must satisfy, checked
from the history alone (``keel workflow verify``, the test suite's teardown, the demo).

The decider is trusted to write sound histories; this module does not trust it. It
reads one workflow's envelopes from ``<prefix>.events`` in log order, across all its
runs (``WorkflowContinuedAsNew`` ends a run and the events after it carry the new run's
id), and reports each broken rule as a :class:`Violation`:

``seq``
    sequence numbers run 1, 2, 3, ... with no gap and no repeat (every run of the
    workflow shares the one sequence);
``start``
    exactly one ``WorkflowStarted``, and it is seq 1;
``run_end``
    a run ends at most once (completed, failed, cancelled, compensated, compensation
    failed, or continued as new) and records nothing after; every event carries its
    run's id;
``activity``
    each (run, activity id, attempt) is scheduled at most once and completed at most
    once, and only an attempt that was scheduled completes;
``idempotency_key``
    a key names one logical attempt, (run, activity id, logical attempt), in the whole
    workflow: retries share it, nothing else may;
``human_decision``
    a ``HumanTaskDecided`` follows the ``HumanTaskOpened`` of its task, carries that
    task's token hash and a 64-hex proof, and (when a ``proof_ok`` check is given, e.g.
    an HMAC under the deployment's key) its proof verifies;
``refusal``
    a ``CommandRefused`` names the command it answers: its ``command_id`` is its causation
    id (docs/activities.md, "Dead letters");
``run_scope``
    nothing of one run is another's (docs/workflows.md, "Runs and their ids"): no
    activity id or timer id of a run was an earlier run's, and no report (completion,
    failure, heartbeat) applied in a run was caused by a record of an earlier run;
``timer``
    a timer fires at or after the ``fire_at`` it was armed with (an earlier fire is a
    stale timer of another arming or a forged ``FireTimer``);
``child``
    a child step that names a run which is not its child (the parent itself; across
    workflows, :class:`ChildLinks`: a finished run, a run of another workflow, another
    step's child) gets a report (the engine fails the step with
    ``ChildWorkflowIdInUse``) rather than waiting forever;
``record``
    the topic holds only decodable events of the workflow its key names, in one
    partition (reported by the readers in the runtime; the checker reports an envelope
    of another workflow or a record that is not an event).

:class:`HistoryChecker` takes envelopes one at a time and keeps per-run indexes only
(never the envelopes), so a reader can check a whole topic without holding it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.domain.model.keys import CHILD_ACTIVITY_PREFIX
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    ActivityCompleted,
    ActivityFailed,
    ActivityHeartbeat,
    ActivityScheduled,
    CommandRefused,
    Envelope,
    HumanTaskDecided,
    HumanTaskOpened,
    TimerFired,
    TimerScheduled,
    WorkflowContinuedAsNew,
    WorkflowStarted,
)

__all__ = [
    "ChildLinks",
    "HistoryChecker",
    "Invariant",
    "ProofCheck",
    "Violation",
    "check_histories",
    "check_history",
]


class Invariant(StrEnum):
    """The rules a history must keep (the module docstring says what each means)."""

    SEQ = "seq"
    START = "start"
    RUN_END = "run_end"
    ACTIVITY = "activity"
    IDEMPOTENCY_KEY = "idempotency_key"
    HUMAN_DECISION = "human_decision"
    REFUSAL = "refusal"
    RECORD = "record"
    RUN_SCOPE = "run_scope"
    TIMER = "timer"
    CHILD = "child"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: where (workflow, seq; 0 when no event carries it) and why."""

    workflow_id: str
    seq: int
    rule: Invariant
    message: str

    def __str__(self) -> str:
        return f"{self.workflow_id} seq {self.seq} [{self.rule}]: {self.message}"


#: Recomputes a decision's proof (e.g. an HMAC under the deployment's key): True when valid.
ProofCheck = Callable[[str, HumanTaskDecided], bool]

#: The events after which a run records nothing more.
_RUN_ENDS: tuple[type, ...] = (*TERMINAL_EVENTS, WorkflowContinuedAsNew)
#: The events that apply a worker's report to an activity.
_REPORTS: tuple[type, ...] = (ActivityCompleted, ActivityFailed, ActivityHeartbeat)
_PROOF = re.compile(r"[0-9a-f]{64}")


@dataclass(slots=True)
class _Run:
    run_id: str
    #: ``(event type, seq)`` of the event that ended the run; None while it goes on.
    ended: tuple[str, int] | None = None
    scheduled: set[tuple[str, int]] = field(default_factory=set)
    completed: set[tuple[str, int]] = field(default_factory=set)
    #: The next run's id once this one continued as new.
    continued_as: str = ""
    #: ``fire_at`` of each timer armed in this run, by timer id.
    timers: dict[str, int] = field(default_factory=dict)


class HistoryChecker:
    """The invariants of one workflow's history, fed one envelope at a time in log order.

    ``feed`` every envelope, then ``finish`` for the violations. The checker holds per-run
    sets of (activity, attempt), the workflow's idempotency keys and its open human tasks:
    memory grows with a workflow's activities, not with its events.
    """

    def __init__(self, workflow_id: str, proof_ok: ProofCheck | None = None) -> None:
        self.workflow_id = workflow_id
        self.proof_ok = proof_ok
        self.events = 0
        self.violations: list[Violation] = []
        self._next_seq = 1
        self._starts = 0
        self._run: _Run | None = None
        self._keys: dict[str, tuple[str, str, int, int]] = {}
        self._tasks: dict[str, HumanTaskOpened] = {}
        #: (run id, seq) that first used each activity id and each timer id.
        self._ids: dict[tuple[str, str], tuple[str, int]] = {}
        #: The ids of the runs that ended before the current one.
        self._earlier_runs: set[str] = set()
        #: Child steps naming this workflow itself, not yet told (activity id -> seq).
        self._self_children: dict[str, int] = {}

    def _flag(self, seq: int, rule: Invariant, message: str) -> None:
        self.violations.append(Violation(self.workflow_id, seq, rule, message))

    def feed(self, env: Envelope[Any]) -> None:
        """Check one envelope against what came before it."""
        self.events += 1
        p = env.payload
        if env.workflow_id != self.workflow_id:
            self._flag(env.seq, Invariant.RECORD, f"an event of workflow {env.workflow_id!r}")
            return
        if getattr(p, "KIND", "") != "event":
            self._flag(env.seq, Invariant.RECORD, f"{env.type} is not an event")
            return
        self._seq(env)
        self._start(env)
        run = self._in_run(env)
        if isinstance(p, ActivityScheduled):
            self._scheduled(run, env, p)
            self._own_id(run, env, "activity", p.activity_id)
        elif isinstance(p, ActivityCompleted):
            self._completed(run, env, p)
        elif isinstance(p, TimerScheduled):
            run.timers[p.timer_id] = p.fire_at
            self._own_id(run, env, "timer", p.timer_id)
        elif isinstance(p, TimerFired):
            self._fired(run, env, p)
        elif isinstance(p, HumanTaskOpened):
            self._tasks[p.task_id] = p
        elif isinstance(p, HumanTaskDecided):
            self._decided(env, p)
        elif isinstance(p, CommandRefused) and (
            not p.command_id or p.command_id != env.causation_id
        ):
            self._flag(
                env.seq,
                Invariant.REFUSAL,
                f"refusal of {p.what[:100]!r} names command {p.command_id[:100]!r}, "
                f"caused by {str(env.causation_id)[:100]!r}",
            )
        if isinstance(p, _REPORTS):
            self._report_of_this_run(run, env, p)
        if isinstance(p, ActivityCompleted | ActivityFailed):
            self._self_children.pop(p.activity_id, None)  # told: the step did not hang
        if isinstance(p, _RUN_ENDS) and run.ended is None:
            run.ended = (env.type, env.seq)

    def finish(self) -> list[Violation]:
        """Every violation found, in the order found (the missing start last)."""
        for aid, seq in self._self_children.items():
            self._flag(
                seq,
                Invariant.CHILD,
                f"child step {aid[:200]!r} names the parent itself as its child workflow id "
                "and was never told",
            )
        self._self_children = {}
        if self.events and not self._starts:
            self._flag(0, Invariant.START, "the history has no WorkflowStarted")
            self._starts = -1  # reported once, however often finish is called
        return list(self.violations)

    # -- the rules ------------------------------------------------------------------------

    def _seq(self, env: Envelope[Any]) -> None:
        want = self._next_seq
        if env.seq == want:
            self._next_seq += 1
        elif env.seq > want:
            missing = f"{want}" if env.seq == want + 1 else f"{want}..{env.seq - 1}"
            self._flag(
                env.seq, Invariant.SEQ, f"{env.type} at seq {env.seq}: seq {missing} missing"
            )
            self._next_seq = env.seq + 1
        else:
            self._flag(
                env.seq,
                Invariant.SEQ,
                f"{env.type} repeats seq {env.seq} (seq {want - 1} came before it)",
            )

    def _start(self, env: Envelope[Any]) -> None:
        if isinstance(env.payload, WorkflowStarted):
            self._starts += 1
            if self._starts > 1:
                self._flag(env.seq, Invariant.START, f"WorkflowStarted number {self._starts}")
            elif env.seq != 1:
                self._flag(env.seq, Invariant.START, f"WorkflowStarted at seq {env.seq}, not 1")
        elif env.seq == 1:
            self._flag(env.seq, Invariant.START, f"seq 1 is {env.type}, not WorkflowStarted")

    def _in_run(self, env: Envelope[Any]) -> _Run:
        """The run ``env`` belongs to, flagging an event after its run's end or of
        another run; a continued run's successor begins with its first event."""
        run = self._run
        if run is None:
            run = self._run = _Run(env.run_id)
        elif run.ended is not None:
            ended_by, at = run.ended
            if not run.continued_as or env.run_id == run.run_id:
                self._flag(
                    env.seq,
                    Invariant.RUN_END,
                    f"{env.type} after run {run.run_id!r} ended with {ended_by} at seq {at}",
                )
                return run
            if env.run_id != run.continued_as:
                self._flag(
                    env.seq,
                    Invariant.RUN_END,
                    f"{env.type} of run {env.run_id!r}: run {run.run_id!r} continued as "
                    f"{run.continued_as!r} at seq {at}",
                )
            self._earlier_runs.add(run.run_id)
            run = self._run = _Run(env.run_id)
        elif env.run_id != run.run_id:
            self._flag(
                env.seq,
                Invariant.RUN_END,
                f"{env.type} of run {env.run_id!r} in run {run.run_id!r}",
            )
        if isinstance(env.payload, WorkflowContinuedAsNew):
            run.continued_as = env.payload.new_run_id
        return run

    def _scheduled(self, run: _Run, env: Envelope[Any], p: ActivityScheduled) -> None:
        attempt = (p.activity_id, p.attempt)
        if attempt in run.scheduled:
            self._flag(
                env.seq,
                Invariant.ACTIVITY,
                f"attempt {p.attempt} of activity {p.activity_id!r} scheduled again",
            )
        run.scheduled.add(attempt)
        if p.activity_type.startswith(CHILD_ACTIVITY_PREFIX) and (
            p.idempotency_key == self.workflow_id
        ):
            self._self_children.setdefault(p.activity_id, env.seq)
        logical = (run.run_id, p.activity_id, p.logical_attempt)
        owner = self._keys.setdefault(p.idempotency_key, (*logical, env.seq))
        if owner[:3] != logical:
            o_run, o_activity, o_logical, o_seq = owner
            self._flag(
                env.seq,
                Invariant.IDEMPOTENCY_KEY,
                f"key {p.idempotency_key!r} of activity {p.activity_id!r} logical attempt "
                f"{p.logical_attempt} (run {run.run_id!r}) was already that of activity "
                f"{o_activity!r} logical attempt {o_logical} (run {o_run!r}, seq {o_seq})",
            )

    def _own_id(self, run: _Run, env: Envelope[Any], kind: str, the_id: str) -> None:
        """An activity or timer id is its run's alone (ids of runs continued before ids
        were run-scoped repeat the first run's: ``<state>#<visit>/...``)."""
        owner = self._ids.setdefault((kind, the_id), (run.run_id, env.seq))
        if owner[0] != run.run_id:
            self._flag(
                env.seq,
                Invariant.RUN_SCOPE,
                f"{kind} id {the_id[:200]!r} of run {run.run_id!r} was already that of run "
                f"{owner[0]!r} (seq {owner[1]})",
            )

    def _report_of_this_run(self, run: _Run, env: Envelope[Any], p: Any) -> None:
        """A report applied in a run was not caused by a record of an earlier run (a
        worker's report's message id begins with its task's run id)."""
        cause = env.causation_id or ""
        at = cause.find("/")
        while at > 0:
            if cause[:at] in self._earlier_runs:
                self._flag(
                    env.seq,
                    Invariant.RUN_SCOPE,
                    f"{env.type} of activity {p.activity_id[:200]!r} in run {run.run_id!r} "
                    f"applies a report of run {cause[:at]!r} (caused by {cause[:200]!r})",
                )
                return
            at = cause.find("/", at + 1)

    def _fired(self, run: _Run, env: Envelope[Any], p: TimerFired) -> None:
        fire_at = run.timers.pop(p.timer_id, None)
        if fire_at is not None and env.recorded_at < fire_at:
            self._flag(
                env.seq,
                Invariant.TIMER,
                f"timer {p.timer_id[:200]!r} fired at {env.recorded_at}, "
                f"{fire_at - env.recorded_at} ms before it was due ({fire_at})",
            )

    def _completed(self, run: _Run, env: Envelope[Any], p: ActivityCompleted) -> None:
        attempt = (p.activity_id, p.attempt)
        if attempt not in run.scheduled:
            self._flag(
                env.seq,
                Invariant.ACTIVITY,
                f"attempt {p.attempt} of activity {p.activity_id!r} completed, never scheduled",
            )
        elif attempt in run.completed:
            self._flag(
                env.seq,
                Invariant.ACTIVITY,
                f"attempt {p.attempt} of activity {p.activity_id!r} completed again",
            )
        run.completed.add(attempt)

    def _decided(self, env: Envelope[Any], p: HumanTaskDecided) -> None:
        opened = self._tasks.get(p.task_id)
        what = f"decision of human task {p.task_id!r}"
        if opened is None:
            self._flag(env.seq, Invariant.HUMAN_DECISION, f"{what} without HumanTaskOpened")
        # Read by name: histories written before decisions carried them lack the fields
        # (None here: nothing to compare), and decoding old events gives their defaults.
        token = getattr(p, "token_hash", None)
        if opened is not None and token is not None and token != opened.token_hash:
            self._flag(
                env.seq,
                Invariant.HUMAN_DECISION,
                f"{what}: token hash {token[:16]!r}... is not the task's",
            )
        proof = getattr(p, "proof", None)
        if proof is None:
            return
        if not isinstance(proof, str) or not _PROOF.fullmatch(proof):
            self._flag(env.seq, Invariant.HUMAN_DECISION, f"{what}: proof is not 64 lowercase hex")
        elif self.proof_ok is not None and not self.proof_ok(self.workflow_id, p):
            self._flag(env.seq, Invariant.HUMAN_DECISION, f"{what}: proof does not verify")


class ChildLinks:
    """The ``child`` rule across workflows: each child step names a run that is its child.

    ``feed`` every envelope of a topic (any workflows, any order), then ``finish``: a
    child step (attempt 1 of a ``keel.child:`` activity; its idempotency key is the
    child's workflow id) whose named workflow was started by another parent or step, or
    by no parent at all, and that no report ever settled, is flagged: the parent waits
    for a child that will never answer it. Memory: one entry per workflow start and per
    child step.
    """

    def __init__(self) -> None:
        #: (parent, activity id) -> (child workflow id, seq of the step's scheduling).
        self._steps: dict[tuple[str, str], tuple[str, int]] = {}
        self._settled: set[tuple[str, str]] = set()
        #: child workflow id -> (parent, activity id) its first run was started for.
        self._starts: dict[str, tuple[str | None, str | None]] = {}

    def feed(self, env: Envelope[Any]) -> None:
        p = env.payload
        if isinstance(p, ActivityScheduled):
            if p.attempt == 1 and p.activity_type.startswith(CHILD_ACTIVITY_PREFIX):
                self._steps.setdefault(
                    (env.workflow_id, p.activity_id), (p.idempotency_key, env.seq)
                )
        elif isinstance(p, ActivityCompleted | ActivityFailed):
            self._settled.add((env.workflow_id, p.activity_id))
        elif isinstance(p, WorkflowStarted):
            self._starts.setdefault(env.workflow_id, (p.parent_workflow_id, p.parent_activity_id))

    def finish(self) -> list[Violation]:
        out = []
        for (parent, aid), (child, seq) in self._steps.items():
            started = self._starts.get(child)
            if child == parent or started is None or started == (parent, aid):
                continue  # the parent itself (HistoryChecker flags it), not yet started, or its own
            if (parent, aid) in self._settled:
                continue  # the step was told (the new code fails it: ChildWorkflowIdInUse)
            by = "no parent" if started[0] is None else f"{started[0]!r} for {started[1]!r}"
            out.append(
                Violation(
                    parent,
                    seq,
                    Invariant.CHILD,
                    f"child step {aid[:200]!r} names workflow {child!r}, a run started by "
                    f"{by}: the step waits for a child that is not its own",
                )
            )
        return out


def check_history(
    envelopes: Iterable[Envelope[Any]], proof_ok: ProofCheck | None = None
) -> list[Violation]:
    """The violations of one workflow's history (its envelopes in log order)."""
    checker: HistoryChecker | None = None
    for env in envelopes:
        if checker is None:
            checker = HistoryChecker(env.workflow_id, proof_ok)
        checker.feed(env)
    return [] if checker is None else checker.finish()


def check_histories(
    envelopes: Iterable[Envelope[Any]], proof_ok: ProofCheck | None = None
) -> list[Violation]:
    """The violations of many workflows' histories (envelopes in log order per workflow),
    the cross-workflow ``child`` rule (:class:`ChildLinks`) included."""
    checkers: dict[str, HistoryChecker] = {}
    links = ChildLinks()
    for env in envelopes:
        checker = checkers.get(env.workflow_id)
        if checker is None:
            checker = checkers[env.workflow_id] = HistoryChecker(env.workflow_id, proof_ok)
        checker.feed(env)
        links.feed(env)
    out = [v for c in checkers.values() for v in c.finish()]
    return out + links.finish()
