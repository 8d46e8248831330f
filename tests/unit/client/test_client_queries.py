"""``KeelClient.query`` over a run's state as the read model holds it: a real run folded in
memory (``tests.unit.memory_rig``) behind a fake read model; nothing is sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.application.app import decider_of
from orchestrator.client.client import KeelClient
from orchestrator.client.query_answers import QueryAnswer, without_ciphertext
from orchestrator.config.settings import Settings
from orchestrator.domain.authoring.queries import QueryError
from orchestrator.domain.model.errors import (
    InvalidIdError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    UnknownWorkflowError,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.trust.sealing import SEALED_KEY, new_key_entry, parse_keys
from tests.integration import queries_app
from tests.unit.memory_rig import MemoryRig

CARD = "4242-4242-CLEAR-CARD"


class FakeReadModel:
    """The two reads a query makes: the run's state, and its row when there is no state."""

    url = "redis://fake"

    def __init__(self, states: dict[str, str], rows: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.states = states
        self.rows = set(rows) | set(states)
        self.reads = 0

    def load_states(self, ids: list[str]) -> dict[str, WorkflowState]:
        self.reads += 1
        return {wf: WorkflowState.from_json(self.states[wf]) for wf in ids if wf in self.states}

    def get(self, wf: str) -> dict[str, Any] | None:
        return {"run_id": "r"} if wf in self.rows else None


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[WorkflowState, str]:
    """A ``queried_order`` run waiting for its approval, its card sealed; and the token."""
    keys = parse_keys(new_key_entry("k1"), "test")
    value = keys.seal_fields(
        queries_app.Order, {"customer": "acme", "items": ["a", "b", "c"], "card": CARD}
    )
    rig = MemoryRig(tmp_path_factory.mktemp("rig"), app=queries_app.app)
    rig.start("o-1", "queried_order", value)
    rig.run()
    state = decider_of(queries_app.app).fold(rig.events("o-1"))
    assert (state.status, state.current_state) == ("waiting", "approval")
    return state, value["card"][SEALED_KEY]


def _client(states: dict[str, str], rows: set[str] = frozenset()) -> KeelClient:  # type: ignore[assignment]
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", redis_url="redis://127.0.0.1:1/0", topic_prefix="t"
    )
    client = KeelClient(settings, queries_app.app)
    client.projection = FakeReadModel(states, rows)  # type: ignore[assignment]
    return client


def test_a_query_answers_from_the_state_with_the_run_it_read(run) -> None:
    state, _ = run
    client = _client({"o-1": state.to_json()})
    answer = client.query("o-1", "progress")
    assert answer == QueryAnswer(
        workflow_id="o-1",
        run_id=state.run_id,
        status="waiting",
        state="approval",
        seq=state.seq,
        value={"state": "approval", "status": "waiting", "priced": True, "approvals": 0},
    )
    assert client.query("o-1", "line", {"index": 1}).value == "b"
    assert client.query("o-1", "line", queries_app.Line(index=2)).value == "c"
    assert client._producer is None and client._bulk_producer is None  # nothing to send with


def test_no_answer_carries_a_sealed_value_or_its_ciphertext(run) -> None:
    state, token = run
    assert token in state.to_json()
    client = _client({"o-1": state.to_json()})
    answers = {q: client.query("o-1", q).value for q in ("card", "card_token", "input")}
    assert answers == {
        "card": "***",
        "card_token": "***",
        "input": {"customer": "acme", "items": ["a", "b", "c"], "card": "***"},
    }
    assert token not in json.dumps(answers) and CARD not in json.dumps(answers)


def test_without_ciphertext_blanks_every_token_at_any_depth(run) -> None:
    state, token = run
    sealed = {SEALED_KEY: token, "kid": "k1"}
    state = WorkflowState.from_json(state.to_json())
    state.signals = {"approve": (json.dumps({"by": "a", "pin": sealed}),)}  # JSON in JSON
    state.step_results = {**state.step_results, "x": json.dumps([{"deep": sealed}])}
    blanked = without_ciphertext(state).to_json()
    assert token not in blanked
    # the run's input, the price activity's input, the signal's pin and the result's
    assert blanked.count(f'{SEALED_KEY}\\"') == blanked.count("***") == 4
    unsealed = WorkflowState("w", "r", "n", 1, "d", '{"a": 1}')
    assert without_ciphertext(unsealed) is unsealed  # nothing sealed: read as it is


def test_an_unknown_run_is_not_found_and_a_bad_id_is_refused() -> None:
    client = _client({})
    with pytest.raises(NotFoundError) as err:
        client.query("o-404", "progress")
    assert str(err.value) == "workflow 'o-404' does not exist; query 'progress' refused"
    with pytest.raises(InvalidIdError):
        client.query("bad id\n", "progress")


def test_a_row_without_its_state_asks_for_a_rebuild() -> None:
    client = _client({}, rows={"o-1"})
    with pytest.raises(UnavailableError) as err:
        client.query("o-1", "progress")
    assert str(err.value) == (
        "the read model holds no state for workflow 'o-1' (written by an older projector); "
        "`keel projections rebuild` writes it"
    )


def test_the_errors_a_query_can_meet(run) -> None:
    state, _ = run
    client = _client({"o-1": state.to_json()})
    with pytest.raises(InvalidInputError) as err:
        client.query("o-1", "nope")
    assert str(err.value) == (
        "workflow 'queried_order' v1 has no query 'nope' (declared: 'broken', 'card', "
        "'card_token', 'input', 'line', 'output', 'progress', 'tamper')"
    )
    with pytest.raises(QueryError) as q_err:
        client.query("o-1", "tamper")
    assert str(q_err.value) == (
        "query 'tamper' of workflow 'o-1' tried to change the run's state "
        "(x[k] = v on a mapping); a query is read-only"
    )
    with pytest.raises(QueryError) as q_err:
        client.query("o-1", "line", {"index": 7})
    assert str(q_err.value) == (
        "query 'line' of workflow 'o-1' failed: IndexError: list index out of range"
    )


def test_a_run_of_a_version_the_application_lacks_is_refused(run) -> None:
    state, _ = run
    other = WorkflowState.from_json(state.to_json())
    other.version = 9
    client = _client({"o-1": other.to_json()})
    with pytest.raises(UnknownWorkflowError) as err:
        client.query("o-1", "progress")
    assert str(err.value) == (
        "workflow 'o-1' runs 'queried_order' v9, which this application does not define "
        "(unknown version 9 of workflow 'queried_order'; known versions: 1); "
        "query 'progress' refused"
    )


def test_the_answer_is_a_plain_record() -> None:
    answer = QueryAnswer("o-1", "r", "completed", "done", 9, {"total": 30})
    assert answer.as_dict() == {
        "workflow_id": "o-1",
        "run_id": "r",
        "status": "completed",
        "state": "done",
        "seq": 9,
        "value": {"total": 30},
    }


def test_a_100k_character_id_is_answered_in_milliseconds_and_quoted_clipped() -> None:
    """Issue 44: ``keel workflow show <30k-char id>`` took 8.4 s (its error line was redacted
    in quadratic time); the error quotes 200 characters and the id's length."""
    import time

    from orchestrator.cli import error_line

    client = _client({})
    start = time.perf_counter()
    with pytest.raises(NotFoundError) as info:
        client.show("a" * 100_000)
    line = error_line(info.value)
    assert time.perf_counter() - start < 0.5
    assert line == f"error: workflow '{'a' * 200}... (100,000 characters)' does not exist"
