"""A local Kafka (KRaft) cluster and Redis server, run as plain processes.

No Docker engine is assumed: the broker jars come once from Maven Central through
``ops/kafka/pom.xml`` and run with ``java``; Redis is Debian's ``redis-server``.
Everything a stack owns (jars, data, logs, the PID registry) lives under
``KEEL_HOME``; processes are stopped by the PIDs recorded there, never by name.
The same code serves ``keel infra``, the test fixtures and CI.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from orchestrator.config.settings import Settings, broker_properties, private_dir
from orchestrator.domain.model.errors import KeelError

OPS_DIR = Path(__file__).resolve().parent
POM = OPS_DIR / "kafka" / "pom.xml"
LOG4J_CONFIG = OPS_DIR / "kafka" / "log4j2.properties"

INSTALL_HINTS = {
    "java": "apt-get install -y openjdk-17-jre-headless",
    "mvn": "apt-get install -y maven",
    "redis-server": "apt-get install -y redis-server",
}

_quiet_client_log = logging.getLogger("keel.ops.librdkafka")
_quiet_client_log.addHandler(logging.NullHandler())
_quiet_client_log.propagate = False


#: server.properties the local stack's layout depends on: never taken from the user.
#: How fast a cluster of several brokers notices that one died (docs/operations.md, "Losing
#: a broker"). Until the controller fences a dead broker, its partitions keep it as their
#: leader and FindCoordinator keeps naming it as coordinator: every transaction that touches
#: it waits. Kafka's defaults (a 9 s broker session, a 2 s controller fetch timeout and 1 s
#: elections) made that 11-12 s when the active controller died; these make it ~2 s. The
#: price: a broker that cannot heartbeat for 1 s (a long GC pause) is fenced and its
#: leaderships move, then return once it heartbeats again. ``KEEL_KAFKA_BROKER_PROPERTIES``
#: may set other values.
FAILOVER_PROPERTIES: dict[str, int] = {
    # ``down`` stops every node at once, and each broker's controlled shutdown needs a
    # controller quorum to approve it: after a first "still waiting" answer a broker asks
    # again only every heartbeat interval (2 s by default), by which time its peers'
    # controllers may have left. Every 200 ms gets every approval while the quorum stands,
    # and lets a 1 s session see five heartbeats.
    "broker.heartbeat.interval.ms": 200,
    "broker.session.timeout.ms": 1000,
    # a follower that heard nothing from the active controller for 0.6 s starts an election
    "controller.quorum.fetch.timeout.ms": 600,
    "controller.quorum.election.timeout.ms": 300,
    "controller.quorum.election.backoff.max.ms": 300,
}

TOPOLOGY_PROPERTIES = frozenset(
    {
        "process.roles",
        "node.id",
        "controller.quorum.voters",
        "listeners",
        "advertised.listeners",
        "controller.listener.names",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "log.dirs",
    }
)


class InfraError(KeelError):
    """The local stack could not be brought to the requested state; the message says why."""


def require_program(name: str) -> str:
    """Path of ``name`` on PATH, or one line naming it and the command that installs it."""
    path = shutil.which(name)
    if path is None:
        raise InfraError(f"{name} not found on PATH; install it with: {INSTALL_HINTS[name]}")
    return path


@dataclass
class ProcessRecord:
    role: str
    pid: int
    port: int
    started: float
    log: str
    node_id: int | None = None


@dataclass
class ProcessStatus:
    role: str
    pid: int
    port: int
    healthy: bool
    node_id: int | None = None


@dataclass
class StackStatus:
    bootstrap_servers: str
    redis_url: str
    processes: list[ProcessStatus]
    running: bool

    @property
    def healthy(self) -> bool:
        return self.running and all(p.healthy for p in self.processes)

    def to_json(self) -> dict[str, object]:
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "redis_url": self.redis_url,
            "processes": [asdict(p) for p in self.processes],
        }


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class LocalStack:
    """One local stack: ``brokers`` KRaft nodes (broker+controller each) and one Redis.

    Node *i* (1-based) listens for clients on ``kafka_port + 2(i-1)`` and for the
    controller quorum on the port after it.
    """

    def __init__(
        self, settings: Settings, brokers: int | None = None, with_redis: bool = True
    ) -> None:
        self.settings = settings
        self.with_redis = with_redis
        self.home = settings.home.resolve()
        self.registry = self.home / "stack.json"
        recorded = self._read_registry()
        self.brokers = brokers or (recorded["brokers"] if recorded else 1)
        if self.brokers < 1:
            raise InfraError("--brokers must be at least 1")

    # ------------------------------------------------------------------ layout
    def client_port(self, node: int) -> int:
        return self.settings.kafka_port + 2 * (node - 1)

    def controller_port(self, node: int) -> int:
        return self.client_port(node) + 1

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.client_port(n)}" for n in range(1, self.brokers + 1))

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.settings.redis_port}/0"

    @property
    def libs_dir(self) -> Path:
        return (self.settings.kafka_libs or self.home / "kafka-libs").resolve()

    def node_dir(self, node: int) -> Path:
        return self.home / "kafka" / f"node-{node}"

    # ------------------------------------------------------------------ jars
    def fetch_kafka(self) -> Path:
        """Fetch the pinned broker jars from Maven Central once; later calls reuse them."""
        pom_digest = hashlib.sha256(POM.read_bytes()).hexdigest()
        marker = self.libs_dir / ".pom-sha256"
        if marker.exists() and marker.read_text().strip() == pom_digest:
            return self.libs_dir
        mvn = require_program("mvn")
        staging = self.libs_dir.with_name(f"kafka-libs.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        cmd = [
            mvn, "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            shutil.rmtree(staging, ignore_errors=True)
            raise InfraError("fetching the Kafka jars with Maven failed: " + " | ".join(tail))
        (staging / ".pom-sha256").write_text(pom_digest)
        shutil.rmtree(self.libs_dir, ignore_errors=True)
        staging.rename(self.libs_dir)
        return self.libs_dir

    # ------------------------------------------------------------------ registry
    def _read_registry(self) -> dict | None:
        try:
            return json.loads(self.registry.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _records(self) -> list[ProcessRecord]:
        data = self._read_registry()
        return [ProcessRecord(**p) for p in data["processes"]] if data else []

    def _write_registry(self, records: Iterable[ProcessRecord]) -> None:
        private_dir(self.home)
        payload = {
            "brokers": self.brokers,
            "bootstrap_servers": self.bootstrap_servers,
            "redis_url": self.redis_url,
            "processes": [asdict(r) for r in records],
        }
        tmp = self.registry.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, indent=2))
        tmp.replace(self.registry)

    @staticmethod
    def _alive(record: ProcessRecord) -> bool:
        """True when the recorded PID still names the process we started (not a reused PID)."""
        try:
            proc = psutil.Process(record.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            return abs(proc.create_time() - record.started) < 2.0
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    # ------------------------------------------------------------------ lifecycle
    def _wanted(self) -> list[tuple[str, int | None, int]]:
        """(role, node, port) of every process this stack should run."""
        wanted: list[tuple[str, int | None, int]] = [
            ("kafka", n, self.client_port(n)) for n in range(1, self.brokers + 1)
        ]
        if self.with_redis:
            wanted.append(("redis", None, self.settings.redis_port))
        return wanted

    def up(self, timeout_s: float = 120.0) -> StackStatus:
        """Start whatever process of the stack is not running; return once all answer.

        Each broker and Redis is checked on its own: a running process is left alone
        (bringing back a dead Redis must not restart a healthy broker), a dead one is
        started again on its recorded data.
        """
        recorded = self._read_registry() or {}
        alive = [r for r in self._records() if self._alive(r)]
        if alive and recorded.get("brokers", self.brokers) != self.brokers:
            raise InfraError(
                f"a {recorded['brokers']}-broker stack already runs under {self.home}; "
                "run `keel infra down` first"
            )
        wanted = self._wanted()
        running: dict[tuple[str, int | None], ProcessRecord] = {}
        for r in alive:
            expected = next((w for w in wanted if (w[0], w[1]) == (r.role, r.node_id)), None)
            if expected is None or expected[2] != r.port:
                raise InfraError(
                    f"{r.role} (pid {r.pid}) runs under {self.home} on port {r.port}, "
                    "not as this stack is configured; run `keel infra down` first"
                )
            running[(r.role, r.node_id)] = r
        missing = [w for w in wanted if (w[0], w[1]) not in running]
        if not missing:
            return self.wait_healthy(timeout_s)

        private_dir(self.home)
        java = require_program("java") if any(w[0] == "kafka" for w in missing) else ""
        redis_server = (
            require_program("redis-server") if any(w[0] == "redis" for w in missing) else ""
        )
        ports = [
            p for _, node, port in missing for p in ((port,) if node is None else (port, port + 1))
        ]
        busy = [p for p in ports if port_in_use(p)]
        if busy:
            raise InfraError(
                f"port(s) {', '.join(map(str, busy))} already in use by another process; "
                "choose others with KEEL_KAFKA_PORT / KEEL_REDIS_PORT"
            )
        libs = self.fetch_kafka() if java else Path()
        if java:
            brokers_running = any(role == "kafka" for role, _ in running)
            self._prepare_kafka_storage(java, libs, reformat=not brokers_running)
        started: list[ProcessRecord] = []

        def save() -> None:
            records = {**running, **{(r.role, r.node_id): r for r in started}}
            self._write_registry(records[(w[0], w[1])] for w in wanted if (w[0], w[1]) in records)

        try:
            for role, node, _ in missing:
                if role == "kafka":
                    assert node is not None
                    started.append(self._start_broker(java, libs, node))
                else:
                    started.append(self._start_redis(redis_server))
                save()
            return self.wait_healthy(timeout_s)
        except BaseException:
            _terminate_all(started, timeout_s=30)  # only what this call started
            started.clear()
            save()
            raise

    def _server_properties(self, node: int) -> str:
        n = self.brokers
        voters = ",".join(f"{i}@127.0.0.1:{self.controller_port(i)}" for i in range(1, n + 1))
        rf = min(3, n)
        min_isr = 2 if n >= 3 else 1
        lines = {
            "process.roles": "broker,controller",
            "node.id": node,
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.client_port(node)},"
                f"CONTROLLER://127.0.0.1:{self.controller_port(node)}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.client_port(node)}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.node_dir(node) / "data",
            "num.partitions": 1,
            "auto.create.topics.enable": "false",
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 12,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": 12,
            "group.initial.rebalance.delay.ms": 0,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
        }
        if n > 1:
            lines.update(FAILOVER_PROPERTIES)
        extra = broker_properties(self.settings.kafka_broker_properties)
        owned = sorted(set(extra) & TOPOLOGY_PROPERTIES)
        if owned:
            raise InfraError(
                f"KEEL_KAFKA_BROKER_PROPERTIES may not set {', '.join(owned)}: "
                "keel infra lays out the cluster itself"
            )
        lines.update(extra)
        return "".join(f"{k}={v}\n" for k, v in lines.items())

    def _prepare_kafka_storage(self, java: str, libs: Path, reformat: bool = True) -> None:
        """Format KRaft storage once per cluster shape; a different shape starts afresh.

        ``reformat=False`` (some broker still runs) refuses to wipe a mismatched layout.
        """
        kafka_dir = self.home / "kafka"
        shape = {"brokers": self.brokers, "kafka_port": self.settings.kafka_port}
        shape_file = kafka_dir / "cluster.json"
        if shape_file.exists() and json.loads(shape_file.read_text()) == shape:
            for node in range(1, self.brokers + 1):  # tighten layouts made before 0700
                for d in (kafka_dir, self.node_dir(node), self.node_dir(node) / "data"):
                    if d.is_dir():
                        d.chmod(0o700)
            return
        if not reformat:
            raise InfraError(
                f"the Kafka storage under {kafka_dir} is not of this stack's shape {shape} "
                "while a broker runs; run `keel infra down` first"
            )
        private_dir(self.home)
        shutil.rmtree(kafka_dir, ignore_errors=True)
        _private_dir(kafka_dir)
        cluster_id = _kafka_cluster_id()
        for node in range(1, self.brokers + 1):
            ndir = self.node_dir(node)
            _private_dir(ndir)
            _private_dir(ndir / "logs")
            props = ndir / "server.properties"
            props.write_text(self._server_properties(node))
            cmd = [
                java, "-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
                f"-Dkafka.logs.dir={ndir / 'logs'}", "kafka.tools.StorageTool", "format",
                # "=": an id may start with "-", which argparse would take for an option.
                f"--cluster-id={cluster_id}", "-c", str(props),
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise InfraError(
                    f"formatting KRaft storage of node {node} failed: "
                    + (proc.stderr or proc.stdout).strip().splitlines()[-1]
                )
        shape_file.write_text(json.dumps(shape))

    def _start_broker(self, java: str, libs: Path, node: int) -> ProcessRecord:
        ndir = self.node_dir(node)
        props = ndir / "server.properties"
        props.write_text(self._server_properties(node))
        heap = self.settings.kafka_heap if self.brokers == 1 else "512m"
        cmd = [
            java, f"-Xmx{heap}", "-Xms256m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            f"-Dkafka.logs.dir={ndir / 'logs'}", "-cp", f"{libs}/*", "kafka.Kafka", str(props),
        ]  # fmt: skip
        return self._spawn("kafka", cmd, ndir / "logs" / "stdout.log", self.client_port(node), node)

    def _start_redis(self, redis_server: str) -> ProcessRecord:
        rdir = _private_dir(self.home / "redis")
        port = self.settings.redis_port
        cmd = [
            redis_server, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(rdir),
            "--appendonly", "yes", "--daemonize", "no", "--protected-mode", "yes",
            "--save", "", "--pidfile", str(rdir / "redis.pid"),
        ]  # fmt: skip
        return self._spawn("redis", cmd, rdir / "redis.log", port, None)

    @staticmethod
    def _spawn(role: str, cmd: list[str], log: Path, port: int, node: int | None) -> ProcessRecord:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=log.parent,
            )
        started = psutil.Process(proc.pid).create_time()
        return ProcessRecord(role, proc.pid, port, started, str(log), node)

    def wait_healthy(self, timeout_s: float) -> StackStatus:
        """Poll until every process answers; fail fast, with its log, if one dies."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            if status.healthy:
                return status
            for record in self._records():
                if not self._alive(record):
                    why = _last_line(Path(record.log))
                    if record.node_id is not None:  # a broker logs its failure to server.log
                        server_log = self.node_dir(record.node_id) / "logs" / "server.log"
                        why = _first_error(server_log) or why
                    raise InfraError(f"{record.role} (pid {record.pid}) exited during start: {why}")
            if time.monotonic() > deadline:
                sick = [p.role for p in status.processes if not p.healthy]
                raise InfraError(f"stack not healthy after {timeout_s:.0f}s: {', '.join(sick)}")
            time.sleep(0.5)

    def status(self) -> StackStatus:
        records = self._records()
        alive = {r.pid: self._alive(r) for r in records}
        brokers_up = self._brokers_answering() if any(alive.values()) else set()
        statuses = []
        for r in records:
            if not alive[r.pid]:
                healthy = False
            elif r.role == "redis":
                healthy = _redis_answers(self.redis_url)
            else:
                # The others keep listing a broker that has just died or failed to start
                # until its session expires: it must also accept connections itself.
                healthy = r.node_id in brokers_up and port_in_use(r.port)
            statuses.append(ProcessStatus(r.role, r.pid, r.port, healthy, r.node_id))
        running = bool(records) and any(alive.values())
        return StackStatus(self.bootstrap_servers, self.redis_url, statuses, running)

    def _brokers_answering(self) -> set[int]:
        from confluent_kafka.admin import AdminClient

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _quiet_client_log,
            "socket.connection.setup.timeout.ms": 2000,
        }
        try:
            return set(AdminClient(config).list_topics(timeout=3).brokers)
        except Exception:
            return set()

    def down(self, timeout_s: float = 30.0) -> list[ProcessRecord]:
        """Stop every recorded process, wait for them to exit, forget them.

        All processes get SIGTERM at once and are then waited for together; whatever
        still runs after ``timeout_s`` gets SIGKILL. One by one, the last broker of a
        cluster would wait for a controller quorum that has already gone.
        """
        stopped = [r for r in self._records() if self._alive(r)]
        _terminate_all(stopped, timeout_s)
        with contextlib.suppress(FileNotFoundError):
            self.registry.unlink()
        return stopped

    # ------------------------------------------------------------------ fault injection
    def kill_broker(self, node: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """Send ``sig`` to broker ``node`` and wait until it is gone; returns its PID."""
        record = next(r for r in self._records() if r.node_id == node)
        os.kill(record.pid, sig)
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(record.pid).wait(timeout=30)
        return record.pid


def _terminate_all(records: Iterable[ProcessRecord], timeout_s: float) -> None:
    """SIGTERM every process at once, wait for all together, SIGKILL what remains."""
    procs = []
    for record in records:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(record.pid)
            proc.terminate()
            procs.append(proc)
    _, remaining = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in remaining:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(remaining, timeout=10)


def _private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can enter (0700), an existing one tightened:
    it holds data and logs (``KEEL_HOME`` itself keeps the mode of one the user made)."""
    private_dir(path)
    path.chmod(0o700)
    return path


def _redis_answers(url: str) -> bool:
    from orchestrator.io.redis.client_factory import RedisUse, redis_client

    try:
        client = redis_client(url, RedisUse.PROBE)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _kafka_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _first_error(path: Path) -> str | None:
    """A broker log's first ERROR line and the innermost cause logged under it (a port
    taken shows as ``... Caused by: java.net.BindException: Address already in use``)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for i, line in enumerate(lines):
        if "] ERROR " in line:
            message = line.split("] ERROR ", 1)[1]
            causes = []
            for follow in lines[i + 1 :]:
                if follow.startswith("["):
                    break
                if follow.startswith("Caused by: "):
                    causes.append(follow)
            return f"{message}; {causes[-1]}" if causes else message
    return None


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except FileNotFoundError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"
