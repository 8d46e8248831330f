"""A local Redis Cluster: three masters and three replicas on loopback, from Debian's
``redis-server`` (``--cluster-enabled yes``) joined by ``redis-cli --cluster create``.

For tests and a laptop, as ops/redis_ha/redis_sentinel.py is for Sentinel: the integration
suite runs Keel against it (tests/integration/test_redis_cluster.py) and the fault suite kills the
master of a busy slot and watches its replica take over (tests/fault/
test_redis_cluster_failover.py). Everything lives under one directory: each node's data,
``nodes.conf`` and log, and ``cluster.json``, the PIDs. Processes are stopped by those
PIDs, never by name.

Node ``i`` listens on ``first_port + i`` and gossips on ``first_port + BUS_OFFSET + i`` (Redis's
default bus port, ``port + 10000``, would leave the port range a test was given). The
cluster fails over fast on purpose: a master that does not answer for ``node_timeout_ms``
(1 s here; Redis's default is 15 s) is marked failed by the other masters and its replica
promotes itself.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ops.local import (
    InfraError,
    ProcessRecord,
    _last_line,
    _private_dir,
    port_in_use,
    require_program,
)
from ops.redis_ha.redis_sentinel import (
    NodeRole,
    _alive,
    _spawn,
    group_main,
    kill_recorded,
    node_client,
    read_registry,
    role_of,
    stop_recorded,
    write_registry,
)

__all__ = ["BUS_OFFSET", "RedisClusterGroup"]

#: How far above its client port a node's cluster bus listens.
BUS_OFFSET = 50
#: Masters and replicas per master (``redis-cli --cluster create --cluster-replicas``).
MASTERS = 3
REPLICAS_PER_MASTER = 1
#: Hash slots of a Redis Cluster.
SLOTS = 16_384


class RedisClusterGroup:
    """Start, inspect, break and stop one local Redis Cluster."""

    def __init__(self, home: Path, first_port: int = 30101, *, node_timeout_ms: int = 1000) -> None:
        self.home = home
        self.first_port = first_port
        self.node_timeout_ms = node_timeout_ms
        self.registry = home / "cluster.json"

    @property
    def ports(self) -> list[int]:
        return [self.first_port + i for i in range(MASTERS * (1 + REPLICAS_PER_MASTER))]

    @property
    def url(self) -> str:
        """Keel's URL of the cluster: every node, so the client finds the map through any."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/"

    # ------------------------------------------------------------------ lifecycle
    def up(self, timeout_s: float = 60.0) -> None:
        """Start the whole cluster afresh (what an earlier run left is stopped first) and
        return once every node reports ``cluster_state:ok`` with three masters and each
        master's replica attached."""
        self.down()
        redis_server = require_program("redis-server")
        redis_cli = require_program("redis-cli")
        wanted = self.ports + [p + BUS_OFFSET for p in self.ports]
        busy = [p for p in wanted if port_in_use(p)]
        if busy:
            raise InfraError(f"port(s) {', '.join(map(str, busy))} already in use")
        _private_dir(self.home)
        started: list[ProcessRecord] = []
        try:
            for port in self.ports:
                started.append(self._start_node(redis_server, port))
                write_registry(self.registry, started)
            self._wait_answering(timeout_s)
            create = [
                redis_cli, "--cluster", "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas", str(REPLICAS_PER_MASTER), "--cluster-yes",
            ]  # fmt: skip
            done = subprocess.run(
                create, capture_output=True, text=True, timeout=timeout_s, check=False
            )
            if done.returncode != 0:
                raise InfraError(f"redis-cli --cluster create failed: {done.stdout[-800:]}")
            self._wait_settled(timeout_s)
        except BaseException:
            stop_recorded(self.registry, started, timeout_s=10)
            raise

    def down(self, timeout_s: float = 10.0) -> list[ProcessRecord]:
        """Stop every node this directory recorded (by PID), forget them."""
        stopped = [r for r in read_registry(self.registry) if _alive(r)]
        stop_recorded(self.registry, stopped, timeout_s)
        return stopped

    def records(self) -> list[ProcessRecord]:
        return read_registry(self.registry)

    # ------------------------------------------------------------------ inspection
    def node(self, port: int) -> Any:  # -> redis.Redis
        """A plain client of one node (not the cluster client: it follows no redirect)."""
        return node_client(port)

    def where(self) -> str:
        return f"slot owners {self.slot_owners()}"

    def slot_owners(self) -> dict[int, tuple[int, list[int]]] | None:
        """Each slot range's first slot -> (master's port, replicas' ports), as the first node
        that answers sees it; None when none answers."""
        import redis

        for port in self.ports:
            try:
                with self.node(port) as client:
                    ranges = client.execute_command("CLUSTER SLOTS")
            except redis.RedisError:
                continue
            return {
                int(r[0]): (int(r[2][1]), [int(n[1]) for n in r[3:]])
                for r in ranges  # [start, end, [host, port, id], replicas...]
            }
        return None

    def master_of(self, key: str) -> int:
        """The port of the master that holds ``key``'s slot now."""
        return self.owners_of(key)[0]

    def owners_of(self, key: str) -> tuple[int, list[int]]:
        """The ports of the master and the replicas of ``key``'s slot, as the first node
        that answers sees them now."""
        import redis
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        for port in self.ports:
            with contextlib.suppress(redis.RedisError), self.node(port) as client:
                for start, end, owner, *replicas in client.execute_command("CLUSTER SLOTS"):
                    if int(start) <= slot <= int(end):
                        return int(owner[1]), [int(r[1]) for r in replicas]
        raise InfraError(f"no node of the cluster names the master of slot {slot}")

    def wait_failover(self, old_port: int, key: str, timeout_s: float = 30.0) -> int:
        """Wait until the slot of ``key`` has a master other than ``old_port`` that answers
        as one, and every live node reports ``cluster_state:ok``; the new master's port."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(InfraError):
                port = self.master_of(key)
                if port != old_port and role_of(port) == "master" and self._all_ok(old_port):
                    return port
            time.sleep(0.05)
        raise InfraError(f"no replica took over the slot of {key!r} after {timeout_s:.0f}s")

    # ------------------------------------------------------------------ fault injection
    def kill_node(self, port: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """Send ``sig`` to the node on ``port`` and wait until it is gone; its PID."""
        return kill_recorded(read_registry(self.registry), port, sig)

    # ------------------------------------------------------------------ internals
    def _start_node(self, redis_server: str, port: int) -> ProcessRecord:
        ndir = _private_dir(self.home / f"redis-{port}")
        # a fresh cluster: a node that remembers an earlier one refuses to join this one
        (ndir / "nodes.conf").unlink(missing_ok=True)
        cmd = [
            redis_server, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(ndir),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
            "--cluster-enabled", "yes", "--cluster-config-file", str(ndir / "nodes.conf"),
            "--cluster-port", str(port + BUS_OFFSET),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        return _spawn(NodeRole.DATA, cmd, ndir / "redis.log", port)

    def _wait_answering(self, timeout_s: float) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        pending = list(self.ports)
        while pending:
            self._check_alive()
            with contextlib.suppress(redis.RedisError), self.node(pending[0]) as client:
                client.ping()
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise InfraError(f"node {pending[0]} did not answer in {timeout_s:.0f}s")
            time.sleep(0.05)

    def _wait_settled(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            owners = self.slot_owners() or {}
            covered = sum(1 for _ in owners) == MASTERS
            attached = all(len(r) == REPLICAS_PER_MASTER for _, r in owners.values())
            if covered and attached and self._all_ok(None) and self._replicas_online():
                return
            if time.monotonic() > deadline:
                raise InfraError(
                    f"the cluster did not settle in {timeout_s:.0f}s: slot owners {owners}"
                )
            time.sleep(0.2)

    def _all_ok(self, skip: int | None) -> bool:
        """Every node but ``skip`` answers ``cluster_state:ok``."""
        import redis

        for port in self.ports:
            if port == skip:
                continue
            try:
                with self.node(port) as client:
                    if client.cluster("info").get("cluster_state") != "ok":
                        return False
            except redis.RedisError:
                return False
        return True

    def _replicas_online(self) -> bool:
        import redis

        try:
            online = 0
            for port in self.ports:
                with self.node(port) as client:
                    info = client.info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") == "up":
                    online += 1
        except redis.RedisError:
            return False
        return online == MASTERS * REPLICAS_PER_MASTER

    def _check_alive(self) -> None:
        for record in read_registry(self.registry):
            if not _alive(record):
                raise InfraError(
                    f"redis on port {record.port} (pid {record.pid}) exited during start: "
                    f"{_last_line(Path(record.log))}"
                )


def main(argv: list[str] | None = None) -> int:
    """``python -m ops.redis_ha.redis_cluster up|down|status``: the cluster on a laptop."""
    return group_main(argv, "ops.redis_ha.redis_cluster", "redis-cluster", 30101, RedisClusterGroup)


if __name__ == "__main__":
    raise SystemExit(main())
