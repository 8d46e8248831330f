"""The bench's tail decodes only what it times: every terminal event, and the hop events
at light load; a record without a type header is always decoded."""

from __future__ import annotations

from typing import Any

from ops.bench_probes import EventTail, _type_of
from orchestrator.config.settings import Settings
from orchestrator.engine.recovery import TYPE_HEADER


class _Msg:
    def __init__(self, headers: Any) -> None:
        self._headers = headers

    def headers(self) -> Any:
        return self._headers


def test_the_type_comes_from_the_header() -> None:
    armed = ("keel.armed", b"1")
    assert _type_of(_Msg([armed, (TYPE_HEADER, b"WorkflowCompleted")])) == "WorkflowCompleted"
    assert _type_of(_Msg([armed])) is None
    assert _type_of(_Msg(None)) is None
    assert _type_of(_Msg([(TYPE_HEADER, None)])) is None


def test_terminal_events_always_hops_at_light_load_only() -> None:
    tail = EventTail(Settings(bootstrap_servers="127.0.0.1:1", topic_prefix="unit-tail"))
    try:
        for hops in (True, False):
            tail.hops = hops
            for kind in ("WorkflowCompleted", "WorkflowFailed", "WorkflowCancelled", None):
                assert tail.wanted(kind), kind
            for kind in ("WorkflowStarted", "ActivityScheduled", "ActivityCompleted"):
                assert tail.wanted(kind) is hops, kind
            for kind in ("StateEntered", "TimerScheduled", "ActivityFailed"):
                assert not tail.wanted(kind), kind
    finally:
        tail.consumer.close()
