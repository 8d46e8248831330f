"""Recovery from checkpoint + tail gives the same state as a full fold (property test).

Random interleavings of starts (finished, live on a timer, live mid-activity, local
steps), worker rounds, orchestrator steps and checkpoints on the in-memory adapter;
then a new orchestrator rebuilds every partition through ``Recovery`` (snapshots,
the summary shortcut for finished runs, folding of live ones) and each run's state
must equal the fold of its whole history from scratch. Live runs in the tail are held
undecoded (``tail_records``); some are used, a checkpoint is written and a third process
rebuilds again, which must give the same states.

Each checkpoint is written either in the current format (a ``keel.snapshot`` header
per record: the rebuild reads the header and decodes on use) or as the format before
it wrote them (no header: decoded at once), so a log upgraded mid-way is covered too.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.io.partitioning import partition_for
from tests.integration import local_app
from tests.unit.memory_rig import MemoryRig

WORKFLOWS = {
    "three_step": lambda i: {"n": i},
    "three_step_local": lambda i: {"n": i},
    "mixed_local_remote": lambda i: {"n": i},
    "timer_demo": lambda i: {"seconds": 3600},
    "parallel_checks": lambda i: {"n": i},
}

actions = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.sampled_from(sorted(WORKFLOWS)), st.integers(0, 7)),
        st.tuples(st.just("step")),
        st.tuples(st.just("work")),
        st.tuples(st.just("checkpoint"), st.booleans()),
    ),
    min_size=1,
    max_size=30,
)


def _full_fold(rig: MemoryRig, events: list[Any]) -> Any:
    state = rig.orch.decider.fold(events)
    return state.summary() if state.is_terminal else state


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=actions, folds=st.integers(0, 3))
def test_rebuilt_state_equals_the_full_fold(tmp_path_factory, plan, folds):
    rig = MemoryRig(tmp_path_factory.mktemp("rec"), app=local_app.app, finished_capacity=2)
    started: set[str] = set()
    for action in plan:
        if action[0] == "start":
            name, i = action[1], action[2]
            wf = f"{name}-{i}"
            rig.start(wf, name, WORKFLOWS[name](i))
            started.add(wf)
        elif action[0] == "step":
            rig.orch.step()
        elif action[0] == "work":
            rig.work()
        elif action[1]:
            rig.orch.checkpoint()
        else:  # the format before snapshot headers
            with mock.patch("orchestrator.engine.recovery.snapshot_headers", return_value=()):
                rig.orch.checkpoint()
    rig.orch.step()
    fresh = rig.new_orchestrator()
    rebuilt = fresh.recover(list(range(4)))
    by_wf: dict[str, list[Any]] = {}
    for env in rig.events():
        by_wf.setdefault(env.workflow_id, []).append(env)
    assert set(by_wf) <= started
    # the timers re-armed from the rebuilt partitions (before any run is parsed)
    armed = sorted(t for ps in rebuilt.values() for t in ps.timers())
    want_timers = []
    for wf, events in by_wf.items():
        state = rig.orch.decider.fold(events)
        if not state.is_terminal:
            want_timers += [(wf, tid, at) for tid, at in state.pending_timers()]
    assert armed == sorted(want_timers)
    # Some deferred runs used, a checkpoint, a crash: a third process rebuilds the same.
    fresh.ctx.partitions.update(rebuilt)
    for ps in rebuilt.values():
        for wf in list(ps.deferred)[:folds]:
            ps.get(wf)
    fresh.recovery.checkpoint()
    again = rig.new_orchestrator().recover(list(range(4)))
    for wf, events in by_wf.items():
        want = _full_fold(rig, events)
        for parts in (rebuilt, again):
            ps = parts[partition_for(wf.encode(), 4)]
            assert not ps.quarantined, ps.quarantined
            got = ps.get(wf)
            assert got is not None, wf
            if wf in ps.finished and got.input_json == "":  # evicted: the identity is kept
                assert (got.run_id, got.seq, got.status) == (want.run_id, want.seq, want.status)
            else:
                assert got.to_json() == want.to_json(), wf
