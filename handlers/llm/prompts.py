"""Versioned prompt templates: a name, a version, the text, and a digest of the text.

A node names its prompt by ``(name, version)``; the digest (SHA-256 of the canonical
template) goes into every record and cache key, so an edited template that kept its
version is still told apart. Templates are registered objects or files (TOML-free:
a JSON file ``{"name", "version", "system", "user"}``). Placeholders are
``string.Template`` ones (``$document``, ``${total}``); a non-string value is written
as compact JSON. See docs/llm-nodes.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from orchestrator.domain.model.errors import DefinitionError, InvalidInputError
from orchestrator.domain.model.fingerprint import canonical_json

__all__ = ["PromptRegistry", "PromptTemplate", "load_prompt", "prompts"]


@dataclass(frozen=True)
class PromptTemplate:
    """One version of a prompt: a system text and a user text with ``$placeholders``."""

    name: str
    version: int
    user: str
    system: str = ""
    description: str = ""
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.version, int) or self.version < 1:
            raise DefinitionError(f"prompt {self.name!r}: needs a name and an int version >= 1")
        for text in (self.system, self.user):
            try:
                Template(text).get_identifiers()
            except ValueError as exc:
                raise DefinitionError(f"prompt {self.label}: {exc}") from None
        body = canonical_json(
            {"name": self.name, "version": self.version, "system": self.system, "user": self.user}
        )
        object.__setattr__(self, "digest", hashlib.sha256(body.encode()).hexdigest())

    @property
    def label(self) -> str:
        return f"'{self.name}' v{self.version}"

    @property
    def placeholders(self) -> frozenset[str]:
        names = Template(self.user).get_identifiers() + Template(self.system).get_identifiers()
        return frozenset(names)

    def render(self, variables: dict[str, Any]) -> list[dict[str, str]]:
        """The chat messages for ``variables``; ``InvalidInputError`` names a missing one."""
        missing = sorted(self.placeholders - set(variables))
        if missing:
            raise InvalidInputError(
                f"prompt {self.label} needs {', '.join(missing)}; the node's input lacks it"
            )
        values = {k: v if isinstance(v, str) else _compact(v) for k, v in variables.items()}
        messages = []
        if self.system:
            messages.append({"role": "system", "content": Template(self.system).substitute(values)})
        messages.append({"role": "user", "content": Template(self.user).substitute(values)})
        return messages

    def describe(self) -> dict[str, Any]:
        """What a node's record says about its prompt."""
        return {"name": self.name, "version": self.version, "digest": self.digest}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


class PromptRegistry:
    """Prompts by ``(name, version)``; registering the same pair with other text fails."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], PromptTemplate] = {}

    def register(self, prompt: PromptTemplate) -> PromptTemplate:
        key = (prompt.name, prompt.version)
        existing = self._by_key.get(key)
        if existing is not None and existing.digest != prompt.digest:
            raise DefinitionError(
                f"prompt {prompt.label} is already registered with other text; "
                "publish a new version instead of editing a released one"
            )
        self._by_key[key] = prompt
        return prompt

    def get(self, name: str, version: int) -> PromptTemplate:
        found = self._by_key.get((name, version))
        if found is None:
            known = ", ".join(f"{n} v{v}" for n, v in sorted(self._by_key)) or "(none)"
            raise DefinitionError(f"no prompt '{name}' v{version}; known: {known}")
        return found

    def load(self, path: str | Path) -> PromptTemplate:
        return self.register(load_prompt(path))


def load_prompt(path: str | Path) -> PromptTemplate:
    """A prompt from a JSON file ``{"name", "version", "user", "system"?, "description"?}``."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DefinitionError(f"prompt file {p}: {exc}") from None
    if not isinstance(data, dict) or not {"name", "version", "user"} <= set(data):
        raise DefinitionError(f"prompt file {p}: needs an object with name, version and user")
    allowed = {"name", "version", "user", "system", "description"}
    return PromptTemplate(**{k: v for k, v in data.items() if k in allowed})


#: The process-wide registry (nodes may also hold a PromptTemplate directly).
prompts = PromptRegistry()
