"""``keel evaluate``'s choices before any batch runs (ops/evaluation/): the fault classes and
variants asked for, a workflow of your own's inputs, and what it may not be put under."""

from __future__ import annotations

import pytest

from orchestrator.domain.model.errors import InvalidInputError


def test_the_fault_free_batch_runs_first_and_an_unknown_class_is_named() -> None:
    from ops.evaluation.fault_plans import FaultClass, Variant, parse_faults, parse_variants

    assert parse_faults("crash, queue_full,crash") == [
        FaultClass.NONE,
        FaultClass.CRASH,
        FaultClass.QUEUE_FULL,
    ]
    with pytest.raises(InvalidInputError, match="unknown fault class\\(es\\): flood; known: "):
        parse_faults("crash,flood")
    assert parse_variants("agent,backbone") == [Variant.BACKBONE, Variant.AGENT]
    with pytest.raises(InvalidInputError, match="unknown variant\\(s\\): robot"):
        parse_variants("robot")


def test_inputs_are_a_json_array_or_json_lines_repeated_up_to_the_runs(tmp_path) -> None:
    from ops.evaluation.app_batch import load_inputs

    lines = tmp_path / "in.jsonl"
    lines.write_text('{"seconds": 1}\n\n{"seconds": 2}\n')
    assert load_inputs(lines, 5) == [{"seconds": s} for s in (1, 2, 1, 2, 1)]
    array = tmp_path / "in.json"
    array.write_text('[{"n": 1}, {"n": 2}, {"n": 3}]')
    assert load_inputs(array, 2) == [{"n": 1}, {"n": 2}, {"n": 3}]  # never fewer than given
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"n": 1}\n{n: 2}\n')
    with pytest.raises(InvalidInputError, match=r"bad\.jsonl line 2 is not JSON"):
        load_inputs(bad, 1)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InvalidInputError, match="holds no input"):
        load_inputs(empty, 1)
    with pytest.raises(InvalidInputError, match="cannot read the inputs"):
        load_inputs(tmp_path / "missing.jsonl", 1)


def test_a_workflow_of_your_own_is_refused_the_classes_that_cannot_strike_it(
    tmp_path,
) -> None:
    from ops.evaluation.evaluation_run import run_evaluation, run_own_evaluation
    from ops.evaluation.fault_plans import Variant, parse_faults

    faults = parse_faults("crash,response_loss,compensation_failure,old_schema")
    with pytest.raises(InvalidInputError) as refused:
        run_own_evaluation(
            None,  # type: ignore[arg-type]  # refused before any server is asked
            "orchestrator.examples:app",
            "timer_demo",
            [{"seconds": 1}],
            faults,
            tmp_path,
            None,  # type: ignore[arg-type]
        )
    assert str(refused.value) == (
        "fault class(es) cannot strike timer_demo: response_loss (no write: no step declares "
        "a status query or on_unknown=retry, and no handler is @side_effect); "
        "compensation_failure (no step declares a compensation)"
    )
    with pytest.raises(InvalidInputError, match="for a workflow of your own give --app"):
        run_evaluation(None, "timer_demo", 3, faults, [Variant.BACKBONE], tmp_path, None)  # type: ignore[arg-type]
