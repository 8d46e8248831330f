"""A history line of the read model: one event as the projector shows it (``rm:hist:<id>``).

Apart from the projection so that what reads history lines (the LLM usage sums,
``orchestrator/records/llm_usage.py``) needs neither Redis nor the projection.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from orchestrator.domain.model.messages import Envelope
from orchestrator.records import fast_json

__all__ = ["history_entry"]


def history_entry(env: Envelope[Any]) -> dict[str, Any]:
    """One history line; ``*_json`` fields are shown parsed, under their plain name.

    Parsing is bounded (``fast_json.loads_within_limits``): a value past the JSON limits
    stays text, so a hostile payload can never stop the projector.
    """
    payload = env.payload
    data: dict[str, Any] = {}
    for name, shown in _history_fields(type(payload)):
        value = getattr(payload, name)
        if shown is not None and isinstance(value, str):
            try:
                data[shown] = fast_json.loads_within_limits(value, name)
                continue
            except (ValueError, RecursionError):
                pass
        data[name] = value
    return {"seq": env.seq, "type": env.type, "recorded_at": env.recorded_at, "data": data}


_HISTORY_FIELDS: dict[type, tuple[tuple[str, str | None], ...]] = {}


def _history_fields(payload_type: type) -> tuple[tuple[str, str | None], ...]:
    """A payload class's fields, each with its plain name if it holds JSON text."""
    found = _HISTORY_FIELDS.get(payload_type)
    if found is None:
        found = _HISTORY_FIELDS[payload_type] = tuple(
            (f.name, f.name[: -len("_json")] if f.name.endswith("_json") else None)
            for f in fields(payload_type)
        )
    return found
