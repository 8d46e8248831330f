"""Properties of the decider over random command histories.

For random interleavings of starts, completions and failures of scheduled activities,
heartbeats, signals, timer firings (waits, retries and activity timeouts), status query
answers, late reports of timed-out attempts, redrives and resolutions by an operator,
cancels, duplicates and redeliveries, on several workflows:

* folding the emitted events from scratch gives exactly the state held incrementally
  (and a snapshot taken anywhere, restored and folded forward, gives it too);
* every history has contiguous ``seq`` from 1 and at most one terminal event, last;
* replaying the recorded commands against the rebuilt states makes the same decisions
  (same events, same rejections), and redelivering any command that wrote events, at
  any later point, writes nothing;
* the run needs attention exactly while an activity is dead-lettered or unresolved, and
  a write whose outcome is unknown is never dispatched again before a query or an
  operator said it did not happen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from orchestrator.domain import FAILURE_CLASSES, CommandRejected, Decider, WorkflowState
from orchestrator.domain.authoring.definitions import (
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
)
from orchestrator.domain.lifecycle.decider import RESOLUTIONS, activity_timeout
from orchestrator.domain.model.messages import (
    TERMINAL_EVENTS,
    ActivityCompleted,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityRedriven,
    ActivityResolved,
    ActivityScheduled,
    ActivityTimedOut,
    CancelWorkflow,
    CompleteActivity,
    Envelope,
    FailActivity,
    FireTimer,
    HeartbeatActivity,
    RedriveActivity,
    ResolveActivity,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    StateEntered,
    TimerScheduled,
    WorkflowStarted,
)
from orchestrator.domain.model.state import STATUSES
from orchestrator.examples import app


class Empty(BaseModel):
    pass


loopy = WorkflowDefinition(
    "loopy",
    1,
    Empty,
    [
        State(
            "work",
            steps=[
                Step(
                    "fetch",
                    "fetch",
                    retry=RetryPolicy(max_attempts=2, initial_interval_ms=10),
                    on_exhausted="fail",
                ),
                Step("store", "store", after=["fetch"], input=lambda ctx: ctx.results["fetch"]),
                Step("side", "side", heartbeat=1),
            ],
            transitions=[
                Transition(
                    "pause",
                    when=lambda ctx: ctx.results["store"].get("again") and ctx.visits["work"] < 3,
                ),
                Transition("end"),
            ],
            on_failure="repair",
        ),
        State(
            "repair",
            steps=[Step("fix", "side", input=lambda ctx: sorted(ctx.failures))],
            transitions=[Transition("work", when=lambda ctx: ctx.visits["repair"] < 2)],
            fail="gave up",
        ),
        State(
            "pause",
            wait=TimerWait(lambda ctx: ctx.visits["pause"]),
            transitions=[Transition("hold")],
        ),
        State("hold", wait=SignalWait("go"), transitions=[Transition("work")]),
        State("end", complete=lambda ctx: {"signals": ctx.signals, "visits": ctx.visits}),
    ],
)

#: Every failure path of DESIGN §7: timeouts of each kind, a status query, dead letters
#: (notify), the "fail" path (book), non-retryable errors and max_elapsed (charge).
guarded = WorkflowDefinition(
    "guarded",
    1,
    Empty,
    [
        State(
            "pay",
            steps=[
                Step(
                    "charge",
                    "charge",
                    retry=RetryPolicy(
                        max_attempts=3,
                        initial_interval_ms=400,
                        max_elapsed=6,
                        non_retryable=frozenset({"Declined"}),
                    ),
                    schedule_to_start=2,
                    start_to_close=4,
                    heartbeat=1.5,
                    status_query="charge_status",
                ),
                Step(
                    "notify",
                    "notify",
                    retry=RetryPolicy(max_attempts=2, initial_interval_ms=10),
                    start_to_close=2.5,
                    status_query="notify_status",
                ),
                Step(
                    "book",
                    "book",
                    after=["charge"],
                    retry=RetryPolicy(max_attempts=2, initial_interval_ms=10),
                    start_to_close=2,
                    status_query="book_status",
                    on_exhausted="fail",
                ),
            ],
            transitions=[
                Transition(
                    "pay",
                    when=lambda ctx: ctx.results["book"].get("again") and ctx.visits["pay"] < 2,
                ),
                Transition("end"),
            ],
            on_failure="refund",
        ),
        State(
            "refund",
            steps=[Step("refund", "refund", input=lambda ctx: sorted(ctx.failures))],
            fail="refunded",
        ),
        State("end", complete=lambda ctx: {"visits": ctx.visits}),
    ],
)

DECIDER = Decider([*app.definitions.values(), loopy, guarded])
WIDS = ("w1", "w2", "w3")
T0 = 1_700_000_000_000


def result_for(activity_type: str) -> st.SearchStrategy[Any]:
    ints = st.integers(-5, 5)
    by_type: dict[str, st.SearchStrategy[Any]] = {
        "review_document": st.fixed_dictionaries(
            {
                "decision": st.sampled_from(["approved", "rejected", "needs_documents"]),
                "documents": st.integers(1, 4),
            }
        ),
        "fetch": st.fixed_dictionaries({"v": ints}),
        "store": st.fixed_dictionaries({"again": st.booleans()}),
        "book": st.fixed_dictionaries({"again": st.booleans()}),
        "charge_status": st.one_of(
            st.fixed_dictionaries({"found": st.just(True), "result": st.just({"again": True})}),
            st.just({"found": False}),
            st.just({"found": "perhaps"}),  # unusable: the run needs attention
        ),
        "notify_status": st.sampled_from(
            [{"found": True, "result": {"sent": 1}}, {"found": False}]
        ),
        "book_status": st.one_of(
            st.fixed_dictionaries(
                {"found": st.just(True), "result": st.fixed_dictionaries({"again": st.booleans()})}
            ),
            st.just({"found": False}),
        ),
        "add_one": st.fixed_dictionaries({"n": ints}),
        "double": st.fixed_dictionaries({"n": ints}),
        "square": st.fixed_dictionaries({"n": ints}),
    }
    good = by_type.get(activity_type, st.fixed_dictionaries({"value": ints}))
    # now and then a result the definition's functions do not expect (-> the run fails)
    return st.one_of(good, good, good, st.just({}))


def start_payload(data: st.DataObject, focus: bool = False) -> StartWorkflow:
    if focus:  # mostly the workflow with every failure path
        return StartWorkflow(
            data.draw(st.sampled_from(["guarded", "guarded", "guarded", "loopy"])), None, "{}"
        )
    name = data.draw(
        st.sampled_from(
            [
                "document_review",
                "document_review",
                "loopy",
                "loopy",
                "parallel_checks",
                "three_step",
                "timer_demo",
                "guarded",
                "guarded",
                "guarded",
                "missing",
            ]
        ),
        label="workflow",
    )
    inputs = {
        "document_review": st.sampled_from([{"document": "a"}, {"document": "fraud"}, {"x": 1}]),
        "loopy": st.just({}),
        "guarded": st.just({}),
        "parallel_checks": st.sampled_from([{"n": 2}, {"n": "x"}]),
        "three_step": st.just({"n": 1}),
        "timer_demo": st.sampled_from([{"seconds": 0}, {"seconds": 2.5}]),
        "missing": st.just({}),
    }
    inp = data.draw(inputs[name], label="input")
    version = data.draw(st.sampled_from([None, 1, 1, 2]), label="version")
    return StartWorkflow(name, version, json.dumps(inp))


@dataclass
class Record:
    cmd: Envelope[Any]
    before: WorkflowState | None
    after: WorkflowState | None
    envs: list[Envelope[Any]] | None  # None: rejected
    rejection: str | None


class World:
    """Random commands to three workflows; ``focus``: mostly ``guarded``, cancelled only
    while it needs attention (so runs live long enough to reach the operator paths)."""

    def __init__(self, focus: bool = False) -> None:
        self.focus = focus
        self.states: dict[str, WorkflowState | None] = dict.fromkeys(WIDS)
        self.records: dict[str, list[Record]] = {w: [] for w in WIDS}
        self.t = T0
        self.n = 0
        self.resolved = 0  # the operator's resolutions so far: each in turn

    def envelope(self, wid: str, payload: Any) -> Envelope[Any]:
        self.n += 1
        return Envelope(
            message_id=f"m{self.n}",
            workflow_id=wid,
            run_id="",
            seq=0,
            type=type(payload).__name__,
            recorded_at=self.t,
            payload=payload,
        )

    def step(self, data: st.DataObject) -> None:
        wid = data.draw(st.sampled_from(WIDS), label="wid")
        self.t += data.draw(st.integers(0, 3000), label="dt")
        state = self.states[wid]
        kinds = ["start", "signal", "redeliver", "stale"]
        if not self.focus or (state is not None and state.status == "needs_attention"):
            kinds.append("cancel")
        scheduled: list[str] = []
        parked: list[str] = []
        late: list[tuple[str, int]] = []
        if state is not None:
            scheduled = sorted(
                a for a in state.in_flight if state.activities[a].status == "scheduled"
            )
            parked = state.needing_attention()
            late = sorted(
                (a.activity_id, n) for a in state.activities.values() for n in a.timed_out
            )
            if scheduled:
                kinds += ["complete"] * 6 + ["fail"] * 3 + ["heartbeat"] * (4 if self.focus else 2)
            if state.timers:
                kinds += ["fire"] * 3
            if parked:
                kinds += ["operator"] * (8 if self.focus else 3)
            if late:
                kinds.append("late")
        else:
            kinds += ["start"] * 4
        kind = data.draw(st.sampled_from(kinds), label="kind")
        env: Envelope[Any]
        if kind == "redeliver":
            past = self.records[wid]
            if not past:
                return
            env = data.draw(st.sampled_from(past), label="again").cmd
        else:
            payload: Any
            if kind == "start":
                payload = start_payload(data, self.focus)
            elif kind == "signal":
                name = data.draw(st.sampled_from(["documents_added", "go", "go", "nope"]))
                payload = SignalWorkflow(name, json.dumps({"document": f"doc{self.n}"}))
            elif kind == "cancel":
                payload = CancelWorkflow("test")
            elif kind == "stale":
                payload = data.draw(
                    st.sampled_from(
                        [
                            FireTimer("never"),
                            CompleteActivity("work#1/fetch", 7, "{}"),
                            FailActivity("review#1/review", 0, "transient", "E", "m"),
                            HeartbeatActivity("pay#1/charge", 9, "{}"),
                            ResolveActivity("pay#1/charge", "found", "{}", "stale"),
                            RedriveActivity("pay#1/notify"),
                        ]
                    )
                )
            elif kind == "complete":
                assert state is not None
                act = state.activities[data.draw(st.sampled_from(scheduled), label="act")]
                result = data.draw(result_for(act.activity_type), label="result")
                payload = CompleteActivity(act.activity_id, act.attempt, json.dumps(result))
            elif kind == "fail":
                assert state is not None
                act = state.activities[data.draw(st.sampled_from(scheduled), label="act")]
                cls = data.draw(st.sampled_from(FAILURE_CLASSES), label="class")
                error = data.draw(st.sampled_from(["Err", "Err", "Declined"]), label="error")
                payload = FailActivity(act.activity_id, act.attempt, cls, error, "boom")
            elif kind == "heartbeat":
                assert state is not None
                act = state.activities[data.draw(st.sampled_from(scheduled), label="act")]
                payload = HeartbeatActivity(act.activity_id, act.attempt, json.dumps({"n": self.n}))
            elif kind == "late":
                aid, attempt = data.draw(st.sampled_from(late), label="late")
                payload = data.draw(
                    st.sampled_from(
                        [
                            CompleteActivity(aid, attempt, '{"late": true}'),
                            FailActivity(aid, attempt, "transient", "Late", "late"),
                        ]
                    )
                )
            elif kind == "operator":
                assert state is not None
                act = state.activities[data.draw(st.sampled_from(parked), label="parked")]
                usual = ("redrive",) if act.status == "dead_lettered" else RESOLUTIONS
                if data.draw(st.integers(0, 9), label="odd") >= 8:  # refused or unusual
                    resolution = data.draw(st.sampled_from(["redrive", "found", "bogus"]))
                else:  # in turn, so every resolution is reached whatever the draws
                    resolution = usual[self.resolved % len(usual)]
                    self.resolved += 1
                if resolution == "redrive":
                    payload = RedriveActivity(act.activity_id)
                else:
                    result = data.draw(result_for(act.activity_type), label="result")
                    payload = ResolveActivity(
                        act.activity_id, resolution, json.dumps(result), "operator"
                    )
            else:  # fire
                assert state is not None
                timer_id, fire_at = data.draw(st.sampled_from(state.pending_timers()))
                self.t = max(self.t, fire_at)
                payload = FireTimer(timer_id)
            env = self.envelope(wid, payload)
        self.apply(wid, env)

    def apply(self, wid: str, env: Envelope[Any]) -> None:
        before = self.states[wid]
        frozen = None if before is None else before.to_json()
        try:
            after, envs = DECIDER.handle(before, env, now_ms=self.t + 7)
        except CommandRejected as exc:
            self.records[wid].append(Record(env, before, before, None, str(exc)))
            return
        finally:
            assert (None if before is None else before.to_json()) == frozen, "input mutated"
        self.states[wid] = after
        self.records[wid].append(Record(env, before, after, envs, None))

    # -- the properties ---------------------------------------------------------------

    def check(self) -> None:
        for wid in WIDS:
            records = self.records[wid]
            history = [e for r in records if r.envs for e in r.envs]
            final = self.states[wid]
            if not history:
                assert final is None
                continue
            assert final is not None
            self.check_history(history, final)
            self.check_fold(records, history, final)
            self.check_summary(records, history, final)
            self.check_replay(records)
            self.check_redelivery(records)
            self.check_no_blind_rewrites(records)

    @staticmethod
    def check_history(history: list[Envelope[Any]], final: WorkflowState) -> None:
        assert [e.seq for e in history] == list(range(1, len(history) + 1))
        assert {e.run_id for e in history} == {final.run_id}
        assert [e.message_id for e in history] == [f"{final.run_id}/{e.seq}" for e in history]
        assert all(e.type == type(e.payload).__name__ for e in history)
        terminal = [i for i, e in enumerate(history) if isinstance(e.payload, TERMINAL_EVENTS)]
        assert len(terminal) <= 1
        if terminal:
            assert terminal[0] == len(history) - 1
            assert final.is_terminal
        else:
            assert not final.is_terminal
        assert final.seq == len(history)

    @staticmethod
    def check_fold(
        records: list[Record], history: list[Envelope[Any]], final: WorkflowState
    ) -> None:
        rebuilt = DECIDER.fold(history)
        assert rebuilt == final
        assert rebuilt is not None and rebuilt.to_json() == final.to_json()
        assert WorkflowState.from_json(final.to_json()) == final
        # snapshot anywhere, restore, fold the rest
        applied = 0
        for r in records:
            if r.envs:
                applied += len(r.envs)
                assert r.after is not None
                restored = WorkflowState.from_json(r.after.to_json())
                assert DECIDER.fold(history[applied:], restored) == final
            s = r.after
            if s is not None:
                assert s.status in STATUSES
                if s.is_terminal:
                    assert not s.timers and not s.in_flight
                if s.status == "waiting":
                    assert not s.in_flight
                World.check_timers_belong_to_the_current_visit(s)
                World.check_activities(s)

    @staticmethod
    def check_summary(
        records: list[Record], history: list[Envelope[Any]], final: WorkflowState
    ) -> None:
        """A finished run summarized from a few events equals its full fold, summarized;
        and it decides every later command exactly as the full state does."""
        if not final.is_terminal:
            return
        expected = final.summary()
        assert DECIDER.summarize(None, history) == expected
        needed = (
            WorkflowStarted,
            StateEntered,
            SignalReceived,
            ActivityResolved,
            ActivityRedriven,
            *TERMINAL_EVENTS,
        )
        assert (
            DECIDER.summarize(None, [e for e in history if isinstance(e.payload, needed)])
            == expected
        )
        applied = 0
        for r in records:  # from any snapshot point, with the rest of the history
            applied += len(r.envs or ())
            if r.envs and r.after is not None and not r.after.is_terminal:
                assert DECIDER.summarize(r.after, history[applied:]) == expected
        assert WorkflowState.from_json(expected.to_json()) == expected

        def outcome(state: WorkflowState, cmd: Envelope[Any]) -> object:
            try:
                return DECIDER.decide(state, cmd)
            except CommandRejected as exc:
                return str(exc)

        for r in records:
            assert outcome(expected, r.cmd) == outcome(final, r.cmd)

    @staticmethod
    def check_timers_belong_to_the_current_visit(s: WorkflowState) -> None:
        retry_timers = 0
        timeout_purposes: list[str] = []
        for tid, timer in s.timers.items():
            timeout = activity_timeout(timer.purpose)
            if timer.purpose.startswith("retry:"):
                retry_timers += 1
                assert s.activities[timer.purpose[len("retry:") :]].status == "backoff"
            elif timeout is not None:  # armed only while its attempt runs
                kind, aid = timeout
                act = s.activities[aid]
                assert act.status == "scheduled" and aid in s.in_flight
                assert tid.startswith(f"{aid}/timeout/{kind}/{act.attempt}")
                assert kind != "schedule_to_start" or not act.started
                timeout_purposes.append(timer.purpose)
            else:
                assert s.wait is not None and s.wait.timer_id == tid and not s.wait.satisfied
        assert len(timeout_purposes) == len(set(timeout_purposes))  # re-armed, not added
        assert retry_timers == sum(s.activities[a].status == "backoff" for a in s.in_flight)
        for aid in s.in_flight:
            act = s.activities[aid]
            assert (act.state, act.visit) == (s.current_state, s.visit)

    @staticmethod
    def check_activities(s: WorkflowState) -> None:
        """Operator states drive the status; queries run only for a write in doubt."""
        if not s.is_terminal:
            assert (s.status == "needs_attention") == bool(s.needing_attention())
        for aid in s.in_flight:
            act = s.activities[aid]
            assert act.status not in ("resolving", "completed", "failed", "cancelled")
            if act.parent is not None:
                assert s.activities[act.parent].status == "querying"
            if act.status == "querying":
                queries = [q for q in s.in_flight if s.activities[q].parent == aid]
                assert queries == [f"{aid}/query/{act.attempt}"]
        for act in s.activities.values():
            assert act.status != "resolving"
            assert act.attempt - act.budget_base >= 0

    @staticmethod
    def check_no_blind_rewrites(records: list[Record]) -> None:
        """No write is sent again while its outcome is unknown, unless the same decision
        learnt (an operator's not_found) that it did not happen."""
        for r in records:
            if not r.envs or r.before is None:
                continue
            doubtful = {
                aid
                for aid, act in r.before.activities.items()
                if act.status in ("querying", "attention")
            }
            cleared: set[str] = set()
            for e in r.envs:
                p = e.payload
                if isinstance(p, ActivityResolved) and p.resolution == "not_found":
                    cleared.add(p.activity_id)
                if isinstance(p, ActivityScheduled) and p.activity_id in doubtful:
                    assert p.activity_id in cleared, (p, r.cmd)

    @staticmethod
    def check_replay(records: list[Record]) -> None:
        state: WorkflowState | None = None
        for r in records:
            if r.rejection is not None:
                with pytest.raises(CommandRejected) as exc:
                    DECIDER.decide(state, r.cmd)
                assert str(exc.value) == r.rejection
                continue
            assert r.envs is not None
            assert DECIDER.decide(state, r.cmd) == [e.payload for e in r.envs]
            state = DECIDER.fold(r.envs, state)
            assert state == r.after

    @staticmethod
    def check_redelivery(records: list[Record]) -> None:
        for i, r in enumerate(records):
            if not r.envs:
                continue
            for later in records[i:]:
                assert DECIDER.decide(later.after, r.cmd) == [], (r.cmd, later.after)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_random_histories_fold_replay_and_deduplicate(data: st.DataObject) -> None:
    world = World(focus=data.draw(st.booleans(), label="focus"))
    for _ in range(data.draw(st.integers(1, 60), label="length")):
        world.step(data)
    world.check()


def paths_of(records: list[Record]) -> set[str]:
    """Names of the failure paths a workflow's records went through."""
    seen: set[str] = set()
    for r in records:
        if r.after is not None:
            seen.add(r.after.status)
        if not r.envs:
            continue
        payloads = [e.payload for e in r.envs]
        seen.update(type(p).__name__ for p in payloads)
        for i, p in enumerate(payloads):
            nxt = payloads[i + 1] if i + 1 < len(payloads) else None
            if isinstance(p, ActivityTimedOut):
                seen.add(f"timeout:{p.timeout}")
            elif isinstance(p, ActivityResolved):
                seen.add(f"resolved:{p.resolution}")
            elif isinstance(p, ActivityCompleted | ActivityFailed) and r.before is not None:
                act = r.before.activities.get(p.activity_id)
                if act is not None and (act.status != "scheduled" or act.attempt != p.attempt):
                    seen.add("late report")
                elif act is not None and act.parent is not None:
                    if isinstance(nxt, ActivityCompleted):
                        seen.add("query found")
                    elif isinstance(nxt, TimerScheduled | ActivityDeadLettered):
                        seen.add("query not found")
            elif isinstance(p, ActivityScheduled) and "/query/" in p.activity_id:
                seen.add("query")
            elif isinstance(p, ActivityDeadLettered) and r.before is not None:
                seen.add("dead letter")
    for r in records:
        if r.rejection is not None and isinstance(r.cmd.payload, ResolveActivity | RedriveActivity):
            seen.add("operator rejected")
    return seen


def test_property_generator_reaches_interesting_outcomes() -> None:
    """Guard against a generator that silently stops exercising the decider."""
    seen: set[str] = set()

    @settings(
        max_examples=120,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    @given(st.data())
    def run(data: st.DataObject) -> None:
        # Mostly focused worlds: the operator's paths are the rarest to reach, and each
        # world's resolutions begin at a drawn one (so each is reached about as often).
        # derandomize alone does not make this guard deterministic: Hypothesis draws
        # differently after other tests ran in the process (pytest-xdist's order).
        world = World(focus=data.draw(st.integers(0, 3), label="focus") > 0)
        world.resolved = data.draw(st.integers(0, len(RESOLUTIONS) - 1), label="resolution")
        for _ in range(60):
            world.step(data)
        for wid in WIDS:
            seen.update(paths_of(world.records[wid]))

    run()
    assert {"completed", "failed", "cancelled", "needs_attention"} <= seen
    assert {"TimerFired", "SignalReceived", "ActivityFailed", "StateEntered"} <= seen
    assert {
        "ActivityHeartbeat",
        "ActivityTimedOut",
        "ActivityDeadLettered",
        "ActivityRedriven",
        "ActivityResolved",
        "WorkflowNeedsAttention",
        "timeout:schedule_to_start",
        "timeout:start_to_close",
        "timeout:heartbeat",
        "query",
        "query found",
        "query not found",
        "late report",
        "resolved:found",
        "resolved:not_found",
        "resolved:failed",
        "operator rejected",
    } <= seen, sorted(seen)
