"""A migration's dry run from the web UI, in process with a recorded plan: the page shows
the mapping, the events it would write and the replay's divergence, or the refusal in the
decider's words; it needs the operator role and a version, and writes nothing
(connectors/ui/routes.py, ``OperatorUi.migration``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from connectors.auth import Actor, Actors, hash_token
from connectors.ui.routes import OperatorUi
from orchestrator.client.migration_requests import MigrationPlan, Outcome
from orchestrator.domain.history.replay import Divergence, RunReport

OPERATOR = Actor("olga", ("keel-operator",), hash_token("olga-token-0123456789"))
AUDITOR = Actor("bob", ("auditor",), hash_token("bob-token-0123456789"))

MIGRATED = {
    "type": "WorkflowMigrated",
    "from_state": "awaiting",
    "to_state": "approval",
    "migration": "v1->v2",
    "reason": "<b>due</b> halved",
}


def _plan(workflow_id: str, to_version: int, outcome: Outcome) -> MigrationPlan:
    p = MigrationPlan(
        workflow_id, "ticket", 1, to_version, "275bfe760ff7", "waiting", "awaiting", outcome
    )
    if outcome is Outcome.WOULD_MIGRATE:
        p.to_state, p.events = "approval", [MIGRATED]
        p.replay = RunReport(workflow_id, "run-1", events=4)
    else:
        p.reason = "workflow 'tk' is in state 'on_hold', which migration v1->v2 does not map"
        p.replay = RunReport(workflow_id, "run-1", events=4)
        p.replay.divergence = Divergence(3, {"type": "TimerScheduled"}, None, "", "Signal")
    return p


def _get(actor: Actor, path: str, outcome: Outcome = Outcome.WOULD_MIGRATE) -> Any:
    asked: list[tuple[str, int, str]] = []

    async def main() -> tuple[int, str]:
        tasks: Any = SimpleNamespace(actors=Actors({"olga": OPERATOR, "bob": AUDITOR}))
        ui = OperatorUi(None, None, tasks, None)  # type: ignore[arg-type]

        def planned(wf: str, to_version: int, who: str) -> MigrationPlan:
            asked.append((wf, to_version, who))
            return _plan(wf, to_version, outcome)

        ui.plan_migration = planned
        app = web.Application()
        app.add_subapp("/ui", ui.application())
        async with TestClient(TestServer(app)) as client:
            session_id, _ = ui.sessions.create(actor)
            answer = await client.get(path, headers={"Cookie": f"keel_ui_session={session_id}"})
            return answer.status, await answer.text()

    status, text = asyncio.run(main())
    return status, text, asked


def test_a_dry_run_shows_the_mapping_the_events_and_an_identical_replay() -> None:
    status, text, asked = _get(OPERATOR, "/ui/runs/tk%2Fwait/migration?to_version=2")
    assert status == 200
    assert asked == [("tk/wait", 2, "olga")]
    assert 'data-outcome="would_migrate"' in text
    assert "ticket v1 state 'awaiting' &rarr; v2 state 'approval'" in text
    assert "&#34;type&#34;: &#34;WorkflowMigrated&#34;" in text  # the event, HTML-escaped
    assert (
        "&#34;migration&#34;: &#34;v1-&gt;v2&#34;" in text
        and "&lt;b&gt;due&lt;/b&gt; halved" in text
    )
    assert 'data-differs="no"' in text and "decides the recorded history identically" in text
    assert "Dry run: nothing was written." in text


def test_a_refused_dry_run_shows_the_reason_and_where_the_replay_differs() -> None:
    status, text, _ = _get(OPERATOR, "/ui/runs/tk/migration?to_version=2", Outcome.REFUSED)
    assert status == 200
    assert 'data-outcome="refused"' in text
    assert "would be refused: workflow &#39;tk&#39; is in state &#39;on_hold&#39;" in text
    assert 'data-differs="yes"' in text and "differs at seq 3 deciding Signal." in text
    assert 'id="migration-events"' not in text


def test_a_dry_run_needs_the_operator_role_and_a_version() -> None:
    status, text, asked = _get(AUDITOR, "/ui/runs/tk/migration?to_version=2")
    assert status == 403 and asked == []
    assert "actor &#39;bob&#39; lacks the role &#39;keel-operator&#39; that a migration" in text
    for bad in ("", "0", "two", "-1"):
        status, text, asked = _get(OPERATOR, f"/ui/runs/tk/migration?to_version={bad}")
        assert status == 400 and asked == [], bad
        assert f"to_version must be a version &gt;= 1, not &#39;{bad}&#39;" in text
