"""Structured logs: one JSON object per line on stderr, for every Keel service.

Every line passes through :func:`orchestrator.config.settings.redact`, so a URL's password
never reaches a log file, whoever logged it.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from orchestrator.config.settings import LOG_LEVELS, Settings, load_settings, redact
from orchestrator.domain.model.errors import ConfigError

LEVELS = LOG_LEVELS


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


def log_level(value: str | None, settings: Settings | None = None) -> int:
    """The logging level named by ``value`` (default the settings' ``log_level``,
    ``KEEL_LOG_LEVEL``, else info)."""
    if not value:
        value = (settings or load_settings()).log_level
    name = value.strip().lower()
    if name not in LEVELS:
        raise ConfigError(
            f"invalid setting KEEL_LOG_LEVEL={redact(name)[:40]}: expected one of "
            + ", ".join(LEVELS)
        )
    return logging.getLevelNamesMapping()[name.upper()]


def configure_logging(level: str | None = None, settings: Settings | None = None) -> None:
    resolved = log_level(level, settings)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(resolved)
    logging.getLogger("keel.librdkafka").setLevel(logging.ERROR)
