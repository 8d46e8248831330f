"""An operator's actions from the web UI, in process with a recording client: the role is
required, the form's values reach the client as ``keel`` would send them, and the client's
refusal is shown once on the run's page (connectors/ui/routes.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from connectors.auth import Actor, Actors, hash_token
from connectors.ui.routes import OperatorUi
from connectors.ui.sessions import FlashLevel
from connectors.ui.task_desk import TaskDecisions
from orchestrator.client.human_task_decisions import DecisionOutcome, DecisionStatus, Refusal

OPERATOR = Actor("olga", ("keel-operator",), hash_token("olga-token-0123456789"))
AUDITOR = Actor("bob", ("auditor",), hash_token("bob-token-0123456789"))


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def resolve(self, *args: Any) -> str:
        self.calls.append(("resolve", *args))
        return "mid-1"


def _run(check: Any) -> None:
    async def main() -> None:
        recording = RecordingClient()
        tasks: Any = SimpleNamespace(actors=Actors({"olga": OPERATOR, "bob": AUDITOR}))
        ui = OperatorUi(None, None, tasks, recording)  # type: ignore[arg-type]
        app = web.Application()
        app.add_subapp("/ui", ui.application())
        async with TestClient(TestServer(app)) as client:
            await check(client, ui, recording)

    asyncio.run(main())


async def _post(client: TestClient, ui: OperatorUi, actor: Actor, path: str, **form: str) -> Any:
    session_id, session = ui.sessions.create(actor)
    answer = await client.post(
        path,
        data={"csrf": session.csrf, **form},
        headers={"Cookie": f"keel_ui_session={session_id}"},
        allow_redirects=False,
    )
    return answer, session


def test_a_resolution_reaches_the_client_with_its_result_and_who_gave_it() -> None:
    async def check(client: TestClient, ui: OperatorUi, recording: RecordingClient) -> None:
        answer, session = await _post(
            client,
            ui,
            OPERATOR,
            "/ui/runs/pay%2F1/resolve",
            activity_id="post",
            resolution="found",
            result='{"posting_id": "P-1"}',
            reason="checked  the ledger",
        )
        assert answer.status == 303 and answer.headers["Location"] == "/ui/runs/pay%2F1"
        assert recording.calls == [
            ("resolve", "pay/1", "post", "found", {"posting_id": "P-1"},
             "checked the ledger (by olga, web UI)"),
        ]  # fmt: skip
        assert session.take_flashes() == [
            (FlashLevel.OK, "resolution 'found' of post sent to pay/1 (mid-1)")
        ]

    _run(check)


def test_a_bad_resolution_is_refused_on_the_page_and_sends_nothing() -> None:
    async def check(client: TestClient, ui: OperatorUi, recording: RecordingClient) -> None:
        answer, session = await _post(
            client, ui, OPERATOR, "/ui/runs/w/resolve", activity_id="a", resolution="found",
            result="{not json",
        )  # fmt: skip
        assert answer.status == 303
        [(level, text)] = session.take_flashes()
        assert level is FlashLevel.REFUSED and text.startswith("the result is not valid JSON")
        answer, session = await _post(
            client, ui, OPERATOR, "/ui/runs/w/resolve", activity_id="a", resolution="found",
            result='{"posting_id": "P-1", "posting_id": "P-2"}',
        )  # fmt: skip
        assert session.take_flashes() == [
            (FlashLevel.REFUSED, "the result holds the key 'posting_id' twice in one object")
        ]
        _, session = await _post(
            client, ui, OPERATOR, "/ui/runs/w/resolve", activity_id="a", resolution="maybe"
        )
        assert session.take_flashes() == [
            (FlashLevel.REFUSED, "resolution must be one of found, not_found, failed, not 'maybe'")
        ]
        assert recording.calls == []

    _run(check)


def test_an_actor_without_the_operator_role_is_refused() -> None:
    async def check(client: TestClient, ui: OperatorUi, recording: RecordingClient) -> None:
        answer, _ = await _post(
            client, ui, AUDITOR, "/ui/runs/w/resolve", activity_id="a", resolution="not_found"
        )
        assert answer.status == 403
        assert (
            "actor &#39;bob&#39; lacks the role &#39;keel-operator&#39; that a resolution needs"
            in (await answer.text())
        )
        assert recording.calls == []

    _run(check)


class FakeDesk:
    def __init__(self, outcome: DecisionOutcome) -> None:
        self.outcome = outcome
        self.calls: list[tuple[Any, ...]] = []

    def decide(self, *args: Any) -> DecisionOutcome:
        self.calls.append(args)
        return self.outcome


def _decisions(outcome: DecisionOutcome) -> tuple[TaskDecisions, FakeDesk]:
    task = {"task_id": "t1", "roles": ["finance-approver"], "status": "open"}
    desk = FakeDesk(outcome)
    api: Any = SimpleNamespace(
        view=SimpleNamespace(get=lambda task_id: dict(task) if task_id == "t1" else None),
        desk=desk,
        _token_for=lambda found, actor: "f" * 64,
    )
    return TaskDecisions(api), desk


APPROVER = Actor("alice", ("finance-approver",), hash_token("alice-token-0123456789"))
DIGEST = "ab" * 32


def test_a_decision_is_bound_to_the_digest_the_page_showed_and_a_refusal_keeps_its_words() -> None:
    why = "operation digest changed since the task was shown; approve refused"
    decisions, desk = _decisions(DecisionOutcome(DecisionStatus.REFUSED, Refusal.CONFLICT, why))
    level, text = decisions.decide("t1", APPROVER, "approve", DIGEST, "ok")
    assert desk.calls == [("f" * 64, "alice", ["finance-approver"], "approve", "ok", DIGEST)]
    assert (level, text) == (
        FlashLevel.REFUSED,
        f"refused: {why} (reload the task to see it as it is now)",
    )


def test_a_decision_the_page_cannot_bind_or_the_actor_may_not_make_sends_nothing() -> None:
    decisions, desk = _decisions(DecisionOutcome(DecisionStatus.DECIDED))
    assert decisions.decide("t1", APPROVER, "approve", "", "") == (
        FlashLevel.REFUSED,
        "the page carried no operation digest; reload the task",
    )
    assert decisions.decide("t1", APPROVER, "maybe", DIGEST, "") == (
        FlashLevel.REFUSED,
        "decision must be 'approve' or 'reject'",
    )
    assert decisions.decide("t1", AUDITOR, "approve", DIGEST, "") == (
        FlashLevel.REFUSED,
        "actor 'bob' holds none of the roles of task t1 (finance-approver)",
    )
    assert decisions.decide("t2", APPROVER, "approve", DIGEST, "") == (
        FlashLevel.REFUSED,
        "no human task has this id",
    )
    assert desk.calls == []
