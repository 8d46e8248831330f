"""In a Redis Cluster every script and transaction Keel sends touches the keys of one hash
slot (orchestrator/io/redis/keyspace.py, "Redis Cluster"), or the cluster refuses it with
``CROSSSLOT``. Checked over the real key builders and the real callers: the projector folds
recorded runs (tests/histories: activities, human tasks, webhooks' signals) into the read
model through a client that records each script and transaction instead of sending it, the
type limiter admits and renews, the effect store claims; each unit's keys must share one
CRC16 slot (redis-py's ``key_slot``). No server is contacted.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from handlers.effects import EffectStore, RedisGate
from handlers.type_limits import TypeLimiter
from orchestrator import RateLimit
from orchestrator.application.activity_limits import ActivityLimits
from orchestrator.client.history_io import read_history_file
from orchestrator.config.settings import Settings
from orchestrator.examples import app
from orchestrator.io.ports import Record
from orchestrator.io.redis.client_factory import is_cluster
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.projector.projector import Projector, RedisReadModelStore
from orchestrator.records.read_model_rows import ANNOUNCE

HISTORIES = Path(__file__).parents[2] / "histories"
CLUSTER_URL = "redis+cluster://127.0.0.1:1/"
#: Ids that would move or empty a hash tag if a key put them before its own.
AWKWARD_IDS = ("wf{x}", "}{", "{}", "a}b{c")


class RecordingCluster(RedisCluster):
    """A cluster client that sends nothing: each script call and each executed transaction
    is recorded as (what, its keys)."""

    def __init__(self) -> None:  # no connection: the slot map is never read
        self.units: list[tuple[str, list[str]]] = []
        self._queuer = redis.Redis(host="127.0.0.1", port=1)

    def __del__(self) -> None:
        pass

    def register_script(self, script: Any) -> Any:
        def call(keys: list[str], args: list[Any]) -> Any:
            self.units.append((f"script {script.strip()[:40]!r}", list(keys) + _script_keys(args)))
            if "rebuild" in script:  # the guarded read-model write: written
                return ["ok"]
            return 0 if "renewed" in script else ["run", 0]  # no lease renewed; admitted

        return call

    def pipeline(self, transaction: bool | None = True, shard_hint: Any = None) -> Any:
        pipe = self._queuer.pipeline(transaction=bool(transaction))
        if transaction:

            def execute(raise_on_error: bool = True) -> list[Any]:
                stack = [args for args, _ in pipe.command_stack]
                self.units.append(("transaction", [k for a in stack for k in _command_keys(a)]))
                pipe.reset()  # every reply empty (a missing row's)
                return [_empty_reply(a) for a in stack]

            pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    def hset(self, *args: Any, **kwargs: Any) -> int:
        return 0  # a projection error noted on a row: one key, no transaction

    def set(self, *args: Any, **kwargs: Any) -> bool:
        return True  # the rebuild lock and epoch: one key each


def _empty_reply(args: tuple[Any, ...]) -> Any:
    """What Redis answers a read of keys that do not exist."""
    return {"HMGET": [None] * (len(args) - 2), "LRANGE": []}.get(str(args[0]))


def _command_keys(args: tuple[Any, ...]) -> list[str]:
    """The keys of one queued command: its first argument, the row of an announcement,
    none for a ``PUBLISH`` (a channel is no key)."""
    name = str(args[0]).upper()
    if name == ANNOUNCE.upper():
        return [str(args[2])]
    if name == "PUBLISH":
        return []
    return [str(args[1])]


def _script_keys(args: list[Any]) -> list[str]:
    """Keys a script reaches through its arguments: the guarded read-model write's rows
    (``expected``) and every key of the commands it runs."""
    if not args or not isinstance(args[-1], str) or not args[-1].startswith("[["):
        return []
    rows = [str(a) for a in args[2 : 2 + 2 * int(args[1]) : 2]]
    return rows + [k for cmd in json.loads(args[-1]) for k in _command_keys(tuple(cmd))]


def _assert_one_slot(units: list[tuple[str, list[str]]]) -> None:
    assert units, "nothing was recorded"
    for what, keys in units:
        slots = {key_slot(k.encode()) for k in keys}
        assert len(slots) == 1, f"{what} spans slots {sorted(slots)}: {keys}"


def _records(projector: Projector, name: str) -> list[Record]:
    events = [e for e in read_history_file(HISTORIES / name) if e.seq > 0]
    return [
        Record("events", 0, i, e.workflow_id.encode(), projector.codec.encode(e))
        for i, e in enumerate(events)
    ]


def _projector(r: RecordingCluster, home: Path) -> Projector:
    settings = Settings(redis_url=CLUSTER_URL, topic_prefix="t", home=home)
    store = RedisReadModelStore(cast("Any", r), "t", CLUSTER_URL, app.definitions)
    return Projector(settings, app, adapters=(None, store))  # type: ignore[arg-type]


@pytest.fixture
def projector(tmp_path) -> tuple[Projector, RecordingCluster]:
    r = RecordingCluster()
    return _projector(r, tmp_path), r


@pytest.mark.parametrize(
    "history", ["approvals.jsonl", "document_review.jsonl", "invoices.jsonl", "fan_out.jsonl"]
)
def test_the_projectors_writes_stay_in_one_slot(projector, history) -> None:
    """Live (one guarded script per batch, several runs at once) and in a rebuild (one
    transaction per batch), with rows, histories, status and search indexes and the inbox."""
    p, r = projector
    assert is_cluster(r) and p.keyspace.clustered and p.projection.ks.clustered
    records = _records(p, history)
    assert p.apply(records, guarded=True) == len(records)
    rebuilding = _projector(r, p.settings.home)  # a rebuild's: an empty cache
    assert rebuilding.apply(records, guarded=False) == len(records)
    assert any(what == "transaction" for what, _ in r.units)
    scripts = [u for u in r.units if u[0].startswith("script")]
    assert scripts and any(len(keys) > 10 for _, keys in scripts), "a batch of several runs"
    _assert_one_slot(r.units)


def test_the_read_models_other_transactions_stay_in_one_slot(projector) -> None:
    p, r = projector
    store = p.projection
    token = store.begin_rebuild()
    store.end_rebuild(token)
    for wf in AWKWARD_IDS:
        store.get_with_first_line(wf)
        store.llm_usage(wf)
        r.units.append(("row keys", [store.k_wf(wf), store.k_history(wf), store.k_llm(wf)]))
    r.units.append(("locks", [store.lock_key, store.epoch_key, store.ks.workflows]))
    _assert_one_slot(r.units)


def test_an_activity_types_limit_keys_share_its_slot_and_types_spread() -> None:
    r = RecordingCluster()
    limiter = TypeLimiter(cast("Any", r), "t", RedisGate(threading.Event()))
    limits = ActivityLimits(2, RateLimit(10, per=5))
    types = ("post_to_ledger", "summarize", "a}b", "}x", "{y}")
    for activity_type in types:
        limiter.admit_now(activity_type, limits, f"wf{{1}}/{activity_type}/1", 1)
    assert limiter.renew() == 0  # the recorder renews none; one script per type's leases
    _assert_one_slot(r.units)
    admissions, renewals = r.units[: len(types)], r.units[len(types) :]
    assert [len(keys) for _, keys in admissions] == [3] * len(types)
    assert sorted(keys[0] for _, keys in renewals) == sorted(keys[0] for _, keys in admissions)
    admits = {key_slot(Keyspace("t", clustered=True).rate(t).encode()) for t in types}
    assert len(admits) > 1, "the types' books spread over slots"


def test_an_effect_record_is_one_key_per_script() -> None:
    r = RecordingCluster()
    store = EffectStore(cast("Any", r), "t")
    store.begin("wf{1}/post/1", 1, "owner")
    store.commit("wf{1}/post/1", "{}")
    store.release("wf{1}/post/1", 1)
    assert [len(keys) for _, keys in r.units] == [1, 1, 1]


def test_single_and_sentinel_keys_keep_their_names() -> None:
    """Only a cluster's keys are tagged: a server's or a Sentinel group's data stays where
    it was (effect records and claims are never rebuilt)."""
    plain, tagged = Keyspace("p"), Keyspace("p", clustered=True)
    assert plain.workflow("w") == "keel:p:rm:wf:w"
    assert plain.reservation("T", "K") == "keel:p:lim:rsv:K"
    assert plain.concurrency("T") == "keel:p:lim:conc:T"
    assert tagged.workflow("w") == "keel:{p:rm}:wf:w"
    assert tagged.reservation("T", "K") == "keel:p:lim:{t:T}:rsv:K"
    for name in ("effect", "redriven"):
        assert getattr(plain, name)("k") == getattr(tagged, name)("k")
    assert plain.dedupe("s", "e") == tagged.dedupe("s", "e") == "keel:p:dd:s:e"
    assert Keyspace.for_url("p", CLUSTER_URL) == tagged
    assert Keyspace.for_url("p", "redis+sentinel://s1/keel/0") == plain
    assert tagged.patterns == ("keel:p:*", "keel:{p:rm}:*")
