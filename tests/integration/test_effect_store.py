"""The effect store's claims on a real Redis: run, committed, refused, in doubt, stale, released."""

from __future__ import annotations

import uuid

import pytest

from handlers.effects import EffectStore


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


def test_effect_records_live_in_their_own_keyspace(servers):
    import redis

    from orchestrator.io.redis.keyspace import Keyspace

    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = EffectStore.from_url(servers.redis_url, prefix)
    store.begin("wf/pay/1", 1)
    r = redis.Redis.from_url(servers.redis_url, decode_responses=True)
    keys = Keyspace(prefix)
    assert r.hget(keys.effect("wf/pay/1"), "state") == "pending"
    assert list(r.scan_iter(match=f"{keys.read_model}*")) == []


def test_a_refused_result_stays_refused_for_every_attempt(store):
    assert store.begin("k", 1).outcome == "run"
    store.refuse("k", "ValidationError", "result refused", '{"posting": "p-1"}')
    assert store.release("k", 1) is False, "a refused effect is never released"
    for attempt in (1, 2):
        claim = store.begin("k", attempt)
        assert (claim.outcome, claim.error_type, claim.message) == (
            "refused",
            "ValidationError",
            "result refused",
        )
    assert store.get("k")["raw"] == '{"posting": "p-1"}'


def test_a_retried_claim_call_by_the_same_run_is_not_in_doubt(store):
    assert store.begin("k", 1, token="run-a").outcome == "run"
    assert store.begin("k", 1, token="run-a").outcome == "run"  # the first reply was lost
    assert store.begin("k", 1, token="run-b").outcome == "in_doubt"


def test_release_never_touches_a_later_attempts_claim(store):
    assert store.begin("k", 1).outcome == "run"
    assert store.begin("k", 2).outcome == "run"
    assert store.release("k", 1) is False
    assert store.get("k")["state"] == "pending"
    assert store.release("k", 2) is True


def test_effect_records_survive_a_read_model_rebuild(settings):
    """``keel projections rebuild`` clears the read model only (Keyspace.read_model)."""
    from orchestrator.io.redis.read_model import Projection

    store = EffectStore.from_url(settings.redis, settings.topic_prefix)
    store.begin("wf/pay/1", 1)
    store.commit("wf/pay/1", '{"id": 7}')
    Projection.from_url(settings.redis, settings.topic_prefix).clear()
    claim = store.begin("wf/pay/1", 2)
    assert (claim.outcome, claim.result_json) == ("committed", '{"id": 7}')
