"""docker-compose.yml works for a Docker user: the topology (three brokers, Redis with
Sentinel, two orchestrators, two workers, the connector), listeners, volumes and settings.

There may be no Docker engine where the tests run, so the file is checked structurally
with yaml; ``docker compose config`` also validates it where the compose plugin answers.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config.redis_url import check_redis_url, parse_sentinel_url
from orchestrator.config.settings import Settings

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _keel_vars(node: object) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.startswith("KEEL_"):
                found.add(key)
            found |= _keel_vars(value)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, str) and item.startswith("KEEL_") and "=" in item:
                found.add(item.split("=", 1)[0])
            found |= _keel_vars(item)
    return found


def _listeners(value: str) -> dict[str, str]:
    """``NAME://host:port,...`` as ``{NAME: "host:port"}``."""
    return dict(item.split("://", 1) for item in value.split(","))


BROKERS = ("kafka-1", "kafka-2", "kafka-3")
SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
REDIS_DATA = ("redis-master", "redis-replica-1", "redis-replica-2")
KEEL_SERVICES = ("orchestrator-1", "orchestrator-2", "worker-1", "worker-2", "connector")
#: The master's name the sentinels monitor and Keel's URL asks them for.
MASTER_NAME = "keel"


def _of_role(doc: dict[str, Any], command: str) -> list[str]:
    """The Keel services whose command is ``command`` (``orchestrator``, ``worker``...)."""
    return sorted(
        name
        for name, svc in doc["services"].items()
        if svc.get("build") == "." and svc["command"][0] == command
    )


def test_compose_parses_and_uses_only_known_settings(doc):
    assert {*BROKERS, *REDIS_DATA, *SENTINELS} <= set(doc["services"])
    for broker in BROKERS:
        kafka_env = doc["services"][broker]["environment"]
        assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    used = _keel_vars(doc)
    known = {f"KEEL_{name.upper()}" for name in Settings.model_fields}
    assert used, "compose passes no KEEL_* settings to the services"
    assert used <= known, f"unknown settings in compose: {sorted(used - known)}"


def test_the_topology_is_three_brokers_a_sentinel_group_and_two_of_each_keel_role(doc):
    assert _of_role(doc, "orchestrator") == ["orchestrator-1", "orchestrator-2"]
    assert _of_role(doc, "worker") == ["worker-1", "worker-2"]
    assert _of_role(doc, "connector") == ["connector"]
    assert _of_role(doc, "topics") == ["topics"]
    images = {name: svc.get("image", "") for name, svc in doc["services"].items()}
    assert sorted(n for n, i in images.items() if i.startswith("apache/kafka")) == list(BROKERS)
    redis = sorted(n for n, i in images.items() if i.startswith("redis"))
    assert redis == sorted((*REDIS_DATA, *SENTINELS))
    # two orchestrators share the partitions, each with an identity of its own
    ids = [
        doc["services"][o]["environment"]["KEEL_INSTANCE_ID"] for o in _of_role(doc, "orchestrator")
    ]
    assert sorted(ids) == ["orchestrator-1", "orchestrator-2"]


def test_kafka_brokers_form_one_kraft_quorum_each_with_an_internal_and_a_host_listener(doc):
    host_ports = set()
    for node_id, broker in enumerate(BROKERS, start=1):
        kafka = doc["services"][broker]
        env = kafka["environment"]
        assert env["KAFKA_NODE_ID"] == node_id
        assert kafka["hostname"] == broker
        listeners = _listeners(env["KAFKA_LISTENERS"])
        advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
        protocols = dict(
            p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        assert set(listeners) == {"INTERNAL", "HOST", "CONTROLLER"}
        assert set(protocols) == set(listeners)
        # Containers reach kafka-N:9092; host clients reach the published localhost port.
        host_port = advertised["HOST"].rsplit(":", 1)[1]
        assert advertised == {"INTERNAL": f"{broker}:9092", "HOST": f"localhost:{host_port}"}
        assert listeners["INTERNAL"].endswith(":9092")
        assert listeners["HOST"].endswith(":19092")
        assert kafka["ports"] == [f"127.0.0.1:{host_port}:19092"], "the HOST port is published"
        host_ports.add(host_port)
        assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
        controller_port = listeners["CONTROLLER"].rsplit(":", 1)[1]
        # every broker is a voter of the one quorum, this one among them
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",") == [
            f"{n}@{b}:{controller_port}" for n, b in enumerate(BROKERS, start=1)
        ]
        # A KRaft cluster id is 16 bytes in URL-safe base64 without padding.
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{21}", env["CLUSTER_ID"])
        # replicated internal topics: a broker's loss loses no offset or transaction state
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 3
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 3
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 2
        assert "localhost:9092" in " ".join(kafka["healthcheck"]["test"])
    assert len(host_ports) == len(BROKERS)
    assert {doc["services"][b]["environment"]["CLUSTER_ID"] for b in BROKERS} == {
        doc["services"][BROKERS[0]]["environment"]["CLUSTER_ID"]
    }


def test_redis_is_a_master_two_replicas_and_three_sentinels_with_a_quorum(doc):
    services = doc["services"]
    assert services["redis-master"]["command"] == ["redis-server", "--appendonly", "yes"]
    for replica in REDIS_DATA[1:]:
        command = services[replica]["command"]
        assert command[command.index("--replicaof") + 1 :][:2] == ["redis-master", "6379"]
    for sentinel in SENTINELS:
        script = " ".join(services[sentinel]["command"])
        assert f"sentinel monitor {MASTER_NAME} redis-master 6379 2" in script
        assert "exec redis-sentinel" in script
        assert "sentinel resolve-hostnames yes" in script
        health = " ".join(services[sentinel]["healthcheck"]["test"])
        assert f"get-master-addr-by-name {MASTER_NAME}" in health


def test_kafka_and_redis_data_live_in_named_volumes(doc):
    volumes = set(doc["volumes"])
    for broker in BROKERS:
        kafka = doc["services"][broker]
        log_dir = kafka["environment"]["KAFKA_LOG_DIRS"]
        assert kafka["volumes"] == [f"{broker}-data:{log_dir}"]
    for node in REDIS_DATA:
        redis = doc["services"][node]
        assert redis["volumes"] == [f"{node}-data:/data"]
        assert "--appendonly" in redis["command"], "Redis persists to its volume"
    assert volumes == {f"{name}-data" for name in (*BROKERS, *REDIS_DATA)}


def test_keel_services_reach_every_broker_and_redis_through_the_sentinels(doc):
    services = doc["services"]
    for name in KEEL_SERVICES:
        svc = services[name]
        assert svc["build"] == "."
        env = svc["environment"]
        assert env["KEEL_BOOTSTRAP_SERVERS"].split(",") == [f"{b}:9092" for b in BROKERS]
        assert env["KEEL_REPLICATION_FACTOR"] == "3"
        url = env["KEEL_REDIS_URL"]
        assert url.startswith("redis+sentinel://")
        check_redis_url(url)
        parsed = parse_sentinel_url(url)
        assert parsed.sentinels == tuple((s, 26379) for s in SENTINELS)
        assert (parsed.service, parsed.db) == (MASTER_NAME, 0)
        deps = svc["depends_on"]
        for upstream in (*BROKERS, *SENTINELS):
            assert deps[upstream] == {"condition": "service_healthy"}, (name, upstream)
        assert deps["topics"] == {"condition": "service_completed_successfully"}
        assert svc["restart"] == "unless-stopped"
    for name in _of_role(doc, "orchestrator") + _of_role(doc, "worker"):
        assert services[name]["command"] == [name.rsplit("-", 1)[0]]
    assert services["topics"]["command"] == ["topics", "create"]
    assert (
        services["topics"]["environment"]["KEEL_BOOTSTRAP_SERVERS"]
        == (services["worker-1"]["environment"]["KEEL_BOOTSTRAP_SERVERS"])
    )
    for name in (*BROKERS, *REDIS_DATA, *SENTINELS):
        assert "healthcheck" in services[name], f"{name} has no healthcheck to wait on"


def test_the_connector_serves_on_the_host_loopback_with_the_shared_task_key(doc):
    services = doc["services"]
    conn = services["connector"]
    assert conn["command"][0] == "connector"
    assert conn["command"][conn["command"].index("--port") + 1] == "8700"
    assert "0.0.0.0" in conn["command"], "inside its container it must listen beyond loopback"
    assert conn["ports"] == ["127.0.0.1:8700:8700"], "published on the host's loopback only"
    # one task-token key for every Keel service, so the connector's tokens match history
    keys = {services[s]["environment"]["KEEL_TASK_TOKEN_SECRET"] for s in KEEL_SERVICES}
    assert len(keys) == 1 and keys.pop().startswith("${KEEL_TASK_TOKEN_SECRET:-")


def test_the_image_installs_every_package_the_wheel_ships():
    dockerfile = (REPO / "Dockerfile").read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    copied = set(re.findall(r"^COPY (\S+)/ ", dockerfile, re.MULTILINE))
    assert set(packages) | {"avro"} <= copied
    assert re.search(r"^COPY pyproject.toml README.md ", dockerfile, re.MULTILINE)
    assert re.search(r"pip install --no-cache-dir \.", dockerfile)
    assert 'ENTRYPOINT ["keel"]' in dockerfile


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, timeout=20, check=False
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _compose_plugin(), reason="no docker compose plugin here")
def test_docker_compose_config_accepts_the_file():
    done = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
