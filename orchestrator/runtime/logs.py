"""Structured logs: one JSON object per line on stderr, for every Keel service.

Every line passes through :func:`orchestrator.settings.redact`, so a URL's password
never reaches a log file, whoever logged it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from orchestrator.domain.errors import ConfigError
from orchestrator.settings import redact

LEVELS = ("debug", "info", "warning", "error", "critical")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
            "pid": record.process,
        }
        if record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry)


def log_level(value: str | None) -> int:
    """The logging level named by ``value`` (default ``KEEL_LOG_LEVEL``, else info)."""
    name = (value or os.environ.get("KEEL_LOG_LEVEL") or "info").strip().lower()
    if name not in LEVELS:
        raise ConfigError(
            f"invalid setting KEEL_LOG_LEVEL={redact(name)[:40]}: expected one of "
            + ", ".join(LEVELS)
        )
    return logging.getLevelNamesMapping()[name.upper()]


def configure_logging(level: str | None = None) -> None:
    resolved = log_level(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(resolved)
    logging.getLogger("keel.librdkafka").setLevel(logging.ERROR)
