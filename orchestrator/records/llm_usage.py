"""What a workflow's model calls cost: the read model's view of LLM node records.

An LLM or agent node records its calls in its ``ActivityCompleted`` result under ``llm``
(docs/llm-nodes.md, "Reading a node's record"). The projection sums those records per
workflow and keeps one provenance line per completed node; metrics count them per
activity type. Only the recorded result is read, so replay and rebuilds see the same
numbers. A result that is not a node record (or holds odd values) counts as nothing
rather than stopping the projector.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.domain.model.messages import Envelope
from orchestrator.records.history_entries import history_entry

#: Upper bound for one recorded count, so a hostile record cannot overflow a counter.
MAX_COUNT = 10**12
MAX_COST_USD = 1e9


class UsageField(StrEnum):
    """The fields of the workflow's read-model hash that sum its model calls."""

    PROMPT_TOKENS = "llm_prompt_tokens"
    COMPLETION_TOKENS = "llm_completion_tokens"
    TOTAL_TOKENS = "llm_total_tokens"
    COST_USD = "llm_cost_usd"
    CACHE_HITS = "llm_cache_hits"
    NODES = "llm_nodes"
    CALLS = "llm_calls"


class CacheStatus(StrEnum):
    HIT = "hit"


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One completed LLM node: its totals and where its answer came from."""

    seq: int
    activity_id: str
    activity_type: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    cache_hit: bool
    calls: int
    provenance: dict[str, Any]

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return max(0, min(int(value), MAX_COUNT))


def _cost(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    number = float(value)
    if not math.isfinite(number):
        return 0.0
    return max(0.0, min(number, MAX_COST_USD))


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _short(value: object, limit: int = 200) -> str | None:
    return None if value is None else str(value)[:limit]


def node_usage(entry: dict[str, Any], activity_types: dict[str, str]) -> NodeUsage | None:
    """The usage in one history line (``history_entry``), or None if it records no model call.

    ``activity_types`` maps activity id to activity type (from the workflow's state); a
    node the state does not know is named by its record (``llm.<node>``).
    """
    if entry.get("type") != "ActivityCompleted":
        return None
    data = _dict(entry.get("data"))
    record = _dict(_dict(data.get("result")).get("llm"))
    if not record:
        return None
    tokens = _dict(record.get("tokens"))
    calls = [c for c in record.get("calls") or [] if isinstance(c, dict)]
    prompt_tokens = _count(tokens.get("prompt"))
    completion_tokens = _count(tokens.get("completion"))
    cache = _dict(record.get("cache"))
    prompt = _dict(record.get("prompt"))
    activity_id = str(data.get("activity_id", ""))
    activity_type = activity_types.get(activity_id) or f"llm.{_short(record.get('node'), 100)}"
    cost = _cost(record.get("cost_usd"))
    provenance: dict[str, Any] = {
        "seq": _count(entry.get("seq")),
        "activity_id": activity_id,
        "activity_type": activity_type,
        "node": _short(record.get("node")),
        "provider": _short(record.get("provider")),
        "prompt": f"{_short(prompt.get('name'))}@{_short(prompt.get('version'))}",
        "prompt_digest": _short(prompt.get("digest")),
        "model": _short(record.get("model")),
        "models": sorted({str(c["model"])[:200] for c in calls if c.get("model")}),
        "request_ids": [str(c["request_id"])[:200] for c in calls if c.get("request_id")],
        "cache": _short(cache.get("status")),
        "tokens": {
            "prompt": prompt_tokens,
            "completion": completion_tokens,
            "total": prompt_tokens + completion_tokens,
        },
        "cost_usd": cost,
    }
    if record.get("stop_reason") is not None:
        provenance["stop_reason"] = _short(record.get("stop_reason"))
    return NodeUsage(
        seq=provenance["seq"],
        activity_id=activity_id,
        activity_type=activity_type,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost,
        cache_hit=cache.get("status") == CacheStatus.HIT,
        calls=len(calls),
        provenance=provenance,
    )


def usages_of(
    events: list[Envelope[Any] | str] | Any,
    activity_types: dict[str, str],
    earlier_types: dict[str, str] | None = None,
) -> list[NodeUsage]:
    """The node usages among newly folded events (envelopes or their history lines).

    A node is named by the type its ``ActivityScheduled`` recorded: from the state after
    the events (``activity_types``), else from the events themselves, else from the state
    before them (``earlier_types``: a run that continued as new among them), so the name
    never depends on where a batch of events ended.
    """
    entries = []
    for event in events:
        if isinstance(event, str):
            # A cheap test first: most lines are not a completed LLM node.
            if '"ActivityCompleted"' not in event or '"llm"' not in event:
                continue
            try:
                entry = json.loads(event)
            except ValueError:
                continue
        else:
            if event.type != "ActivityCompleted":
                continue
            entry = history_entry(event)
        if isinstance(entry, dict):
            entries.append(entry)
    if not entries:
        return []
    if any(_activity_id(e) not in activity_types for e in entries):
        activity_types = {**(earlier_types or {}), **_scheduled(events), **activity_types}
    found = []
    for entry in entries:
        usage = node_usage(entry, activity_types)
        if usage is not None:
            found.append(usage)
    return found


def _activity_id(entry: dict[str, Any]) -> str:
    return str(_dict(entry.get("data")).get("activity_id", ""))


def _scheduled(events: list[Envelope[Any] | str] | Any) -> dict[str, str]:
    """Activity id -> type of the ``ActivityScheduled`` among ``events``."""
    types: dict[str, str] = {}
    for event in events:
        if isinstance(event, str):
            if '"ActivityScheduled"' not in event:
                continue
            try:
                entry = _dict(json.loads(event))
            except ValueError:
                continue
            data = _dict(entry.get("data"))
            if entry.get("type") == "ActivityScheduled" and data.get("activity_id") is not None:
                types[str(data["activity_id"])] = str(data.get("activity_type", ""))
        elif event.type == "ActivityScheduled":
            types[event.payload.activity_id] = event.payload.activity_type
    return types


def empty_summary() -> dict[str, Any]:
    return {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "cost_usd": 0.0,
        "cache_hits": 0,
        "nodes": 0,
        "calls": 0,
        "provenance": [],
    }
