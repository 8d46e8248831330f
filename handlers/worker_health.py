"""The worker's periodic ``health:`` log line, read from its status (``Worker.health``)."""

from __future__ import annotations

from typing import Any

__all__ = ["worker_health_line"]


def worker_health_line(status: dict[str, Any]) -> str:
    """The periodic ``health:`` log line of a worker."""
    redis = status.get("redis", {})
    return (
        f"health: partitions={status.get('assigned_partitions')} "
        f"last_commit_age_s={status.get('last_commit_age_s')} "
        f"consumer_errors={status.get('consumer_errors', 0)} "
        f"consumer_resets={status.get('consumer_resets', 0)} "
        f"stalled_calls={status.get('stalled_calls', 0)} "
        f"redis={'down' if redis.get('down') else 'up'} "
        f"completed={status.get('completed', 0)} failed={status.get('failed', 0)} "
        f"dead_letters={status.get('dead_letters', 0)}"
    )
