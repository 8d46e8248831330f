"""Keel's Kafka clients authenticate and encrypt as the ``KEEL_KAFKA_*`` security settings say.

The trust model (docs/operations.md) needs every Keel process on a SASL_SSL/SCRAM listener:
the settings carry the protocol, mechanism, principal, password and CA; one function
(``kafka.security_config``) turns them into librdkafka properties; every client Keel makes
from its settings gets them through ``producer_config``, ``consumer_config`` or
``admin_config``. The password is a secret: no repr, error or log line shows it.
"""

from __future__ import annotations

import ast
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.settings import (
    KafkaSecurityProtocol,
    SaslMechanism,
    Settings,
    load_settings,
    redact,
)
from orchestrator.domain.model.errors import ConfigError
from orchestrator.io.kafka import clients as kafka
from orchestrator.io.kafka.clients import (
    PARTITIONER,
    admin_config,
    client_log,
    consumer_config,
    producer_config,
    security_config,
    transactional_producer,
)

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "pw-8f3c-hunter2-never-shown"
CA = "/etc/keel/tls/ca.pem"
SECURITY_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
)
SECURITY_VARIABLES = (
    "KEEL_KAFKA_SECURITY_PROTOCOL",
    "KEEL_KAFKA_SASL_MECHANISM",
    "KEEL_KAFKA_SASL_USERNAME",
    "KEEL_KAFKA_SASL_PASSWORD",
    "KEEL_KAFKA_SSL_CA_LOCATION",
)
#: The environment of a Keel process on the trust model's brokers (docs/operations.md).
SCRAM_ENV = {
    "KEEL_BOOTSTRAP_SERVERS": "kafka-1.internal:9093,kafka-2.internal:9093",
    "KEEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "KEEL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "KEEL_KAFKA_SASL_USERNAME": "keel",
    "KEEL_KAFKA_SASL_PASSWORD": PASSWORD,
    "KEEL_KAFKA_SSL_CA_LOCATION": CA,
}
SCRAM_PROPERTIES = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "keel",
    "sasl.password": PASSWORD,
    "ssl.ca.location": CA,
}


@pytest.fixture(autouse=True)
def _no_keel_security_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SECURITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def scram(**overrides: Any) -> Settings:
    """Settings for the trust model's brokers: SASL_SSL, SCRAM-SHA-512, principal keel."""
    values: dict[str, Any] = {
        "bootstrap_servers": "kafka-1.internal:9093",
        "topic_prefix": "t",
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": "keel",
        "kafka_sasl_password": PASSWORD,
        "kafka_ssl_ca_location": CA,
    }
    return Settings(**(values | overrides))


# -- the properties --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "properties"),
    [
        ({}, {}),
        ({"kafka_security_protocol": "PLAINTEXT"}, {}),
        ({"kafka_security_protocol": "SSL"}, {"security.protocol": "SSL"}),
        (
            {"kafka_security_protocol": "SSL", "kafka_ssl_ca_location": CA},
            {"security.protocol": "SSL", "ssl.ca.location": CA},
        ),
        (
            {
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_sasl_mechanism": "PLAIN",
                "kafka_sasl_username": "keel",
                "kafka_sasl_password": PASSWORD,
            },
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "keel",
                "sasl.password": PASSWORD,
            },
        ),
        (
            {
                "kafka_security_protocol": "SASL_SSL",
                "kafka_sasl_mechanism": "SCRAM-SHA-256",
                "kafka_sasl_username": "keel",
                "kafka_sasl_password": PASSWORD,
            },
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "keel",
                "sasl.password": PASSWORD,
            },
        ),
        (
            {
                "kafka_security_protocol": "SASL_SSL",
                "kafka_sasl_mechanism": "SCRAM-SHA-512",
                "kafka_sasl_username": "keel",
                "kafka_sasl_password": PASSWORD,
                "kafka_ssl_ca_location": CA,
            },
            SCRAM_PROPERTIES,
        ),
    ],
    ids=["default", "plaintext", "ssl", "ssl-ca", "sasl-plaintext", "scram-256", "scram-512"],
)
def test_the_properties_of_each_protocol(
    settings: dict[str, Any], properties: dict[str, str]
) -> None:
    assert security_config(Settings(**settings)) == properties


def test_the_variables_of_the_trust_model_give_its_client_properties(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SCRAM_ENV.items():
        monkeypatch.setenv(name, value)
    s = load_settings()
    assert s.kafka_security_protocol is KafkaSecurityProtocol.SASL_SSL
    assert s.kafka_sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert security_config(s) == SCRAM_PROPERTIES


def test_the_example_environment_of_docs_operations_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trust model's "Keel's clients" example, loaded as a process would."""
    import shlex

    text = (ROOT / "docs" / "operations.md").read_text()
    block = text.split("### Keel's clients", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    env = {}
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        assert words[0] == "export", line
        name, _, value = words[1].partition("=")
        env[name] = value
    assert set(SECURITY_VARIABLES) <= set(env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    properties = security_config(load_settings())
    assert properties == SCRAM_PROPERTIES | {"sasl.password": "<keel password>"}


def test_protocol_and_mechanism_are_read_in_any_case_and_empty_means_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_KAFKA_SECURITY_PROTOCOL", " sasl_plaintext ")
    monkeypatch.setenv("KEEL_KAFKA_SASL_MECHANISM", "scram-sha-256")
    monkeypatch.setenv("KEEL_KAFKA_SASL_USERNAME", "keel")
    monkeypatch.setenv("KEEL_KAFKA_SASL_PASSWORD", PASSWORD)
    s = load_settings()
    assert security_config(s)["security.protocol"] == "SASL_PLAINTEXT"
    assert security_config(s)["sasl.mechanism"] == "SCRAM-SHA-256"

    for name in SECURITY_VARIABLES:
        monkeypatch.setenv(name, "")
    s = load_settings()
    assert s.kafka_security_protocol is KafkaSecurityProtocol.PLAINTEXT
    assert security_config(s) == {}


def test_plaintext_leaves_every_client_config_as_it_was() -> None:
    s = Settings(bootstrap_servers="10.0.0.1:9092", topic_prefix="t")
    assert producer_config(s) == {
        "bootstrap.servers": "10.0.0.1:9092",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": s.linger_ms,
        "partitioner": PARTITIONER,
        "compression.type": "lz4",
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "logger": client_log,
    }
    assert consumer_config(s, "t.g") == {
        "bootstrap.servers": "10.0.0.1:9092",
        "group.id": "t.g",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": s.fetch_wait_max_ms,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 300000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "logger": client_log,
    }
    assert admin_config(s) == {
        "bootstrap.servers": "10.0.0.1:9092",
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }


# -- validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"KEEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "invalid setting KEEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL: also needs "
            "KEEL_KAFKA_SASL_MECHANISM, KEEL_KAFKA_SASL_USERNAME and KEEL_KAFKA_SASL_PASSWORD",
        ),
        (
            {
                "KEEL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "KEEL_KAFKA_SASL_MECHANISM": "PLAIN",
                "KEEL_KAFKA_SASL_USERNAME": "keel",
            },
            "invalid setting KEEL_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT: also needs "
            "KEEL_KAFKA_SASL_PASSWORD",
        ),
        (
            {
                "KEEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "KEEL_KAFKA_SASL_USERNAME": "keel",
                "KEEL_KAFKA_SASL_PASSWORD": PASSWORD,
            },
            "invalid setting KEEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL: also needs "
            "KEEL_KAFKA_SASL_MECHANISM",
        ),
        (
            {"KEEL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"},
            "invalid setting KEEL_KAFKA_SASL_MECHANISM=SCRAM-SHA-512: only with "
            "KEEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL or SASL_PLAINTEXT (it is PLAINTEXT)",
        ),
        (
            {
                "KEEL_KAFKA_SECURITY_PROTOCOL": "SSL",
                "KEEL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                "KEEL_KAFKA_SASL_USERNAME": "keel",
                "KEEL_KAFKA_SASL_PASSWORD": PASSWORD,
            },
            "invalid setting KEEL_KAFKA_SASL_MECHANISM=SCRAM-SHA-512, KEEL_KAFKA_SASL_USERNAME, "
            "KEEL_KAFKA_SASL_PASSWORD: only with KEEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL or "
            "SASL_PLAINTEXT (it is SSL)",
        ),
        (
            {"KEEL_KAFKA_SASL_PASSWORD": PASSWORD},
            "invalid setting KEEL_KAFKA_SASL_PASSWORD: only with "
            "KEEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL or SASL_PLAINTEXT (it is PLAINTEXT)",
        ),
        (
            {"KEEL_KAFKA_SSL_CA_LOCATION": CA},
            "invalid setting KEEL_KAFKA_SSL_CA_LOCATION: only with "
            "KEEL_KAFKA_SECURITY_PROTOCOL=SSL or SASL_SSL (it is PLAINTEXT)",
        ),
        (
            {"KEEL_KAFKA_SECURITY_PROTOCOL": "TLS"},
            "invalid setting KEEL_KAFKA_SECURITY_PROTOCOL=TLS: Input should be 'PLAINTEXT', "
            "'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'",
        ),
        (
            {
                "KEEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "KEEL_KAFKA_SASL_MECHANISM": "GSSAPI",
                "KEEL_KAFKA_SASL_USERNAME": "keel",
                "KEEL_KAFKA_SASL_PASSWORD": PASSWORD,
            },
            "invalid setting KEEL_KAFKA_SASL_MECHANISM=GSSAPI: Input should be 'PLAIN', "
            "'SCRAM-SHA-256' or 'SCRAM-SHA-512'",
        ),
    ],
    ids=[
        "sasl-without-anything",
        "sasl-without-password",
        "sasl-without-mechanism",
        "mechanism-with-plaintext",
        "sasl-values-with-ssl",
        "password-with-plaintext",
        "ca-with-plaintext",
        "unknown-protocol",
        "unknown-mechanism",
    ],
)
def test_an_incomplete_or_contradictory_setup_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == expected
    assert PASSWORD not in str(info.value)


# -- the password is a secret -----------------------------------------------------------


def test_the_password_is_in_no_repr_str_or_dump_of_the_settings() -> None:
    s = scram()
    shown = [
        repr(s),
        str(s),
        repr(s.kafka_sasl_password),
        str(s.kafka_sasl_password),
        str(s.model_dump()),
        s.model_dump_json(),
        json.dumps(s.model_dump(mode="json")),
    ]
    for text in shown:
        assert PASSWORD not in text
    assert "kafka_sasl_password=SecretStr('**********')" in repr(s)
    assert s.kafka_sasl_password is not None
    assert s.kafka_sasl_password.get_secret_value() == PASSWORD


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "{'sasl.username': 'keel', 'sasl.password': 'p w,d'}",
            "{'sasl.username': 'keel', 'sasl.password': '***'}",
        ),
        ('{"sasl.password": "pw"}', '{"sasl.password": "***"}'),
        ("sasl.password=pw\nssl.ca.location=/ca.pem", "sasl.password=***\nssl.ca.location=/ca.pem"),
        ("ssl.key.password = pw", "ssl.key.password = ***"),
        ("KEEL_KAFKA_SASL_PASSWORD=pw KEEL_X=1", "KEEL_KAFKA_SASL_PASSWORD=*** KEEL_X=1"),
        ("also needs KEEL_KAFKA_SASL_PASSWORD", "also needs KEEL_KAFKA_SASL_PASSWORD"),
        ("KEEL_KAFKA_SASL_PASSWORD: only with", "KEEL_KAFKA_SASL_PASSWORD: only with"),
    ],
)
def test_redact_hides_a_kafka_client_password(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_log_line_carrying_a_client_config_or_the_settings_does_not_show_the_password() -> None:
    from orchestrator.telemetry.logs import JsonFormatter

    s = scram()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("keel.test.security")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("producer %s", producer_config(s))
        logger.warning("consumer %r", consumer_config(s, "t.g"))
        logger.warning("settings %s / %r", s, s)
        try:
            raise RuntimeError(f"could not build {admin_config(s)}")
        except RuntimeError:
            logger.exception("admin")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4
    assert PASSWORD not in stream.getvalue()
    assert "'sasl.password': '***'" in json.loads(lines[0])["msg"]


def test_librdkafka_takes_the_properties_and_never_logs_the_password() -> None:
    """Real clients, with every librdkafka debug context on: the config dump says
    ``[redacted]`` and nothing else of what the clients log carries the password."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    s = scram(bootstrap_servers="127.0.0.1:1", kafka_ssl_ca_location=None)
    stream = io.StringIO()
    captured = logging.getLogger("keel.test.librdkafka")
    captured.setLevel(logging.DEBUG)
    captured.addHandler(logging.StreamHandler(stream))
    captured.propagate = False
    debug = {"logger": captured, "debug": "all"}
    producer = Producer(producer_config(s, **debug))
    producer.poll(0.3)
    consumer = Consumer(consumer_config(s, "t.g", **debug))
    consumer.poll(0.3)
    consumer.close()
    admin = AdminClient(admin_config(s, **debug))
    admin.poll(0.3)
    del producer, admin
    out = stream.getvalue()
    assert "sasl.password = [redacted]" in out
    assert "sasl_ssl://127.0.0.1:1" in out
    assert PASSWORD not in out


def test_a_process_on_a_scram_broker_never_prints_the_password_at_start(tmp_path: Path) -> None:
    """``keel orchestrator`` against a SASL_SSL address where nothing listens, debug logs on:
    its clients connect as ``sasl_ssl://``, and no line it prints (nor any file it writes
    under KEEL_HOME) holds the password."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEL_", "OTEL_"))}
    env.update(SCRAM_ENV)
    del env["KEEL_KAFKA_SSL_CA_LOCATION"]  # the system's CAs: the file need not exist here
    env.update(
        KEEL_BOOTSTRAP_SERVERS="127.0.0.1:1",
        KEEL_REDIS_URL="redis://127.0.0.1:1/0",
        KEEL_HOME=str(tmp_path),
        KEEL_ADMIN_TIMEOUT_S="2",
        KEEL_LOG_LEVEL="debug",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    code = "from orchestrator.cli import main; main(['orchestrator', '--no-projector'])"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        status = tmp_path / "status"
        while time.monotonic() < deadline and proc.poll() is None:
            if status.is_dir() and any(status.iterdir()):
                break  # up: it has written its status once
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert " started on t.commands" in out or " started on keel.commands" in out, out[-2000:]
    assert "sasl_ssl://127.0.0.1:1" in out, out[-2000:]
    assert PASSWORD not in out
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_a_child_process_gets_the_same_client_security() -> None:
    env = scram().child_environment()
    assert {k: env[k] for k in SECURITY_VARIABLES} == {
        k: v for k, v in SCRAM_ENV.items() if k in SECURITY_VARIABLES
    }
    plain = Settings(bootstrap_servers="10.0.0.1:9092").child_environment()
    assert not set(SECURITY_VARIABLES) & set(plain)


# -- every client Keel makes from its settings ------------------------------------------


def _has_security(config: dict[str, Any]) -> bool:
    return {k: config.get(k) for k in SECURITY_KEYS} == SCRAM_PROPERTIES


def test_the_builders_add_the_properties_and_keep_their_own() -> None:
    s = scram()
    producer = producer_config(s, **{"linger.ms": 0})
    consumer = consumer_config(s, "t.g", **{"fetch.wait.max.ms": 5})
    admin = admin_config(s, **{"socket.connection.setup.timeout.ms": 3000})
    for config in (producer, consumer, admin):
        assert _has_security(config)
        assert config["bootstrap.servers"] == "kafka-1.internal:9093"
    assert producer["linger.ms"] == 0 and producer["enable.idempotence"] is True
    assert consumer["group.id"] == "t.g" and consumer["isolation.level"] == "read_committed"
    assert admin["socket.connection.setup.timeout.ms"] == 3000


class _Built(Exception):
    """Raised by a fake client class with the configuration it was given."""

    def __init__(self, kind: str, config: dict[str, Any]) -> None:
        super().__init__(kind)
        self.kind = kind
        self.config = config


def _fake(kind: str) -> type:
    class Fake:
        def __init__(self, config: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            raise _Built(kind, config)

    return Fake


def _build_transactional_producer(s: Settings) -> None:
    transactional_producer(s, "t.orchestrator.x", init=False)


def _build_reader(s: Settings) -> None:
    next(iter(kafka.read_batches(s, "t.events", {0: 0})))


def _build_client_producer(s: Settings) -> None:
    from orchestrator.client.client import KeelClient

    _ = KeelClient(s, None).producer  # type: ignore[arg-type]


def _build_client_bulk_producer(s: Settings) -> None:
    from orchestrator.client.client import KeelClient

    _ = KeelClient(s, None).bulk_producer  # type: ignore[arg-type]


def _build_outcome_sink(s: Settings) -> None:
    from orchestrator.io.kafka.outcomes import KafkaOutcomeSink

    _ = KafkaOutcomeSink(s, stopping=lambda: False).producer


def _build_command_intake(s: Settings) -> None:
    from orchestrator.io.kafka.adapter import KafkaCommandIntake

    intake = KafkaCommandIntake(
        s, "t.commands", "t.orchestrator", instance_id="pod-1", stopping=lambda: False
    )
    _ = intake.consumer


def _build_refusal_watch(s: Settings) -> None:
    from orchestrator.client.human_task_decisions import RefusalWatch

    RefusalWatch(s)


def _build_history_reader(s: Settings) -> None:
    from orchestrator.client.history_io import _partitions

    _partitions(s, "t.events")


def _build_connector_producer(s: Settings) -> None:
    from connectors.delivery import AckingProducer

    AckingProducer(s, 5.0)


def _build_topics_admin(s: Settings) -> None:
    from orchestrator.io.kafka.topics import admin_client

    admin_client(s)


def _build_floor_admin(s: Settings) -> None:
    from ops.kafka_floor import hop

    hop(s)


def _build_floor_watch(s: Settings) -> None:
    from ops.kafka_floor import _Watch

    _Watch(s, "t.events")


def _build_floor_ceiling(s: Settings) -> None:
    from ops.kafka_floor import read_ceiling

    read_ceiling(s, "t.events")


def _build_bench_tail(s: Settings) -> None:
    from ops.bench_probes import EventTail

    EventTail(s)


def _build_demo_tail(s: Settings) -> None:
    from ops.demo_job import EventTail

    EventTail(s)


def _build_saga_feed(s: Settings) -> None:
    from orchestrator.io.kafka.saga_feed import SagaFeed

    SagaFeed(s, ["t.events", "t.sagas"])


@pytest.mark.parametrize(
    ("module", "kind", "build"),
    [
        ("orchestrator.io.kafka.clients", "Producer", _build_transactional_producer),
        ("orchestrator.io.kafka.clients", "Consumer", _build_reader),
        ("orchestrator.io.kafka.clients", "Producer", _build_client_producer),
        ("orchestrator.io.kafka.clients", "Producer", _build_client_bulk_producer),
        # the worker's and the connector's producers are plain producers (clients.py)
        ("orchestrator.io.kafka.clients", "Producer", _build_outcome_sink),
        ("orchestrator.io.kafka.adapter", "Consumer", _build_command_intake),
        ("orchestrator.io.kafka.clients", "Consumer", _build_refusal_watch),
        ("orchestrator.io.kafka.clients", "Consumer", _build_history_reader),
        ("orchestrator.io.kafka.clients", "Producer", _build_connector_producer),
        ("orchestrator.io.kafka.topics", "AdminClient", _build_topics_admin),
        ("ops.kafka_floor", "AdminClient", _build_floor_admin),
        ("ops.kafka_floor", "Consumer", _build_floor_watch),
        ("ops.kafka_floor", "Consumer", _build_floor_ceiling),
        ("ops.bench_probes", "Consumer", _build_bench_tail),
        ("ops.demo_job", "Consumer", _build_demo_tail),
        ("orchestrator.io.kafka.saga_feed", "Consumer", _build_saga_feed),
    ],
    ids=lambda v: v.__name__.removeprefix("_build_") if callable(v) else None,
)
def test_a_client_keel_builds_carries_the_security_properties(
    monkeypatch: pytest.MonkeyPatch, module: str, kind: str, build: Any
) -> None:
    import importlib

    monkeypatch.setattr(importlib.import_module(module), kind, _fake(kind))
    with pytest.raises(_Built) as built:
        build(scram())
    assert built.value.kind == kind
    assert _has_security(built.value.config), built.value.config


def test_the_transactional_producer_keeps_its_own_settings_and_adds_security(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka, "Producer", _fake("Producer"))
    with pytest.raises(_Built) as built:
        transactional_producer(scram(), "t.orchestrator.x")
    config = built.value.config
    assert _has_security(config)
    assert config["transactional.id"] == "t.orchestrator.x"
    assert config["linger.ms"] == scram().batched_linger_ms


#: Clients made without Keel's settings, on purpose: both address the local stack
#: (``keel infra``, the fault tests), whose brokers listen PLAINTEXT only.
NOT_FROM_SETTINGS = {
    ("ops/cluster.py", "admin", "AdminClient"),
    ("ops/local.py", "_brokers_answering", "AdminClient"),
}
BUILDERS = {"producer_config", "consumer_config", "admin_config"}


def _calls_a_builder(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in BUILDERS
    if isinstance(node, ast.Dict):  # a literal that spreads the security properties
        return any(
            key is None
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "security_config"
            for key, value in zip(node.keys, node.values, strict=True)
        )
    return False


def _client_sites() -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """(routed, not routed) ``Producer(...)``, ``Consumer(...)``, ``AdminClient(...)``
    calls in Keel's code, each as (file, enclosing function, class)."""
    routed, other = set(), set()
    for top in ("orchestrator", "handlers", "connectors", "ops"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            functions = [
                n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            for fn in functions:
                assigned: dict[str, ast.expr] = {}
                for node in ast.walk(fn):
                    if isinstance(node, ast.Assign) and len(node.targets) == 1:
                        target = node.targets[0]
                        if isinstance(target, ast.Name):
                            assigned[target.id] = node.value
                    elif (
                        isinstance(node, ast.AnnAssign)
                        and isinstance(node.target, ast.Name)
                        and node.value is not None
                    ):
                        assigned[node.target.id] = node.value
                for node in ast.walk(fn):
                    if not (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Name)
                        and node.func.id in ("Producer", "Consumer", "AdminClient")
                    ):
                        continue
                    arg = node.args[0] if node.args else None
                    if isinstance(arg, ast.Name):
                        arg = assigned.get(arg.id)
                    site = (str(path.relative_to(ROOT)), fn.name, node.func.id)
                    (routed if _calls_a_builder(arg) else other).add(site)
    return routed, other


def test_every_client_construction_site_takes_its_config_from_a_builder() -> None:
    """A new ``Producer(...)``/``Consumer(...)``/``AdminClient(...)`` in Keel's code that
    does not get its configuration from ``producer_config``, ``consumer_config``,
    ``admin_config`` (or spreads ``security_config``) fails here: it would ignore
    ``KEEL_KAFKA_SECURITY_PROTOCOL`` and never reach a SASL_SSL broker."""
    routed, other = _client_sites()
    assert other == NOT_FROM_SETTINGS
    assert {
        ("orchestrator/io/kafka/clients.py", "transactional_producer", "Producer"),
        ("orchestrator/io/kafka/clients.py", "read_batches", "Consumer"),
        ("orchestrator/io/kafka/saga_feed.py", "__init__", "Consumer"),
        ("orchestrator/io/kafka/topics.py", "admin_client", "AdminClient"),
        ("ops/kafka_floor.py", "hop", "AdminClient"),
        ("ops/demo_job.py", "__init__", "Consumer"),
    } <= routed
