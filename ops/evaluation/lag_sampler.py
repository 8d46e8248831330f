"""Kafka's own view of a batch's backlog: the consumer lag of every group of its topic
prefix, sampled while the batch runs (docs/evaluation.md, "Evidence, run by run").

The runs waiting for a retry (``evaluation_report.backlog``, from histories) are the
backlog a workflow engine keeps in its timers; the records a group has not committed are
the backlog Kafka holds: starts and reports the orchestrator has not decided on, tasks no
worker has taken. The same figure as the ``keel_consumer_lag`` gauge (docs/metrics.md),
read by ``orchestrator/io/kafka/backlog.py``.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from orchestrator.config.settings import Settings
from orchestrator.io.kafka.backlog import consumer_lag

__all__ = ["LagSampler", "lag_name"]

#: Seconds between samples: each asks the broker for every group's offsets.
EVERY_S = 1.0


def lag_name(prefix: str, topic: str, group: str) -> str:
    """``commands <- orchestrator``: a topic and the group reading it, without the prefix."""
    return f"{topic.removeprefix(prefix + '.')} <- {group.removeprefix(prefix + '.')}"


class LagSampler:
    """A thread sampling the prefix's consumer lag every ``every_s`` while it is entered.

    ``samples``: (wall-clock ms, {``lag_name``: records}). A sample the broker could not
    answer is skipped and counted in ``missed`` (a batch SIGKILLs processes; the broker
    stays up, so a miss is a slow answer, not a gap in the batch)."""

    def __init__(self, settings: Settings, every_s: float = EVERY_S) -> None:
        self.settings = settings
        self.every_s = every_s
        self.samples: list[tuple[int, dict[str, int]]] = []
        self.missed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-sampler", daemon=True)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._sample()  # the last word: what was left when the batch ended

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def _sample(self) -> None:
        prefix = self.settings.topic_prefix
        try:
            lag = consumer_lag(self.settings, timeout_s=5.0)
        except Exception:
            self.missed += 1
            return
        named = {lag_name(prefix, topic, group): n for (topic, group), n in sorted(lag.items())}
        self.samples.append((int(time.time() * 1000), named))
