"""What the client reads back about one run, typed: :class:`RunSummary` (``wait``'s answer,
the read model's row) and :class:`RunView` (``show``'s, the row with its history, tasks,
LLM usage and family).

Both are frozen: a view is what the read model held when it was read, not a live handle.
``as_dict()`` is the JSON the CLI prints (``keel workflow show --json`` is byte for byte
what it printed when ``show`` returned a dict). Reading one like a dict (``run["status"]``)
still works but warns: that was the shape before these types, kept for a while for
callers not yet moved to attributes.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from orchestrator.domain.model.vocabulary import WorkflowStatus

__all__ = ["RunSummary", "RunView"]


class _ReadsLikeADict(ABC):
    """``view["key"]`` and ``view.get("key")``, each with a ``DeprecationWarning``."""

    @abstractmethod
    def as_dict(self) -> dict[str, Any]:
        """The view as the JSON object ``--json`` prints."""

    def __getitem__(self, key: str) -> Any:
        _deprecated(self, key)
        return self.as_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        _deprecated(self, key)
        return self.as_dict().get(key, default)


def _deprecated(view: object, key: str) -> None:
    warnings.warn(
        f"reading a {type(view).__name__} like a dict is deprecated: "
        f"use .{key} instead of [{key!r}]",
        DeprecationWarning,
        stacklevel=3,
    )


@dataclass(frozen=True)
class RunSummary(_ReadsLikeADict):
    """A run as the read model's row holds it: what ``wait`` returns. ``output`` is the
    parsed output (sealed values as ``***``); times are epoch milliseconds."""

    workflow_id: str
    run_id: str
    name: str
    version: int
    status: WorkflowStatus
    state: str | None
    output: Any
    failure_reason: str | None
    seq: int
    started_at: int
    updated_at: int
    projection_error: str | None
    attention_reason: str | None
    run_base_seq: int
    human_tasks: list[dict[str, Any]]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunSummary:
        """The summary of a row as ``Projection.get`` (or an announcement) gives it."""
        values = {f.name: row[f.name] for f in fields(cls)}
        return cls(**{**values, "status": WorkflowStatus(row["status"])})

    @property
    def reason(self) -> str | None:
        """Why the run failed or needs an operator (None when neither)."""
        return self.failure_reason or self.attention_reason

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["status"] = str(self.status)
        return out


@dataclass(frozen=True)
class RunView(_ReadsLikeADict):
    """A run with its history: what ``show`` returns (docs/client.md). ``history`` holds
    each event as ``{"seq", "type", "recorded_at", "data"}``; ``llm`` the run's model-call
    usage; ``parent`` and ``children`` its family (docs/child-workflows.md)."""

    workflow_id: str
    name: str
    version: int
    status: WorkflowStatus
    state: str | None
    output: Any
    failure_reason: str | None
    run_id: str
    projection_error: str | None
    attention_reason: str | None
    continued_as_new: bool
    human_tasks: list[dict[str, Any]]
    history: list[dict[str, Any]]
    llm: dict[str, Any]
    parent: dict[str, str] | None
    children: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["status"] = str(self.status)
        return out
