"""docker-compose.yml works for a Docker user: listeners, volumes, services and settings.

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

from orchestrator.config.settings import Settings

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yml"
KEEL_SERVICES = ("orchestrator", "worker")


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


def test_compose_parses_and_uses_only_known_settings(doc):
    assert {"kafka", "redis"} <= set(doc["services"])
    kafka_env = doc["services"]["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    used = _keel_vars(doc)
    known = {f"KEEL_{name.upper()}" for name in Settings.model_fields}
    assert used, "compose passes no KEEL_* settings to the services"
    assert used <= known, f"unknown settings in compose: {sorted(used - known)}"


def test_kafka_has_an_internal_and_a_host_listener(doc):
    kafka = doc["services"]["kafka"]
    env = kafka["environment"]
    listeners = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) == {"INTERNAL", "HOST", "CONTROLLER"}
    assert set(protocols) == set(listeners)
    # Containers reach kafka:9092; host clients reach localhost:19092.
    assert advertised == {"INTERNAL": "kafka:9092", "HOST": "localhost:19092"}
    assert listeners["INTERNAL"].endswith(":9092")
    assert listeners["HOST"].endswith(":19092")
    assert "127.0.0.1:19092:19092" in kafka["ports"], "the host listener's port is published"
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    controller_port = listeners["CONTROLLER"].rsplit(":", 1)[1]
    assert (
        env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:{controller_port}"
    )
    # A KRaft cluster id is 16 bytes in URL-safe base64 without padding.
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{21}", env["CLUSTER_ID"])
    assert "kafka:9092" in " ".join(kafka["healthcheck"]["test"])


def test_kafka_and_redis_data_live_in_named_volumes(doc):
    volumes = set(doc["volumes"])
    kafka, redis = doc["services"]["kafka"], doc["services"]["redis"]
    log_dir = kafka["environment"]["KAFKA_LOG_DIRS"]
    assert f"kafka-data:{log_dir}" in kafka["volumes"]
    assert "redis-data:/data" in redis["volumes"]
    assert {"kafka-data", "redis-data"} <= volumes
    assert "--appendonly" in redis["command"], "Redis persists to its volume"


def test_keel_services_run_from_the_image_against_the_compose_network(doc):
    services = doc["services"]
    for name in KEEL_SERVICES:
        svc = services[name]
        assert svc["build"] == "."
        assert svc["command"] == [name]
        env = svc["environment"]
        assert env["KEEL_BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert env["KEEL_REDIS_URL"] == "redis://redis:6379/0"
        deps = svc["depends_on"]
        assert deps["kafka"] == {"condition": "service_healthy"}
        assert deps["redis"] == {"condition": "service_healthy"}
        assert deps["topics"] == {"condition": "service_completed_successfully"}
    assert services["topics"]["command"] == ["topics", "create"]
    for name in ("kafka", "redis"):
        assert "healthcheck" in services[name], f"{name} has no healthcheck to wait on"


def test_the_connector_serves_on_the_host_loopback_with_the_shared_task_key(doc):
    services = doc["services"]
    conn = services["connector"]
    assert conn["build"] == "."
    assert conn["command"][0] == "connector"
    assert conn["command"][conn["command"].index("--port") + 1] == "8700"
    assert "0.0.0.0" in conn["command"], "inside its container it must listen beyond loopback"
    assert conn["ports"] == ["127.0.0.1:8700:8700"], "published on the host's loopback only"
    assert conn["depends_on"]["topics"] == {"condition": "service_completed_successfully"}
    # one task-token key for every Keel service, so the connector's tokens match history
    keys = {
        services[s]["environment"]["KEEL_TASK_TOKEN_SECRET"] for s in (*KEEL_SERVICES, "connector")
    }
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
