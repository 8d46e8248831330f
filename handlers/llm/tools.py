"""Tools an agent node may call: a name, a version, a description and a pure function.

A tool's version is part of every record and cache key that depends on it: bump it
when the tool's behaviour changes. Tools should read, not write (an agent's path is
not known in advance); the result of every tool call is recorded and reused on a
redelivery like a model response, so the agent never runs a tool twice for one step.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from orchestrator.domain.model.errors import DefinitionError

__all__ = ["Tool"]


@dataclass(frozen=True)
class Tool:
    name: str
    version: str
    fn: Callable[..., Any]
    description: str = ""
    #: The arguments' model (a JSON object); None: any object.
    input: type[BaseModel] | None = None
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        if not self.name or not self.version:
            raise DefinitionError("a Tool needs a name and a version")
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry offered to the model."""
        params = (
            self.input.model_json_schema()
            if self.input is not None
            else {"type": "object", "additionalProperties": True}
        )
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    async def run(self, arguments: dict[str, Any]) -> Any:
        arg: Any = self.input.model_validate(arguments) if self.input is not None else arguments
        result = self.fn(arg)
        if self.is_async:
            result = await result
        if isinstance(result, BaseModel):
            return result.model_dump(mode="json")
        return result
