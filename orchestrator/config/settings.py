"""Keel's configuration: every knob is an environment variable named ``KEEL_<FIELD>``,
or ``<field>`` in ``[tool.keel]`` of the project's ``pyproject.toml`` (a flag, then the
environment, win over the file: orchestrator/config/project_config.py).

One pydantic-settings model, so a bad value is refused up front with the name of
the variable that carries it, instead of surfacing later as a broker error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Annotated

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as _SourceError

from orchestrator.config.project_config import ProjectSettingsSource, find_project
from orchestrator.config.redaction import clip, mask_servers, redact
from orchestrator.config.redis_url import MAX_PORT, check_redis_url
from orchestrator.domain.model.errors import ConfigError

#: Every topic of a deployment, each ``<prefix>.<kind>``; ``keel topics create`` makes them
#: all with one replication policy (docs/operations.md).
TOPIC_KINDS = ("commands", "events", "snapshots", "activity-tasks", "dlq", "sagas")

#: Settings whose values are secrets: an error about one never shows the value.
SECRET_FIELDS = frozenset({"task_token_secret", "seal_key", "kafka_sasl_password"})
#: The shortest task-token key accepted (docs/configuration.md).
MIN_SECRET_CHARS = 32
#: The levels ``KEEL_LOG_LEVEL`` may name (any case).
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class KafkaSecurityProtocol(StrEnum):
    """``security.protocol`` of Keel's Kafka clients (``KEEL_KAFKA_SECURITY_PROTOCOL``)."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def sasl(self) -> bool:
        return self in (KafkaSecurityProtocol.SASL_PLAINTEXT, KafkaSecurityProtocol.SASL_SSL)

    @property
    def tls(self) -> bool:
        return self in (KafkaSecurityProtocol.SSL, KafkaSecurityProtocol.SASL_SSL)


class SaslMechanism(StrEnum):
    """``sasl.mechanism`` of Keel's Kafka clients (``KEEL_KAFKA_SASL_MECHANISM``)."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


#: The Kafka client tuning settings (``fetch_wait_max_ms``, ``linger_ms``,
#: ``batched_linger_ms``; docs/configuration.md) and its debug contexts (``kafka_debug``):
#: a child process inherits them.
CLIENT_TUNING_VARIABLES = frozenset(
    {"KEEL_FETCH_WAIT_MAX_MS", "KEEL_LINGER_MS", "KEEL_BATCHED_LINGER_MS", "KEEL_KAFKA_DEBUG"}
)


class Settings(BaseSettings):
    """Configuration read from ``KEEL_*`` environment variables (see docs/configuration.md)."""

    model_config = SettingsConfigDict(
        env_prefix="KEEL_",
        extra="ignore",
        frozen=True,
        pyproject_toml_table_header=("tool", "keel"),
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init), then ``KEEL_*``, then ``[tool.keel]`` of the project, then defaults."""
        project = ProjectSettingsSource(settings_cls, find_project(), SECRET_FIELDS)
        return init_settings, env_settings, project

    app: str = Field(
        default="",
        pattern=r"^([A-Za-z_][\w.]*:[A-Za-z_][\w.]*)?$",
        description="The application MODULE:ATTR of every command that needs definitions "
        "(--app overrides); unset: [tool.keel] app, else the bundled example app in Keel's "
        'own checkout only (docs/configuration.md, "The project\'s pyproject.toml").',
    )

    bootstrap_servers: str = Field(
        default="",
        description="Kafka bootstrap servers; empty means the local stack under KEEL_HOME.",
    )
    kafka_security_protocol: KafkaSecurityProtocol = Field(
        default=KafkaSecurityProtocol.PLAINTEXT,
        description="How Keel's Kafka clients talk to the brokers: PLAINTEXT, SSL, "
        "SASL_PLAINTEXT or SASL_SSL (docs/operations.md, the trust model).",
    )
    kafka_sasl_mechanism: SaslMechanism | None = Field(
        default=None,
        description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; required by the SASL_* protocols.",
    )
    kafka_sasl_username: str | None = Field(
        default=None, description="The SASL principal of Keel's processes (e.g. keel)."
    )
    kafka_sasl_password: SecretStr | None = Field(
        default=None, description="The SASL principal's password. Never logged."
    )
    kafka_ssl_ca_location: str | None = Field(
        default=None,
        description="PEM file of the CA(s) the brokers' certificates are checked against "
        "(SSL, SASL_SSL); unset: the system's.",
    )
    redis_url: str = Field(
        default="", description="Redis URL; empty means the local stack's Redis."
    )
    topic_prefix: str = Field(
        default="keel",
        pattern=r"^[A-Za-z0-9._-]{1,200}$",
        description="Topics are named <prefix>.commands, <prefix>.events, ...",
    )
    home: Path = Field(default=Path(".keel"), description="State, logs and PIDs of local servers.")
    kafka_libs: Path | None = Field(
        default=None, description="Cache of the Kafka jars; default <KEEL_HOME>/kafka-libs."
    )
    partitions: int = Field(default=12, ge=1, le=10_000, description="Partitions per topic.")
    schema_dirs: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(),
        description="Folders of an application's published payload schemas (`keel schemas "
        "export --out DIR`), separated by the OS path separator (':' here): the codec types "
        "that application's values with them instead of the bundled examples' "
        "(docs/event-log.md).",
    )
    replication_factor: int = Field(default=1, ge=1, le=16, description="Replicas per partition.")
    kafka_port: int = Field(
        default=19092, ge=1024, le=65000, description="First port of the local Kafka broker(s)."
    )
    redis_port: int = Field(default=16379, ge=1024, le=65535, description="Local Redis port.")
    kafka_heap: str = Field(
        default="1g", pattern=r"^[0-9]+[mMgG]$", description="JVM heap of each local broker."
    )
    kafka_broker_properties: str = Field(
        default="",
        description=(
            "Extra server.properties of the local broker(s), 'key=value' entries separated "
            "by ';' (e.g. for a measurement: docs/performance.md). Topology keys are refused."
        ),
    )
    instance_id: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9._-]{0,100}$",
        description=(
            "Stable identity of this process (e.g. a pod name): a restart with the same id "
            "takes over its partitions at once and fences its predecessor's transaction."
        ),
    )
    retry_budget_per_s: float = Field(
        default=20.0,
        gt=0,
        description=(
            "Global retry dispatches per second per activity type; each orchestrator "
            "takes its share of the partitions it owns."
        ),
    )
    retry_budget_burst: int = Field(
        default=20, ge=1, description="Retries per activity type that may go out at once."
    )
    admin_timeout_s: float = Field(
        default=15.0, gt=0, le=600, description="Bound on any admin call to Kafka."
    )
    gc_thresholds: Annotated[
        tuple[
            Annotated[int, Field(ge=0)], Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]
        ],
        NoDecode,
    ] = Field(
        default=(100_000, 50, 1_000),
        description=(
            "Python's cyclic collector thresholds in Keel's services (gc.set_threshold); "
            "Python's own are (700, 10, 10). JSON, e.g. [700, 10, 10]."
        ),
    )
    task_token_secret: SecretStr | None = Field(
        default=None,
        description=(
            "Key (32+ characters) from which human-task tokens are derived; every process "
            "of one deployment needs the same. Unset: <KEEL_HOME>/task-token.secret "
            "(created on first use; local development). Never logged."
        ),
    )
    task_token_secret_file: Path | None = Field(
        default=None,
        description="A file holding the task-token key instead (e.g. a mounted secret).",
    )
    seal_key: SecretStr | None = Field(
        default=None,
        description=(
            "Keys that seal sensitive fields: 'kid:base64key' entries separated by commas, "
            "the first seals, all open (docs/secrets.md). Unset: <KEEL_HOME>/seal.keys "
            "(created on first use; local development). Never logged."
        ),
    )
    seal_key_file: Path | None = Field(
        default=None,
        description="A file holding the sealing keys instead, one 'kid:base64key' a line.",
    )
    actors_file: Path | None = Field(
        default=None,
        description=(
            "JSON or TOML file of the actors who may decide human tasks: "
            '{"alice": {"token_sha256": "<hex>", "roles": ["finance-approver"]}}.'
        ),
    )
    log_level: str = Field(
        default="info",
        description="Level of the services' JSON logs: debug, info, warning, error or "
        "critical (any case).",
    )
    trace_file: Path | None = Field(
        default=None,
        description="Write every finished span as a JSON line to this file (tests, local "
        "debugging); unset or empty: no file.",
    )
    projector_row_hold_s: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="How long the projector of keel orchestrator (child or thread) may hold "
        "a run's events that change nothing a client waits on (an activity completed, the "
        "next scheduled, a state entered) to write them with the run's next change; a "
        "run's status is never held. 0: every transaction written as it comes.",
    )
    status_interval_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="How often each orchestrator and worker rewrites its status file "
        "<KEEL_HOME>/status/<process>-<instance>.json.",
    )
    worker_threads: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Threads of a worker that run synchronous activity handlers side by "
        "side: at most this many at once (async handlers run on its event loop).",
    )
    fetch_wait_max_ms: int = Field(
        default=100,
        ge=0,
        le=300_000,
        description="How long a consumer's fetch may wait at the broker for data "
        "(fetch.wait.max.ms); it bounds idle fetches, not latency. For measuring.",
    )
    linger_ms: float = Field(
        default=1.0,
        ge=0,
        le=900_000,
        description="Producers' batching delay (linger.ms): each hop of a workflow pays it.",
    )
    batched_linger_ms: float = Field(
        default=50.0,
        ge=0,
        le=900_000,
        description="The linger of producers whose batches end in a commit or a flush (the "
        "orchestrator's transactions, the worker's reports, start_many).",
    )
    kafka_debug: str = Field(
        default="",
        pattern=r"^[a-z,]{0,200}$",
        description="librdkafka debug contexts for every Kafka client of a service, e.g. "
        "cgrp,eos,broker (coordinator lookups, transactions, connections); librdkafka "
        "writes their lines to the process's stderr. Empty: none (docs/operations.md).",
    )
    testcontainers: bool = Field(
        default=False,
        description="Tests: the keel_stack fixture takes Kafka and Redis from testcontainers "
        "where a Docker engine answers, instead of `keel infra` (docs/testing.md).",
    )
    adapter_hooks: str = Field(
        default="",
        pattern=r"^([A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*)?$",
        description="MODULE:ATTR of adapter hooks a service wraps its parts in when it "
        "builds them (an AdapterHooks, or a function returning one): tracing, or the "
        "faults `keel evaluate` and the fault tests inject (ops/faults). Empty: none.",
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of a service's Prometheus /metrics endpoint (docs/metrics.md); "
        "0: none. The --metrics-port option of each service overrides it.",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        pattern=r"^[A-Za-z0-9.:_-]{1,253}$",
        description="Address the /metrics endpoint binds (0.0.0.0: every interface).",
    )
    connector_read_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Seconds the connector waits for a request's headers (from the "
        "connection's open or its previous answer), then as long for its body (docs/connector.md).",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level_is_known(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        name = value.strip().lower() or "info"  # empty: the default
        if name not in LOG_LEVELS:
            raise PydanticCustomError(
                "log_level", "expected one of {levels}", {"levels": ", ".join(LOG_LEVELS)}
            )
        return name

    @field_validator("schema_dirs", mode="before")
    @classmethod
    def _schema_dirs_split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(Path(part) for part in value.split(os.pathsep) if part.strip())
        return value

    @field_validator("gc_thresholds", mode="before")
    @classmethod
    def _gc_thresholds_json(cls, value: object) -> object:
        # parsed here, not by pydantic-settings, whose error is a traceback naming no value
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError("must be a JSON array of three integers, e.g. [700, 10, 10]") from None

    @field_validator("trace_file", mode="before")
    @classmethod
    def _empty_trace_file_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("task_token_secret")
    @classmethod
    def _secret_is_long(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_SECRET_CHARS:
            raise ValueError(f"must be at least {MIN_SECRET_CHARS} characters")
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers_are_host_port(cls, value: str) -> str:
        for server in filter(None, (s.strip() for s in value.split(","))):
            if "@" in server:  # Kafka takes no credentials here; librdkafka would log them
                raise ValueError(
                    f"{mask_servers(server)!r} holds credentials, which Kafka does not take in "
                    "a bootstrap server: give host:port, and KEEL_KAFKA_SASL_USERNAME and "
                    "KEEL_KAFKA_SASL_PASSWORD (docs/operations.md)"
                )
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"{clip(server)!r} is not host:port")
            if not 1 <= int(port) <= MAX_PORT:
                raise ValueError(f"{clip(server)!r}: the port must be 1 to {MAX_PORT}")
        return value

    @field_validator("kafka_broker_properties")
    @classmethod
    def _properties_are_key_value(cls, value: str) -> str:
        broker_properties(value)
        return value

    @field_validator("kafka_security_protocol", "kafka_sasl_mechanism", mode="before")
    @classmethod
    def _protocol_names_any_case(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str) and not value.strip():  # empty: the default
            protocol = info.field_name == "kafka_security_protocol"
            return KafkaSecurityProtocol.PLAINTEXT if protocol else None
        return value.strip().upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _kafka_security_is_whole(self) -> Settings:
        """Refuse a client security setup librdkafka would reject or silently ignore."""
        protocol = self.kafka_security_protocol
        mechanism = self.kafka_sasl_mechanism
        password = self.kafka_sasl_password
        sasl = {  # name as shown (never the password's value) -> whether it is set
            f"KEEL_KAFKA_SASL_MECHANISM{f'={mechanism.value}' if mechanism else ''}": mechanism,
            "KEEL_KAFKA_SASL_USERNAME": self.kafka_sasl_username,
            "KEEL_KAFKA_SASL_PASSWORD": password.get_secret_value() if password else None,
        }
        problems = []
        if protocol.sasl:
            missing = [name for name, value in sasl.items() if not value]
            if missing:
                problems.append(
                    f"KEEL_KAFKA_SECURITY_PROTOCOL={protocol.value}: also needs {_and(missing)}"
                )
        else:
            present = [name for name, value in sasl.items() if value]
            if present:
                problems.append(
                    f"{', '.join(present)}: only with KEEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL "
                    f"or SASL_PLAINTEXT (it is {protocol.value})"
                )
        if self.kafka_ssl_ca_location and not protocol.tls:
            problems.append(
                "KEEL_KAFKA_SSL_CA_LOCATION: only with KEEL_KAFKA_SECURITY_PROTOCOL=SSL "
                f"or SASL_SSL (it is {protocol.value})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @field_validator("redis_url")
    @classmethod
    def _redis_url_parses(cls, value: str) -> str:
        if value:
            check_redis_url(value)
        return value

    @cached_property
    def kafka_servers(self) -> str:
        """The bootstrap servers to use: the configured ones, else every broker the local
        stack recorded in ``<KEEL_HOME>/stack.json`` (all three of a cluster), else the
        local stack's first port."""
        if self.bootstrap_servers:
            return self.bootstrap_servers
        try:
            recorded = json.loads((self.home / "stack.json").read_text())["bootstrap_servers"]
        except (OSError, ValueError, KeyError, TypeError):
            recorded = None
        if isinstance(recorded, str) and recorded:
            return recorded
        return f"127.0.0.1:{self.kafka_port}"

    @cached_property
    def redis(self) -> str:
        """The Redis URL to use: the configured one or the local stack's."""
        return self.redis_url or f"redis://127.0.0.1:{self.redis_port}/0"

    def kafka_security_environment(self) -> dict[str, str]:
        """The ``KEEL_KAFKA_*`` security variables that reproduce these settings' client
        security (none for the default PLAINTEXT)."""
        values = {
            "KEEL_KAFKA_SECURITY_PROTOCOL": (
                self.kafka_security_protocol.value
                if self.kafka_security_protocol is not KafkaSecurityProtocol.PLAINTEXT
                else None
            ),
            "KEEL_KAFKA_SASL_MECHANISM": (
                self.kafka_sasl_mechanism.value if self.kafka_sasl_mechanism else None
            ),
            "KEEL_KAFKA_SASL_USERNAME": self.kafka_sasl_username,
            "KEEL_KAFKA_SASL_PASSWORD": (
                self.kafka_sasl_password.get_secret_value() if self.kafka_sasl_password else None
            ),
            "KEEL_KAFKA_SSL_CA_LOCATION": self.kafka_ssl_ca_location,
        }
        return {name: value for name, value in values.items() if value}

    def named_secrets(self, variables: Iterable[str]) -> dict[str, str]:
        """The values of the variables an application names for its own secrets (a webhook
        source's ``secret_env``, docs/connector.md), read when a service is built: its names
        are the application's, not Keel's, so no field of these settings can hold them. A
        variable not set is absent; the caller says what it is missing."""
        return {name: os.environ[name] for name in variables if name in os.environ}

    def child_environment(self, **extra: str) -> dict[str, str]:
        """The environment for a Keel process started on these servers and topics: this
        process's, minus its ``KEEL_*`` (they could point elsewhere) but for the Kafka
        client tuning ones (``CLIENT_TUNING_VARIABLES``, so a bench measures them in every
        process it starts), plus the servers, client security, prefix and partitions of
        these settings, then ``extra``."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("KEEL_") or k in CLIENT_TUNING_VARIABLES
        }
        env.update(
            KEEL_BOOTSTRAP_SERVERS=self.kafka_servers,
            KEEL_REDIS_URL=self.redis,
            KEEL_TOPIC_PREFIX=self.topic_prefix,
            KEEL_PARTITIONS=str(self.partitions),
        )
        env.update(self.kafka_security_environment())
        if self.schema_dirs:  # the same values typed the same way in every process
            env["KEEL_SCHEMA_DIRS"] = os.pathsep.join(str(d.resolve()) for d in self.schema_dirs)
        env.update(extra)
        return env

    def topic(self, kind: str) -> str:
        """Full topic name for one of ``TOPIC_KINDS``."""
        if kind not in TOPIC_KINDS:
            raise KeyError(f"unknown topic kind {kind!r}; expected one of {TOPIC_KINDS}")
        return f"{self.topic_prefix}.{kind}"


def _and(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


_PROPERTY_KEY = re.compile(r"^[a-z][a-z0-9._-]{0,200}$")


def broker_properties(text: str) -> dict[str, str]:
    """``key=value;key=value`` as a dict; a malformed entry is a ``ValueError`` naming it."""
    out: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        key, sep, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _PROPERTY_KEY.match(key):
            raise ValueError(f"{entry!r} is not key=value with a lower-case property key")
        if any(c in value for c in "\n\r\\"):
            raise ValueError(f"the value of {key} may not hold a line break or a backslash")
        out[key] = value
    return out


def private_dir(path: Path) -> Path:
    """``path`` as a directory, each level Keel creates for it made 0700 (only its owner
    may enter): ``KEEL_HOME`` holds key files, events, logs and status. A directory that
    exists keeps its mode (a ``KEEL_HOME`` the user made is the user's choice)."""
    missing = []
    at = Path(path)
    while not at.is_dir() and at != at.parent:
        missing.append(at)
        at = at.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:  # a concurrent creator: its mode stands
            continue
        d.chmod(0o700)  # whatever the umask
    return path


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, turning validation errors into one clear line."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except _SourceError as exc:  # a value its source could not even read
        raise ConfigError(redact(f"invalid setting: {exc}")) from None
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if not err["loc"]:  # a rule across settings: its message names the variables
                problems.append(err["msg"].removeprefix("Value error, "))
                continue
            field, *within = (str(p) for p in err["loc"])
            value = err.get("input")
            secret = field.lower() in SECRET_FIELDS
            if field == "bootstrap_servers" and isinstance(value, str):
                value = mask_servers(value)
            shown = (
                f" (item {'.'.join(within)})"  # of a JSON value: the item, not the whole
                if within
                else ""
                if isinstance(value, dict) or secret
                else f"={clip(str(value))}"
            )
            problems.append(f"{_source_of(field, overrides, shown)}: {err['msg']}")
        raise ConfigError(redact("invalid setting " + "; ".join(problems))) from None


def _source_of(field: str, overrides: dict[str, object], shown: str) -> str:
    """Where a bad value came from: its variable, unless only the project's file gives it."""
    variable = f"KEEL_{field.upper()}"
    if field in overrides or variable in os.environ:
        return variable + shown
    project = find_project()
    return project.where(field + shown) if field in project.table else variable + shown
