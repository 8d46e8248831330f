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
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import pytest

from ops.cluster import (
    cluster_roles,
    coordinator_partition,
    group_coordinator,
    lead_partition,
    replicas,
    under_replicated,
)
from ops.local import LocalStack
from orchestrator.client.client import KeelClient
from orchestrator.config.settings import Settings
from orchestrator.domain.model.messages import WorkflowCompleted
from tests.fault.conftest import heal
from tests.support import (
    Services,
    assert_sound_history,
    histories,
    longest_stall_s,
    wait_until,
)

BATCH = 300
WORKFLOW = "three_step"
#: Bound on a batch's completion after a kill: failover, the transaction timeout (10 s)
#: of anything the dead broker held, and the batch itself, with room to spare.
COMPLETE_WITHIN_S = 120.0
#: The longest a batch may go without a committed event after a broker's SIGKILL
#: (docs/operations.md, "Losing a broker"): the cluster's failure detection and
#: leader election, then the clients' rediscovery of leaders and coordinators.
STALL_BOUND_S = 5.0
#: Where each kill round appends its measured stall as a JSON line, when set (the
#: 20-loop report of docs/operations.md is made from these).
STALL_REPORT = os.environ.get("KEEL_STALL_REPORT")
COORDINATOR_KILLS = 3


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

OFFSETS, TXN_STATE = "__consumer_offsets", "__transaction_state"


class Role(StrEnum):
    """What a broker does for the test's Keel: the roles a kill round takes away."""

    CONTROLLER = "controller"
    ORCHESTRATOR_GROUP = "orchestrator group"
    TRANSACTIONS = "transactions"
    WORKERS_GROUP = "workers group"


def active_controller(k: Keel) -> int:
    controller: int = wait_until(
        lambda: cluster_roles(k.bootstrap, k.cluster.libs_dir).controller, 60, "the controller"
    )
    return controller


def roles_of(k: Keel, node: int) -> set[Role]:
    """The roles ``node`` holds now, read from the cluster."""
    tid = k.transactional_id()
    found = cluster_roles(k.bootstrap, k.cluster.libs_dir, (tid,))
    holders = {
        Role.CONTROLLER: found.controller,
        Role.TRANSACTIONS: found.transaction_coordinators.get(tid),
        Role.ORCHESTRATOR_GROUP: group_coordinator(k.bootstrap, f"{k.prefix}.orchestrator"),
        Role.WORKERS_GROUP: group_coordinator(k.bootstrap, f"{k.prefix}.workers"),
    }
    return {role for role, holder in holders.items() if holder == node}


def place(k: Keel, placement: dict[Role, int]) -> None:
    """Move the coordinators to the brokers ``placement`` names (the controller stays
    where it is): each one's ``__consumer_offsets`` / ``__transaction_state`` partition gets
    that broker as its leader. Then one run goes through every hop, so the clients have
    found the moved coordinators before the batch starts."""
    keys = {
        Role.ORCHESTRATOR_GROUP: (f"{k.prefix}.orchestrator", OFFSETS),
        Role.WORKERS_GROUP: (f"{k.prefix}.workers", OFFSETS),
        Role.TRANSACTIONS: (k.transactional_id(), TXN_STATE),
    }
    counts = {p.topic: 0 for p in replicas(k.bootstrap, [OFFSETS, TXN_STATE])}
    for p in replicas(k.bootstrap, [OFFSETS, TXN_STATE]):
        counts[p.topic] += 1
    for role, broker in placement.items():
        key, topic = keys[role]
        partition = coordinator_partition(key, counts[topic])
        leader = lead_partition(k.bootstrap, k.cluster.libs_dir, topic, partition, broker)
        assert leader == broker, f"{role} stayed on broker {leader}, not {broker}"
    k.started += 1
    k.client.start_many(WORKFLOW, [(f"settle-{k.started}", {"n": k.started})])  # type: ignore[attr-defined]
    wait_until(lambda: k.completed() >= k.started, 90, "a run after moving the coordinators")


def brokers(k: Keel, first: int) -> list[int]:
    """Every broker of the cluster, ``first`` first."""
    return [first] + [b for b in range(1, k.cluster.brokers + 1) if b != first]


def controller_alone(k: Keel) -> tuple[int, set[Role]]:
    """The active controller, every coordinator of the test's Keel elsewhere."""
    ctrl, other, _ = brokers(k, active_controller(k))
    every = (Role.ORCHESTRATOR_GROUP, Role.TRANSACTIONS, Role.WORKERS_GROUP)
    place(k, dict.fromkeys(every, other))
    return ctrl, {Role.CONTROLLER}


def orchestrator_coordinators_alone(k: Keel) -> tuple[int, set[Role]]:
    """A broker that is not the controller, coordinating the orchestrator's group and its
    transactions (the workers' group on the third broker)."""
    _, target, third = brokers(k, active_controller(k))
    place(
        k,
        {Role.ORCHESTRATOR_GROUP: target, Role.TRANSACTIONS: target, Role.WORKERS_GROUP: third},
    )
    return target, {Role.ORCHESTRATOR_GROUP, Role.TRANSACTIONS}


def controller_and_orchestrator_coordinators(k: Keel) -> tuple[int, set[Role]]:
    """The active controller, coordinating the orchestrator's group and transactions too."""
    ctrl, other, _ = brokers(k, active_controller(k))
    place(k, {Role.ORCHESTRATOR_GROUP: ctrl, Role.TRANSACTIONS: ctrl, Role.WORKERS_GROUP: other})
    return ctrl, {Role.CONTROLLER, Role.ORCHESTRATOR_GROUP, Role.TRANSACTIONS}


def workers_coordinator_alone(k: Keel) -> tuple[int, set[Role]]:
    """A broker that is not the controller, coordinating the workers' group only."""
    _, target, third = brokers(k, active_controller(k))
    place(
        k,
        {Role.WORKERS_GROUP: target, Role.ORCHESTRATOR_GROUP: third, Role.TRANSACTIONS: third},
    )
    return target, {Role.WORKERS_GROUP}


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


def placed(
    k: Keel, label: str, target: Callable[[Keel], tuple[int, set[Role]]]
) -> tuple[int, set[Role]]:
    """Place the round's roles and read them back: (the broker, the roles it holds). The KRaft controller can move on its own while the coordinators are
    placed (an election after 600 ms without the leader's fetch, e.g. on a loaded
    machine), so a placement the read-back disproves is made again, up to three times;
    the round never kills a broker whose roles differ from the round's."""
    for _ in range(3):
        node, expected = target(k)
        held = roles_of(k, node)
        if held == expected:
            break
    assert held == expected, f"{label}: broker {node} holds {sorted(held)}, not {sorted(expected)}"
    return node, held


def kill_round(k: Keel, label: str, target: Callable[[Keel], tuple[int, set[Role]]]) -> int:
    """Place the roles, start a batch, SIGKILL the broker holding exactly the roles the
    round is about mid-batch, await the batch, heal; the batch's longest stall after the
    kill must stay within ``STALL_BOUND_S``.

    The kill comes as soon as the read model shows the batch running. (Waiting for its
    first completion instead could miss the batch: its runs move in step, so they tend to
    finish within one projector batch, and it once found all 300 done.)
    """
    node, held = placed(k, label, target)
    start_batch(k, label)
    wait_until(lambda: k.running() > 0, 60, f"{label}: the batch running")
    in_flight = k.started - k.completed()
    killed_at_ms = int(time.time() * 1000)
    k.cluster.kill_broker(node)
    what = f"{label} (broker {node}, {' + '.join(sorted(held))}, killed with {in_flight} in flight)"
    await_batch(k, what)
    assert k.orch.poll() is None and k.worker.poll() is None
    by_wf = histories(k.settings, expect_events=0)
    stall, began = longest_stall_s(by_wf, f"{label}-", killed_at_ms)
    print(f"{what}: longest stall {stall:.2f}s, from {began:.2f}s after the kill")
    if STALL_REPORT:
        with open(STALL_REPORT, "a") as out:
            entry = {"round": label, "broker": node, "roles": sorted(held), "in_flight": in_flight}
            out.write(json.dumps({**entry, "stall_s": stall, "began_s": began}) + "\n")
    heal(k.cluster, k.topics())
    assert stall <= STALL_BOUND_S, (
        f"{what}: no event committed for {stall:.2f}s from {began:.2f}s after the kill "
        f"(bound {STALL_BOUND_S:g}s): {_tail(k.orch)}"
    )
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
        in_flight.append(kill_round(keel, f"coord{kill}", orchestrator_coordinators_alone))
    assert all(n > 0 for n in in_flight), in_flight
    assert_clean_histories(keel)


def test_sigkill_of_the_workers_group_coordinator(keel: Keel):
    assert kill_round(keel, "wcoord", workers_coordinator_alone) > 0
    assert_clean_histories(keel)


def test_sigkill_of_the_active_controller(keel: Keel):
    assert kill_round(keel, "ctrl", controller_alone) > 0
    assert_clean_histories(keel)


def test_sigkill_of_the_controller_that_coordinates_the_orchestrator(keel: Keel):
    assert kill_round(keel, "both", controller_and_orchestrator_coordinators) > 0
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
