"""``/metrics`` after a known workload (docs/metrics.md): a real orchestrator (its projector
a child process, whose counts the orchestrator's endpoint sums) and a real worker are
scraped over HTTP and the counts are exact.

The workload (``metrics_app.py``): three runs that complete, one that completes after a
transient failure and a retry, one that fails permanently, and one saga whose booking is
compensated after its charge fails.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Mapping

import psutil
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import KeelClient
from tests.integration import metrics_app
from tests.integration.metrics_app import APP
from tests.integration.test_connector import start_connector
from tests.support import wait_until

Samples = Mapping[tuple[str, frozenset[tuple[str, str]]], float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> Samples:
    """Every sample of the endpoint, by name and label set."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_metrics_count_a_known_workload_exactly(settings, services):
    orch_port, worker_port = _free_port(), _free_port()
    orchestrator = services.start("orchestrator", "--app", APP, "--metrics-port", str(orch_port))
    services.start("worker", "--app", APP, "--metrics-port", str(worker_port))
    runs = {
        "ok-1": ("metered", "ok"),
        "ok-2": ("metered", "ok"),
        "ok-3": ("metered", "ok"),
        "flaky-1": ("metered", "flaky"),
        "fail-1": ("metered", "fail"),
        "saga-1": ("metered_saga", "saga"),
    }
    client = KeelClient(settings, metrics_app.app)
    try:
        for wf, (name, mode) in runs.items():
            client.start(name, {"mode": mode}, workflow_id=wf)
        ended = {wf: client.wait(wf, timeout_s=120).status for wf in runs}
    finally:
        client.close()
    assert ended == {
        "ok-1": "completed",
        "ok-2": "completed",
        "ok-3": "completed",
        "flaky-1": "completed",
        "fail-1": "failed",
        "saga-1": "compensated",
    }

    def finished(samples: Samples) -> float:
        return sum(v for (n, _), v in samples.items() if n == "keel_workflows_finished_total")

    # the read model has every end (wait read it); the counts follow the same write
    orch = wait_until(
        lambda: (s := scrape(orch_port)) and finished(s) == len(runs) and s,
        60,
        "six ends counted",
    )
    m, saga = {"workflow": "metered"}, {"workflow": "metered_saga"}
    work, undo = {**m, "activity_type": "metered.work"}, {**saga, "activity_type": "metered.unbook"}
    expected = {
        ("keel_workflows_started_total", frozenset(m.items())): 5,
        ("keel_workflows_started_total", frozenset(saga.items())): 1,
        ("keel_activity_attempts_total", frozenset(work.items())): 6,
        ("keel_activity_attempts_total", frozenset({**saga, "activity_type": "metered.book"}.items())): 1,
        ("keel_activity_attempts_total", frozenset({**saga, "activity_type": "metered.charge"}.items())): 1,
        ("keel_compensation_attempts_total", frozenset(undo.items())): 1,
        ("keel_compensations_started_total", frozenset({**saga, "cause": "failed"}.items())): 1,
    }  # fmt: skip
    for key, count in expected.items():
        assert orch.get(key) == count, key
    assert value(orch, "keel_workflows_finished_total", **m, status="completed", cause="none") == 4
    assert (
        value(orch, "keel_workflows_finished_total", **m, status="failed", cause="activity_permanent")
        == 1
    )  # fmt: skip
    compensated = {"status": "compensated", "cause": "failed"}
    assert value(orch, "keel_workflows_finished_total", **saga, **compensated) == 1
    assert value(orch, "keel_activity_retries_total", **work, failure_class="transient") == 1
    assert value(orch, "keel_activity_failures_total", **work, failure_class="transient") == 1
    assert value(orch, "keel_activity_failures_total", **work, failure_class="permanent") == 1
    charge = {**saga, "activity_type": "metered.charge"}
    assert value(orch, "keel_activity_failures_total", **charge, failure_class="permanent") == 1
    assert value(orch, "keel_compensation_steps_total", **undo, outcome="succeeded") == 1
    assert value(orch, "keel_compensation_steps_total", **undo, outcome="failed") is None
    assert value(orch, "keel_workflow_duration_seconds_count", **m, status="completed") == 4
    assert value(orch, "keel_workflow_duration_seconds_count", **m, status="failed") == 1
    # every run ended in the DAG's one state, entered and left while this process ran
    assert value(orch, "keel_workflow_state_seconds_count", **m, state="run") == 5
    assert value(orch, "keel_workflow_state_seconds_count", **saga, state="run") == 1
    assert [k for k in orch if k[0] == "keel_workflow_state_untimed_total"] == []
    # the Kafka gauges, read on scrape: no dead letter, and the orchestrator's backlog
    assert value(orch, "keel_gauge_source_up", source="consumer_lag") == 1
    assert value(orch, "keel_gauge_source_up", source="dlq") == 1
    for kind in ("activity", "record", "unreadable"):
        assert value(orch, "keel_dlq_letters", kind=kind) == 0
    commands = {
        "topic": settings.topic("commands"),
        "group": f"{settings.topic_prefix}.orchestrator",
    }
    assert value(orch, "keel_consumer_lag", **commands) is not None

    worker = scrape(worker_port)
    tasks = "keel_worker_tasks_total"
    assert value(worker, tasks, activity_type="metered.work", outcome="completed") == 4
    assert value(worker, tasks, activity_type="metered.work", outcome="transient") == 1
    assert value(worker, tasks, activity_type="metered.work", outcome="permanent") == 1
    assert value(worker, tasks, activity_type="metered.book", outcome="completed") == 1
    assert value(worker, tasks, activity_type="metered.charge", outcome="permanent") == 1
    assert value(worker, tasks, activity_type="metered.unbook", outcome="completed") == 1
    assert value(worker, "keel_worker_task_seconds_count", activity_type="metered.work") == 6
    # the worker's endpoint holds the worker's metrics only: no workflow was folded there
    assert [k for k in worker if k[0] == "keel_workflows_started_total"] == []

    # The projector child dies (SIGKILL) and its supervisor starts another: what the dead
    # child counted stays in the orchestrator's sum, and the events the new one reads
    # again from the topic (its group's uncommitted tail) are not counted twice.
    [child] = psutil.Process(orchestrator.pid).children()
    child.kill()
    child.wait(30)
    wait_until(
        lambda: [c for c in psutil.Process(orchestrator.pid).children() if c.pid != child.pid],
        60,
        "a new projector child",
    )
    again = KeelClient(settings, metrics_app.app)
    try:
        again.start("metered", {"mode": "ok"}, workflow_id="ok-4")
        assert again.wait("ok-4", timeout_s=120).status == "completed"
    finally:
        again.close()
    after = wait_until(
        lambda: (s := scrape(orch_port)) and finished(s) == len(runs) + 1 and s,
        60,
        "seven ends counted",
    )
    assert value(after, "keel_workflows_started_total", **m) == 6
    assert value(after, "keel_workflows_finished_total", **m, status="completed", cause="none") == 5
    assert value(after, "keel_activity_attempts_total", **work) == 7
    assert value(after, "keel_workflows_started_total", **saga) == 1


def test_the_connector_serves_its_metrics_on_its_own_port_without_a_token(services):
    _, url = start_connector(services)
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=")
        text = answer.read().decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"process_cpu_seconds", "python_info"} <= names
