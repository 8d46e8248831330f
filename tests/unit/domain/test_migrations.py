"""Recorded migrations (docs/versioning.md, "Migrate"): the decider's rules, the event,
its fold, deadlines carried over, and replay across a migration."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import Decider
from orchestrator.domain.authoring.definitions import (
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
)
from orchestrator.domain.authoring.migrations import Migration
from orchestrator.domain.history.replay import replay_history, replay_on_version
from orchestrator.domain.model.errors import CommandRejected, DefinitionError
from orchestrator.domain.model.messages import (
    CompleteActivity,
    Envelope,
    FireTimer,
    MigrateWorkflow,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerScheduled,
    WorkflowMigrated,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import WorkflowStatus
from tests.integration.migration_app import V1, V2, TicketV1

T0 = 1_700_000_000_000
WID = "wf-1"


class Run:
    """One run decided command by command, its events kept in order."""

    def __init__(self, decider: Decider) -> None:
        self.decider = decider
        self.state: WorkflowState | None = None
        self.events: list[Envelope[Any]] = []
        self.n = 0

    def send(self, payload: Any, at: int = T0, mid: str | None = None) -> list[Envelope[Any]]:
        self.n += 1
        cmd: Envelope[Any] = Envelope(
            message_id=mid or f"cmd-{self.n}",
            workflow_id=WID,
            run_id="",
            seq=0,
            type=type(payload).__name__,
            recorded_at=at,
            payload=payload,
        )
        self.state, envs = self.decider.handle(self.state, cmd, at)
        self.events.extend(envs)
        return envs

    @property
    def s(self) -> WorkflowState:
        assert self.state is not None
        return self.state


def _waiting_v1(decider: Decider, ticket: int = 7, hold: bool = False) -> Run:
    run = Run(decider)
    run.send(StartWorkflow("ticket", 1, json.dumps({"ticket": ticket, "hold": hold})))
    assert run.s.status == WorkflowStatus.WAITING
    return run


def _migrate(to: int = 2, **kw: Any) -> MigrateWorkflow:
    return MigrateWorkflow(to, kw.pop("actor", "ana"), kw.pop("reason", "new path"), **kw)


def test_a_waiting_run_is_migrated_recorded_and_continues_on_v2() -> None:
    run = _waiting_v1(Decider([V1, V2]), ticket=101)
    at = T0 + 60_000
    envs = run.send(_migrate(from_version=1, to_digest=V2.digest), at=at, mid="mig-1")
    assert [e.payload for e in envs] == [
        WorkflowMigrated(
            from_version=1,
            to_version=2,
            from_digest=V1.digest,
            to_digest=V2.digest,
            from_state="awaiting_approval",
            to_state="approval",
            migration="v1->v2",
            data_json='{"input":{"hold":false,"priority":"urgent","ticket":101}}',
            actor="ana",
            reason="new path",
        ),
        StateEntered("approval", 1),
        TimerScheduled("approval#1/timeout", at + 3_600_000, "timeout:approve"),
    ]
    assert all(e.causation_id == "mig-1" for e in envs)
    s = run.s
    assert (s.version, s.digest, s.current_state, s.status) == (
        2,
        V2.digest,
        "approval",
        WorkflowStatus.WAITING,
    )
    assert json.loads(s.input_json) == {"hold": False, "priority": "urgent", "ticket": 101}
    assert list(s.timers) == ["approval#1/timeout"]  # the old wait's position is gone
    # folding the recorded events rebuilds the same state
    folded = Decider([V1, V2]).fold(run.events)
    assert folded is not None and folded.to_dict() == s.to_dict()
    # a redelivery of the migration writes nothing
    assert run.send(_migrate(), at=at, mid="mig-1") == []
    # the run goes on along v2's path
    run.send(SignalWorkflow("approve", "{}", None), at=at + 1)
    [aid] = run.s.in_flight
    result = json.loads(run.s.activities[aid].input_json)
    assert result == {"path": "v2", "priority": "urgent", "ticket": 101}
    run.send(CompleteActivity(aid, 1, json.dumps(result)), at=at + 2)
    assert run.s.status == WorkflowStatus.COMPLETED
    assert json.loads(run.s.output_json or "") == result


def _refusal(run: Run, payload: MigrateWorkflow) -> str:
    before = run.s
    with pytest.raises(CommandRejected) as exc:
        run.send(payload)
    assert run.s is before  # nothing recorded
    return str(exc.value)


def test_every_refusal_names_its_reason() -> None:
    both = Decider([V1, V2])
    run = _waiting_v1(both)
    assert _refusal(run, _migrate(from_version=3)) == (
        "workflow 'wf-1' runs v1, not v3 as checked; migration to version 2 refused"
    )
    assert _refusal(run, _migrate(1)) == (
        "workflow 'wf-1' already runs v1; migration to version 1 refused"
    )
    assert _refusal(run, _migrate(to_digest="0" * 64)) == (
        f"workflow 'ticket' v2 here has digest {V2.digest[:12]}, not 000000000000 as checked "
        "(dry-run it again); migration to version 2 refused"
    )
    assert _refusal(_waiting_v1(Decider([V1])), _migrate()) == (
        "this process has no v2 of workflow 'ticket'; migration to version 2 refused"
    )
    v3 = _v2_like(3, migrations=[])
    assert _refusal(_waiting_v1(Decider([V1, v3])), _migrate(3)) == (
        "workflow 'ticket' v3 declares no migration from v1; migration to version 3 refused"
    )
    held = _waiting_v1(both, hold=True)
    assert _refusal(held, _migrate()) == (
        "workflow 'wf-1' is in state 'on_hold', which migration v1->v2 does not map "
        "(it maps 'awaiting_approval'); migration to version 2 refused"
    )
    # an activity in flight: refused even where the state is mapped
    mapped = _v2_like(2, states={"awaiting_approval": "approval", "stamping": "stamping"})
    busy = _waiting_v1(Decider([V1, mapped]))
    busy.send(SignalWorkflow("approve", "{}", None))
    assert busy.s.in_flight == {"stamping#1/stamp"}
    assert _refusal(busy, _migrate()) == (
        "workflow 'wf-1' is in state 'stamping' with activity 'stamping#1/stamp' in flight; "
        "migrate it while it waits; migration to version 2 refused"
    )
    busy.send(CompleteActivity("stamping#1/stamp", 1, "{}"))
    assert _refusal(busy, _migrate()) == (
        "workflow 'wf-1' is completed; migration to version 2 refused"
    )


def _bad_data(ctx: Any) -> Any:
    return {"input": ctx.input_dict, "inputs": 1}


def _raising_data(ctx: Any) -> Any:
    return ctx.results["nothing"]


def _unknown_step(ctx: Any) -> Any:
    return {"results": {"nope": 1}}


class Strict(BaseModel):
    ticket: int
    region: str


@pytest.mark.parametrize(
    ("migration", "model", "reason"),
    [
        (
            Migration(1, {"awaiting_approval": "approval"}, data=_bad_data),
            TicketV1,
            "migration v1->v2: data returned inputs; it may replace only input and results",
        ),
        (
            Migration(1, {"awaiting_approval": "approval"}, data=_raising_data),
            TicketV1,
            "migration v1->v2: data raised KeyError: 'nothing'",
        ),
        (
            Migration(1, {"awaiting_approval": "approval"}, data=_unknown_step),
            TicketV1,
            "migration v1->v2: data's results name step 'nope', which workflow 'ticket' v2 "
            "does not have",
        ),
        (
            Migration(1, {"awaiting_approval": "approval"}),
            Strict,
            "the run's input does not fit workflow 'ticket' v2: invalid input for workflow "
            "'ticket' v2: field 'region': Field required (map it with the migration's data)",
        ),
    ],
)
def test_a_migration_whose_data_does_not_fit_is_refused(
    migration: Migration, model: type[BaseModel], reason: str
) -> None:
    v2 = _v2_like(2, migrations=[migration], model=model)
    run = _waiting_v1(Decider([V1, v2]))
    assert _refusal(run, _migrate()) == f"{reason}; migration to version 2 refused"


def _v2_like(
    version: int,
    *,
    states: dict[str, str] | None = None,
    migrations: list[Migration] | None = None,
    model: type[BaseModel] = TicketV1,
) -> WorkflowDefinition:
    if migrations is None:
        migrations = [Migration(1, states or {"awaiting_approval": "approval"})]
    return WorkflowDefinition(
        "ticket",
        version,
        model,
        [
            State("approval", wait=SignalWait("approve"), transitions=[Transition("stamping")]),
            State("stamping", steps=[Step("stamp", "stamp")], complete=lambda ctx: {}),
        ],
        migrations=migrations,
    )


def test_declaring_a_migration_is_checked() -> None:
    with pytest.raises(DefinitionError, match="maps 'a' to unknown state 'nowhere'"):
        _v2_like(2, migrations=[Migration(1, {"a": "nowhere"})])
    with pytest.raises(DefinitionError, match="from_version must be an int from 1 to 1"):
        _v2_like(2, migrations=[Migration(2, {"a": "approval"})])
    with pytest.raises(DefinitionError, match="migration from v1 is declared twice"):
        _v2_like(3, migrations=[Migration(1, {"a": "approval"}), Migration(1, {"b": "approval"})])
    # a migration is part of the digest: editing it is an edit of the definition
    assert _v2_like(2).digest != _v2_like(2, states={"x": "approval"}).digest


# -- deadlines ----------------------------------------------------------------------------


def _cooling(version: int, seconds: int, migrations: list[Migration] = ()) -> WorkflowDefinition:  # type: ignore[assignment]
    return WorkflowDefinition(
        "cool",
        version,
        TicketV1,
        [
            State(f"cool{version}", wait=TimerWait(seconds), transitions=[Transition("done")]),
            State("done", complete=lambda ctx: {"v": ctx.workflow_id}),
        ],
        migrations=migrations,
    )


COOL1 = _cooling(1, 3600)
COOL2 = _cooling(2, 600, [Migration(1, {"cool1": "cool2"})])


@pytest.mark.parametrize(
    ("after_s", "fires_after_s"),
    [(100, 100 + 600), (3500, 3600)],  # the fresh deadline, or the old one if earlier
)
def test_a_timer_wait_keeps_the_earlier_deadline(after_s: int, fires_after_s: int) -> None:
    run = Run(Decider([COOL1, COOL2]))
    run.send(StartWorkflow("cool", 1, json.dumps({"ticket": 1})))
    assert run.s.pending_timers() == [("cool1#1/wait", T0 + 3_600_000)]
    run.send(_migrate(), at=T0 + after_s * 1000)
    assert run.s.pending_timers() == [("cool2#1/wait", T0 + fires_after_s * 1000)]
    # the old timer firing late writes nothing; the new one moves the run on
    assert run.send(FireTimer("cool1#1/wait"), at=T0 + 3_600_000) == []
    run.send(FireTimer("cool2#1/wait"), at=T0 + fires_after_s * 1000)
    assert run.s.status == WorkflowStatus.COMPLETED


# -- replay ------------------------------------------------------------------------------


def _migrated_history() -> list[Envelope[Any]]:
    run = _waiting_v1(Decider([V1, V2]), ticket=5)
    run.send(_migrate(), at=T0 + 10)
    run.send(SignalWorkflow("approve", "{}", None), at=T0 + 20)
    [aid] = run.s.in_flight
    run.send(CompleteActivity(aid, 1, run.s.activities[aid].input_json), at=T0 + 30)
    assert run.s.status == WorkflowStatus.COMPLETED
    return run.events


def test_replay_decides_a_migration_again_and_uses_v2_after_it() -> None:
    events = _migrated_history()
    [report] = replay_history(Decider([V1, V2]), events)
    assert report.ok and report.folded_only == 0
    assert report.groups == report.redecided == 4  # start, migrate, signal, completion
    assert report.migrations == [
        {
            "seq": 4,
            "from_version": 1,
            "to_version": 2,
            "recorded_digest": V2.digest,
            "current_digest": V2.digest,
        }
    ]
    assert not report.digest_changed


def test_replay_names_a_changed_v2_decision_after_the_migration() -> None:
    events = _migrated_history()
    edited = WorkflowDefinition(
        "ticket",
        2,
        V2.input_model,
        [
            State("approval", wait=SignalWait("approve"), transitions=[Transition("done")]),
            State("done", complete=lambda ctx: {"edited": True}),
        ],
        migrations=[Migration(1, {"awaiting_approval": "approval"}, data=V2.migrations[1].data)],
    )
    [report] = replay_history(Decider([V1, edited]), events)
    d = report.divergence
    assert d is not None and d.command == "MigrateWorkflow"
    assert d.expected is not None and d.expected["type"] == "TimerScheduled"
    assert report.digest_changed  # the migration's target was edited in place
    # without v2 the migration itself is where replay stops, with the refusal
    [missing] = replay_history(Decider([V1]), events)
    assert missing.divergence is not None and missing.divergence.seq == 4
    assert missing.divergence.note == (
        "the new code refuses MigrateWorkflow: this process has no v2 of workflow 'ticket'; "
        "migration to version 2 refused"
    )


def test_replay_on_the_target_version_shows_where_it_decides_otherwise() -> None:
    run = _waiting_v1(Decider([V1, V2]))
    report = replay_on_version(Decider([V1, V2]), run.events, {}, 2)
    d = report.divergence
    assert d is not None and d.seq == 3
    assert d.expected == {"type": "StateEntered", "state": "awaiting_approval", "visit": 1}
    assert d.got == {"type": "StateEntered", "state": "approval", "visit": 1}


def test_a_finished_migrated_run_summarizes_to_its_fold() -> None:
    """A rebuild keeps finished runs as summaries: a migrated one must show v2, not v1."""
    events = _migrated_history()
    decider = Decider([V1, V2])
    folded = decider.fold(events)
    summary = decider.summarize(None, events)
    assert summary == folded.summary()
    assert (summary.version, summary.digest) == (2, V2.digest)
