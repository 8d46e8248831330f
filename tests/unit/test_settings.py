"""Settings come from KEEL_* variables and bad values are refused by name."""

from __future__ import annotations

import pytest

from orchestrator.settings import Settings, SettingsError, load_settings


def test_defaults_point_at_the_local_stack(monkeypatch):
    for var in ("KEEL_BOOTSTRAP_SERVERS", "KEEL_REDIS_URL", "KEEL_TOPIC_PREFIX", "KEEL_KAFKA_PORT"):
        monkeypatch.delenv(var, raising=False)
    s = load_settings()
    assert s.kafka_servers == "127.0.0.1:19092"
    assert s.redis == "redis://127.0.0.1:16379/0"
    assert s.topic("events") == "keel.events"
    assert s.partitions == 12


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("KEEL_BOOTSTRAP_SERVERS", "10.0.0.1:9092,10.0.0.2:9092")
    monkeypatch.setenv("KEEL_TOPIC_PREFIX", "tenant-a")
    monkeypatch.setenv("KEEL_PARTITIONS", "24")
    s = load_settings()
    assert s.kafka_servers == "10.0.0.1:9092,10.0.0.2:9092"
    assert s.topic("commands") == "tenant-a.commands"
    assert s.partitions == 24


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        (
            "KEEL_PARTITIONS",
            "0",
            "invalid setting KEEL_PARTITIONS=0: Input should be greater than or equal to 1",
        ),
        (
            "KEEL_TOPIC_PREFIX",
            "a b",
            "invalid setting KEEL_TOPIC_PREFIX=a b: String should match pattern '^[A-Za-z0-9._-]{1,200}$'",
        ),
        (
            "KEEL_REDIS_URL",
            "http://x",
            "invalid setting KEEL_REDIS_URL=http://x: Value error, must start with redis://, rediss:// or unix://",
        ),
    ],
)
def test_bad_values_name_the_variable(monkeypatch, var, value, expected):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert str(info.value) == expected


def test_unknown_topic_kind_is_an_error():
    with pytest.raises(KeyError):
        Settings().topic("nope")
