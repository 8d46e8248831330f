"""``keel bench`` at a tiny size: it runs, its last line is JSON with every key, and it
leaves nothing behind under its prefix (unless ``--keep-topics``).

A smoke test only: no figure is asserted (speed is measured by the bench, never here).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from ops import scratch
from ops.bench_probes import HOPS
from orchestrator.config.settings import TOPIC_KINDS
from orchestrator.io.kafka.topics import admin_client
from orchestrator.io.redis.client_factory import RedisUse, redis_client
from tests.conftest import REPO

LIGHT_KEYS = {
    "rm_p50_ms",
    "rm_p99_ms",
    "events_p50_ms",
    "events_p99_ms",
    "transactions_per_workflow",
    "commit_ms",
    "decide_ms_per_command",
    "intake_lag_ms",
    "local_activity_ms",
}

#: Remote --wait p50 and p99 over Kafka's floor, printed by every run with light load.
REMOTE_RATIOS = {
    "remote_rm_p50_over_kafka_hops",
    "remote_rm_p99_over_kafka_hops_p99",
    "remote_rm_p50_over_kafka_hop",
    "remote_rm_p99_over_kafka_hop_p99",
}


#: The line ``ops/scratch.py`` logs when it dropped a run's prefix.
DROPPED = re.compile(
    r"^dropped prefix (bench-[\w-]+): (\d+) topics, (\d+) Redis keys$",
    re.M,
)


#: The line ``ops/scratch.py`` logs when it made a run's prefix.
CREATED = re.compile(r"^prefix (bench-[\w-]+): topics created$", re.M)


def _left(settings, prefix: str) -> tuple[list[str], list[str]]:
    """The topics and Redis keys still under ``prefix``."""
    topics = sorted(
        t
        for t in admin_client(settings).list_topics(timeout=30).topics
        if t.startswith(prefix + ".")
    )
    keys = sorted(
        redis_client(settings.redis, RedisUse.READ_MODEL).scan_iter(
            match=f"keel:{prefix}:*", count=1000
        )
    )
    return topics, keys


def _assert_dropped(settings, stderr: str) -> None:
    found = DROPPED.findall(stderr)
    assert found and len(found) == len(CREATED.findall(stderr)), stderr[-3000:]
    for prefix, topics, keys in found:
        assert int(topics) >= 5, (prefix, topics)
        # a run with a projector wrote read-model rows; --recovery runs none
        assert (int(keys) > 0) == ("-rec-" not in prefix), (prefix, keys)
        deadline = time.monotonic() + 15  # the brokers' metadata learns of a deletion late
        while (left := _left(settings, prefix))[0] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == ([], []), prefix


def _bench(settings, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update(
        KEEL_BOOTSTRAP_SERVERS=settings.kafka_servers,
        KEEL_REDIS_URL=settings.redis,
        KEEL_PARTITIONS="4",
    )
    done = subprocess.run(
        [sys.executable, "-m", "ops.bench", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    result = dict(json.loads(last))
    if "--keep-topics" in args:
        assert not DROPPED.search(done.stderr)
        result["_stderr"] = done.stderr
    else:
        _assert_dropped(settings, done.stderr)
    return result


def test_bench_prints_every_figure_as_json_on_its_last_line(settings):
    result = _bench(settings, "--workflows", "20", "--runs", "1", "--light", "3")
    for key in ("light_remote", "light_local"):
        assert set(result[key]) >= LIGHT_KEYS, key
    assert "worker_hop_ms" in result["light_remote"]
    assert result["light_local"]["transactions_per_workflow"] == 1.0
    assert result["light_remote"]["transactions_per_workflow"] == 4.0
    for key in (
        "throughput_remote",
        "throughput_local",
        "throughput_remote_no_projector",
        "throughput_local_no_projector",
        "throughput_remote_projector_process",
        "throughput_local_projector_process",
        "throughput_remote_projector_thread",
        "throughput_local_projector_thread",
        "rebuild_events_per_s",
        "rebuild_deferred_folds_s",
        "read_ceiling_events_per_s",
    ):
        assert isinstance(result[key], float | int), key
    for key in ("half_peak_remote", "half_peak_local"):
        assert {"rate_per_s", "events_p50_ms", "events_p99_ms"} <= set(result[key])
    assert set(result["peak_rss_mb"]) == {"orchestrator", "worker", "projector", "projector_child"}
    # every projector sampled: the default child, the standalone process
    assert result["peak_rss_mb"]["projector_child"] > 0
    assert result["peak_rss_mb"]["projector"] > 0
    # with a projector (child, process or thread): the rate until the read model showed every run
    assert set(result["read_model_throughput"]) == {
        "remote", "local", "remote-pp", "local-pp", "remote-pt", "local-pt"
    }  # fmt: skip
    assert set(result["kafka_floor"]) == {
        "client_ack_ms",
        "intake_ms",
        "send_offsets_ms",
        "commit_ms",
        "visible_ms",
        "hop_p50_ms",
        "hop_p99_ms",
    }
    assert set(result["ratios"]) == {
        "local_events_p50_over_kafka_hop",
        "local_rm_p50_over_kafka_hop",
        *REMOTE_RATIOS,
        "rebuild_over_read_ceiling",
        "projector_process_over_child_local",
        "projector_thread_over_child_local",
    }
    assert result["partitions"] == 4


def test_bench_light_only_runs_the_light_phases_and_kafkas_floor(settings):
    result = _bench(settings, "--light-only", "--runs", "1", "--light", "3")
    for key in ("light_remote", "light_local"):
        assert set(result[key]) >= LIGHT_KEYS, key
    assert "hop_p50_ms" in result["kafka_floor"]
    assert "throughput_local" not in result and "rebuild_events_per_s" not in result
    assert set(result["ratios"]) == {
        "local_events_p50_over_kafka_hop",
        "local_rm_p50_over_kafka_hop",
        *REMOTE_RATIOS,
    }
    # every light remote run split into its hops, which add up to about its --wait time
    hops = result["light_remote"]["hops_ms"]
    assert hops["runs"] == 3
    assert set(hops) == {*HOPS, "sum_of_medians", "runs", "slowest"}
    slowest = hops["slowest"][0]
    assert slowest["total_ms"] == pytest.approx(sum(slowest[h] for h in HOPS), abs=0.5)
    assert slowest["total_ms"] >= result["light_remote"]["rm_p50_ms"] - 0.5
    assert "hops_ms" not in result["light_local"]


def test_bench_throughput_only_runs_the_two_bursts_with_their_cpu_per_run(settings):
    # CPU is read from /proc in clock ticks (10 ms): 10 local runs (~2.5 ms of the
    # orchestrator's CPU on a fast host) could show none at all. 400 runs span several ticks
    # in every process the test asserts on, even at ~0.15 ms per run.
    result = _bench(
        settings, "--throughput-only", "--runs", "1", "--workflows", "400", "--keep-topics"
    )
    assert isinstance(result["throughput_remote"], float | int)
    assert isinstance(result["throughput_local"], float | int)
    for key in ("cpu_ms_per_workflow", "cpu_ms_per_workflow_local"):
        assert set(result[key]) == {"orchestrator", "worker", "projector_child"}, key
    assert result["cpu_ms_per_workflow_local"]["orchestrator"] > 0
    assert result["cpu_ms_per_workflow_local"]["projector_child"] > 0  # it folded the runs
    assert "light_local" not in result and "throughput_local_no_projector" not in result
    # --keep-topics: the run's prefix is still there, whole, for inspection
    (prefix,) = CREATED.findall(result["_stderr"])
    topics, keys = _left(settings, prefix)
    assert {t.split(".", 1)[1] for t in topics} >= {"commands", "events", "activity-tasks", "dlq"}
    assert any(":rm:wf:" in k for k in keys)
    dropped = scratch.drop(settings.model_copy(update={"topic_prefix": prefix}))
    assert dropped.failures == () and dropped.topics == len(topics)
    assert dropped.keys == len(keys)


def test_bench_recovery_reports_the_first_decision_and_rss(settings):
    result = _bench(settings, "--recovery", "40")
    assert result["live_runs"] == 40
    assert result["live_workflows_after"] == 41  # the 40 and the probe
    for key in ("first_decision_after_start_s", "rss_mb", "rss_mb_per_100k_live", "rebuild_s"):
        assert isinstance(result[key], float | int), key
    # Every run's last event came back through Kafka with its armed header: all deferred.
    assert result["cold_live_deferred_runs"] == 41
    assert isinstance(result["cold_live_deferred_folds_s"], float | int)


def test_drop_removes_its_own_prefix_and_not_one_that_starts_with_it(settings):
    from orchestrator.io.kafka.topics import create_topics

    mine = scratch.fresh(settings, lambda _m: None, "drop")
    other = mine.model_copy(update={"topic_prefix": f"{mine.topic_prefix}.x"})
    create_topics(other)
    r = redis_client(settings.redis, RedisUse.READ_MODEL)
    for s in (mine, other):
        r.set(f"keel:{s.topic_prefix}:rm:wf:a", "1")
    dropped = scratch.drop(mine)
    assert (dropped.topics, dropped.keys, dropped.failures) == (6, 1, ())
    own = {mine.topic(kind) for kind in TOPIC_KINDS}
    deadline = time.monotonic() + 15  # the brokers' metadata learns of a deletion late
    while own & set(_left(settings, mine.topic_prefix)[0]):
        assert time.monotonic() < deadline, _left(settings, mine.topic_prefix)
        time.sleep(0.2)
    topics, keys = _left(settings, other.topic_prefix)
    assert len(topics) == 6 and keys == [f"keel:{other.topic_prefix}:rm:wf:a"]
    assert scratch.drop(other).failures == ()
