"""Keel's services set Python's collector thresholds from ``KEEL_GC_THRESHOLDS``."""

from __future__ import annotations

import gc

import pytest

from orchestrator.config.settings import load_settings
from orchestrator.domain.model.errors import ConfigError
from orchestrator.telemetry.gc_policy import configure_gc


@pytest.fixture
def restored_thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_the_default_raises_the_thresholds(restored_thresholds):
    configure_gc(load_settings())
    assert gc.get_threshold() == (100_000, 50, 1_000)


def test_the_variable_sets_them(monkeypatch, restored_thresholds):
    monkeypatch.setenv("KEEL_GC_THRESHOLDS", "[700, 10, 10]")
    configure_gc(load_settings())
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[700, 10]", "Field required"),
        ("[700, 0, 10]", "Input should be greater than or equal to 1"),
        ("[-1, 10, 10]", "Input should be greater than or equal to 0"),
        ("700", "Input should be a valid tuple"),
    ],
)
def test_a_bad_value_names_the_variable(monkeypatch, value, problem):
    monkeypatch.setenv("KEEL_GC_THRESHOLDS", value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith("invalid setting KEEL_GC_THRESHOLDS"), str(info.value)
    assert problem in str(info.value)
