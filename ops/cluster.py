"""Who does what in a Kafka cluster: the controller, coordinators, in-sync replicas.

Used by the fault tests to aim a broker kill at the role that matters, and by an
operator to see where a Keel process's transactions and consumer group live. The
consumer-group coordinator and partition replicas come from the Python admin client;
the transaction coordinator and the KRaft quorum leader need DescribeTransactions and
DescribeQuorum, which only the Java Admin API has, so ``ops/kafka/ClusterAdmin.java``
runs with the broker's own jars; it also removes a static member from its group (a
LeaveGroup by instance id, which the Python client cannot send either).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from orchestrator.domain.model.errors import KeelError

ADMIN_SOURCE = Path(__file__).resolve().parent / "kafka" / "ClusterAdmin.java"

#: Kafka's internal topics holding the group and transaction coordinators' state.
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")

_quiet = logging.getLogger("keel.ops.cluster.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class ClusterInfoError(KeelError):
    """A cluster role could not be read; the message says which and why."""


@dataclass
class ClusterRoles:
    controller: int | None
    voters: list[int] = field(default_factory=list)
    #: transactional id -> coordinator broker id (None: unknown id or no answer in time)
    transaction_coordinators: dict[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionReplicas:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def admin(bootstrap: str) -> AdminClient:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": _quiet,
        "socket.connection.setup.timeout.ms": 3000,
    }
    return AdminClient(config)


def _helper_command(libs: Path) -> list[str]:
    """How to run ``ClusterAdmin``: compiled once per source next to the jars.

    ``java File.java`` would compile on every call, ~10 s here against the broker's
    classpath; the compiled class starts in ~2 s.
    """
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        raise ClusterInfoError(
            "java and javac not both on PATH; the Admin API helper needs a JDK "
            "(Debian: openjdk-17-jdk-headless)"
        )
    classpath = f"{libs}/*"
    digest = hashlib.sha256(ADMIN_SOURCE.read_bytes()).hexdigest()[:16]
    classes = libs.parent / "admin-helper" / digest
    if not (classes / "ClusterAdmin.class").is_file():
        classes.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{digest}.partial-", dir=classes.parent))
        built = subprocess.run(
            [javac, "-d", str(staging), "-cp", classpath, str(ADMIN_SOURCE)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if built.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = (built.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise ClusterInfoError(f"ClusterAdmin did not compile: {tail}")
        try:
            os.replace(staging, classes)
        except OSError:  # another process compiled the same source first
            shutil.rmtree(staging, ignore_errors=True)
    return [
        java,
        "-XX:TieredStopAtLevel=1",
        "-cp",
        f"{classes}{os.pathsep}{classpath}",
        "ClusterAdmin",
    ]


def _admin_helper(libs: Path, args: list[str], timeout_s: float) -> dict[str, Any]:
    cmd = _helper_command(libs) + args
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ClusterInfoError(
            f"ClusterAdmin {args[0]} did not answer within {timeout_s:g}s"
        ) from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ClusterInfoError(f"ClusterAdmin {args[0]} failed (exit {proc.returncode}): {tail}")
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def cluster_roles(
    bootstrap: str, libs: Path, transactional_ids: tuple[str, ...] = (), timeout_s: float = 60
) -> ClusterRoles:
    """The active controller and the coordinator of each transactional id (Java Admin API)."""
    args = ["roles", bootstrap]
    for tid in transactional_ids:
        args += ["--transactional-id", tid]
    data = _admin_helper(libs, args, timeout_s)
    return ClusterRoles(
        controller=data["controller"],
        voters=list(data["voters"] or []),
        transaction_coordinators={
            tid: (role or {}).get("coordinator") for tid, role in data["transactions"].items()
        },
    )


def remove_static_member(
    bootstrap: str, libs: Path, group_id: str, instance_id: str, timeout_s: float = 60
) -> bool:
    """Take a stopped static member (``group.instance.id``) out of its group now.

    A static member does not leave its group when it stops, so that a restart under the
    same id takes its partitions back without a rebalance; a process that comes back
    under another id would otherwise wait out the old member's session timeout
    (docs/operations.md). False when the group has no such member.
    """
    data = _admin_helper(libs, ["remove-member", bootstrap, group_id, instance_id], timeout_s)
    return bool(data["removed"])


def lead_partition(
    bootstrap: str, libs: Path, topic: str, partition: int, broker: int, timeout_s: float = 60
) -> int:
    """Make ``broker`` the leader of ``topic[partition]`` (it must hold a replica) and
    return the leader then: the replicas reordered with ``broker`` first (no data moves),
    then a preferred-leader election. On ``__consumer_offsets`` or ``__transaction_state``
    (partition by :func:`coordinator_partition`) it places a coordinator, so a fault test
    decides which roles the broker it kills holds.
    """
    args = ["lead", bootstrap, topic, str(partition), str(broker)]
    return int(_admin_helper(libs, args, timeout_s)["leader"])


def group_coordinator(bootstrap: str, group_id: str, timeout_s: float = 15) -> int | None:
    """The broker coordinating consumer group ``group_id`` (None while it has none)."""
    client = admin(bootstrap)  # must outlive the future: destroying it fails the request
    futures = client.describe_consumer_groups([group_id], request_timeout=timeout_s)
    try:
        description = futures[group_id].result(timeout=timeout_s + 5)
    except (KafkaException, TimeoutError):
        return None
    node = description.coordinator
    return node.id if node is not None and node.id >= 0 else None


def replicas(bootstrap: str, topics: list[str], timeout_s: float = 15) -> list[PartitionReplicas]:
    """Leader, replicas and in-sync replicas of every partition of ``topics``."""
    metadata = admin(bootstrap).list_topics(timeout=timeout_s)
    found = []
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            raise ClusterInfoError(f"topic {name} is not in the cluster's metadata")
        for p in sorted(topic.partitions.values(), key=lambda p: p.id):
            found.append(PartitionReplicas(name, p.id, p.leader, tuple(p.replicas), tuple(p.isrs)))
    return found


def under_replicated(bootstrap: str, topics: list[str]) -> list[PartitionReplicas]:
    """Partitions whose in-sync set is smaller than their replica set (empty: healed)."""
    return [p for p in replicas(bootstrap, topics) if set(p.isr) != set(p.replicas)]


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` / ``__transaction_state`` that ``key`` maps to.

    The broker's rule: ``Utils.abs(key.hashCode()) % partitions`` with Java's String hash
    over UTF-16 code units (``Utils.abs`` maps Integer.MIN_VALUE to 0); the coordinator is
    that partition's leader. Lets a test pick a transactional id whose coordinator is a
    given broker without trial and error.
    """
    h = 0
    raw = key.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions
