"""``fast_json`` (orjson on the hot path) writes what the standard library reads back to
the same value, for every state and history line of the recorded corpus, and falls back
to the standard library for what orjson refuses, with the same limits and errors."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from orchestrator.application.app import KeelApp, decider_of
from orchestrator.client.history_io import read_history_dir
from orchestrator.domain.model.errors import LimitExceededError
from orchestrator.domain.model.limits import MAX_INT_DIGITS, MAX_JSON_DEPTH, loads_bounded
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.engine.tail_records import ARMED_HEADER, armed_header, parse_armed
from orchestrator.examples import app as examples
from orchestrator.io.redis.read_model import history_entry
from orchestrator.records import fast_json
from orchestrator.schedules.definition import install_definition
from tests.unit.domain.test_state_json import CORPUS, _reference

#: The corpus holds the examples' runs and a run of the built-in keel.schedule.
CORPUS_APP = install_definition(KeelApp("corpus").include(examples))


def _corpus_states() -> list[tuple[object, WorkflowState]]:
    decider = decider_of(CORPUS_APP)
    states: dict[str, WorkflowState | None] = {}
    out = []
    for env in read_history_dir(CORPUS):
        state = decider.evolve(states.get(env.workflow_id), env)
        states[env.workflow_id] = state
        out.append((env, state))
    return out


def test_every_corpus_state_reads_back_the_same_in_either_encoding() -> None:
    checked = 0
    for env, state in _corpus_states():
        fast = state.to_json(fast_json.dumps_sorted)
        assert json.loads(fast) == json.loads(_reference(state)), (env, state.seq)
        assert WorkflowState.from_json(fast) == state
        if fast.isascii():  # no escape to differ in: the bytes are the same
            assert fast == _reference(state)
        checked += 1
    assert checked > 200


def test_the_activity_cache_never_mixes_two_encoders() -> None:
    states = [s for _, s in _corpus_states() if s.activities]
    for state in states[:50]:
        plain = state.to_json()
        state.to_json(fast_json.dumps_sorted)
        assert state.to_json() == plain == _reference(state)
    odd = states[0].clone()
    aid, act = next(iter(odd.activities.items()))
    odd.mut_activities()[aid] = dataclasses.replace(act, error_message="façade")
    assert "façade" in odd.to_json(fast_json.dumps_sorted)
    assert "fa\\u00e7ade" in odd.to_json()


def test_every_corpus_history_line_reads_back_as_the_standard_librarys() -> None:
    for env, _ in _corpus_states():
        entry = history_entry(env)
        assert json.loads(fast_json.dumps(entry)) == json.loads(json.dumps(entry, default=str))


def test_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    big = 2**70
    assert fast_json.dumps({"n": big}) == '{"n":1180591620717411303424}'
    assert fast_json.dumps_sorted({"b": big, "a": 1}) == '{"a":1,"b":1180591620717411303424}'
    assert fast_json.dumps_bytes([big]) == b"[1180591620717411303424]"
    assert fast_json.dumps({1: "x"}) == '{"1":"x"}'  # a key orjson will not take
    assert fast_json.dumps({"at": object}) == json.dumps({"at": str(object)}, separators=(",", ":"))


def test_a_nan_is_written_as_null_the_one_value_that_changes() -> None:
    # no payload can bring one any more (docs/limits.md: standard JSON only); a float
    # computed in Python still can
    entry = {"data": {"x": [float("nan"), float("inf"), 1.5]}}
    assert fast_json.dumps(entry) == '{"data":{"x":[null,null,1.5]}}'


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 3, "items": [1, 2.5, "x"], "ok": true, "none": null}',
        '"façade"',
        "12345678901234567890123",  # past 64 bits: the standard library's parser
        '[-0.0, "\\ud83d\\ude00"]',  # a surrogate pair: the careful parser, accepted
    ],
)
def test_loads_within_limits_reads_what_the_standard_library_reads(text: str) -> None:
    got, want = fast_json.loads_within_limits(text, "x"), loads_bounded(text, "x")
    assert json.dumps(got) == json.dumps(want)
    if isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)


@pytest.mark.parametrize(
    "text",
    [
        "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
        "1" * (MAX_INT_DIGITS + 1),
        '{"x": 1,}',
        "",
        "NaN",  # orjson refuses it, and so does the input rule (standard JSON only)
        "[1e400]",
        '["\\ud800"]',
    ],
)
def test_loads_within_limits_fails_as_loads_bounded_does(text: str) -> None:
    with pytest.raises(ValueError) as fast:
        fast_json.loads_within_limits(text, "the input")
    with pytest.raises(ValueError) as slow:
        loads_bounded(text, "the input")
    assert type(fast.value) is type(slow.value)
    assert str(fast.value) == str(slow.value)
    if text.startswith("[[") or text.startswith("11"):  # the two limits
        assert isinstance(fast.value, LimitExceededError)


def test_the_armed_header_parses_to_the_same_timers() -> None:
    for _, state in _corpus_states():
        key, value = armed_header(state)
        assert key == ARMED_HEADER
        name, version, timers = parse_armed(json.loads(value))
        assert (name, version) == (state.name, state.version)
        expected = [] if state.is_terminal else sorted(state.pending_timers(), key=lambda t: t[1])
        assert sorted(timers) == sorted(expected)


def test_commands_travel_as_the_text_redis_py_would_send() -> None:
    commands = [
        ("HSET", "k", "status", WorkflowStatus.COMPLETED, "seq", 12, "cost", 0.1, "big", 2**70),
        ("RPUSH", "h", 'q"\\\n\x00é😀'),
        (),
    ]
    assert json.loads(fast_json.dumps_commands(commands)) == [
        ["HSET", "k", "status", "completed", "seq", "12", "cost", "0.1", "big", str(2**70)],
        ["RPUSH", "h", 'q"\\\n\x00é😀'],
        [],
    ]


@pytest.mark.parametrize("value", [b"bytes", True, None, "\ud800", object()])
def test_an_argument_json_cannot_carry_exactly_is_refused(value: object) -> None:
    with pytest.raises(TypeError):
        fast_json.dumps_commands([("SET", "k", value)])


def test_input_from_outside_refuses_a_key_twice_in_any_object() -> None:
    """Issue 44: readers disagree on a repeated key, so an edge refuses it (the records
    Keel wrote are still read by ``loads_bounded``, which keeps the last)."""
    from orchestrator.domain.model.errors import InvalidInputError
    from orchestrator.domain.model.limits import loads_bounded
    from orchestrator.records.fast_json import loads_input

    assert loads_input('{"a": [{"b": 1}, {"b": 2}], "c": {"b": 3}}', "x") == {
        "a": [{"b": 1}, {"b": 2}],
        "c": {"b": 3},
    }
    for text, key in (
        ('{"decision": "reject", "decision": "approve"}', "decision"),
        (b'[{"n": {"x": 1, "x": 2}}]', "x"),
        ('{"\\u0061": 1, "a": 2}', "a"),  # the same key, escaped once
    ):
        with pytest.raises(InvalidInputError) as info:
            loads_input(text, "--input")
        assert str(info.value) == f"--input holds the key '{key}' twice in one object"
    assert loads_bounded('{"a": 1, "a": 2}', "x") == {"a": 2}
