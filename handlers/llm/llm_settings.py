"""LLM provider configuration: ``KEEL_LLM_*`` environment variables (docs/llm-nodes.md).

``KEEL_LLM_BASE_URL`` alone points every LLM node at another OpenAI-compatible server
(vLLM, Ollama, a hosted API). The API key is a ``SecretStr``: it prints as ``**********``
and is only ever read to build the ``Authorization`` header.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.domain.model.errors import ConfigError

__all__ = ["LlmSettings", "ProviderKind", "StructuredOutput", "load_llm_settings"]


class ProviderKind(StrEnum):
    OPENAI = "openai"
    SCRIPTED = "scripted"


class StructuredOutput(StrEnum):
    """How the output schema is asked for: ``response_format`` json_schema, json_object, or
    only in the prompt (``off``) for servers without structured output."""

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    OFF = "off"


class LlmSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KEEL_LLM_", extra="ignore", frozen=True)

    provider: ProviderKind = Field(default=ProviderKind.OPENAI, description="openai | scripted")
    base_url: str = Field(
        default="https://api.openai.com/v1",
        pattern=r"^https?://[^\s]+$",
        description="OpenAI-compatible API root (…/v1); /chat/completions is appended.",
    )
    api_key: SecretStr | None = Field(default=None, description="Bearer token, never logged.")
    model: str = Field(default="", description="Model of nodes that name none.")
    timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Per provider call.")
    structured_output: StructuredOutput = StructuredOutput.JSON_SCHEMA
    script: Path | None = Field(
        default=None, description="Responses file of the scripted provider."
    )
    price_input_per_mtok: float = Field(default=0.0, ge=0, description="USD per 1M prompt tokens.")
    price_output_per_mtok: float = Field(default=0.0, ge=0, description="USD per 1M output tokens.")
    max_retry_after_s: float = Field(
        default=300.0, ge=0, description="Longest Retry-After a worker reports."
    )


def load_llm_settings() -> LlmSettings:
    """The settings from the environment, or ``ConfigError`` naming the variable."""
    try:
        return LlmSettings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = "KEEL_LLM_" + ".".join(str(p) for p in err["loc"]).upper()
            shown = "" if name == "KEEL_LLM_API_KEY" else f"={err.get('input')}"
            problems.append(f"{name}{shown}: {err['msg']}")
        raise ConfigError("invalid setting " + "; ".join(problems)) from None
