"""Losing any one broker of a three-broker cluster loses nothing and stops nothing.

Keel runs on the suite's three-broker cluster (tests/fault/conftest.py) with its topics at
replication factor 3 and ``min.insync.replicas=2``. Each round starts a batch of
``three_step`` workflows, SIGKILLs the broker holding one role while the batch is in
flight, and requires every workflow of the batch to complete within a bound with the
orchestrator and the worker still running; the broker is then started again and every
replica must be back in sync before the next round. At the end every history is sound
(contiguous seq, one terminal event, no duplicate) and every result is right.

The roles are found with the admin API: consumer-group coordinators with
``describe_consumer_groups``, the transaction coordinator and the active controller with
the Java Admin API (``ops/kafka/ClusterAdmin.java``). A failure says how the process
failed: exited (with its code and last log lines) or stalled (completions by the read
model and by the event store, so a stalled projector is told apart from a stalled
orchestrator).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ops.cluster import (
    cluster_roles,
    coordinator_partition,
    group_coordinator,
    remove_static_member,
    replicas,
    under_replicated,
)
from ops.local import LocalStack
from orchestrator.client.client import KeelClient
from orchestrator.domain.model.messages import WorkflowCompleted
from orchestrator.settings import Settings
from tests.fault.conftest import heal
from tests.support import Services, assert_sound_history, histories, wait_until

BATCH = 300
WORKFLOW = "three_step"
#: Bound on a batch's completion after a kill: failover, the transaction timeout (10 s)
#: of anything the dead broker held, and the batch itself, with room to spare.
COMPLETE_WITHIN_S = 120.0
COORDINATOR_KILLS = 3
RESTARTS_TO_COINCIDE = 4


def expected_output(n: int) -> int:
    return ((n + 1) * 2) ** 2


@dataclass
class Keel:
    """The Keel processes of one test on the cluster."""

    cluster: LocalStack
    settings: Settings
    services: Services
    client: KeelClient
    worker: subprocess.Popen
    instance_id: str
    orchestrator: subprocess.Popen | None = None
    started: int = 0  # workflows started so far by the test

    @property
    def orch(self) -> subprocess.Popen:
        assert self.orchestrator is not None
        return self.orchestrator

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    @property
    def prefix(self) -> str:
        return self.settings.topic_prefix

    def transactional_id(self, instance_id: str | None = None) -> str:
        return f"{self.prefix}.orchestrator.{instance_id or self.instance_id}"

    def topics(self) -> list[str]:
        kinds = ("commands", "events", "snapshots", "activity-tasks", "dlq")
        return [f"{self.prefix}.{k}" for k in kinds] + ["__consumer_offsets", "__transaction_state"]

    def completed(self) -> int:
        return self.client.projection.counts()["completed"]

    def running(self) -> int:
        return self.client.projection.counts()["running"]


def _log_lines(proc: subprocess.Popen) -> list[str]:
    log_path = getattr(proc, "log_path")  # noqa: B009 - set by tests.support.Services
    return log_path.read_text(errors="replace").splitlines()


def _owns_all(proc: subprocess.Popen, partitions: int) -> bool:
    want = f"assigned partitions {list(range(partitions))}"
    return any(want in line for line in _log_lines(proc))


def _tail(proc: subprocess.Popen, n: int = 6) -> str:
    notable = [
        ln for ln in _log_lines(proc) if " WARNING " in ln or " ERROR " in ln or "Error" in ln
    ]
    return " | ".join((notable or _log_lines(proc))[-n:])


def _start_orchestrator(k: Keel, instance_id: str) -> subprocess.Popen:
    proc = k.services.start("orchestrator", KEEL_INSTANCE_ID=instance_id)
    wait_until(
        lambda: _owns_all(proc, 4) or proc.poll() is not None, 90, "the orchestrator's assignment"
    )
    assert proc.poll() is None, f"orchestrator exited at start: {_tail(proc)}"
    return proc


@pytest.fixture
def keel(cluster, cluster_settings, cluster_services, cluster_client) -> Keel:
    instance_id = f"{cluster_settings.topic_prefix}-o"
    worker = cluster_services.start("worker")
    k = Keel(cluster, cluster_settings, cluster_services, cluster_client, worker, instance_id)
    k.orchestrator = _start_orchestrator(k, instance_id)
    # One run through every hop: the orchestrator's first transaction creates the
    # cluster's __transaction_state (a fresh cluster has none), and both processes are warm.
    k.client.start_many(WORKFLOW, [("warmup-1", {"n": 1})])  # type: ignore[attr-defined]
    k.started += 1
    wait_until(lambda: k.completed() >= 1, 90, "the warm-up run")
    return k


# ---------------------------------------------------------------------------- roles


def orchestrator_coordinator(k: Keel) -> int:
    """Make the orchestrator's transaction and group coordinators one broker; return it.

    The group coordinator follows the group id (fixed), the transaction coordinator the
    transactional id, which carries the instance id. When they differ, the orchestrator is
    restarted (SIGTERM while the cluster is healthy) under an instance id whose
    ``__transaction_state`` partition the group coordinator leads; a bounded number of tries.
    The stopped orchestrator is a static member under the old id: it is removed from the
    group, so the new one is assigned at once rather than after the old session (30 s).
    """
    group = f"{k.prefix}.orchestrator"
    for attempt in range(RESTARTS_TO_COINCIDE):
        group_node = wait_until(
            lambda: group_coordinator(k.bootstrap, group), 60, f"the coordinator of {group}"
        )
        tid = k.transactional_id()
        leaders = {p.partition: p.leader for p in replicas(k.bootstrap, ["__transaction_state"])}
        txn_node = cluster_roles(k.bootstrap, k.cluster.libs_dir, (tid,))
        coordinator = txn_node.transaction_coordinators.get(tid)
        if coordinator is None:
            # the id has not begun a transaction yet (the producer starts it lazily): the
            # broker's own placement rule says which broker will coordinate it
            coordinator = leaders[coordinator_partition(tid, len(leaders))]
        if coordinator == group_node:
            return group_node
        names = (f"{k.prefix}-o{attempt}-{j}" for j in range(100_000))
        candidate = next(
            name
            for name in names
            if leaders[coordinator_partition(k.transactional_id(name), len(leaders))] == group_node
        )
        k.orch.send_signal(signal.SIGTERM)
        try:
            k.orch.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the orchestrator ignored SIGTERM for 30s (cluster healthy): {_tail(k.orch)}"
            )
        removed = remove_static_member(k.bootstrap, k.cluster.libs_dir, group, k.instance_id)
        assert removed, f"the stopped orchestrator {k.instance_id} was no static member of {group}"
        k.instance_id = candidate
        k.orchestrator = _start_orchestrator(k, candidate)
    pytest.fail(f"coordinators did not coincide after {RESTARTS_TO_COINCIDE} restarts")


def worker_coordinator(k: Keel) -> int:
    group = f"{k.prefix}.workers"
    return wait_until(
        lambda: group_coordinator(k.bootstrap, group), 60, f"the coordinator of {group}"
    )


def active_controller(k: Keel) -> int:
    controller: int = wait_until(
        lambda: cluster_roles(k.bootstrap, k.cluster.libs_dir).controller, 60, "the controller"
    )
    return controller


# ---------------------------------------------------------------------------- rounds


def await_batch(k: Keel, what: str) -> None:
    """Every workflow started so far completes within the bound, both services alive."""
    deadline = time.monotonic() + COMPLETE_WITHIN_S
    while True:
        for name, proc in (("orchestrator", k.orch), ("worker", k.worker)):
            if proc.poll() is not None:
                pytest.fail(
                    f"{what}: the {name} exited with code {proc.returncode} "
                    f"({k.completed()}/{k.started} completed): {_tail(proc)}"
                )
        if k.completed() >= k.started:
            return
        if time.monotonic() > deadline:
            by_wf = histories(k.settings)
            terminal = sum(isinstance(ev[-1].payload, WorkflowCompleted) for ev in by_wf.values())
            pytest.fail(
                f"{what}: stalled, {k.completed()}/{k.started} completed in the read model and "
                f"{terminal} in the event store after {COMPLETE_WITHIN_S:.0f}s; orchestrator "
                f"{'alive' if k.orch.poll() is None else 'exited'}: {_tail(k.orch)}"
            )
        time.sleep(0.5)


def start_batch(k: Keel, label: str) -> None:
    runs = [(f"{label}-{i}", {"n": i}) for i in range(BATCH)]
    k.client.start_many(WORKFLOW, runs)  # type: ignore[attr-defined]
    k.started += BATCH


def kill_round(k: Keel, label: str, target: Callable[[Keel], int]) -> int:
    """Find the broker, start a batch, SIGKILL the broker mid-batch, await the batch, heal.

    The kill comes as soon as the read model shows the batch running. (Waiting for its
    first completion instead could miss the batch: its runs move in step, so they tend to
    finish within one projector batch, and it once found all 300 done.)
    """
    node = target(k)
    start_batch(k, label)
    wait_until(lambda: k.running() > 0, 60, f"{label}: the batch running")
    in_flight = k.started - k.completed()
    k.cluster.kill_broker(node)
    await_batch(k, f"{label} (broker {node} killed with {in_flight} in flight)")
    assert k.orch.poll() is None and k.worker.poll() is None
    heal(k.cluster, k.topics())
    return in_flight


def assert_clean_histories(k: Keel) -> None:
    by_wf = histories(k.settings, expect_events=k.started)
    assert len(by_wf) == k.started
    for wf, events in by_wf.items():
        assert_sound_history(wf, events)
        assert isinstance(events[-1].payload, WorkflowCompleted), f"{wf}: {events[-1].type}"
        n = int(wf.rsplit("-", 1)[1])
        assert json.loads(events[-1].payload.output_json) == {"n": expected_output(n)}, wf


# ---------------------------------------------------------------------------- tests


def test_sigkill_of_the_orchestrators_transaction_and_group_coordinator(keel: Keel):
    in_flight = []
    for kill in range(COORDINATOR_KILLS):
        in_flight.append(kill_round(keel, f"coord{kill}", orchestrator_coordinator))
    assert all(n > 0 for n in in_flight), in_flight
    assert_clean_histories(keel)


def test_sigkill_of_the_workers_group_coordinator(keel: Keel):
    assert kill_round(keel, "wcoord", worker_coordinator) > 0
    assert_clean_histories(keel)


def test_sigkill_of_the_active_controller(keel: Keel):
    assert kill_round(keel, "ctrl", active_controller) > 0
    assert_clean_histories(keel)


def test_a_restarted_broker_rejoins_the_isr_and_a_further_batch_completes(keel: Keel):
    events = f"{keel.prefix}.events"
    leaders = [p.leader for p in replicas(keel.bootstrap, [events])]
    node = max(set(leaders), key=leaders.count)
    start_batch(keel, "outage")
    keel.cluster.kill_broker(node)
    await_batch(keel, f"outage (broker {node} down)")
    shrunk = wait_until(lambda: under_replicated(keel.bootstrap, [events]), 60, "the ISR to shrink")
    assert all(node not in p.isr and node in p.replicas for p in shrunk)

    heal(keel.cluster, keel.topics())
    healed = replicas(keel.bootstrap, keel.topics())
    assert all(node in p.isr and set(p.isr) == set(p.replicas) for p in healed)
    assert all(len(p.replicas) == 3 for p in healed)
    start_batch(keel, "after")
    await_batch(keel, f"the batch after broker {node} came back")
    assert keel.orch.poll() is None and keel.worker.poll() is None
    assert_clean_histories(keel)
