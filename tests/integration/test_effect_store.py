"""The effect store's claims on a real Redis: run, committed, in doubt, stale, released."""

from __future__ import annotations

import uuid

import pytest

from handlers.effects import EffectStore

pytestmark = pytest.mark.integration


@pytest.fixture
def store(servers):
    return EffectStore.from_url(servers.redis_url, f"t{uuid.uuid4().hex[:8]}")


def test_a_committed_effect_is_returned_not_repeated(store):
    assert store.begin("wf/pay/1", 1).outcome == "run"
    store.commit("wf/pay/1", '{"id": 7}')
    again = store.begin("wf/pay/1", 1)
    assert (again.outcome, again.result_json) == ("committed", '{"id": 7}')
    assert store.begin("wf/pay/1", 2).outcome == "committed"


def test_a_redelivered_pending_attempt_is_in_doubt_and_a_retry_may_claim(store):
    assert store.begin("k", 1).outcome == "run"
    assert store.begin("k", 1).outcome == "in_doubt"  # same dispatch again: never blindly
    assert store.begin("k", 2).outcome == "run"  # the orchestrator decided to retry
    assert store.begin("k", 1).outcome == "stale"  # the old attempt, still queued somewhere
    assert store.begin("k", 2).outcome == "in_doubt"


def test_a_definite_failure_releases_the_claim_but_keeps_older_attempts_fenced(store):
    assert store.begin("k", 2).outcome == "run"
    store.release("k")
    assert store.begin("k", 2).outcome == "run"  # nothing was written: may run again
    store.release("k")
    assert store.begin("k", 1).outcome == "stale"
    assert store.get("k")["top"] == "2"
