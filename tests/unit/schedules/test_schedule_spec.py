"""Schedule specs and fire times (docs/schedules.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.client.schedule_client import build_spec
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.schedules.spec import (
    check_schedule_name,
    fire_times,
    newest_fire_times,
    next_fire,
    parse_every,
    schedule_workflow_id,
    tick_run_id,
)


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_every_takes_whole_seconds_and_units() -> None:
    assert parse_every("2s") == 2000
    assert parse_every("5m") == 300_000
    assert parse_every(" 1h ") == 3_600_000
    assert parse_every("1d") == 86_400_000
    for bad in ("2", "0s", "1500ms", "2 weeks", "-1s"):
        with pytest.raises(InvalidInputError):
            parse_every(bad)


def test_an_interval_is_anchored_at_the_epoch() -> None:
    spec = build_spec("s", "w", every="2s")
    assert next_fire(spec, 1001) == 2000
    assert next_fire(spec, 2000) == 4000
    assert fire_times(spec, 1000, 9000, 10) == [2000, 4000, 6000, 8000]
    assert fire_times(spec, 1000, 9000, 2) == [2000, 4000]


def test_a_cron_is_read_in_its_time_zone() -> None:
    spec = build_spec("s", "w", cron="0 9 * * *", timezone="Europe/Paris")
    after = ms("2026-07-01T00:00:00+00:00")
    assert next_fire(spec, after) == ms("2026-07-01T07:00:00+00:00")  # 09:00 CEST
    winter = ms("2026-12-01T00:00:00+00:00")
    assert next_fire(spec, winter) == ms("2026-12-01T08:00:00+00:00")  # 09:00 CET


def test_run_ids_name_the_schedule_and_the_tick_in_utc() -> None:
    tick = ms("2026-12-03T17:05:00+00:00")
    assert tick_run_id("nightly", tick) == "nightly:2026-12-03T17:05:00Z"
    assert schedule_workflow_id("nightly") == "schedule:nightly"
    assert datetime.fromtimestamp(tick / 1000, UTC).minute == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "* * * * * *"}, "cron must be five fields"),
        ({"cron": "61 * * * *"}, "cron must be five fields"),
        ({}, "give exactly one of cron and every"),
        ({"cron": "* * * * *", "every": "2s"}, "give exactly one of cron and every"),
        ({"every": "2s", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"every": "2s", "catchup_window_s": 0}, "catch-up window"),
        ({"every": "2s", "overlap": "sometimes"}, "invalid schedule"),
    ],
)
def test_a_bad_spec_is_one_line_naming_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        build_spec("s", "w", **kwargs)
    assert "\n" not in str(info.value)


def test_a_schedule_name_is_an_id_without_a_colon() -> None:
    assert check_schedule_name("nightly-report.v2") == "nightly-report.v2"
    for bad in ("", "a:b", "-x", "a b", "x" * 101):
        with pytest.raises(InvalidInputError):
            check_schedule_name(bad)


def test_the_newest_fire_times_of_a_span_for_an_interval_and_a_cron() -> None:
    every = build_spec("s", "w", every="2s")
    assert newest_fire_times(every, 1000, 9000, 2) == [6000, 8000]
    assert newest_fire_times(every, 1000, 9000, 10) == fire_times(every, 1000, 9000, 10)
    cron = build_spec("s", "w", cron="*/5 * * * *", timezone="Europe/Paris")
    start, end = ms("2026-12-03T10:00:00+00:00"), ms("2026-12-03T11:00:00+00:00")
    assert newest_fire_times(cron, start, end, 3) == fire_times(cron, start, end, 100)[-3:]
    assert newest_fire_times(cron, start, end, 3)[-1] == end  # the end itself counts


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"every": "99999999999999999999d"},
            "--every must be at most 3,660d, got '99999999999999999999d'",
        ),
        ({"every": "3661d"}, "--every must be at most 3,660d, got '3661d'"),
        ({"every": float("inf")}, "every must be at most 3,660 days, got inf"),
        ({"every": 1e30}, "every must be at most 3,660 days, got 1e+30"),
        (
            {"every": "2s", "catchup_window_s": float("nan")},
            "invalid schedule: the catch-up window must be at most 366 days, got nan",
        ),
    ],
)
def test_a_duration_past_the_timer_limit_is_refused_at_create(kwargs: dict, message: str) -> None:
    """Issue 44: ``--every 99999999999999999999d`` was accepted, then its run failed arming
    a timer longer than any timer may be (docs/limits.md) and the schedule was deleted."""
    with pytest.raises(InvalidInputError) as info:
        build_spec("s", "w", **kwargs)
    assert str(info.value) == message
    assert build_spec("s", "w", every="3660d").every_ms == 3660 * 86_400_000


def test_a_huge_count_of_digits_is_refused_without_parsing_it() -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_every("9" * 5000 + "s")
    assert str(info.value) == (
        "--every must be at most 3,660d, got '" + "9" * 200 + "... (5,001 characters)'"
    )
