"""A local Redis Sentinel group: one master, two replicas and three sentinels on loopback,
from Debian's ``redis-server`` (a sentinel is ``redis-server sentinel.conf --sentinel``).

For tests and a laptop: the fault suite kills the master and watches Sentinel promote a
replica (tests/fault/test_redis_failover.py). Everything lives under one directory: each
node's data and log, each sentinel's configuration (which the sentinels rewrite as they
learn the group) and ``group.json``, the PIDs. Processes are stopped by those PIDs, never
by name.

The group fails over fast on purpose: a sentinel calls the master down after
``down_after_ms`` (1 s here; Redis's default is 30 s) without an answer, and two of the
three must agree (the quorum) before one of them promotes a replica.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

# the local stack's process handling (spawn, PID check, stop) serves this group too
from ops.local import (
    InfraError,
    LocalStack,
    ProcessRecord,
    _last_line,
    _private_dir,
    _terminate_all,
    port_in_use,
    require_program,
)

__all__ = ["NodeRole", "SentinelGroup"]

#: The master's name in the sentinels' configuration (the URL's service).
SERVICE = "keel"
#: Sentinels that must agree that the master is down before a failover starts.
QUORUM = 2


class NodeRole(StrEnum):
    """A process of the group (``ProcessRecord.role``)."""

    DATA = "redis"
    SENTINEL = "sentinel"


@dataclass(frozen=True)
class GroupLayout:
    """Which ports the group takes: data nodes from ``first_port`` (the first starts as
    master), sentinels from ``first_port + 10``."""

    first_port: int
    replicas: int = 2
    sentinels: int = 3

    @property
    def data_ports(self) -> list[int]:
        return [self.first_port + i for i in range(self.replicas + 1)]

    @property
    def sentinel_ports(self) -> list[int]:
        return [self.first_port + 10 + i for i in range(self.sentinels)]


class SentinelGroup:
    """Start, inspect, break and stop one local Sentinel group."""

    def __init__(
        self,
        home: Path,
        first_port: int = 26400,
        *,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
        service: str = SERVICE,
    ) -> None:
        self.home = home
        self.layout = GroupLayout(first_port)
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.service = service
        self.registry = home / "group.json"

    @property
    def url(self) -> str:
        """Keel's URL of the group: its sentinels and service, database 0."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.layout.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    # ------------------------------------------------------------------ lifecycle
    def up(self, timeout_s: float = 60.0) -> None:
        """Start the whole group afresh (what an earlier run left is stopped first) and
        return once every sentinel knows the master, both replicas and the other sentinels."""
        self.down()
        redis_server = require_program("redis-server")
        ports = self.layout.data_ports + self.layout.sentinel_ports
        busy = [p for p in ports if port_in_use(p)]
        if busy:
            raise InfraError(f"port(s) {', '.join(map(str, busy))} already in use")
        _private_dir(self.home)
        started: list[ProcessRecord] = []
        try:
            master = self.layout.data_ports[0]
            for port in self.layout.data_ports:
                started.append(
                    self._start_node(redis_server, port, None if port == master else master)
                )
                self._save(started)
            # sentinels learn the replicas from the master's INFO, every 10 s once settled:
            # they start only after both replicas are attached, so their first INFO has them
            self._wait_attached(master, timeout_s)
            for port in self.layout.sentinel_ports:
                started.append(self._start_sentinel(redis_server, port, master))
                self._save(started)
            self._wait_settled(timeout_s)
        except BaseException:
            stop_recorded(self.registry, started, timeout_s=10)
            raise

    def down(self, timeout_s: float = 10.0) -> list[ProcessRecord]:
        """Stop every process of the group this directory recorded (by PID), forget them."""
        stopped = [r for r in self._records() if _alive(r)]
        stop_recorded(self.registry, stopped, timeout_s)
        return stopped

    def records(self) -> list[ProcessRecord]:
        return self._records()

    # ------------------------------------------------------------------ inspection
    def master_port(self) -> int | None:
        """The master's port as most sentinels name it (None when none answers)."""
        named = [p for p in (self._ask(s) for s in self.layout.sentinel_ports) if p is not None]
        return max(set(named), key=named.count) if named else None

    def where(self) -> str:
        return f"master on port {self.master_port()}"

    def wait_failover(self, old_port: int, timeout_s: float = 30.0) -> int:
        """Wait until every sentinel names a new master and it answers as one; its port."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            named = {self._ask(s) for s in self.layout.sentinel_ports}
            if len(named) == 1 and (port := named.pop()) not in (None, old_port):
                assert port is not None
                if self._role(port) == "master":
                    return port
            time.sleep(0.05)
        raise InfraError(f"no sentinel-promoted master after {timeout_s:.0f}s")

    def node(self, port: int):  # -> redis.Redis
        """A plain client of one data node (to look at a replica, or the master itself)."""
        return node_client(port)

    # ------------------------------------------------------------------ fault injection
    def kill_node(self, port: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """Send ``sig`` to the data node on ``port`` and wait until it is gone; its PID."""
        return kill_recorded(self._records(), port, sig)

    # ------------------------------------------------------------------ internals
    def _start_node(self, redis_server: str, port: int, master: int | None) -> ProcessRecord:
        ndir = _private_dir(self.home / f"redis-{port}")
        cmd = [
            redis_server, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(ndir),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
            "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if master is not None:
            cmd += ["--replicaof", "127.0.0.1", str(master)]
        return _spawn(NodeRole.DATA, cmd, ndir / "redis.log", port)

    def _start_sentinel(self, redis_server: str, port: int, master: int) -> ProcessRecord:
        sdir = _private_dir(self.home / f"sentinel-{port}")
        conf = sdir / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {sdir}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {master} {QUORUM}\n"
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {self.service} 1\n"
        )
        cmd = [redis_server, str(conf), "--sentinel"]
        return _spawn(NodeRole.SENTINEL, cmd, sdir / "sentinel.log", port)

    def _wait_attached(self, master: int, timeout_s: float) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with self.node(master) as client:
                    info = client.info("replication")
                online = [
                    v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                ]
                if sum(1 for v in online if v.get("state") == "online") == self.layout.replicas:
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise InfraError(f"the replicas did not attach to the master in {timeout_s:.0f}s")
            time.sleep(0.1)

    def _wait_settled(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        want_replicas, want_peers = self.layout.replicas, self.layout.sentinels - 1
        while True:
            for record in self._records():
                if not _alive(record):
                    raise InfraError(
                        f"{record.role} on port {record.port} (pid {record.pid}) exited during "
                        f"start: {_last_line(Path(record.log))}"
                    )
            seen = [self._view(p) for p in self.layout.sentinel_ports]
            if all(v == (want_replicas, want_peers) for v in seen):
                return
            if time.monotonic() > deadline:
                raise InfraError(
                    f"the sentinel group did not settle in {timeout_s:.0f}s: (replicas, other "
                    f"sentinels) seen by each sentinel: {seen}"
                )
            time.sleep(0.2)

    def _view(self, sentinel_port: int) -> tuple[int, int] | None:
        """(replicas, other sentinels) one sentinel knows of the master, or None."""
        import redis

        try:
            with redis.Redis(port=sentinel_port, socket_timeout=1, decode_responses=True) as s:
                state = s.sentinel_master(self.service)
        except redis.RedisError:
            return None
        return int(state["num-slaves"]), int(state["num-other-sentinels"])

    def _ask(self, sentinel_port: int) -> int | None:
        import redis

        try:
            with redis.Redis(port=sentinel_port, socket_timeout=1, decode_responses=True) as s:
                address = s.sentinel_get_master_addr_by_name(self.service)
        except redis.RedisError:
            return None
        return int(address[1]) if address else None

    def _role(self, port: int) -> str | None:
        return role_of(port)

    def _records(self) -> list[ProcessRecord]:
        return read_registry(self.registry)

    def _save(self, records: list[ProcessRecord]) -> None:
        write_registry(self.registry, records)


def node_client(port: int):  # -> redis.Redis
    """A plain client of one local node (it follows no redirect, asks no sentinel)."""
    import redis

    return redis.Redis(
        host="127.0.0.1", port=port, decode_responses=True, socket_timeout=2,
        socket_connect_timeout=2,
    )  # fmt: skip


def role_of(port: int) -> str | None:
    """``master`` or ``slave`` as the node on ``port`` says (None when it does not answer)."""
    import redis

    try:
        with node_client(port) as client:
            return str(client.role()[0])
    except redis.RedisError:
        return None


def kill_recorded(records: list[ProcessRecord], port: int, sig: signal.Signals) -> int:
    """Send ``sig`` to the recorded data node on ``port`` and wait until it is gone; its PID."""
    record = next(r for r in records if r.role == NodeRole.DATA and r.port == port)
    os.kill(record.pid, sig)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(record.pid).wait(timeout=30)
    return record.pid


def stop_recorded(registry: Path, records: list[ProcessRecord], timeout_s: float) -> None:
    """Stop ``records`` by PID and remove the registry file that recorded them."""
    _terminate_all(records, timeout_s)
    with contextlib.suppress(FileNotFoundError):
        registry.unlink()


def read_registry(path: Path) -> list[ProcessRecord]:
    """The processes a group's registry file recorded (none when there is no file)."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [ProcessRecord(**p) for p in data["processes"]]


def write_registry(path: Path, records: list[ProcessRecord]) -> None:
    """Record a group's processes (replacing the file whole, so a reader never sees half)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"processes": [asdict(r) for r in records]}, indent=2))
    tmp.replace(path)


def _spawn(role: NodeRole, cmd: list[str], log: Path, port: int) -> ProcessRecord:
    return LocalStack._spawn(str(role), cmd, log, port, None)


def _alive(record: ProcessRecord) -> bool:
    return LocalStack._alive(record)


def group_main(argv: list[str] | None, prog: str, home: str, port: int, make: Any) -> int:
    """``python -m <prog> up|down|status [--home DIR] [--port N]``: a local group on a
    laptop, made by ``make(home, first_port)``; ``up`` prints the ``KEEL_REDIS_URL`` to
    use, ``status`` the processes running and the group's ``where()``."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {prog}")
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--home", type=Path, default=Path(".keel") / home)
    parser.add_argument("--port", type=int, default=port, help=f"first port ({port})")
    args = parser.parse_args(argv)
    group = make(args.home.resolve(), args.port)
    if args.action == "up":
        group.up()
        print(f"KEEL_REDIS_URL={group.url}")
    elif args.action == "down":
        print(f"stopped {len(group.down())} processes")
    else:
        alive = [r for r in group.records() if _alive(r)]
        print(f"{len(alive)} processes running; {group.where()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ops.redis_ha.redis_sentinel up|down|status``: the group on a laptop."""
    return group_main(argv, "ops.redis_ha.redis_sentinel", "sentinel-group", 26400, SentinelGroup)


if __name__ == "__main__":
    raise SystemExit(main())
