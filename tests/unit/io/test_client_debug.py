"""``KEEL_KAFKA_DEBUG``: librdkafka's debug contexts on every client Keel configures."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.config.settings import Settings
from orchestrator.io.kafka.clients import admin_config, client_log, consumer_config, producer_config


def _settings(**kw: str) -> Settings:
    return Settings(topic_prefix="t", bootstrap_servers="127.0.0.1:1", **kw)  # type: ignore[arg-type]


def test_no_debug_by_default_and_lines_go_through_the_redacting_logger():
    s = _settings()
    for config in (producer_config(s), consumer_config(s, "g")):
        assert "debug" not in config
        assert config["logger"] is client_log


def test_debug_contexts_reach_producers_and_consumers_which_then_write_to_stderr():
    s = _settings(kafka_debug="cgrp,eos,metadata")
    for config in (producer_config(s), consumer_config(s, "g")):
        assert config["debug"] == "cgrp,eos,metadata"
        assert config["logger"] is None  # librdkafka's own stderr writer
    assert "debug" not in admin_config(s)


@pytest.mark.parametrize("value", ["CGRP", "cgrp eos", "cgrp;all", "x" * 201])
def test_a_value_that_is_not_a_list_of_contexts_is_refused(value: str):
    with pytest.raises(ValidationError, match="kafka_debug"):
        _settings(kafka_debug=value)


def test_child_processes_inherit_it(monkeypatch):
    monkeypatch.setenv("KEEL_KAFKA_DEBUG", "eos")
    assert _settings().child_environment()["KEEL_KAFKA_DEBUG"] == "eos"
