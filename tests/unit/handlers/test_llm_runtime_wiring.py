"""Who builds the LLM runtime: the composition root of the process that runs LLM steps,
never the code that declares them, and no module holds it (docs/llm-nodes.md)."""

from __future__ import annotations

import asyncio

import pytest

from handlers.attempt_runner import AttemptRunner
from handlers.llm import runtime as llm_runtime
from handlers.sdk.activity_context import reset_current, set_current
from orchestrator import KeelApp
from orchestrator.domain.model.errors import ConfigError
from orchestrator.domain.model.messages import ActivityTask
from orchestrator.trust.sealing import SealKeySource

TASK = ActivityTask("run#1/x", "llm.x", "x", "{}", 1, 1, "wf/llm.x/1")


def _runtime_in_attempt(runner: AttemptRunner) -> llm_runtime.LlmRuntime:
    token = set_current(runner.context("wf", TASK))
    try:
        return llm_runtime.runtime()
    finally:
        reset_current(token)


def test_without_a_runtime_a_step_says_where_llm_steps_run() -> None:
    runner = AttemptRunner(KeelApp("t"), seal_keys=SealKeySource())
    with pytest.raises(ConfigError) as refused:
        _runtime_in_attempt(runner)
    assert str(refused.value) == (
        "no LLM runtime for this attempt: LLM steps run in `keel worker` (or `keel orchestrator` "
        "for local steps), whose attempt runner is given one"
    )


def test_the_runners_runtime_is_built_once_on_first_use_and_is_its_own() -> None:
    built: list[object] = []

    def factory() -> llm_runtime.LlmRuntime:
        rt = object()
        built.append(rt)
        return rt  # type: ignore[return-value]

    runtimes = llm_runtime.LlmRuntimes(factory)
    runner = AttemptRunner(KeelApp("t"), seal_keys=SealKeySource(), llm=runtimes)
    elsewhere = llm_runtime.LlmRuntimes(object)  # type: ignore[arg-type]
    other = AttemptRunner(KeelApp("t"), seal_keys=SealKeySource(), llm=elsewhere)
    assert built == []  # nothing is built before a step asks
    first = _runtime_in_attempt(runner)
    assert _runtime_in_attempt(runner) is first and built == [first]
    assert _runtime_in_attempt(other) is not first


def test_a_sync_handlers_thread_sees_its_attempts_runtime() -> None:
    runtimes = llm_runtime.LlmRuntimes(lambda: "rt")  # type: ignore[arg-type,return-value]
    runner = AttemptRunner(KeelApp("t"), seal_keys=SealKeySource(), llm=runtimes)

    async def in_a_thread() -> object:
        token = set_current(runner.context("wf", TASK))
        try:
            return await asyncio.to_thread(llm_runtime.runtime)
        finally:
            reset_current(token)

    assert asyncio.run(in_a_thread()) == "rt"
