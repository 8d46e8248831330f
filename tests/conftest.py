"""Session fixtures: one real Kafka broker and one real Redis for the whole test run.

Order of preference:
1. ``KEEL_BOOTSTRAP_SERVERS`` / ``KEEL_REDIS_URL`` name running servers: reuse them.
2. ``KEEL_TESTCONTAINERS=1`` and a Docker engine answers: testcontainers starts them.
3. Otherwise the same ``LocalStack`` that ``keel infra`` uses starts them under
   ``.keel/test-stack`` on ports of their own, and stops them at the end. A parallel session
   (``pytest -n N``, pytest-xdist: the integration stage) starts them once, in the
   controller, and its workers share them through 1.
Every test gets its own topic prefix, so tests never see each other's records, and
its histories are checked against the invariants when the test ends
(``tests/history_check.py``; ``@pytest.mark.unsound_history`` opts a test out).
Pure unit tests (``tests/unit``) never touch these fixtures.

Every test's layer marker (``unit``, ``integration``, ``fault`` or ``browser``) comes from the directory it
sits in (``pytest_collection_modifyitems`` below), never from the test file: ``-m unit``
selects ``tests/unit``, and so on. ``make test`` runs the four directories as four stages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KEEL_DIR = REPO / ".keel"
TEST_KAFKA_PORT = int(os.environ.get("KEEL_TEST_KAFKA_PORT", "39092"))
TEST_REDIS_PORT = int(os.environ.get("KEEL_TEST_REDIS_PORT", "36379"))


#: The test layers, one per directory under ``tests/``; each is also the test's marker.
LAYERS = ("unit", "integration", "fault", "browser")
TESTS = Path(__file__).resolve().parent


def layer_of(path: Path) -> str | None:
    """The layer of a test file: the directory under ``tests/`` it sits in (or None)."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else None


#: The stack a parallel session's controller started for its workers (stopped at the end).
_SHARED_STACK: list = []


def pytest_configure(config: pytest.Config) -> None:
    """In the controller of a parallel session, start the one broker and Redis its workers
    share (they inherit the environment naming them), unless servers are named already."""
    parallel = getattr(config.option, "numprocesses", None)
    if not parallel or hasattr(config, "workerinput") or _only_unit_tests(config):
        return
    if os.environ.get("KEEL_BOOTSTRAP_SERVERS") and os.environ.get("KEEL_REDIS_URL"):
        return
    from ops.local import LocalStack

    stack = LocalStack(stack_settings(KEEL_DIR / "test-stack", TEST_KAFKA_PORT, TEST_REDIS_PORT))
    status = stack.up()
    _SHARED_STACK.append(stack)
    os.environ["KEEL_BOOTSTRAP_SERVERS"] = status.bootstrap_servers
    os.environ["KEEL_REDIS_URL"] = status.redis_url


def _only_unit_tests(config: pytest.Config) -> bool:
    """Whether every path the session was given lies in tests/unit: the unit stage needs
    no server, so its parallel session starts none."""
    unit = Path(__file__).resolve().parent / "unit"
    paths = [Path(str(arg).split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(p == unit or unit in p.parents for p in paths)


def pytest_unconfigure(config: pytest.Config) -> None:
    while _SHARED_STACK:
        _SHARED_STACK.pop().down()
        os.environ.pop("KEEL_BOOTSTRAP_SERVERS", None)
        os.environ.pop("KEEL_REDIS_URL", None)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its layer, taken from its directory (the one rule)."""
    for item in items:
        layer = layer_of(item.path)
        if layer is not None:
            item.add_marker(layer)


@dataclass(frozen=True)
class Servers:
    bootstrap_servers: str
    redis_url: str


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    return probe.returncode == 0


def _from_testcontainers() -> Iterator[Servers]:
    try:
        from testcontainers.kafka import KafkaContainer
        from testcontainers.redis import RedisContainer
    except ImportError:  # older layouts ship them under testcontainers.community
        from testcontainers.community.kafka import KafkaContainer  # type: ignore
        from testcontainers.community.redis import RedisContainer  # type: ignore
    with KafkaContainer().with_kraft() as kafka, RedisContainer() as redis_c:
        host = redis_c.get_container_host_ip()
        port = redis_c.get_exposed_port(6379)
        yield Servers(kafka.get_bootstrap_server(), f"redis://{host}:{port}/0")


def stack_settings(home: Path, kafka_port: int, redis_port: int):
    from orchestrator.config.settings import Settings

    return Settings(
        home=home,
        kafka_port=kafka_port,
        redis_port=redis_port,
        kafka_libs=KEEL_DIR / "kafka-libs",
        bootstrap_servers="",
        redis_url="",
    )


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    env_kafka = os.environ.get("KEEL_BOOTSTRAP_SERVERS")
    env_redis = os.environ.get("KEEL_REDIS_URL")
    if env_kafka and env_redis:
        yield Servers(env_kafka, env_redis)
        return
    if os.environ.get("KEEL_TESTCONTAINERS") == "1" and _docker_answers():
        yield from _from_testcontainers()
        return
    from ops.local import LocalStack

    stack = LocalStack(stack_settings(KEEL_DIR / "test-stack", TEST_KAFKA_PORT, TEST_REDIS_PORT))
    status = stack.up()
    try:
        yield Servers(status.bootstrap_servers, status.redis_url)
    finally:
        stack.down()


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def pytest_sessionfinish(session) -> None:
    """A parallel worker (pytest-xdist) hands its history-check totals to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        from tests.history_check import worker_totals

        output["history_totals"] = worker_totals()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    from tests.history_check import add_worker_totals

    add_worker_totals(getattr(node, "workeroutput", {}).get("history_totals"))


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.history_check import terminal_summary

    terminal_summary(terminalreporter)


@pytest.fixture
def settings(servers: Servers, topic_prefix: str, request: pytest.FixtureRequest, tmp_path: Path):
    """Settings for one test: the session's servers, a fresh prefix, topics created, and
    a home of its own (a key file one test's code creates there never signs another's
    decisions); afterwards the prefix's histories must keep the invariants."""
    from orchestrator.config.settings import Settings
    from orchestrator.io.kafka.topics import create_topics
    from tests.history_check import verify_after_test

    s = Settings(
        bootstrap_servers=servers.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=topic_prefix,
        partitions=4,
        replication_factor=1,
        home=tmp_path / "keel-home",
    )
    create_topics(s)
    yield s
    verify_after_test(request, s)


@pytest.fixture
def services(settings, tmp_path):
    """Start Keel service processes for one test; all are stopped by PID afterwards."""
    from tests.support import Services

    svc = Services(settings, tmp_path)
    try:
        yield svc
    finally:
        svc.stop_all()


@pytest.fixture
def client(settings):
    from orchestrator.client.client import KeelClient
    from orchestrator.examples import app

    c = KeelClient(settings, app)
    yield c
    c.close()


@pytest.fixture(scope="session")
def ledger_url() -> Iterator[str]:
    """The fake finance ledger (ops/fakes/ledger.py) as a real process on a free port."""
    import select
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "ops.fakes.ledger", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the ledger did not start within 30 s"
        line = proc.stdout.readline().strip()
        assert line.startswith("ledger listening on "), line
        yield line.removeprefix("ledger listening on ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def ledger(ledger_url):
    from ops.fakes.ledger import LedgerClient

    client = LedgerClient(ledger_url)
    client.reset()
    return client
