"""Who builds the LLM runtime: the process that runs LLM steps, never the code that declares
them (docs/llm-nodes.md)."""

from __future__ import annotations

import pytest

from handlers.llm import runtime as llm_runtime
from orchestrator.domain.model.errors import ConfigError


def test_without_a_factory_a_step_says_where_llm_steps_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_runtime, "_runtime", None)
    monkeypatch.setattr(llm_runtime, "_factory", None)
    with pytest.raises(ConfigError) as refused:
        llm_runtime.runtime()
    assert str(refused.value) == (
        "no LLM runtime in this process: LLM steps run in `keel worker` (or `keel orchestrator` "
        "for local steps), or after handlers.llm.runtime.configure"
    )


def test_the_factory_builds_the_runtime_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_runtime, "_runtime", None)
    built: list[object] = []

    def factory() -> llm_runtime.LlmRuntime:
        rt = object()
        built.append(rt)
        return rt  # type: ignore[return-value]

    monkeypatch.setattr(llm_runtime, "_factory", None)
    llm_runtime.use_factory(factory)
    first = llm_runtime.runtime()
    assert llm_runtime.runtime() is first and built == [first]
