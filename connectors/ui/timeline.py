"""A run's history as the web UI's timeline: each event with its time and what it means.

The history lines are the read model's (``KeelClient.show``: sealed fields already
masked), and the LLM calls' provenance comes from the same view's ``llm`` summary, matched
to their ``ActivityCompleted`` by sequence number. Nothing here reads Redis or Kafka.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.domain.lifecycle.activities import QUERY_SEP
from orchestrator.domain.model.errors import iso_utc
from orchestrator.domain.model.keys import CHILD_ACTIVITY_PREFIX, is_compensation
from orchestrator.domain.model.vocabulary import FailureClass, PurposeKind, TimerPurpose

__all__ = ["Entry", "EntryKind", "timeline"]

#: The longest value text shown in a detail (the whole history stays a click away: JSON).
MAX_SHOWN = 240
#: The events that end a run (the last state's time ends with them).
_ENDINGS = frozenset(
    {
        "WorkflowCompleted",
        "WorkflowFailed",
        "WorkflowCancelled",
        "WorkflowTerminated",
        "WorkflowCompensated",
        "WorkflowCompensationFailed",
        "WorkflowContinuedAsNew",
    }
)


class EntryKind(StrEnum):
    """What an entry is about (its colour on the page)."""

    RUN = "run"
    STATE = "state"
    ACTIVITY = "activity"
    FAILURE = "failure"
    TIMER = "timer"
    LLM = "llm"
    APPROVAL = "approval"
    COMPENSATION = "compensation"
    UNKNOWN = "unknown"
    SIGNAL = "signal"
    CHILD = "child"
    OTHER = "other"


@dataclass
class Entry:
    seq: int
    at: int
    type: str
    kind: EntryKind
    title: str
    details: list[tuple[str, str]] = field(default_factory=list)

    @property
    def time(self) -> str:
        return iso_utc(self.at)


def shown(value: Any) -> str:
    """A value as one line of at most :data:`MAX_SHOWN` characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def duration(ms: int) -> str:
    """``ms`` as ``850 ms``, ``12.3 s``, ``4 min 5 s`` or ``2 h 3 min``."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms // 60_000} min {ms % 60_000 // 1000} s"
    return f"{ms // 3_600_000} h {ms % 3_600_000 // 60_000} min"


def timeline(history: list[dict[str, Any]], llm: dict[str, Any], now_ms: int) -> list[Entry]:
    """The entries of ``history`` in its order; each state says how long the run stayed in
    it (until the next state, the run's end, or ``now_ms`` while it is still there)."""
    calls = {p["seq"]: p for p in llm.get("provenance") or []}
    entries = [_entry(h, calls.get(h["seq"])) for h in history]
    for i, h in enumerate(history):
        if h["type"] != "StateEntered":
            continue
        left = next(
            (x for x in history[i + 1 :] if x["type"] == "StateEntered" or x["type"] in _ENDINGS),
            None,
        )
        if left is None:
            entries[i].details.append(
                ("in state for", duration(now_ms - h["recorded_at"]) + " so far")
            )
        else:
            entries[i].details.append(
                ("time in state", duration(left["recorded_at"] - h["recorded_at"]))
            )
    return entries


def _entry(h: dict[str, Any], call: dict[str, Any] | None) -> Entry:
    d = h["data"]
    kind, title, details = _describe(h["type"], d, h["recorded_at"])
    if call is not None:
        kind, title = EntryKind.LLM, f"LLM call {call['activity_type']} completed"
        details = [*details, *_llm_details(call, d)]
    return Entry(h["seq"], h["recorded_at"], h["type"], kind, title, details)


def _llm_details(call: dict[str, Any], data: dict[str, Any]) -> list[tuple[str, str]]:
    tokens = call["tokens"]
    out = [
        ("model", str(call.get("model") or "-")),
        ("prompt", str(call.get("prompt") or "-")),
        (
            "tokens",
            f"prompt {tokens['prompt']}, completion {tokens['completion']}, "
            f"total {tokens['total']}",
        ),
        ("cost", f"${call['cost_usd']:.6f}"),
        ("cache", str(call.get("cache") or "-")),
    ]
    record = (data.get("result") or {}).get("llm") if isinstance(data.get("result"), dict) else None
    validation = record.get("validation") if isinstance(record, dict) else None
    if isinstance(validation, dict):
        verdict = "valid" if validation.get("valid") else "invalid"
        out.append(("validation", f"{verdict}, {validation.get('repairs', 0)} repair(s)"))
    return out


def _describe(
    kind: str, d: dict[str, Any], at: int
) -> tuple[EntryKind, str, list[tuple[str, str]]]:
    if kind == "WorkflowStarted":
        details = [("input", shown(d.get("input")))]
        if d.get("parent_workflow_id"):
            details.append(("parent", str(d["parent_workflow_id"])))
        return EntryKind.RUN, f"started {d['name']} v{d['version']}", details
    if kind == "StateEntered":
        return EntryKind.STATE, f"entered state {d['state']}", [("visit", str(d["visit"]))]
    if kind == "ActivityScheduled":
        return _scheduled(d)
    if kind == "ActivityCompleted":
        return (
            EntryKind.ACTIVITY,
            f"activity {d['activity_id']} completed (attempt {d['attempt']})",
            [("result", shown(d.get("result")))],
        )
    if kind == "ActivityFailed":
        return _failed(d)
    if kind == "TimerScheduled":
        purpose = TimerPurpose.parse(str(d["purpose"]))
        if purpose.kind is PurposeKind.RETRY:
            title = f"retry timer for {purpose.subject}"
        elif purpose.kind is PurposeKind.CONTINUE:  # docs/limits.md, "The continue budget"
            title = "continue as new held by the continue budget"
        else:
            title = f"timer {purpose}"
        wait = duration(max(0, int(d["fire_at"]) - at))
        return EntryKind.TIMER, title, [("fires at", f"{iso_utc(int(d['fire_at']))} (in {wait})")]
    if kind == "TimerFired":
        return EntryKind.TIMER, f"timer fired {d['timer_id']}", []
    if kind.startswith("HumanTask"):
        return _human(kind, d)
    if kind in ("ActivityResolved", "WorkflowNeedsAttention", "ActivityDeadLettered"):
        return _unknown(kind, d)
    if "Compensat" in kind:
        return EntryKind.COMPENSATION, _words(kind), _plain(d)
    if kind.startswith("Signal"):
        return EntryKind.SIGNAL, f"{_words(kind)} {d.get('signal_name', '')}".strip(), _plain(d)
    if kind in _ENDINGS:
        return EntryKind.RUN, _words(kind), _plain(d)
    return EntryKind.OTHER, _words(kind), _plain(d)


def _scheduled(d: dict[str, Any]) -> tuple[EntryKind, str, list[tuple[str, str]]]:
    aid, atype = str(d["activity_id"]), str(d["activity_type"])
    details = [("type", atype), ("attempt", f"{d['attempt']} (logical {d['logical_attempt']})")]
    if is_compensation(aid):
        return EntryKind.COMPENSATION, f"compensation {aid} scheduled", details
    if QUERY_SEP in aid:
        return EntryKind.UNKNOWN, f"status query {aid} scheduled (outcome unknown)", details
    if atype.startswith(CHILD_ACTIVITY_PREFIX):
        return EntryKind.CHILD, f"child run {d['idempotency_key']} started", details
    return EntryKind.ACTIVITY, f"activity {aid} scheduled", details


def _failed(d: dict[str, Any]) -> tuple[EntryKind, str, list[tuple[str, str]]]:
    cls = str(d["failure_class"])
    details = [
        ("failure class", cls),
        ("error", shown(f"{d['error_type']}: {d['message']}")),
    ]
    if d.get("retry_after_ms"):
        details.append(("retry after", duration(int(d["retry_after_ms"]))))
    kind = EntryKind.UNKNOWN if cls == FailureClass.UNKNOWN else EntryKind.FAILURE
    return kind, f"activity {d['activity_id']} failed (attempt {d['attempt']})", details


def _human(kind: str, d: dict[str, Any]) -> tuple[EntryKind, str, list[tuple[str, str]]]:
    task = d.get("task_id", "")
    if kind == "HumanTaskOpened":
        details = [
            ("owner", str(d.get("owner"))),
            ("role", str(d.get("role"))),
            ("operation digest", str(d.get("operation_digest"))),
        ]
        if d.get("due_at"):
            details.append(("due", iso_utc(int(d["due_at"]))))
        return EntryKind.APPROVAL, f"human task {d.get('task_name')} opened ({task})", details
    if kind == "HumanTaskDecided":
        return (
            EntryKind.APPROVAL,
            f"human task {task}: {d['decision']} by {d['actor']}",
            [
                ("operation digest", str(d["operation_digest"])),
                ("decided at", iso_utc(int(d["decided_at"]))),
            ],
        )
    return EntryKind.APPROVAL, f"{_words(kind)} ({task})", _plain(d)


def _unknown(kind: str, d: dict[str, Any]) -> tuple[EntryKind, str, list[tuple[str, str]]]:
    if kind == "ActivityResolved":
        return (
            EntryKind.UNKNOWN,
            f"unknown outcome of {d['activity_id']} settled: {d['resolution']}",
            [("reason", shown(d.get("reason", "")))],
        )
    return EntryKind.UNKNOWN, f"{_words(kind)} ({d.get('activity_id', '')})", _plain(d)


def _plain(d: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k, shown(v)) for k, v in d.items() if v not in (None, "", [], {})]


def _words(kind: str) -> str:
    """``HumanTaskReminded`` as ``human task reminded``."""
    out = "".join(f" {c.lower()}" if c.isupper() else c for c in kind).strip()
    return out
