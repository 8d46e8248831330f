"""The health page's data: the services' status files, the consumer groups' lag, and the
workers with the activity types they run (docs/ui.md, "Health")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings
from orchestrator.io.kafka.backlog import consumer_lag
from orchestrator.runtime.health import service_health
from orchestrator.schedules.definition import TICK_ACTIVITY

__all__ = ["GONE_SHOWN_S", "Health", "health"]

#: A stopped service's status file is listed this long after its last update, then left out.
GONE_SHOWN_S = 3600.0


@dataclass
class Health:
    services: list[dict[str, Any]]
    #: ``(group, topic, records not committed yet)``, by group and topic.
    lag: list[tuple[str, str, int]]
    #: Each worker's status file row (the live ones first).
    workers: list[dict[str, Any]]
    #: The activity types of the application, each with its declared limits (or "").
    activity_types: list[tuple[str, str]]
    #: Why the lag could not be read ("" when it was).
    lag_error: str = ""
    problems: list[str] = field(default_factory=list)


def health(settings: Settings, app: KeelApp) -> Health:
    """What the status files under ``KEEL_HOME`` and Kafka tell now."""
    prefix = settings.topic_prefix
    services = [
        s
        for s in service_health(settings.home)
        if s.get("topic_prefix") in (None, prefix) and (not s["gone"] or s["age_s"] < GONE_SHOWN_S)
    ]
    workers = sorted(
        (s for s in services if s.get("role") == "worker"),
        key=lambda s: (bool(s["gone"]), str(s.get("instance_id"))),
    )
    lag_error = ""
    try:
        lag = sorted((group, topic, n) for (topic, group), n in consumer_lag(settings).items())
    except Exception as exc:  # the page still shows the rest
        lag, lag_error = [], f"{type(exc).__name__}: {str(exc)[:300]}"
    # the application's own types: keel.schedule's tick, which every service adds, is Keel's
    types = [
        (name, _limits(handler.limits))
        for name, handler in sorted(app.handlers.items())
        if name != TICK_ACTIVITY
    ]
    problems = [f"{s['file']}: {'; '.join(s['problems'])}" for s in services if s["problems"]]
    return Health(services, lag, workers, types, lag_error, problems)


def _limits(limits: Any) -> str:
    if not limits:
        return ""
    parts = []
    if getattr(limits, "max_concurrent", None):
        parts.append(f"max {limits.max_concurrent} concurrent")
    if getattr(limits, "rate", None):
        parts.append(f"rate {limits.rate}")
    return ", ".join(parts)
