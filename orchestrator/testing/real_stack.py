"""A real Kafka broker and Redis for a user's integration tests (the ``keel_stack`` fixture).

Where the servers come from, in order (the same as Keel's own suite, tests/conftest.py):

1. ``KEEL_BOOTSTRAP_SERVERS`` and ``KEEL_REDIS_URL`` (or the project's ``[tool.keel]``) name
   running servers: they are used;
2. ``KEEL_TESTCONTAINERS=1`` and a Docker engine answers: testcontainers starts them;
3. otherwise ``keel infra up`` (docs/local-infra.md) starts them under the project's
   ``KEEL_HOME`` (or finds them running there), and ``keel infra down`` stops them at the
   end if it started them. The command is run as a child process: the local stack is a
   dev tool the product never imports.

When none can be had (no Java or Maven for ``keel infra``, no Docker), :class:`StackUnavailable`
says why, and the fixture skips with that reason. On the stack, :meth:`RealStack.serve`
runs an application's orchestrator (with its projector) and worker in threads of the test
process, and hands back a :class:`~orchestrator.client.client.KeelClient`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import KeelError

__all__ = ["RealStack", "StackUnavailable", "real_stack"]

#: How long ``keel infra up`` may take (the first run fetches Kafka's jars).
INFRA_UP_TIMEOUT_S = 600.0


class StackUnavailable(KeelError):
    """No real stack can be had here; the message says why and what would give one."""


@dataclass
class RealStack:
    """Running servers, and how to run an application on them."""

    bootstrap_servers: str
    redis_url: str
    #: How they were found: ``environment``, ``testcontainers`` or ``keel infra``.
    source: str

    def settings(self, home: Path, topic_prefix: str | None = None, **overrides: Any) -> Settings:
        """Settings on these servers under a fresh topic prefix (unless given), topics
        created: one test's records never meet another's."""
        from orchestrator.io.kafka.topics import create_topics

        values: dict[str, Any] = {"partitions": 4, "replication_factor": 1, **overrides}
        settings = Settings(
            bootstrap_servers=self.bootstrap_servers,
            redis_url=self.redis_url,
            topic_prefix=topic_prefix or f"t{uuid.uuid4().hex[:12]}",
            home=home,
            **values,
        )
        create_topics(settings)
        return settings

    @contextmanager
    def serve(self, app: KeelApp, settings: Settings) -> Iterator[Any]:
        """Run ``app``'s orchestrator (its projector fed in process) and a worker on
        ``settings`` in threads; yield a ``KeelClient``; stop them all at the end."""
        from orchestrator.client.client import KeelClient
        from orchestrator.embedding.service_parts import ServiceParts
        from orchestrator.io.handoff.committed_channel import CommittedEvents

        # the parts a `keel` service builds, once, on a copy of the app (ServiceParts serves
        # the app it is given with keel.schedule installed; the test's app stays as it was)
        parts = ServiceParts.build(_app_copy(app), settings)
        served = parts.app
        orch = parts.orchestrator(hard_exit_on_stall=False)
        worker = parts.worker(hard_exit_on_stall=False)
        processes: list[Any] = [orch, worker]
        if isinstance(orch.committed, CommittedEvents):  # this process's committed events
            processes.append(parts.projector(orch.committed))
        threads = [
            threading.Thread(target=p.run, name=f"keel-{type(p).__name__.lower()}", daemon=True)
            for p in processes
        ]
        for t in threads:
            t.start()
        client = KeelClient(settings, served)
        try:
            yield client
        finally:
            client.close()
            for p in processes:
                p.stop()
            for t in threads:
                t.join(30)


def _app_copy(app: KeelApp) -> KeelApp:
    """A copy of ``app`` whose registries can be added to (``keel.schedule``) without
    changing ``app``'s."""
    served = copy.copy(app)
    served.definitions = dict(app.definitions)
    served.handlers = dict(app.handlers)
    served._decider = None
    return served


def _keel(*args: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def _last_json(stdout: str) -> dict[str, Any]:
    """The JSON object a ``--json`` command printed last ({} when it printed none)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else {}
    return {}


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    return probe.returncode == 0


@contextmanager
def _from_testcontainers() -> Iterator[RealStack]:
    try:
        from testcontainers.kafka import KafkaContainer
        from testcontainers.redis import RedisContainer
    except ImportError as exc:
        raise StackUnavailable(
            f"KEEL_TESTCONTAINERS=1 but testcontainers is missing: {exc}"
        ) from None
    with KafkaContainer().with_kraft() as kafka, RedisContainer() as redis_c:
        host, port = redis_c.get_container_host_ip(), redis_c.get_exposed_port(6379)
        yield RealStack(kafka.get_bootstrap_server(), f"redis://{host}:{port}/0", "testcontainers")


@contextmanager
def _from_keel_infra() -> Iterator[RealStack]:
    env = dict(os.environ)
    status = _keel("infra", "status", "--json", env=env, timeout_s=60)
    if "No such command" in status.stderr:
        raise StackUnavailable(
            "`keel infra` is not installed here (the dev tools' entry point); set "
            "KEEL_BOOTSTRAP_SERVERS and KEEL_REDIS_URL to running servers instead"
        )
    running = status.returncode == 0 and bool(_last_json(status.stdout).get("processes"))
    up = _keel("infra", "up", "--json", env=env, timeout_s=INFRA_UP_TIMEOUT_S)
    found = _last_json(up.stdout)
    if up.returncode != 0 or "bootstrap_servers" not in found:
        why = (up.stderr.strip().splitlines() or [f"exit status {up.returncode}"])[-1]
        raise StackUnavailable(f"`keel infra up` failed: {why}")
    try:
        yield RealStack(found["bootstrap_servers"], found["redis_url"], "keel infra")
    finally:
        if not running:  # started for this session: stopped with it
            _keel("infra", "down", env=env, timeout_s=120)


def real_stack() -> AbstractContextManager[RealStack]:
    """The servers of this session (see the module doc); ``StackUnavailable`` if none."""
    from orchestrator.config.settings import load_settings

    settings = load_settings()
    if settings.bootstrap_servers and settings.redis_url:
        return _given(RealStack(settings.bootstrap_servers, settings.redis_url, "environment"))
    if settings.testcontainers and _docker_answers():
        return _from_testcontainers()
    return _from_keel_infra()


@contextmanager
def _given(stack: RealStack) -> Iterator[RealStack]:
    yield stack
